"""A hypothesis state machine of producers and a consumer group against an in-memory model.

Members join, poll, leave cleanly or "crash" (their locks vanish with no commit, as when a
process dies). Checked after every step: no two members own a queue; every poll returns, per
queue, exactly the next offsets the model expects (so nothing is skipped, duplicated or out of
order), except that after a crash the crashed member's queues restart from their committed
offsets. At the end the group drains everything and the assignment matches RocketMQ's average
allocation over the live members.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import mqlite
from mqlite import AllocateMessageQueueAveragely, ConsumeFromWhere, Message, MessageQueue, PullConsumer

pytestmark = pytest.mark.reliability

QUEUES = 4
TOPIC = "t"


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = mqlite.open(":memory:")
        self.store.create_topic(TOPIC, QUEUES)
        self.producer = self.store.producer()
        self.sent: dict[int, list[bytes]] = {q: [] for q in range(QUEUES)}
        self.next: dict[int, int] = {q: 0 for q in range(QUEUES)}
        self.members: dict[str, PullConsumer] = {}
        self.ids = 0
        self.counter = 0

    def _new_member(self) -> None:
        cid = f"m{self.ids:03d}"
        self.ids += 1
        c = self.store.pull_consumer(
            "g", client_id=cid, rebalance_interval=0.0001, auto_commit_interval=3600,
            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        )
        c.subscribe(TOPIC)
        self.members[cid] = c

    @rule(n=st.integers(1, 12), keyed=st.booleans())
    def send(self, n: int, keyed: bool) -> None:
        for _ in range(n):
            body = str(self.counter).encode()
            key = f"k{self.counter % 5}" if keyed else None
            self.counter += 1
            r = self.producer.send(Message(TOPIC, body), sharding_key=key)
            q = r.message_queue.queue_id
            assert r.queue_offset == len(self.sent[q])
            self.sent[q].append(body)

    @precondition(lambda self: len(self.members) < 5)
    @rule()
    def join(self) -> None:
        self._new_member()

    @precondition(lambda self: bool(self.members))
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        cid = data.draw(st.sampled_from(sorted(self.members)))
        self.members.pop(cid).close()

    @precondition(lambda self: bool(self.members))
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        cid = data.draw(st.sampled_from(sorted(self.members)))
        c = self.members.pop(cid)
        owned = [mq.queue_id for mq in c.assignment()]
        assert c._member is not None
        c._member.close()  # the kernel drops a dead process's locks; nothing is committed
        c._closed = True
        committed = {p.queue_id: p.committed for p in self.store.consumer_progress("g")}
        for q in owned:
            self.next[q] = committed.get(q, 0)

    @precondition(lambda self: bool(self.members))
    @rule(data=st.data(), max_messages=st.integers(1, 10))
    def poll(self, data: st.DataObject, max_messages: int) -> None:
        cid = data.draw(st.sampled_from(sorted(self.members)))
        c = self.members[cid]
        batch = c.poll(0, max_messages)
        assert len(batch) <= max_messages
        owned = set(c.assignment())
        for m in batch:
            q = m.queue_id
            assert m.message_queue in owned
            assert m.queue_offset == self.next[q], (q, m.queue_offset, self.next[q])
            assert m.body == self.sent[q][m.queue_offset]
            self.next[q] += 1

    @invariant()
    def queues_have_one_owner(self) -> None:
        owned = [mq for c in self.members.values() for mq in c.assignment()]
        assert len(owned) == len(set(owned))

    def teardown(self) -> None:
        try:
            if not self.members:
                self._new_member()
            deadline = time.monotonic() + 10
            while True:
                for cid, c in sorted(self.members.items()):
                    for m in c.poll(0, 64):
                        q = m.queue_id
                        assert m.queue_offset == self.next[q]
                        self.next[q] += 1
                done = all(self.next[q] == len(self.sent[q]) for q in range(QUEUES))
                cids = sorted(self.members)
                mqs = [MessageQueue(TOPIC, q) for q in range(QUEUES)]
                want = {cid: AllocateMessageQueueAveragely().allocate("g", cid, mqs, cids) for cid in cids}
                if done and all(self.members[cid].assignment() == want[cid] for cid in cids):
                    break
                assert time.monotonic() < deadline, (self.next, {c: len(v) for c, v in self.sent.items()})
        finally:
            for c in self.members.values():
                c.close()
            self.store.close()


GroupMachine.TestCase.settings = settings(
    max_examples=30, stateful_step_count=20, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGroupModel = GroupMachine.TestCase
