"""``mqlite group dlq list|get|export|redrive``: a group's dead letters through ``mqlite.dlq``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mqlite.cli._common import OK, open_store, print_json, print_json_line, print_records, require_group

COLUMNS = ["msg_id", "origin_topic", "queue_offset", "reconsume_times", "error_type", "error"]


def _row(d: Any) -> dict[str, Any]:
    return {"msg_id": d.msg_id, "origin_message_id": d.origin_message_id,
            "origin_topic": d.origin_topic, "queue_offset": d.queue_offset,
            "reconsume_times": d.reconsume_times, "keys": list(d.keys),
            "error_type": d.error_type, "error": d.error}


def _list(args: argparse.Namespace) -> int:
    with open_store(args.path) as store:
        require_group(store, args.group)
        letters = store.dead_letters(args.group).list(args.topic, key=args.key, limit=args.limit)
        rows = [_row(d) for d in letters]
    print_records(args.json, f"dead letters of {args.group}", COLUMNS, rows)
    return OK


def _get(args: argparse.Namespace) -> int:
    with open_store(args.path) as store:
        require_group(store, args.group)
        letter = store.dead_letters(args.group).get(args.id).to_json()
    if args.json:
        print_json(letter)
    else:
        print_records(False, f"dead letter {args.id}", ["field", "value"],
                      [{"field": k, "value": v} for k, v in letter.items()])
    return OK


def _export(args: argparse.Namespace) -> int:
    with open_store(args.path) as store:
        require_group(store, args.group)
        view = store.dead_letters(args.group)
        n = view.export(args.output if args.output != "-" else sys.stdout, args.topic)
    if args.output != "-":
        print(f"exported {n} dead letters to {args.output}", file=sys.stderr)
    return OK


def _redrive(args: argparse.Namespace) -> int:
    with open_store(args.path, write=True) as store:
        require_group(store, args.group)
        sent = store.dead_letters(args.group).redrive(
            all=args.all, ids=args.id or None, key=args.key, origin_topic=args.topic)
        rows = [{"msg_id": r.msg_id, "topic": r.message_queue.topic,
                 "queue_id": r.message_queue.queue_id, "queue_offset": r.queue_offset} for r in sent]
    if args.json:
        for row in rows:
            print_json_line(row)
    else:
        print_records(False, f"re-drove {len(rows)} dead letters of {args.group}",
                      ["msg_id", "topic", "queue_id", "queue_offset"], rows)
    return OK


def _limit(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return n


def add(verbs: Any, fmt: Any) -> None:
    dlq = verbs.add_parser("dlq", formatter_class=fmt, help="a group's dead letters (%%DLQ%%<group>)")
    acts = dlq.add_subparsers(dest="action", required=True, prog="mqlite group dlq")

    def base(name: str, help: str) -> argparse.ArgumentParser:  # noqa: A002 - argparse's name
        p: argparse.ArgumentParser = acts.add_parser(name, formatter_class=fmt, help=help)
        p.add_argument("path", help="store directory")
        p.add_argument("group")
        return p

    ls = base("list", "the dead letters, oldest first")
    ls.add_argument("--topic", default=None, help="first sent to this topic")
    ls.add_argument("--key", default=None, help="carrying this key")
    ls.add_argument("-n", "--limit", type=_limit, default=None, help="at most this many")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=_list)

    get = base("get", "one dead letter with its last error, properties and body")
    get.add_argument("id", help="its own or its origin message id")
    get.add_argument("--json", action="store_true", help="print JSON")
    get.set_defaults(func=_get)

    export = base("export", "the dead letters as JSON lines (body in base64)")
    export.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")
    export.add_argument("--topic", default=None, help="first sent to this topic")
    export.set_defaults(func=_export)

    redrive = base("redrive", "send fresh copies of dead letters to their origin topics")
    redrive.add_argument("--all", action="store_true", help="every dead letter")
    redrive.add_argument("--id", action="append", default=[], help="this message id (repeat)")
    redrive.add_argument("--key", default=None, help="those carrying this key")
    redrive.add_argument("--topic", default=None, help="those first sent to this topic")
    redrive.add_argument("--json", action="store_true", help="one JSON object per message sent")
    redrive.set_defaults(func=_redrive)
