"""``MqliteDataSource``: the ``mqlite`` format for ``spark.read`` and ``spark.readStream``.

Spark pickles the data source and its readers into Python worker processes, so they hold only
the checked options and plain offsets; every store handle is opened (read-only) and closed
within one call. Planning (``partitions``, ``initialOffset``, ``latestOffset``, ``commit``)
runs in a worker on the driver; ``read`` runs in the executors' workers.

Exactly-once: a micro-batch's range is the pair of offsets Spark writes to its checkpoint
before it runs the batch, and ``read`` of a range is deterministic (the same messages in the
same order for as long as retention keeps them), so a query restarted from its checkpoint
reads every message of its topics once: no loss, no duplicate.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from mqlite.offsets import group_offsets, offset_key
from mqlite.spark.arrow import read_range
from mqlite.spark.options import EARLIEST, SourceOptions, parse_options
from mqlite.spark.plan import (
    Queue,
    QueueRange,
    StreamOffset,
    bounds,
    from_offset,
    resolve,
    split,
    subscribed_queues,
    to_offset,
)
from mqlite.spark.schema import ddl
from mqlite.spark.sink import MqliteBatchWriter, MqliteStreamWriter, checked
from mqlite.store import Store

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["MqliteBatchReader", "MqliteDataSource", "MqliteStreamReader"]


def _part(partition: InputPartition | None) -> QueueRange | None:
    return partition if isinstance(partition, QueueRange) else None


class MqliteDataSource(DataSource):
    """Reads mqlite topics as DataFrames: ``spark.read.format("mqlite")`` (batch) and
    ``spark.readStream.format("mqlite")`` (micro-batch streaming), and writes DataFrames to
    topics: ``df.write.format("mqlite")`` and ``writeStream.format("mqlite")`` (exactly-once,
    mqlite.spark.sink). docs/spark.md lists the options, the schema and the sink's columns."""

    @classmethod
    def name(cls) -> str:
        return "mqlite"

    def schema(self) -> str:
        # Only includeProperties shapes the schema; the reader checks every option.
        raw = {str(k).lower(): str(v) for k, v in self.options.items()}.get("includeproperties", "false")
        return ddl(raw.strip().lower() == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        return MqliteBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MqliteStreamReader(parse_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return MqliteBatchWriter(*checked(schema, self.options, overwrite, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return MqliteStreamWriter(*checked(schema, self.options, overwrite, streaming=True))


class MqliteBatchReader(DataSourceReader):
    """A batch read: every selected queue from its starting to its ending offset."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        with Store(opts.path, read_only=True) as store:
            queues = bounds(store, subscribed_queues(store, opts, streaming=False))
            start = resolve(store, opts.starting, queues, missing=EARLIEST, timestamp=opts.starting_timestamp)
            end = resolve(store, opts.ending, queues, missing=-1)
        out: list[InputPartition] = []
        for (topic, q), s in start.items():
            out.extend(split(topic, q, s, end[(topic, q)], opts.max_offsets_per_partition, from_earliest=False))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.opts, _part(partition))


class MqliteStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A micro-batch stream with admission control: ``maxOffsetsPerTrigger`` (Spark's
    ``ReadMaxRows``) caps the offsets of one micro-batch, shared across queues in proportion to
    their backlog; ``trigger(availableNow=True)`` reads up to the queues' ends as they were when
    the query started, honouring that cap, then stops."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        # The availableNow target, set once per query start; None: no such trigger.
        self._target: dict[Queue, int] | None = None
        # The latest offsets the last latestOffset saw, for reportLatestOffset.
        self._latest: dict[Queue, int] = {}

    def _bounds(self) -> dict[Queue, tuple[int, int]]:
        with Store(self.opts.path, read_only=True) as store:
            return bounds(store, subscribed_queues(store, self.opts, streaming=True))

    def initialOffset(self) -> StreamOffset:
        opts = self.opts
        with Store(opts.path, read_only=True) as store:
            queues = bounds(store, subscribed_queues(store, opts, streaming=True))
            start = resolve(store, opts.starting, queues, missing=EARLIEST, timestamp=opts.starting_timestamp)
        return to_offset(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {queue: high for queue, (_low, high) in self._bounds().items()}

    def latestOffset(self, start: StreamOffset, limit: ReadLimit) -> StreamOffset:
        begin = from_offset(start)
        found = self._bounds()
        self._latest = {queue: high for queue, (_low, high) in found.items()}
        end: dict[Queue, int] = {}
        for queue, (low, high) in found.items():
            # A queue found after the query began starts at its first offset.
            first = begin.get(queue, low)
            last = high
            if self._target is not None:
                last = min(last, self._target.get(queue, first))
            end[queue] = max(first, last)
        # Queues in start that are no longer selected keep their offsets (Spark needs them).
        for queue, off in begin.items():
            end.setdefault(queue, off)
        if isinstance(limit, ReadMaxRows):
            end = _cap(begin, end, found, limit.max_rows)
        return to_offset(end)

    def reportLatestOffset(self) -> StreamOffset | None:
        return to_offset(self._latest) if self._latest else None

    def partitions(self, start: StreamOffset, end: StreamOffset) -> Sequence[InputPartition]:
        begin = from_offset(start)
        out: list[InputPartition] = []
        for (topic, q), stop in sorted(from_offset(end).items()):
            first = begin.get((topic, q))
            s = first if first is not None else 0
            out.extend(
                split(topic, q, s, stop, self.opts.max_offsets_per_partition, from_earliest=first is None)
            )
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.opts, _part(partition))

    def commit(self, end: StreamOffset) -> None:
        """Records ``end`` as the ``consumerGroup``'s offsets (when that option is set), so the
        group's progress shows the query's lag; the checkpoint stays the source of truth."""
        group = self.opts.consumer_group
        if group is None:
            return
        with Store(self.opts.path) as store:
            table = group_offsets(store._client_context.client_root())
            for topic, queues in end.items():
                table.update(offset_key(topic, group), {int(q): int(off) for q, off in queues.items()})

    def stop(self) -> None:
        """Nothing to release: no handle outlives a call."""


def _cap(
    begin: dict[Queue, int], end: dict[Queue, int], found: dict[Queue, tuple[int, int]], most: int
) -> dict[Queue, int]:
    """``end`` moved back so that at most ``most`` offsets lie between ``begin`` and it, shared
    in proportion to each queue's backlog (the remainder one by one in queue order, so every
    micro-batch makes progress)."""
    start = {q: begin.get(q, found[q][0] if q in found else end[q]) for q in end}
    backlog = {q: max(0, end[q] - start[q]) for q in end}
    total = sum(backlog.values())
    if total <= most:
        return end
    grant = {q: backlog[q] * most // total for q in end}
    left = most - sum(grant.values())
    for q in sorted(end):
        if left == 0:
            break
        if grant[q] < backlog[q]:
            grant[q] += 1
            left -= 1
    return {q: start[q] + grant[q] for q in end}
