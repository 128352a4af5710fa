"""What ``Store``'s administration calls return, and the work behind those that span several
files: topic status, group summaries and deletion, store info (docs/admin.md).

Every call here reads the store's own files and the live state of its consumer groups
(``mqlite.group``); none holds a lock for longer than one file's read or write, so any of them
may run beside producers, consumers and other writer processes.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, cast

from mqlite import _core
from mqlite._files import store_io
from mqlite.dlq import DeadLetterQueue, RetryView
from mqlite.errors import ConsumerGroupActiveError, ConsumerGroupNotFoundError, MQError
from mqlite.group import check_group, group_dir, live_members, queue_owners
from mqlite.message import MessageExt, MessageQueue
from mqlite.offsets import QueueProgress, group_offsets
from mqlite.subgroup import SubscriptionGroups
from mqlite.timers import PendingTimer
from mqlite.topic import TopicConfig

__all__ = ["DeletedFile", "FileUsage", "GroupSummary", "QueueStatus", "StoreInfo", "TopicStatus"]

log = logging.getLogger("mqlite.retention")


class Store(Protocol):
    """What these calls use of a ``mqlite.Store``."""

    @property
    def path(self) -> str: ...
    @property
    def read_only(self) -> bool: ...
    def _live(self) -> _core.Store: ...
    def topic(self, name: str) -> TopicConfig: ...
    def topics(self) -> list[TopicConfig]: ...
    def offsets(self, mq: MessageQueue) -> tuple[int, int]: ...
    def read(self, mq: MessageQueue, offset: int, max_messages: int = ...) -> list[MessageExt]: ...
    def get_by_offset(self, commit_log_offset: int) -> MessageExt: ...
    def stats(self) -> dict[str, Any]: ...
    def consumer_groups(self) -> list[str]: ...
    def pending_timers(self) -> int: ...
    def list_timers(self, *, topic: str | None = ..., limit: int = ...) -> list[PendingTimer]: ...
    def retries(self, group: str) -> RetryView: ...
    def dead_letters(self, group: str) -> DeadLetterQueue: ...


# Bytes of one consume-queue unit (rust/FORMAT.md §4).
_CQ_UNIT = 20
# Most waiting retries a group summary lists (it reads one record each).
_MAX_LISTED = 1 << 20


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue of a topic, as ``Store.topic_status`` finds it."""

    topic: str
    queue_id: int
    min_offset: int
    """The oldest queue offset still readable (retention or a re-creation moved it)."""
    max_offset: int
    """The offset the next message will get."""
    last_store_timestamp: int | None
    """Store time (epoch ms) of the newest message, ``None`` when the queue holds none."""
    consume_queue_bytes: int
    """Bytes the queue's consume-queue units take (20 per message held, rust/FORMAT.md §4)."""

    @property
    def messages(self) -> int:
        """Messages the queue holds (``max_offset - min_offset``)."""
        return self.max_offset - self.min_offset

    @property
    def message_queue(self) -> MessageQueue:
        """The queue as a ``MessageQueue``."""
        return MessageQueue(self.topic, self.queue_id)


@dataclass(frozen=True, slots=True)
class TopicStatus:
    """A topic's configuration and the state of each of its read queues."""

    config: TopicConfig
    queues: list[QueueStatus]

    @property
    def messages(self) -> int:
        """Messages held over every queue."""
        return sum(q.messages for q in self.queues)

    @property
    def last_store_timestamp(self) -> int | None:
        """The newest message's store time (epoch ms), ``None`` when no queue holds one."""
        times = [q.last_store_timestamp for q in self.queues if q.last_store_timestamp is not None]
        return max(times, default=None)


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """A clustering group at a glance: its progress per queue, live members, and the depth of
    its retry and dead-letter topics (``None`` where the topic does not exist)."""

    group: str
    queues: list[QueueProgress]
    members: list[str]
    """Live members of the group (subscribed to any topic), sorted."""
    retry_depth: int | None
    """Messages in ``%RETRY%<group>`` the group has not consumed yet."""
    retry_waiting: int | None
    """Retries still waiting for their delay (pending timers due to go to ``%RETRY%<group>``);
    ``None`` on a read-only store, as only writers list pending timers."""
    dlq_depth: int | None
    """Messages in ``%DLQ%<group>`` past the group's purge point."""

    @property
    def lag(self) -> int:
        """The total lag over every queue."""
        return sum(p.lag for p in self.queues)


@dataclass(frozen=True, slots=True)
class FileUsage:
    """How many files of one kind the store holds and the bytes they take on disk."""

    count: int
    bytes: int


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """What ``Store.info()`` reports. File counts and sizes are 0 for ``":memory:"``."""

    path: str
    files: dict[str, FileUsage]
    """By kind: ``commit_log``, ``consume_queue`` (but the timer engine's), ``index``,
    ``timer`` (the consume queues of the delay-level and timer topics, whose records are in the
    commit log) and ``config``."""
    commit_log_min_offset: int
    commit_log_max_offset: int
    oldest_store_timestamp: int | None
    """Store time (epoch ms) of the oldest message the commit log holds."""
    newest_store_timestamp: int | None
    """Store time (epoch ms) of the newest message in any topic's queue."""
    topics: int
    groups: int
    pending_timers: int
    disk_total_bytes: int
    disk_used_bytes: int

    @property
    def disk_usage_ratio(self) -> float:
        """Used over total bytes of the file system holding the store (0.0 in memory)."""
        return self.disk_used_bytes / self.disk_total_bytes if self.disk_total_bytes else 0.0

    @property
    def disk_bytes(self) -> int:
        """Bytes the store's files take on disk."""
        return sum(u.bytes for u in self.files.values())


# The consume queues of the timer engine's topics (delay levels and timers): their records are
# in the commit log, these are the timer engine's own files.
_TIMER_TOPICS = ("SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer")


_Reason = Literal["expired", "disk_full"]


@dataclass(frozen=True, slots=True)
class DeletedFile:
    """A commit-log file retention deleted (``Store.run_retention``)."""

    path: str
    from_offset: int
    """Commit-log offset of its first byte: every record below ``from_offset + size`` is gone."""
    size: int
    modified_ms: int
    """Its last modification, epoch ms (0 when unknown)."""
    reason: _Reason
    """``expired``: older than ``retention_hours``; ``disk_full``: the file system was used
    above ``disk_force_clean_ratio``."""


def report_deletions(core: _core.Store) -> list[DeletedFile]:
    """Takes the deletions the core recorded since the last report and logs each one."""
    rows, dropped = core._take_deleted_files()
    files = [DeletedFile(p, start, size, modified, cast(_Reason, reason))
             for p, start, size, modified, reason in rows]
    for f in files:
        log.info("retention deleted %s (commit-log offsets %d to %d, last modified at %d ms): %s",
                 f.path, f.from_offset, f.from_offset + f.size, f.modified_ms, f.reason)
    if dropped:
        log.info("retention deleted %d more commit-log files, older than those listed", dropped)
    return files


def _usage(paths: list[Path], skip: tuple[str, ...] = ()) -> FileUsage:
    """Count and allocated bytes (``st_blocks``: a sparse, preallocated file counts what it
    holds) of the regular files under ``paths``, but for the top-level entries named in
    ``skip``."""
    count = size = 0
    for top in paths:
        for dirpath, dirs, names in os.walk(top):
            if dirpath == str(top):
                dirs[:] = [d for d in dirs if d not in skip]
            for name in names:
                try:
                    st = os.lstat(os.path.join(dirpath, name))
                except FileNotFoundError:
                    continue  # retention deleted it meanwhile
                count += 1
                size += st.st_blocks * 512
    return FileUsage(count, size)


def _store_time_before(store: Store, mq: MessageQueue, end: int, low: int) -> int | None:
    """Store time of the message at queue offset ``end - 1``; ``None`` when the queue no longer
    holds it (below ``low``) or it cannot be read."""
    if end <= low:
        return None
    try:
        got = store.read(mq, end - 1, 1)
    except MQError:
        return None  # the topic is not readable, or retention deleted the record meanwhile
    return got[-1].store_timestamp if got else None


def topic_status(store: Store, name: str) -> TopicStatus:
    """See ``Store.topic_status``."""
    config = store.topic(name)
    out: list[QueueStatus] = []
    for qid in range(config.read_queues):
        mq = MessageQueue(name, qid)
        low, high = store.offsets(mq)
        out.append(QueueStatus(name, qid, low, high, _store_time_before(store, mq, high, low),
                               (high - low) * _CQ_UNIT))
    return TopicStatus(config, out)


def progress(store: Store, root: Path, group: str) -> list[QueueProgress]:
    """See ``Store.consumer_progress``."""
    core = store._live()
    suffix = "@" + group
    out: list[QueueProgress] = []
    owners: dict[str, dict[int, str]] = {}
    for key, queues in group_offsets(root).load(group).items():
        if not key.endswith(suffix):
            continue
        topic = key[: -len(suffix)]
        if topic not in owners:
            owners[topic] = queue_owners(root, group, topic)
        for qid, committed in queues.items():
            low, high = core.offsets(topic, qid)
            last = _store_time_before(store, MessageQueue(topic, qid), min(committed, high), low)
            out.append(QueueProgress(topic, qid, committed, high, low, last, owners[topic].get(qid)))
    return sorted(out, key=lambda p: (p.topic, p.queue_id))


def summary(store: Store, root: Path, group: str) -> GroupSummary:
    """See ``Store.group_summary``."""
    queues = progress(store, root, group)
    topics = {p.topic for p in queues} | set(_subscribed_topics(root, group))
    members = sorted({m for t in topics for m in live_members(root, group, t)})
    names = {t.name for t in store.topics()}
    retry = store.retries(group)
    dlq = store.dead_letters(group)
    return GroupSummary(
        group, queues, members,
        retry.count() if retry.topic in names else None,
        None if store.read_only else len(store.list_timers(topic=retry.topic, limit=_MAX_LISTED)),
        dlq.count() if dlq.topic in names else None,
    )


def _subscribed_topics(root: Path, group: str) -> list[str]:
    """The topics with a subscription-marker directory in the group's lock files."""
    try:
        entries = list(os.scandir(group_dir(root, group)))
    except FileNotFoundError:
        return []
    return sorted(e.name for e in entries if "." not in e.name and e.is_dir(follow_symlinks=False))


def live_groups_of(root: Path, topic: str) -> dict[str, list[str]]:
    """Each group with live members subscribed to ``topic``, with their ids."""
    try:
        groups = sorted(os.listdir(root / "consumer_groups"))
    except FileNotFoundError:
        return {}
    out: dict[str, list[str]] = {}
    for group in groups:
        try:
            check_group(group)
        except MQError:
            continue  # not a directory this package writes
        alive = live_members(root, group, topic)
        if alive:
            out[group] = alive
    return out


def delete_group(root: Path, group: str, *, force: bool, durable: bool) -> list[str]:
    """See ``Store.delete_group``; returns the offset keys removed."""
    offsets = group_offsets(root, durable=durable)
    suffix = "@" + group
    gdir = group_dir(root, group)
    subscriptions = SubscriptionGroups(root, durable=durable)
    known = (any(k.endswith(suffix) for k in offsets.load(group)) or gdir.is_dir()
             or group in subscriptions.names())
    if not known:
        raise ConsumerGroupNotFoundError(f"consumer group {group!r} has no offsets, members or settings")
    alive = sorted({m for t in _subscribed_topics(root, group) for m in live_members(root, group, t)})
    if alive and not force:
        raise ConsumerGroupActiveError(
            f"group {group!r} has {len(alive)} live consumer(s): {', '.join(alive)}; "
            "stop them or pass force=True"
        )
    gone = offsets.remove(lambda key: key.endswith(suffix))
    subscriptions.remove(group)
    if not alive:
        # Renamed first, so the group's lock files vanish in one step: a consumer starting now
        # finds either the whole old directory or none and makes a new one.
        aside = gdir.with_name(f".deleted-{group}-{secrets.token_hex(4)}")
        with store_io("rename", gdir):
            try:
                os.rename(gdir, aside)
            except FileNotFoundError:
                return gone
        shutil.rmtree(aside, ignore_errors=True)
    return gone


def info(store: Store) -> StoreInfo:
    """See ``Store.info``."""
    stats = store.stats()
    low, high = int(stats["commit_log_min_offset"]), int(stats["commit_log_max_offset"])
    oldest: int | None = None
    if high > low:
        try:
            oldest = store.get_by_offset(low).store_timestamp
        except MQError:
            oldest = None  # retention deleted the head file meanwhile
    topics = store.topics()
    newest: int | None = None
    for t in topics:
        st = topic_status(store, t.name)
        if st.last_store_timestamp is not None:
            newest = st.last_store_timestamp if newest is None else max(newest, st.last_store_timestamp)
    files: dict[str, FileUsage] = {}
    total = used = 0
    if store.path != ":memory:":
        root = Path(store.path)
        files = {
            "commit_log": _usage([root / "commitlog"]),
            "consume_queue": _usage([root / "consumequeue"], skip=_TIMER_TOPICS),
            "index": _usage([root / "index"]),
            "timer": _usage([root / "consumequeue" / t for t in _TIMER_TOPICS]),
            "config": _usage([root / "config"]),
        }
        du = shutil.disk_usage(root)
        total, used = du.total, du.used
    return StoreInfo(
        path=store.path,
        files=files,
        commit_log_min_offset=low,
        commit_log_max_offset=high,
        oldest_store_timestamp=oldest,
        newest_store_timestamp=newest,
        topics=len(topics),
        groups=len(store.consumer_groups()),
        pending_timers=store.pending_timers(),
        disk_total_bytes=total,
        disk_used_bytes=used,
    )
