"""``mqlite topic list|create|update`` (``topics`` is the old spelling of ``topic list``)."""

from __future__ import annotations

import argparse
from typing import Any

from mqlite.cli._common import OK, open_store, print_records, require_topic
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
    with open_store(args.path, write=True) as store:
        require_topic(store, args.topic)
        config = store.update_topic(args.topic, queues=args.queues)
    print_records(args.json, "updated", COLUMNS[:-1], [_row(config)])
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
                              help="grow a topic's read and write queues (never shrinks)")
    update.add_argument("path", help="store directory")
    update.add_argument("topic")
    update.add_argument("-q", "--queues", type=positive, required=True, help="new queue count")
    update.add_argument("--json", action="store_true", help="print JSON")
    update.set_defaults(func=_update)
