"""PullConsumer over many queues: where each poll starts (the rotation), fairness between queues,
wake-ups, and a steady group's rebalance doing no per-queue work."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import mqlite
from mqlite import ConsumeFromWhere, Message, MessageQueue
from mqlite.allocate import AllocateMessageQueueAveragely

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def fill(store: mqlite.Store, topic: str, queues: int, per_queue: int) -> None:
    store.create_topic(topic, queues)
    p = store.producer()
    for q in range(queues):
        for i in range(per_queue):
            p.send(Message(topic, f"{q}:{i}".encode()), queue_id=q)


def spans(batch: list[mqlite.MessageExt]) -> list[tuple[int, int]]:
    """(queue id, messages) for each run of one queue in a batch."""
    out: list[tuple[int, int]] = []
    for m in batch:
        if out and out[-1][0] == m.queue_id:
            out[-1] = (m.queue_id, out[-1][1] + 1)
        else:
            out.append((m.queue_id, 1))
    return out


def test_each_poll_starts_after_the_queue_the_previous_one_stopped_in(store: mqlite.Store) -> None:
    # Kafka's order: the queues that returned data go to the back. A poll does not start again
    # at queues the previous polls of the round emptied (reading them is wasted work, and over
    # thousands of queues it made every poll re-read most of them).
    fill(store, "rot", 6, 4)
    with store.pull_consumer("g", consume_from=FIRST, auto_commit=False) as c:
        c.subscribe("rot")
        assert spans(c.poll(0, max_messages=6)) == [(0, 4), (1, 2)]
        assert spans(c.poll(0, max_messages=6)) == [(2, 4), (3, 2)]
        assert spans(c.poll(0, max_messages=6)) == [(4, 4), (5, 2)]
        # The round is over: the queues cut short are served in order.
        assert spans(c.poll(0, max_messages=6)) == [(1, 2), (3, 2), (5, 2)]
        assert c.poll(0) == []


def test_a_queue_that_always_has_data_does_not_starve_the_others(store: mqlite.Store) -> None:
    queues = 8
    store.create_topic("busy", queues)
    p = store.producer()
    for q in range(1, queues):
        p.send(Message("busy", b"once"), queue_id=q)
    with store.pull_consumer("g", consume_from=FIRST, auto_commit=False) as c:
        c.subscribe("busy")
        served: set[int] = set()
        for _ in range(queues):  # one round: each queue with data is served once
            for _ in range(5):
                p.send(Message("busy", b"more"), queue_id=0)
            served.update(m.queue_id for m in c.poll(0, max_messages=3))
        assert served == set(range(queues))


def test_pause_and_resume_keep_the_rotation_in_place(store: mqlite.Store) -> None:
    fill(store, "pr", 4, 4)
    with store.pull_consumer("g", consume_from=FIRST, auto_commit=False) as c:
        c.subscribe("pr")
        assert spans(c.poll(0, max_messages=2)) == [(0, 2)]
        c.pause([MessageQueue("pr", 0)])
        c.resume([MessageQueue("pr", 0)])
        # Not back to queue 0: a consumer that pauses and resumes queues often (the push
        # consumer's flow control) would otherwise serve the first queues over and over.
        assert spans(c.poll(0, max_messages=2)) == [(1, 2)]


def test_poll_wakes_for_a_message_in_any_of_many_queues(store: mqlite.Store) -> None:
    queues = 500
    store.create_topic("wide", queues)
    got: list[mqlite.MessageExt] = []
    with store.pull_consumer("g", consume_from=FIRST, auto_commit=False) as c:
        c.subscribe("wide")
        assert c.poll(0) == []
        t = threading.Thread(target=lambda: got.extend(c.poll(60)))
        t.start()
        store.producer().send(Message("wide", b"late"), queue_id=queues - 1)
        t.join(30)
        assert not t.is_alive(), "poll did not wake for the message"
    assert [(m.queue_id, m.body) for m in got] == [(queues - 1, b"late")]


class CountingStrategy(AllocateMessageQueueAveragely):
    def __init__(self) -> None:
        self.calls = 0

    def allocate(
        self, group: str, client_id: str, mqs: Sequence[MessageQueue], client_ids: Sequence[str]
    ) -> list[MessageQueue]:
        self.calls += 1
        return super().allocate(group, client_id, mqs, client_ids)


def test_a_steady_group_rebalances_without_allocating_again(store: mqlite.Store) -> None:
    # Allocation is a function of the queues and the live members (strategies are
    # deterministic): while neither changes, a rebalance has no per-queue work to do.
    store.create_topic("steady", 8)
    strategy = CountingStrategy()
    with store.pull_consumer(
        "g", allocate_strategy=strategy, rebalance_interval=1e-9, auto_commit=False
    ) as a:
        a.subscribe("steady")
        assert strategy.calls == 1
        for _ in range(5):
            a.poll(0)  # each poll rebalances (the interval has always passed)
        assert strategy.calls == 1
        assert len(a.assignment()) == 8
        with store.pull_consumer("g", rebalance_interval=1e-9, auto_commit=False) as b:
            b.subscribe("steady")  # a member joined: the inputs changed
            a.poll(0)
            assert strategy.calls == 2
            assert len(a.assignment()) == 4
            b.poll(0)  # takes the queues a released
            assert sorted(a.assignment() + b.assignment()) == [
                MessageQueue("steady", i) for i in range(8)
            ]
        a.poll(0)  # b left
        assert strategy.calls == 3
        assert len(a.assignment()) == 8


def test_a_poll_reads_on_through_every_batch_of_queues(store: mqlite.Store) -> None:
    # A poll reads its queues in growing batches (16, 64, ...): messages in queues of the
    # second and third batch, under one message bound, come in one poll, in queue order.
    store.create_topic("far", 120)
    p = store.producer()
    for q in (3, 40, 110):
        p.send(Message("far", f"{q}".encode()), queue_id=q)
    with store.pull_consumer("g", consume_from=FIRST, auto_commit=False) as c:
        c.subscribe("far")
        assert [m.queue_id for m in c.poll(0, max_messages=3)] == [3, 40, 110]
        p.send(Message("far", b"late"), queue_id=119)
        assert [m.queue_id for m in c.poll(0)] == [119]
