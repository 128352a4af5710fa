"""Retry and dead-letter topics on the client side: the names, the checked arguments of a
send-back, and ``SentBack``, what a send-back did.

A consumer that fails a message sends it back (``Store.send_back`` in the core, RocketMQ's
consumer send-back): a copy is stored in the group's retry topic ``%RETRY%<group>`` after a
level of the store's delay table (level 3 + the message's reconsume count unless a level is
chosen), or, once the message has been consumed ``max_reconsume_times`` times or when asked, in
the group's dead-letter topic ``%DLQ%<group>`` at once. The copy keeps the original's body,
keys, tags and properties, counts one more reconsume, and names its first topic
(``RETRY_TOPIC``), its first message id (``ORIGIN_MESSAGE_ID``) and the consumer's error
(``MQLITE_ERROR_TYPE``, ``MQLITE_ERROR``, bounded).
"""

from __future__ import annotations

from typing import NamedTuple

from mqlite import _core
from mqlite.errors import IllegalArgumentError, InvalidConfigError
from mqlite.message import MessageExt

__all__ = [
    "DEFAULT_MAX_RECONSUME_TIMES",
    "DLQ_PREFIX",
    "RETRY_PREFIX",
    "SentBack",
    "dlq_topic",
    "retry_topic",
]

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
DEFAULT_MAX_RECONSUME_TIMES = 16  # RocketMQ's retryMaxTimes
_MAX_U32 = 0xFFFF_FFFF


def retry_topic(group: str) -> str:
    """The retry topic of ``group``."""
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    """The dead-letter topic of ``group``."""
    return DLQ_PREFIX + group


class SentBack(NamedTuple):
    """Where a send-back put the message's copy."""

    topic: str
    """``%RETRY%<group>`` (reached after ``delay_level``) or ``%DLQ%<group>``."""
    dead: bool
    """True when the copy went to the dead-letter topic."""
    reconsume_times: int
    """The copy's reconsume count (the original's plus one)."""
    delay_level: int
    """The delay level the copy waits (0 for the dead-letter topic)."""


def check_max_reconsume_times(value: object) -> int:
    """``value`` as a ``max_reconsume_times`` option, or InvalidConfigError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_U32:
        raise InvalidConfigError(f"max_reconsume_times must be an int from 0, got {value!r}")
    return value


def error_parts(error: BaseException | str | None) -> tuple[str | None, str | None]:
    """The (type name, text) a send-back stores for ``error``: an exception's type and
    ``str()``, a string as the text alone."""
    if error is None:
        return None, None
    if isinstance(error, str):
        return None, error
    if isinstance(error, BaseException):
        return type(error).__qualname__, exc_text(error)
    raise IllegalArgumentError(f"error must be an exception, a str or None, not {type(error).__name__}")


def exc_text(exc: BaseException) -> str:
    """``str(exc)``, or a stand-in when that raises; the store bounds its length."""
    try:
        return str(exc)
    except BaseException:  # noqa: BLE001 - an exception's __str__ is the listener's code
        return f"(the {type(exc).__qualname__}'s str() raised)"


def send_back(
    core: _core.Store,
    group: str,
    msg: MessageExt,
    delay: int,
    dead: bool,
    max_reconsume_times: int,
    error: BaseException | str | None,
) -> SentBack:
    """Checks the arguments of a consumer's ``send_back`` and sends ``msg`` back for
    ``group``; raises before anything is written when one is bad."""
    if not isinstance(msg, MessageExt):
        raise IllegalArgumentError(f"send_back takes a MessageExt the consumer read, not {type(msg).__name__}")
    if isinstance(delay, bool) or not isinstance(delay, int) or delay < 0:
        raise IllegalArgumentError(f"delay must be a delay level from 1, or 0 for the automatic one, got {delay!r}")
    if not isinstance(dead, bool):
        raise IllegalArgumentError(f"dead must be a bool, got {dead!r}")
    kind, text = error_parts(error)
    topic, went_dead, times, level = core.send_back(
        group, msg.commit_log_offset, -1 if dead else delay, max_reconsume_times, kind, text
    )
    return SentBack(topic, went_dead, times, level)
