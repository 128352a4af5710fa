"""Consumer groups: allocation strategies, rebalancing among thread members, broadcasting."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
from helpers import wait_until

import mqlite
from mqlite import (
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    ConsumeFromWhere,
    Message,
    MessageModel,
    MessageQueue,
    PullConsumer,
)
from mqlite.group import GroupMember, live_members

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def mqs(n: int) -> list[MessageQueue]:
    return [MessageQueue("t", i) for i in range(n)]


@pytest.mark.parametrize(
    ("queues", "clients", "sizes"),
    [(8, 3, [3, 3, 2]), (4, 4, [1, 1, 1, 1]), (2, 3, [1, 1, 0]), (5, 1, [5]), (0, 2, [0, 0])],
)
def test_averagely_matches_rocketmq(queues: int, clients: int, sizes: list[int]) -> None:
    cids = [f"c{i}" for i in range(clients)]
    strategy = AllocateMessageQueueAveragely()
    parts = [strategy.allocate("g", c, mqs(queues), cids) for c in cids]
    assert [len(p) for p in parts] == sizes
    assert [mq for p in parts for mq in p] == mqs(queues)  # contiguous blocks, in order
    assert strategy.allocate("g", "stranger", mqs(queues), cids) == []


def test_by_circle() -> None:
    cids = ["a", "b", "c"]
    strategy = AllocateMessageQueueAveragelyByCircle()
    assert [q.queue_id for q in strategy.allocate("g", "b", mqs(8), cids)] == [1, 4, 7]


def fill(store: mqlite.Store, n: int, queues: int = 6) -> None:
    store.create_topic("t", queues, exist_ok=True)
    p = store.producer()
    for i in range(n):
        p.send(Message("t", str(i).encode()))


def settle(consumers: Sequence[PullConsumer], queues: int, timeout: float = 20.0) -> None:
    """Poll every member until the assignments partition the topic's queues."""

    def partitioned() -> bool:
        for c in consumers:
            c.poll(0)
        owned = [mq for c in consumers for mq in c.assignment()]
        return sorted(owned) == mqs(queues) and all(c.assignment() for c in consumers)

    wait_until(partitioned, timeout, what=f"a partition of {queues} queues")


def test_thread_members_share_and_rebalance(store: mqlite.Store) -> None:
    fill(store, 0)
    opts = {"consume_from": FIRST, "rebalance_interval": 0.05}
    a, b, c = (store.pull_consumer("g", client_id=f"m{i}", **opts) for i in range(3))
    for m in (a, b, c):
        m.subscribe("t")
    settle([a, b, c], 6)
    assert [len(m.assignment()) for m in (a, b, c)] == [2, 2, 2]
    assert live_members(store._client_context.client_root(), "g", "t") == ["m0", "m1", "m2"]
    fill(store, 60)
    seen: list[mqlite.MessageExt] = []
    for m in (a, b, c):
        while batch := m.poll(0.05):
            seen += batch
    b.close()
    settle([a, c], 6)
    assert [len(m.assignment()) for m in (a, c)] == [3, 3]
    fill(store, 60)
    for m in (a, c):
        while batch := m.poll(0.05):
            seen += batch
    keys = [(m.queue_id, m.queue_offset) for m in seen]
    assert len(keys) == len(set(keys)) == 120  # no loss, no duplicate without a crash
    a.close()
    c.close()
    assert live_members(store._client_context.client_root(), "g", "t") == []


def test_rebalance_under_concurrent_polling_threads(store: mqlite.Store) -> None:
    fill(store, 0, queues=4)
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def member(i: int, life: float) -> None:
        with store.pull_consumer("g", client_id=f"t{i}", consume_from=FIRST, rebalance_interval=0.05) as c:
            c.subscribe("t")
            end = time.monotonic() + life
            while time.monotonic() < end and not stop.is_set():
                got = c.poll(0.02)
                with lock:
                    seen.extend((m.queue_id, m.queue_offset) for m in got)

    threads = [threading.Thread(target=member, args=(i, life)) for i, life in enumerate((60, 0.5, 60))]
    for t in threads:
        t.start()
    p = store.producer()
    for i in range(400):
        p.send(Message("t", str(i).encode()))
        if i % 50 == 0:  # spreads the sends over the members' rebalances (one leaves early)
            wait_until(lambda: len(seen) > i, what=f"message {i} consumed")
    wait_until(lambda: len(seen) >= 400, what="all 400 consumed")
    stop.set()
    for t in threads:
        t.join()
    assert sorted(seen) == sorted(set(seen)) and len(seen) == 400


def test_client_id_in_use(store: mqlite.Store) -> None:
    store.create_topic("t", 2)
    with store.pull_consumer("g", client_id="same") as a:
        a.subscribe("t")
        b = store.pull_consumer("g", client_id="same")
        with pytest.raises(mqlite.ClientIdInUseError, match="same"):
            b.subscribe("t")
        b.close()
    with store.pull_consumer("g", client_id="same") as a:  # free again once closed
        a.subscribe("t")


def test_custom_strategy_and_callbacks(store: mqlite.Store) -> None:
    fill(store, 6, queues=3)

    class Everything:
        def allocate(
            self, group: str, client_id: str, mqs: Sequence[MessageQueue], client_ids: Sequence[str]
        ) -> list[MessageQueue]:
            return list(mqs) if client_id == client_ids[0] else []

    events: list[tuple[str, list[int]]] = []
    with store.pull_consumer("g", client_id="a", allocate_strategy=Everything(), consume_from=FIRST) as c:
        c.subscribe(
            "t",
            on_assign=lambda _c, q: events.append(("assign", [m.queue_id for m in q])),
            on_revoke=lambda _c, q: events.append(("revoke", [m.queue_id for m in q])),
        )
        assert len(c.assignment()) == 3
    assert events == [("assign", [0, 1, 2]), ("revoke", [0, 1, 2])]


def test_broadcasting_every_consumer_gets_everything(store: mqlite.Store) -> None:
    fill(store, 30, queues=3)
    opts = {"message_model": MessageModel.BROADCASTING, "consume_from": FIRST}
    with store.pull_consumer("b", **opts) as x, store.pull_consumer("b", **opts) as y:
        for c in (x, y):
            c.subscribe("t")
            assert len(c.assignment()) == 3
        for c in (x, y):
            got = []
            while batch := c.poll(0.05):
                got += batch
            assert sorted(int(m.body) for m in got) == list(range(30))


def test_subscribing_one_topic_rebalances_that_topic_alone(
    store: mqlite.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Subscribing topic after topic costs in proportion to the topics, not their square: a
    subscribe looks at the new topic's members only; a periodic rebalance at every topic's once."""
    topics = [f"t{i}" for i in range(40)]
    for t in topics:
        store.create_topic(t, 2)
    looked_at: list[str] = []
    real = GroupMember.live_members

    def counting(self: GroupMember, topic: str) -> list[str]:
        looked_at.append(topic)
        return real(self, topic)

    monkeypatch.setattr(GroupMember, "live_members", counting)
    with store.pull_consumer("g", client_id="a", rebalance_interval=3600) as c:
        for t in topics:
            c.subscribe(t)
        # The first subscribe also joins the group's retry topic (empty: no queues).
        assert looked_at == [topics[0], "%RETRY%g", *topics[1:]]
        assert len(c.assignment()) == 80


def test_a_rebalance_reads_the_offsets_table_once_whatever_it_gains(store: mqlite.Store) -> None:
    topics = [f"t{i}" for i in range(40)]
    for t in topics:
        store.create_topic(t, 2)
    a = store.pull_consumer("g", client_id="a")
    b = store.pull_consumer("g", client_id="b", rebalance_interval=0.0001)
    for t in topics:
        a.subscribe(t)
    for t in topics:
        b.subscribe(t)  # its half is still a's: nothing gained yet
    assert len(a.assignment()) == 80 and b.assignment() == []
    a.close()  # every queue is free now
    reads: list[str | None] = []
    real = b._offsets.load

    def counting(group: str | None = None) -> dict[str, dict[int, int]]:
        reads.append(group)
        return real(group)

    b._offsets.load = counting  # type: ignore[method-assign]
    b.poll(timeout=0)  # one periodic rebalance: 80 queues of 40 topics gained
    assert len(b.assignment()) == 80
    assert reads == ["g"]
    b.close()
