"""Message(deliver_at=..., delay=...) and ``__STARTDELIVERTIME``: timer messages end to end on
a real store.

The store's timer thread delivers on the system clock; a consumer's poll waiting for the
message is the event (no sleep). Rust tests (tests/timers.rs) cover timing on a manual clock."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import pickle
import time
from pathlib import Path

import pytest

import mqlite
from mqlite import ConsumeFromWhere, InvalidMessageError, Message

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def poll_until(c: mqlite.PullConsumer, n: int, timeout: float = 30.0) -> list[mqlite.MessageExt]:
    got: list[mqlite.MessageExt] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got.extend(c.poll(1.0))
    return got


def test_deliver_at_delay_and_startdelivertime_are_honoured_never_early(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "s") as store:
        store.create_topic("t", 1)
        p = store.producer()
        now_ms = int(time.time() * 1000)
        p.send(Message("t", b"at", deliver_at=now_ms + 300))
        p.send(Message("t", b"datetime", deliver_at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(milliseconds=200)))
        p.send(Message("t", b"td", delay=dt.timedelta(milliseconds=100)))
        p.send(Message("t", b"secs", delay=0.25, keys="k"))
        p.send(Message("t", b"start", properties={"__STARTDELIVERTIME": str(now_ms + 150)}))
        p.send(Message("t", b"hour", delay=3600))
        p.send(Message("t", b"now"))
        with store.pull_consumer("g", consume_from=FIRST) as c:
            c.subscribe("t")
            got = poll_until(c, 6)
        assert sorted(m.body for m in got) == sorted(
            [b"now", b"td", b"start", b"datetime", b"secs", b"at"]
        )
        assert got[0].body == b"now"
        for m in got[1:]:
            out = int(m.properties["TIMER_OUT_MS"])
            assert m.store_timestamp >= out, "never early"
            assert m.topic == "t" and "REAL_TOPIC" not in m.properties
        assert [m.keys for m in got if m.body == b"secs"] == [("k",)]


def test_a_past_time_is_delivered_at_once(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "s") as store:
        p = store.producer()
        p.send(Message("t", b"past", deliver_at=dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)))
        p.send(Message("t", b"zero", delay=0))
        with store.pull_consumer("g", consume_from=FIRST) as c:
            c.subscribe("t")
            assert sorted(m.body for m in poll_until(c, 2)) == [b"past", b"zero"]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"delay": -1}, InvalidMessageError),
        ({"delay": dt.timedelta(seconds=-1)}, InvalidMessageError),
        ({"delay": math.nan}, InvalidMessageError),
        ({"delay": math.inf}, InvalidMessageError),
        ({"delay": 10**30}, InvalidMessageError),
        ({"delay": 86400 * 31}, InvalidMessageError),
        ({"deliver_at": int(time.time() * 1000) + 31 * 86_400_000}, InvalidMessageError),
        ({"deliver_at": 2**70}, InvalidMessageError),
        ({"delay": 1, "deliver_at": 1}, InvalidMessageError),
        ({"delay": 1, "delay_level": 1}, InvalidMessageError),
        ({"delay": "5"}, TypeError),
        ({"delay": True}, TypeError),
        ({"deliver_at": 1.5}, TypeError),
        ({"deliver_at": "tomorrow"}, TypeError),
        ({"deliver_at": dt.date(2030, 1, 1)}, TypeError),
        ({"properties": {"__STARTDELIVERTIME": "soon"}}, InvalidMessageError),
    ],
)
def test_bad_times_are_typed_errors_and_write_nothing(
    tmp_path: Path, kwargs: dict[str, object], error: type[Exception]
) -> None:
    with mqlite.open(tmp_path / "s") as store:
        p = store.producer()
        with pytest.raises(error):
            p.send(Message("t", b"x", **kwargs))  # type: ignore[arg-type]
        assert "t" not in store.topics()


def test_the_maximum_delay_is_configurable(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "s", timer_max_delay_hours=1) as store:
        p = store.producer()
        p.send(Message("t", b"ok", delay=3599))
        with pytest.raises(InvalidMessageError, match="timer_max_delay"):
            p.send(Message("t", b"x", delay=3601))


def test_the_new_fields_behave_as_dataclass_fields() -> None:
    when = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
    m = Message("t", b"x", deliver_at=when)
    assert m.deliver_at == when and m.delay is None
    assert [f.name for f in dataclasses.fields(m)][-2:] == ["deliver_at", "delay"]
    assert pickle.loads(pickle.dumps(m)) == m
    assert dataclasses.replace(m, deliver_at=None, delay=5).delay == 5
    assert "deliver_at=datetime.datetime(2030" in repr(m)
