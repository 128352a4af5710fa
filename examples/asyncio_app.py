"""asyncio: an AsyncProducer and an AsyncPullConsumer in one event loop, neither blocking it.

Run: python examples/asyncio_app.py [STORE_DIR]   (a temporary directory by default)
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import mqlite
from mqlite import Message
from mqlite.aio import AsyncProducer, AsyncPullConsumer

N = 50


async def run(store: mqlite.Store) -> int:
    async def produce() -> None:
        async with AsyncProducer(store) as producer:
            for i in range(N):
                await producer.send(Message("events", f"event-{i}".encode()))
                await asyncio.sleep(0.001)

    async with AsyncPullConsumer(store, "dashboard") as consumer:
        await consumer.subscribe("events")  # from the latest offset: start before producing
        producing = asyncio.create_task(produce())
        got = []
        async for msg in consumer:
            got.append(msg.body.decode())
            if len(got) == N:
                break
        await producing
        await consumer.commit()
    print(f"consumed {len(got)} events while producing; first {got[:3]}, last {got[-1]}")
    return 0 if sorted(got) == sorted(f"event-{i}" for i in range(N)) else 1


def main(path: Path) -> int:
    with mqlite.open(path) as store:
        store.create_topic("events", queues=2)
        return asyncio.run(run(store))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(main(Path(sys.argv[1])))
    with tempfile.TemporaryDirectory(prefix="mqlite-asyncio-") as tmp:
        sys.exit(main(Path(tmp) / "store"))
