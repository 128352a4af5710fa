"""The ``Producer``: a thin, fast wrapper over the Rust producer, plus queue selection
(sharding key, custom selector) and asynchronous / one-way sends."""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FuturesTimeout
from concurrent.futures._base import FINISHED as _FINISHED
from concurrent.futures._base import RUNNING as _RUNNING
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from mqlite import _core
from mqlite._args import deprecated
from mqlite.errors import (
    IllegalArgumentError,
    InvalidConfigError,
    MQError,
    StoreClosedError,
    StoreUsedAfterForkError,
    TopicNotFoundError,
)
from mqlite.group import check_group
from mqlite.message import Message, MessageQueue, SendBatchResult, SendResult

if TYPE_CHECKING:
    from mqlite.store import Store

__all__ = ["Compression", "MessageQueueSelector", "Producer", "SendCallback", "SendFuture"]

log = logging.getLogger("mqlite.producer")

MessageQueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]
"""RocketMQ's ``MessageQueueSelector``: ``fn(queues, msg, arg) -> one of queues``."""
Compression = Literal["zlib", "lz4", "zstd"]
"""A body codec (RocketMQ's ``CompressionType``): zlib is the Java producer's default."""
SendCallback = Callable[[SendResult | None, BaseException | None], None]
"""Called as ``callback(result, None)`` or ``callback(None, exc)`` when an async send ends."""


class _CompletionCondition(threading.Condition):
    """The condition of a completion thread and of every future it resolves.

    ``forked`` is set in a forked child (see ``_Completer.after_fork``): the thread that would
    complete the futures exists only in the parent, so a wait in the child raises instead."""

    def __init__(self, lock: threading.RLock) -> None:
        super().__init__(lock)
        self.forked: str | None = None

    def check_not_forked(self) -> None:
        """StoreUsedAfterForkError in a forked child: nothing there completes a send."""
        if self.forked is not None:
            raise StoreUsedAfterForkError(self.forked)


class SendFuture(Future):  # type: ignore[type-arg]
    """The ``concurrent.futures.Future`` of an async send.

    It starts RUNNING (the message is appended before ``send_async`` returns, so a send cannot
    be cancelled: ``cancel()`` returns False) and shares its condition with every future the
    same completion thread resolves, which resolves a whole group commit's futures under one
    lock with one notify. ``result``/``exception`` therefore re-check their own state after a
    wake-up until it is theirs or the timeout passes. In a forked child they raise
    StoreUsedAfterForkError for a future still pending at the fork: only the parent completes it.
    """

    _condition: _CompletionCondition

    def __init__(self, condition: _CompletionCondition) -> None:  # no super(): see above
        self._condition = condition
        self._state = _RUNNING
        self._result: SendResult | None = None
        self._exception: BaseException | None = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Callable[[Future[Any]], object]] = []

    def _wait_finished(self, timeout: float | None) -> None:
        """Waits (condition held) until this future is finished; FuturesTimeout if it is not
        within ``timeout`` seconds."""
        if self._state == _FINISHED:
            return
        if timeout is None:
            while self._state != _FINISHED:
                self._condition.wait()
            return
        deadline = time.monotonic() + timeout
        while self._state != _FINISHED:
            left = deadline - time.monotonic()
            if left <= 0:
                raise FuturesTimeout()
            self._condition.wait(left)

    # A finished future is read without the lock: ``_finish`` sets the outcome before the
    # state, and a finished future never changes again.

    def result(self, timeout: float | None = None) -> SendResult:
        if self._state != _FINISHED:
            self._condition.check_not_forked()
            with self._condition:
                self._wait_finished(timeout)
        if self._exception is not None:
            raise self._exception
        assert self._result is not None
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state != _FINISHED:
            self._condition.check_not_forked()
            with self._condition:
                self._wait_finished(timeout)
        return self._exception

    def _run_done_callbacks(self) -> None:
        """Calls the ``add_done_callback`` functions (after ``_finish``, condition released)."""
        for fn in self._done_callbacks:
            try:
                fn(self)
            except Exception:
                log.exception("exception calling callback for %r", self)

    def _finish(self, result: SendResult | None, error: BaseException | None) -> None:
        """Completes the future (the shared condition held; the caller notifies). The outcome
        is set before the state (see ``result``)."""
        if error is None:
            self._result = result
            self._state = _FINISHED
            for w in self._waiters:
                w.add_result(self)
        else:
            self._exception = error
            self._state = _FINISHED
            for w in self._waiters:
                w.add_exception(self)


def _after_completion(
    fut: SendFuture,
    callback: SendCallback | None,
    result: SendResult | None,
    error: BaseException | None,
) -> None:
    """Runs a completed send's done-callbacks, then its send callback (condition released);
    a failing callback is logged, never propagated into the completion thread."""
    fut._run_done_callbacks()
    if callback is not None:
        try:
            callback(result, error)
        except Exception:
            log.exception("send callback failed")


class _Tally:
    """A producer's async sends not yet completed (guarded by the completer's condition)."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending = 0


_Item = tuple[SendFuture, "SendCallback | None", "SendResult | None", "BaseException | None", _Tally]


class _Completer:
    """One thread per store that completes async sends in call order.

    The caller's thread appends (``_send_pipelined``); this thread then waits for the disk once
    for everything queued meanwhile by every producer of the store (sync-flush stores: one
    group commit for all of them), resolves those futures at once and runs the callbacks.
    """

    def __init__(self, store: Store, sync: bool) -> None:
        self._store = weakref.ref(store)
        self._sync = sync
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        # Re-entrant, as concurrent.futures.wait() takes the condition of every future it
        # watches, which here is this one for all of them. This module's own code takes the
        # lock directly (``with self._lock``: no Python-level __enter__/__exit__ per send).
        self._lock = threading.RLock()
        self.cond = _CompletionCondition(self._lock)
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="mqlite-async-send", daemon=True)
        self._thread.start()

    def put(self, item: _Item) -> None:
        """Queues an appended send for completion; after ``stop`` (a close racing the send) the
        future fails at once instead of waiting for a thread that is gone."""
        with self._lock:
            if not self._stopped:
                item[4].pending += 1
                self._queue.put(item)  # under the lock: ordered before the stop marker
                return
            fut, callback, result, error, _ = item
            if error is None:
                result, error = None, StoreClosedError(
                    "the store was closed before this send was confirmed (the message may be stored)"
                )
            fut._finish(result, error)
            self.cond.notify_all()
        _after_completion(fut, callback, result, error)

    def _take(self) -> tuple[list[_Item], bool]:
        """Everything queued (at least one item, blocking for it); True once told to stop."""
        first = self._queue.get()
        if first is None:
            return [], True
        items = [first]
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return items, False
            if item is None:
                return items, True
            items.append(item)

    def _durable(self, items: list[_Item]) -> tuple[bool, BaseException | None]:
        """Waits once for the disk to hold every appended item (sync-flush stores)."""
        if not self._sync:
            return True, None
        end = max((r._end() for _, _, r, _, _ in items if r is not None), default=0)
        if end == 0:
            return True, None
        try:
            store = self._store()
            if store is None:
                raise StoreClosedError("store was garbage-collected with sends pending")
            # The core, not ``_live()``: a closing store refuses new sends before it drains
            # these, and its core stays open until the drain is over.
            core = store._core
            del store
            return core.wait_durable(end), None
        except BaseException as exc:  # noqa: BLE001 - handed to every future
            return False, exc

    def _run(self) -> None:
        while True:
            items, stop = self._take()
            durable, failure = self._durable(items)
            outcomes: list[tuple[SendResult | None, BaseException | None]] = []
            with self._lock:
                for fut, _, result, error, _ in items:
                    if error is None and failure is not None:
                        result, error = None, failure
                    elif result is not None and not durable:
                        result = result._timed_out()
                    fut._finish(result, error)
                    outcomes.append((result, error))
                self.cond.notify_all()
            for (fut, callback, _, _, _), (result, error) in zip(items, outcomes):
                if callback is not None or fut._done_callbacks:
                    _after_completion(fut, callback, result, error)
            with self._lock:
                for item in items:
                    item[4].pending -= 1
                self.cond.notify_all()
            if stop:
                return

    def flush(self, tally: _Tally, timeout: float | None) -> int:
        """Waits until ``tally``'s sends completed (callbacks run); returns how many have not.

        On the completion thread itself (a send callback calling ``flush`` or ``close``) it
        cannot wait, since only this thread completes sends: it returns the count at once."""
        self.cond.check_not_forked()
        with self.cond:
            if threading.current_thread() is not self._thread:
                self.cond.wait_for(lambda: tally.pending == 0, timeout)
            return tally.pending

    def after_fork(self, reason: str) -> None:
        """In a forked child (from the fork handler, before any other code of the child runs):
        the completion thread is the parent's, so waits for its sends raise ``reason`` as a
        StoreUsedAfterForkError and new ones are refused. The lock is reset: the parent's thread
        may have held it at the fork, and it would never be released here."""
        self.cond._at_fork_reinit()  # type: ignore[attr-defined]  # the stdlib's own fork hook
        self.cond.forked = reason
        self._stopped = True

    def stop(self, join: bool = True) -> None:
        with self.cond:
            if not self._stopped:
                self._stopped = True
                self._queue.put(None)
        if join and threading.current_thread() is not self._thread:
            self._thread.join()


class Producer(_core.Producer):
    """Sends messages to a store; get one from ``Store.producer()``.

    ``send`` is the native method itself (no Python frame per message): it picks the queue
    round robin over the topic's write queues, unless ``queue_id`` names it, ``sharding_key``
    hashes to it (CRC32 modulo the queue count: one key keeps to one queue, hence in order) or
    ``selector(queues, msg, arg)`` returns it. The producer keeps one round-robin turn per topic
    (RocketMQ's ``TopicPublishInfo``): sends to other topics never change which queue of a topic
    comes next.

    ``compress_over=N`` compresses the body of every single send of ``N`` bytes or more with
    ``compression`` (``"zlib"``, ``"lz4"`` or ``"zstd"``) at ``compression_level`` (RocketMQ's
    default, 5, when None; LZ4 has no levels), and stores it compressed when that made it shorter,
    as RocketMQ's ``compressMsgBodyOverHowmuch`` does (its Java producer compresses bodies of
    4096 bytes or more with zlib by default; mqlite compresses only when asked). Batches are never
    compressed. Consumers see the original body; ``MessageExt.raw_body`` has the stored bytes.
    """

    __slots__ = ("_store", "_tally", "__weakref__")

    def __new__(
        cls,
        store: Store,
        group: str = "DEFAULT_PRODUCER",
        *,
        compress_over: int | None = None,
        compression: Compression = "zlib",
        compression_level: int | None = None,
    ) -> Producer:
        # Checked here too, so that a bad producer group is the same InvalidGroupError as a bad
        # consumer group.
        for name, value in (("compress_over", compress_over), ("compression_level", compression_level)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidConfigError(f"{name} must be an int or None, not {value!r}")
        if not isinstance(compression, str):
            raise InvalidConfigError(f"compression must be 'zlib', 'lz4' or 'zstd', not {compression!r}")
        return super().__new__(
            cls,
            store._live(),
            check_group(group),
            compress_over=compress_over,
            compression=compression,
            compression_level=compression_level,
        )

    def __init__(
        self,
        store: Store,
        group: str = "DEFAULT_PRODUCER",
        *,
        compress_over: int | None = None,
        compression: Compression = "zlib",
        compression_level: int | None = None,
    ) -> None:
        self._store = store
        self._tally = _Tally()

    def _dead(self) -> MQError:
        if not self._store._ok:
            return self._store._dead()
        return StoreClosedError(f"producer {self.group!r} is closed")

    def _select(
        self,
        msg: Message,
        queue_id: int | None,
        sharding_key: str | bytes | None,
        selector: MessageQueueSelector | None,
        arg: Any,
    ) -> int:
        if sum(x is not None for x in (queue_id, sharding_key, selector)) > 1:
            raise IllegalArgumentError("give at most one of queue_id, sharding_key and selector")
        topic = getattr(msg, "topic", None)
        if not isinstance(topic, str):
            raise IllegalArgumentError("queue selection needs a Message with a topic")
        core = self._store._live()
        try:
            count = core.queue_count(topic)
        except TopicNotFoundError:
            if not self._store._auto_create:
                raise
            core.create_topic(topic, self._store._default_queues, exist_ok=True)
            count = core.queue_count(topic)
        if count <= 0:
            raise IllegalArgumentError(f"topic {topic!r} has no write queues")
        if sharding_key is not None:
            if isinstance(sharding_key, str):
                key = sharding_key.encode()
            elif isinstance(sharding_key, (bytes, bytearray, memoryview)):
                key = bytes(sharding_key)
            else:
                raise IllegalArgumentError(
                    f"sharding_key must be str or bytes, not {type(sharding_key).__name__}"
                )
            return zlib.crc32(key) % count
        assert selector is not None
        mqs = [MessageQueue(topic, i) for i in range(count)]
        chosen = selector(mqs, msg, arg)
        if not isinstance(chosen, MessageQueue) or chosen not in mqs:
            raise IllegalArgumentError(
                f"selector must return one of the {count} queues of {topic!r}, got {chosen!r}"
            )
        return chosen.queue_id

    def _append(
        self,
        msg: Message,
        queue_id: int | None,
        sharding_key: str | bytes | None,
        selector: MessageQueueSelector | None,
        arg: Any,
    ) -> SendResult:
        if sharding_key is not None or selector is not None:
            queue_id = self._select(msg, queue_id, sharding_key, selector, arg)
        return self._send_pipelined(msg, queue_id)

    def send_pipelined(self, msg: Message, queue_id: int | None = None) -> SendResult:
        """Deprecated: use ``send`` (returns once the message is stored, and in a
        ``flush="sync"`` store once the disk holds it) or ``send_async`` (returns at once; its
        future completes when ``send`` would return, one fsync serving every pending send).

        Sends as ``send`` does, so SEND_OK keeps its meaning."""
        deprecated("Producer.send_pipelined is deprecated: use send, or send_async to pipeline sends")
        return self.send(msg, queue_id)

    def send_async(
        self,
        msg: Message,
        callback: SendCallback | None = None,
        *,
        queue_id: int | None = None,
        sharding_key: str | bytes | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
    ) -> SendFuture:
        """Send without waiting for the disk; returns a Future of the ``SendResult``.

        The message is appended before this returns (sends keep call order); in a
        ``flush="sync"`` store the future completes once the disk holds it, one fsync serving
        every pending send of every thread (group commit). A rejected message fails the future,
        not the call. ``callback(result, exc)`` runs, in call order, on the store's
        completion thread; ``flush()`` waits for every pending send. The future is already
        running, so ``cancel()`` returns False.
        """
        if self.closed:
            raise self._dead()
        completer = self._store._sender or self._store._completer()
        fut = SendFuture(completer.cond)
        try:
            if sharding_key is None and selector is None:
                result = self._send_pipelined(msg, queue_id)
            else:
                result = self._append(msg, queue_id, sharding_key, selector, arg)
        except Exception as exc:  # noqa: BLE001 - handed to the future / callback
            completer.put((fut, callback, None, exc, self._tally))
        else:
            completer.put((fut, callback, result, None, self._tally))
        return fut

    def send_oneway(
        self,
        msg: Message,
        *,
        queue_id: int | None = None,
        sharding_key: str | bytes | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
    ) -> None:
        """Append without waiting for the disk or reporting the result (a failure is only
        logged), as RocketMQ's one-way send."""
        if self.closed:
            raise self._dead()
        try:
            self._append(msg, queue_id, sharding_key, selector, arg)
        except Exception as exc:  # noqa: BLE001 - one-way: logged, never raised
            log.warning("one-way send to %r failed: %s", getattr(msg, "topic", None), exc)

    def flush(self, timeout: float | None = None) -> int:
        """Wait for pending async and one-way sends; returns how many are still pending (at
        once, without waiting, when called from a send callback). In a forked child it raises
        StoreUsedAfterForkError: the sends are the parent's to complete."""
        if timeout is not None and timeout < 0:
            raise IllegalArgumentError(f"timeout must be >= 0 or None, got {timeout!r}")
        if self._store._pid != os.getpid():
            raise self._store._dead()
        completer = self._store._sender  # none yet: no async send was ever made
        if completer is None:
            return 0
        return completer.flush(self._tally, timeout)

    def send_batch(  # type: ignore[override]  # keyword-only topic/queue_id in the public API
        self,
        msgs: Iterable[Message | bytes],
        *,
        topic: str | None = None,
        queue_id: int | None = None,
    ) -> SendBatchResult:
        """Append messages to one queue in one call, all or nothing.

        Items are ``Message`` objects of one topic, or bodies (``bytes``) sent to ``topic``.
        """
        if self.closed:
            raise self._dead()
        items = msgs if isinstance(msgs, (list, tuple)) else list(msgs)
        return super().send_batch(items, topic, queue_id)

    def close(self, timeout: float | None = None) -> None:
        """Wait for pending async sends (up to ``timeout``), then stop; the store stays open.
        Idempotent. In a forked child it raises StoreUsedAfterForkError, as ``flush``."""
        self.flush(timeout)
        self._mark_closed()

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<mqlite.Producer group={self.group!r} {state}>"
