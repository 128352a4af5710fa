"""Retry and dead letters: a push consumer sends a failed message back to ``%RETRY%<group>``
(the store delivers it there after its delay level) and consumes it again with its original
topic, keys and a growing ``reconsume_times``; past ``max_reconsume_times``, or when the
listener asks, it goes to ``%DLQ%<group>``. The store's delay table is "1s" here, so every
retry waits one second (the automatic level is capped at the table's last level)."""

from __future__ import annotations

import base64
import io
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import mqlite
from mqlite import ConsumeFromWhere, ConsumeOrderlyStatus, ConsumeStatus, Message, MessageExt, MessageQueue, ReconsumeLater
from mqlite.attempts import AttemptFile
from mqlite.errors import IllegalArgumentError, InvalidConfigError, InvalidMessageError

from helpers import wait_until

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


@pytest.fixture
def fast_store(tmp_path: Path):
    s = mqlite.open(tmp_path / "s", delay_levels="1s")
    try:
        yield s
    finally:
        s.close()


def _committed(store: mqlite.Store, mq: MessageQueue, group: str = "g") -> int | None:
    for p in store.consumer_progress(group):
        if p.message_queue == mq:
            return p.committed
    return None


def _topic_messages(store: mqlite.Store, topic: str) -> list[MessageExt]:
    if topic not in {t.name for t in store.topics()}:
        return []
    return store.read_result(MessageQueue(topic, 0), 0, 100).messages


def test_a_failed_message_comes_back_from_the_retry_topic_and_the_offset_moves_past(
    fast_store: mqlite.Store,
) -> None:
    store = fast_store
    store.create_topic("t", 1)
    store.producer().send(Message("t", b"m", keys=["k1"], tags="A"))
    seen: list[tuple[str, str, bytes, tuple[str, ...], int, str | None]] = []
    again = threading.Event()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        m = msgs[0]
        seen.append((m.topic, m.message_queue.topic, m.body, m.keys, m.reconsume_times,
                     m.get_property("MQLITE_ERROR_TYPE")))
        if len(seen) == 1:
            raise ValueError("bad input")
        again.set()
        return ConsumeStatus.CONSUME_SUCCESS

    c = store.push_consumer("g", consume_from=FIRST, threads=1, commit_interval=0.05, retry_delay=60)
    c.subscribe("t")
    c.register_message_listener(listener)
    with c:
        assert again.wait(10), "the sent-back message was not consumed again"
        # The original counts as consumed: the committed offset of its queue passes it.
        wait_until(lambda: _committed(store, MessageQueue("t", 0)) == 1, what="offset past the original")
    assert seen == [
        ("t", "t", b"m", ("k1",), 0, None),
        ("t", "%RETRY%g", b"m", ("k1",), 1, "ValueError"),
    ]
    (copy,) = _topic_messages(store, "%RETRY%g")
    assert copy.get_property("MQLITE_ERROR") == "bad input"
    assert copy.get_property("RETRY_TOPIC") == "t"
    assert copy.get_property("ORIGIN_MESSAGE_ID") == copy.msg_id
    assert _topic_messages(store, "%DLQ%g") == []


def test_past_max_reconsume_times_the_message_goes_straight_to_the_dlq(fast_store: mqlite.Store) -> None:
    store = fast_store
    store.create_topic("t", 1)
    store.producer().send(Message("t", b"poison"))
    calls: list[int] = []

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        calls.append(msgs[0].reconsume_times)
        raise RuntimeError("always")

    c = store.push_consumer("g", consume_from=FIRST, threads=1, commit_interval=0.05,
                            max_reconsume_times=1, retry_delay=60)
    c.subscribe("t")
    c.register_message_listener(listener)
    with c:
        wait_until(lambda: len(_topic_messages(store, "%DLQ%g")) == 1, what="the message in the DLQ")
        wait_until(lambda: _committed(store, MessageQueue("%RETRY%g", 0)) == 1, what="retry offset")
    # max 1: the first delivery and one retry, then the DLQ (never through the delay topic).
    assert calls == [0, 1]
    (dead,) = _topic_messages(store, "%DLQ%g")
    assert (dead.body, dead.reconsume_times) == (b"poison", 2)
    assert dead.get_property("MQLITE_ERROR_TYPE") == "RuntimeError"
    assert dead.get_property("RETRY_TOPIC") == "t"
    assert _committed(store, MessageQueue("t", 0)) == 1


def test_a_listener_sends_to_the_dlq_at_once_or_chooses_the_level(fast_store: mqlite.Store) -> None:
    store = fast_store
    store.create_topic("t", 1)
    p = store.producer()
    p.send(Message("t", b"dead"))
    p.send(Message("t", b"bad-level"))
    done = threading.Event()
    seen: list[tuple[bytes, int]] = []

    def listener(msgs: list[MessageExt]) -> ConsumeStatus | ReconsumeLater:
        m = msgs[0]
        seen.append((m.body, m.reconsume_times))
        if m.body == b"dead":
            return ReconsumeLater(dead=True)
        if m.reconsume_times == 0:
            return ReconsumeLater(delay_level=7)  # not in the table: the automatic level is used
        done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    c = store.push_consumer("g", consume_from=FIRST, threads=1, commit_interval=0.05, retry_delay=60)
    c.subscribe("t")
    c.register_message_listener(listener)
    with c:
        assert done.wait(10)
    assert [m.body for m in _topic_messages(store, "%DLQ%g")] == [b"dead"]
    assert sorted(seen) == [(b"bad-level", 0), (b"bad-level", 1), (b"dead", 0)]


def test_reconsume_later_refuses_bad_values_and_the_mark_cannot_be_forged(store: mqlite.Store) -> None:
    with pytest.raises(TypeError):
        ReconsumeLater("3")  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError):
        ReconsumeLater(-1)
    store.create_topic("t", 1)
    with pytest.raises(InvalidMessageError):
        store.producer().send(Message("t", b"x", properties={"MQLITE_SEND_BACK": "%DLQ%g"}))


# -- PullConsumer.send_back ---------------------------------------------------------------------


def _poll_until(c: mqlite.PullConsumer, what: str) -> list[MessageExt]:
    got: list[MessageExt] = []
    wait_until(lambda: got.extend(c.poll(0.05)) or bool(got), what=what)
    return got


def test_pull_send_back_returns_the_message_through_the_retry_topic(fast_store: mqlite.Store) -> None:
    store = fast_store
    store.create_topic("t", 1)
    store.producer().send(Message("t", b"m", keys=["k1"]))
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t")
        assert "%RETRY%g" in c.subscription()
        (m,) = _poll_until(c, "the message")
        sent = c.send_back(m, error=KeyError("no such row"))
        assert sent == mqlite.SentBack("%RETRY%g", False, 1, 1)
        c.commit()
        (again,) = _poll_until(c, "the retried message")
        assert (again.topic, again.message_queue, again.body, again.keys, again.reconsume_times) == (
            "t", MessageQueue("%RETRY%g", 0), b"m", ("k1",), 1)
        assert again.get_property("MQLITE_ERROR_TYPE") == "KeyError"
        assert again.get_property("MQLITE_ERROR") == "'no such row'"
        assert again.get_property("ORIGIN_MESSAGE_ID") == m.msg_id
        # A retry sent back again keeps its first topic and id.
        assert c.send_back(again, 1, error="still bad").reconsume_times == 2
        c.commit()
    assert _committed(store, MessageQueue("t", 0)) == 1
    assert _committed(store, MessageQueue("%RETRY%g", 0)) == 1
    copies = _topic_messages(store, "%RETRY%g")
    assert [(x.reconsume_times, x.get_property("ORIGIN_MESSAGE_ID")) for x in copies] == [(1, m.msg_id)]


def test_pull_send_back_dead_or_past_the_maximum_goes_to_the_dlq(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    p = store.producer()
    p.send(Message("t", b"a"))
    p.send(Message("t", b"b"))
    with store.pull_consumer("g", consume_from=FIRST, max_reconsume_times=0) as c:
        assert c.max_reconsume_times == 0
        c.subscribe("t")
        got = _poll_until(c, "the messages")
        assert [m.body for m in got] == [b"a", b"b"]
        assert c.send_back(got[0], 2).dead  # the maximum, 0, is reached: the level is ignored
    with store.pull_consumer("g2", consume_from=FIRST) as c2:
        c2.subscribe("t")
        got2 = _poll_until(c2, "the messages")
        assert c2.send_back(got2[1], dead=True) == mqlite.SentBack("%DLQ%g2", True, 1, 0)
    assert [m.body for m in _topic_messages(store, "%DLQ%g")] == [b"a"]
    assert [m.body for m in _topic_messages(store, "%DLQ%g2")] == [b"b"]
    assert _topic_messages(store, "%RETRY%g") == [] and _topic_messages(store, "%RETRY%g2") == []


def test_pull_send_back_refuses_bad_arguments_and_writes_nothing(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    store.producer().send(Message("t", b"a"))
    with pytest.raises(InvalidConfigError):
        store.pull_consumer("g", max_reconsume_times=-1)
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t")
        (m,) = _poll_until(c, "the message")
        for bad in ("3", -1, True, 1.5):
            with pytest.raises(IllegalArgumentError):
                c.send_back(m, bad)  # type: ignore[arg-type]
        with pytest.raises(IllegalArgumentError):
            c.send_back(b"a")  # type: ignore[arg-type]
        with pytest.raises(IllegalArgumentError):
            c.send_back(m, error=3)  # type: ignore[arg-type]
        with pytest.raises(InvalidMessageError):
            c.send_back(m, 99)  # the store's delay table has no level 99
    assert _topic_messages(store, "%RETRY%g") == [] and _topic_messages(store, "%DLQ%g") == []
    c.close()
    with pytest.raises(mqlite.ClientClosedError):
        c.send_back(m)


def test_pull_unsubscribing_the_last_topic_drops_the_retry_subscription(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    store.create_topic("u", 1)
    with store.pull_consumer("g") as c:
        c.subscribe("t")
        c.subscribe("u")
        c.unsubscribe("t")
        assert set(c.subscription()) == {"u", "%RETRY%g"}
        c.unsubscribe("u")
        assert c.subscription() == {}


# -- orderly consumers ----------------------------------------------------------------------------


def _orderly(store: mqlite.Store, listener: object, **options: object) -> mqlite.PushConsumer:
    settings: dict[str, object] = {"suspend_time": 0.01, **options}
    c = store.push_consumer("g", orderly=True, consume_from=FIRST, threads=1, batch_size=1,
                            commit_interval=0.05, **settings)
    c.subscribe("t")
    c.register_message_listener(listener)  # type: ignore[arg-type]
    return c


def test_orderly_poison_message_goes_to_the_dlq_after_the_maximum_and_the_queue_moves_on(
    store: mqlite.Store,
) -> None:
    store.create_topic("t", 1)
    p = store.producer()
    for body in (b"a", b"poison", b"c"):
        p.send(Message("t", body))
    seen: list[bytes] = []
    finished = threading.Event()

    def listener(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        seen.append(msgs[0].body)
        if msgs[0].body == b"poison":
            raise ValueError("cannot parse")
        if msgs[0].body == b"c":
            finished.set()
        return ConsumeOrderlyStatus.SUCCESS

    with _orderly(store, listener, max_reconsume_times=2):
        assert finished.wait(10), "the queue did not move past the poison message"
        wait_until(lambda: _committed(store, MessageQueue("t", 0)) == 3, what="offset past the queue")
    # The first delivery and two retries, then the DLQ; the order of the queue is kept.
    assert seen == [b"a", b"poison", b"poison", b"poison", b"c"]
    (dead,) = _topic_messages(store, "%DLQ%g")
    assert dead.body == b"poison" and dead.get_property("MQLITE_ERROR_TYPE") == "ValueError"
    assert dead.get_property("RETRY_TOPIC") == "t"
    # The counts of consumed messages are dropped.
    assert AttemptFile(Path(store.path), "g").counts(MessageQueue("t", 0)) == {}


def test_orderly_failure_counts_survive_a_restart(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    store.producer().send(Message("t", b"poison"))
    calls: list[int] = []
    failed_once = threading.Event()

    def listener(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        calls.append(msgs[0].queue_offset)
        failed_once.set()
        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT

    # A long suspension: the first consumer fails the message once and stops.
    with _orderly(store, listener, max_reconsume_times=2, suspend_time=3600):
        assert failed_once.wait(10)
        wait_until(lambda: AttemptFile(Path(store.path), "g").counts(MessageQueue("t", 0)) == {0: 1},
                   what="the failure counted")
    assert calls == [0]
    with _orderly(store, listener, max_reconsume_times=2):
        wait_until(lambda: len(_topic_messages(store, "%DLQ%g")) == 1, what="the message in the DLQ")
    # max 2: three deliveries in all, across the two consumers.
    assert calls == [0, 0, 0]


def test_orderly_without_send_back_suspends_and_counts_nothing(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    store.producer().send(Message("t", b"x"))
    calls: list[int] = []
    third = threading.Event()

    def listener(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        calls.append(1)
        if len(calls) == 3:
            third.set()
            return ConsumeOrderlyStatus.SUCCESS
        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT

    with _orderly(store, listener, max_reconsume_times=0, send_back=False):
        assert third.wait(10)
    assert _topic_messages(store, "%DLQ%g") == []
    assert not AttemptFile(Path(store.path), "g").path.exists()


# -- max_poll_interval ----------------------------------------------------------------------------


def test_a_member_that_stops_polling_gives_its_queues_up_and_takes_them_back(
    store: mqlite.Store, caplog: pytest.LogCaptureFixture
) -> None:
    store.create_topic("t", 2)
    p = store.producer()
    a = store.pull_consumer("g", client_id="a", consume_from=FIRST, max_poll_interval=0.2,
                            rebalance_interval=0.01)
    b = store.pull_consumer("g", client_id="b", consume_from=FIRST, rebalance_interval=0.01,
                            max_poll_interval=None)
    with a, b:
        a.subscribe("t")
        b.subscribe("t")
        wait_until(lambda: (a.poll(0.01), b.poll(0.01)) and len(a.assignment()) == 1
                   and len(b.assignment()) == 1, what="the queues split")
        mine = a.assignment()[0]
        b_seen: list[bytes] = []
        for q in (0, 1):
            p.send(Message("t", f"m{q}".encode()), q)
        # a polls its queue's message, then stops polling: "stuck" in its handler.
        got = _poll_until(a, "a's message")
        assert [m.message_queue for m in got] == [mine]
        with caplog.at_level("WARNING", logger="mqlite.consumer"):
            wait_until(lambda: b_seen.extend(m.body for m in b.poll(0.01)) or mine in b.assignment(),
                       what="b takes a's queue")
            assert a.assignment() == []
            # The message a was handling counts as not consumed: b gets it.
            wait_until(lambda: b_seen.extend(m.body for m in b.poll(0.01)) or got[0].body in b_seen,
                       what="a's unconsumed message at b")
        assert any("max_poll_interval" in r.getMessage() for r in caplog.records)
        # a polls again: it rejoins and the group splits the queues again.
        wait_until(lambda: (a.poll(0.01), b.poll(0.01)) and len(a.assignment()) == 1
                   and len(b.assignment()) == 1, what="a takes its share back")


def test_max_poll_interval_is_checked(store: mqlite.Store) -> None:
    for bad in (0, -1, "1", True):
        with pytest.raises(InvalidConfigError):
            store.pull_consumer("g", max_poll_interval=bad)


# -- DLQ tooling ----------------------------------------------------------------------------------


def _dead_letters(store: mqlite.Store) -> dict[bytes, str]:
    """Sends a1 (key k1), a2 (k2) of topic a and b1 (k1) of topic b to group g's DLQ; returns
    each body's origin message id."""
    store.create_topic("a", 1)
    store.create_topic("b", 1)
    p = store.producer()
    ids = {}
    for topic, body, key in (("a", b"a1", "k1"), ("a", b"a2", "k2"), ("b", b"b1", "k1")):
        ids[body] = p.send(Message(topic, body, keys=[key], tags="T", properties={"user": "u"})).msg_id
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("a")
        c.subscribe("b")
        got: list[MessageExt] = []
        wait_until(lambda: got.extend(c.poll(0.05)) or len(got) == 3, what="the messages")
        for m in got:
            assert c.send_back(m, dead=True, error=ValueError(f"bad {m.body.decode()}")).dead
    return ids


def test_dlq_lists_inspects_and_exports_filtered_by_origin_topic(store: mqlite.Store, tmp_path: Path) -> None:
    ids = _dead_letters(store)
    dlq = store.dead_letters("g")
    assert sorted(d.body for d in dlq.list()) == [b"a1", b"a2", b"b1"]
    assert sorted(d.body for d in dlq.list("a")) == [b"a1", b"a2"]
    assert sorted(d.body for d in dlq.list(key="k1")) == [b"a1", b"b1"]
    assert dlq.count("b") == 1 and len(dlq.list(limit=2)) == 2
    d = dlq.get(ids[b"a1"])
    assert (d.origin_topic, d.origin_message_id, d.error_type, d.error, d.reconsume_times) == (
        "a", ids[b"a1"], "ValueError", "bad a1", 1)
    assert dlq.get(d.msg_id).queue_offset == d.queue_offset
    with pytest.raises(mqlite.MessageNotFoundError):
        dlq.get("nope")
    out = tmp_path / "dlq.jsonl"
    assert dlq.export(out) == 3
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(base64.b64decode(r["body"]) for r in rows) == [b"a1", b"a2", b"b1"]
    assert {r["originTopic"] for r in rows} == {"a", "b"} and rows[0]["errorType"] == "ValueError"
    buf = io.StringIO()
    assert dlq.export(buf, origin_topic="b") == 1 and '"originTopic": "b"' in buf.getvalue()
    # Another group's DLQ is its own.
    assert store.dead_letters("other").list() == []


def test_dlq_redrive_by_id_key_topic_or_all_then_purge(store: mqlite.Store) -> None:
    ids = _dead_letters(store)
    dlq = store.dead_letters("g")
    with pytest.raises(IllegalArgumentError):
        dlq.redrive()
    (r,) = dlq.redrive(ids=[ids[b"a2"]])
    assert r.message_queue.topic == "a"
    again = store.get(r.offset_msg_id)
    assert (again.topic, again.body, again.keys, again.tags, again.reconsume_times) == ("a", b"a2", ("k2",), "T", 0)
    assert again.get_property("user") == "u" and again.get_property("RETRY_TOPIC") is None
    assert [x.message_queue.topic for x in dlq.redrive(origin_topic="b")] == ["b"]
    assert len(dlq.redrive(key="k1")) == 2
    assert len(dlq.redrive(all=True)) == 3
    assert store.offsets(MessageQueue("a", 0))[1] == 2 + 1 + 1 + 2  # a1 a2, a2, a1 (k1), a1 a2 (all)
    # Re-driven letters stay until purged; a purge hides what is stored so far only.
    assert dlq.purge() == 3
    assert dlq.list() == [] and dlq.purge() == 0
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("b")
        got: list[MessageExt] = []
        wait_until(lambda: got.extend(c.poll(0.05)) or len(got) >= 1, what="a message of b")
        c.send_back(got[0], dead=True)
    assert [d.body for d in store.dead_letters("g").list()] == [b"b1"]


def test_a_dead_letter_that_waited_on_a_timer_and_a_retry_is_redriven_with_its_own_properties(
    fast_store: mqlite.Store,
) -> None:
    """The copies the store delivers late carry its bookkeeping (the timer id of the timer and
    of the delayed retry, the timer's times); a re-drive sends the user's properties only."""
    store = fast_store
    store.create_topic("t", 1)
    store.producer().send(Message("t", b"late", keys=["k"], properties={"user": "u"}, delay=0.05))
    with store.pull_consumer("g", consume_from=FIRST, max_reconsume_times=1) as c:
        c.subscribe("t")
        (m,) = _poll_until(c, "the timer's delivery")
        assert m.get_property("MQLITE_TIMER_ID") is not None
        c.send_back(m, error="bad")
        c.commit()
        (again,) = _poll_until(c, "the retry's delivery")
        assert (again.get_property("MQLITE_TIMER_ID") or "").startswith("L")
        assert c.send_back(again, error="still bad").dead
        c.commit()
    (r,) = store.dead_letters("g").redrive(all=True)
    copy = store.get(r.offset_msg_id)
    assert (copy.topic, copy.body, copy.keys, copy.get_property("user")) == ("t", b"late", ("k",), "u")
    assert copy.get_property("MQLITE_TIMER_ID") is None and copy.get_property("TIMER_ENQUEUE_MS") is None


def test_retry_view_lists_the_retries_not_consumed_yet(fast_store: mqlite.Store) -> None:
    store = fast_store
    store.create_topic("t", 1)
    store.producer().send(Message("t", b"m"))
    view = store.retries("g")
    assert view.list() == []
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t")
        (m,) = _poll_until(c, "the message")
        c.send_back(m, error="later")
        c.commit()
        wait_until(lambda: view.count("t") == 1, what="the retry in the retry topic")
        assert view.count("other") == 0 and view.list()[0].error == "later"
        _poll_until(c, "the retry")
        c.commit()
    assert view.list() == []


# -- config/subscriptionGroup.json ----------------------------------------------------------------


def test_subscription_group_file_has_rocketmq_shape_and_sets_retry_max_times(store: mqlite.Store) -> None:
    assert store.subscription_group("g") == mqlite.SubscriptionGroupConfig("g")  # RocketMQ's defaults
    cfg = store.update_subscription_group("g", retry_max_times=0)
    assert (cfg.retry_max_times, cfg.consume_enable, cfg.retry_queue_nums) == (0, True, 1)
    data = json.loads((Path(store.path) / "config" / "subscriptionGroup.json").read_text())
    assert data["subscriptionGroupTable"]["g"] == {"groupName": "g", "retryMaxTimes": 0}
    assert data["dataVersion"]["counter"] == 1
    store.create_topic("t", 1)
    store.producer().send(Message("t", b"x"))
    with store.pull_consumer("g", consume_from=FIRST) as c:
        assert c.max_reconsume_times == 0
        c.subscribe("t")
        (m,) = _poll_until(c, "the message")
        assert c.send_back(m).dead  # retryMaxTimes 0: straight to the DLQ
    with store.pull_consumer("g", max_reconsume_times=3) as c2:
        assert c2.max_reconsume_times == 3  # the consumer's own setting wins


def test_subscription_group_consume_enable_takes_the_queues_away(store: mqlite.Store) -> None:
    store.create_topic("t", 2)
    with store.pull_consumer("g", rebalance_interval=0.01) as c:
        c.subscribe("t")
        assert len(c.assignment()) == 2
        store.update_subscription_group("g", consume_enable=False)
        wait_until(lambda: c.poll(0.01) == [] and c.assignment() == [], what="the queues given up")
        store.update_subscription_group("g", consume_enable=True)
        wait_until(lambda: c.poll(0.01) == [] and len(c.assignment()) == 2, what="the queues back")


def test_subscription_group_bad_values_and_bad_files(store: mqlite.Store) -> None:
    for bad in ({"retry_max_times": -1}, {"retry_max_times": True}, {"consume_enable": 1},
                {"retry_queue_nums": 2}):
        with pytest.raises(InvalidConfigError):
            store.update_subscription_group("g", **bad)  # type: ignore[arg-type]
    path = Path(store.path) / "config" / "subscriptionGroup.json"
    assert not path.exists()
    path.write_text('{"subscriptionGroupTable": {"g": {"retryMaxTimes": "x"}}}')
    with pytest.raises(mqlite.ConfigFileError):
        store.subscription_group("g")
    with pytest.raises(mqlite.ConfigFileError):
        store.update_subscription_group("g", retry_max_times=1)
    assert "retryMaxTimes\": \"x\"" in path.read_text()  # nothing written over it


# -- kill -9 with retries in flight ---------------------------------------------------------------


def test_kill_9_with_retries_in_flight_loses_nothing(tmp_path: Path) -> None:
    """A consumer that fails every first delivery is killed (SIGKILL) once it has sent some
    messages back; a consumer of the reopened store then gets every message: none is lost
    between the original topic, the delay topic and the retry topic."""
    path = tmp_path / "s"
    bodies = {f"m{i}" for i in range(40)}
    with mqlite.open(path, delay_levels="1s") as store:
        store.create_topic("t", 2)
        p = store.producer()
        for b in sorted(bodies):
            p.send(Message("t", b.encode()))
    child = subprocess.Popen([sys.executable, "-u", str(Path(__file__).with_name("retry_crash_child.py")),
                              str(path)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    accepted: set[str] = set()
    failed = 0
    try:
        assert child.stdout is not None
        for line in child.stdout:
            verdict, body = line.split()
            if verdict == "ok":
                accepted.add(body)
            else:
                failed += 1
            if failed >= 20:  # retries in flight: sent back, waiting for their delay
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert failed >= 20, "the child ended before failing 20 messages"
    done = threading.Event()
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        m = msgs[0]
        if m.reconsume_times == 0:
            return ConsumeStatus.RECONSUME_LATER
        with lock:
            accepted.add(m.body.decode())
            if accepted == bodies:
                done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    with mqlite.open(path, delay_levels="1s") as store:
        c = store.push_consumer("g", consume_from=FIRST, threads=2, batch_size=1, commit_interval=0.05)
        c.subscribe("t")
        c.register_message_listener(listener)
        with c:
            assert done.wait(30), f"never consumed: {sorted(bodies - accepted)}"
