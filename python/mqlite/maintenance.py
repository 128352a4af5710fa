"""Verify and repair a store by path: the operator's tools for damage below the checkpoint.

``verify`` reads every commit-log record, consume-queue unit and key-index entry, takes no lock
and writes nothing, so it runs beside a writer. ``repair`` brings a damaged store back: it
takes the store's lock (nothing may have it open), keeps every file it changes or removes
under ``<store>/repair/<unix ms>/`` with a ``report.json`` listing every message lost, and
rebuilds the derived files at the next open. docs/runbook.md is the operator's guide.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from mqlite import _core
from mqlite.errors import IllegalArgumentError

__all__ = [
    "AffectedMessage",
    "Damage",
    "RepairReport",
    "VerifyReport",
    "VerifyStep",
    "repair",
    "verify",
]

DamageKind = Literal[
    "log_record", "log_zeroed", "log_short", "queue_unit", "queue_mismatch", "index_entry"
]
"""What a damage is: a commit-log record that fails its checks (``log_record``), zeros where
whole records follow (``log_zeroed``), a log that ends before its durable end (``log_short``),
a consume-queue unit that does not decode or leaves a hole (``queue_unit``) or does not index
its record (``queue_mismatch``), a key-index entry that points nowhere or at another key's
record (``index_entry``)."""


@dataclass(frozen=True)
class AffectedMessage:
    """A message that damage makes unreadable, or that a repair drops. Fields the log and the
    consume queues no longer name are None. ``msg_id`` is the offset message id (what
    ``Store.get`` accepts); ``unique_id`` the producer's ``UNIQ_KEY``."""

    commit_log_offset: int
    msg_id: str
    size: int | None
    topic: str | None
    queue_id: int | None
    queue_offset: int | None
    unique_id: str | None


@dataclass(frozen=True)
class Damage:
    """One damaged range. ``file`` is the damaged file; ``offset`` where the damage starts (a
    commit-log offset for the log, the queue's byte offset, unit index × 20, for a consume
    queue, the byte position for an index file); ``file_offset`` the position inside ``file``;
    ``length`` the damaged bytes (for the log, up to the next whole record)."""

    file: str
    offset: int
    file_offset: int
    length: int
    kind: DamageKind
    detail: str
    messages: tuple[AffectedMessage, ...]


@dataclass(frozen=True)
class VerifyStep:
    """What one step checked: ``name`` is ``commit_log``, ``consume_queues`` or ``index``;
    ``status`` is ``ok``, ``damaged`` or ``skipped`` (nothing to check, and why, in
    ``detail``)."""

    name: str
    status: Literal["ok", "damaged", "skipped"]
    detail: str


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found. ``ok`` is True when there is no damage. ``durable_end`` is the
    offset below which every byte was flushed; a range past it that a writer may still be
    filling starts at ``in_flight_from`` and is not damage."""

    store: str
    ok: bool
    log_min: int
    log_end: int
    durable_end: int
    records: int
    units: int
    bytes_scanned: int
    in_flight_from: int | None
    damage: tuple[Damage, ...]
    steps: tuple[VerifyStep, ...]


@dataclass(frozen=True)
class RepairReport:
    """What :func:`repair` did (or, with ``dry_run``, would do). ``lost`` lists every message
    the repair dropped, in commit-log order; ``kept_aside`` is the directory holding the copies
    of every changed or removed file and ``report_file`` this report as JSON (both None in a
    dry run or when nothing needed repair)."""

    store: str
    mode: Literal["cut", "skip"]
    dry_run: bool
    changed: bool
    damage: tuple[Damage, ...]
    lost: tuple[AffectedMessage, ...]
    actions: tuple[str, ...]
    kept_aside: str | None
    report_file: str | None
    log_end_before: int
    log_end_after: int


def _message(d: dict[str, Any]) -> AffectedMessage:
    return AffectedMessage(**d)


def _damage(d: dict[str, Any]) -> Damage:
    return Damage(**{**d, "messages": tuple(_message(m) for m in d["messages"])})


def _path(path: str | os.PathLike[str]) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise IllegalArgumentError(f"path must be a str or os.PathLike, not {type(path).__name__}")
    p = os.fspath(path)
    if not isinstance(p, str):
        raise IllegalArgumentError("path must be a str path, not bytes")
    return p


def verify(
    path: str | os.PathLike[str],
    *,
    progress: Callable[[int, int], object] | None = None,
) -> VerifyReport:
    """Check every record of the store at ``path`` and name each damage.

    Reads every commit-log record (length, magic, body CRC and the whole-record CRC property
    where present, END_OF_FILE markers), every consume-queue unit against the log (offset,
    size, tags code, queue offset) and the key index's entries when an ``index/`` directory
    exists. Takes no lock and writes nothing: it runs beside a writer, whose range past the
    durable end is reported as in flight (``in_flight_from``), not as damage.

    ``progress(done, total)`` is called with bytes as the scan moves on (for a progress bar);
    an exception it raises ends the verification and propagates.

    Raises StoreNotFoundError or StoreNotADirectoryError for a path that is not a directory,
    IllegalArgumentError for a directory that holds no store, StoreIOError when a file cannot
    be read. Damage is reported in the result, never raised.
    """
    if progress is not None and not callable(progress):
        raise IllegalArgumentError("progress must be callable(done, total) or None")
    d = json.loads(_core._verify_store(_path(path), progress))
    return VerifyReport(
        **{
            **d,
            "damage": tuple(_damage(x) for x in d["damage"]),
            "steps": tuple(VerifyStep(**s) for s in d["steps"]),
        }
    )


def repair(
    path: str | os.PathLike[str],
    *,
    mode: Literal["cut", "skip"] = "skip",
    dry_run: bool = False,
) -> RepairReport:
    """Bring back a store whose damage ``mqlite.open`` refuses (see docs/runbook.md).

    ``mode="skip"`` (the default) overwrites each damaged commit-log span with a filler record
    every reader skips: only the damaged messages are lost and every other message keeps its
    offset. ``mode="cut"`` ends the log at the first damage: every message from there on is
    lost. Either way the consume queues and the key index are rebuilt by the next open.

    Before the first change, every file the repair changes or removes is kept under
    ``<store>/repair/<unix ms>/`` with ``report.json``, which lists the damage and every message
    lost (topic, queue, queue offset, commit-log offset, ids). ``dry_run=True`` returns the same
    report and changes nothing.

    Read-only opens take no lock, so a repair cannot see them: stop every process that reads
    the store first.

    Raises StoreLockedError when a writer has the store open, StoreNotFoundError or
    StoreNotADirectoryError for a path that is not a directory, IllegalArgumentError for a
    directory that holds no store or an unknown ``mode`` (or a damaged span too short for a filler:
    repair it with ``mode="cut"``), StoreIOError on I/O failure.
    """
    if mode not in ("cut", "skip"):
        raise IllegalArgumentError(f'mode must be "cut" or "skip", not {mode!r}')
    if not isinstance(dry_run, bool):
        raise IllegalArgumentError("dry_run must be a bool")
    d = json.loads(_core._repair_store(_path(path), mode, dry_run))
    return RepairReport(
        **{
            **d,
            "damage": tuple(_damage(x) for x in d["damage"]),
            "lost": tuple(_message(m) for m in d["lost"]),
            "actions": tuple(d["actions"]),
        }
    )
