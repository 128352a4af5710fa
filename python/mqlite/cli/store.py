"""``mqlite store info|gc|verify|repair``: what a store holds, its retention, and the tools for
a damaged store (cli/maintenance.py)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from mqlite.cli import maintenance
from mqlite.cli._common import OK, open_store, print_json, print_table


def _disk_use(path: str) -> tuple[int, int]:
    """Files and bytes under ``path`` (files removed during the walk are skipped)."""
    files = size = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                size += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue
            files += 1
    return files, size


def _info(args: argparse.Namespace) -> int:
    with open_store(args.path) as store:
        topics = store.topics()
        info: dict[str, Any] = {
            "path": store.path,
            "topics": len(topics),
            "queues": sum(t.read_queues for t in topics),
            "messages": sum(high - low for t in topics
                            for low, high in (store.offsets(mq) for mq in store.queues(t.name))),
            "consumer_groups": len(store.consumer_groups()),
            "pending_timers": store.pending_timers(),
        }
        info["files"], info["disk_bytes"] = _disk_use(store.path)
        info.update(store.stats())
    if args.json:
        print_json(info)
    else:
        print_table(f"store {args.path}", ["field", "value"], list(info.items()))
    return OK


def _gc(args: argparse.Namespace) -> int:
    with open_store(args.path, write=True) as store:
        deleted = store.delete_expired_files()
    if args.json:
        print_json({"deleted_commit_log_files": deleted})
    else:
        print(f"deleted {deleted} expired commit-log file(s)")
    return OK


def add(sub: Any, fmt: Any) -> None:
    store = sub.add_parser("store", formatter_class=fmt, help="store information and retention")
    verbs = store.add_subparsers(dest="verb", required=True, prog="mqlite store")
    info = verbs.add_parser("info", formatter_class=fmt,
                            help="topics, messages, disk use, log range, recovery, sizes")
    info.add_argument("path", help="store directory")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=_info)
    gc = verbs.add_parser("gc", formatter_class=fmt,
                          help="delete commit-log files older than the retention now")
    gc.add_argument("path", help="store directory")
    gc.add_argument("--json", action="store_true", help="print JSON")
    gc.set_defaults(func=_gc)
    maintenance.add(verbs, fmt)
