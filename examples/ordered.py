"""Ordered messages: a sharding key keeps each order's events on one queue, and an orderly
PushConsumer consumes each queue on one thread at a time, in queue order.

Run: python examples/ordered.py [STORE_DIR]   (a temporary directory by default)
"""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

import mqlite
from mqlite import ConsumeFromWhere, ConsumeOrderlyStatus, Message, MessageExt

STEPS = ("created", "paid", "shipped", "delivered")


def main(path: Path) -> int:
    with mqlite.open(path) as store:
        store.create_topic("orders", queues=4)
        producer = store.producer()
        for step in STEPS:  # interleave the orders: every order's steps still stay in order
            for order in range(10):
                producer.send(Message("orders", f"order-{order}:{step}".encode(), tags=step),
                              sharding_key=f"order-{order}")

        seen: dict[str, list[str]] = {}
        lock = threading.Lock()
        done = threading.Event()

        def listener(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
            with lock:
                for m in msgs:
                    order, step = m.body.decode().split(":")
                    seen.setdefault(order, []).append(step)
                if sum(map(len, seen.values())) == 40:
                    done.set()
            return ConsumeOrderlyStatus.SUCCESS

        consumer = store.push_consumer("shipping", orderly=True, threads=4,
                                       consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe("orders")
        consumer.register_message_listener(listener)
        with consumer:
            if not done.wait(10):
                print("timed out waiting for the messages")
                return 1
        bad = {o: s for o, s in seen.items() if s != list(STEPS)}
        for order in sorted(seen, key=lambda o: int(o.split("-")[1]))[:3]:
            print(f"{order}: {' -> '.join(seen[order])}")
        print(f"{len(seen)} orders, every one in order: {not bad}")
        return 1 if bad or len(seen) != 10 else 0


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(main(Path(sys.argv[1])))
    with tempfile.TemporaryDirectory(prefix="mqlite-ordered-") as tmp:
        sys.exit(main(Path(tmp) / "store"))
