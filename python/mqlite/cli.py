"""The ``mqlite`` command line: ``demo``, ``topics``, ``groups`` and ``tail``."""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from mqlite.errors import CompressionError, InvalidQueueError, MQError, StoreNotFoundError
from mqlite.message import MessageExt, MessageQueue
from mqlite.store import Store

__all__ = ["main"]


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    Console().print(table)


def _cmd_demo(args: argparse.Namespace) -> int:
    from mqlite.demo import run_demo

    _table("mqlite demo", ["step", "result"], run_demo(args.dir))
    return 0


def _open(path: str) -> Store:
    """The store at ``path``, read-only; a directory holding no store is an error, not an empty
    listing."""
    if os.path.isdir(path) and not any(
        os.path.isdir(os.path.join(path, d)) for d in ("commitlog", "config", "consumequeue")
    ):
        raise StoreNotFoundError(f"{path!r} holds no mqlite store")
    return Store(path, read_only=True)


def _cmd_topics(args: argparse.Namespace) -> int:
    with _open(args.path) as store:
        rows: list[dict[str, Any]] = []
        for topic in store.topics():
            spans = [store.offsets(mq) for mq in store.queues(topic.name)]
            rows.append({
                "name": topic.name,
                "read_queues": topic.read_queues,
                "write_queues": topic.write_queues,
                "perm": topic.perm,
                "order": topic.order,
                "messages": sum(high - low for low, high in spans),
            })
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _table(f"topics in {args.path}", list(rows[0]) if rows else ["name"],
               [list(r.values()) for r in rows])
    return 0


def _cmd_groups(args: argparse.Namespace) -> int:
    """Consumer groups and their lag (what ``kafka-consumer-groups --describe`` and RocketMQ's
    ``mqadmin consumerProgress`` show): one row per group, or with ``--group`` one per queue."""
    with _open(args.path) as store:
        if args.group is None:
            rows: list[dict[str, Any]] = []
            for group in store.consumer_groups():
                progress = store.consumer_progress(group)
                rows.append({
                    "group": group,
                    "topics": len({p.topic for p in progress}),
                    "queues": len(progress),
                    "lag": sum(p.lag for p in progress),
                })
            title = f"consumer groups in {args.path}"
            columns = ["group", "topics", "queues", "lag"]
        else:
            progress = store.consumer_progress(args.group)
            if not progress:
                print(f"mqlite: error: group {args.group!r} has no committed offsets in {args.path}",
                      file=sys.stderr)
                return 1
            rows = [{"topic": p.topic, "queue_id": p.queue_id, "committed": p.committed,
                     "max_offset": p.max_offset, "lag": p.lag} for p in progress]
            title = f"group {args.group} in {args.path}"
            columns = ["topic", "queue_id", "committed", "max_offset", "lag"]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _table(title, columns, [[r[c] for c in columns] for r in rows])
    return 0


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def _offset(text: str) -> str | int:
    if text in ("beginning", "end"):
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected 'beginning', 'end' or an integer") from None


def _start(where: str | int, low: int, high: int, count: int) -> int:
    if where == "beginning":
        return low
    if isinstance(where, str):  # "end"
        return max(low, high - count)
    return max(low, high + where if where < 0 else where)


def _tail_queue(store: Store, mq: MessageQueue, where: str | int, count: int) -> list[MessageExt]:
    low, high = store.offsets(mq)
    offset = _start(where, low, high, count)
    out: list[MessageExt] = []
    while len(out) < count and offset < high:
        result = store.read_result(mq, offset, min(32, count - len(out)))
        out.extend(result.messages)
        if result.next_offset <= offset:
            break
        offset = result.next_offset
    return out[:count]


def _as_dict(m: MessageExt) -> dict[str, Any]:
    # A compressed body that does not decompress is shown as stored, with the reason.
    error: str | None = None
    try:
        raw = m.body
    except CompressionError as e:
        raw, error = m.raw_body, str(e)
    try:
        body: str = raw.decode("utf-8")
        encoding = "utf-8"
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(raw).decode("ascii"), "base64"
    out = {
        "topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
        "msg_id": m.msg_id, "offset_msg_id": m.offset_msg_id, "tags": m.tags, "keys": list(m.keys),
        "properties": m.properties, "store_timestamp": m.store_timestamp,
        "body": body, "body_encoding": encoding,
    }
    if error is not None:
        out["body_error"] = error
    return out


def _cmd_tail(args: argparse.Namespace) -> int:
    with _open(args.path) as store:
        queues = store.queues(args.topic)
        if args.queue is not None:
            if not 0 <= args.queue < len(queues):
                raise InvalidQueueError(
                    f"topic {args.topic!r} has queues 0..{len(queues) - 1}, not {args.queue}"
                )
            queues = [MessageQueue(args.topic, args.queue)]
        messages = [m for mq in queues for m in _tail_queue(store, mq, args.offset, args.count)]
        rows = [_as_dict(m) for m in messages]
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        columns = ["queue_id", "queue_offset", "tags", "keys", "body"]
        _table(f"{args.topic} in {args.path}", columns, [[r[c] for c in columns] for r in rows])
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mqlite", description="Inspect and try mqlite stores.")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the quickstart on a temporary store")
    demo.add_argument("--dir", default=None, help="store directory to use instead")
    demo.set_defaults(func=_cmd_demo)

    topics = sub.add_parser("topics", help="list topics with their message counts")
    topics.add_argument("path")
    topics.add_argument("--json", action="store_true", help="print JSON")
    topics.set_defaults(func=_cmd_topics)

    groups = sub.add_parser("groups", help="list consumer groups with their lag")
    groups.add_argument("path")
    groups.add_argument("-g", "--group", default=None, help="one group: its lag per queue")
    groups.add_argument("--json", action="store_true", help="print JSON")
    groups.set_defaults(func=_cmd_groups)

    tail = sub.add_parser("tail", help="print messages of a topic (read-only)")
    tail.add_argument("path")
    tail.add_argument("topic")
    tail.add_argument("-q", "--queue", type=int, default=None, help="one queue id (default: all)")
    tail.add_argument("-o", "--offset", type=_offset, default="end",
                      help="'beginning', 'end' (default), an offset, or -N from the end")
    tail.add_argument("-n", "--count", type=_positive, default=10, help="messages per queue (default 10)")
    tail.add_argument("--json", action="store_true", help="print one JSON object per line")
    tail.set_defaults(func=_cmd_tail)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        status: int = args.func(args)
    except MQError as exc:
        print(f"mqlite: error: {exc} [{exc.code}]", file=sys.stderr)
        return 1
    return status
