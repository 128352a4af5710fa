"""asyncio clients: ``AsyncProducer``, ``AsyncTransactionProducer`` and ``AsyncPullConsumer``.

Each client runs its blocking calls on one dedicated worker thread, in call order, so the event
loop never blocks (a sync-flush send or a long poll waits on that thread). Cancelling an awaited
``poll`` never loses messages: what a poll fetched counts as handed out only once its awaiter
receives it. Until then a commit stops before it, and if the awaiter was cancelled it is given
back (the positions move back to it), so the next poll fetches it again.
Cancelling an awaited ``send`` does not unsend it: the send completes on the worker thread.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from types import TracebackType
from typing import Any, Callable, TypeVar

from mqlite._context import HasClientContext
from mqlite.message import Message, MessageExt, MessageQueue, SendBatchResult, SendResult
from mqlite.producer import Compression, MessageQueueSelector, Producer
from mqlite.pull import Handouts, HeldBatch, PullConsumer, RebalanceCallback
from mqlite.selector import MessageSelector
from mqlite.transaction import (
    PendingTransaction,
    TransactionListener,
    TransactionProducer,
    TransactionSendResult,
)

__all__ = ["AsyncProducer", "AsyncPullConsumer", "AsyncTransaction", "AsyncTransactionProducer"]

T = TypeVar("T")


class _Worker:
    """A single-thread executor bridged to the running event loop."""

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    def submit(self, fn: Callable[..., T], *args: Any, **kw: Any) -> Future[T]:
        return self._executor.submit(functools.partial(fn, *args, **kw))

    async def run(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        return await asyncio.wrap_future(self.submit(fn, *args, **kw))

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False)


class AsyncProducer:
    """``await producer.send(msg)`` without blocking the event loop."""

    def __init__(
        self,
        store: HasClientContext,
        group: str = "DEFAULT_PRODUCER",
        *,
        compress_over: int | None = None,
        compression: Compression = "zlib",
        compression_level: int | None = None,
    ) -> None:
        self._producer = Producer(
            store,
            group,
            compress_over=compress_over,
            compression=compression,
            compression_level=compression_level,
        )
        self._worker = _Worker("mqlite-aio-producer")

    @property
    def group(self) -> str:
        """The producer group."""
        return self._producer.group

    async def send(
        self,
        msg: Message,
        *,
        queue_id: int | None = None,
        sharding_key: str | bytes | None = None,
        selector: MessageQueueSelector | None = None,
        arg: Any = None,
    ) -> SendResult:
        """Send one message (see ``Producer.send``)."""
        return await self._worker.run(
            self._producer.send, msg, queue_id=queue_id, sharding_key=sharding_key,
            selector=selector, arg=arg,
        )

    async def send_batch(
        self, msgs: Iterable[Message | bytes], *, topic: str | None = None, queue_id: int | None = None
    ) -> SendBatchResult:
        """Send a batch to one queue (see ``Producer.send_batch``)."""
        items = list(msgs)
        return await self._worker.run(self._producer.send_batch, items, topic=topic, queue_id=queue_id)

    async def close(self) -> None:
        """Wait for queued sends, then stop. Idempotent."""
        await self._worker.run(self._producer.close)
        self._worker.shutdown()

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


class AsyncTransactionProducer:
    """``TransactionProducer`` for asyncio: each call runs on the producer's worker thread (the
    listener's ``execute_local_transaction`` too, so it may block); checks run on the
    producer's own check thread as for ``TransactionProducer``."""

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
        self._producer = TransactionProducer(
            store,
            group,
            listener,
            check_timeout=check_timeout,
            check_interval=check_interval,
            max_checks=max_checks,
        )
        self._worker = _Worker("mqlite-aio-txn")

    @property
    def group(self) -> str:
        """The producer group."""
        return self._producer.group

    async def send_message_in_transaction(
        self, msg: Message, arg: Any = None, *, transaction_id: str | None = None
    ) -> TransactionSendResult:
        """See ``TransactionProducer.send_message_in_transaction``."""
        return await self._worker.run(
            self._producer.send_message_in_transaction, msg, arg, transaction_id=transaction_id
        )

    def transaction(self, id: str | None = None) -> AsyncTransaction:
        """``async with producer.transaction() as tx: await tx.send(msg)``: committed on a clean
        exit, rolled back on an exception."""
        return AsyncTransaction(self, self._producer.transaction(id).id)

    async def commit(self, ids: list[str] | tuple[str, ...], progress: tuple[str, str] | None = None) -> bool:
        """See ``TransactionProducer.commit``."""
        return await self._worker.run(self._producer.commit, ids, progress)

    async def rollback(self, ids: list[str] | tuple[str, ...], progress: tuple[str, str] | None = None) -> bool:
        """See ``TransactionProducer.rollback``."""
        return await self._worker.run(self._producer.rollback, ids, progress)

    async def progress(self, key: str) -> str | None:
        """See ``TransactionProducer.progress``."""
        return await self._worker.run(self._producer.progress, key)

    async def pending(self, all_groups: bool = False) -> list[PendingTransaction]:
        """See ``TransactionProducer.pending``."""
        return await self._worker.run(self._producer.pending, all_groups)

    async def resolve(self, id: str, commit: bool) -> bool:
        """See ``TransactionProducer.resolve``."""
        return await self._worker.run(self._producer.resolve, id, commit)

    async def check_now(self, limit: int = 1000) -> int:
        """See ``TransactionProducer.check_now``."""
        return await self._worker.run(self._producer.check_now, limit)

    async def close(self) -> None:
        """Stop the check thread and the producer. Idempotent."""
        await self._worker.run(self._producer.close)
        self._worker.shutdown()

    async def __aenter__(self) -> AsyncTransactionProducer:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


class AsyncTransaction:
    """Several messages in one transaction, for asyncio (``AsyncTransactionProducer.transaction``)."""

    def __init__(self, producer: AsyncTransactionProducer, id: str) -> None:
        self._producer = producer
        self.id = id
        self.results: list[SendResult] = []

    async def send(self, msg: Message, queue_id: int | None = None) -> SendResult:
        """Stores ``msg`` as a half message of this transaction."""
        p = self._producer._producer
        tx = p.transaction(self.id)
        result = await self._producer._worker.run(tx.send, msg, queue_id)
        self.results.append(result)
        return result

    async def __aenter__(self) -> AsyncTransaction:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self.results:
            return
        if exc_type is None:
            await self._producer.commit([self.id])
        else:
            await self._producer.rollback([self.id])


class AsyncPullConsumer:
    """``PullConsumer`` for asyncio: ``async with``, ``async for``, ``await poll/commit``.

    Options are those of ``PullConsumer``.
    """

    def __init__(self, store: HasClientContext, group: str, **options: Any) -> None:
        self._consumer = PullConsumer(store, group, **options)
        self._handouts = Handouts(self._consumer)
        self._worker = _Worker("mqlite-aio-consumer")

    @property
    def consumer(self) -> PullConsumer:
        """The underlying PullConsumer (use it only through this object's methods)."""
        return self._consumer

    @property
    def group(self) -> str:
        """The consumer group."""
        return self._consumer.group

    @property
    def closed(self) -> bool:
        """True after ``close()``."""
        return self._consumer.closed

    async def subscribe(
        self,
        topic: str,
        expression: str | MessageSelector = "*",
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
    ) -> None:
        """See ``PullConsumer.subscribe`` (callbacks run on the worker thread)."""
        await self._worker.run(
            self._consumer.subscribe, topic, expression, on_assign=on_assign, on_revoke=on_revoke
        )

    async def unsubscribe(self, topic: str) -> None:
        """See ``PullConsumer.unsubscribe``."""
        await self._worker.run(self._consumer.unsubscribe, topic)

    async def assign(self, queues: Iterable[MessageQueue]) -> None:
        """See ``PullConsumer.assign``."""
        await self._worker.run(self._consumer.assign, list(queues))

    async def assignment(self) -> list[MessageQueue]:
        """See ``PullConsumer.assignment``."""
        return await self._worker.run(self._consumer.assignment)

    def _return_unreceived(self, fut: Future[HeldBatch]) -> None:
        """Done callback of a poll whose awaiter was cancelled: nobody will see its batch."""
        if not fut.cancelled() and fut.exception() is None:
            self._handouts.give_back(fut.result())

    async def _poll(self, timeout: float | None, max_messages: int | None) -> HeldBatch:
        # On the worker: poll, and hold the batch until its awaiter receives it.
        fut = self._worker.submit(self._handouts.poll, timeout, max_messages)
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            fut.add_done_callback(self._return_unreceived)
            raise

    async def poll(self, timeout: float | None = 1.0, max_messages: int | None = None) -> list[MessageExt]:
        """See ``PullConsumer.poll``; waits on the worker thread."""
        h = await self._poll(timeout, max_messages)
        return h.batch if self._handouts.settle(h) else []

    async def commit(
        self, offsets: Mapping[MessageQueue, int] | None = None, *, message: MessageExt | None = None
    ) -> None:
        """See ``PullConsumer.commit``."""
        await self._worker.run(self._consumer.commit, offsets, message=message)

    async def committed(self, mq: MessageQueue) -> int | None:
        """See ``PullConsumer.committed``."""
        return await self._worker.run(self._consumer.committed, mq)

    async def position(self, mq: MessageQueue) -> int:
        """See ``PullConsumer.position``."""
        return await self._worker.run(self._consumer.position, mq)

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """See ``PullConsumer.seek``."""
        await self._worker.run(self._consumer.seek, mq, offset)

    async def seek_to_begin(self, mq: MessageQueue | None = None) -> None:
        """See ``PullConsumer.seek_to_begin``."""
        await self._worker.run(self._consumer.seek_to_begin, mq)

    async def seek_to_end(self, mq: MessageQueue | None = None) -> None:
        """See ``PullConsumer.seek_to_end``."""
        await self._worker.run(self._consumer.seek_to_end, mq)

    async def seek_to_timestamp(self, ts: datetime | int, mq: MessageQueue | None = None) -> None:
        """See ``PullConsumer.seek_to_timestamp``."""
        await self._worker.run(self._consumer.seek_to_timestamp, ts, mq)

    async def pause(self, queues: Iterable[MessageQueue]) -> None:
        """See ``PullConsumer.pause``."""
        await self._worker.run(self._consumer.pause, list(queues))

    async def resume(self, queues: Iterable[MessageQueue]) -> None:
        """See ``PullConsumer.resume``."""
        await self._worker.run(self._consumer.resume, list(queues))

    async def close(self) -> None:
        """See ``PullConsumer.close``. Idempotent."""
        await self._worker.run(self._consumer.close)
        self._worker.shutdown()

    async def _messages(self) -> AsyncIterator[MessageExt]:
        # The consumer tracks the batch being handed out: leaving the loop gives the unyielded
        # rest back when this generator is finalized, and a ``close()`` or ``poll()`` that runs
        # first (finalization may come later) gives it back before doing anything else.
        while not self._consumer.closed:
            out = self._handouts.one_by_one(await self._poll(0.5, None))
            try:
                for msg in out:
                    yield msg
            finally:
                out.close()

    def __aiter__(self) -> AsyncIterator[MessageExt]:
        return self._messages()

    async def __aenter__(self) -> AsyncPullConsumer:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
