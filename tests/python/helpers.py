"""Plain helpers shared by the test modules."""

from __future__ import annotations

from typing import Any

import mqlite

# Small files so tests can roll commit-log and consume-queue files quickly.
SMALL_FILES: dict[str, Any] = {
    "commit_log_file_size": 1 << 20,
    "consume_queue_file_units": 1000,
    "max_message_size": 64 * 1024,
}


def read_all(store: mqlite.Store, mq: mqlite.MessageQueue, **kw: Any) -> list[mqlite.MessageExt]:
    """Every message of one queue, following ``next_offset``."""
    low, high = store.offsets(mq)
    out: list[mqlite.MessageExt] = []
    offset = low
    while offset < high:
        result = store.read_result(mq, offset, 32, **kw)
        out.extend(result.messages)
        assert result.next_offset > offset, result.status
        offset = result.next_offset
    return out


def snapshot(store: mqlite.Store) -> dict[object, object]:
    """Topic names and every queue's (min, max) offsets: what a failed call must leave unchanged."""
    snap: dict[object, object] = {"topics": [t.name for t in store.topics()]}
    for topic in store.topics():
        for mq in store.queues(topic.name):
            snap[mq] = store.offsets(mq)
    return snap
