"""``mqlite send``: messages from the arguments, or one per line of stdin."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

from mqlite.cli._common import OK, open_store, print_json_line, print_table, require_topic
from mqlite.cli._offsets import parse_time


def _property(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"bad property {text!r}: expected key=value")
    return name, value


def _delay(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"bad delay {text!r}: expected seconds >= 0")
    return seconds


def _deliver_at(text: str) -> int:
    return parse_time(text)


def _bodies(args: argparse.Namespace) -> Iterator[bytes]:
    if args.body:
        for body in args.body:
            yield body.encode("utf-8")
        return
    for line in sys.stdin.buffer:
        yield line.rstrip(b"\r\n")


def _send(args: argparse.Namespace) -> int:
    from mqlite.message import Message

    timing: dict[str, Any] = {}
    if args.delay is not None:
        timing["delay"] = args.delay
    if args.delay_level is not None:
        timing["delay_level"] = args.delay_level
    if args.deliver_at is not None:
        timing["deliver_at"] = args.deliver_at
    route: dict[str, Any] = {}
    if args.queue is not None:
        route["queue_id"] = args.queue
    if args.sharding_key is not None:
        route["sharding_key"] = args.sharding_key
    rows: list[dict[str, Any]] = []
    with open_store(args.path, write=True) as store:
        require_topic(store, args.topic)
        with store.producer() as producer:
            for body in _bodies(args):
                msg = Message(args.topic, body, tags=args.tags, keys=args.keys or None,
                              properties=dict(args.property) or None, **timing)
                r = producer.send(msg, **route)
                row = {
                    "status": r.send_status.name, "msg_id": r.msg_id,
                    "offset_msg_id": r.offset_msg_id, "topic": r.message_queue.topic,
                    "queue_id": r.message_queue.queue_id, "queue_offset": r.queue_offset,
                    "scheduled": r.scheduled,
                }
                if args.json:
                    print_json_line(row)
                rows.append(row)
    if not args.json:
        columns = ["status", "queue_id", "queue_offset", "msg_id", "scheduled"]
        print_table(f"sent to {args.topic}", columns, [[r[c] for c in columns] for r in rows])
    return OK


def add(sub: Any, fmt: Any) -> None:
    p = sub.add_parser("send", formatter_class=fmt,
                       help="send messages (the arguments, or one per line of stdin)")
    p.add_argument("path", help="store directory")
    p.add_argument("topic", help="an existing topic")
    p.add_argument("body", nargs="*", help="message bodies (none: read stdin lines)")
    p.add_argument("--tags", default=None, help="the messages' tag")
    p.add_argument("--keys", action="append", default=[], metavar="KEY",
                   help="a key (repeat for more)")
    p.add_argument("-p", "--property", action="append", default=[], type=_property,
                   metavar="KEY=VALUE", help="a user property (repeat for more)")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--delay", type=_delay, default=None, metavar="SECONDS",
                      help="deliver after this many seconds")
    when.add_argument("--delay-level", type=int, default=None, metavar="LEVEL",
                      help="RocketMQ delay level (1 = 1s, ... 18 = 2h by default)")
    when.add_argument("--deliver-at", type=_deliver_at, default=None, metavar="TIME",
                      help="deliver at this time (ISO 8601 or epoch ms)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-q", "--queue", type=int, default=None, help="send to this queue id")
    where.add_argument("--sharding-key", default=None, metavar="KEY",
                       help="one key keeps to one queue (ordered)")
    p.add_argument("--json", action="store_true", help="one JSON object per message sent")
    p.set_defaults(func=_send)
