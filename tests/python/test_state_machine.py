"""Stateful property test against an in-memory model (reliability plan B.c).

A Hypothesis ``RuleBasedStateMachine`` drives the public Python API on a store with tiny files
(commit-log rolls within a few steps) and keeps a model: per (topic, queue) the list of bodies.
Rules: send, send_batch, read (any offset and count), flush, close-and-reopen, crash-and-reopen
(a child interpreter opens the store, sends, prints its acknowledgements and SIGKILLs itself,
and the model takes exactly the acknowledged messages), and bad calls that must raise their
typed error and change nothing. After every step each queue's offsets equal the model's.

Scheduled delivery and retries run on the store's manual clock (``mqlite.testing``), so nothing
waits: ``send_scheduled`` sends with a delay level, a delay or a delivery time (a time not
after the clock's is stored at once); ``advance`` moves the clock and delivers what is due:
each queue then holds exactly the model's messages plus the newly due ones, each once, with
body, keys, tags and properties intact, stored at or after its due time (a message not due is
not there). ``fail`` sends a message a consumer read back (``PullConsumer.send_back``): it
waits its delay level and comes back on ``%RETRY%g`` with ``reconsume_times`` one higher;
after ``MAX_RECONSUME`` retries (``MAX_RECONSUME`` + 1 deliveries) it is in ``%DLQ%g`` at once.
``cancel`` names a timer the model knows (pending, delivered or cancelled; retries included) or
an unknown id, by offset id, msg id, key or key and topic: the answer is the model's
(``CANCELLED`` for a pending one, which then never arrives; ``ALREADY_DELIVERED``,
``ALREADY_CANCELLED``, ``NOT_FOUND``), and the log end moves exactly when a timer was pending.
``reschedule`` moves timers named the same way to a later time (by delay or delivery time, earlier
or later than their own): a pending one arrives at its new time, never early, once (``advance``
checks). ``list_pending``: ``list_timers`` with topic, key and due range filters is the model's
pending set (ids, keys, unique and offset ids, due times), the earliest first.

Transactions (a few ids shared by every rule): ``txn_send`` adds a half message to a transaction
(refused with ``TransactionStateError``, writing nothing, once it is decided); it is in no queue.
``txn_end`` commits or rolls back a list of ids with or without a progress value: an unknown id
or one decided the other way raises its typed error and writes nothing; deciding an id the way it
is decided writes nothing; a commit puts every half of the newly committed ids in its queue once,
in the order they were sent, and the progress reads back. ``txn_pending`` lists the open ones.
A close or crash and reopen rebuilds all of it from the log.

CI: 300 examples x 50 steps. Soak (``MQLITE_SOAK=1``): 5,000 examples.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import mqlite
from mqlite import Message, MessageQueue
from mqlite import errors as E
from mqlite.testing import ManualClock
from scheduled_model import (
    DELAY_LEVELS, GROUP, MAX_RECONSUME, RETRY, T0, ScheduledModel, advances, deliver_due, keys, kinds, levels,
    message_kwargs, offsets_ms, send_back_levels, tags, user_props, when,
)
from txn_model import TxnModel

pytestmark = pytest.mark.reliability

TOPICS = ("sa", "sb")
QUEUES = 2
CONFIG = {
    "commit_log_file_size": 64 << 10,
    "consume_queue_file_units": 64,
    "max_message_size": 8 << 10,
    "default_queues": QUEUES,
    "delay_levels": DELAY_LEVELS,
}
SOAK = os.environ.get("MQLITE_SOAK") == "1"

CRASH_CHILD = textwrap.dedent("""
    import os, signal, sys
    import mqlite
    from mqlite import Message
    from mqlite.testing import ManualClock
    path, mode, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    # The parent's time: nothing pending falls due in the child.
    store = mqlite.open(path, flush=mode, clock=ManualClock(int(sys.argv[5])), **{cfg})
    p = store.producer()
    for i in range(n):
        topic, q = ("sa", "sb")[(seed + i) % 2], (seed // 2 + i) % {queues}
        body = b"crash-%d-%d-" % (seed, i) + b"z" * ((seed * 7 + i * 13) % 3000)
        r = p.send(Message(topic, body), queue_id=q)
        os.write(1, b"%s %d %d %s\\n" % (topic.encode(), q, r.queue_offset, body.hex().encode()))
    os.kill(os.getpid(), signal.SIGKILL)
""").replace("{cfg}", repr(CONFIG)).replace("{queues}", str(QUEUES))

bodies = st.binary(min_size=1, max_size=3000)
topics = st.sampled_from(TOPICS)
RETRY_TOPIC = RETRY[0]
keys_one = st.sampled_from(["k1", "k2", "k3"])
namings = st.sampled_from(["offset id", "msg id", "key", "key and topic", "unknown id"])
queues = st.integers(0, QUEUES - 1)
txn_ids = st.sampled_from(["x0", "x1", "x2", "x3"])


class _Undecided:
    """A local transaction that never answers: the rules decide."""

    def execute_local_transaction(self, msg: Message, arg: object) -> mqlite.LocalTransactionState:
        return mqlite.LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: mqlite.MessageExt) -> mqlite.LocalTransactionState:
        return mqlite.LocalTransactionState.UNKNOW


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    pkg = str(Path(mqlite.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg, env.get("PYTHONPATH")) if p)
    return env


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="mqlite-sm-")
        self.path = os.path.join(self.dir, "store")
        self.mode = "async"
        self.model: dict[tuple[str, int], list[bytes]] = {(t, q): [] for t in TOPICS for q in range(QUEUES)}
        self.scheduled = ScheduledModel(self.model)
        self.crashes = 0
        self.clock = ManualClock(T0)
        self.store = mqlite.open(self.path, flush=self.mode, clock=self.clock, **CONFIG)
        self.producer = self.store.producer()
        self.consumer: mqlite.PullConsumer | None = None
        self.txn = TxnModel(self.model)
        self.tp: mqlite.TransactionProducer | None = None

    def _txn_producer(self) -> mqlite.TransactionProducer:
        if self.tp is None:
            self.tp = mqlite.TransactionProducer(self.store, "tg", _Undecided(), check_interval=None)
        return self.tp

    def _close(self) -> None:
        if self.tp is not None:
            self.tp.close()
            self.tp = None
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None
        self.store.close()

    def teardown(self) -> None:
        self._close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _reopen(self, mode: str) -> None:
        self.mode = mode
        self.store = mqlite.open(self.path, flush=mode, clock=self.clock, **CONFIG)
        self.producer = self.store.producer()

    @rule(topic=topics, queue=queues, body=bodies)
    def send(self, topic: str, queue: int, body: bytes) -> None:
        r = self.producer.send(Message(topic, body), queue_id=queue)
        q = self.model[(topic, queue)]
        assert r.queue_offset == len(q)
        q.append(body)
        event(f"send {self.mode}")

    @rule(topic=topics, queue=queues, batch=st.lists(bodies, min_size=1, max_size=6))
    def send_batch(self, topic: str, queue: int, batch: list[bytes]) -> None:
        r = self.producer.send_batch(batch, topic=topic, queue_id=queue)
        q = self.model[(topic, queue)]
        assert [x.queue_offset for x in r] == list(range(len(q), len(q) + len(batch)))
        q.extend(batch)
        event("send_batch")

    @rule(topic=topics, queue=queues, offset=st.integers(0, 60), count=st.integers(1, 70))
    def read(self, topic: str, queue: int, offset: int, count: int) -> None:
        want = self.model[(topic, queue)]
        res = self.store.read_result(MessageQueue(topic, queue), offset, count)
        got = [(m.queue_offset, m.body) for m in res.messages]
        assert got == [(offset + i, b) for i, b in enumerate(want[offset:offset + count])]
        event("read hit" if got else f"read {res.status}")

    @rule()
    def flush(self) -> None:
        self.store.flush()
        event("flush")

    @rule(mode=st.sampled_from(["async", "sync"]))
    def close_and_reopen(self, mode: str) -> None:
        self._close()
        self._reopen(mode)
        assert self.store.stats()["recovery_abnormal"] is False
        event("close_and_reopen")

    @precondition(lambda self: self.crashes < (3 if SOAK else 1))
    @rule(mode=st.sampled_from(["async", "sync"]), n=st.integers(0, 40), seed=st.integers(0, 10**6))
    def crash_and_reopen(self, mode: str, n: int, seed: int) -> None:
        self.crashes += 1
        self._close()
        argv = [self.path, mode, str(n), str(seed), str(self.clock.now_ms)]
        done = subprocess.run([sys.executable, "-c", CRASH_CHILD, *argv],
                              capture_output=True, timeout=60, env=_child_env(), check=False)
        assert done.returncode == -9, done.stderr.decode(errors="replace")[-2000:]
        for line in done.stdout.decode().splitlines():
            topic, q, qo, hexbody = line.split()
            model = self.model[(topic, int(q))]
            assert int(qo) == len(model), (line, len(model))
            model.append(bytes.fromhex(hexbody))
        self._reopen(mode)
        assert self.store.stats()["recovery_abnormal"] is True
        event("crash_and_reopen")


    @rule(topic=topics, queue=queues, body=st.binary(min_size=1, max_size=300), kind=kinds, level=levels,
          ms=offsets_ms, keys=keys, tags=tags, props=user_props)
    def send_scheduled(self, topic: str, queue: int, body: bytes, kind: str, level: int, ms: int,
                       keys: list[str], tags: str | None, props: dict[str, str]) -> None:
        now = self.clock.now_ms
        fields, due = when(kind, level, ms, now)
        msg = Message(topic, body, keys=keys or None, tags=tags, properties=props, **message_kwargs(fields))
        r = self.producer.send(msg, queue_id=queue)
        assert r.message_queue == MessageQueue(topic, queue)
        timer_id = f"L{level}:{r.queue_offset}" if kind == "delay_level" else str(r.queue_offset)
        what = self.scheduled.sent((topic, queue), now, due, (r.queue_offset, r.scheduled), body, keys, tags, props,
                                   timer_id, (r.msg_id, r.offset_msg_id))
        if what == "at once":
            self.scheduled.not_timers.append(r.msg_id)
        event(f"send_scheduled {kind}: {what}")

    @precondition(lambda self: self.scheduled.pending)
    @rule(ms=advances)
    def advance(self, ms: int) -> None:
        self.clock.advance_ms(ms)
        deliver_due(self.store)
        delivered = self.scheduled.check_delivered(self.store, self.clock.now_ms)
        event("advance: delivered" if delivered else "advance: nothing due")

    def _log_end(self) -> int:
        return int(self.store.stats()["commit_log_max_offset"])

    @rule(how=namings, pick=st.integers(0, 10**6), key=keys_one)
    def cancel(self, how: str, pick: int, key: str) -> None:
        """Cancel a timer the model knows (pending, delivered or cancelled) or an unknown id:
        the answer is the model's, a cancelled one never arrives (``advance`` checks), and
        an answer that changes nothing writes nothing."""
        args, named, exact = self.scheduled.named(how, pick, key)
        end = self._log_end()
        answers = self.store.cancel_timer(**args)
        wrote = self.scheduled.changed(named, exact, answers, self.clock.now_ms, None)
        assert (self._log_end() > end) == wrote, (answers, end)
        event(f"cancel by {how}: " + ",".join(sorted({a.outcome.value for a in answers})))

    @rule(how=namings, pick=st.integers(0, 10**6), key=keys_one, by_delay=st.booleans(),
          ms=st.integers(1, 40_000))
    def reschedule(self, how: str, pick: int, key: str, by_delay: bool, ms: int) -> None:
        """Move a timer earlier or later (always after now): a pending one arrives at its new
        time, never early, once (``advance`` checks); the others answer as for a cancel."""
        args, named, exact = self.scheduled.named(how, pick, key)
        now = self.clock.now_ms
        end = self._log_end()
        when = {"delay": timedelta(milliseconds=ms)} if by_delay else {"deliver_at": now + ms}
        answers = self.store.reschedule_timer(**args, **when)
        wrote = self.scheduled.changed(named, exact, answers, now, now + ms)
        assert (self._log_end() > end) == wrote, (answers, end)
        event(f"reschedule by {how}: " + ",".join(sorted({a.outcome.value for a in answers})))

    @rule(topic=st.none() | st.sampled_from([*TOPICS, RETRY_TOPIC]), key=st.none() | keys_one,
          lo=st.none() | offsets_ms, span=st.none() | st.integers(0, 40_000))
    def list_pending(self, topic: str | None, key: str | None, lo: int | None, span: int | None) -> None:
        """The listing is the model's pending timers, the earliest first."""
        now = self.clock.now_ms
        due_from = None if lo is None else now + lo
        due_to = None if span is None else (due_from if due_from is not None else now) + span
        got = self.store.list_timers(topic=topic, key=key, due_from=due_from, due_to=due_to)
        want = self.scheduled.listed(topic, key, due_from, due_to)
        assert [t.due_ms for t in got] == [p.due for p in want], (got, want)
        assert sorted((t.id, t.due_ms, t.topic, t.keys, t.tags, t.unique_id, t.offset_msg_id) for t in got) == sorted(
            (p.id, p.due, p.dest[0], p.keys, p.tags, p.unique_id, p.offset_msg_id) for p in want), (got, want)
        assert all(t.queue_id == p.dest[1] for t in got for p in want if p.id == t.id)
        event("list: some" if got else "list: none")

    @rule(pick=st.integers(0, 10**6), retried=st.booleans(), delay=send_back_levels)
    def fail(self, pick: int, retried: bool, delay: int) -> None:
        """A consumer of the group got a message and failed it: send_back."""
        where = self.scheduled.to_fail(pick, retried)
        if where is None:
            event("fail: nothing to fail")
            return
        topic, queue, offset = where
        [m] = self.store.read_result(MessageQueue(topic, queue), offset, 1).messages
        if self.consumer is None:
            self.consumer = self.store.pull_consumer(GROUP, max_reconsume_times=MAX_RECONSUME)
        now = self.clock.now_ms
        s = self.consumer.send_back(m, delay)
        sent = (s.topic, s.dead, s.reconsume_times, s.delay_level)
        event("fail: " + self.scheduled.failed_one(self.store, where, m, delay, now, sent))

    @rule(topic=topics, queue=queues, body=st.binary(min_size=1, max_size=300), tid=txn_ids)
    def txn_send(self, topic: str, queue: int, body: bytes, tid: str) -> None:
        tx = self._txn_producer().transaction(tid)
        end = self._log_end()
        if self.txn.send_refused(tid):
            with pytest.raises(E.TransactionStateError):
                tx.send(Message(topic, body), queue_id=queue)
            assert self._log_end() == end
            event("txn_send: refused")
            return
        r = tx.send(Message(topic, body), queue_id=queue)
        assert r.message_queue == MessageQueue(topic, queue)
        self.txn.sent(tid, topic, queue, body)
        event("txn_send")

    @rule(ids=st.lists(txn_ids, max_size=3), commit=st.booleans(),
          progress=st.none() | st.tuples(st.just("sink"), st.sampled_from(["1", "2", "3"])))
    def txn_end(self, ids: list[str], commit: bool, progress: tuple[str, str] | None) -> None:
        tp = self._txn_producer()
        decide = tp.commit if commit else tp.rollback
        end = self._log_end()
        refusal = self.txn.refusal(ids, commit, progress)
        if refusal is not None:
            with pytest.raises(getattr(E, refusal)):
                decide(ids, progress)
            assert self._log_end() == end
            event("txn_end: refused")
            return
        wrote = decide(ids, progress)
        expected, label = self.txn.decided(ids, commit, progress)
        assert wrote == expected
        assert (self._log_end() > end) == wrote
        assert tp.progress("sink") == self.txn.progress.get("sink")
        event(label)

    @rule()
    def txn_pending(self) -> None:
        assert sorted(t.id for t in self._txn_producer().pending()) == self.txn.open_ids()
        event("txn_pending")

    @rule(case=st.sampled_from(["empty body", "bad topic", "bad queue", "empty batch", "bad max", "neg offset",
                                "bad level", "negative delay", "delay and level"]))
    def bad_call(self, case: str) -> None:
        calls = {
            "empty body": (lambda: self.producer.send(Message("sa", b""), queue_id=0), E.InvalidMessageError),
            "bad topic": (lambda: self.producer.send(Message("../x", b"x")), E.InvalidTopicError),
            "bad queue": (lambda: self.producer.send(Message("sa", b"x"), queue_id=QUEUES), E.InvalidQueueError),
            "empty batch": (lambda: self.producer.send_batch([], topic="sa", queue_id=0), E.InvalidBatchError),
            "bad max": (lambda: self.store.read(MessageQueue("sa", 0), 0, 0), E.IllegalArgumentError),
            "neg offset": (lambda: self.store.read(MessageQueue("sa", 0), -1), E.IllegalArgumentError),
            "bad level": (lambda: self.producer.send(Message("sa", b"x", delay_level=len(DELAY_LEVELS.split()) + 1), queue_id=0),
                          E.InvalidMessageError),
            "negative delay": (lambda: self.producer.send(Message("sa", b"x", delay=-1), queue_id=0),
                               E.InvalidMessageError),
            "delay and level": (lambda: self.producer.send(Message("sa", b"x", delay=1, delay_level=1), queue_id=0),
                                E.InvalidMessageError),
        }
        call, exc = calls[case]
        with pytest.raises(exc):
            call()
        event("bad_call")

    @invariant()
    def offsets_match_the_model(self) -> None:
        for (topic, q), msgs in self.model.items():
            try:
                lo, hi = self.store.offsets(MessageQueue(topic, q))
            except E.TopicNotFoundError:
                lo, hi = 0, 0
            assert (lo, hi) == (0, len(msgs)), (topic, q)


StoreMachine.TestCase.settings = settings(
    max_examples=5000 if SOAK else int(os.environ.get("MQLITE_SM_EXAMPLES", "300")),
    stateful_step_count=50,
    deadline=None,
)
test_store_state_machine = pytest.mark.timeout(3600 if SOAK else 600)(StoreMachine.TestCase)
