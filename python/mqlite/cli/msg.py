"""``mqlite msg get``: one stored message with every header and property."""

from __future__ import annotations

import argparse
import json
from typing import Any

from mqlite.cli._common import OK, open_store, print_json, print_table
from mqlite.cli._format import as_dict


def _get(args: argparse.Namespace) -> int:
    with open_store(args.path) as store:
        m = store.get(args.id) if args.id is not None else store.get_by_offset(args.offset)
        row = as_dict(m)
    if args.json:
        print_json(row)
    else:
        rows = [[k, json.dumps(v) if isinstance(v, (dict, list)) else v] for k, v in row.items()]
        print_table(f"message {row['offset_msg_id']}", ["field", "value"], rows)
    return OK


def _nonnegative(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a commit-log offset (an integer >= 0), got {text!r}")
    return n


def add(sub: Any, fmt: Any) -> None:
    msg = sub.add_parser("msg", formatter_class=fmt, help="look up one message")
    verbs = msg.add_subparsers(dest="verb", required=True, prog="mqlite msg")
    get = verbs.add_parser("get", formatter_class=fmt,
                           help="a message by offset message id or commit-log offset")
    get.add_argument("path", help="store directory")
    which = get.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", default=None, help="the offset message id (SendResult.offset_msg_id)")
    which.add_argument("--offset", type=_nonnegative, default=None,
                       help="the commit-log offset of the record")
    get.add_argument("--json", action="store_true", help="print JSON")
    get.set_defaults(func=_get)
