"""mqlite.aio: AsyncProducer and AsyncPullConsumer never block the event loop and lose nothing."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import mqlite
from mqlite import ConsumeFromWhere, Message, MessageExt, MessageQueue
from mqlite.aio import AsyncProducer, AsyncPullConsumer

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


class Watched:
    """One method of an object, wrapped on the instance: ``entered`` is set when a call starts,
    ``returned`` when it returns, and ``results`` holds what each call returned. With
    ``held=True`` a call waits at ``gate`` (after ``entered``) until the test opens it."""

    def __init__(self, obj: object, name: str, *, held: bool = False) -> None:
        self.entered = threading.Event()
        self.returned = threading.Event()
        self.gate = threading.Event()
        if not held:
            self.gate.set()
        self.results: list[Any] = []
        real = getattr(obj, name)

        def call(*args: Any, **kw: Any) -> Any:
            self.entered.set()
            assert self.gate.wait(20), "the test never opened the gate"
            result = real(*args, **kw)
            self.results.append(result)
            self.returned.set()
            return result

        setattr(obj, name, call)


async def until(event: threading.Event) -> None:
    """Waits, with the event loop running, for an event another thread sets."""
    assert await asyncio.to_thread(event.wait, 20), "timed out"


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
            polls = Watched(c.consumer, "poll")
            task = asyncio.create_task(c.poll(30))
            await until(polls.entered)
            task.cancel()  # the worker thread is still inside poll()
            try:
                await task
            except asyncio.CancelledError:
                pass
            assert task.cancelled()
            store.producer().send(Message("t", b"first"))
            await until(polls.returned)
            assert [m.body for m in polls.results[0]] == [b"first"]  # fetched by the cancelled poll
            store.producer().send(Message("t", b"second"))
            out: list[bytes] = []
            while len(out) < 2:  # both are in the queue: an empty poll means one was lost
                batch = await c.poll(5)
                assert batch, f"only {out} came back"
                out += [m.body for m in batch]
            return out

    assert asyncio.run(main()) == [b"first", b"second"]


def test_cancelled_poll_then_close_commits_nothing_it_fetched(store_path: object) -> None:
    store = mqlite.open(str(store_path))
    store.create_topic("t", 1)
    store.producer().send(Message("t", b"important"))

    async def main() -> None:
        async with AsyncPullConsumer(store, "g", consume_from=FIRST) as c:
            await c.subscribe("t")
            polls = Watched(c.consumer, "poll", held=True)
            task = asyncio.create_task(c.poll(5))
            await until(polls.entered)  # the worker thread is in poll, held at the gate
            # From here the loop is blocked: the worker fetches the message meanwhile, and the
            # task is cancelled before the loop can hand the batch to its awaiter.
            polls.gate.set()
            assert polls.returned.wait(20)
            assert [m.body for m in polls.results[0]] == [b"important"]
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
            polls = Watched(c.consumer, "poll")
            commits = Watched(c.consumer, "commit")
            commit_queued = asyncio.Event()
            submit = c._worker.submit

            def watch_submit(fn: Any, *args: Any, **kw: Any) -> Any:
                future = submit(fn, *args, **kw)
                if fn is c.consumer.commit:
                    commit_queued.set()
                return future

            c._worker.submit = watch_submit  # type: ignore[method-assign]
            poll = asyncio.create_task(c.poll(30))
            await until(polls.entered)  # the poll waits on the worker
            commit = asyncio.create_task(c.commit())
            await commit_queued.wait()  # queued behind the poll
            store.producer().send(Message("t", b"hello"))
            # The loop is blocked here: the worker returns the poll, then commits.
            assert commits.returned.wait(20)
            assert [m.body for m in polls.results[0]] == [b"hello"]
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
