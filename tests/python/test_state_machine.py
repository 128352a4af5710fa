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

CI: 300 examples x 50 steps. Soak (``MQLITE_SOAK=1``): 5,000 examples.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
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

pytestmark = pytest.mark.reliability

TOPICS = ("sa", "sb")
QUEUES = 2
LEVEL_MS = (1_000, 5_000, 30_000)
CONFIG = {
    "commit_log_file_size": 64 << 10,
    "consume_queue_file_units": 64,
    "max_message_size": 8 << 10,
    "default_queues": QUEUES,
    "delay_levels": "1s 5s 30s",
}
GROUP = "g"
RETRY = (f"%RETRY%{GROUP}", 0)
DLQ = (f"%DLQ%{GROUP}", 0)
MAX_RECONSUME = 1
# The manual clock's start: store timestamps and due times are exact.
T0 = 1_700_000_000_000
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
queues = st.integers(0, QUEUES - 1)
keys = st.lists(st.sampled_from(["k1", "k2", "k3"]), max_size=2, unique=True)
tags = st.sampled_from([None, "A", "B"])
user_props = st.dictionaries(st.sampled_from(["p", "q"]), st.text("xyz", min_size=1, max_size=3), max_size=2)


@dataclass
class Pending:
    """A message waiting for its time: where it goes, what it must look like there, when."""

    dest: tuple[str, int]
    due: int
    body: bytes
    keys: tuple[str, ...]
    tags: str | None
    props: dict[str, str]
    topic: str  # the topic a consumer sees (a retry's original topic)
    reconsume_times: int = 0
    origin: str = ""  # the original message's id
    extra: dict[str, str] = field(default_factory=dict)  # properties the copy must carry

    def matches(self, m: mqlite.MessageExt) -> bool:
        return (
            m.body == self.body and m.keys == self.keys and m.tags == self.tags
            and m.topic == self.topic and m.reconsume_times == self.reconsume_times
            and all(m.properties.get(k) == v for k, v in {**self.props, **self.extra}.items())
            and m.store_timestamp >= self.due  # never early
        )


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
        self.model[RETRY] = []
        self.model[DLQ] = []
        self.crashes = 0
        self.clock = ManualClock(T0)
        self.pending: list[Pending] = []
        # Per original message id: how many times a consumer got it (the original, then retries).
        self.deliveries: dict[str, int] = {}
        self.failed: set[tuple[str, int, int]] = set()
        self.store = mqlite.open(self.path, flush=self.mode, clock=self.clock, **CONFIG)
        self.producer = self.store.producer()
        self.consumer: mqlite.PullConsumer | None = None

    def _close(self) -> None:
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


    @rule(topic=topics, queue=queues, body=st.binary(min_size=1, max_size=300),
          kind=st.sampled_from(["delay_level", "delay", "deliver_at"]), level=st.integers(1, len(LEVEL_MS)),
          ms=st.integers(-2_000, 40_000), keys=keys, tags=tags, props=user_props)
    def send_scheduled(self, topic: str, queue: int, body: bytes, kind: str, level: int, ms: int,
                       keys: list[str], tags: str | None, props: dict[str, str]) -> None:
        now = self.clock.now_ms
        when: dict[str, object]
        if kind == "delay_level":
            when, due = {"delay_level": level}, now + LEVEL_MS[level - 1]
        elif kind == "delay":
            ms = max(ms, 0)
            when, due = {"delay": timedelta(milliseconds=ms)}, now + ms
        else:
            when, due = {"deliver_at": now + ms}, now + ms
        msg = Message(topic, body, keys=keys or None, tags=tags, properties=props, **when)  # type: ignore[arg-type]
        r = self.producer.send(msg, queue_id=queue)
        assert r.message_queue == MessageQueue(topic, queue)
        assert r.scheduled == (due > now), (kind, ms)
        if not r.scheduled:
            q = self.model[(topic, queue)]
            assert r.queue_offset == len(q)
            q.append(body)
            event(f"send_scheduled {kind}: at once")
            return
        self.pending.append(Pending((topic, queue), due, body, tuple(keys), tags, props, topic))
        event(f"send_scheduled {kind}")

    def _deliver_due(self) -> None:
        # Two passes at least: the delay-level pass reads its queues as dispatched, and the
        # timer pass (after it) dispatches first.
        calls, delivered = 0, 1
        while delivered or calls < 2:
            delivered = self.store.deliver_due()
            calls += 1
            assert calls < 50, "deliver_due keeps delivering"

    @rule(ms=st.sampled_from([0, 1, 999, 1_000, 4_999, 5_000, 30_000]) | st.integers(0, 40_000))
    def advance(self, ms: int) -> None:
        self.clock.advance_ms(ms)
        self._deliver_due()
        now = self.clock.now_ms
        for dest in {p.dest for p in self.pending}:
            q = self.model[dest]
            copies = self.store.read_result(MessageQueue(*dest), len(q), 1000).messages
            due = [p for p in self.pending if p.dest == dest and p.due <= now]
            assert len(copies) == len(due), (dest, now, len(copies), len(due))
            for m in copies:
                match = next((p for p in due if p.matches(m)), None)
                assert match is not None, (dest, m, due)
                due.remove(match)
                self.pending.remove(match)
                q.append(m.body)
                if dest == RETRY:
                    self.deliveries[match.origin] += 1
            event("advance: delivered" if copies else "advance: nothing due")

    def _candidates(self) -> list[tuple[str, int, int]]:
        return [(t, q, i) for (t, q), msgs in self.model.items() if (t, q) != DLQ
                for i in range(len(msgs)) if (t, q, i) not in self.failed]

    @rule(pick=st.integers(0, 10**6), retried=st.booleans(), delay=st.sampled_from([0, 1, 2]))
    def fail(self, pick: int, retried: bool, delay: int) -> None:
        """A consumer of group g got the message (a retry when ``retried`` and there is one)
        and failed it: send_back."""
        cands = self._candidates()
        retries = [c for c in cands if c[:2] == RETRY]
        cands = retries if retried and retries else cands
        if not cands:
            event("fail: nothing to fail")
            return
        topic, queue, offset = cands[pick % len(cands)]
        [m] = self.store.read_result(MessageQueue(topic, queue), offset, 1).messages
        if self.consumer is None:
            self.consumer = self.store.pull_consumer(GROUP, max_reconsume_times=MAX_RECONSUME)
        origin = m.properties.get("ORIGIN_MESSAGE_ID", m.msg_id)
        seen = self.deliveries.setdefault(origin, 1)
        assert seen == m.reconsume_times + 1
        now = self.clock.now_ms
        sent = self.consumer.send_back(m, delay)
        self.failed.add((topic, queue, offset))
        user = {k: v for k, v in m.properties.items() if k in ("p", "q")}
        if seen == MAX_RECONSUME + 1:
            # Exactly max + 1 deliveries, then the dead-letter queue, at once.
            assert (sent.topic, sent.dead) == (DLQ[0], True), sent
            q = self.model[DLQ]
            [d] = self.store.read_result(MessageQueue(*DLQ), len(q), 10).messages
            assert (d.body, d.keys, d.tags, d.properties.get("RETRY_TOPIC")) == (m.body, m.keys, m.tags, m.topic)
            assert all(d.properties.get(k) == v for k, v in user.items())
            q.append(d.body)
            event("fail: dead letter")
            return
        level = delay or min(3 + m.reconsume_times, len(LEVEL_MS))
        assert (sent.topic, sent.dead, sent.reconsume_times, sent.delay_level) == (
            RETRY[0], False, m.reconsume_times + 1, level), sent
        self.pending.append(Pending(
            RETRY, now + LEVEL_MS[level - 1], m.body, m.keys, m.tags, user, m.topic,
            reconsume_times=m.reconsume_times + 1, origin=origin, extra={"ORIGIN_MESSAGE_ID": origin},
        ))
        event(f"fail: retry {m.reconsume_times + 1}")

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
            "bad level": (lambda: self.producer.send(Message("sa", b"x", delay_level=len(LEVEL_MS) + 1), queue_id=0),
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
