"""Consumer offsets in RocketMQ's ``config/consumerOffset.json`` shape.

Clustering groups share ``<store>/config/consumerOffset.json``::

    {"dataVersion": {"counter": 3, "stateVersion": 0, "timestamp": 1700000000000},
     "offsetTable": {"orders@billing": {"0": 12, "1": 7}}}

Keys are ``topic@group``, values map queue id to the **next** offset to consume. mqlite writes
strict JSON (queue ids quoted); RocketMQ's fastjson writes them unquoted, and the reader accepts
both.

A commit costs in proportion to its group, not to the whole table: a group's commits go to its
own file, ``config/consumerOffset.d/<group>.json`` (the same shape, only that group's keys), and
the table is ``consumerOffset.json`` with each group file's queues laid over it. ``compact``
folds the group files into ``consumerOffset.json`` (written whole) and then removes them; the
writer's ``Store.close`` does it, so a store closed cleanly has every offset in
``consumerOffset.json``, the file RocketMQ reads. A reset (``replace``) also compacts, so that no
group file can lay older queues over it. Several processes may commit: every read-modify-write
holds an exclusive ``flock`` on ``config/.consumerOffset.lock`` (readers a shared one), and each
file is written as a temp file, fsynced, the old one kept as ``.bak``, renamed and the directory
fsynced. A crash during a compaction leaves group files whose queues ``consumerOffset.json``
already holds: laying them over it changes nothing.

Every entry is checked when a file is read (queue ids decimal ints in ``[0, 2**31)``, offsets
ints in ``[0, 2**63)``, in a group file only keys of that group). A file that does not decode is
replaced by its ``.bak`` (the previous version: at worst some messages are delivered again) and
the next write leaves that ``.bak`` alone; with no usable ``.bak``, every read and write raises
ConfigFileError naming the file, the group, the topic and the queue, and nothing is written
over the file. It is never taken as "no commits", which would make a CONSUME_FROM_LAST_OFFSET
group skip its backlog.

A broadcasting consumer keeps its own offsets, in the same shape, in
``<store>/config/broadcast/<group>/<client_id>.json`` (one file, written whole: it holds only
that consumer's queues).

Automatic commits are written by an ``OffsetWriter`` on a thread of their own, so that a poll
or a push delivery never waits for those fsyncs (1 to 20 ms); RocketMQ's clients likewise
persist offsets from a scheduled thread.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mqlite._files import (
    atomic_write_json,
    config_error,
    flocked,
    fsync_dir,
    load_json_object,
    read_with_backup,
    store_io,
)
from mqlite.group import check_group
from mqlite.errors import IllegalStateError
from mqlite.message import MessageQueue

__all__ = ["OffsetFile", "OffsetWriter", "QueueProgress", "broadcast_offsets", "group_offsets", "offset_key"]

log = logging.getLogger("mqlite.consumer")


def offset_key(topic: str, group: str) -> str:
    """RocketMQ's ``topic@group`` key."""
    return f"{topic}@{group}"


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """A group's progress on one queue: committed (next) offset, queue max offset, lag, when
    it last consumed and which member owns the queue."""

    topic: str
    queue_id: int
    committed: int
    max_offset: int
    min_offset: int = 0
    """The queue's oldest offset: below it, retention deleted the messages."""
    last_consume_timestamp: int | None = None
    """Store time (epoch ms) of the last message the group consumed (the one before
    ``committed``); ``None`` when it consumed none that the queue still holds."""
    owner: str | None = None
    """Client id of the live member that holds the queue now (``None``: no live member)."""

    @property
    def message_queue(self) -> MessageQueue:
        """The queue as a ``MessageQueue``."""
        return MessageQueue(self.topic, self.queue_id)

    @property
    def lag(self) -> int:
        """Messages stored but not yet consumed by the group: those retention deleted before
        the group read them are not counted (its consumers skip them)."""
        return max(self.max_offset - max(self.committed, self.min_offset), 0)


_MAX_QUEUE_ID = (1 << 31) - 1  # queue ids are Java ints
_MAX_OFFSET = (1 << 63) - 1  # offsets are Java longs
_QUEUE_ID = re.compile(r"0|[1-9][0-9]*")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _decode(path: Path, raw: bytes) -> tuple[dict[str, Any], dict[str, dict[int, int]]]:
    """The file's JSON object and its offset table, every entry checked: keys ``topic@group``,
    queue ids decimal ints in ``[0, 2**31)``, offsets ints in ``[0, 2**63)``. Raises
    ConfigFileError naming the file, the entry's group, topic and queue, and what is wrong."""
    data = load_json_object(path, raw)
    raw_table = data.get("offsetTable")
    if not isinstance(raw_table, dict):
        found = "nothing" if raw_table is None else type(raw_table).__name__
        raise config_error(path, "offsetTable", f"expected an object, found {found}")
    table: dict[str, dict[int, int]] = {}
    for key, queues in raw_table.items():
        field = f"offsetTable.{key}"
        topic, at, group = key.rpartition("@")
        if not at:
            raise config_error(path, field, f"key {_shown(key)} is not 'topic@group'")
        if not isinstance(queues, dict):
            raise config_error(path, field, f"group {group!r}, topic {topic!r}: expected an object "
                               f"of queue id -> offset, found {type(queues).__name__}")
        entry: dict[int, int] = {}
        for q, offset in queues.items():
            where = f"group {group!r}, topic {topic!r}, queue {q if q.isdecimal() else _shown(q)}"
            if not _QUEUE_ID.fullmatch(q) or int(q) > _MAX_QUEUE_ID:
                raise config_error(path, f"{field}.{q}",
                                   f"{where}: the queue id is not an int in [0, {_MAX_QUEUE_ID}]")
            if type(offset) is not int or not 0 <= offset <= _MAX_OFFSET:
                raise config_error(path, f"{field}.{q}",
                                   f"{where}: the offset must be an int in [0, {_MAX_OFFSET}], "
                                   f"found {_shown(offset)}")
            entry[int(q)] = offset
        table[key] = entry
    return data, table


_GROUP_FILE = re.compile(r"([%|A-Za-z0-9_-]{1,120})\.json(?:\.bak)?")


def _write(path: Path, loaded: Any, table: Mapping[str, Mapping[int, int]], *, durable: bool) -> None:
    """Writes ``table`` to ``path`` in the offsets shape, its ``dataVersion`` one above the one
    ``loaded`` (``read_with_backup``'s result for ``path``) holds; other top-level fields kept."""
    data: dict[str, Any] = {} if loaded is None else dict(loaded.value[0])
    version = data.get("dataVersion")
    counter = version.get("counter", 0) if isinstance(version, dict) else 0
    data["dataVersion"] = {
        "counter": (counter if type(counter) is int and counter >= 0 else 0) + 1,
        "stateVersion": 0,
        "timestamp": int(time.time() * 1000),
    }
    data["offsetTable"] = {
        k: {str(q): o for q, o in sorted(v.items())} for k, v in sorted(table.items())
    }
    atomic_write_json(path, data, durable=durable,
                      rotate=loaded is None or not loaded.main_unreadable)


class OffsetFile:
    """One offsets file, its ``.bak``, the sidecar lock that serialises writers and, for the
    clustering table, the directory of per-group files laid over it (``groups``)."""

    def __init__(self, path: Path, lock: Path, *, durable: bool = True, groups: Path | None = None) -> None:
        self.path = path
        self.lock = lock
        self.durable = durable
        self.groups = groups

    def _group_file(self, key: str) -> Path | None:
        """The per-group file of ``topic@group`` (None without per-group files)."""
        if self.groups is None:
            return None
        return self.groups / f"{check_group(key.rpartition('@')[2])}.json"

    def _group_names(self) -> list[str]:
        """The groups that have a per-group file (or only its ``.bak``), sorted."""
        if self.groups is None:
            return []
        with store_io("list", self.groups):
            try:
                names = os.listdir(self.groups)
            except FileNotFoundError:
                return []
        return sorted({m.group(1) for n in names if (m := _GROUP_FILE.fullmatch(n))})

    def _read_group(self, group: str) -> Any:
        """``read_with_backup`` of one group's file, every key checked to be of that group."""
        if self.groups is None:
            raise IllegalStateError("this offsets table has no per-group files")
        path = self.groups / f"{group}.json"

        def decode(p: Path, raw: bytes) -> tuple[dict[str, Any], dict[str, dict[int, int]]]:
            data, table = _decode(p, raw)
            for key in table:
                if key.rpartition("@")[2] != group:
                    raise config_error(p, f"offsetTable.{key}", f"key {_shown(key)} is not of group {group!r}")
            return data, table

        return read_with_backup(path, decode)

    def _load_locked(self, group: str | None = None) -> tuple[Any, dict[str, dict[int, int]]]:
        """The main file as read and the table with the group files laid over it (only
        ``group``'s when given: the other groups' entries are then as the main file has them);
        lock held."""
        loaded = read_with_backup(self.path, _decode)
        table = {} if loaded is None else {k: dict(v) for k, v in loaded.value[1].items()}
        groups = self._group_names() if group is None else [group] if self.groups is not None else []
        for group in groups:
            part = self._read_group(group)
            if part is not None:
                for key, queues in part.value[1].items():
                    table.setdefault(key, {}).update(queues)
        return loaded, table

    def _absent(self) -> bool:
        """No file of the table exists: nothing was ever committed (and no lock is needed)."""
        return (not self.path.exists() and not self.path.with_name(self.path.name + ".bak").exists()
                and not self._group_names())

    def load(self, group: str | None = None) -> dict[str, dict[int, int]]:
        """The whole table: ``{"topic@group": {queue_id: next_offset}}``; with ``group``, its
        entries are exact and it reads only that group's file (the others' may lag).

        Raises ConfigFileError when a file (or, if it is missing, its ``.bak``) does not decode
        and its ``.bak`` does not stand in for it."""
        if self._absent():
            return {}
        with flocked(self.lock, exclusive=False):
            return self._load_locked(None if group is None else check_group(group))[1]

    def get(self, key: str) -> dict[int, int]:
        """One ``topic@group`` entry (empty when nothing was committed)."""
        return self.load(key.rpartition("@")[2]).get(key, {})

    def update(self, key: str, offsets: Mapping[int, int], *, replace: bool = False) -> None:
        """Merge (or with ``replace``, set) one entry's queue offsets, atomically. A merge
        writes only the group's own file; ``replace`` compacts. Raises ConfigFileError, writing
        nothing, when a file it must read cannot be read."""
        new = {int(q): int(o) for q, o in offsets.items()}
        group_file = self._group_file(key)
        with flocked(self.lock, exclusive=True):
            if group_file is None or replace:
                self._compact_locked(key, new, replace=replace)
                return
            loaded = self._read_group(key.rpartition("@")[2])
            table = {} if loaded is None else loaded.value[1]
            table.setdefault(key, {}).update(new)
            _write(group_file, loaded, table, durable=self.durable)

    def compact(self) -> None:
        """Folds the per-group files into the main file and removes them (nothing to do
        without any)."""
        if not self._group_names():
            return
        with flocked(self.lock, exclusive=True):
            self._compact_locked(None, {}, replace=False)

    def remove(self, match: Callable[[str], bool]) -> list[str]:
        """Removes every ``topic@group`` entry whose key ``match`` accepts, as one step
        (compacting); returns the keys removed, sorted (nothing is written when none match)."""
        if self._absent():
            return []
        with flocked(self.lock, exclusive=True):
            loaded, table = self._load_locked()
            gone = sorted(key for key in table if match(key))
            if gone:
                for key in gone:
                    del table[key]
                self._write_table_locked(loaded, table)
            return gone

    def _compact_locked(self, key: str | None, offsets: dict[int, int], *, replace: bool) -> None:
        """Writes the whole table, with ``offsets`` merged into (or replacing) ``key``, to the
        main file, then removes the group files: only once the main file holds their queues."""
        loaded, table = self._load_locked()
        if key is not None:
            entry = {} if replace else table.get(key, {})
            entry.update(offsets)
            table[key] = entry
        self._write_table_locked(loaded, table)

    def _write_table_locked(self, loaded: Any, table: dict[str, dict[int, int]]) -> None:
        """Writes ``table`` whole to the main file, then removes the group files (the main file
        holds their queues now); lock held."""
        _write(self.path, loaded, table, durable=self.durable)
        groups = self._group_names()
        if not groups or self.groups is None:
            return
        for group in groups:
            for name in (f"{group}.json", f"{group}.json.bak"):
                with store_io("unlink", self.groups / name):
                    try:
                        os.unlink(self.groups / name)
                    except FileNotFoundError:
                        pass
        if self.durable:
            with store_io("fsync", self.groups):
                fsync_dir(self.groups)


def group_offsets(root: Path, *, durable: bool = True) -> OffsetFile:
    """The shared clustering offsets of the store at ``root``: ``consumerOffset.json`` and the
    per-group files laid over it."""
    config = root / "config"
    return OffsetFile(config / "consumerOffset.json", config / ".consumerOffset.lock", durable=durable,
                      groups=config / "consumerOffset.d")


def broadcast_offsets(root: Path, group: str, client_id: str, *, durable: bool = True) -> OffsetFile:
    """The private offsets file of one broadcasting consumer (``group`` is validated: it
    names a directory)."""
    d = root / "config" / "broadcast" / check_group(group)
    return OffsetFile(d / f"{client_id}.json", d / f".{client_id}.offsets.lock", durable=durable)


_WRITER_IDLE = 30.0  # s: an offset writer thread with nothing to write this long ends


class OffsetWriter:
    """Writes one consumer's offsets, in the background (``submit``) or at once (``write``).

    ``write_offsets`` is called with ``{queue: next offset}`` and does the durable write.

    Invariants:
    - For each queue, writes reach the file in the order they were asked for, and a later
      request supersedes an earlier one not yet written: ``submit`` replaces it; ``write``
      drops it.
    - ``_io`` is held across every write, and the background thread takes its batch only while
      holding it. So ``write`` and ``flush`` also wait for a background write already under
      way. After ``flush(queues)`` returns, no write of those queues is pending or running.
      That is what a revoke needs before another member may own the queue: a late write of an
      older offset would move the group back.

    Crash behaviour: a submitted offset not yet written dies with the process. The queue is then
    consumed again from the previous commit (at-least-once), never skipped.

    The thread starts with the first ``submit`` and ends after ``_WRITER_IDLE`` seconds with
    nothing to write, or at ``close`` once the pending offsets are written. It holds only what
    ``write_offsets`` holds: pass a weak reference to a consumer so that a consumer dropped
    without ``close`` can still be collected.
    """

    def __init__(self, write_offsets: Callable[[dict[Any, int]], None], name: str) -> None:
        self._write_offsets = write_offsets
        self._name = name
        self._io = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._pending: dict[Any, int] = {}
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._closed = False

    def submit(self, offsets: Mapping[Any, int]) -> None:
        """Queues ``offsets`` for the background thread and returns at once."""
        if not offsets:
            return
        with self._cond:
            if self._closed:
                return
            self._pending.update(offsets)
            if self._thread is None or self._pid != os.getpid():
                # A forked child has no copy of the parent's thread: it starts its own.
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            else:
                self._cond.notify()

    def write(self, offsets: Mapping[Any, int]) -> None:
        """Writes ``offsets`` now on the calling thread, after any background write under way;
        pending offsets of the same queues are dropped (these supersede them). Raises what the
        write raises."""
        with self._io:
            with self._cond:
                for q in offsets:
                    self._pending.pop(q, None)
            if offsets:
                self._write_offsets(dict(offsets))

    def flush(self, queues: Iterable[Any]) -> None:
        """Writes the pending offsets of ``queues`` now on the calling thread, after any
        background write under way. Raises what the write raises."""
        with self._io:
            with self._cond:
                due = {q: self._pending.pop(q) for q in queues if q in self._pending}
            if due:
                self._write_offsets(due)

    def pending(self) -> dict[Any, int]:
        """The offsets submitted and not yet written."""
        with self._cond:
            return dict(self._pending)

    def close(self, timeout: float | None = None) -> None:
        """Writes what is pending (on the thread) and ends the thread. Idempotent."""
        with self._cond:
            self._closed = True
            thread = self._thread if self._pid == os.getpid() else None
            self._cond.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._pending and not self._closed:
                    self._cond.wait(_WRITER_IDLE)
                if not self._pending:
                    # Idle or closed: end; a later submit starts a new thread.
                    self._thread = None
                    return
            with self._io:
                with self._cond:
                    batch, self._pending = self._pending, {}
                if not batch:
                    continue
                try:
                    self._write_offsets(batch)
                except Exception as exc:  # noqa: BLE001 - the next commit retries (committed is unchanged)
                    log.error("offset commit failed (retried at the next commit): %s", exc)
