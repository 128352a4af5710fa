"""Consumers bound the bytes they hold, not only the count: big messages cannot take a consumer's
memory to many times its bound (a poll of 32 messages of 4 MiB was 128 MiB). Scaled down to
messages of 1 MiB and bounds of 4 MiB (the ratio of the defaults: four messages of the largest
size per bound) so that a debug build runs it in about a second.

The bound is checked on the consumers' own counters (``buffered_bytes``, ``peak_buffered_bytes``)
and, independently, from how far the consumer's fetch positions ran ahead of what its listener
had finished (which needs no counter and would catch a counter that under-counts).
"""

from __future__ import annotations

import threading

import mqlite
from mqlite import ConsumeFromWhere, ConsumeStatus, MessageQueue

MIB = 1 << 20
BIG = MIB - 4096  # a record of just under 1 MiB
BOUND = 4 * MIB


def _fill(store: mqlite.Store, topic: str, count: int, queues: int) -> None:
    store.create_topic(topic, queues=queues)
    producer = store.producer()
    for i in range(count):
        producer.send(mqlite.Message(topic, bytes([i % 256]) * BIG), queue_id=i % queues)


def test_push_consumer_holds_at_most_max_buffered_bytes() -> None:
    count, queues = 32, 2
    with mqlite.open(":memory:") as store:
        _fill(store, "big", count, queues)
        consumer = store.push_consumer(
            "g", threads=4, max_buffered_bytes=BOUND,
            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        )
        bound = BOUND
        lock = threading.Lock()
        seen: list[tuple[int, int]] = []
        finished = 0  # listener calls returned (a message is acknowledged after its return)
        ahead: list[int] = []  # messages fetched and not yet returned, at each call
        held: list[int] = []  # consumer.buffered_bytes at each call
        record = 0
        bad: list[int] = []
        done = threading.Event()

        def listener(msgs: list[mqlite.MessageExt]) -> ConsumeStatus:
            nonlocal finished, record
            cursors = consumer._consumer._queues.values()
            fetched = sum(c.position for c in cursors)
            with lock:
                ahead.append(fetched - finished)
                held.append(consumer.buffered_bytes)
                for m in msgs:
                    i = m.queue_offset * queues + m.queue_id
                    if len(m.body) != BIG or m.body[0] != i % 256:
                        bad.append(i)
                    seen.append((m.queue_id, m.queue_offset))
                    record = m.store_size
                finished += len(msgs)
                if len(seen) == count:
                    done.set()
            return ConsumeStatus.CONSUME_SUCCESS

        consumer.subscribe("big")
        consumer.register_message_listener(listener)
        consumer.start()
        try:
            assert done.wait(60), f"consumed {len(seen)} of {count}"
        finally:
            consumer.shutdown()
    assert sorted(seen) == sorted((i % queues, i // queues) for i in range(count))
    assert not bad
    assert consumer.peak_buffered_bytes <= bound, consumer.peak_buffered_bytes
    assert consumer.peak_buffered_bytes >= record  # it did hold messages
    assert max(held) <= bound, max(held)
    # Independent of the counter: what was fetched and not yet finished fits in the bound.
    assert max(ahead) * record <= bound, (max(ahead), record)
    assert consumer.buffered_bytes == 0


def test_push_consumer_delivers_a_message_larger_than_its_bound_alone() -> None:
    with mqlite.open(":memory:") as store:
        _fill(store, "big", 6, 1)
        consumer = store.push_consumer(
            "g", threads=2, max_buffered_bytes=256 << 10,
            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        )
        seen: list[int] = []
        held: list[int] = []
        done = threading.Event()

        def listener(msgs: list[mqlite.MessageExt]) -> ConsumeStatus:
            held.append(consumer.buffered_bytes)
            seen.extend(m.queue_offset for m in msgs)
            if len(seen) == 6:
                done.set()
            return ConsumeStatus.CONSUME_SUCCESS

        consumer.subscribe("big")
        consumer.register_message_listener(listener)
        consumer.start()
        try:
            assert done.wait(60), seen
        finally:
            consumer.shutdown()
    assert sorted(seen) == list(range(6))
    # Each message is over the bound: the consumer holds one at a time.
    assert consumer.peak_buffered_bytes < 2 * BIG
    assert all(h < 2 * BIG for h in held), held


def test_pull_poll_returns_at_most_max_poll_bytes() -> None:
    with mqlite.open(":memory:") as store:
        _fill(store, "big", 10, 2)
        with store.pull_consumer(
            "g", max_poll_bytes=BOUND, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        ) as consumer:
            consumer.subscribe("big")
            polls: list[list[mqlite.MessageExt]] = []
            while sum(map(len, polls)) < 10:
                got = consumer.poll(10)
                assert got, "a poll timed out with messages left"
                polls.append(got)
            sizes = [sum(m.store_size for m in p) for p in polls]
            assert max(sizes) <= BOUND, sizes
            assert max(map(len, polls)) == 4, sizes  # the bound, not the count (32), limits
            got_ids = sorted((m.queue_id, m.queue_offset) for p in polls for m in p)
            assert got_ids == sorted((i % 2, i // 2) for i in range(10))

        # A bound below one message: one message per poll, none skipped, in queue order.
        with store.pull_consumer(
            "h", max_poll_bytes=1024, consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        ) as consumer:
            consumer.assign([MessageQueue("big", 0)])
            offsets = []
            for _ in range(5):
                got = consumer.poll(10)
                assert len(got) == 1
                offsets.append(got[0].queue_offset)
            assert offsets == list(range(5))


def test_default_bounds_are_16_mib() -> None:
    import inspect

    for cls, name in ((mqlite.PushConsumer, "max_buffered_bytes"), (mqlite.PullConsumer, "max_poll_bytes")):
        assert inspect.signature(cls).parameters[name].default == 16 * MIB
