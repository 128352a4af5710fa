"""Consumer-side enums with RocketMQ's names."""

from __future__ import annotations

import enum

from mqlite.errors import InvalidMessageError

__all__ = ["ConsumeFromWhere", "ConsumeOrderlyStatus", "ConsumeStatus", "MessageModel", "ReconsumeLater"]


class ConsumeStatus(enum.Enum):
    """What a concurrent ``PushConsumer`` listener returns."""

    CONSUME_SUCCESS = 0
    RECONSUME_LATER = 1


class ReconsumeLater:
    """What a concurrent listener returns to fail its batch and choose what happens next
    (RocketMQ's ``delayLevelWhenNextConsume``): ``ReconsumeLater(delay_level=n)`` retries after
    level ``n`` of the store's delay table, ``ReconsumeLater(dead=True)`` sends the messages
    to the group's dead-letter topic at once. ``ConsumeStatus.RECONSUME_LATER`` is
    ``ReconsumeLater()``: level 3 + the message's reconsume count."""

    __slots__ = ("delay_level",)

    def __init__(self, delay_level: int = 0, *, dead: bool = False) -> None:
        if isinstance(delay_level, bool) or not isinstance(delay_level, int):
            raise TypeError(f"delay_level must be an int, not {type(delay_level).__name__}")
        if not isinstance(dead, bool):
            raise TypeError(f"dead must be a bool, not {type(dead).__name__}")
        if delay_level < 0:
            raise InvalidMessageError(f"delay_level must be a level from 1 (0: automatic), got {delay_level}")
        self.delay_level = -1 if dead else delay_level

    @property
    def dead(self) -> bool:
        """True when the messages go to the dead-letter topic."""
        return self.delay_level == -1

    def __repr__(self) -> str:
        return "ReconsumeLater(dead=True)" if self.dead else f"ReconsumeLater(delay_level={self.delay_level})"


class ConsumeOrderlyStatus(enum.Enum):
    """What an orderly ``PushConsumer`` listener returns."""

    SUCCESS = 0
    SUSPEND_CURRENT_QUEUE_A_MOMENT = 1


class ConsumeFromWhere(enum.Enum):
    """Where a group with no committed offset for a queue starts."""

    CONSUME_FROM_FIRST_OFFSET = 0
    CONSUME_FROM_LAST_OFFSET = 1
    CONSUME_FROM_TIMESTAMP = 2


class MessageModel(enum.Enum):
    """CLUSTERING shares a topic's queues among a group; BROADCASTING gives every consumer all."""

    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"
