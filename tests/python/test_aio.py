"""mqlite.aio: AsyncProducer and AsyncPullConsumer never block the event loop and lose nothing."""

from __future__ import annotations

import asyncio
import time

import mqlite
from mqlite import ConsumeFromWhere, Message, MessageExt, MessageQueue
from mqlite.aio import AsyncProducer, AsyncPullConsumer

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def test_produce_and_consume(store: mqlite.Store) -> None:
    store.create_topic("t", 2)

    async def main() -> list[int]:
        async with AsyncProducer(store) as p:
            results = [await p.send(Message("t", str(i).encode()), sharding_key=str(i)) for i in range(20)]
            assert all(r.send_status is mqlite.SendStatus.SEND_OK for r in results)
            batch = await p.send_batch([b"20", b"21"], topic="t", queue_id=0)
            assert len(batch) == 2
        got: list[int] = []
        async with AsyncPullConsumer(store, "g", consume_from=FIRST) as c:
            await c.subscribe("t")
            assert len(await c.assignment()) == 2
            async for m in c:
                got.append(int(m.body))
                if len(got) == 22:
                    break
            await c.commit()
            mq = MessageQueue("t", 0)
            assert await c.committed(mq) == await c.position(mq)
        return got

    assert sorted(asyncio.run(main())) == list(range(22))


def test_poll_does_not_block_the_loop_and_wakes(store: mqlite.Store) -> None:
    """While ``await c.poll(60)`` waits, the event loop runs: a task on it ticks five times and
    then sends, and the poll returns that message, long before its timeout. The send can only
    happen if the loop ran while the poll waited."""
    store.create_topic("t", 1)

    async def main() -> tuple[int, list[MessageExt], float]:
        ticks = 0

        async def tick_then_send(p: AsyncProducer) -> None:
            nonlocal ticks
            while ticks < 5:
                await asyncio.sleep(0.01)  # paces the ticks; not a synchronisation
                ticks += 1
            await p.send(Message("t", b"x"))

        async with AsyncPullConsumer(store, "g") as c, AsyncProducer(store) as p:
            await c.subscribe("t")
            t = asyncio.create_task(tick_then_send(p))
            start = time.monotonic()
            got = await c.poll(60)
            waited = time.monotonic() - start
            await t
        return ticks, got, waited

    ticks, got, waited = asyncio.run(main())
    assert [m.body for m in got] == [b"x"]
    assert ticks == 5
    assert waited < 30  # woken by the send, not by the timeout


def test_cancelled_poll_loses_nothing(store: mqlite.Store) -> None:
    store.create_topic("t", 1)

    async def main() -> list[bytes]:
        async with AsyncPullConsumer(store, "g") as c:
            await c.subscribe("t")
            task = asyncio.create_task(c.poll(2))
            await asyncio.sleep(0.1)
            task.cancel()  # the worker thread is still inside poll()
            try:
                await task
            except asyncio.CancelledError:
                pass
            assert task.cancelled()
            store.producer().send(Message("t", b"first"))  # fetched by the cancelled poll
            await asyncio.sleep(0.05)
            store.producer().send(Message("t", b"second"))
            out: list[bytes] = []
            while len(out) < 2:
                out += [m.body for m in await c.poll(1)]
            return out

    assert asyncio.run(main()) == [b"first", b"second"]


def test_cancelled_poll_then_close_commits_nothing_it_fetched(store_path: object) -> None:
    store = mqlite.open(str(store_path))
    store.create_topic("t", 1)
    store.producer().send(Message("t", b"important"))

    async def main() -> None:
        async with AsyncPullConsumer(store, "g", consume_from=FIRST) as c:
            await c.subscribe("t")
            task = asyncio.create_task(c.poll(5))
            await asyncio.sleep(0)  # submitted to the worker thread
            time.sleep(0.3)  # the loop is busy; the worker fetches the message meanwhile
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        # leaving `async with` closes the consumer, which commits its positions

    asyncio.run(main())
    mq = MessageQueue("t", 0)
    with store.pull_consumer("g") as c:
        assert c.committed(mq) == 0
        c.subscribe("t")
        assert [m.body for m in c.poll(1)] == [b"important"]
    store.close()


def test_break_out_of_async_for_then_close_keeps_the_rest(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    store.producer().send_batch([b"%d" % i for i in range(5)], topic="t")
    mq = MessageQueue("t", 0)

    async def once(group: str) -> int | None:
        async with AsyncPullConsumer(store, group, consume_from=FIRST) as c:
            await c.subscribe("t")
            async for _ in c:
                break  # one message delivered; the generator is finalized later, or never
        return c.consumer.committed(mq)

    async def main() -> list[int | None]:
        return [await once(f"g{i}") for i in range(10)]

    assert asyncio.run(main()) == [1] * 10


def test_commit_queued_behind_a_poll_whose_awaiter_is_cancelled(store: mqlite.Store) -> None:
    """The poll returns on the worker thread, a commit queued behind it runs there at once, and
    only then does the loop learn that the poll's awaiter was cancelled: the commit must not
    have passed the message nobody received."""
    store.create_topic("t", 1)
    mq = MessageQueue("t", 0)

    async def main() -> tuple[int | None, list[bytes]]:
        async with AsyncPullConsumer(store, "g", consume_from=FIRST) as c:
            await c.subscribe("t")
            poll = asyncio.create_task(c.poll(5))
            await asyncio.sleep(0.2)  # the poll waits on the worker
            commit = asyncio.create_task(c.commit())
            await asyncio.sleep(0)  # queued behind the poll
            store.producer().send(Message("t", b"hello"))
            time.sleep(0.5)  # the loop is busy: the worker returns the poll, then commits
            poll.cancel()
            try:
                await poll
            except asyncio.CancelledError:
                pass
            await commit
            committed = c.consumer.committed(mq)
            again = [m.body for m in await c.poll(1)]
        return committed, again

    committed, again = asyncio.run(main())
    assert committed in (None, 0)
    assert again == [b"hello"]


def test_commit_inside_async_for_stops_at_what_was_handed_out(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    store.producer().send_batch([b"%d" % i for i in range(10)], topic="t")
    mq = MessageQueue("t", 0)

    async def main() -> int | None:
        async with AsyncPullConsumer(store, "g", consume_from=FIRST, auto_commit=False) as c:
            await c.subscribe("t")
            async for m in c:
                await c.commit()
                assert c.consumer.committed(mq) == m.queue_offset + 1
                if m.queue_offset == 2:
                    break
            return c.consumer.committed(mq)

    assert asyncio.run(main()) == 3
