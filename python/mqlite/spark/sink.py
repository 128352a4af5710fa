"""The ``mqlite`` format's writers: ``df.write`` (batch) and ``writeStream`` (micro-batches).

Process model: Spark builds a writer on the driver and pickles it; ``write`` runs in the
executors' Python workers (several at once, while the application writes too), and
``commit``/``abort`` run in a worker on the driver (for a stream, on a new writer instance).
So a writer holds only checked options; each call opens the store by path and closes it.

Exactly-once: each task attempt sends its rows, as they come, as the half messages of one
transaction (sink_txn.py names it) and returns its id; readers see none of them. The driver
then decides the whole batch in one append: commit every listed id and record the batch's
progress, or roll them back. A streaming batch whose id is not above the recorded one is a
replay after a restart: it writes nothing and rolls back what it was handed. Attempts the
driver never hears of (failed, speculative, or of a run that crashed) stay open until the
check pass that follows each decision rolls them back (``SinkCheckListener``).
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

import mqlite
from mqlite.errors import IllegalArgumentError, IllegalStateError, TransactionNotFoundError
from mqlite.spark.sink_options import SinkColumns, SinkOptions, check_columns, parse_sink_options
from mqlite.spark.sink_rows import to_message
from mqlite.spark.sink_txn import job_key, new_txn_id, sink_producer, stream_key

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from mqlite.message import Message
    from mqlite.transaction import TransactionProducer

__all__ = ["MqliteBatchWriter", "MqliteStreamWriter", "SinkCommitMessage", "checked"]

_BATCH_ID = "streaming.sql.batchId"


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What a task attempt tells the driver: its transaction (None: it wrote nothing), how
    many rows it holds, and the batch it wrote for."""

    txn_id: str | None
    rows: int
    batch: int | str


# Rows sent per call of the store: one hold of the transactions' gate and one append each.
_CHUNK = 2048


def _send_rows(
    producer: TransactionProducer,
    txn_id: str,
    rows: Iterator[Any],
    cols: SinkColumns,
    topic: str | None,
) -> int:
    """Sends ``rows`` as halves of transaction ``txn_id``, ``_CHUNK`` rows per call (a
    partition of any size streams through); rolls back whatever it stored if a row or a send
    fails."""
    counts: dict[str, int] = {}

    def queue_count(name: str) -> int:
        if name not in counts:
            counts[name] = producer._ctx.writable_queue_count(name)
        return counts[name]

    n = 0
    msgs: list[Message] = []
    queues: list[int | None] = []
    try:
        for row in rows:
            msg, queue = to_message(row, cols, topic, queue_count)
            msgs.append(msg)
            queues.append(queue)
            if len(msgs) == _CHUNK:
                n += producer._send_halves(msgs, txn_id, queues)
                msgs, queues = [], []
        if msgs:
            n += producer._send_halves(msgs, txn_id, queues)
    except BaseException:
        # A failed call may have appended some of its rows: roll back whatever was stored.
        try:
            producer.rollback([txn_id])
        except TransactionNotFoundError:
            pass  # not a row stored
        raise
    return n


def _task() -> tuple[int, int]:
    ctx = TaskContext.get()
    if ctx is None:  # outside Spark (a direct call): one partition, first attempt
        return 0, 0
    return ctx.partitionId(), ctx.attemptNumber()


@contextmanager
def _producer(opts: SinkOptions) -> Iterator[TransactionProducer]:
    """The sink's transaction producer on the store, both closed on exit: no handle outlives
    one call of Spark's."""
    with mqlite.open(opts.path) as store:
        producer = sink_producer(store, opts.producer_group)
        try:
            yield producer
        finally:
            producer.close()


def _decide(opts: SinkOptions, ids: list[str], commit: bool, progress: tuple[str, str]) -> None:
    """One append deciding ``ids`` and setting ``progress``, then one check pass for orphans."""
    with _producer(opts) as producer:
        if commit:
            producer.commit(ids, progress=progress)  # ids may be empty: progress alone
        else:
            producer.rollback(ids, progress=progress)
        producer.check_now()


def _ids(messages: list[WriterCommitMessage | None], batch: int | str) -> list[str]:
    out: list[str] = []
    for m in messages:
        if not isinstance(m, SinkCommitMessage):
            continue  # a failed task: Spark hands None
        if m.batch != batch:
            raise IllegalStateError(f"a task wrote for batch {m.batch!r}, but Spark commits batch {batch!r}")
        if m.txn_id is not None:
            out.append(m.txn_id)
    return out


class MqliteBatchWriter(DataSourceWriter):
    """``df.write.format("mqlite")``: every task's rows in one transaction, all committed
    together when the job succeeds, all rolled back when it fails."""

    def __init__(self, opts: SinkOptions, cols: SinkColumns) -> None:
        self.opts = opts
        self.cols = cols
        # One batch write: its progress key marks it decided.
        self.job = uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        partition, attempt = _task()
        txn = new_txn_id(self.opts.sink_id or "batch", f"job-{self.job}", partition, attempt)
        with _producer(self.opts) as producer:
            n = _send_rows(producer, txn, iterator, self.cols, self.opts.topic)
        return SinkCommitMessage(txn if n else None, n, self.job)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _decide(self.opts, _ids(messages, self.job), True, (job_key(self.job), "committed"))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _decide(self.opts, _ids(messages, self.job), False, (job_key(self.job), "aborted"))


class MqliteStreamWriter(DataSourceStreamWriter):
    """``writeStream.format("mqlite")`` with a ``sinkId``: exactly-once across task retries,
    speculative tasks and query restarts (docs/spark.md, the failure matrix)."""

    def __init__(self, opts: SinkOptions, cols: SinkColumns) -> None:
        self.opts = opts
        self.cols = cols

    def _sink_id(self) -> str:
        if self.opts.sink_id is None:  # parse_sink_options requires it for a stream
            raise IllegalArgumentError("option sinkId is required by writeStream.format('mqlite')")
        return self.opts.sink_id

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        ctx = TaskContext.get()
        raw = ctx.getLocalProperty(_BATCH_ID) if ctx is not None else None
        if raw is None:
            raise IllegalStateError(f"the task has no {_BATCH_ID} property: not a micro-batch")
        batch = int(raw)
        partition, attempt = _task()
        sink_id = self._sink_id()
        with _producer(self.opts) as producer:
            last = producer.progress(stream_key(sink_id))
            if last is not None and batch <= int(last):
                return SinkCommitMessage(None, 0, batch)  # a replay of a committed batch
            txn = new_txn_id(sink_id, batch, partition, attempt)
            n = _send_rows(producer, txn, iterator, self.cols, self.opts.topic)
        return SinkCommitMessage(txn if n else None, n, batch)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        ids = _ids(messages, batchId)
        key = stream_key(self._sink_id())
        with _producer(self.opts) as producer:
            last = producer.progress(key)
            if last is not None and batchId <= int(last):
                if ids:
                    producer.rollback(ids)  # a replay: its batch is already in the topic
            else:
                producer.commit(ids, progress=(key, str(batchId)))
            producer.check_now()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        ids = _ids(messages, batchId)
        if ids:
            with _producer(self.opts) as producer:
                producer.rollback(ids)


def checked(schema: StructType, options: Mapping[str, str], overwrite: bool, *, streaming: bool) -> tuple[SinkOptions, SinkColumns]:
    """The sink's options and columns, checked at planning on the driver (``IllegalArgumentError``
    names what is wrong; nothing is written)."""
    if overwrite:
        raise IllegalArgumentError("the mqlite sink only appends: use mode 'append' (a topic cannot be overwritten)")
    opts = parse_sink_options(options, streaming=streaming)
    return opts, check_columns(schema, opts)
