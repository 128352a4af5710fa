"""Stateful property test of several writer processes on one store (``shared=True``), against
an in-memory model (reliability plan B.c over processes; docs/design-many-writers.md).

Each example makes a fresh store with its topics and closes it, then the test process opens it
as a shared writer (its reads are the model's check); up to ``SLOTS`` worker processes (``shared_worker.py``,
fresh interpreters driven by JSON commands) open, send, send batches, read, close and are
killed. The model is, per (topic, queue), the list of bodies. Rules:

- ``open`` / ``close`` a worker's store (a closed worker's process stays for a later open);
- ``send`` and ``send_batch`` in a worker: the acknowledged queue offsets are the model's next;
- ``consume``: a worker reads a queue from an offset and gets exactly the model's messages
  (every process reads what every other one wrote);
- ``kill`` an idle worker (SIGKILL), or ``kill_sending``: a worker sending a run of messages to
  one queue is killed after its k-th acknowledgement; the model takes the acknowledged ones and
  then what the store holds after them, which must be the run's next bodies in order (sent, not
  yet acknowledged);
- ``send_scheduled``: a worker sends with a delay level, a delay or a delivery time;
  ``advance`` moves the clock and the leader (the test process, the first opener) delivers:
  each queue then holds exactly the newly due messages after the model's, once, intact
  (``scheduled_model.py``); ``fail``: a worker's consumer sends a message back, which the
  leader delivers to ``%RETRY%g`` after its delay level, and to ``%DLQ%g`` after
  max + 1 deliveries. Every process runs on a manual clock the test sets with each command
  (``mqlite.testing.ManualClock``), so nothing waits;
- ``cancel``: a worker cancels a timer the model knows (pending, delivered, cancelled) or an
  unknown id by offset id, msg id or key; the answer is the model's (a write only for a
  pending one) and the leader never delivers a cancelled one;
- ``txn_send``: a worker adds a message to one of a few transactions (refused once it is
  decided); ``txn_end``: a worker commits or rolls back some of them, with or without a
  progress value: unknown ids and the other decision are refused and write nothing, the same
  decision writes nothing, and a commit puts each half of the newly committed ids in its
  queue once, in the order they were sent, whichever process sent them;
- after every step each queue's offsets in the test process equal the model's.

At the end of an example every worker closes, the test process closes, and a new open of the
store holds exactly the model's bodies.

Processes are costly to start, so idle workers (mqlite imported, no store open) are kept in a
pool across examples; a killed one is replaced.

CI: 20 examples x 25 steps (``MQLITE_SHARED_SM_EXAMPLES``). Soak (``MQLITE_SOAK=1``): 300.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import mqlite
from mqlite import MessageQueue, TimerOutcome
from mqlite.testing import ManualClock
from scheduled_model import (
    DELAY_LEVELS, GROUP, MAX_RECONSUME, T0, ScheduledModel, advances, deliver_due, keys, kinds, levels, offsets_ms,
    send_back_levels, tags, user_props, when,
)
from shared_worker import loop_body
from txn_model import TxnModel

pytestmark = pytest.mark.reliability

HERE = Path(__file__).resolve().parent
TOPICS = ("sa", "sb")
QUEUES = 2
SLOTS = 3
CONFIG = {
    "commit_log_file_size": 64 << 10,
    "consume_queue_file_units": 64,
    "max_message_size": 8 << 10,
    "delay_levels": DELAY_LEVELS,
}
SOAK = os.environ.get("MQLITE_SOAK") == "1"

bodies = st.binary(min_size=1, max_size=2000)
topics = st.sampled_from(TOPICS)
queues = st.integers(0, QUEUES - 1)
slots = st.integers(0, SLOTS - 1)
namings = st.sampled_from(["offset id", "msg id", "key", "key and topic", "unknown id"])


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    pkg = str(Path(mqlite.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg, str(HERE), env.get("PYTHONPATH")) if p)
    return env


class Worker:
    """A ``shared_worker.py`` process."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-u", str(HERE / "shared_worker.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
            env=_child_env(),
        )

    def send(self, **cmd: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"worker ended: {self.kill()}"
        out: dict[str, Any] = json.loads(line)
        assert "error" not in out, out["error"]
        return out

    def call(self, **cmd: Any) -> dict[str, Any]:
        self.send(**cmd)
        return self.reply()

    def kill(self) -> str:
        """SIGKILLs the process; returns its stderr."""
        self.proc.kill()
        _, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode == -signal.SIGKILL, (self.proc.returncode, err)
        return err


class Pool:
    """Idle workers kept across examples."""

    def __init__(self) -> None:
        self.idle: list[Worker] = []

    def take(self) -> Worker:
        if not self.idle:
            self.idle.append(Worker())
        worker = self.idle.pop()
        self.idle.append(Worker())  # started ahead: the next take does not wait for the import
        return worker

    def give(self, worker: Worker) -> None:
        self.idle.append(worker)

    def close(self) -> None:
        for w in self.idle:
            if w.proc.poll() is None:
                w.kill()
        self.idle.clear()


class SharedWriters(RuleBasedStateMachine):
    pool: Pool

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="mqlite-ssm-")
        self.path = os.path.join(self.dir, "store")
        self.model: dict[tuple[str, int], list[bytes]] = {(t, q): [] for t in TOPICS for q in range(QUEUES)}
        self.scheduled = ScheduledModel(self.model)
        self.clock = ManualClock(T0)
        # topics made and the store closed cleanly first: the first shared opener then starts
        # from the close's record of the queues
        with mqlite.open(self.path, **CONFIG) as first:
            for topic in TOPICS:
                first.create_topic(topic, QUEUES)
        self.store = mqlite.open(self.path, shared=True, clock=self.clock, **CONFIG)
        self.workers: list[Worker | None] = [None] * SLOTS
        self.loops = 0
        self.txn = TxnModel(self.model)

    def teardown(self) -> None:
        try:
            for w in self.workers:
                if w is not None:
                    w.call(op="close")
                    self.pool.give(w)
            self.store.close()
            # The same time: nothing pending falls due in this open.
            with mqlite.open(self.path, clock=ManualClock(self.clock.now_ms), **CONFIG) as again:
                made = {t.name for t in again.topics()}
                for (topic, q), want in self.model.items():
                    got = again.read_result(MessageQueue(topic, q), 0, len(want) + 1).messages if topic in made else []
                    assert [m.body for m in got] == want, (topic, q)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _open(self, slot: int) -> Worker:
        w = self.workers[slot]
        assert w is not None
        return w

    def _pick(self, n: int) -> int:
        """The slot of the n-th open worker (modulo their number)."""
        taken = [i for i, w in enumerate(self.workers) if w is not None]
        return taken[n % len(taken)]

    def _any_open(self) -> bool:
        return any(w is not None for w in self.workers)

    @initialize()
    def first_worker(self) -> None:
        self.open(0)

    @precondition(lambda self: None in self.workers)
    @rule(slot=slots)
    def open(self, slot: int) -> None:
        free = [i for i, w in enumerate(self.workers) if w is None]
        slot = free[slot % len(free)]
        w = self.pool.take()
        w.call(op="open", path=self.path, config=CONFIG, clock_ms=self.clock.now_ms)
        self.workers[slot] = w
        event("open")

    @precondition(lambda self: self._any_open())
    @rule(slot=slots)
    def close(self, slot: int) -> None:
        slot = self._pick(slot)
        w = self._open(slot)
        w.call(op="close")
        self.pool.give(w)
        self.workers[slot] = None
        event("close")

    @precondition(lambda self: self._any_open())
    @rule(slot=slots)
    def kill(self, slot: int) -> None:
        slot = self._pick(slot)
        w = self._open(slot)
        w.kill()
        self.workers[slot] = None
        event("kill idle")

    @precondition(lambda self: self._any_open())
    @rule(slot=slots, topic=topics, queue=queues, body=bodies)
    def send(self, slot: int, topic: str, queue: int, body: bytes) -> None:
        slot = self._pick(slot)
        w = self._open(slot)
        qo = w.call(op="send", topic=topic, queue=queue, body=body.hex())["qo"]
        q = self.model[(topic, queue)]
        assert qo == len(q)
        q.append(body)
        event("send")

    @precondition(lambda self: self._any_open())
    @rule(slot=slots, topic=topics, queue=queues, batch=st.lists(bodies, min_size=1, max_size=6))
    def send_batch(self, slot: int, topic: str, queue: int, batch: list[bytes]) -> None:
        slot = self._pick(slot)
        w = self._open(slot)
        qos = w.call(op="batch", topic=topic, queue=queue, bodies=[b.hex() for b in batch])["qos"]
        q = self.model[(topic, queue)]
        assert qos == list(range(len(q), len(q) + len(batch)))
        q.extend(batch)
        event("send_batch")

    @precondition(lambda self: self._any_open())
    @rule(slot=slots, topic=topics, queue=queues, offset=st.integers(0, 40), count=st.integers(1, 50))
    def consume(self, slot: int, topic: str, queue: int, offset: int, count: int) -> None:
        slot = self._pick(slot)
        w = self._open(slot)
        got = w.call(op="read", topic=topic, queue=queue, offset=offset, count=count)["bodies"]
        assert [bytes.fromhex(b) for b in got] == self.model[(topic, queue)][offset:offset + count]
        event("consume hit" if got else "consume empty")

    @precondition(lambda self: self._any_open())
    @rule(slot=slots, topic=topics, queue=queues, n=st.integers(1, 200), k=st.integers(0, 200))
    def kill_sending(self, slot: int, topic: str, queue: int, n: int, k: int) -> None:
        slot = self._pick(slot)
        w = self._open(slot)
        k = min(k, n - 1)
        self.loops += 1
        seed = self.loops
        q = self.model[(topic, queue)]
        w.send(op="loop", topic=topic, queue=queue, n=n, seed=seed)
        for i in range(k):
            assert w.reply()["qo"] == len(q)
            q.append(loop_body(seed, i))
        w.kill()
        self.workers[slot] = None
        # the store holds the acknowledged ones, then possibly some of the run's next bodies
        _, high = self.store.offsets(MessageQueue(topic, queue))
        extra = high - len(q)
        assert 0 <= extra <= n - k, (high, len(q), n, k)
        if extra:
            res = self.store.read_result(MessageQueue(topic, queue), len(q), extra)
            assert [m.body for m in res.messages] == [loop_body(seed, k + i) for i in range(extra)]
            q.extend(m.body for m in res.messages)
        event("kill sending, unacknowledged stored" if extra else "kill sending")

    @precondition(lambda self: self._any_open())
    @rule(slot=slots, topic=topics, queue=queues, body=st.binary(min_size=1, max_size=300), kind=kinds,
          level=levels, ms=offsets_ms, keys=keys, tags=tags, props=user_props)
    def send_scheduled(self, slot: int, topic: str, queue: int, body: bytes, kind: str, level: int, ms: int,
                       keys: list[str], tags: str | None, props: dict[str, str]) -> None:
        w = self._open(self._pick(slot))
        now = self.clock.now_ms
        fields, due = when(kind, level, ms, now)
        out = w.call(op="scheduled", now=now, topic=topic, queue=queue, body=body.hex(), keys=keys, tags=tags,
                     properties=props, when=fields)
        timer_id = f"L{level}:{out['qo']}" if kind == "delay_level" else str(out["qo"])
        what = self.scheduled.sent((topic, queue), now, due, (out["qo"], out["scheduled"]), body, keys, tags, props,
                                   timer_id, (out["msg_id"], out["offset_msg_id"]))
        if what == "at once":
            self.scheduled.not_timers.append(out["msg_id"])
        event(f"send_scheduled {kind}: {what}")

    @precondition(lambda self: self._any_open())
    @rule(slot=slots, how=namings, pick=st.integers(0, 10**6), key=st.sampled_from(["k1", "k2", "k3"]))
    def cancel(self, slot: int, how: str, pick: int, key: str) -> None:
        """A worker cancels a timer the model knows or an unknown id; the leader (this process)
        then never delivers a cancelled one (``advance`` checks). The answer is the model's,
        and one that changes nothing wrote nothing."""
        args, named, exact = self.scheduled.named(how, pick, key)
        out = self._open(self._pick(slot)).call(op="cancel", now=self.clock.now_ms, args=args)
        answers = [SimpleNamespace(outcome=TimerOutcome(o), id=i,
                                   timer=None if k is None else SimpleNamespace(keys=tuple(k), unique_id=u, due_ms=d))
                   for o, i, k, u, d in out["answers"]]
        wrote = self.scheduled.changed(named, exact, answers, self.clock.now_ms, None)
        assert out["wrote"] == wrote, out
        event(f"cancel by {how}: " + ",".join(sorted({a.outcome.value for a in answers})))

    @precondition(lambda self: self.scheduled.pending)
    @rule(ms=advances)
    def advance(self, ms: int) -> None:
        self.clock.advance_ms(ms)
        deliver_due(self.store)
        delivered = self.scheduled.check_delivered(self.store, self.clock.now_ms)
        event("advance: delivered" if delivered else "advance: nothing due")

    @precondition(lambda self: self._any_open())
    @rule(slot=slots, pick=st.integers(0, 10**6), retried=st.booleans(), delay=send_back_levels)
    def fail(self, slot: int, pick: int, retried: bool, delay: int) -> None:
        """A worker's consumer of the group got a message and failed it: send_back."""
        where = self.scheduled.to_fail(pick, retried)
        if where is None:
            event("fail: nothing to fail")
            return
        topic, queue, offset = where
        [m] = self.store.read_result(MessageQueue(topic, queue), offset, 1).messages
        now = self.clock.now_ms
        out = self._open(self._pick(slot)).call(
            op="send_back", now=now, topic=topic, queue=queue, offset=offset, group=GROUP, max=MAX_RECONSUME,
            delay=delay,
        )
        assert out["was"] == m.reconsume_times
        sent = (out["topic"], out["dead"], out["reconsume_times"], out["delay_level"])
        event("fail: " + self.scheduled.failed_one(self.store, where, m, delay, now, sent))

    @precondition(lambda self: self._any_open())
    @rule(slot=slots, topic=topics, queue=queues, body=st.binary(min_size=1, max_size=300),
          tid=st.sampled_from(["x0", "x1", "x2"]))
    def txn_send(self, slot: int, topic: str, queue: int, body: bytes, tid: str) -> None:
        out = self._open(self._pick(slot)).call(op="txn_send", tid=tid, topic=topic, queue=queue, body=body.hex())
        if self.txn.send_refused(tid):
            assert out == {"refused": "TransactionStateError"}, out
            event("txn_send: refused")
            return
        assert out == {"ok": True}, out
        self.txn.sent(tid, topic, queue, body)
        event("txn_send")

    @precondition(lambda self: self._any_open())
    @rule(slot=slots, ids=st.lists(st.sampled_from(["x0", "x1", "x2"]), min_size=1, max_size=3),
          commit=st.booleans(), progress=st.none() | st.sampled_from(["1", "2"]))
    def txn_end(self, slot: int, ids: list[str], commit: bool, progress: str | None) -> None:
        pair = None if progress is None else ("sink", progress)
        out = self._open(self._pick(slot)).call(op="txn_end", ids=ids, commit=commit, progress=pair)
        refusal = self.txn.refusal(ids, commit, pair)
        if refusal is not None:
            assert out == {"refused": refusal}, out
            event("txn_end: refused")
            return
        wrote, label = self.txn.decided(ids, commit, pair)
        assert out == {"wrote": wrote, "progress": self.txn.progress.get("sink")}, out
        event(label)

    @invariant()
    def offsets_match_the_model(self) -> None:
        for (topic, q), msgs in self.model.items():
            try:
                got = self.store.offsets(MessageQueue(topic, q))
            except mqlite.TopicNotFoundError:  # a retry or dead-letter topic not made yet
                got = (0, 0)
            assert got == (0, len(msgs)), (topic, q)


@pytest.fixture
def pool() -> Iterator[Pool]:
    p = Pool()
    try:
        yield p
    finally:
        p.close()


@pytest.mark.timeout(3600 if SOAK else 600)
def test_shared_writers_state_machine(pool: Pool) -> None:
    SharedWriters.pool = pool
    run_state_machine_as_test(SharedWriters, settings=settings(
        max_examples=300 if SOAK else int(os.environ.get("MQLITE_SHARED_SM_EXAMPLES", "20")),
        stateful_step_count=25,
        deadline=None,
    ))
