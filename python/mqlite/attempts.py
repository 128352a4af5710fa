"""Durable failure counts of an orderly consumer group: how many times each message at the
head of a queue has failed, per (group, topic, queue, offset), so that a poison message reaches
the dead-letter topic after ``max_reconsume_times`` retries even when its consumer restarts or
the queue moves to another member in between (RocketMQ keeps these counts in memory only).

The file is ``config/orderlyAttempts.d/<group>.json`` (FORMAT.md §18)::

    {"attemptTable": {"orders": {"0": {"41": 3}}}}

topic, then queue id, then queue offset, to the number of failed deliveries. Entries exist only
for messages that failed and were not consumed since: a failure of a batch drops the queue's
entries below the batch's first offset (consumed since they were written), and a success drops
the entries it passes.

Invariants
- A failure is counted (the file written durably) before the consumer acts on it, so a crash
  never undercounts a failure it acted on; a failure a crash cut short of its write is not
  counted, and is delivered again.
- Only the owner of a queue writes its entries; every read-modify-write holds an exclusive
  ``flock`` on ``config/.orderlyAttempts.lock``, so members writing other queues of the group
  (or other groups) serialise. A file that does not decode falls back to its ``.bak``; with
  neither usable, ConfigFileError and nothing written over it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mqlite._files import atomic_write_json, config_error, flocked, load_json_object, read_with_backup
from mqlite.group import check_group
from mqlite.message import MessageQueue

__all__ = ["AttemptFile"]

_Table = dict[str, dict[int, dict[int, int]]]
_MAX_QUEUE = 2**31
_MAX_OFFSET = 2**63


def _decode(path: Path, raw: bytes) -> _Table:
    data = load_json_object(path, raw)
    table = data.get("attemptTable", {})
    if not isinstance(table, dict):
        raise config_error(path, "attemptTable", "expected an object")
    out: _Table = {}
    for topic, queues in table.items():
        if not isinstance(queues, dict):
            raise config_error(path, f"attemptTable.{topic}", "expected an object")
        for qid, offsets in queues.items():
            where = f"attemptTable.{topic}.{qid}"
            if not (isinstance(qid, str) and qid.isdigit() and int(qid) < _MAX_QUEUE):
                raise config_error(path, where, "queue id is not an int in [0, 2^31)")
            if not isinstance(offsets, dict):
                raise config_error(path, where, "expected an object")
            for off, count in offsets.items():
                if not (isinstance(off, str) and off.isdigit() and int(off) < _MAX_OFFSET):
                    raise config_error(path, f"{where}.{off}", "offset is not an int in [0, 2^63)")
                if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                    raise config_error(path, f"{where}.{off}", "count is not an int from 1")
                out.setdefault(topic, {}).setdefault(int(qid), {})[int(off)] = count
    return out


class AttemptFile:
    """The failure counts of one group (see the module doc). ``root``: the store's client root."""

    def __init__(self, root: Path, group: str, *, durable: bool = True) -> None:
        config = root / "config"
        self.path = config / "orderlyAttempts.d" / f"{check_group(group)}.json"
        self._lock = config / ".orderlyAttempts.lock"
        self._durable = durable
        # Queues this object last saw with entries on file (None: not read yet); a success
        # touches the file only for these.
        self._pending: set[MessageQueue] | None = None

    def _read(self) -> tuple[_Table, bool]:
        loaded = read_with_backup(self.path, _decode)
        if loaded is None:
            return {}, False
        return loaded.value, loaded.main_unreadable

    def _write(self, table: _Table, main_unreadable: bool) -> None:
        data: dict[str, Any] = {
            "attemptTable": {
                t: {str(q): {str(o): n for o, n in sorted(offs.items())} for q, offs in sorted(qs.items()) if offs}
                for t, qs in sorted(table.items())
                if any(qs.values())
            }
        }
        atomic_write_json(self.path, data, durable=self._durable, rotate=not main_unreadable)
        self._pending = {MessageQueue(t, q) for t, qs in table.items() for q, offs in qs.items() if offs}

    def counts(self, mq: MessageQueue) -> dict[int, int]:
        """The failure counts of ``mq``'s messages, by queue offset."""
        with flocked(self._lock, exclusive=False):
            table, _ = self._read()
        return dict(table.get(mq.topic, {}).get(mq.queue_id, {}))

    def failed(self, mq: MessageQueue, offsets: Iterable[int]) -> dict[int, int]:
        """Counts one more failure of each of ``offsets`` (a batch from the head of ``mq``),
        durably; returns their counts."""
        offs = sorted(offsets)
        with flocked(self._lock, exclusive=True):
            table, bad = self._read()
            queue = table.setdefault(mq.topic, {}).setdefault(mq.queue_id, {})
            for o in [o for o in queue if o < offs[0]]:
                del queue[o]  # consumed since that failure
            for o in offs:
                queue[o] = queue.get(o, 0) + 1
            self._write(table, bad)
            return {o: queue[o] for o in offs}

    def passed(self, mq: MessageQueue, below: int) -> None:
        """Drops ``mq``'s entries below offset ``below`` (consumed or sent to the DLQ)."""
        if self._pending is not None and mq not in self._pending:
            return
        with flocked(self._lock, exclusive=True):
            table, bad = self._read()
            queue = table.get(mq.topic, {}).get(mq.queue_id, {})
            gone = [o for o in queue if o < below]
            if not gone:
                self._pending = {MessageQueue(t, q) for t, qs in table.items() for q, o in qs.items() if o}
                return
            for o in gone:
                del queue[o]
            self._write(table, bad)
