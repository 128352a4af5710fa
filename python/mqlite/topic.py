"""Topic metadata and tag expressions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mqlite import _core

__all__ = ["PERM_INHERIT", "PERM_READ", "PERM_WRITE", "TopicConfig", "check_topic", "parse_tags"]

PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic's configuration, as stored in ``config/topics.json``."""

    name: str
    read_queues: int
    write_queues: int
    perm: int
    order: bool
    since_offset: int = 0
    """Commit-log offset where this incarnation of the topic begins: records below it belong
    to an earlier topic of the same name that was deleted (``Store.delete_topic``), and its
    readers never see them. 0 for a topic created in an empty store or before mqlite recorded
    it (attribute ``mqlite.sinceOffset`` of ``config/topics.json``)."""

    @property
    def readable(self) -> bool:
        """Whether the READ permission bit is set."""
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        """Whether the WRITE permission bit is set."""
        return bool(self.perm & PERM_WRITE)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TopicConfig:
        """Build from a RocketMQ-style topic dict (``topicName``, ``readQueueNums``, ...)."""
        return cls(
            name=str(d["topicName"]),
            read_queues=int(d["readQueueNums"]),
            write_queues=int(d["writeQueueNums"]),
            perm=int(d["perm"]),
            order=bool(d.get("order", False)),
            since_offset=int(d.get("sinceOffset", 0)),
        )


def check_topic(topic: object) -> str:
    """Validate a topic name with the rule a send applies (TypeError for a non-str,
    InvalidTopicError for a bad name: 1 to 127 characters from ``[A-Za-z0-9_%|-]``); returns
    it. Every API that takes a topic calls this before touching the file system."""
    if not isinstance(topic, str):
        raise TypeError(f"topic must be a str, not {type(topic).__name__}")
    _core.check_topic(topic)
    return topic


def parse_tags(expr: str | Sequence[str] | None) -> list[str] | None:
    """Turn ``"TagA || TagB"`` (or a sequence of tags) into a tag list; ``None`` means all tags.

    As RocketMQ: ``None``, ``""`` and ``"*"`` subscribe to everything; blanks are dropped.
    """
    if expr is None:
        return None
    if isinstance(expr, str):
        parts = expr.split("||")
    elif isinstance(expr, Sequence):
        parts = list(expr)
        for tag in parts:
            if not isinstance(tag, str):
                raise TypeError(f"tags must be str, not {type(tag).__name__}")
    else:
        raise TypeError(f"tags must be a str or a sequence of str, not {type(expr).__name__}")
    tags = [t.strip() for t in parts]
    tags = [t for t in tags if t]
    if not tags or "*" in tags:
        return None
    return list(dict.fromkeys(tags))
