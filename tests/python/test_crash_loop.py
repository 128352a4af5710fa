"""Kill -9 crash loop (reliability plan B.a).

Each cycle starts ``crash_child.py`` in a fresh interpreter on the same store; the child opens
the store (recovering the previous crash), sends from 1 or 2 producer threads (``send`` and
``send_batch`` to 8 queues of 2 topics, async or sync flush) and prints one line per
acknowledged message. The parent SIGKILLs it at a random moment:

- usually 5-50 ms after open returned (under full send load),
- with probability 0.20 during ``open`` itself (recovery of the previous crash),
- with probability 0.10 right after an acknowledgement that moved to a new commit-log file
  (the roll path: new file, preallocation of the next one).

After each kill the parent copies the crashed store, opens the copy (recovery), and checks:
every acknowledged message present exactly once at its acknowledged queue offset and
commit-log offset; every queue contiguous from 0 with no duplicate (cycle, producer, seq);
queue order = commit-log order = send order per producer; every body's digest intact; no read
raises; the open reports an abnormal recovery. The original stays crashed for the next child, so
kills land inside recovery and damage accumulates. A new store starts every ``EPOCH`` cycles to
bound the verification cost.

Scheduled delivery and retries: about 5 % of the child's sends are timers (``deliver_at`` within
200 ms, topic ``crashT``) or delay level 1 (1 s, ``crashD``), and its consumer fails (sends
back, level 1) the first delivery of every twentieth message. Each check of a copy asserts that
no timer is in ``crashT`` and no delayed message in ``crashD`` twice (both are delivered exactly
once across crashes, docs/design-timers.md), that nothing scheduled was
delivered early (a timer not before its time, a delay not within 1 s of its birth) and that
every scheduled and retried body is intact. At the end of each epoch the store is opened once more and left to
deliver: every acknowledged timer and delayed message, and every acknowledged send-back (in
``%RETRY%crash-group``), must arrive (none lost); a retry may arrive twice (a consumer killed
after its send-back and before its commit sends the message back again), which is counted, not
failed.

Transactions: a thread of the child sends transactions of 1 or 2 messages to ``crashX`` and
commits most, rolls back some and leaves some open. Each check of a copy first lists the pending
transactions (which makes the copies a crash left undone), then asserts: no transactional message
visible twice; none visible whose transaction was not being committed (open, rolled back, or
whose half the child never saw acknowledged); every acknowledged commit visible whole and its
transaction no longer pending; an acknowledged rollback no longer pending.

Kill-point mode (``test_kill_point_loop``): instead of a timed SIGKILL, the child aborts at the
n-th hit of a named kill point of the Python layer (``mqlite._files.KILL_POINTS``: inside the
consumer-offset file replace, temp written and before the rename), point and n drawn from a
printed seed (``MQLITE_PY_KILL_SEED``; ``MQLITE_PY_KILL_REPLAY=<point>:<n>`` and
``MQLITE_PY_KILL_MODE`` replay one cycle). The same oracle applies, plus: the replaced file holds
its old or its new content, whole. The Rust core's kill points are exercised by
tests/kill_points.rs.

CI: 300 cycles. Soak (``MQLITE_SOAK=1`` or ``-m soak``): 1,000 cycles. The figures are printed
and written as JSON to ``$MQLITE_RELIABILITY_DIR/crash_loop[_soak].json`` when that is set.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import mqlite
from crash_child import (
    CONFIG,
    DELAY_TOPIC,
    GROUP,
    QUEUES,
    TIMER_TOPIC,
    TOPICS,
    TXN_GROUP,
    TXN_TOPIC,
    Unasked,
    parse_body,
)
from mqlite import MessageQueue
from mqlite._files import KILL_POINTS
from scheduled_checks import delivered, wait_delivered

pytestmark = pytest.mark.reliability

HERE = Path(__file__).resolve().parent
CHILD = HERE / "crash_child.py"
EPOCH = 12  # cycles per store
FILE_SIZE = CONFIG["commit_log_file_size"]
RETRY_TOPIC = f"%RETRY%{GROUP}"
DELAY_MS = 1_000  # delay level 1 of CONFIG's table
DRAIN_TIMEOUT_S = 30.0  # the end-of-epoch wait for what is scheduled, past its due time


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    pkg = str(Path(mqlite.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg, str(HERE), env.get("PYTHONPATH")) if p)
    return env


@dataclass
class Ack:
    topic: str
    queue: int
    queue_offset: int
    commit_log_offset: int
    cycle: int
    producer: int
    seq: int


class ChildRun:
    """One child process and a thread collecting its complete stdout lines."""

    def __init__(self, store: Path, mode: str, cycle: int, seed: int, producers: int,
                 extra_env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-u", str(CHILD), str(store), mode, str(cycle), str(seed), str(producers)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**_child_env(), **(extra_env or {})},
        )
        self.lines: list[str] = []
        self.opening = threading.Event()
        self.opened = threading.Event()
        self.roll = threading.Event()
        self.open_ms: float | None = None
        self.child_abnormal: bool | None = None
        self._last_file: int | None = None
        self.err = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        buf = b""
        while True:
            chunk = self.proc.stdout.read1(65536)
            if not chunk:
                break
            buf += chunk
            *complete, buf = buf.split(b"\n")
            for raw in complete:
                line = raw.decode()
                self.lines.append(line)
                if line == "O":
                    self.opening.set()
                elif line.startswith("R "):
                    _, ms, abnormal = line.split()
                    self.open_ms, self.child_abnormal = float(ms), abnormal == "1"
                    self.opened.set()
                elif line.startswith("A "):
                    file_no = int(line.split()[4]) // FILE_SIZE
                    if self._last_file is not None and file_no != self._last_file:
                        self.roll.set()
                    self._last_file = file_no
        # A partial last line (no "\n") was never an acknowledgement the parent received.

    def wait_for(self, event: threading.Event, timeout: float = 30.0) -> bool:
        """Wait for ``event``; False if the child exited or the time ran out first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if event.wait(0.01):
                return True
            if self.proc.poll() is not None:
                return event.is_set()
        return False

    def kill(self) -> int:
        self.proc.send_signal(signal.SIGKILL)
        return self.reap()

    def wait_exit(self, timeout: float) -> int | None:
        """The child's return code once it ended by itself; None (and the child SIGKILLed) if it
        was still running after ``timeout`` seconds."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        return self.reap()

    def reap(self) -> int:
        rc = self.proc.wait(timeout=30)
        self._reader.join(timeout=30)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.proc.stdout.close()
        self.err = self.proc.stderr.read().decode(errors="replace")
        self.proc.stderr.close()
        return rc

    def stderr(self) -> str:
        return self.err

    def scheduled(self) -> dict[tuple[str, int, int, int], int]:
        """Acknowledged scheduled messages: (topic, cycle, producer, seq) -> due ms (0: a
        delay level)."""
        out = {}
        for line in self.lines:
            if line.startswith("S "):
                _, topic, cyc, p, seq, due = line.split()
                out[(topic, int(cyc), int(p), int(seq))] = int(due)
        return out

    def backs(self) -> set[tuple[int, int, int]]:
        """Messages the child's consumer sent back, acknowledged."""
        return {(int(c), int(p), int(q)) for c, p, q in (line.split()[1:] for line in self.lines
                                                          if line.startswith("B "))}

    def acks(self) -> list[Ack]:
        out = []
        for line in self.lines:
            if line.startswith("A "):
                _, topic, q, qo, clo, cyc, p, seq = line.split()
                out.append(Ack(topic, int(q), int(qo), int(clo), int(cyc), int(p), int(seq)))
        return out


@dataclass
class Figures:
    cycles: int = 0
    epochs: int = 0
    sync_cycles: int = 0
    async_cycles: int = 0
    kills_during_open: int = 0
    kills_after_roll: int = 0
    acked_messages_received: int = 0
    acked_messages_checked: int = 0
    stored_messages_checked: int = 0
    unacked_messages_found: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    gaps: int = 0
    corrupt_records: int = 0
    opens_that_raised: int = 0
    not_abnormal_after_kill: int = 0
    bad_exit_codes: int = 0
    torn_tails: int = 0
    consumer_offsets_checked: int = 0
    offsets_past_data: int = 0
    torn_offset_files: int = 0
    scheduled_acked: int = 0
    sent_back_acked: int = 0
    scheduled_delivered_checked: int = 0
    timers_twice: int = 0
    early: int = 0
    scheduled_lost: int = 0
    retries_lost: int = 0
    delayed_twice: int = 0
    # The key index after recovery: stored messages looked up by unique id (a sample), and
    # those not found or found elsewhere.
    indexed_checked: int = 0
    index_misses: int = 0
    retry_redeliveries: int = 0
    txn_commits_checked: int = 0
    txn_lost: int = 0
    txn_visible_uncommitted: int = 0
    txn_decided_still_pending: int = 0
    recovery_ms: list[float] = field(default_factory=list)
    child_open_ms: list[float] = field(default_factory=list)
    records_scanned: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(text)

    def summary(self) -> dict[str, Any]:
        def pct(xs: list[float], q: float) -> float:
            if not xs:
                return 0.0
            s = sorted(xs)
            return round(s[min(len(s) - 1, int(q * len(s)))], 3)

        d = {k: v for k, v in self.__dict__.items() if not isinstance(v, list)}
        d["recovery_ms_p50"] = pct(self.recovery_ms, 0.50)
        d["recovery_ms_p99"] = pct(self.recovery_ms, 0.99)
        d["recovery_ms_max"] = round(max(self.recovery_ms, default=0.0), 3)
        d["child_open_ms_p50"] = pct(self.child_open_ms, 0.50)
        d["child_open_ms_p99"] = pct(self.child_open_ms, 0.99)
        d["records_scanned_p50"] = int(statistics.median(self.records_scanned)) if self.records_scanned else 0
        d["records_scanned_max"] = max(self.records_scanned, default=0)
        d["problems"] = self.problems
        return d


@dataclass
class TxnLog:
    """What the children said of their transactions in one store: the messages of each id
    acknowledged as halves, and the decisions begun (acknowledged or not)."""

    halves: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    owner: dict[tuple[int, int, int], str] = field(default_factory=dict)
    deciding: dict[str, bool] = field(default_factory=dict)  # id -> commit
    decided: dict[str, bool] = field(default_factory=dict)

    def add(self, lines: list[str]) -> None:
        for line in lines:
            f = line.split()
            if f[0] == "X" and len(f) == 5:
                ident = (int(f[2]), int(f[3]), int(f[4]))
                self.halves.setdefault(f[1], []).append(ident)
                self.owner[ident] = f[1]
            elif f[0] in ("D", "E") and len(f) == 3:
                (self.deciding if f[0] == "D" else self.decided)[f[1]] = f[2] == "c"

    def clear(self) -> None:
        for d in (self.halves, self.owner, self.deciding, self.decided):
            d.clear()

    def check(self, store: mqlite.Store, fig: Figures) -> None:
        producer = mqlite.TransactionProducer(store, TXN_GROUP, Unasked(), check_interval=None)
        try:
            # Makes the copies a crash left undone, as any transaction call does.
            pending = {p.id for p in producer.pending()}
        finally:
            producer.close()
        seen: dict[tuple[int, int, int], int] = {}
        for q in range(2):
            mq = MessageQueue(TXN_TOPIC, q)
            try:
                low, high = store.offsets(mq)
            except mqlite.TopicNotFoundError:
                continue
            offset = low
            while offset < high:
                res = store.read_result(mq, offset, 64)
                if not res.messages:
                    break
                for m in res.messages:
                    try:
                        ident = parse_body(m.body)
                    except ValueError as exc:
                        fig.corrupt_records += 1
                        fig.problem(f"{TXN_TOPIC}/{q}@{m.queue_offset}: {exc}")
                        continue
                    seen[ident] = seen.get(ident, 0) + 1
                offset = res.next_offset
        for ident, n in seen.items():
            tid = self.owner.get(ident)
            if n > 1:
                fig.duplicated += 1
                fig.problem(f"transactional message {ident} of {tid} visible {n} times")
            if tid is None or not self.deciding.get(tid, False) or tid in pending:
                fig.txn_visible_uncommitted += 1
                fig.problem(f"transactional message {ident} of {tid} visible, not committed")
        for tid, commit in self.decided.items():
            if tid in pending:
                fig.txn_decided_still_pending += 1
                fig.problem(f"transaction {tid} acknowledged decided, still pending")
            if commit:
                fig.txn_commits_checked += 1
                for ident in self.halves.get(tid, []):
                    if ident not in seen:
                        fig.txn_lost += 1
                        fig.problem(f"committed transaction {tid} lost its message {ident}")


def verify(copy: Path, acked: dict[tuple[str, int, int], Ack], fig: Figures, txns: TxnLog | None = None) -> None:
    """Recover ``copy`` (a crashed store) and check the B.a oracle against ``acked``."""
    t0 = time.perf_counter()
    try:
        store = mqlite.open(copy, **CONFIG)
    except Exception as exc:  # noqa: BLE001 - any exception here is the failure being counted
        fig.opens_that_raised += 1
        fig.problem(f"open after kill raised {type(exc).__name__}: {exc}")
        return
    fig.recovery_ms.append((time.perf_counter() - t0) * 1000)
    try:
        stats = store.stats()
        if not stats["recovery_abnormal"]:
            fig.not_abnormal_after_kill += 1
            fig.problem(f"recovery_abnormal False after SIGKILL: {stats}")
        fig.torn_tails += bool(stats["recovery_torn_tail"])
        fig.records_scanned.append(int(stats["recovery_records_scanned"]))
        seen: set[tuple[int, int, int]] = set()
        highs: dict[tuple[str, int], int] = {}
        for topic in TOPICS:
            for q in range(QUEUES):
                mq = MessageQueue(topic, q)
                try:
                    low, high = store.offsets(mq)
                except mqlite.TopicNotFoundError:
                    low, high = 0, 0
                if low != 0:
                    fig.gaps += 1
                    fig.problem(f"{topic}/{q} min offset {low} != 0")
                offset, last_clo = low, -1
                last_seq: dict[tuple[int, int], int] = {}
                last_cycle = -1
                while offset < high:
                    res = store.read_result(mq, offset, 64)
                    if not res.messages:
                        fig.gaps += 1
                        fig.problem(f"{topic}/{q}: read at {offset} < max {high} gave {res.status}")
                        break
                    for m in res.messages:
                        fig.stored_messages_checked += 1
                        if m.queue_offset != offset:
                            fig.gaps += 1
                            fig.problem(f"{topic}/{q}: expected offset {offset}, got {m.queue_offset}")
                        if m.commit_log_offset <= last_clo:
                            fig.reordered += 1
                            fig.problem(f"{topic}/{q}@{offset}: commit-log offset not increasing")
                        last_clo = m.commit_log_offset
                        try:
                            ident = parse_body(m.body)
                        except ValueError as exc:
                            fig.corrupt_records += 1
                            fig.problem(f"{topic}/{q}@{m.queue_offset}: {exc}")
                            offset = m.queue_offset + 1
                            continue
                        if ident in seen:
                            fig.duplicated += 1
                            fig.problem(f"{topic}/{q}@{m.queue_offset}: duplicate {ident}")
                        seen.add(ident)
                        cyc, prod, seq = ident
                        if cyc < last_cycle or seq <= last_seq.get((cyc, prod), -1):
                            fig.reordered += 1
                            fig.problem(f"{topic}/{q}@{m.queue_offset}: {ident} out of send order")
                        last_cycle = cyc
                        last_seq[(cyc, prod)] = seq
                        ack = acked.get((topic, q, m.queue_offset))
                        if ack is None:
                            fig.unacked_messages_found += 1
                        elif (ack.cycle, ack.producer, ack.seq) != ident or ack.commit_log_offset != m.commit_log_offset:
                            fig.lost += 1
                            fig.problem(f"{topic}/{q}@{m.queue_offset}: acked {ack} but found {ident}")
                        if m.queue_offset % 7 == 0:
                            fig.indexed_checked += 1
                            try:
                                found = store.get(m.msg_id).commit_log_offset
                            except mqlite.MessageNotFoundError:
                                found = -1
                            if found != m.commit_log_offset:
                                fig.index_misses += 1
                                fig.problem(f"{topic}/{q}@{m.queue_offset}: unique id {m.msg_id} found at {found}")
                        offset = m.queue_offset + 1
                    offset = max(offset, res.next_offset)
                highs[(topic, q)] = high
        # every acknowledged message is below its queue's recovered max offset (the ones below
        # were compared with what is stored while scanning)
        for (t, q, qo), ack in acked.items():
            if qo >= highs.get((t, q), 0):
                fig.lost += 1
                fig.problem(f"lost acked message {ack} (queue max {highs.get((t, q), 0)})")
        fig.acked_messages_checked += len(acked)
        scheduled_copies(store, fig, {})
        if txns is not None:
            txns.check(store, fig)
        # Committed consumer offsets (the child's consumer group commits while it is killed)
        # never point past the recovered data.
        for p in store.consumer_progress(GROUP):
            fig.consumer_offsets_checked += 1
            if not 0 <= p.committed <= p.max_offset:
                fig.offsets_past_data += 1
                fig.problem(f"{p.topic}/{p.queue_id}: committed {p.committed} > max {p.max_offset}")
    finally:
        store.close()


def scheduled_copies(store: mqlite.Store, fig: Figures, scheduled: dict[tuple[str, int, int, int], int],
                     count_redeliveries: bool = False) -> dict[str, set[tuple[int, int, int]]]:
    """Checks what reached the timer, delay and retry topics (never early, a timer at most
    once) and returns the identities found per topic; ``scheduled``: the acknowledged ones
    with their due times (a timer's is checked against its ``TIMER_OUT_MS`` otherwise).
    ``count_redeliveries``: count the retries found twice (allowed: a send-back is at least
    once)."""
    found: dict[str, set[tuple[int, int, int]]] = {}

    def damaged(m: mqlite.MessageExt, exc: ValueError) -> None:
        fig.corrupt_records += 1
        fig.problem(f"{m.message_queue}@{m.queue_offset}: {exc}")

    for topic in (TIMER_TOPIC, DELAY_TOPIC, RETRY_TOPIC):
        seen = found.setdefault(topic, set())
        for ident, m in delivered(store, topic, parse_body, damaged):
            fig.scheduled_delivered_checked += 1
            if topic == TIMER_TOPIC:
                due = scheduled.get((topic, *ident)) or int(m.properties.get("TIMER_OUT_MS", 0))
                early = m.store_timestamp < due
            elif topic == DELAY_TOPIC:
                early = m.store_timestamp - m.born_timestamp < DELAY_MS
            else:
                early = m.reconsume_times != 1 or m.topic not in TOPICS
            if early:
                fig.early += 1
                fig.problem(f"{topic}@{m.queue_offset}: {ident} delivered early or changed: {m} {m.properties}")
            if ident in seen:
                if topic == TIMER_TOPIC:
                    fig.timers_twice += 1
                    fig.problem(f"timer {ident} delivered twice")
                elif topic == DELAY_TOPIC:
                    fig.delayed_twice += 1
                    fig.problem(f"delayed message {ident} delivered twice")
                elif count_redeliveries:
                    fig.retry_redeliveries += 1
            seen.add(ident)
    return found


def drain(store_path: Path, scheduled: dict[tuple[str, int, int, int], int], backs: set[tuple[int, int, int]],
          fig: Figures) -> None:
    """Opens the store (after the last kill of an epoch) and lets it deliver until every
    acknowledged scheduled message and send-back has arrived, or DRAIN_TIMEOUT_S past the
    last due time; what is missing then is lost."""
    want = {topic: {key[1:] for key in scheduled if key[0] == topic} for topic in (TIMER_TOPIC, DELAY_TOPIC)}
    want[RETRY_TOPIC] = set(backs)
    last_due = max([d for d in scheduled.values()] + [int(time.time() * 1000) + DELAY_MS])
    deadline = time.monotonic() + DRAIN_TIMEOUT_S + max(0.0, last_due / 1000 - time.time())
    last = Figures()

    def scan() -> dict[str, set[tuple[int, int, int]]]:
        nonlocal last
        last = Figures()  # the counts of the last scan only
        return scheduled_copies(store, last, scheduled, count_redeliveries=True)

    with mqlite.open(store_path, **CONFIG) as store:
        missing = wait_delivered(store, want, deadline, scan)
    merge(fig, last)
    for t, m in missing.items():
        for ident in sorted(m):
            if t == RETRY_TOPIC:
                fig.retries_lost += 1
            else:
                fig.scheduled_lost += 1
            fig.problem(f"acknowledged {t} {ident} never delivered")
    fig.scheduled_acked += len(scheduled)
    fig.sent_back_acked += len(backs)


DRAIN_COUNTS = ("corrupt_records", "early", "timers_twice", "delayed_twice", "retry_redeliveries",
                "scheduled_delivered_checked", "scheduled_lost", "retries_lost", "scheduled_acked", "sent_back_acked")


def merge(fig: Figures, part: Figures) -> None:
    """Adds the counts ``drain`` makes (and its problems) of ``part`` to ``fig``."""
    for key in DRAIN_COUNTS:
        setattr(fig, key, getattr(fig, key) + getattr(part, key))
    for text in part.problems:
        fig.problem(text)


class Drain:
    """``drain`` of a finished epoch's store on a thread, beside the next epoch's cycles (its
    wait for the last delayed messages then costs the loop nothing); ``join`` adds its figures
    and deletes the store."""

    def __init__(self, store: Path, scheduled: dict[tuple[str, int, int, int], int],
                 backs: set[tuple[int, int, int]]) -> None:
        self.store, self.fig = store, Figures()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(dict(scheduled), set(backs)), daemon=True)
        self.thread.start()

    def _run(self, scheduled: dict[tuple[str, int, int, int], int], backs: set[tuple[int, int, int]]) -> None:
        try:
            drain(self.store, scheduled, backs, self.fig)
        except BaseException as exc:  # noqa: BLE001 - re-raised by join
            self.error = exc

    def join(self, fig: Figures) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error
        merge(fig, self.fig)
        shutil.rmtree(self.store, ignore_errors=True)


def crash_loop(tmp_path: Path, cycles: int, seed: int) -> Figures:
    rng = random.Random(seed)
    fig = Figures()
    acked: dict[tuple[str, int, int], Ack] = {}
    scheduled: dict[tuple[str, int, int, int], int] = {}
    backs: set[tuple[int, int, int]] = set()
    txns = TxnLog()
    store = tmp_path / "store-0"
    copy = tmp_path / "copy"
    open_estimate = 3.0
    draining: Drain | None = None
    for cycle in range(cycles):
        if cycle % EPOCH == 0:
            if draining is not None:
                draining.join(fig)
                draining = None
            if store.exists():
                draining = Drain(store, scheduled, backs)
            store = tmp_path / f"store-{cycle // EPOCH}"
            acked.clear()
            scheduled.clear()
            backs.clear()
            txns.clear()
            fig.epochs += 1
        mode = "sync" if rng.random() < 2 / 3 else "async"
        fig.sync_cycles += mode == "sync"
        fig.async_cycles += mode == "async"
        producers = rng.choice((1, 1, 2))
        child = ChildRun(store, mode, cycle, rng.randrange(1 << 30), producers)
        roll = rng.random()
        try:
            if roll < 0.20 and cycle % EPOCH != 0:
                # Kill inside open: recovery of the previous crash.
                if child.wait_for(child.opening):
                    time.sleep(rng.uniform(0, open_estimate) / 1000)
            elif roll < 0.30:
                if child.wait_for(child.opened):
                    child.roll.wait(2.0)
            elif child.wait_for(child.opened):
                time.sleep(rng.uniform(0.005, 0.050))
        finally:
            rc = child.kill()
        if rc != -signal.SIGKILL:
            fig.bad_exit_codes += 1
            if child.open_ms is None:
                fig.opens_that_raised += 1
            fig.problem(f"cycle {cycle} ({mode}, epoch cycle {cycle % EPOCH}): child rc {rc}: {child.stderr()[-3000:]}")
            if os.environ.get("MQLITE_CRASH_KEEP"):
                shutil.copytree(store, Path(os.environ["MQLITE_CRASH_KEEP"]) / f"cycle-{cycle}", symlinks=True)
        if child.open_ms is None:
            fig.kills_during_open += 1
        else:
            fig.child_open_ms.append(child.open_ms)
            open_estimate = statistics.median(fig.child_open_ms[-20:])
            if child.roll.is_set() and 0.20 <= roll < 0.30:
                fig.kills_after_roll += 1
        for ack in child.acks():
            fig.acked_messages_received += 1
            key = (ack.topic, ack.queue, ack.queue_offset)
            if key in acked:
                fig.duplicated += 1
                fig.problem(f"queue offset {key} acknowledged twice: {acked[key]} and {ack}")
            acked[key] = ack
        scheduled.update(child.scheduled())
        backs |= child.backs()
        txns.add(child.lines)
        if copy.exists():
            shutil.rmtree(copy)
        if not store.exists():
            fig.problem(f"cycle {cycle}: the child never created the store")
            fig.cycles += 1
            continue
        shutil.copytree(store, copy, symlinks=True)
        # a lock file copied from a dead holder is not locked: flock dies with the process
        verify(copy, acked, fig, txns)
        fig.cycles += 1
    if draining is not None:
        draining.join(fig)
    if store.exists():
        Drain(store, scheduled, backs).join(fig)
    return fig


def report(name: str, fig: Figures) -> dict[str, Any]:
    summary = fig.summary()
    print(f"\n{name}: " + json.dumps(summary, indent=1))
    out = os.environ.get("MQLITE_RELIABILITY_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(json.dumps(summary, indent=1))
    return summary


def check(fig: Figures, cycles: int) -> None:
    s = fig.summary()
    assert fig.cycles == cycles
    for key in ("lost", "duplicated", "reordered", "gaps", "corrupt_records", "opens_that_raised",
                "not_abnormal_after_kill", "bad_exit_codes", "offsets_past_data", "timers_twice", "delayed_twice", "early",
                "scheduled_lost", "retries_lost", "index_misses", "txn_lost", "txn_visible_uncommitted",
                "txn_decided_still_pending"):
        assert s[key] == 0, f"{key}={s[key]}: {fig.problems[:10]}"
    assert fig.txn_commits_checked > 0, "no acknowledged transaction commit was checked"
    assert fig.acked_messages_checked > 0 and fig.stored_messages_checked > 0 and fig.indexed_checked > 0
    assert fig.scheduled_acked > 0 and fig.sent_back_acked > 0 and fig.scheduled_delivered_checked > 0
    assert fig.consumer_offsets_checked > 0, "the child's consumer group never committed"
    assert fig.kills_during_open > 0, "no kill landed inside open"
    assert fig.sync_cycles > 0 and fig.async_cycles > 0


def kill_point_loop(tmp_path: Path, cycles: int, seed: int, replay: str | None = None) -> tuple[Figures, dict[str, int]]:
    """Kill-point mode: each cycle arms one kill point of ``mqlite._files`` at a hit count drawn
    from ``seed`` (points taken in turn, so each is armed at least once in ``len(KILL_POINTS)``
    cycles; ``replay``: ``<point>:<n>`` for every cycle), lets the child abort there, and checks
    the B.a oracle plus the file being replaced: it holds its old or its new content, whole.
    Returns the figures and the aborts per point."""
    rng = random.Random(seed)
    fig = Figures(epochs=1)
    aborts: dict[str, int] = {}
    acked: dict[tuple[str, int, int], Ack] = {}
    txns = TxnLog()
    store, copy = tmp_path / "store", tmp_path / "copy"
    for cycle in range(cycles):
        point = KILL_POINTS[cycle % len(KILL_POINTS)]
        n = rng.randint(1, 8)
        if replay:
            point, _, hit = replay.rpartition(":")
            n = int(hit)
        mode = os.environ.get("MQLITE_PY_KILL_MODE", "sync") if replay else rng.choice(("sync", "async"))
        fig.sync_cycles += mode == "sync"
        fig.async_cycles += mode == "async"
        where = (f"cycle {cycle}: {point}:{n} {mode} (seed {seed}; replay: "
                 f"MQLITE_PY_KILL_REPLAY={point}:{n} MQLITE_PY_KILL_MODE={mode})")
        print(where)
        child = ChildRun(store, mode, cycle, rng.randrange(1 << 30), 1, {"MQLITE_PY_KILL_AT": f"{point}:{n}"})
        rc = child.wait_exit(timeout=120)
        if rc != -signal.SIGABRT:
            fig.bad_exit_codes += 1
            fig.problem(f"{where}: child rc {rc} (None: the point was not reached): {child.stderr()[-3000:]}")
        if child.open_ms is not None:
            fig.child_open_ms.append(child.open_ms)
        for ack in child.acks():
            fig.acked_messages_received += 1
            acked[(ack.topic, ack.queue, ack.queue_offset)] = ack
        for line in child.lines:
            if line.startswith("K "):
                _, _, _, old, new, path = line.split(maxsplit=5)
                aborts[point] = aborts.get(point, 0) + 1
                now = Path(path)
                got = hashlib.sha256(now.read_bytes()).hexdigest() if now.exists() else "-"
                if got not in (old, new):
                    fig.problem(f"{where}: {path} is neither its old nor its new content")
                    fig.torn_offset_files += 1
        txns.add(child.lines)
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(store, copy, symlinks=True)
        verify(copy, acked, fig, txns)
        fig.cycles += 1
    return fig, aborts


@pytest.mark.timeout(600)
def test_kill_point_loop(tmp_path: Path) -> None:
    """The kill-point mode: every kill point of the Python layer is reached and recovered from."""
    seed = int(os.environ.get("MQLITE_PY_KILL_SEED", "20250611"))
    replay = os.environ.get("MQLITE_PY_KILL_REPLAY")
    cycles = 1 if replay else int(os.environ.get("MQLITE_PY_KILL_CYCLES", "4")) * len(KILL_POINTS)
    fig, aborts = kill_point_loop(tmp_path, cycles, seed, replay)
    summary = report("kill_point_loop", fig)
    summary_aborts = dict(sorted(aborts.items()))
    print(f"aborts per kill point (seed {seed}): {summary_aborts}")
    for key in ("lost", "duplicated", "reordered", "gaps", "corrupt_records", "opens_that_raised",
                "not_abnormal_after_kill", "bad_exit_codes", "offsets_past_data", "torn_offset_files",
                "timers_twice", "delayed_twice", "early", "txn_lost", "txn_visible_uncommitted",
                "txn_decided_still_pending"):
        assert summary[key] == 0, f"{key}={summary[key]} (seed {seed}): {fig.problems[:10]}"
    assert fig.consumer_offsets_checked > 0, "the child's consumer group never committed"
    if not replay:
        assert sorted(aborts) == sorted(KILL_POINTS), f"kill points reached {aborts} vs declared {KILL_POINTS}"


@pytest.mark.timeout(600)
def test_kill9_loop(tmp_path: Path) -> None:
    cycles = int(os.environ.get("MQLITE_CRASH_CYCLES", "300"))
    fig = crash_loop(tmp_path, cycles, seed=int(os.environ.get("MQLITE_CRASH_SEED", "20240604")))
    report("crash_loop", fig)
    check(fig, cycles)


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_kill9_loop_soak(tmp_path: Path) -> None:
    cycles = int(os.environ.get("MQLITE_SOAK_CRASH_CYCLES", "1000"))
    fig = crash_loop(tmp_path, cycles, seed=int(time.time()))
    report("crash_loop_soak", fig)
    check(fig, cycles)
