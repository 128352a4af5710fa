"""Per-group consumer settings in RocketMQ's ``config/subscriptionGroup.json`` shape
(``SubscriptionGroupManager``; FORMAT.md §19)::

    {"dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": 1700000000000},
     "subscriptionGroupTable": {"billing": {"groupName": "billing", "consumeEnable": true,
        "consumeBroadcastEnable": true, "retryQueueNums": 1, "retryMaxTimes": 16}}}

What mqlite reads of a group's entry: ``retryMaxTimes``, the ``max_reconsume_times`` of its
consumers that do not pass one; ``consumeEnable`` false, its CLUSTERING consumers own no queue
(``consumeBroadcastEnable`` false: its BROADCASTING consumers read none), checked at every
rebalance; ``retryQueueNums`` is recorded (mqlite's retry topics have one queue, RocketMQ's
default). Other fields, of the entry and of the file, are kept on rewrite. A group without an
entry has RocketMQ's defaults.

Invariants
- Every read-modify-write holds an exclusive ``flock`` on ``config/.subscriptionGroup.lock``;
  the file is written as a temp file, fsynced, the old one kept as ``.bak``, renamed and the
  directory fsynced. A file that does not decode falls back to its ``.bak``; with neither
  usable, ConfigFileError and nothing written over it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mqlite._files import atomic_write_json, config_error, flocked, load_json_object, read_with_backup
from mqlite.errors import InvalidConfigError
from mqlite.group import check_group
from mqlite.retry import DEFAULT_MAX_RECONSUME_TIMES

__all__ = ["SubscriptionGroupConfig", "SubscriptionGroups"]

_TABLE = "subscriptionGroupTable"
_MAX_U32 = 0xFFFF_FFFF


@dataclass(frozen=True)
class SubscriptionGroupConfig:
    """A group's entry of ``subscriptionGroup.json`` (RocketMQ's field names in camelCase)."""

    group_name: str
    consume_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = DEFAULT_MAX_RECONSUME_TIMES


_FIELDS = {
    "consumeEnable": ("consume_enable", bool),
    "consumeBroadcastEnable": ("consume_broadcast_enable", bool),
    "retryQueueNums": ("retry_queue_nums", int),
    "retryMaxTimes": ("retry_max_times", int),
}


def _entry(path: Path, group: str, raw: object) -> SubscriptionGroupConfig:
    where = f"{_TABLE}.{group}"
    if not isinstance(raw, dict):
        raise config_error(path, where, "expected an object")
    values: dict[str, Any] = {}
    for name, (attr, kind) in _FIELDS.items():
        if name not in raw:
            continue
        v = raw[name]
        if kind is bool and not isinstance(v, bool):
            raise config_error(path, f"{where}.{name}", "expected true or false")
        if kind is int and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _MAX_U32):
            raise config_error(path, f"{where}.{name}", "expected an int in [0, 2^32)")
        values[attr] = v
    return SubscriptionGroupConfig(group, **values)


def _decode(path: Path, raw: bytes) -> dict[str, Any]:
    data = load_json_object(path, raw)
    table = data.get(_TABLE, {})
    if not isinstance(table, dict):
        raise config_error(path, _TABLE, "expected an object")
    for group, entry in table.items():
        _entry(path, group, entry)  # checked now: a bad entry is the file's fault
    return data


class SubscriptionGroups:
    """The store's ``config/subscriptionGroup.json`` (see the module doc)."""

    def __init__(self, root: Path, *, durable: bool = True) -> None:
        self.path = root / "config" / "subscriptionGroup.json"
        self._lock = root / "config" / ".subscriptionGroup.lock"
        self._durable = durable
        self._cache: tuple[tuple[int, int] | None, dict[str, Any]] | None = None

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size

    def _load(self) -> tuple[dict[str, Any], bool]:
        loaded = read_with_backup(self.path, _decode)
        return ({}, False) if loaded is None else (loaded.value, loaded.main_unreadable)

    def get(self, group: str) -> SubscriptionGroupConfig:
        """The group's settings (RocketMQ's defaults without an entry). Re-reads the file only
        when its modification time or size changed since the last read."""
        check_group(group)
        stamp = self._stamp()
        if self._cache is None or self._cache[0] != stamp or stamp is None:
            with flocked(self._lock, exclusive=False):
                data, _ = self._load()
            self._cache = (stamp, data)
        entry = self._cache[1].get(_TABLE, {}).get(group)
        return SubscriptionGroupConfig(group) if entry is None else _entry(self.path, group, entry)

    def update(
        self,
        group: str,
        *,
        consume_enable: bool | None = None,
        consume_broadcast_enable: bool | None = None,
        retry_queue_nums: int | None = None,
        retry_max_times: int | None = None,
    ) -> SubscriptionGroupConfig:
        """Changes the given settings of ``group`` (creating its entry); returns them all."""
        check_group(group)
        changes = {"consumeEnable": consume_enable, "consumeBroadcastEnable": consume_broadcast_enable,
                   "retryQueueNums": retry_queue_nums, "retryMaxTimes": retry_max_times}
        for name, v in changes.items():
            if v is None:
                continue
            if _FIELDS[name][1] is bool and not isinstance(v, bool):
                raise InvalidConfigError(f"{_FIELDS[name][0]} must be a bool, got {v!r}")
            if _FIELDS[name][1] is int and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _MAX_U32):
                raise InvalidConfigError(f"{_FIELDS[name][0]} must be an int in [0, 2^32), got {v!r}")
        if retry_queue_nums is not None and retry_queue_nums != 1:
            raise InvalidConfigError("retry_queue_nums must be 1: a retry topic has one queue")
        with flocked(self._lock, exclusive=True):
            data, bad = self._load()
            table = data.setdefault(_TABLE, {})
            entry = table.setdefault(group, {"groupName": group})
            for name, v in changes.items():
                if v is not None:
                    entry[name] = v
            self._write_locked(data, bad)
            return _entry(self.path, group, entry)

    def names(self) -> list[str]:
        """The groups with an entry, sorted."""
        with flocked(self._lock, exclusive=False):
            data, _ = self._load()
        table = data.get(_TABLE)
        return sorted(table) if isinstance(table, dict) else []

    def remove(self, group: str) -> bool:
        """Removes the group's entry; returns whether it had one (nothing is written without)."""
        check_group(group)
        if self._stamp() is None and not self.path.with_name(self.path.name + ".bak").exists():
            return False
        with flocked(self._lock, exclusive=True):
            data, bad = self._load()
            table = data.get(_TABLE)
            if not isinstance(table, dict) or group not in table:
                return False
            del table[group]
            self._write_locked(data, bad)
            return True

    def _write_locked(self, data: dict[str, Any], bad: bool) -> None:
        """Writes ``data`` with its ``dataVersion`` counted up (lock held); ``bad``: the main
        file did not decode, so it is not rotated into the ``.bak``."""
        dv = data.get("dataVersion")
        counter = dv.get("counter", 0) if isinstance(dv, dict) and isinstance(dv.get("counter"), int) else 0
        data["dataVersion"] = {"counter": counter + 1, "stateVersion": 0,
                               "timestamp": int(time.time() * 1000)}
        ordered = {"dataVersion": data["dataVersion"], **{k: v for k, v in data.items() if k != "dataVersion"}}
        atomic_write_json(self.path, ordered, durable=self._durable, rotate=not bad)
        self._cache = None
