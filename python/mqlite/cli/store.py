"""``mqlite store info|gc|verify|repair``: what a store holds, its retention, and the tools for
a damaged store (cli/maintenance.py)."""

from __future__ import annotations

import argparse
from typing import Any

from mqlite.cli import maintenance
from mqlite.cli._common import OK, open_store, print_json, print_table
from mqlite.cli._format import iso_ms


def _info(args: argparse.Namespace) -> int:
    with open_store(args.path) as store:
        got = store.info()
        topics = store.topics()
        stats = store.stats()
        info: dict[str, Any] = {
            "path": got.path,
            "topics": got.topics,
            "queues": sum(t.read_queues for t in topics),
            "messages": sum(high - low for t in topics
                            for low, high in (store.offsets(mq) for mq in store.queues(t.name))),
            "consumer_groups": got.groups,
            "pending_timers": got.pending_timers,
            # Listing transactions completes interrupted commits, a write: `txn list` does it.
            "pending_transactions": None,
            "files": {kind: {"count": u.count, "bytes": u.bytes} for kind, u in got.files.items()},
            "disk_bytes": got.disk_bytes,
            "disk_total_bytes": got.disk_total_bytes,
            "disk_used_bytes": got.disk_used_bytes,
            "disk_usage_ratio": round(got.disk_usage_ratio, 4),
            "commit_log_min_offset": got.commit_log_min_offset,
            "commit_log_max_offset": got.commit_log_max_offset,
            "oldest_store_timestamp": got.oldest_store_timestamp,
            "oldest_store_time": iso_ms(got.oldest_store_timestamp),
            "newest_store_timestamp": got.newest_store_timestamp,
            "newest_store_time": iso_ms(got.newest_store_timestamp),
        }
        info.update({k: v for k, v in stats.items() if k not in info})
    if args.json:
        print_json(info)
        return OK
    rows: list[tuple[str, object]] = []
    for key, value in info.items():
        if key == "files":
            rows.extend((f"files: {kind}", f"{u['count']} ({_size(u['bytes'])})")
                        for kind, u in value.items())
        elif key == "pending_transactions":
            rows.append((key, "see `mqlite txn list` (it opens the store for writing)"))
        elif key.endswith("_bytes"):
            rows.append((key, _size(value)))
        elif key == "disk_usage_ratio":
            rows.append((key, f"{value:.1%}"))
        elif not key.endswith("_timestamp"):
            rows.append((key, "-" if value is None else value))
    print_table(f"store {args.path}", ["field", "value"], rows)
    return OK


def _size(n: int) -> str:
    """Bytes as an operator reads them: ``512 B``, ``4.0 KiB``, ``32.0 MiB``."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


GC = ["path", "from_offset", "size", "modified", "reason"]


def _gc(args: argparse.Namespace) -> int:
    with open_store(args.path, write=True) as store:
        deleted = store.run_retention()
    rows = [{"path": f.path, "from_offset": f.from_offset, "size": f.size,
             "modified_ms": f.modified_ms, "modified": iso_ms(f.modified_ms) if f.modified_ms else None,
             "reason": f.reason} for f in deleted]
    if args.json:
        print_json({"deleted": rows})
    elif rows:
        print_table(f"retention deleted {len(rows)} commit-log file(s)", GC,
                    [[r[c] for c in GC] for r in rows])
    else:
        print("retention deleted no file: none is past retention_hours and the disk is below "
              "disk_force_clean_ratio")
    return OK


def add(sub: Any, fmt: Any) -> None:
    store = sub.add_parser("store", formatter_class=fmt, help="store information and retention")
    verbs = store.add_subparsers(dest="verb", required=True, prog="mqlite store")
    info = verbs.add_parser("info", formatter_class=fmt,
                            help="topics, messages, files and disk use by kind, message time "
                                 "range, pending timers, log range, recovery, sizes")
    info.add_argument("path", help="store directory")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=_info)
    gc = verbs.add_parser("gc", formatter_class=fmt,
                          help="run retention now and list each commit-log file it deleted, "
                               "with the reason")
    gc.add_argument("path", help="store directory")
    gc.add_argument("--json", action="store_true", help="print JSON")
    gc.set_defaults(func=_gc)
    maintenance.add(verbs, fmt)
