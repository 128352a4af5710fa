"""The ``Producer``: a thin, fast wrapper over the Rust producer, plus queue selection
(sharding key, custom selector) and asynchronous / one-way sends."""

from __future__ import annotations

import logging
import queue
import threading
import weakref
import zlib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import TYPE_CHECKING, Any

from mqlite import _core
from mqlite.errors import IllegalArgumentError, MQError, StoreClosedError, TopicNotFoundError
from mqlite.message import Message, MessageQueue, SendBatchResult, SendResult

if TYPE_CHECKING:
    from mqlite.store import Store

__all__ = ["MessageQueueSelector", "Producer", "SendCallback"]

log = logging.getLogger("mqlite.producer")

MessageQueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]
"""RocketMQ's ``MessageQueueSelector``: ``fn(queues, msg, arg) -> one of queues``."""
SendCallback = Callable[[SendResult | None, BaseException | None], None]
"""Called as ``callback(result, None)`` or ``callback(None, exc)`` when an async send ends."""

_Item = tuple["Future[SendResult]", "SendCallback | None", "SendResult | None", "BaseException | None"]


class _Completer:
    """One thread that completes a producer's async sends in call order.

    The caller's thread appends (``send_pipelined``); this thread then waits for the disk once
    for everything queued meanwhile (sync-flush stores: a group commit shared by every thread)
    and resolves the futures and runs the callbacks.
    """

    def __init__(self, producer: Producer, sync: bool) -> None:
        self._producer = weakref.ref(producer)
        self._sync = sync
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._cond = threading.Condition(threading.Lock())  # a plain lock: cheaper than RLock
        self.pending = 0
        self._thread = threading.Thread(target=self._run, name="mqlite-async-send", daemon=True)
        self._thread.start()

    def put(self, item: _Item) -> None:
        with self._cond:
            self.pending += 1
        self._queue.put(item)

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
        end = max((r._end() for _, _, r, _ in items if r is not None), default=0)
        if end == 0:
            return True, None
        try:
            producer = self._producer()
            if producer is None:
                raise StoreClosedError("producer was garbage-collected with sends pending")
            store = producer._store._live()
            del producer
            return store.wait_durable(end), None
        except BaseException as exc:  # noqa: BLE001 - handed to every future
            return False, exc

    def _run(self) -> None:
        while True:
            items, stop = self._take()
            durable, failure = self._durable(items)
            for fut, callback, result, error in items:
                if error is None and failure is not None:
                    result, error = None, failure
                elif result is not None and not durable:
                    result = result._timed_out()
                if error is None:
                    fut.set_result(result)  # type: ignore[arg-type]
                else:
                    fut.set_exception(error)
                if callback is not None:
                    try:
                        callback(result, error)
                    except Exception:
                        log.exception("send callback failed")
            with self._cond:
                self.pending -= len(items)
                if self.pending == 0:
                    self._cond.notify_all()
            if stop:
                return

    def flush(self, timeout: float | None) -> int:
        with self._cond:
            self._cond.wait_for(lambda: self.pending == 0, timeout)
            return self.pending

    def stop(self, join: bool = True) -> None:
        self._queue.put(None)
        if join and threading.current_thread() is not self._thread:
            self._thread.join()


class Producer(_core.Producer):
    """Sends messages to a store; get one from ``Store.producer()``.

    ``send`` is the native method itself (no Python frame per message): it picks the queue
    round robin over the topic's write queues, unless ``queue_id`` names it, ``sharding_key``
    hashes to it (CRC32 modulo the queue count: one key keeps to one queue, hence in order) or
    ``selector(queues, msg, arg)`` returns it.
    """

    __slots__ = ("_store", "_sender", "_sender_lock", "__weakref__")

    def __new__(cls, store: Store, group: str = "DEFAULT_PRODUCER") -> Producer:
        return super().__new__(cls, store._live(), group)

    def __init__(self, store: Store, group: str = "DEFAULT_PRODUCER") -> None:
        self._store = store
        self._sender: _Completer | None = None
        self._sender_lock = threading.Lock()

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

    def _async(self) -> _Completer:
        sender = self._sender
        if sender is None:
            with self._sender_lock:
                if self._sender is None:
                    self._sender = _Completer(self, self._store._sync)
                sender = self._sender
        return sender

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
        return self.send_pipelined(msg, queue_id)

    def send_async(
        self,
        msg: Message,
        callback: SendCallback | None = None,
        *,
        queue_id: int | None = None,
        sharding_key: str | bytes | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
    ) -> Future[SendResult]:
        """Send without waiting for the disk; returns a Future of the ``SendResult``.

        The message is appended before this returns (sends keep call order); in a
        ``flush="sync"`` store the future completes once the disk holds it, one fsync serving
        every pending send of every thread (group commit). A rejected message fails the future,
        not the call. ``callback(result, exc)`` runs, in call order, on the producer's
        completion thread; ``flush()`` waits for every pending send.
        """
        if self.closed:
            raise self._dead()
        fut: Future[SendResult] = Future()
        result: SendResult | None = None
        error: BaseException | None = None
        try:
            result = self._append(msg, queue_id, sharding_key, selector, arg)
        except Exception as exc:  # noqa: BLE001 - handed to the future / callback
            error = exc
        self._async().put((fut, callback, result, error))
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
        """Wait for pending async and one-way sends; returns how many are still pending."""
        sender = self._sender
        if sender is None:
            return 0
        if timeout is not None and timeout < 0:
            raise IllegalArgumentError(f"timeout must be >= 0 or None, got {timeout!r}")
        return sender.flush(timeout)

    def send_batch(
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
        Idempotent."""
        sender = self._sender
        if sender is not None:
            sender.flush(timeout)
            sender.stop()
            self._sender = None
        self._mark_closed()

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        sender = getattr(self, "_sender", None)
        if sender is not None:
            sender.stop(join=False)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<mqlite.Producer group={self.group!r} {state}>"
