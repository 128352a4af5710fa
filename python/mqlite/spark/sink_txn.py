"""The sink's transactions: their ids, the progress it records, and the check-back listener
that resolves orphans from store state alone.

Every task attempt writes its rows as one transaction of the sink's producer group, with id
``{sinkId}:{batch}:{partition}:{attempt}:{nonce}``:

- ``batch`` is the micro-batch id of a streaming write, or ``job-{uuid}`` for a batch write
  (one uuid per ``df.write``; ``sinkId`` defaults to ``batch`` there);
- ``nonce`` is random per attempt, so an attempt of a query restarted on a new SparkContext
  (whose task numbers start again) never reuses a transaction id of the previous run.

The driver decides a batch in one append (``TransactionProducer.commit``/``rollback`` with a
progress value): a streaming batch sets ``spark-sink:{sinkId}`` to its batch id, a batch write
sets ``spark-sink-job:{uuid}`` to ``committed`` or ``aborted``. So a transaction still open
when its batch's progress is recorded was never listed by the driver (its attempt failed, was
speculative, or belonged to a run that crashed): the check-back listener rolls it back. One
still open whose batch is not recorded may yet be committed: the listener answers UNKNOW.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mqlite.transaction import LocalTransactionState, TransactionProducer

if TYPE_CHECKING:
    from mqlite.message import Message, MessageExt
    from mqlite.store import Store

__all__ = [
    "SinkCheckListener",
    "TxnId",
    "job_key",
    "new_txn_id",
    "parse_txn_id",
    "sink_producer",
    "stream_key",
]

# Checked this many times without an answer a transaction would be discarded: the sink's
# checks answer UNKNOW for as long as a batch is open, which must never discard it.
_NEVER_DISCARD = 1 << 30
_TXN_PROPERTY = "__transactionId__"


def stream_key(sink_id: str) -> str:
    """The progress key holding the last batch id a streaming sink committed."""
    return f"spark-sink:{sink_id}"


def job_key(job: str) -> str:
    """The progress key of batch write ``job`` (``committed`` or ``aborted`` once decided)."""
    return f"spark-sink-job:{job}"


@dataclass(frozen=True)
class TxnId:
    """A parsed sink transaction id: ``batch`` is an int (streaming) or ``job-{uuid}``."""

    sink_id: str
    batch: int | str
    partition: int
    attempt: int


def new_txn_id(sink_id: str, batch: int | str, partition: int, attempt: int) -> str:
    return f"{sink_id}:{batch}:{partition}:{attempt}:{uuid.uuid4().hex[:12]}"


def parse_txn_id(text: str) -> TxnId | None:
    """The parts of a sink transaction id, or None for any other id."""
    parts = text.rsplit(":", 4)
    if len(parts) != 5:
        return None
    sink_id, batch, partition, attempt, _nonce = parts
    try:
        part, att = int(partition), int(attempt)
    except ValueError:
        return None
    if batch.startswith("job-"):
        return TxnId(sink_id, batch[4:], part, att)
    try:
        return TxnId(sink_id, int(batch), part, att)
    except ValueError:
        return None


class SinkCheckListener:
    """Decides the sink's open transactions from their ids and the recorded progress: ROLLBACK
    when the batch (or batch write) they belong to is already decided, UNKNOW otherwise (the
    driver may still commit them). Any ``TransactionProducer`` of the sink's producer group
    must use this listener."""

    def __init__(self) -> None:
        self.producer: TransactionProducer | None = None

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW  # the sink never sends through this call

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        tid = parse_txn_id(msg.properties.get(_TXN_PROPERTY, ""))
        if tid is None or self.producer is None:
            return LocalTransactionState.UNKNOW
        if isinstance(tid.batch, str):
            done = self.producer.progress(job_key(tid.batch)) is not None
        else:
            last = self.producer.progress(stream_key(tid.sink_id))
            done = last is not None and tid.batch <= int(last)
        return LocalTransactionState.ROLLBACK_MESSAGE if done else LocalTransactionState.UNKNOW


def sink_producer(store: Store, group: str) -> TransactionProducer:
    """A producer of the sink's group with the sink's listener and no check thread: the
    driver runs one check pass (``check_now``) after each decision, with no check timeout, so
    every orphan of a decided batch goes at the next commit or abort."""
    listener = SinkCheckListener()
    producer = TransactionProducer(
        store, group, listener, check_timeout=0, check_interval=None, max_checks=_NEVER_DISCARD
    )
    listener.producer = producer
    return producer
