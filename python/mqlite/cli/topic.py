"""``mqlite topic list|create|update|delete|status`` (``topics`` is the old spelling of
``topic list``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mqlite.cli._common import ERROR, OK, USAGE, CLIError, open_store, print_json, print_records, print_table
from mqlite.cli._common import require_topic
from mqlite.cli._format import iso_ms
from mqlite.cli._offsets import positive

COLUMNS = ["name", "read_queues", "write_queues", "perm", "order", "messages"]


def _list(args: argparse.Namespace) -> int:
    with open_store(args.path) as store:
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
    print_records(args.json, f"topics in {args.path}", COLUMNS, rows)
    return OK


def _row(config: Any) -> dict[str, Any]:
    return {
        "name": config.name, "read_queues": config.read_queues,
        "write_queues": config.write_queues, "perm": config.perm, "order": config.order,
    }


def _create(args: argparse.Namespace) -> int:
    perm = 6 if args.perm is None else args.perm
    with open_store(args.path, write=True, create=True) as store:
        store.create_topic(args.topic, args.queues, perm=perm, order=args.order, exist_ok=False)
        config = next(t for t in store.topics() if t.name == args.topic)
    print_records(args.json, "created", COLUMNS[:-1], [_row(config)])
    return OK


def _update(args: argparse.Namespace) -> int:
    changes = {"queues": args.queues, "read_queues": args.read_queues,
               "write_queues": args.write_queues, "perm": args.perm, "order": args.order}
    if all(v is None for v in changes.values()):
        raise CLIError("topic update needs at least one of -q/--queues, --read-queues, "
                       "--write-queues, --perm, --order/--no-order", USAGE)
    with open_store(args.path, write=True) as store:
        require_topic(store, args.topic)
        config = store.update_topic(args.topic, **changes)
    print_records(args.json, "updated", COLUMNS[:-1], [_row(config)])
    return OK


def _confirmed(question: str) -> bool:
    """The operator's answer to ``question`` on the terminal (anything but y or yes is no)."""
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _delete(args: argparse.Namespace) -> int:
    with open_store(args.path, write=True) as store:
        require_topic(store, args.topic)
        if not args.yes and sys.stdin.isatty() and not _confirmed(
            f"delete topic {args.topic!r} of {args.path} and every group's offsets of it?"
        ):
            raise CLIError("topic delete cancelled: nothing was deleted", ERROR)
        store.delete_topic(args.topic, force=args.force)
    if args.json:
        print_json({"deleted": args.topic})
    else:
        print(f"deleted topic {args.topic} (its commit-log space returns through retention)")
    return OK


STATUS = ["queue_id", "min_offset", "max_offset", "messages", "last_store_time", "consume_queue_bytes"]


def _status(args: argparse.Namespace) -> int:
    with open_store(args.path) as store:
        require_topic(store, args.topic)
        status = store.topic_status(args.topic)
    rows = [{"queue_id": q.queue_id, "min_offset": q.min_offset, "max_offset": q.max_offset,
             "messages": q.messages, "last_store_timestamp": q.last_store_timestamp,
             "last_store_time": iso_ms(q.last_store_timestamp),
             "consume_queue_bytes": q.consume_queue_bytes} for q in status.queues]
    if args.json:
        print_json({**_row(status.config), "messages": status.messages,
                    "last_store_timestamp": status.last_store_timestamp, "queues": rows})
    else:
        c = status.config
        title = (f"topic {c.name}: {c.read_queues} read / {c.write_queues} write queues, "
                 f"perm {c.perm}{', ordered' if c.order else ''}, {status.messages} messages")
        print_table(title, STATUS, [[r[k] for k in STATUS] for r in rows])
    return OK


def _perm(text: str) -> int:
    names = {"r": 4, "w": 2, "rw": 6, "4": 4, "2": 2, "6": 6}
    if text not in names:
        raise argparse.ArgumentTypeError(f"bad perm {text!r}: expected r, w, rw, 4, 2 or 6")
    return names[text]


def add(sub: Any, fmt: Any) -> None:
    topic = sub.add_parser("topic", help="list, create and grow topics", formatter_class=fmt)
    verbs = topic.add_subparsers(dest="verb", required=True, prog="mqlite topic")

    def listing(name: str, where: Any, **kw: Any) -> None:
        p = where.add_parser(name, formatter_class=fmt,
                             help="topics with their queues and message counts", **kw)
        p.add_argument("path", help="store directory")
        p.add_argument("--json", action="store_true", help="print JSON")
        p.set_defaults(func=_list)

    listing("list", verbs, aliases=["ls"])
    listing("topics", sub)

    create = verbs.add_parser("create", formatter_class=fmt,
                              help="create a topic (an existing one is an error)")
    create.add_argument("path", help="store directory (created if missing)")
    create.add_argument("topic")
    create.add_argument("-q", "--queues", type=positive, default=4,
                        help="read and write queues, 1..1024 (default 4)")
    create.add_argument("--perm", type=_perm, default=None, help="r, w or rw (default rw)")
    create.add_argument("--order", action="store_true", help="mark the topic ordered")
    create.add_argument("--json", action="store_true", help="print JSON")
    create.set_defaults(func=_create)

    update = verbs.add_parser("update", formatter_class=fmt,
                              help="change a topic's queue counts, permission or order flag")
    update.add_argument("path", help="store directory")
    update.add_argument("topic")
    update.add_argument("-q", "--queues", type=positive, default=None,
                        help="read and write queue count (read queues never shrink)")
    update.add_argument("--read-queues", type=positive, default=None, metavar="N",
                        help="read queue count (never shrinks)")
    update.add_argument("--write-queues", type=positive, default=None, metavar="N",
                        help="write queue count (at most the read queues)")
    update.add_argument("--perm", type=_perm, default=None, help="r, w or rw")
    update.add_argument("--order", action=argparse.BooleanOptionalAction, default=None,
                        help="mark the topic ordered (--no-order: unordered)")
    update.add_argument("--json", action="store_true", help="print JSON")
    update.set_defaults(func=_update)

    delete = verbs.add_parser("delete", aliases=["rm"], formatter_class=fmt,
                              help="delete a topic and every group's offsets of it")
    delete.add_argument("path", help="store directory")
    delete.add_argument("topic")
    delete.add_argument("--force", action="store_true",
                        help="delete even while a group has live consumers of the topic")
    delete.add_argument("-y", "--yes", action="store_true",
                        help="do not ask for confirmation on a terminal")
    delete.add_argument("--json", action="store_true", help="print JSON")
    delete.set_defaults(func=_delete)

    status = verbs.add_parser("status", formatter_class=fmt,
                              help="per queue: min and max offsets, messages, last store time, "
                                   "consume-queue bytes")
    status.add_argument("path", help="store directory")
    status.add_argument("topic")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(func=_status)
