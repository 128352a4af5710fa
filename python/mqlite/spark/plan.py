"""Planning on the driver: which queues a read covers, where each starts and ends, and the
partitions (topic, queue, offset range) the work is split into.

Offsets here are queue offsets, *next to read*, as in Spark's Kafka source: a range
``[start, end)`` covers the messages with queue offsets ``start`` to ``end - 1``. A streaming
offset is the JSON-ready mapping ``{"topic": {"queueId": next_offset}}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

from pyspark.sql.datasource import InputPartition

from mqlite.errors import TopicNotFoundError
from mqlite.message import MessageQueue
from mqlite.spark.options import EARLIEST, LATEST, OffsetSpec, SourceOptions
from mqlite.store import Store

__all__ = [
    "QueueRange",
    "StreamOffset",
    "bounds",
    "from_offset",
    "resolve",
    "split",
    "subscribed_queues",
    "to_offset",
]

Queue = tuple[str, int]
StreamOffset = dict[str, dict[str, int]]


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """One partition: queue offsets ``[start, end)`` of ``(topic, queue_id)``. ``from_earliest``:
    the start is the queue's first offset as planned, so retention removing messages under it
    is no data loss (a queue found after the query began starts there)."""

    topic: str
    queue_id: int
    start: int
    end: int
    from_earliest: bool = False


def subscribed_queues(store: Store, opts: SourceOptions, *, streaming: bool) -> list[Queue]:
    """The (topic, queue id) pairs the options select, sorted. A subscribed topic that does not
    exist is a TopicNotFoundError in a batch read; a stream waits for it (no queues yet)."""
    known = {t.name: t.read_queues for t in store.topics()}
    out: list[Queue] = []
    if opts.assign is not None:
        for topic, queue_ids in opts.assign.items():
            if topic not in known and not streaming:
                raise TopicNotFoundError(f"option assign names topic {topic!r}, which the store does not have")
            out.extend((topic, q) for q in queue_ids)
    elif opts.subscribe is not None:
        for topic in opts.subscribe:
            if topic not in known:
                if streaming:
                    continue
                raise TopicNotFoundError(f"option subscribe names topic {topic!r}, which the store does not have")
            out.extend((topic, q) for q in range(known[topic]))
    else:
        pattern = re.compile(opts.subscribe_pattern or "")
        for topic, count in known.items():
            # Retry and dead-letter topics ("%RETRY%g", "%DLQ%g") only when named explicitly.
            if not topic.startswith("%") and pattern.fullmatch(topic):
                out.extend((topic, q) for q in range(count))
    return sorted(set(out))


def bounds(store: Store, queues: list[Queue]) -> dict[Queue, tuple[int, int]]:
    """``(min, max)`` queue offsets of each queue; ``max`` is the next to be written."""
    return {(t, q): store.offsets(MessageQueue(t, q)) for t, q in queues}


def resolve(
    store: Store,
    spec: OffsetSpec,
    queues: dict[Queue, tuple[int, int]],
    *,
    missing: int,
    timestamp: int | None = None,
) -> dict[Queue, int]:
    """Each queue's offset per ``spec`` (or ``timestamp``, epoch ms, which wins), clamped to the
    queue's current range; a queue the JSON does not list takes ``missing`` (EARLIEST/LATEST)."""
    out: dict[Queue, int] = {}
    for (topic, q), (low, high) in queues.items():
        if timestamp is not None:
            out[(topic, q)] = store.offset_for_timestamp(MessageQueue(topic, q), timestamp)
            continue
        if isinstance(spec, dict):
            want = spec.get(topic, {}).get(q, missing)
        else:
            want = EARLIEST if spec == "earliest" else LATEST
        if want == EARLIEST:
            out[(topic, q)] = low
        elif want == LATEST:
            out[(topic, q)] = high
        else:
            # An offset under the queue's first is kept: the read reports it as data loss.
            out[(topic, q)] = min(want, high)
    return out


def split(topic: str, queue_id: int, start: int, end: int, most: int, *, from_earliest: bool) -> list[QueueRange]:
    """``[start, end)`` as ranges of at most ``most`` offsets each (none when empty)."""
    return [
        QueueRange(topic, queue_id, s, min(s + most, end), from_earliest and s == start)
        for s in range(start, end, most)
    ]


def to_offset(offsets: dict[Queue, int]) -> StreamOffset:
    """A streaming offset: ``{"topic": {"queueId": next_offset}}`` (JSON keys are strings)."""
    out: StreamOffset = {}
    for (topic, q), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(q)] = off
    return out


def from_offset(offset: Union[StreamOffset, None]) -> dict[Queue, int]:
    """The inverse of ``to_offset``."""
    return {(topic, int(q)): int(off) for topic, queues in (offset or {}).items() for q, off in queues.items()}
