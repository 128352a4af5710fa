"""``mqlite group list|progress|reset|delete`` (``groups`` is the old spelling of ``list`` and
``progress``); ``group dlq`` is in ``mqlite.cli.dlq``."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from mqlite.cli import dlq
from mqlite.cli._common import OK, USAGE, CLIError, NotFound, open_store, print_json, print_records
from mqlite.cli._common import print_table, require_group, require_topic
from mqlite.cli._format import iso_ms
from mqlite.cli._offsets import OffsetSpec, parse_time

if TYPE_CHECKING:
    from mqlite.store import Store

PROGRESS = ["topic", "queue_id", "committed", "max_offset", "lag", "last_consume_time", "owner"]
SUMMARY = ["members", "lag", "retry_depth", "retry_waiting", "dlq_depth"]


def _list(args: argparse.Namespace) -> int:
    with open_store(args.path) as store:
        rows: list[dict[str, Any]] = []
        for group in store.consumer_groups():
            progress = store.consumer_progress(group)
            rows.append({
                "group": group,
                "topics": len({p.topic for p in progress}),
                "queues": len(progress),
                "lag": sum(p.lag for p in progress),
            })
    print_records(args.json, f"consumer groups in {args.path}", ["group", "topics", "queues", "lag"], rows)
    return OK


def _progress(args: argparse.Namespace) -> int:
    with open_store(args.path) as store:
        summary = store.group_summary(args.group)
        if not summary.queues:
            raise NotFound(f"group {args.group!r} has no committed offsets in {args.path}")
    rows = [{"topic": p.topic, "queue_id": p.queue_id, "committed": p.committed,
             "min_offset": p.min_offset, "max_offset": p.max_offset, "lag": p.lag,
             "last_consume_timestamp": p.last_consume_timestamp,
             "last_consume_time": iso_ms(p.last_consume_timestamp), "owner": p.owner}
            for p in summary.queues]
    head = {"group": summary.group, "members": summary.members, "lag": summary.lag,
            "retry_depth": summary.retry_depth, "retry_waiting": summary.retry_waiting,
            "dlq_depth": summary.dlq_depth}
    if args.json:
        print_json({**head, "queues": rows})
        return OK
    print_table(f"group {args.group} in {args.path}", PROGRESS, [[r[c] for c in PROGRESS] for r in rows])
    shown = {**head, "members": ", ".join(summary.members) or "none"}
    print_table(None, SUMMARY, [["-" if shown[c] is None else shown[c] for c in SUMMARY]])
    return OK


def _groups(args: argparse.Namespace) -> int:
    return _list(args) if args.group is None else _progress(args)


def _target(args: argparse.Namespace) -> tuple[OffsetSpec, dict[str, Any]]:
    """The reset's start as an OffsetSpec (for the plan) and as ``reset_offset`` arguments."""
    if args.to_earliest:
        return OffsetSpec("beginning"), {"to": "earliest"}
    if args.to_latest:
        return OffsetSpec("end"), {"to": "latest"}
    if args.to_datetime is not None:
        moment = datetime.fromtimestamp(args.to_datetime / 1000, tz=timezone.utc)
        return OffsetSpec("time", args.to_datetime), {"to": moment}
    return OffsetSpec("offset", args.to_offset), {"offset": args.to_offset}


def _reset(args: argparse.Namespace) -> int:
    spec, how = _target(args)
    with open_store(args.path, write=args.execute) as store:
        require_group(store, args.group)
        if args.topic is not None:
            require_topic(store, args.topic)
            topics = [args.topic]
        elif args.queue is not None:
            raise CLIError("--queue needs --topic (queue ids are per topic)", USAGE)
        else:
            topics = sorted({p.topic for p in store.consumer_progress(args.group)})
        if args.queue is not None:
            _check_queue(store, topics[0], args.queue)
        before = {(p.topic, p.queue_id): p.committed for p in store.consumer_progress(args.group)}
        rows: list[dict[str, Any]] = []
        for topic in topics:
            if args.execute:
                done = store.reset_offset(args.group, topic, queue_id=args.queue, force=args.force, **how)
                after = {mq.queue_id: o for mq, o in done.items()}
            else:
                after = {mq.queue_id: spec.resolve(store, mq) for mq in store.queues(topic)
                         if args.queue is None or mq.queue_id == args.queue}
            for qid, new in sorted(after.items()):
                rows.append({"topic": topic, "queue_id": qid, "committed": before.get((topic, qid)),
                             "new_offset": new})
    title = f"reset of {args.group}" + ("" if args.execute else " (dry run: add --execute to apply)")
    print_records(args.json, title, ["topic", "queue_id", "committed", "new_offset"], rows)
    return OK


def _check_queue(store: Store, topic: str, queue_id: int) -> None:
    """InvalidQueueError unless ``topic`` has queue ``queue_id`` (as ``reset_offset`` raises it,
    so that a dry run refuses what the reset would)."""
    from mqlite.errors import InvalidQueueError

    count = len(store.queues(topic))
    if not 0 <= queue_id < count:
        raise InvalidQueueError(f"topic {topic!r} has queues 0 to {count - 1}, not {queue_id}")


def _delete(args: argparse.Namespace) -> int:
    with open_store(args.path, write=args.execute) as store:
        require_group(store, args.group)
        summary = store.group_summary(args.group)
        keys = sorted({f"{p.topic}@{args.group}" for p in summary.queues})
        if args.execute:
            keys = sorted(store.delete_group(args.group, force=args.force))
    report = {"group": args.group, "executed": args.execute, "offset_keys": keys,
              "live_members": summary.members}
    if args.json:
        print_json(report)
        return OK
    if args.execute:
        print(f"deleted group {args.group} and its offsets of {len(keys)} topic(s)"
              + (" (its retry and dead-letter topics stay)" if summary.retry_depth is not None
                 or summary.dlq_depth is not None else ""))
    else:
        print(f"dry run: add --execute to delete group {args.group}: its offsets of "
              f"{len(keys)} topic(s) ({', '.join(keys) or 'none'}) and its settings")
        if summary.members and not args.force:
            print(f"it has live members ({', '.join(summary.members)}): the delete will be "
                  "refused unless --force")
    return OK


def _queue_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"bad queue id {text!r}: expected an integer >= 0")
    return value


def _offset(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad offset {text!r}: expected an integer") from None


def add(sub: Any, fmt: Any) -> None:
    group = sub.add_parser("group", formatter_class=fmt,
                           help="consumer groups: list, progress, reset offsets, dead letters")
    verbs = group.add_subparsers(dest="verb", required=True, prog="mqlite group")

    ls = verbs.add_parser("list", aliases=["ls"], formatter_class=fmt, help="each group and its lag")
    ls.add_argument("path", help="store directory")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=_list)

    progress = verbs.add_parser("progress", formatter_class=fmt,
                                help="one group per queue: committed offset, max offset, lag, last "
                                     "consume time, owner; its members, retry and DLQ depth")
    progress.add_argument("path", help="store directory")
    progress.add_argument("group")
    progress.add_argument("--json", action="store_true", help="print JSON")
    progress.set_defaults(func=_progress)

    old = sub.add_parser("groups", formatter_class=fmt, help="group list, or group progress with -g")
    old.add_argument("path", help="store directory")
    old.add_argument("-g", "--group", default=None, help="one group: its progress per queue")
    old.add_argument("--json", action="store_true", help="print JSON")
    old.set_defaults(func=_groups)

    reset = verbs.add_parser("reset", formatter_class=fmt,
                             help="move a group's offsets (a dry run unless --execute)")
    reset.add_argument("path", help="store directory")
    reset.add_argument("group")
    reset.add_argument("--topic", default=None, help="one topic (default: every topic of the group)")
    reset.add_argument("--queue", type=_queue_id, default=None, metavar="N",
                       help="queue N of --topic only (the others keep their offsets)")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="each queue's oldest message")
    to.add_argument("--to-latest", action="store_true", help="each queue's end (skip everything)")
    to.add_argument("--to-datetime", type=parse_time, default=None, metavar="TIME",
                    help="the first message stored at or after TIME (ISO 8601 or epoch ms)")
    to.add_argument("--to-offset", type=_offset, default=None, metavar="N",
                    help="queue offset N, clamped to each queue's range")
    reset.add_argument("--execute", action="store_true", help="apply the reset (default: show the plan)")
    reset.add_argument("--force", action="store_true", help="reset even while consumers of the group run")
    reset.add_argument("--json", action="store_true", help="print JSON")
    reset.set_defaults(func=_reset)

    delete = verbs.add_parser("delete", aliases=["rm"], formatter_class=fmt,
                              help="delete a group's offsets and settings (a dry run unless --execute)")
    delete.add_argument("path", help="store directory")
    delete.add_argument("group")
    delete.add_argument("--execute", action="store_true", help="delete (default: show what would go)")
    delete.add_argument("--force", action="store_true", help="delete even while members of the group run")
    delete.add_argument("--json", action="store_true", help="print JSON")
    delete.set_defaults(func=_delete)

    dlq.add(verbs, fmt)
