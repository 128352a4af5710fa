"""``mqlite top``: a live view of a store (read-only, beside its writers): per topic the
messages in per second and the depth, per group the consume rate, lag, live members (owners),
retry and dead-letter depth, and the retries waiting for their delay (unknown to a read-only
store: shown as none). Rates are the change between two looks, so the first look shows none."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from mqlite.cli._common import OK, open_store, print_json_line
from mqlite.cli._offsets import positive

if TYPE_CHECKING:
    from rich.console import Group

    from mqlite.store import Store

Snapshot = dict[str, Any]


def snapshot(store: Store) -> Snapshot:
    """Counters of one look: per topic the max-offset sum (messages ever stored) and depth; per
    group (from its ``group_summary``) the committed-offset sum, lag, live members, retry depth,
    waiting retries and DLQ depth (0 where the retry or dead-letter topic does not exist)."""
    topics: dict[str, dict[str, int]] = {}
    for t in store.topics():
        if t.name.startswith("%") or t.name.startswith("SCHEDULE_TOPIC"):
            continue  # retry, dead-letter and delay topics show under their groups
        spans = [store.offsets(mq) for mq in store.queues(t.name)]
        topics[t.name] = {"stored": sum(h for _, h in spans), "depth": sum(h - lo for lo, h in spans)}
    groups: dict[str, dict[str, Any]] = {}
    for g in store.consumer_groups():
        summary = store.group_summary(g)
        progress = [p for p in summary.queues if not p.topic.startswith("%")]
        groups[g] = {
            "consumed": sum(p.committed for p in progress),
            "lag": sum(p.lag for p in progress),
            "owners": summary.members,
            "retry": summary.retry_depth or 0,
            "retry_waiting": summary.retry_waiting,
            "dlq": summary.dlq_depth or 0,
        }
    return {"time": time.time(), "topics": topics, "groups": groups}


def with_rates(now: Snapshot, before: Snapshot | None) -> Snapshot:
    """``now`` with ``msg_per_s`` per topic and ``consume_per_s`` per group (None on the first
    look or for a topic or group that was not there before)."""
    dt = None if before is None else now["time"] - before["time"]

    def rate(kind: str, name: str, field: str) -> float | None:
        if before is None or not dt or name not in before[kind]:
            return None
        return float(round((now[kind][name][field] - before[kind][name][field]) / dt, 1))

    for name, t in now["topics"].items():
        t["msg_per_s"] = rate("topics", name, "stored")
    for name, g in now["groups"].items():
        g["consume_per_s"] = rate("groups", name, "consumed")
    return now


def render(snap: Snapshot, path: str) -> Group:
    from rich.console import Group
    from rich.table import Table

    def cell(v: object) -> str:
        return "-" if v is None else str(v)

    topics = Table(title=f"mqlite top: {path}", expand=False)
    for c in ("topic", "msg/s in", "depth"):
        topics.add_column(c)
    for name, t in sorted(snap["topics"].items()):
        topics.add_row(name, cell(t["msg_per_s"]), cell(t["depth"]))
    groups = Table()
    for c in ("group", "consume/s", "lag", "owners", "retry", "retry waiting", "dlq"):
        groups.add_column(c)
    for name, g in sorted(snap["groups"].items()):
        groups.add_row(name, cell(g["consume_per_s"]), cell(g["lag"]), ",".join(g["owners"]) or "-",
                       cell(g["retry"]), cell(g["retry_waiting"]), cell(g["dlq"]))
    return Group(topics, groups)


def _top(args: argparse.Namespace) -> int:
    iterations = 1 if args.once else args.iterations
    with open_store(args.path) as store:
        before: Snapshot | None = None
        if args.json:
            for i in range(iterations or 1 << 62):
                if i:
                    time.sleep(args.interval)  # the refresh period, not a synchronisation
                before = snap = with_rates(snapshot(store), before)
                print_json_line(snap)
            return OK
        from rich.console import Console
        from rich.live import Live

        before = with_rates(snapshot(store), None)
        with Live(render(before, args.path), console=Console(), auto_refresh=False) as live:
            i = 1
            while iterations is None or i < iterations:
                time.sleep(args.interval)  # the refresh period, not a synchronisation
                before = with_rates(snapshot(store), before)
                live.update(render(before, args.path), refresh=True)
                i += 1
    return OK


def _interval(text: str) -> float:
    try:
        s = float(text)
    except ValueError:
        s = 0.0
    if not 0 < s < float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return s


def add(sub: Any, fmt: Any) -> None:
    top = sub.add_parser("top", formatter_class=fmt,
                         help="a live view of a store: topic rates and depth, group rates, lag, owners, "
                              "retry and DLQ depth")
    top.add_argument("path", help="store directory")
    top.add_argument("-i", "--interval", type=_interval, default=2.0, help="seconds between looks (default 2)")
    how_long = top.add_mutually_exclusive_group()
    how_long.add_argument("--once", action="store_true", help="one look, then exit")
    how_long.add_argument("--iterations", type=positive, default=None, metavar="N",
                          help="N looks, then exit (default: until Ctrl-C)")
    top.add_argument("--json", action="store_true", help="one JSON object per look")
    top.set_defaults(func=_top)
