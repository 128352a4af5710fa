"""``mqlite group list|progress|reset`` (``groups`` is the old spelling of ``list`` and
``progress``); ``group dlq`` is in ``mqlite.cli.dlq``."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from mqlite.cli import dlq
from mqlite.cli._common import OK, NotFound, open_store, print_records, require_group, require_topic
from mqlite.cli._offsets import OffsetSpec, parse_time

if TYPE_CHECKING:
    from mqlite.store import Store

PROGRESS = ["topic", "queue_id", "committed", "max_offset", "lag", "owners"]


def owners(store: Store, group: str, topic: str) -> list[str]:
    """The live members of ``group`` subscribed to ``topic`` (a store opened read-only
    included)."""
    from mqlite.group import live_members

    return live_members(store._client_context.client_root(), group, topic)


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
        progress = store.consumer_progress(args.group)
        if not progress:
            raise NotFound(f"group {args.group!r} has no committed offsets in {args.path}")
        members = {t: owners(store, args.group, t) for t in {p.topic for p in progress}}
        rows = [{"topic": p.topic, "queue_id": p.queue_id, "committed": p.committed,
                 "max_offset": p.max_offset, "lag": p.lag, "owners": ",".join(members[p.topic])}
                for p in progress]
    print_records(args.json, f"group {args.group} in {args.path}", PROGRESS, rows)
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
        else:
            topics = sorted({p.topic for p in store.consumer_progress(args.group)})
        before = {(p.topic, p.queue_id): p.committed for p in store.consumer_progress(args.group)}
        rows: list[dict[str, Any]] = []
        for topic in topics:
            if args.execute:
                done = store.reset_offset(args.group, topic, force=args.force, **how)
                after = {mq.queue_id: o for mq, o in done.items()}
            else:
                after = {mq.queue_id: spec.resolve(store, mq) for mq in store.queues(topic)}
            for qid, new in sorted(after.items()):
                rows.append({"topic": topic, "queue_id": qid, "committed": before.get((topic, qid)),
                             "new_offset": new})
    title = f"reset of {args.group}" + ("" if args.execute else " (dry run: add --execute to apply)")
    print_records(args.json, title, ["topic", "queue_id", "committed", "new_offset"], rows)
    return OK


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
                                help="one group per queue: committed offset, max offset, lag, owners")
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

    dlq.add(verbs, fmt)
