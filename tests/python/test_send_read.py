"""Sending and reading back: fields, offsets, batches, queue selection, tags, statuses."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import mqlite
from helpers import read_all
from mqlite import GetMessageStatus, Message, MessageQueue, SendStatus


def test_send_read_round_trip(store: mqlite.Store) -> None:
    store.create_topic("orders", 4)
    before_ms = int(time.time() * 1000)
    r = store.producer("g1").send(
        Message("orders", b"\x00body\xff", tags="TagA", keys=["k1", "k2"],
                properties={"color": "red", "n": "1"}, flag=7)
    )
    assert r.send_status is SendStatus.SEND_OK
    assert r.message_queue.topic == "orders" and 0 <= r.message_queue.queue_id < 4
    assert r.queue_offset == 0
    assert r.msg_id and r.offset_msg_id and r.commit_log_offset >= 0

    [m] = store.read(r.message_queue, r.queue_offset, 1)
    assert (m.topic, m.body, m.tags, m.keys, m.flag) == ("orders", b"\x00body\xff", "TagA", ("k1", "k2"), 7)
    assert m.properties["color"] == "red" and m.properties["n"] == "1"
    assert m.get_property("color") == "red" and m.get_property("missing") is None
    assert (m.queue_id, m.queue_offset, m.commit_log_offset) == (
        r.message_queue.queue_id, r.queue_offset, r.commit_log_offset
    )
    assert m.message_queue == r.message_queue
    assert (m.msg_id, m.offset_msg_id) == (r.msg_id, r.offset_msg_id)
    assert m.store_size > len(m.body) and m.reconsume_times == 0
    assert before_ms - 5_000 <= m.born_timestamp <= m.store_timestamp <= int(time.time() * 1000) + 5_000


def test_single_key_string_and_no_tags(mem_store: mqlite.Store) -> None:
    r = mem_store.producer().send(Message("t", b"x", keys="only-key"))
    [m] = mem_store.read(r.message_queue, r.queue_offset, 1)
    assert m.keys == ("only-key",)
    assert m.tags is None


def test_offsets_increase_per_queue(store: mqlite.Store) -> None:
    store.create_topic("t", 4)
    producer = store.producer()
    results = [producer.send(Message("t", f"m{i}".encode())) for i in range(40)]
    per_queue: dict[int, list[int]] = {}
    for r in results:
        per_queue.setdefault(r.message_queue.queue_id, []).append(r.queue_offset)
    assert sorted(per_queue) == [0, 1, 2, 3]
    for qid, offsets in per_queue.items():
        assert offsets == list(range(len(offsets)))
        assert store.offsets(MessageQueue("t", qid)) == (0, len(offsets))
    clo = [r.commit_log_offset for r in results]
    assert clo == sorted(clo) and len(set(clo)) == len(clo)


def test_get_by_msg_id_and_commit_log_offset(store: mqlite.Store) -> None:
    producer = store.producer()
    results = [producer.send(Message("t", f"m{i}".encode(), keys=f"k{i}")) for i in range(5)]
    for i, r in enumerate(results):
        m = store.get(r.offset_msg_id)
        assert (m.body, m.keys, m.offset_msg_id) == (f"m{i}".encode(), (f"k{i}",), r.offset_msg_id)
        assert store.get_by_offset(r.commit_log_offset).body == f"m{i}".encode()
    with pytest.raises(mqlite.MessageNotFoundError) as info:
        store.get_by_offset(results[-1].commit_log_offset + 10**9)
    assert info.value.code
    with pytest.raises((mqlite.MessageNotFoundError, mqlite.IllegalArgumentError)):
        store.get("not-a-message-id")


def test_send_batch_round_trip_and_sequence(store: mqlite.Store) -> None:
    store.create_topic("t", 4)
    producer = store.producer()
    msgs = [Message("t", f"b{i}".encode(), tags="T", keys=[f"k{i}"]) for i in range(10)]
    res = producer.send_batch(msgs, queue_id=2)
    assert res.message_queue == MessageQueue("t", 2)
    assert res.send_status is SendStatus.SEND_OK
    assert len(res) == 10 and res.first_queue_offset == 0
    items = list(res)
    assert len(items) == 10
    assert [r.queue_offset for r in items] == list(range(10))
    assert [r.queue_offset for r in res] == list(range(10))
    assert res[-1].queue_offset == 9 and res[-10].queue_offset == res[0].queue_offset == 0
    assert res[3].message_queue == MessageQueue("t", 2)
    for bad in (10, -11):
        with pytest.raises(IndexError):
            res[bad]
    clo = [r.commit_log_offset for r in items]
    assert clo == sorted(clo) and len(set(clo)) == 10
    assert len({r.msg_id for r in items}) == 10
    read = store.read(MessageQueue("t", 2), 0, 32)
    assert [m.body for m in read] == [m.body for m in msgs]
    assert [m.keys for m in read] == [(f"k{i}",) for i in range(10)]
    assert [m.offset_msg_id for m in read] == [r.offset_msg_id for r in items]

    again = producer.send_batch(msgs[:3], queue_id=2)
    assert again.first_queue_offset == 10 and [r.queue_offset for r in again] == [10, 11, 12]
    assert store.offsets(MessageQueue("t", 2)) == (0, 13)


def test_send_batch_of_bodies_and_generators(mem_store: mqlite.Store) -> None:
    producer = mem_store.producer()
    res = producer.send_batch([b"a", b"b", b"c"], topic="raw")
    got = mem_store.read(res.message_queue, res.first_queue_offset, 32)
    assert [(m.topic, m.body, m.tags) for m in got] == [("raw", b"a", None), ("raw", b"b", None),
                                                        ("raw", b"c", None)]
    res2 = producer.send_batch((Message("raw", bytes([i + 1])) for i in range(4)), queue_id=0)
    assert len(res2) == 4 and res2.message_queue == MessageQueue("raw", 0)


def test_round_robin_over_write_queues(store: mqlite.Store) -> None:
    store.create_topic("rr", 4)
    producer = store.producer()
    qids = [producer.send(Message("rr", b"x")).message_queue.queue_id for _ in range(12)]
    assert all(b == (a + 1) % 4 for a, b in zip(qids, qids[1:]))
    assert sorted(qids) == sorted(list(range(4)) * 3)


def test_explicit_queue_id(store: mqlite.Store) -> None:
    store.create_topic("q", 4)
    producer = store.producer()
    results = [producer.send(Message("q", f"{i}".encode()), queue_id=3) for i in range(5)]
    assert {r.message_queue for r in results} == {MessageQueue("q", 3)}
    assert [r.queue_offset for r in results] == [0, 1, 2, 3, 4]
    for qid in range(3):
        assert store.offsets(MessageQueue("q", qid)) == (0, 0)


def test_tag_filtering(store: mqlite.Store) -> None:
    store.create_topic("tags", 1)
    producer = store.producer()
    cycle = ["TagA", "TagB", "TagC", None]
    for i in range(12):
        producer.send(Message("tags", f"{i}".encode(), tags=cycle[i % 4]))
    mq = MessageQueue("tags", 0)
    ab = store.read(mq, 0, 32, tags="TagA || TagB")
    assert [m.tags for m in ab] == ["TagA", "TagB"] * 3
    assert [int(m.body) for m in ab] == [0, 1, 4, 5, 8, 9]
    assert [m.queue_offset for m in ab] == [0, 1, 4, 5, 8, 9]
    assert [int(m.body) for m in store.read(mq, 0, 32, tags=["TagC"])] == [2, 6, 10]
    assert len(store.read(mq, 0, 32, tags="*")) == 12
    assert len(store.read(mq, 0, 32)) == 12
    assert [int(m.body) for m in read_all(store, mq, tags="TagB")] == [1, 5, 9]
    none = store.read_result(mq, 0, 32, tags="Nope")
    assert none.messages == [] and none.status == GetMessageStatus.NO_MATCHED_MESSAGE
    assert none.next_offset > 0


def test_read_statuses_and_limits(store: mqlite.Store) -> None:
    store.create_topic("s", 1)
    mq = MessageQueue("s", 0)
    empty = store.read_result(mq, 0)
    assert empty.status == GetMessageStatus.NO_MESSAGE_IN_QUEUE and empty.messages == []
    producer = store.producer()
    for i in range(3):
        producer.send(Message("s", bytes([65 + i])))
    found = store.read_result(mq, 0)
    assert GetMessageStatus(found.status) is GetMessageStatus.FOUND
    assert (found.next_offset, found.min_offset, found.max_offset) == (3, 0, 3)
    assert [m.body for m in found.messages] == [b"A", b"B", b"C"]
    assert [m.body for m in store.read(mq, 1, 1)] == [b"B"]
    assert [m.body for m in store.read(mq, 0, 2)] == [b"A", b"B"]
    one = store.read_result(mq, 3)
    assert one.status == GetMessageStatus.OFFSET_OVERFLOW_ONE and one.next_offset == 3
    assert store.read_result(mq, 10).status == GetMessageStatus.OFFSET_OVERFLOW_BADLY
    with pytest.raises(TypeError):
        store.read(("s", 0), 0)  # type: ignore[arg-type]


def test_topics_and_queues(store: mqlite.Store) -> None:
    store.create_topic("orders", 3, perm=6, order=True)
    store.create_topic("orders", 3)  # exist_ok
    store.create_topic("audit", 1, perm=4)
    topics = {t.name: t for t in store.topics()}
    assert topics["orders"] == mqlite.TopicConfig("orders", 3, 3, 6, True)
    assert topics["audit"] == mqlite.TopicConfig("audit", 1, 1, 4, False)
    assert not topics["audit"].writable
    assert store.queues("orders") == [MessageQueue("orders", i) for i in range(3)]
    with pytest.raises(mqlite.MQClientError):
        store.create_topic("orders", 3, exist_ok=False)


def test_update_topic_grows_a_topic_and_never_shrinks_it(
    store: mqlite.Store, store_path, caplog: pytest.LogCaptureFixture
) -> None:
    store.create_topic("grow", 2)
    with caplog.at_level(logging.WARNING, logger="mqlite.store"):
        store.create_topic("grow", 4)  # exist_ok: left as it is, but said
    assert "update_topic('grow', queues=4)" in caplog.text
    assert store.queues("grow") == [MessageQueue("grow", i) for i in range(2)]

    assert store.update_topic("grow", queues=4) == mqlite.TopicConfig("grow", 4, 4, 6, False)
    assert store.update_topic("grow", queues=4).read_queues == 4  # the same count: no change
    p = store.producer()
    assert p.send(Message("grow", b"q3"), queue_id=3).message_queue == MessageQueue("grow", 3)
    # Round robin covers the new queues at once.
    sent = {p.send(Message("grow", b"rr")).message_queue.queue_id for _ in range(4)}
    assert sent == {0, 1, 2, 3}
    assert [m.body for m in store.read(MessageQueue("grow", 3), 0, 1)] == [b"q3"]

    with pytest.raises(mqlite.IllegalArgumentError, match="cannot shrink"):
        store.update_topic("grow", queues=3)
    with pytest.raises(mqlite.IllegalArgumentError, match="1024"):
        store.update_topic("grow", queues=1025)
    with pytest.raises(mqlite.TopicNotFoundError):
        store.update_topic("no-such-topic", queues=8)
    with pytest.raises(TypeError):
        store.update_topic("grow", queues=True)
    with pytest.raises(mqlite.InvalidTopicError):
        store.update_topic("SCHEDULE_TOPIC_XXXX", queues=8)
    assert len(store.queues("grow")) == 4
    store.close()
    with mqlite.open(store_path) as again:
        assert len(again.queues("grow")) == 4


def test_a_consumer_picks_up_the_queues_a_topic_grows(store: mqlite.Store) -> None:
    store.create_topic("grow", 1)
    with store.pull_consumer("g", rebalance_interval=0.05,
                             consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) as c:
        c.subscribe("grow")
        assert c.assignment() == [MessageQueue("grow", 0)]
        store.update_topic("grow", queues=3)
        store.producer().send(Message("grow", b"new"), queue_id=2)
        # The poll waits for the message and rebalances meanwhile: its arrival is the event.
        got: list[mqlite.MessageExt] = []
        for _ in range(100):
            got = c.poll(10)
            if got:
                break
        assert [(m.body, m.queue_id) for m in got] == [(b"new", 2)]
        assert len(c.assignment()) == 3


def test_auto_created_topic_uses_default_queues(store: mqlite.Store) -> None:
    r = store.producer().send(Message("auto", b"x"))
    assert r.message_queue.topic == "auto"
    assert len(store.queues("auto")) == 4
    assert "auto" in [t.name for t in store.topics()]


def test_offset_for_timestamp(store: mqlite.Store) -> None:
    store.create_topic("ts", 1)
    mq = MessageQueue("ts", 0)
    producer = store.producer()
    for _ in range(3):
        producer.send(Message("ts", b"x"))
    assert store.offset_for_timestamp(mq, datetime.now() - timedelta(days=1)) == 0
    assert store.offset_for_timestamp(mq, 0) == 0
    assert 0 <= store.offset_for_timestamp(mq, int(time.time() * 1000) + 3_600_000) <= 3
    with pytest.raises(TypeError):
        store.offset_for_timestamp(mq, "yesterday")  # type: ignore[arg-type]


def test_wait_for(store: mqlite.Store) -> None:
    store.create_topic("w", 1)
    mq = MessageQueue("w", 0)
    producer = store.producer()
    producer.send(Message("w", b"first"))
    assert store.wait_for({mq: 0}, timeout=5) is True
    assert store.wait_for({mq: 1}, timeout=0.05) is False  # nothing at 1: the timeout ends it

    # A send made while the wait is under way ends it: the waiter runs in a thread and the
    # send is made once that thread has started, long before the generous timeout.
    result: list[bool] = []
    started = threading.Event()

    def wait() -> None:
        started.set()
        result.append(store.wait_for([(mq, 1)], timeout=60))

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert started.wait(20)
    producer.send(Message("w", b"second"))
    waiter.join(60)
    assert result == [True]
    assert [m.body for m in store.read(mq, 1)] == [b"second"]


@pytest.mark.perf
def test_wait_for_waits_out_its_timeout(store: mqlite.Store) -> None:
    """The timing bar of ``test_wait_for``: with nothing to wait for, ``wait_for`` returns False
    only after its timeout (0.2 s, at least 0.15 s measured)."""
    store.create_topic("w", 1)
    mq = MessageQueue("w", 0)
    start = time.monotonic()
    assert store.wait_for({mq: 0}, timeout=0.2) is False
    assert time.monotonic() - start >= 0.15


def test_flush_and_stats(store: mqlite.Store) -> None:
    store.producer().send(Message("t", b"x"))
    store.flush()
    stats = store.stats()
    assert isinstance(stats, dict) and stats


def test_sync_flush_mode(store_path: Path) -> None:
    with mqlite.open(store_path, flush="sync") as s:
        r = s.producer().send(Message("t", b"durable"))
        assert r.send_status is SendStatus.SEND_OK
        assert s.read(r.message_queue, r.queue_offset)[0].body == b"durable"
