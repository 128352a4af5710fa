"""``mqlite txn list|resolve``: the undecided transactions of a store and deciding one by hand
(``mqlite.transaction.pending`` and ``resolve``). Both open the store for writing: listing
completes the copies of a commit that a crash interrupted."""

from __future__ import annotations

import argparse
from typing import Any

from mqlite.cli._common import OK, open_store, print_json, print_records
from mqlite.cli._format import duration, iso_ms

LIST = ["id", "group", "state", "age", "checks", "messages", "first_time"]


def _list(args: argparse.Namespace) -> int:
    from mqlite.transaction import pending

    with open_store(args.path, write=True) as store:
        found = pending(store, args.group)
    rows: list[dict[str, Any]] = [{
        "id": t.id, "group": t.group, "state": t.state, "age_ms": t.age_ms, "age": duration(t.age_ms),
        "checks": t.checks, "messages": len(t.half_offsets), "half_offsets": list(t.half_offsets),
        "first_ms": t.first_ms, "first_time": iso_ms(t.first_ms),
    } for t in found]
    if args.json:
        print_json(rows)
    else:
        who = f"group {args.group}" if args.group is not None else "all groups"
        print_records(False, f"pending transactions in {args.path} ({who})", LIST, rows)
    return OK


def _resolve(args: argparse.Namespace) -> int:
    from mqlite.transaction import resolve

    with open_store(args.path, write=True) as store:
        wrote = resolve(store, args.id, args.commit)
    verb = "committed" if args.commit else "rolled back"
    if args.json:
        print_json({"id": args.id, "decision": "commit" if args.commit else "rollback", "changed": wrote})
    elif wrote:
        print(f"{verb} transaction {args.id}")
    else:
        print(f"transaction {args.id} was already {verb}: nothing written")
    return OK


def add(sub: Any, fmt: Any) -> None:
    txn = sub.add_parser("txn", formatter_class=fmt,
                         help="transactions: list the undecided ones, commit or roll one back")
    verbs = txn.add_subparsers(dest="verb", required=True, prog="mqlite txn")

    ls = verbs.add_parser("list", aliases=["ls"], formatter_class=fmt,
                          help="undecided transactions, oldest first: id, group, age, checks, messages")
    ls.add_argument("path", help="store directory")
    ls.add_argument("-g", "--group", default=None, help="one producer group (default: every group)")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=_list)

    resolve = verbs.add_parser("resolve", formatter_class=fmt,
                               help="commit or roll back one transaction by id")
    resolve.add_argument("path", help="store directory")
    resolve.add_argument("id", help="the transaction id (`txn list` shows them)")
    how = resolve.add_mutually_exclusive_group(required=True)
    how.add_argument("--commit", dest="commit", action="store_true", default=None,
                     help="deliver its messages to their topics")
    how.add_argument("--rollback", dest="commit", action="store_false",
                     help="discard its messages")
    resolve.add_argument("--json", action="store_true", help="print JSON")
    resolve.set_defaults(func=_resolve)
