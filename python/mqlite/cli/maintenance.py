"""``mqlite store verify|repair``: the operator's tools for a damaged store (docs/runbook.md).

``verify`` reads only and runs beside a writer; it exits 4 (DAMAGED) when it finds damage.
``repair`` is a dry run unless ``--execute`` (as ``group reset``): it prints what it would drop
and changes nothing until asked."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from mqlite.cli._common import DAMAGED, OK, NotFound, print_json, print_table

if TYPE_CHECKING:
    from mqlite.maintenance import AffectedMessage, Damage


def _store_path(path: str) -> str:
    import os

    if not os.path.exists(path):
        raise NotFound(f"no store at {path!r}")
    return path


@contextmanager
def _progress(show: bool) -> Iterator[Callable[[int, int], object] | None]:
    """A rich progress bar on stderr fed by verify's ``progress(done, total)``, or None."""
    if not show:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    with Progress("verifying", BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("verify", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _message_rows(messages: tuple[AffectedMessage, ...]) -> list[list[object]]:
    return [[m.topic or "?", "?" if m.queue_id is None else m.queue_id,
             "?" if m.queue_offset is None else m.queue_offset, m.commit_log_offset, m.unique_id or m.msg_id]
            for m in messages]


def _damage_rows(damage: tuple[Damage, ...]) -> list[list[object]]:
    return [[d.kind, d.file, d.offset, d.length, len(d.messages), d.detail] for d in damage]


def _verify(args: argparse.Namespace) -> int:
    from mqlite.maintenance import verify

    show = not args.json and not args.no_progress and sys.stderr.isatty()
    with _progress(show) as progress:
        report = verify(_store_path(args.path), progress=progress)
    if args.json:
        print_json(dataclasses.asdict(report))
    else:
        print_table(f"verify {args.path}", ["step", "status", "detail"],
                    [[s.name, s.status, s.detail] for s in report.steps])
        print(f"{report.records} records, {report.units} consume-queue units, "
              f"{report.bytes_scanned} bytes scanned; log {report.log_min}..{report.log_end}, "
              f"durable to {report.durable_end}"
              + (f", in flight from {report.in_flight_from}" if report.in_flight_from is not None else ""))
        if report.damage:
            print_table("damage", ["kind", "file", "offset", "length", "messages", "detail"],
                        _damage_rows(report.damage))
            affected = tuple(m for d in report.damage for m in d.messages)
            if affected:
                print_table("messages affected", ["topic", "queue", "queue offset", "log offset", "id"],
                            _message_rows(affected))
            print(f"damage found: see docs/runbook.md; `mqlite store repair {args.path}` shows what a "
                  "repair would drop")
        else:
            print("no damage")
    return OK if report.ok else DAMAGED


def _repair(args: argparse.Namespace) -> int:
    from mqlite.maintenance import repair

    report = repair(_store_path(args.path), mode=args.mode, dry_run=not args.execute)
    if args.json:
        print_json(dataclasses.asdict(report))
        return OK
    what = "would" if report.dry_run else "did"
    if not report.damage:
        print("no damage: nothing to repair")
        return OK
    print_table(f"repair ({report.mode}) {args.path}: what it {what} do", ["action"],
                [[a] for a in report.actions])
    if report.lost:
        print_table(f"messages it {what} drop", ["topic", "queue", "queue offset", "log offset", "id"],
                    _message_rows(report.lost))
    else:
        print(f"it {what} drop no message")
    if report.dry_run:
        print("dry run: nothing changed; run again with --execute to repair (close every process "
              "that has the store open first)")
    else:
        print(f"repaired; changed and removed files kept in {report.kept_aside}, report in {report.report_file}")
    return OK


def add(verbs: Any, fmt: Any) -> None:
    """Adds ``verify`` and ``repair`` to ``mqlite store``'s verbs."""
    v = verbs.add_parser("verify", formatter_class=fmt,
                         help="check every record, consume-queue unit and index entry (reads only; "
                              "exit 4 on damage)")
    v.add_argument("path", help="store directory")
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    v.add_argument("--no-progress", action="store_true", help="no progress bar (none when stderr is not a terminal)")
    v.set_defaults(func=_verify)
    r = verbs.add_parser("repair", formatter_class=fmt,
                         help="bring back a store with damage below its checkpoint (dry run unless --execute)")
    r.add_argument("path", help="store directory (nothing may have it open)")
    r.add_argument("--mode", choices=("skip", "cut"), default="skip",
                   help="skip: replace only the damaged records, every other message keeps its offset "
                        "(default); cut: end the log at the first damage")
    r.add_argument("--execute", action="store_true", help="repair (without it: show what a repair would do)")
    r.add_argument("--json", action="store_true", help="print the report as JSON")
    r.set_defaults(func=_repair)
