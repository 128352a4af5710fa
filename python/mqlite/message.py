"""Outgoing messages, status enums, and the Rust result types."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from mqlite import _core
from mqlite._core import MessageExt, MessageQueue, SendBatchResult, SendResult

__all__ = [
    "GetMessageStatus",
    "Message",
    "MessageExt",
    "MessageQueue",
    "SendBatchResult",
    "SendResult",
    "SendStatus",
]


Message = _core.Message
"""A message to send: ``Message(topic, body, tags=None, keys=(), properties={}, flag=0,
delay_level=0, deliver_at=None, delay=None)``.

A native class that behaves as a (mutable, unhashable) dataclass: ``dataclasses.fields``,
``replace`` and ``asdict`` work on it, it compares field by field and it pickles. Fields accept
any object; their types are checked when the message is sent. ``keys`` is one key or a sequence
of keys, each without spaces (the store indexes them: ``Store.find_by_key``); ``properties`` are user properties (names reserved by RocketMQ,
such as ``KEYS`` or ``UNIQ_KEY``, are refused). ``delay_level`` (RocketMQ's delay level, 0 for
none) delivers the message to its topic only once its level's delay has passed: levels are the
store's ``delay_levels`` table ("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h" by
default), and a level outside it raises InvalidMessageError. ``deliver_at`` (a ``datetime``,
naive ones read as local time, or an int of epoch milliseconds) or ``delay`` (a ``timedelta``
or a number of seconds) delivers it at that time, never earlier: a time already past delivers at
once, a negative delay or a time more than the store's ``timer_max_delay_hours`` ahead raises
InvalidMessageError, a value of another type TypeError; give at most one of the three. A
``__STARTDELIVERTIME`` user property (epoch milliseconds, as older RocketMQ clients set it) is
honoured the same way. Reading, printing, comparing, copying or changing
a message is safe at any time, also while a send (of this or another thread) reads it: the send
uses the fields as they were when it began."""


class SendStatus(enum.Enum):
    """Outcome of a successful send, as RocketMQ's ``SendStatus``."""

    SEND_OK = 0
    FLUSH_DISK_TIMEOUT = 1
    FLUSH_SLAVE_TIMEOUT = 2
    SLAVE_NOT_AVAILABLE = 3


class GetMessageStatus(str, enum.Enum):
    """Status of a read, as RocketMQ's store ``GetMessageStatus``; compares equal to its name."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_RESET = "OFFSET_RESET"

    def __str__(self) -> str:
        return self.value
