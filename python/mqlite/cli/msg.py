"""``mqlite msg get``: stored messages with every header and property, by id (unique or offset
id), by commit-log offset, or by key through the key index."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mqlite.cli._common import OK, USAGE, CLIError, NotFound, open_store, print_json, print_table, require_topic
from mqlite.cli._format import as_dict
from mqlite.cli._offsets import parse_time, positive


def _one(row: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(row)
    else:
        rows = [[k, json.dumps(v) if isinstance(v, (dict, list)) else v] for k, v in row.items()]
        print_table(f"message {row['offset_msg_id']}", ["field", "value"], rows)


def _by_key(args: argparse.Namespace) -> int:
    if args.topic is None:
        raise CLIError("--key needs --topic (keys are indexed per topic)", USAGE)
    with open_store(args.path) as store:
        require_topic(store, args.topic)
        found = store.find_by_key(args.topic, args.key, args.begin, args.end, args.limit)
        rows = [as_dict(m) for m in found]
    if args.json:
        print_json({"messages": rows, "truncated": found.truncated, "index_lag": found.index_lag,
                    "index_error": found.index_error, "complete": found.complete})
    else:
        for row in rows:
            _one(row, False)
        if found.truncated:
            print(f"more messages match: raise -n (now {args.limit}) or narrow --begin/--end", file=sys.stderr)
        if found.index_lag:
            print(f"the key index is {found.index_lag} bytes behind the log: newer messages may match too",
                  file=sys.stderr)
        if found.index_error:
            print(f"the key index reports a failure: {found.index_error}", file=sys.stderr)
    if not rows:
        raise NotFound(f"no message of topic {args.topic!r} has key {args.key!r}")
    return OK


def _get(args: argparse.Namespace) -> int:
    if args.key is not None:
        return _by_key(args)
    if args.topic is not None or args.begin is not None or args.end is not None:
        raise CLIError("--topic, --begin and --end go with --key", USAGE)
    with open_store(args.path) as store:
        m = store.get(args.id) if args.id is not None else store.get_by_offset(args.offset)
        row = as_dict(m)
    _one(row, args.json)
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
    msg = sub.add_parser("msg", formatter_class=fmt, help="look up messages by id, offset or key")
    verbs = msg.add_subparsers(dest="verb", required=True, prog="mqlite msg")
    get = verbs.add_parser("get", formatter_class=fmt,
                           help="a message by id or commit-log offset, or the messages of a key")
    get.add_argument("path", help="store directory")
    which = get.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", default=None,
                       help="the message id (SendResult.msg_id, the unique id) or the offset message id")
    which.add_argument("--offset", type=_nonnegative, default=None,
                       help="the commit-log offset of the record")
    which.add_argument("--key", default=None, help="a key of the message (Message.keys), with --topic")
    get.add_argument("--topic", default=None, help="the topic to search by --key")
    get.add_argument("--begin", type=parse_time, default=None,
                     help="with --key: stored at or after (ISO 8601 or epoch ms)")
    get.add_argument("--end", type=parse_time, default=None,
                     help="with --key: stored at or before (ISO 8601 or epoch ms)")
    get.add_argument("-n", "--limit", type=positive, default=32,
                     help="with --key: at most this many messages, newest first (32)")
    get.add_argument("--json", action="store_true", help="print JSON")
    get.set_defaults(func=_get)


