"""The ``mqlite demo`` walk-through: each step returns what it did, for the CLI to print."""

from __future__ import annotations

import tempfile
from pathlib import Path

from mqlite.message import Message, MessageExt
from mqlite.store import Store

__all__ = ["run_demo"]

TOPIC = "demo-orders"


def _read_all(store: Store, tags: str | None = None) -> list[MessageExt]:
    out: list[MessageExt] = []
    for mq in store.queues(TOPIC):
        low, high = store.offsets(mq)
        offset = low
        while offset < high:
            result = store.read_result(mq, offset, 32, tags=tags)
            out.extend(result.messages)
            if result.next_offset <= offset:
                break
            offset = result.next_offset
    return out


def _steps(path: Path) -> list[tuple[str, str]]:
    steps: list[tuple[str, str]] = []
    with Store(path) as store:
        store.create_topic(TOPIC, 4)
        steps.append(("open + create topic", f"{path} / {TOPIC} with {len(store.queues(TOPIC))} queues"))
        with store.producer("demo") as producer:
            sent = [
                producer.send(
                    Message(TOPIC, f"order {i}".encode(), tags="TagA" if i % 2 else "TagB",
                            keys=[f"order-{i}"], properties={"region": "eu"})
                )
                for i in range(6)
            ]
            queues = sorted({r.message_queue.queue_id for r in sent})
            steps.append(("send x6", f"round robin over queues {queues}; status {sent[0].send_status.name}"))
            batch = producer.send_batch([f"bulk {i}".encode() for i in range(10)], topic=TOPIC)
            steps.append((
                "send_batch x10",
                f"queue {batch.message_queue.queue_id}, offsets {batch[0].queue_offset}..{batch[-1].queue_offset}",
            ))
        total = len(_read_all(store))
        tagged = len(_read_all(store, tags="TagA"))
        steps.append(("read back", f"{total} messages; {tagged} match 'TagA'"))
        found = store.get(sent[0].offset_msg_id)
        steps.append(("get by msg id", f"{found.body.decode()!r} keys={list(found.keys)}"))
        offsets = {mq.queue_id: store.offsets(mq) for mq in store.queues(TOPIC)}
        steps.append(("offsets (min, max)", ", ".join(f"q{q}={o}" for q, o in offsets.items())))
    with Store(path, read_only=True) as store:
        again = {mq.queue_id: store.offsets(mq) for mq in store.queues(TOPIC)}
        kept = len(_read_all(store))
        verdict = "unchanged" if again == offsets and kept == total else "CHANGED"
        steps.append(("reopen (read-only)", f"{kept} messages, offsets {verdict}"))
    return steps


def run_demo(directory: str | None = None) -> list[tuple[str, str]]:
    """Run the demo in ``directory`` (a fresh temporary one by default)."""
    if directory is not None:
        return _steps(Path(directory))
    with tempfile.TemporaryDirectory(prefix="mqlite-demo-") as tmp:
        return _steps(Path(tmp) / "store")
