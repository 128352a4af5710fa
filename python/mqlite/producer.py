"""The ``Producer``: a thin, fast wrapper over the Rust producer, plus queue selection
(sharding key, custom selector) and asynchronous / one-way sends."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, Literal

from mqlite import _core
from mqlite._args import deprecated
from mqlite._completion import SendCallback, SendFuture, Tally
from mqlite._context import HasClientContext, context_of
from mqlite.errors import IllegalArgumentError, InvalidConfigError
from mqlite.group import check_group
from mqlite.message import Message, MessageQueue, SendBatchResult, SendResult

__all__ = ["Compression", "MessageQueueSelector", "Producer", "SendCallback", "SendFuture"]

log = logging.getLogger("mqlite.producer")

MessageQueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]
"""RocketMQ's ``MessageQueueSelector``: ``fn(queues, msg, arg) -> one of queues``."""
Compression = Literal["zlib", "lz4", "zstd"]
"""A body codec (RocketMQ's ``CompressionType``): zlib is the Java producer's default."""


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

    __slots__ = ("_ctx", "_tally", "__weakref__")

    def __new__(
        cls,
        store: HasClientContext,
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
            context_of(store).live(),
            check_group(group),
            compress_over=compress_over,
            compression=compression,
            compression_level=compression_level,
        )

    def __init__(
        self,
        store: HasClientContext,
        group: str = "DEFAULT_PRODUCER",
        *,
        compress_over: int | None = None,
        compression: Compression = "zlib",
        compression_level: int | None = None,
    ) -> None:
        self._ctx = context_of(store)
        self._ctx.add_producer(self)
        self._tally = Tally()

    def _select(
        self,
        msg: Message,
        queue_id: int | None,
        sharding_key: str | bytes | None,
        selector: MessageQueueSelector | None,
        arg: Any,
    ) -> int:
        """The queue ``selector`` picks (called by the native ``send``; sharding keys are
        hashed by the store itself)."""
        if sum(x is not None for x in (queue_id, sharding_key, selector)) > 1:
            raise IllegalArgumentError("give at most one of queue_id, sharding_key and selector")
        topic = getattr(msg, "topic", None)
        if not isinstance(topic, str):
            raise IllegalArgumentError("queue selection needs a Message with a topic")
        if selector is None:
            raise IllegalArgumentError("queue selection needs a selector")
        count = self._ctx.writable_queue_count(topic)
        if count <= 0:
            raise IllegalArgumentError(f"topic {topic!r} has no write queues")
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
        if selector is not None:
            return self._send_pipelined(msg, self._select(msg, queue_id, sharding_key, selector, arg))
        return self._send_pipelined(msg, queue_id, sharding_key=sharding_key)

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
        self._check_open()
        completer = self._ctx.completer()
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
        self._check_open()
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
        if self._ctx.pid != os.getpid():
            raise self._ctx.dead()
        completer = self._ctx.started_completer  # none yet: no async send was ever made
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
