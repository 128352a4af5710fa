"""One DataFrame row as one message: the sink's column semantics.

Runs in the executors' Python workers, once per row. A row the columns' types allow but the
store cannot take (a null value or topic, a queue id out of range) raises a typed error that
names the column; the task then fails and its transaction is rolled back.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

from mqlite.errors import IllegalArgumentError
from mqlite.message import Message
from mqlite.spark.sink_options import SinkColumns

__all__ = ["to_message"]


def _text(row: Any, column: str) -> str | None:
    value = row[column]
    return None if value is None else str(value)


def to_message(
    row: Any, cols: SinkColumns, topic_option: str | None, queue_count: Callable[[str], int]
) -> tuple[Message, int | None]:
    """The message of ``row`` and the queue it goes to (None: the producer's round robin).
    ``queue_count(topic)`` is the topic's write queue count, for ``shardingKey``: a key hashes
    to a queue as ``Producer.send(sharding_key=...)`` does (CRC32 modulo the count)."""
    body = row[cols.value]
    if body is None:
        raise IllegalArgumentError(f"column {cols.value!r} is null: every row needs a value")
    if isinstance(body, str):
        body = body.encode()
    elif not isinstance(body, bytes):
        body = bytes(body)
    topic = topic_option
    if topic is None and cols.topic is not None:
        topic = _text(row, cols.topic)
        if topic is None:
            raise IllegalArgumentError(f"column {cols.topic!r} is null and option topic is not set")
    if topic is None:  # check_columns guarantees one of them
        raise IllegalArgumentError("no topic: set option topic or give a 'topic' column")
    kw: dict[str, Any] = {}
    if cols.tags is not None and (tags := _text(row, cols.tags)) is not None:
        kw["tags"] = tags
    if cols.keys is not None and (keys := row[cols.keys]) is not None:
        kw["keys"] = [str(k) for k in keys if k is not None] if cols.keys_array else str(keys).split()
    if cols.properties is not None and (props := row[cols.properties]) is not None:
        kw["properties"] = {str(k): str(v) for k, v in dict(props).items() if v is not None}
    msg = Message(topic, body, **kw)
    queue: int | None = None
    if cols.queue_id is not None and (q := row[cols.queue_id]) is not None:
        queue = int(q)
        count = queue_count(topic)
        if not 0 <= queue < count:
            raise IllegalArgumentError(
                f"column {cols.queue_id!r}: queue {queue} is not a write queue of {topic!r} (0 to {count - 1})"
            )
    if cols.sharding_key is not None and (key := row[cols.sharding_key]) is not None:
        raw = key.encode() if isinstance(key, str) else bytes(key)
        queue = zlib.crc32(raw) % max(1, queue_count(topic))
    return msg, queue
