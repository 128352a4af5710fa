"""Kill -9 loop over several writer processes of one store (``shared=True``,
docs/design-many-writers.md; reliability plan B.a with many processes).

The test process creates the topics and closes the store, then opens it as a shared writer and
keeps it open throughout. Beside it run ``PRODUCERS`` producer processes and ``CONSUMERS``
consumer processes of one consumer group (``shared_kill_child.py``: fresh interpreters, never
forks), on two topics of four queues with 64 KiB commit-log files, so rolls are frequent. Each cycle, drawn from a printed seed, kills one
of them with SIGKILL, then starts a replacement and waits for its open:

- **the append lock's holder**: a producer is stopped (SIGSTOP) at a random moment until it is
  stopped while the lock's owner word (FORMAT.md §14, glibc's robust mutex: the owner's thread
  id) names it (producers send from their main thread, whose thread id is the pid); it is then
  killed inside the append's critical section, possibly in the middle of a record, a batch or
  a roll, or of the repair of an earlier death;
- **a producer** or **a consumer** at a random moment;
- **an opener**: the replacement itself, at a random moment of its start or open;
- **a producer at a kill point** (when ``MQLITE_FI_CORE`` names the extension built with
  ``--features fault-injection``, as scripts/test.sh does for the reliability tier; 30 % of the
  cycles): an extra producer armed with ``MQLITE_KILL_AT`` aborts at the n-th hit of
  ``append.unsealed`` (a record written but for its CRC), ``append.unpublished`` (records whole,
  not published), ``commit_log.rolled`` (a roll done under the lock, nothing written to the
  new file) or ``mapped_file.empty`` (a commit-log or consume-queue file just created, empty),
  each in turn, n drawn from the seed; every point must be reached.

After every cycle the test process sends one message itself (a survivor goes on without
reopening, repairing after a dead holder) and every other child must still be running.

Scheduled delivery and retries ride along: about 5 % of a producer's operations send a timer
(due within 200 ms, topic ``killT``) or a delay level 1 message (1 s, ``killD``), and the
consumers send the first delivery of every twentieth message back; the test process, the
first opener, leads and delivers them all.

At the end the producers stop, the consumers drain the group, and the store is checked from the
test process's own open store, then again after it is closed and opened again:

- every acknowledged message (a producer writes a line per message to its own file after the
  send returned) is at its acknowledged queue offset and commit-log offset, once;
- every queue is contiguous from 0; no message is stored twice; each producer's messages of a
  queue are in its send order and commit-log offsets increase along a queue; every body passes
  its digest, and no read raises;
- a sharding key's messages of a topic are all in one queue;
- a producer that stopped cleanly has every stored message acknowledged;
- the consumers, across their kills, received every stored message at least once, each with the
  identity stored at its offset;
- every acknowledged timer and delayed message reaches its topic, and every acknowledged
  send-back ``%RETRY%kill-group``, intact and never early; no timer and no delayed message
  twice (both are delivered exactly once); a retry twice is counted, not failed (a consumer
  killed between its send-back and its commit sends the message back again).

CI: 100 cycles (``MQLITE_SHARED_KILL_CYCLES``, seed ``MQLITE_SHARED_KILL_SEED``). Soak
(``MQLITE_SOAK=1`` or ``-m soak``): 1,000 cycles, a seed from the clock. The seed and figures
are printed, and written as JSON to ``$MQLITE_RELIABILITY_DIR/shared_kill_loop[_soak].json``
when that is set.
"""

from __future__ import annotations

import json
import mmap
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import mqlite
from mqlite import Message, MessageQueue
from scheduled_checks import delivered, wait_delivered
from shared_kill_child import CONFIG, DELAY_TOPIC, GROUP, QUEUES, TIMER_TOPIC, TOPICS, make_body, parse_body

pytestmark = pytest.mark.reliability

HERE = Path(__file__).resolve().parent
CHILD = HERE / "shared_kill_child.py"
PRODUCERS = 3
CONSUMERS = 2
# FORMAT.md §14: the append lock is the native mutex at byte 64 of run/writer.shm. In glibc's
# robust mutex the first int is the owner's thread id, with two flag bits above it.
LOCK_AT = 64
TID_MASK = 0x3FFF_FFFF
# Tries to stop a producer inside the critical section: each watches the owner word for up to
# WATCH_READS reads, then stops the producer and reads the word again.
HOLDER_TRIES = 200
WATCH_READS = 20_000
PARENT_INCARNATION = 0
# The core's kill points a producer reaches inside the append's critical section (rolls
# included: a shared writer creates commit-log files inline, under the lock), with the largest
# hit number drawn for each (rust/core/util/kill_point.rs; MQLITE_KILL_AT arms one).
KILL_AT = "MQLITE_KILL_AT"
POINT_SHARE = 0.3  # of the cycles, when the fault-injection build is there
KILL_POINTS = {"append.unsealed": 60, "append.unpublished": 60, "commit_log.rolled": 2,
               "mapped_file.empty": 3}

Ident = tuple[int, int]  # (incarnation, seq)


def _child_env(pkg_root: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(KILL_AT, None)
    pkg = str(pkg_root or Path(mqlite.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg, str(HERE), env.get("PYTHONPATH")) if p)
    return env


def fault_injection_package(tmp_path: Path) -> Path | None:
    """A copy of the mqlite package whose extension is the fault-injection build named by
    ``MQLITE_FI_CORE`` (scripts/test.sh builds it for the reliability tier); None without it."""
    core = os.environ.get("MQLITE_FI_CORE")
    if not core:
        return None
    root = tmp_path / "fi"
    pkg = root / "mqlite"
    pkg.mkdir(parents=True)
    for f in Path(mqlite.__file__).resolve().parent.iterdir():
        if f.suffix in (".py", ".pyi") or f.name == "py.typed":
            shutil.copy2(f, pkg / f.name)
    shutil.copy2(core, pkg / "_core.abi3.so")
    return root


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):
        return False


class Child:
    """One producer or consumer process; ``ready`` is set once its open returned."""

    def __init__(self, role: str, store: Path, incarnation: int, seed: int, out: Path,
                 stop: Path, flush: str, armed: tuple[Path, str, int] | None = None) -> None:
        self.role = role
        env = _child_env()
        self.armed: tuple[str, int] | None = None
        if armed is not None:
            pkg_root, point, n = armed
            env = {**_child_env(pkg_root), KILL_AT: f"{point}:{n}"}
            self.armed = (point, n)
        self.incarnation = incarnation
        self.out = out
        self.flush = flush
        self.proc = subprocess.Popen(
            [sys.executable, "-u", str(CHILD), role, str(store), str(incarnation), str(seed),
             str(out), str(stop), flush],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )
        self.ready = threading.Event()
        self.rc: int | None = None
        self.err = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == b"R":
                self.ready.set()

    def activate(self) -> None:
        """Let the spare open the store."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.rc is None and self.proc.poll() is None

    def kill(self) -> int:
        if self.rc is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.reap()

    def reap(self, timeout: float = 30) -> int:
        if self.rc is None:
            self.rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=30)
        assert self.proc.stderr is not None
        if not self.proc.stderr.closed:
            self.err = self.proc.stderr.read().decode(errors="replace")
            self.proc.stderr.close()
        for pipe in (self.proc.stdout, self.proc.stdin):
            if pipe is not None and not pipe.closed:
                try:
                    pipe.close()
                except BrokenPipeError:
                    pass
        return self.rc

    def stop_in_lock(self, shm: mmap.mmap) -> bool:
        """Stop this producer at random moments until it is stopped holding the append lock,
        then kill it there. True if it died holding the lock; False if no try caught it (it is
        killed anyway) or it ended by itself."""
        pid = self.pid
        for _ in range(HOLDER_TRIES):
            for _ in range(WATCH_READS):  # until the owner word names it
                if struct.unpack_from("=I", shm, LOCK_AT)[0] & TID_MASK == pid:
                    break
            os.kill(pid, signal.SIGSTOP)
            _, status = os.waitpid(pid, os.WUNTRACED)
            if not os.WIFSTOPPED(status):
                self.rc = os.waitstatus_to_exitcode(status)
                self.proc.returncode = self.rc
                return False
            if struct.unpack_from("=I", shm, LOCK_AT)[0] & TID_MASK == pid:
                os.kill(pid, signal.SIGKILL)
                return True
            os.kill(pid, signal.SIGCONT)
        return False


@dataclass
class Figures:
    seed: int = 0
    cycles: int = 0
    holder_kills: int = 0
    holder_misses: int = 0
    producer_kills: int = 0
    consumer_kills: int = 0
    open_kills: int = 0
    children_started: int = 0
    acked: int = 0
    stored: int = 0
    stored_unacked: int = 0
    consumed_lines: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    gaps: int = 0
    corrupt: int = 0
    key_split: int = 0
    clean_unacked: int = 0
    not_consumed: int = 0
    consumer_mismatch: int = 0
    survivors_died: int = 0
    scheduled_acked: int = 0
    sent_back_acked: int = 0
    scheduled_checked: int = 0
    timers_twice: int = 0
    early: int = 0
    scheduled_lost: int = 0
    retries_lost: int = 0
    delayed_twice: int = 0
    retry_redeliveries: int = 0
    point_kills: dict[str, int] = field(default_factory=dict)
    points_not_reached: int = 0
    bad_exits: int = 0
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < 40:
            self.problems.append(text)


def read_lines(path: Path) -> list[list[str]]:
    """The complete lines of a child's file, split (a kill may cut the last one)."""
    if not path.exists():
        return []
    text = path.read_text()
    complete = text[: text.rfind("\n") + 1]
    return [line.split(" ", 4) if line.startswith("C ") else line.split() for line in complete.splitlines()]


@dataclass
class Ack:
    topic: str
    queue: int
    queue_offset: int
    commit_log_offset: int
    ident: Ident
    key: str | None


def scan(store: mqlite.Store, fig: Figures) -> dict[tuple[str, int, int], tuple[Ident, int]]:
    """Every stored message as (topic, queue, queue offset) -> ((incarnation, seq), commit-log
    offset), checking contiguity, uniqueness, per-producer order and digests."""
    stored: dict[tuple[str, int, int], tuple[Ident, int]] = {}
    seen: set[Ident] = set()
    for topic in TOPICS:
        for q in range(QUEUES):
            mq = MessageQueue(topic, q)
            low, high = store.offsets(mq)
            if low != 0:
                fig.gaps += 1
                fig.problem(f"{topic}/{q}: min offset {low}")
            offset, last_clo = low, -1
            last_seq: dict[int, int] = {}
            while offset < high:
                res = store.read_result(mq, offset, 256)
                if not res.messages:
                    fig.gaps += 1
                    fig.problem(f"{topic}/{q}: read at {offset} below max {high} gave {res.status}")
                    break
                for m in res.messages:
                    if m.queue_offset != offset:
                        fig.gaps += 1
                        fig.problem(f"{topic}/{q}: offset {m.queue_offset} where {offset} was due")
                    if m.commit_log_offset <= last_clo:
                        fig.reordered += 1
                        fig.problem(f"{topic}/{q}@{m.queue_offset}: commit-log offset not increasing")
                    last_clo = m.commit_log_offset
                    offset = m.queue_offset + 1
                    try:
                        ident = parse_body(m.body)
                    except ValueError as exc:
                        fig.corrupt += 1
                        fig.problem(f"{topic}/{q}@{m.queue_offset}: {exc}")
                        continue
                    if ident in seen:
                        fig.duplicated += 1
                        fig.problem(f"{topic}/{q}@{m.queue_offset}: {ident} stored twice")
                    seen.add(ident)
                    inc, seq = ident
                    if seq <= last_seq.get(inc, -1):
                        fig.reordered += 1
                        fig.problem(f"{topic}/{q}@{m.queue_offset}: {ident} out of send order")
                    last_seq[inc] = seq
                    stored[(topic, q, m.queue_offset)] = (ident, m.commit_log_offset)
    return stored


def check_store(stored: dict[tuple[str, int, int], tuple[Ident, int]], acks: list[Ack],
                clean: set[int], fig: Figures) -> None:
    """Acknowledged messages against what is stored; sharding keys; clean producers."""
    acked_idents: set[Ident] = set()
    key_queue: dict[tuple[str, str], int] = {}
    for a in acks:
        acked_idents.add(a.ident)
        got = stored.get((a.topic, a.queue, a.queue_offset))
        if got != (a.ident, a.commit_log_offset):
            fig.lost += 1
            fig.problem(f"acked {a} but stored {got}")
        if a.key is not None:
            q = key_queue.setdefault((a.topic, a.key), a.queue)
            if q != a.queue:
                fig.key_split += 1
                fig.problem(f"key {a.key} of {a.topic} in queues {q} and {a.queue}")
    fig.stored_unacked = 0
    for where, (ident, _) in stored.items():
        if ident not in acked_idents:
            fig.stored_unacked += 1
            if ident[0] in clean:
                fig.clean_unacked += 1
                fig.problem(f"{where}: {ident} stored but never acknowledged by a clean producer")


RETRY_TOPIC = f"%RETRY%{GROUP}"


def check_scheduled(store: mqlite.Store, scheduled: dict[tuple[str, int, int], int], backs: set[Ident],
                    fig: Figures) -> None:
    """Waits (on the store's wake-ups, up to 30 s past the last due time) until every
    acknowledged timer, delayed message and send-back has arrived, checking each copy."""
    want: dict[str, set[Ident]] = {t: {k[1:] for k in scheduled if k[0] == t} for t in (TIMER_TOPIC, DELAY_TOPIC)}
    want[RETRY_TOPIC] = set(backs)
    last_due = max([*scheduled.values(), int(time.time() * 1000) + 1_000])
    deadline = time.monotonic() + 30 + max(0.0, last_due / 1000 - time.time())
    counts: dict[str, int] = {}

    def damaged(m: mqlite.MessageExt, exc: ValueError) -> None:
        counts["corrupt"] = counts.get("corrupt", 0) + 1
        fig.problem(f"{m.message_queue}@{m.queue_offset}: {exc}")

    def scan() -> dict[str, set[Ident]]:
        counts.clear()
        found: dict[str, set[Ident]] = {}
        for topic in want:
            seen = found.setdefault(topic, set())
            for ident, m in delivered(store, topic, parse_body, damaged):
                counts["checked"] = counts.get("checked", 0) + 1
                if topic == TIMER_TOPIC:
                    due = scheduled.get((topic, *ident)) or int(m.properties.get("TIMER_OUT_MS", 0))
                    bad = m.store_timestamp < due
                elif topic == DELAY_TOPIC:
                    bad = m.store_timestamp - m.born_timestamp < 1_000
                else:
                    bad = m.reconsume_times != 1 or m.topic not in TOPICS
                if bad:
                    counts["early"] = counts.get("early", 0) + 1
                    fig.problem(f"{topic}@{m.queue_offset}: {ident} early or changed: {m} {m.properties}")
                if ident in seen:
                    key = {TIMER_TOPIC: "timers_twice", DELAY_TOPIC: "delayed_twice"}.get(
                        topic, "retry_redeliveries")
                    counts[key] = counts.get(key, 0) + 1
                    if key != "retry_redeliveries":
                        fig.problem(f"{topic}: {ident} delivered twice")
                seen.add(ident)
        return found

    missing = wait_delivered(store, want, deadline, scan)
    fig.corrupt += counts.get("corrupt", 0)
    fig.scheduled_checked += counts.get("checked", 0)
    fig.early += counts.get("early", 0)
    fig.timers_twice += counts.get("timers_twice", 0)
    fig.delayed_twice += counts.get("delayed_twice", 0)
    fig.retry_redeliveries += counts.get("retry_redeliveries", 0)
    for topic, idents in missing.items():
        for ident in sorted(idents):
            if topic == RETRY_TOPIC:
                fig.retries_lost += 1
            else:
                fig.scheduled_lost += 1
            fig.problem(f"acknowledged {topic} {ident} never delivered")
    fig.scheduled_acked += len(scheduled)
    fig.sent_back_acked += len(backs)


def shared_kill_loop(tmp_path: Path, cycles: int, seed: int, fi: Path | None) -> Figures:
    """The loop (module doc); with ``fi`` (a package with the fault-injection extension) a
    share of the cycles start a producer armed at a kill point instead."""
    rng = random.Random(seed)
    fig = Figures(seed=seed)
    path = tmp_path / "store"
    stop_producers, stop_consumers = tmp_path / "stop-producers", tmp_path / "stop-consumers"
    files = tmp_path / "out"
    files.mkdir()
    incarnations = iter(range(1, 1 << 30))
    children: list[Child] = []  # every child ever started
    parent_acks: list[Ack] = []
    holder_kills_possible = _glibc()
    live: dict[str, list[Child]] = {"producer": [], "consumer": []}

    def start(role: str) -> Child:
        inc = next(incarnations)
        flush = "sync" if role == "producer" and rng.random() < 0.25 else "async"
        stop = stop_producers if role == "producer" else stop_consumers
        child = Child(role, path, inc, rng.randrange(1 << 30), files / f"{role}-{inc}", stop, flush)
        children.append(child)
        fig.children_started += 1
        return child

    armed_turn = iter(range(1 << 30))

    def start_armed() -> Child:
        assert fi is not None
        point = list(KILL_POINTS)[next(armed_turn) % len(KILL_POINTS)]
        inc = next(incarnations)
        child = Child("producer", path, inc, rng.randrange(1 << 30), files / f"producer-{inc}",
                      stop_producers, "async", (fi, point, rng.randint(1, KILL_POINTS[point])))
        children.append(child)
        fig.children_started += 1
        return child

    def await_ready(child: Child) -> None:
        deadline = time.monotonic() + 60
        while not child.ready.wait(0.05):
            if child.proc.poll() is not None or time.monotonic() > deadline:
                child.kill()
                raise AssertionError(f"{child.role} {child.incarnation} did not open (rc {child.rc}, "
                                     f"seed {seed}): {child.err[-3000:]}")

    # Spares have imported mqlite and wait to open: a replacement opens at once.
    spares: dict[str, list[Child]] = {"producer": [], "consumer": []}

    def replace(role: str) -> Child:
        child = spares[role].pop(0)
        spares[role].append(start(role))
        child.activate()
        live[role].append(child)
        return child

    def kill_and_replace(cycle: int, what: str, role: str, victim: Child) -> str:
        """Kills ``victim`` (it may be stopped), starts its replacement and waits for its open;
        sometimes kills the replacement inside its open first. Returns a note for the log."""
        note = ""
        rc = victim.kill()
        if rc != -signal.SIGKILL:
            fig.bad_exits += 1
            fig.problem(f"cycle {cycle}: {what} {victim.incarnation} rc {rc}: {victim.err[-2000:]}")
        live[role].remove(victim)
        replacement = replace(role)
        if rng.random() < 0.15:
            note = "+opener"
            time.sleep(rng.uniform(0, 0.02))
            fig.open_kills += not replacement.ready.is_set()
            replacement.kill()
            live[role].remove(replacement)
            replacement = replace(role)
        await_ready(replacement)
        return note

    with mqlite.open(path, **{k: v for k, v in CONFIG.items() if k != "shared"}) as store:
        for topic in TOPICS:
            store.create_topic(topic, QUEUES)
        for topic in (TIMER_TOPIC, DELAY_TOPIC):
            store.create_topic(topic, 1)
    with mqlite.open(path, **CONFIG) as store:
        producer = store.producer()
        for role, n in (("producer", PRODUCERS), ("consumer", CONSUMERS)):
            spares[role] = [start(role) for _ in range(n + 2)]
            for _ in range(n):
                replace(role)
        for child in live["producer"] + live["consumer"]:
            await_ready(child)
        armed = start_armed() if fi is not None else None
        shm_file = open(path / "run" / "writer.shm", "rb")  # noqa: SIM115 - closed below
        shm = mmap.mmap(shm_file.fileno(), 4096, prot=mmap.PROT_READ)
        try:
            for cycle in range(cycles):
                roll = rng.random()
                if armed is not None and rng.random() < POINT_SHARE:
                    # an extra producer that aborts at its kill point (no replacement needed)
                    victim, armed = armed, start_armed()
                    assert victim.armed is not None
                    point, n = victim.armed
                    what = f"kill point {point}:{n}"
                    victim.activate()
                    live["producer"].append(victim)
                    try:
                        rc = victim.reap(timeout=30)
                    except subprocess.TimeoutExpired:
                        rc = victim.kill()
                    live["producer"].remove(victim)
                    if rc == -signal.SIGABRT and f"kill point {point}:{n} reached" in victim.err:
                        fig.point_kills[point] = fig.point_kills.get(point, 0) + 1
                    else:
                        fig.points_not_reached += 1
                        fig.problem(f"cycle {cycle}: {what} not reached (rc {rc}): {victim.err[-2000:]}")
                elif roll < 0.40 and holder_kills_possible:
                    what, role = "holder", "producer"
                    victim = rng.choice(live[role])
                    time.sleep(rng.uniform(0, 0.01))
                    if victim.stop_in_lock(shm):
                        fig.holder_kills += 1
                    else:
                        fig.holder_misses += 1
                    what += kill_and_replace(cycle, what, role, victim)
                else:
                    role = "producer" if roll < 0.70 else "consumer"
                    what = role
                    victim = rng.choice(live[role])
                    time.sleep(rng.uniform(0, 0.03))
                    fig.producer_kills += role == "producer"
                    fig.consumer_kills += role == "consumer"
                    what += kill_and_replace(cycle, what, role, victim)
                # a survivor goes on without reopening (after a dead holder: repairs first)
                q = cycle % QUEUES
                body = make_body(PARENT_INCARNATION, cycle, random.Random(cycle))
                r = producer.send(Message(TOPICS[0], body), queue_id=q)
                parent_acks.append(Ack(TOPICS[0], q, r.queue_offset, r.commit_log_offset,
                                       (PARENT_INCARNATION, cycle), None))
                for child in live["producer"] + live["consumer"]:
                    if child.proc.poll() is not None:
                        fig.survivors_died += 1
                        child.reap()
                        fig.problem(f"cycle {cycle}: survivor {child.role} {child.incarnation} "
                                    f"ended with rc {child.rc}: {child.err[-2000:]}")
                        live[child.role].remove(child)
                        await_ready(replace(child.role))
                fig.cycles += 1
                if cycle % 10 == 0:
                    print(f"cycle {cycle}: {what} (seed {seed})", flush=True)
        finally:
            shm.close()
            shm_file.close()
            for child in spares["producer"] + spares["consumer"] + ([armed] if armed else []):
                child.kill()  # never activated: it opened nothing
            stop_producers.touch()
            for child in live["producer"]:
                try:
                    rc = child.reap(timeout=60)
                except subprocess.TimeoutExpired:
                    rc = child.kill()
                if rc != 0:
                    fig.bad_exits += 1
                    fig.problem(f"producer {child.incarnation} ended with rc {rc}: {child.err[-2000:]}")
            clean = {c.incarnation for c in live["producer"] if c.rc == 0}
            # the group drains everything, then the consumers stop
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                # (the group's retry topic is left out: retries keep arriving for a second)
                progress = [p for p in store.consumer_progress(GROUP) if p.topic in TOPICS]
                if len(progress) == len(TOPICS) * QUEUES and all(p.committed == p.max_offset for p in progress):
                    break
                time.sleep(0.05)
            else:
                fig.problem(f"the group did not drain: {store.consumer_progress(GROUP)}; {store.stats()}")
            stop_consumers.touch()
            for child in live["consumer"]:
                try:
                    rc = child.reap(timeout=60)
                except subprocess.TimeoutExpired:
                    rc = child.kill()
                if rc != 0:
                    fig.bad_exits += 1
                    fig.problem(f"consumer {child.incarnation} ended with rc {rc}: {child.err[-2000:]}")

        acks = list(parent_acks)
        scheduled: dict[tuple[str, int, int], int] = {}
        backs: set[Ident] = set()
        consumed: dict[tuple[str, int, int], set[Ident]] = {}
        for child in children:
            for parts in read_lines(child.out):
                if parts[0] == "A":
                    t, sq, sqo, sclo, sinc, sseq, key = parts[1:]
                    acks.append(Ack(t, int(sq), int(sqo), int(sclo), (int(sinc), int(sseq)),
                                    None if key == "-" else key))
                elif parts[0] == "S":
                    t, sq, sqo, sinc, sseq = parts[1:]
                    consumed.setdefault((t, int(sq), int(sqo)), set()).add((int(sinc), int(sseq)))
                    fig.consumed_lines += 1
                elif parts[0] == "C":
                    fig.corrupt += 1
                    fig.problem(f"consumer {child.incarnation} read a damaged body: {parts}")
                elif parts[0] == "T":
                    scheduled[(parts[1], int(parts[2]), int(parts[3]))] = int(parts[4])
                elif parts[0] == "B":
                    backs.add((int(parts[1]), int(parts[2])))
        fig.acked = len(acks)
        stored = scan(store, fig)
        fig.stored = len(stored)
        check_store(stored, acks, clean, fig)
        for where, (ident, _) in stored.items():
            got = consumed.get(where)
            if not got:
                fig.not_consumed += 1
                fig.problem(f"{where}: {ident} never received by the group")
            elif got != {ident}:
                fig.consumer_mismatch += 1
                fig.problem(f"{where}: stored {ident}, received {got}")
        check_scheduled(store, scheduled, backs, fig)

    # the same after the last writer closed and a new open
    with mqlite.open(path, **{k: v for k, v in CONFIG.items() if k != "shared"}) as store:
        again = scan(store, fig)
        if again != stored:
            fig.lost += 1
            fig.problem(f"reopened store differs: {len(again)} messages, {len(stored)} before")
    return fig


def report(name: str, fig: Figures) -> dict[str, Any]:
    summary = dict(fig.__dict__)
    print(f"\n{name}: " + json.dumps(summary, indent=1))
    out = os.environ.get("MQLITE_RELIABILITY_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(json.dumps(summary, indent=1))
    return summary


def check(fig: Figures, cycles: int, fi: Path | None) -> None:
    assert fig.cycles == cycles, f"seed {fig.seed}: {fig.problems[:10]}"
    for key in ("lost", "duplicated", "reordered", "gaps", "corrupt", "key_split", "clean_unacked",
                "not_consumed", "consumer_mismatch", "survivors_died", "bad_exits", "timers_twice", "delayed_twice", "early",
                "scheduled_lost", "retries_lost"):
        assert getattr(fig, key) == 0, f"{key}={getattr(fig, key)} (seed {fig.seed}): {fig.problems[:10]}"
    assert fig.acked > 0 and fig.stored >= fig.acked
    assert fig.scheduled_acked > 0 and fig.sent_back_acked > 0 and fig.scheduled_checked > 0
    if _glibc():
        assert fig.holder_kills > 0, f"no kill landed inside the append lock (seed {fig.seed})"
    if fi is not None:
        assert fig.points_not_reached == 0, f"seed {fig.seed}: {fig.problems[:10]}"
        assert sorted(fig.point_kills) == sorted(KILL_POINTS), f"aborted at {fig.point_kills} (seed {fig.seed})"


def run(tmp_path: Path, name: str, cycles: int, seed: int) -> None:
    fi = fault_injection_package(tmp_path)
    print(f"seed {seed} (MQLITE_SHARED_KILL_SEED), {cycles} cycles, kill points "
          + (f"from {os.environ['MQLITE_FI_CORE']}" if fi else "not armed (MQLITE_FI_CORE unset)"))
    fig = shared_kill_loop(tmp_path, cycles, seed, fi)
    report(name, fig)
    check(fig, cycles, fi)


@pytest.mark.timeout(300)
def test_shared_kill_loop(tmp_path: Path) -> None:
    cycles = int(os.environ.get("MQLITE_SHARED_KILL_CYCLES", "100"))
    run(tmp_path, "shared_kill_loop", cycles, int(os.environ.get("MQLITE_SHARED_KILL_SEED", "20260135")))


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_shared_kill_loop_soak(tmp_path: Path) -> None:
    cycles = int(os.environ.get("MQLITE_SOAK_SHARED_KILL_CYCLES", "1000"))
    seed = int(os.environ.get("MQLITE_SHARED_KILL_SEED", str(int(time.time()))))
    run(tmp_path, "shared_kill_loop_soak", cycles, seed)
