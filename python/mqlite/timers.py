"""Pending timers: cancel, reschedule and list the messages sent with ``deliver_at`` or
``delay`` (or RocketMQ 5's timer properties) that are not yet delivered.

``Store.cancel_timer``, ``Store.reschedule_timer`` and ``Store.list_timers`` are the entry
points; this module holds their result types and argument checks. Each answer is true: for one
timer exactly one of its delivery and its cancel happens, in whatever process each runs, and a
cancel or reschedule is durable (a record in the commit log) before it returns."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from mqlite._args import int_arg
from mqlite.errors import IllegalArgumentError

__all__ = ["PendingTimer", "TimerChange", "TimerOutcome"]


class TimerOutcome(str, enum.Enum):
    """What a cancel or reschedule did to one timer."""

    CANCELLED = "CANCELLED"
    """It was pending; it will not be delivered."""
    RESCHEDULED = "RESCHEDULED"
    """It was pending; it will be delivered at the new time (it keeps its id)."""
    ALREADY_DELIVERED = "ALREADY_DELIVERED"
    """It had been delivered: nothing changed."""
    ALREADY_CANCELLED = "ALREADY_CANCELLED"
    """It had been cancelled: nothing changed."""
    NOT_FOUND = "NOT_FOUND"
    """No timer matched (or retention removed its record): nothing changed."""


@dataclass(frozen=True)
class PendingTimer:
    """A stored timer: where it goes and when.

    A timer is a message sent with ``deliver_at`` or ``delay``, or with a ``delay_level``. ``id``
    is its id as text: its offset in the timer log (``"42"``), or ``L<level>:<offset>`` for a
    delay level (``"L3:17"``); a delivered copy carries it as ``MQLITE_TIMER_ID``.
    ``offset_msg_id`` names its stored record, the cheapest way to cancel it
    (``cancel_timer(t.offset_msg_id)``)."""

    id: str
    topic: str
    queue_id: int
    keys: tuple[str, ...]
    unique_id: str | None
    tags: str | None
    due_ms: int
    offset_msg_id: str

    @property
    def deliver_at(self) -> datetime:
        """``due_ms`` as an aware UTC datetime."""
        return datetime.fromtimestamp(self.due_ms / 1000, tz=timezone.utc)


@dataclass(frozen=True)
class TimerChange:
    """One timer a cancel or reschedule matched and its outcome; ``timer`` is ``None`` when
    nothing matched (``NOT_FOUND``), else the timer as found (with its new time after a
    reschedule)."""

    outcome: TimerOutcome
    id: str | None
    timer: PendingTimer | None


#: A timer as the binding gives it: (id, topic, queue id, keys, unique id, tags, due ms,
#: offset id).
TimerRow = tuple[str, str, int, list[str], "str | None", "str | None", int, str]


def _timer(row: TimerRow) -> PendingTimer:
    id_, topic, queue_id, keys, unique_id, tags, due_ms, offset_id = row
    return PendingTimer(id_, topic, queue_id, tuple(keys), unique_id, tags, due_ms, offset_id)


def changes(rows: list[tuple[str | None, str, TimerRow | None]]) -> list[TimerChange]:
    """The binding's answer as TimerChange objects."""
    return [TimerChange(TimerOutcome(o), i, None if t is None else _timer(t)) for i, o, t in rows]


def timers(rows: list[TimerRow]) -> list[PendingTimer]:
    """The binding's listing as PendingTimer objects."""
    return [_timer(r) for r in rows]


def target(msg_id: object, key: object, topic: object) -> tuple[str | None, str | None, str | None]:
    """Checks a cancel's or reschedule's naming arguments: exactly one of ``msg_id`` and
    ``key``, strs, and ``topic`` only with ``key``."""
    for name, value in (("msg_id", msg_id), ("key", key), ("topic", topic)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if (msg_id is None) == (key is None):
        raise IllegalArgumentError("give exactly one of msg_id and key")
    if topic is not None and key is None:
        raise IllegalArgumentError("topic narrows a cancel by key; a msg_id names one timer")
    if key == "":
        raise IllegalArgumentError("key must not be empty")
    return msg_id, key, topic  # type: ignore[return-value]


def epoch_ms(name: str, value: object) -> int:
    """A time as epoch ms: a ``datetime`` (naive is local time; a fraction of a ms rounds up,
    never early) or an int of epoch milliseconds."""
    if isinstance(value, datetime):
        ms = math.ceil(value.timestamp() * 1000)
        if abs(ms) > 9 * 10**15:
            raise IllegalArgumentError(f"{name} is out of range")
        return ms
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a datetime or an int of epoch milliseconds, not {type(value).__name__}")
    if abs(value) > 9 * 10**15:
        raise IllegalArgumentError(f"{name} is out of range")
    return value


def delay_ms(value: object) -> int:
    """A delay as ms: a ``timedelta`` (exact) or seconds (int or float; a fraction of a ms
    rounds up).
    Negative or not finite: IllegalArgumentError."""
    if isinstance(value, timedelta):
        # In whole microseconds, as a send reads its delay: a float of seconds times 1000 can
        # land just above a whole ms and round up to the next one.
        if value < timedelta(0):
            raise IllegalArgumentError(f"delay must be a finite number of seconds >= 0, got {value!r}")
        ms = -(-(value // timedelta(microseconds=1)) // 1000)
        if ms > 9 * 10**15:
            raise IllegalArgumentError(f"delay {value!r} is too long")
        return ms
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"delay must be a timedelta or seconds, not {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise IllegalArgumentError(f"delay must be a finite number of seconds >= 0, got {value!r}")
    ms = math.ceil(seconds * 1000)
    if ms > 9 * 10**15:
        raise IllegalArgumentError(f"delay {value!r} is too long")
    return ms


def limit_arg(value: object) -> int:
    """A listing's ``limit``: an int from 1."""
    n = int_arg("limit", value)
    if n < 1:
        raise IllegalArgumentError(f"limit must be at least 1, got {n}")
    return n
