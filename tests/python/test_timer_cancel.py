"""Cancel, reschedule and list pending timers from Python: ``Store.cancel_timer``,
``Store.reschedule_timer``, ``Store.list_timers`` and ``Store.pending_timers``; outcomes are
true, bad input is a typed error that writes nothing. Deliveries are awaited by polling for the
message itself (its arrival is the event), never by sleeping."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest

import mqlite
from mqlite import ConsumeFromWhere, IllegalArgumentError, Message, TimerOutcome

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
HOUR = 3600


def poll_until(c: mqlite.PullConsumer, n: int, timeout: float = 30.0) -> list[mqlite.MessageExt]:
    got: list[mqlite.MessageExt] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got.extend(c.poll(1.0))
    return got


def log_end(store: mqlite.Store) -> int:
    return int(store.stats()["commit_log_max_offset"])


def test_a_cancelled_timer_is_not_delivered_and_each_answer_is_true(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "s") as store:
        store.create_topic("t", 1)
        p = store.producer()
        doomed = p.send(Message("t", b"doomed", delay=HOUR, keys="order-1"))
        soon = p.send(Message("t", b"soon", delay=0.2))
        assert store.pending_timers() == 2
        [c] = store.cancel_timer(doomed.msg_id)
        assert c.outcome is TimerOutcome.CANCELLED
        assert c.timer is not None and c.timer.topic == "t" and c.timer.keys == ("order-1",)
        assert c.timer.unique_id == doomed.msg_id
        assert [x.outcome for x in store.cancel_timer(doomed.offset_msg_id)] == [TimerOutcome.ALREADY_CANCELLED]
        assert [t.id for t in store.list_timers()] == [str(soon.queue_offset)]
        with store.pull_consumer("g", consume_from=FIRST) as consumer:
            consumer.subscribe("t")
            assert [m.body for m in poll_until(consumer, 1)] == [b"soon"]
            [d] = store.cancel_timer(soon.offset_msg_id)
            assert d.outcome is TimerOutcome.ALREADY_DELIVERED
            # A cancelled timer stays cancelled: moving it to now moves nothing, and a later
            # message arrives alone.
            [r] = store.reschedule_timer(doomed.msg_id, delay=0)
            assert r.outcome is TimerOutcome.ALREADY_CANCELLED
            p.send(Message("t", b"after", delay=0.1))
            assert [m.body for m in poll_until(consumer, 1)] == [b"after"]
        assert store.pending_timers() == 0
    # And not after a reopen either.
    with mqlite.open(tmp_path / "s") as store:
        assert [x.outcome for x in store.cancel_timer(key="order-1")] == [TimerOutcome.ALREADY_CANCELLED]
        assert store.list_timers() == []


def test_cancel_by_key_within_a_topic_and_listing_filters(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "s") as store:
        p = store.producer()
        now = int(time.time() * 1000)
        p.send(Message("a", b"a", keys="k", deliver_at=now + 2 * HOUR * 1000))
        p.send(Message("b", b"b", keys=["k", "x"], deliver_at=now + HOUR * 1000))
        p.send(Message("b", b"c", keys="y", deliver_at=now + 3 * HOUR * 1000))
        assert [t.topic for t in store.list_timers()] == ["b", "a", "b"]
        assert [t.topic for t in store.list_timers(key="k")] == ["b", "a"]
        assert [t.keys for t in store.list_timers(topic="b")] == [("k", "x"), ("y",)]
        window = store.list_timers(due_from=now + HOUR * 1000, due_to=now + 2 * HOUR * 1000)
        assert [t.topic for t in window] == ["b"]
        assert window[0].deliver_at == dt.datetime.fromtimestamp((now + HOUR * 1000) / 1000, tz=dt.timezone.utc)
        assert len(store.list_timers(limit=1)) == 1

        changes = store.cancel_timer(key="k", topic="a")
        assert [(c.outcome, c.timer and c.timer.topic) for c in changes] == [(TimerOutcome.CANCELLED, "a")]
        assert [t.topic for t in store.list_timers(key="k")] == ["b"]
        assert [c.outcome for c in store.cancel_timer(key="nobody")] == [TimerOutcome.NOT_FOUND]


def test_reschedule_later_and_earlier(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "s") as store:
        store.create_topic("t", 1)
        p = store.producer()
        hour = p.send(Message("t", b"hour", delay=HOUR))
        soon = p.send(Message("t", b"soon", delay=HOUR))
        [r] = store.reschedule_timer(soon.msg_id, delay=2 * HOUR)
        assert r.outcome is TimerOutcome.RESCHEDULED and r.id == str(soon.queue_offset)
        later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=3)
        [r] = store.reschedule_timer(soon.offset_msg_id, deliver_at=later)
        assert r.timer is not None and r.timer.due_ms == pytest.approx(later.timestamp() * 1000, abs=1)
        [r] = store.reschedule_timer(hour.offset_msg_id, delay=0)
        assert r.outcome is TimerOutcome.RESCHEDULED
        with store.pull_consumer("g", consume_from=FIRST) as consumer:
            consumer.subscribe("t")
            assert [m.body for m in poll_until(consumer, 1)] == [b"hour"]
        assert [t.id for t in store.list_timers()] == [str(soon.queue_offset)]
        [r] = store.reschedule_timer(hour.msg_id, delay=5)
        assert r.outcome is TimerOutcome.ALREADY_DELIVERED


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda s: s.cancel_timer(), IllegalArgumentError),
        (lambda s: s.cancel_timer("0" * 32, key="k"), IllegalArgumentError),
        (lambda s: s.cancel_timer("0" * 32, topic="t"), IllegalArgumentError),
        (lambda s: s.cancel_timer("not an id"), IllegalArgumentError),
        (lambda s: s.cancel_timer("G" * 32), IllegalArgumentError),
        (lambda s: s.cancel_timer(key=""), IllegalArgumentError),
        (lambda s: s.cancel_timer(42), TypeError),
        (lambda s: s.cancel_timer(key=b"k"), TypeError),
        (lambda s: s.reschedule_timer(key="k"), IllegalArgumentError),
        (lambda s: s.reschedule_timer(key="k", delay=1, deliver_at=1), IllegalArgumentError),
        (lambda s: s.reschedule_timer(key="k", delay=-1), IllegalArgumentError),
        (lambda s: s.reschedule_timer(key="k", delay=float("nan")), IllegalArgumentError),
        (lambda s: s.reschedule_timer(key="k", delay="5"), TypeError),
        (lambda s: s.reschedule_timer(key="k", deliver_at=1.5), TypeError),
        (lambda s: s.reschedule_timer(key="k", delay=86400 * 31), IllegalArgumentError),
        (lambda s: s.list_timers(limit=0), IllegalArgumentError),
        (lambda s: s.list_timers(due_from="now"), TypeError),
        (lambda s: s.list_timers(topic=1), TypeError),
    ],
)
def test_bad_input_is_a_typed_error_and_writes_nothing(tmp_path: Path, call: object, error: type[Exception]) -> None:
    with mqlite.open(tmp_path / "s") as store:
        sent = store.producer().send(Message("t", b"x", keys="k", delay=HOUR))
        end = log_end(store)
        with pytest.raises(error):
            call(store)  # type: ignore[operator]
        assert log_end(store) == end
        assert [t.id for t in store.list_timers()] == [str(sent.queue_offset)]


def test_an_unknown_id_is_a_not_found_answer_and_writes_nothing(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "s") as store:
        sent = store.producer().send(Message("t", b"now"))
        end = log_end(store)
        for msg_id in ("0" * 32, sent.offset_msg_id, sent.msg_id):
            [c] = store.cancel_timer(msg_id)
            assert (c.outcome, c.id, c.timer) == (TimerOutcome.NOT_FOUND, None, None)
        assert log_end(store) == end


def test_a_cancel_by_a_handle_that_does_not_deliver_is_honoured_by_the_one_that_does(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "s") as leader, mqlite.open(tmp_path / "s") as other:
        leader.create_topic("t", 1)
        doomed = leader.producer().send(Message("t", b"doomed", keys="k", delay=HOUR))
        [c] = other.cancel_timer(key="k")
        assert c.outcome is TimerOutcome.CANCELLED and c.id == str(doomed.queue_offset)
        # The delivering handle sees the cancel: moving the timer to now moves nothing.
        [r] = leader.reschedule_timer(doomed.offset_msg_id, delay=0)
        assert r.outcome is TimerOutcome.ALREADY_CANCELLED
        other.producer().send(Message("t", b"marker", delay=0.1))
        with leader.pull_consumer("g", consume_from=FIRST) as consumer:
            consumer.subscribe("t")
            # The marker arrives alone.
            assert [m.body for m in poll_until(consumer, 1)] == [b"marker"]
        assert [x.outcome for x in leader.cancel_timer(doomed.msg_id)] == [TimerOutcome.ALREADY_CANCELLED]


def test_a_delay_level_message_is_listed_cancelled_and_rescheduled_by_its_level_id(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "s") as store:
        store.create_topic("t", 1)
        p = store.producer()
        # Level 18 is two hours (RocketMQ's default table): nothing is delivered on its own.
        doomed = p.send(Message("t", b"doomed", delay_level=18, keys="lvl"))
        moved = p.send(Message("t", b"moved", delay_level=18))
        assert store.pending_timers() == 2
        listed = store.list_timers()
        assert [t.id for t in listed] == [f"L18:{doomed.queue_offset}", f"L18:{moved.queue_offset}"]
        assert listed[0].topic == "t" and listed[0].keys == ("lvl",)
        [c] = store.cancel_timer(key="lvl")
        assert (c.outcome, c.id) == (TimerOutcome.CANCELLED, listed[0].id)
        assert [x.outcome for x in store.cancel_timer(doomed.offset_msg_id)] == [TimerOutcome.ALREADY_CANCELLED]
        assert store.pending_timers() == 1
        # Moved to now: it keeps its level id and goes at once, out of its level's order.
        [r] = store.reschedule_timer(moved.msg_id, delay=0)
        assert (r.outcome, r.id) == (TimerOutcome.RESCHEDULED, listed[1].id)
        with store.pull_consumer("g", consume_from=FIRST) as consumer:
            consumer.subscribe("t")
            [m] = poll_until(consumer, 1)
            assert m.body == b"moved"
            assert m.get_property("MQLITE_TIMER_ID") == listed[1].id
        assert [x.outcome for x in store.cancel_timer(moved.msg_id)] == [TimerOutcome.ALREADY_DELIVERED]
        assert store.pending_timers() == 0 and store.list_timers() == []
    # The cancel holds across a reopen.
    with mqlite.open(tmp_path / "s") as store:
        assert [x.outcome for x in store.cancel_timer(key="lvl")] == [TimerOutcome.ALREADY_CANCELLED]
        assert store.pending_timers() == 0


def test_a_reschedule_by_timedelta_is_exact_to_the_ms_as_a_send_delay_is(tmp_path: Path) -> None:
    from mqlite.testing import ManualClock

    clock = ManualClock(1_700_000_000_000)
    with mqlite.open(tmp_path / "s", clock=clock) as store:
        sent = store.producer().send(Message("t", b"x", delay=dt.timedelta(milliseconds=2027)))
        [t] = store.list_timers()
        assert t.due_ms == clock.now_ms + 2027
        # The same delay moves it to the same time: not a ms later.
        [r] = store.reschedule_timer(sent.offset_msg_id, delay=dt.timedelta(milliseconds=2027))
        assert r.timer is not None and r.timer.due_ms == clock.now_ms + 2027
        [r] = store.reschedule_timer(sent.offset_msg_id, delay=dt.timedelta(milliseconds=2027, microseconds=1))
        assert r.timer is not None and r.timer.due_ms == clock.now_ms + 2028  # a fraction rounds up
        [r] = store.reschedule_timer(sent.offset_msg_id, delay=dt.timedelta(days=1, milliseconds=2027))
        assert r.timer is not None and r.timer.due_ms == clock.now_ms + 86_400_000 + 2027


def test_a_retry_is_listed_and_cancelled_under_the_retry_topic_it_goes_to(tmp_path: Path) -> None:
    """A message sent back waits in a delay level under its origin topic; the listing names
    where it goes when due (the group's retry topic, queue 0), and a cancel by key filtered on
    that topic finds it."""
    with mqlite.open(tmp_path / "s") as store:
        store.create_topic("orders", 1)
        store.producer().send(Message("orders", b"o1", keys="k1"))
        with store.pull_consumer("g", consume_from=FIRST) as consumer:
            consumer.subscribe("orders")
            [m] = poll_until(consumer, 1)
            consumer.send_back(m)
        [t] = store.list_timers()
        assert (t.topic, t.queue_id, t.keys) == ("%RETRY%g", 0, ("k1",))
        assert store.list_timers(topic="orders") == []
        assert [x.id for x in store.list_timers(topic="%RETRY%g")] == [t.id]
        [c] = store.cancel_timer(key="k1", topic="%RETRY%g")
        assert c.outcome is TimerOutcome.CANCELLED and c.id == t.id
