"""Transactional messages: half messages that consumers see only once their transaction commits.

A :class:`TransactionProducer` stores each message of a transaction as a *half* message (in
``RMQ_SYS_TRANS_HALF_TOPIC``, invisible in its topic), runs the caller's local transaction, and
then commits (the messages reach their topics) or rolls back (they never do), each decision one
durable append to the store. A transaction left undecided (its process died, or the local
transaction answered UNKNOW) is *checked*: a live producer of the same group, in any process,
asks its listener's ``check_local_transaction`` once the transaction is ``check_timeout`` old,
then every ``check_interval``, at most ``max_checks`` times; after that its messages are copied
to ``TRANS_CHECK_MAX_TIME_TOPIC`` and it is *discarded*.

A transaction id chosen by the caller makes commit idempotent: committing an id already committed
succeeds and writes nothing; committing one rolled back (or the reverse) raises
:class:`~mqlite.TransactionStateError`. :meth:`TransactionProducer.commit` decides several
transactions and records a small progress value under a key in one append: a crash leaves all of
it or none (:meth:`TransactionProducer.progress` reads it back).

Retention never deletes the messages of an open transaction. Once a decided transaction's
messages are deleted by retention the store forgets it: deciding its id again raises
:class:`~mqlite.TransactionNotFoundError`. See docs/transactions.md.
"""

from __future__ import annotations

import enum
import threading
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from mqlite.errors import IllegalArgumentError, InvalidBatchError
from mqlite.producer import Producer

if TYPE_CHECKING:
    from types import TracebackType

    from mqlite._context import HasClientContext
    from mqlite.message import Message, MessageExt, SendResult
    from mqlite.store import Store

__all__ = [
    "LocalTransactionState",
    "PendingTransaction",
    "Transaction",
    "TransactionListener",
    "TransactionProducer",
    "TransactionSendResult",
    "pending",
    "resolve",
]


class LocalTransactionState(enum.Enum):
    """What a local transaction (or a check of it) answers; ``UNKNOW`` is RocketMQ's spelling."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"
    UNKNOWN = "UNKNOW"  # alias of UNKNOW


class TransactionListener(Protocol):
    """The producer's side of a transaction."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        """Runs the local transaction of half message ``msg``."""
        ...

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        """Says how the transaction of ``msg`` (its first half message, as stored) ended."""
        ...


@dataclass(frozen=True)
class TransactionSendResult:
    """Outcome of :meth:`TransactionProducer.send_message_in_transaction`."""

    transaction_id: str
    local_state: LocalTransactionState
    send_result: SendResult


@dataclass(frozen=True)
class PendingTransaction:
    """A transaction as :meth:`TransactionProducer.pending` lists it."""

    id: str
    group: str
    state: str
    half_offsets: tuple[int, ...]
    checks: int
    first_ms: int
    age_ms: int


def _state(value: object) -> LocalTransactionState:
    if isinstance(value, LocalTransactionState):
        return value
    raise IllegalArgumentError(
        f"a transaction listener must return a LocalTransactionState, not {value!r}"
    )


def _not_a_batch(msg: object) -> None:
    if isinstance(msg, (list, tuple)):
        raise InvalidBatchError("a transaction takes one message per send, not a batch")


def _id(value: object) -> str:
    if not isinstance(value, str):
        raise IllegalArgumentError(f"a transaction id must be a str, not {value!r}")
    return value


def _rows(rows: list[tuple[str, str, str, list[int], int, int, int]]) -> list[PendingTransaction]:
    return [
        PendingTransaction(id, group, state, tuple(halves), checks, first, age)
        for (id, group, state, halves, checks, first, age) in rows
    ]


def pending(store: Store, group: str | None = None) -> list[PendingTransaction]:
    """The undecided transactions of producer group ``group`` (of every group when ``None``) in
    ``store``, oldest first, with their ages by the store's clock: what
    :meth:`TransactionProducer.pending` lists, without a producer or a listener (for operators'
    tools). The store must be open for writing (listing first completes the copies of a commit
    a crash interrupted): a read-only store raises StoreReadOnlyError; a ``group`` that is not a
    str, IllegalArgumentError."""
    if group is not None:
        group = _id(group)
    return _rows(store._live()._txn_list(group))


def resolve(store: Store, id: str, commit: bool) -> bool:
    """Decides transaction ``id`` of ``store`` by hand, as :meth:`TransactionProducer.resolve`
    does but without a producer: commits it when ``commit``, else rolls it back. True when
    anything was written (deciding it the same way again writes nothing); an id never prepared
    raises TransactionNotFoundError, one decided the other way TransactionStateError, and a
    read-only store StoreReadOnlyError."""
    return bool(store._live()._txn_end([_id(id)], bool(commit), None))


class Transaction:
    """Several messages sent in one transaction (``with producer.transaction() as tx``): committed
    when the block exits cleanly, rolled back when it raises."""

    def __init__(self, producer: TransactionProducer, id: str) -> None:
        self._producer = producer
        self.id = id
        self.results: list[SendResult] = []
        self._sent = False

    def send(self, msg: Message, queue_id: int | None = None) -> SendResult:
        """Stores ``msg`` as a half message of this transaction."""
        _not_a_batch(msg)
        result = self._producer._send_half(msg, self.id, queue_id)
        self.results.append(result)
        self._sent = True
        return result

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._sent:
            return
        if exc_type is None:
            self._producer.commit([self.id])
        else:
            self._producer.rollback([self.id])


class TransactionProducer(Producer):
    """A producer of transactional messages for producer group ``group``.

    ``listener`` runs local transactions and answers checks. A transaction is checked once it is
    ``check_timeout`` seconds old, then again at most every ``check_interval`` seconds, at most
    ``max_checks`` times. Unless ``check_interval`` is None or 0, a daemon thread runs a check
    pass over this group's undecided transactions (of any process) every ``check_interval``
    seconds; :meth:`check_now` runs one pass by hand (with ``check_interval`` None or 0, each pass
    may check a transaction again).
    """

    def __new__(
        cls, store: HasClientContext, group: str, listener: TransactionListener, **kw: Any
    ) -> TransactionProducer:
        return cast("TransactionProducer", super().__new__(cls, store, group))

    def __init__(
        self,
        store: HasClientContext,
        group: str,
        listener: TransactionListener,
        *,
        check_timeout: float = 6.0,
        check_interval: float | None = 5.0,
        max_checks: int = 15,
    ) -> None:
        super().__init__(store, group)
        for name, value in (("check_timeout", check_timeout), ("check_interval", check_interval or 0.0)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise IllegalArgumentError(f"{name} must be a number of seconds >= 0, not {value!r}")
        if isinstance(max_checks, bool) or not isinstance(max_checks, int) or max_checks < 1:
            raise IllegalArgumentError(f"max_checks must be an int >= 1, not {max_checks!r}")
        self._listener = listener
        self._check_timeout_ms = int(check_timeout * 1000)
        self._check_interval_ms = int((check_interval or 0.0) * 1000)
        self._max_checks = max_checks
        self._stop = threading.Event()
        self._checker: threading.Thread | None = None
        if check_interval:
            self._checker = threading.Thread(
                target=self._check_loop, args=(check_interval,), name=f"mqlite-txn-check-{group}", daemon=True
            )
            self._checker.start()

    def _store(self) -> Any:
        return self._ctx.live()

    def send_message_in_transaction(
        self, msg: Message, arg: Any = None, *, transaction_id: str | None = None
    ) -> TransactionSendResult:
        """Stores ``msg`` as a half message, runs the listener's local transaction, and commits or
        rolls back as it answers (UNKNOW leaves the decision to the checks). An exception of the
        listener rolls back and propagates."""
        _not_a_batch(msg)
        tid = _id(transaction_id) if transaction_id is not None else uuid.uuid4().hex
        result = self._send_half(msg, tid)
        try:
            state = _state(self._listener.execute_local_transaction(msg, arg))
        except BaseException:
            self.rollback([tid])
            raise
        self._decide(tid, state)
        return TransactionSendResult(tid, state, result)

    def transaction(self, id: str | None = None) -> Transaction:
        """A transaction for several messages (see :class:`Transaction`); ``id`` defaults to a
        fresh uuid."""
        return Transaction(self, _id(id) if id is not None else uuid.uuid4().hex)

    def commit(self, ids: list[str] | tuple[str, ...], progress: tuple[str, str] | None = None) -> bool:
        """Commits transactions ``ids`` and sets ``progress`` (``(key, value)``) in one append;
        True when anything was written (committing what is already committed writes nothing)."""
        return self._end(ids, True, progress)

    def rollback(self, ids: list[str] | tuple[str, ...], progress: tuple[str, str] | None = None) -> bool:
        """Rolls back transactions ``ids`` (and sets ``progress``) in one append."""
        return self._end(ids, False, progress)

    def _end(self, ids: list[str] | tuple[str, ...], commit: bool, progress: tuple[str, str] | None) -> bool:
        if not isinstance(ids, (list, tuple)):
            raise IllegalArgumentError(f"ids must be a list of transaction ids, not {ids!r}")
        checked = [_id(i) for i in ids]
        if progress is not None and not (
            isinstance(progress, tuple) and len(progress) == 2 and all(isinstance(p, str) for p in progress)
        ):
            raise IllegalArgumentError(f"progress must be a (key, value) tuple of str, not {progress!r}")
        return bool(self._store()._txn_end(checked, commit, progress))

    def _decide(self, tid: str, state: LocalTransactionState) -> None:
        if state is LocalTransactionState.COMMIT_MESSAGE:
            self.commit([tid])
        elif state is LocalTransactionState.ROLLBACK_MESSAGE:
            self.rollback([tid])

    def progress(self, key: str) -> str | None:
        """The progress value last committed under ``key``, or None."""
        return self._store()._txn_progress(_id(key))  # type: ignore[no-any-return]

    def pending(self, all_groups: bool = False) -> list[PendingTransaction]:
        """The undecided transactions of this group (of every group when ``all_groups``), oldest
        first, with their ages by the store's clock (``age_ms``)."""
        return _rows(self._store()._txn_list(None if all_groups else self.group))

    def resolve(self, id: str, commit: bool) -> bool:
        """Decides transaction ``id`` by hand (commit when ``commit``, else roll back)."""
        return self._end([id], bool(commit), None)

    def check_now(self, limit: int = 1000) -> int:
        """Checks this group's transactions that are due, once; returns how many were checked.
        A check the listener answers with something else than a LocalTransactionState raises
        IllegalArgumentError (after the others of the pass were decided)."""
        store = self._store()
        claimed = store._txn_claim(
            self.group, self._check_timeout_ms, self._check_interval_ms, self._max_checks, limit
        )
        bad: Exception | None = None
        for tid, half in claimed:
            try:
                msg = store.get_by_offset(half)
                self._decide(tid, _state(self._listener.check_local_transaction(msg)))
            except Exception as e:  # noqa: BLE001 - one bad answer must not stop the others
                bad = bad or e
        if bad is not None:
            raise bad
        return len(claimed)

    def _check_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.check_now()
            except Exception:  # noqa: BLE001 - the next pass retries; the store stays consistent
                if self.closed:
                    return

    def _mark_closed(self, reason: Literal["producer", "store", "fork"] = "producer") -> None:
        """The store closed (or this process forked): the check thread stops at its next turn."""
        self._stop.set()
        super()._mark_closed(reason)

    def close(self, timeout: float | None = None) -> None:
        """Stops the check thread, then closes the producer."""
        self._stop.set()
        if self._checker is not None and self._checker is not threading.current_thread():
            self._checker.join(timeout)
        super().close(timeout)

