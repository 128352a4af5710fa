"""Reading one partition as Arrow record batches, in a Spark Python worker.

The store is opened read-only inside the task (nothing of mqlite is pickled) and each batch
comes from ``_core.read_columns``: the binding fills Arrow's buffers in Rust and pyarrow wraps
them, so no Python object is made per message. The one exception is the ``sql`` option: its
predicate is evaluated on each message's properties (a dict per message), after which the
batch is filtered in Arrow.

Data loss: when retention has deleted messages under a range's start, the read fails with
``OffsetOutOfRangeError`` (``failOnDataLoss=true``, the default) or logs a warning on
``mqlite.spark`` and goes on from the queue's first offset.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping

import pyarrow as pa

from mqlite import _core
from mqlite.errors import OffsetOutOfRangeError
from mqlite.selector import MessageSelector
from mqlite.spark.options import SourceOptions
from mqlite.spark.plan import QueueRange
from mqlite.spark.schema import arrow_schema
from mqlite.store import Store

__all__ = ["BATCH_ROWS", "read_range"]

log = logging.getLogger("mqlite.spark")

# Rows per Arrow batch: Spark's own default (spark.sql.execution.arrow.maxRecordsPerBatch).
BATCH_ROWS = 10_000


def _buf(columns: dict[str, bytes], name: str) -> pa.Buffer:
    return pa.py_buffer(columns[name])


def _var(kind: pa.DataType, n: int, columns: dict[str, bytes], name: str, validity: pa.Buffer | None = None) -> pa.Array:
    return pa.Array.from_buffers(kind, n, [validity, _buf(columns, name + ".offsets"), _buf(columns, name + ".data")])


def _fixed(kind: pa.DataType, n: int, columns: dict[str, bytes], name: str) -> pa.Array:
    return pa.Array.from_buffers(kind, n, [None, _buf(columns, name)])


def _count(columns: dict[str, bytes], name: str) -> int:
    """Entries of a list's child, from the list's last offset."""
    return int.from_bytes(columns[name + ".offsets"][-4:], "little", signed=True)


def to_batch(topic: str, queue_id: int, n: int, columns: dict[str, bytes], include_properties: bool) -> pa.RecordBatch:
    """The batch of ``n`` rows that ``_core.read_columns`` returned as buffers."""
    schema = arrow_schema(include_properties)
    ts = schema.field("timestamp").type
    keys_type = schema.field("keys").type
    key_text = _var(pa.string(), _count(columns, "keys"), columns, "keys.item")
    arrays = [
        _var(pa.binary(), n, columns, "value"),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(queue_id, pa.int32()), n),
        _fixed(pa.int64(), n, columns, "offset"),
        _fixed(ts, n, columns, "timestamp"),
        _fixed(ts, n, columns, "bornTimestamp"),
        _var(pa.string(), n, columns, "tags", _buf(columns, "tags.validity")),
        pa.ListArray.from_arrays(_fixed(pa.int32(), n + 1, columns, "keys.offsets"), key_text, type=keys_type),
        _var(pa.string(), n, columns, "msgId"),
        _fixed(pa.int32(), n, columns, "reconsumeTimes"),
    ]
    if include_properties:
        entries = _count(columns, "properties")
        arrays.append(
            pa.MapArray.from_arrays(
                _fixed(pa.int32(), n + 1, columns, "properties.offsets"),
                _var(pa.string(), entries, columns, "properties.key"),
                _var(pa.string(), entries, columns, "properties.value"),
                type=schema.field("properties").type,
            )
        )
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _sql_mask(batch: pa.RecordBatch, predicate: Callable[[Mapping[str, str]], bool]) -> pa.Array:
    """Which rows' properties the ``sql`` predicate accepts."""
    props = batch.column("properties").to_pylist()
    return pa.array([predicate(dict(p or ())) for p in props], pa.bool_())


def read_range(opts: SourceOptions, part: QueueRange | None) -> Iterator[pa.RecordBatch]:
    """The messages of ``part`` as batches of at most ``BATCH_ROWS`` rows, in queue order.
    ``None`` (Spark's stand-in when there are no partitions) yields nothing."""
    if part is None or part.start >= part.end:
        return
    predicate = MessageSelector.by_sql(opts.sql).matches if opts.sql is not None else None
    # The sql predicate needs the properties; the column is dropped again unless asked for.
    with_props = opts.include_properties or predicate is not None
    tags = list(opts.tags) if opts.tags is not None else None
    with Store(opts.path, read_only=True) as store:
        core = store._live()
        pos = part.start
        while pos < part.end:
            status, nxt, low, _high, n, columns = _core.read_columns(
                core, part.topic, part.queue_id, pos, part.end, BATCH_ROWS, tags, with_props
            )
            if status == "OFFSET_TOO_SMALL":
                if opts.fail_on_data_loss and not part.from_earliest:
                    raise OffsetOutOfRangeError(
                        f"{part.topic}/{part.queue_id}: offsets {pos} to {min(low, part.end) - 1} were deleted "
                        f"(retention) before they were read; the queue now starts at {low}. Set option "
                        "failOnDataLoss=false to skip them with a warning."
                    )
                if not part.from_earliest:
                    log.warning(
                        "%s/%d: offsets %d to %d were deleted before they were read; skipped (failOnDataLoss=false)",
                        part.topic, part.queue_id, pos, min(low, part.end) - 1,
                    )
                pos = max(nxt, pos + 1)
                continue
            if n:
                batch = to_batch(part.topic, part.queue_id, n, columns, with_props)
                if predicate is not None:
                    batch = batch.filter(_sql_mask(batch, predicate))
                    if not opts.include_properties:
                        batch = batch.drop_columns(["properties"])
                if batch.num_rows:
                    yield batch
            if nxt <= pos:
                # Past the queue's end (it was planned from a later view): nothing more.
                break
            pos = nxt
