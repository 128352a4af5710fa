"""Consumer offsets in RocketMQ's ``config/consumerOffset.json`` shape.

Clustering groups share ``<store>/config/consumerOffset.json``::

    {"dataVersion": {"counter": 3, "stateVersion": 0, "timestamp": 1700000000000},
     "offsetTable": {"orders@billing": {"0": 12, "1": 7}}}

Keys are ``topic@group``, values map queue id to the **next** offset to consume. mqlite writes
strict JSON (queue ids quoted); RocketMQ's fastjson writes them unquoted, and the reader accepts
both. Several processes may commit: each read-modify-write holds an exclusive ``flock`` on
``config/.consumerOffset.lock`` and writes a temp file, fsyncs it, keeps the old file as ``.bak``,
renames and fsyncs the directory.

A broadcasting consumer keeps its own offsets, in the same shape, in
``<store>/config/broadcast/<group>/<client_id>.json``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mqlite._files import atomic_write_json, flocked, read_json_with_backup
from mqlite.message import MessageQueue

__all__ = ["OffsetFile", "QueueProgress", "broadcast_offsets", "group_offsets", "offset_key"]


def offset_key(topic: str, group: str) -> str:
    """RocketMQ's ``topic@group`` key."""
    return f"{topic}@{group}"


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """A group's progress on one queue: committed (next) offset, queue max offset and lag."""

    topic: str
    queue_id: int
    committed: int
    max_offset: int

    @property
    def message_queue(self) -> MessageQueue:
        """The queue as a ``MessageQueue``."""
        return MessageQueue(self.topic, self.queue_id)

    @property
    def lag(self) -> int:
        """Messages stored but not yet consumed by the group."""
        return max(self.max_offset - self.committed, 0)


def _table(data: Mapping[str, Any] | None) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = {}
    raw = (data or {}).get("offsetTable") or {}
    if not isinstance(raw, dict):
        return out
    for key, queues in raw.items():
        if isinstance(queues, dict):
            out[str(key)] = {int(q): int(o) for q, o in queues.items()}
    return out


class OffsetFile:
    """One offsets file, its ``.bak``, and the sidecar lock that serialises writers."""

    def __init__(self, path: Path, lock: Path, *, durable: bool = True) -> None:
        self.path = path
        self.lock = lock
        self.durable = durable

    def load(self) -> dict[str, dict[int, int]]:
        """The whole table: ``{"topic@group": {queue_id: next_offset}}``."""
        if not self.path.exists() and not self.path.with_name(self.path.name + ".bak").exists():
            return {}
        with flocked(self.lock, exclusive=False):
            return _table(read_json_with_backup(self.path))

    def get(self, key: str) -> dict[int, int]:
        """One ``topic@group`` entry (empty when nothing was committed)."""
        return self.load().get(key, {})

    def update(self, key: str, offsets: Mapping[int, int], *, replace: bool = False) -> None:
        """Merge (or with ``replace``, set) one entry's queue offsets, atomically."""
        with flocked(self.lock, exclusive=True):
            data = read_json_with_backup(self.path) or {}
            table = _table(data)
            entry = {} if replace else table.get(key, {})
            entry.update({int(q): int(o) for q, o in offsets.items()})
            table[key] = entry
            version = data.get("dataVersion")
            counter = int(version.get("counter", 0)) if isinstance(version, dict) else 0
            data["dataVersion"] = {
                "counter": counter + 1,
                "stateVersion": 0,
                "timestamp": int(time.time() * 1000),
            }
            data["offsetTable"] = {
                k: {str(q): o for q, o in sorted(v.items())} for k, v in sorted(table.items())
            }
            atomic_write_json(self.path, data, durable=self.durable)


def group_offsets(root: Path, *, durable: bool = True) -> OffsetFile:
    """The shared clustering offsets file of the store at ``root``."""
    config = root / "config"
    return OffsetFile(config / "consumerOffset.json", config / ".consumerOffset.lock", durable=durable)


def broadcast_offsets(root: Path, group: str, client_id: str, *, durable: bool = True) -> OffsetFile:
    """The private offsets file of one broadcasting consumer."""
    d = root / "config" / "broadcast" / group
    return OffsetFile(d / f"{client_id}.json", d / f".{client_id}.offsets.lock", durable=durable)
