"""Consumer-side enums with RocketMQ's names."""

from __future__ import annotations

import enum

__all__ = ["ConsumeFromWhere", "ConsumeOrderlyStatus", "ConsumeStatus", "MessageModel"]


class ConsumeStatus(enum.Enum):
    """What a concurrent ``PushConsumer`` listener returns."""

    CONSUME_SUCCESS = 0
    RECONSUME_LATER = 1


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
