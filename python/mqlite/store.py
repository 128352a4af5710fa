"""The ``Store`` handle: open, admin, reads, and the fork guard."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from mqlite import _core
from mqlite import admin as _admin
from mqlite import timers as _timers
from mqlite._args import deprecated, int_arg
from mqlite._context import ClientContext
from mqlite.admin import DeletedFile, GroupSummary, StoreInfo, TopicStatus
from mqlite.config import store_options
from mqlite.dlq import DeadLetterQueue, RetryView, retries
from mqlite.errors import (
    ConsumerGroupActiveError,
    ConsumerGroupNotFoundError,
    IllegalArgumentError,
    InvalidConfigError,
    InvalidQueueError,
    StoreClosedError,
    StoreNotADirectoryError,
    TopicNotFoundError,
)
from mqlite.group import check_group, live_members
from mqlite.message import MessageExt, MessageQueue
from mqlite.offsets import QueueProgress, group_offsets, offset_key
from mqlite.producer import Compression, Producer
from mqlite.pull import PullConsumer
from mqlite.push import PushConsumer
from mqlite.subgroup import SubscriptionGroupConfig, SubscriptionGroups
from mqlite.testing import ManualClock
from mqlite.timers import PendingTimer, TimerChange
from mqlite.topic import TopicConfig, check_topic, parse_tags

__all__ = ["KeyQueryResult", "Store", "open"]


class KeyQueryResult(list[MessageExt]):
    """What ``Store.find_by_key`` found: a list of messages, newest first, with how complete it
    is (``truncated``, ``index_lag``, ``index_error``, ``complete``)."""

    truncated: bool
    index_lag: int
    index_error: str | None

    def __init__(self, messages: Iterable[MessageExt], truncated: bool, status: Mapping[str, Any]):
        super().__init__(messages)
        self.truncated = bool(truncated)
        self.index_lag = int(status.get("lag", 0))
        self.index_error = status.get("last_error")

    @property
    def complete(self) -> bool:
        """No limit cut the answer, the index had reached the log's end and had no failure."""
        return not self.truncated and self.index_lag == 0 and self.index_error is None

    def __repr__(self) -> str:
        return (
            f"KeyQueryResult({list.__repr__(self)}, truncated={self.truncated}, "
            f"index_lag={self.index_lag}, index_error={self.index_error!r})"
        )


def _timestamp_ms(t: datetime | int, field: str) -> int:
    """Epoch milliseconds of a datetime, or an int taken as epoch milliseconds."""
    if isinstance(t, datetime):
        return int(t.timestamp() * 1000)
    if isinstance(t, int) and not isinstance(t, bool):
        return t
    raise TypeError(f"{field} must be a datetime or int milliseconds, not {type(t).__name__}")

log = logging.getLogger("mqlite.store")

def _exclusive(exclusive: object, shared: object) -> bool:
    """``exclusive`` with the deprecated ``shared`` folded in (``shared=False`` is
    ``exclusive=True``); both given and contradicting is an InvalidConfigError."""
    checked = store_options({"exclusive": exclusive, "shared": shared})
    wanted = bool(checked.get("exclusive", False))
    if "shared" not in checked:
        return wanted
    if checked["shared"] and wanted:
        raise InvalidConfigError(
            "exclusive=True contradicts shared=True (shared is a deprecated alias of "
            "exclusive=False: leave it out)",
            field="exclusive",
        )
    return not checked["shared"]


def _queue(mq: object) -> MessageQueue:
    if not isinstance(mq, MessageQueue):
        raise TypeError(f"expected a MessageQueue, not {type(mq).__name__}")
    return mq


class Store:
    """An open store: a directory, or ``":memory:"``. Thread-safe; any number of processes may open
    the same path and write it at once (docs/processes.md), unless one opens it with
    ``exclusive=True``, which keeps every other writer out while it is open (a second writable
    open raises StoreLockedError, or waits up to ``wait`` seconds). ``read_only=True`` opens
    follow the writers and write nothing.

    Options left ``None`` take the core's defaults; ``mqlite.config.OPEN_OPTIONS`` lists every
    option with its type, default, meaning and footprint (docs/configuration.md is generated from
    it). The file sizes (``commit_log_file_size``,
    ``consume_queue_file_units``) are chosen when the store is created: it records them in
    ``<store>/meta`` and every later open, read-only included, uses them; a different value
    given raises InvalidConfigError (with ``field``, ``stored`` and ``given``). An unset
    ``max_message_size`` is 4 MiB, or the largest body a smaller commit-log file holds."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        read_only: bool = False,
        exclusive: bool = False,
        shared: bool | None = None,
        wait: float | None = None,
        flush: Literal["async", "sync"] | None = None,
        flush_interval_ms: int | None = None,
        sync_flush_timeout_ms: int | None = None,
        commit_log_file_size: int | None = None,
        consume_queue_file_units: int | None = None,
        max_message_size: int | None = None,
        auto_create_topics: bool | None = None,
        default_queues: int | None = None,
        file_mode: int | None = None,
        dir_mode: int | None = None,
        retention_hours: float | None = None,
        max_mapped_files: int | None = None,
        delay_levels: str | None = None,
        timer_max_delay_hours: float | None = None,
        timer_catchup_rate: int | None = None,
        disk_force_clean_ratio: float | None = None,
        index_enabled: bool | None = None,
        index_hash_slots: int | None = None,
        clock: ManualClock | None = None,
    ) -> None:
        exclusive = _exclusive(exclusive, shared)
        options = store_options(
            {
                "read_only": read_only,
                "exclusive": exclusive,
                "wait": wait,
                "flush": flush,
                "flush_interval_ms": flush_interval_ms,
                "sync_flush_timeout_ms": sync_flush_timeout_ms,
                "commit_log_file_size": commit_log_file_size,
                "consume_queue_file_units": consume_queue_file_units,
                "max_message_size": max_message_size,
                "auto_create_topics": auto_create_topics,
                "default_queues": default_queues,
                "file_mode": file_mode,
                "dir_mode": dir_mode,
                "retention_hours": retention_hours,
                "max_mapped_files": max_mapped_files,
                "delay_levels": delay_levels,
                "timer_max_delay_hours": timer_max_delay_hours,
                "timer_catchup_rate": timer_catchup_rate,
                "disk_force_clean_ratio": disk_force_clean_ratio,
                "index_enabled": index_enabled,
                "index_hash_slots": index_hash_slots,
                "clock": clock,
            }
        )
        where = os.fsdecode(os.fspath(path))
        try:
            where.encode("utf-8")
        except UnicodeEncodeError:
            # Checked before any file-system call: the store keeps its path as text.
            raise InvalidConfigError(
                f"path {where!r} is not valid UTF-8 text (it holds a lone surrogate)"
            ) from None
        if where != ":memory:" and os.path.exists(where) and not os.path.isdir(where):
            # Said the same way for both modes (a read-only open would look for files inside),
            # with errno and filename as the core's OSError subclasses carry them.
            err = StoreNotADirectoryError(f"{where!r} is not a directory")
            err.errno, err.strerror, err.filename = errno.ENOTDIR, str(err), where
            raise err
        self._core = _core.Store(where, **options)
        self._path = self._core.path
        self._read_only = self._core.read_only
        # Everything the store's clients use of it (they see nothing else).
        self._client_context = ClientContext(
            self._core,
            sync=self._core.flush_mode == "sync",
            auto_create=self._core.auto_create_topics,
            default_queues=self._core.default_queues,
        )
        # The native store, or the error saying why it may not be used (closed, forked): bound
        # once, as every call goes through it.
        self._live: Callable[[], _core.Store] = self._client_context.live

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush and close; idempotent. In a forked child this only forgets the handle.

        Sends stop being accepted first (a later send raises StoreClosedError); then the async
        sends accepted before complete (in a ``flush="sync"`` store, once the disk holds them)
        and their callbacks run; then the store closes. A steady stream of sends from other
        threads therefore cannot hold close() up.

        A writer then folds the consumer groups' offset files into
        ``config/consumerOffset.json`` (see ``mqlite.offsets``), so that a store closed cleanly
        has every committed offset in the file RocketMQ reads."""
        ctx = self._client_context
        compact = ctx.ok and ctx.pid == os.getpid() and ctx.durable and not self._read_only
        if ctx.ok and ctx.pid == os.getpid():
            _admin.report_deletions(ctx.core)
        ctx.close()
        if compact:
            group_offsets(ctx.client_root()).compact()

    @property
    def closed(self) -> bool:
        """True after ``close()``, or in a child process that inherited the handle."""
        ctx = self._client_context
        return not ctx.ok or ctx.pid != os.getpid()

    @property
    def path(self) -> str:
        """The store directory, or ``":memory:"``."""
        return self._path

    @property
    def read_only(self) -> bool:
        """Whether the store was opened with ``read_only=True``."""
        return self._read_only

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("read-only" if self._read_only else "open")
        return f"<mqlite.Store {self._path!r} {state}>"

    # -- producing ------------------------------------------------------------------------------

    def producer(
        self,
        group: str = "DEFAULT_PRODUCER",
        *,
        compress_over: int | None = None,
        compression: Compression = "zlib",
        compression_level: int | None = None,
    ) -> Producer:
        """A producer in ``group``; sends go round robin over a topic's write queues, with one
        turn per topic.

        ``compress_over=N`` compresses single sends of ``N`` body bytes or more (see
        ``Producer``)."""
        return Producer(
            self,
            group,
            compress_over=compress_over,
            compression=compression,
            compression_level=compression_level,
        )

    # -- admin ----------------------------------------------------------------------------------

    def create_topic(
        self, name: str, queues: int = 4, *, perm: int = 6, order: bool = False, exist_ok: bool = True
    ) -> None:
        """Create a topic with ``queues`` read and write queues, 1 to 1024 (``perm``: 4 read,
        2 write).

        An existing topic is left as it is (with ``exist_ok=False`` it is an
        IllegalArgumentError); asking it for more queues than it has logs a WARNING: grow it
        with ``update_topic``."""
        queues = int_arg("queues", queues)
        core = self._live()
        core.create_topic(name, queues, perm=perm, order=order, exist_ok=exist_ok)
        have = core.queue_count(name)
        if have < queues:
            log.warning(
                "topic %r exists with %d queues; create_topic leaves it as it is: "
                "use update_topic(%r, queues=%d) to grow it",
                name, have, name, queues,
            )

    def create_topics(
        self, names: Iterable[str], queues: int = 4, *, perm: int = 6, order: bool = False,
        exist_ok: bool = True,
    ) -> list[str]:
        """Create many topics at once, each with ``queues`` read and write queues; returns the
        names created (those that did not exist), sorted.

        The topic table is written once for the whole batch (one append to
        ``config/topics.journal`` and one sync) rather than once per topic, so creating 10,000
        topics takes one table write. Every name and setting is checked before anything is
        written: a bad name (InvalidTopicError) or, with ``exist_ok=False``, an existing topic
        (IllegalArgumentError) creates none of them. Existing topics are left as they are."""
        if isinstance(names, (str, bytes)):
            raise TypeError("names must be an iterable of topic names, not a single str")
        names = list(names)
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"topic names must be str, not {type(name).__name__}")
        queues = int_arg("queues", queues)
        return self._live().create_topics(names, queues, perm=perm, order=order, exist_ok=exist_ok)

    def update_topic(
        self,
        name: str,
        *,
        queues: int | None = None,
        read_queues: int | None = None,
        write_queues: int | None = None,
        perm: int | None = None,
        order: bool | None = None,
    ) -> TopicConfig:
        """Change the given settings of the existing topic ``name`` (RocketMQ's
        ``updateTopic``) and return its configuration; the others are kept. ``queues`` sets
        both queue counts at once (and is taken for whichever of ``read_queues`` and
        ``write_queues`` is not given).

        Producers use the new write queues from their next send (round robin covers them);
        subscribed consumers pick new read queues up at their next rebalance. Read queues
        never shrink (the messages of a removed queue would no longer be read), and a change of
        either count may not leave more write than read queues (messages sent to the others
        would never be read): fewer
        write than read queues is how a queue is drained before it is left idle. ``perm`` is
        the permission bits (``PERM_READ | PERM_WRITE``: 6; 4 refuses sends with
        TopicNotWritableError, 2 reads). Bad values (a count outside 1 to 1024, a shrink, a
        non 3-bit ``perm``) are an IllegalArgumentError and write nothing; an unknown topic is
        a TopicNotFoundError. Other writer processes see the change at their next send or
        read of the topic."""
        return TopicConfig.from_dict(self._live().update_topic(
            name, queues, read_queues=read_queues, write_queues=write_queues, perm=perm, order=order,
        ))

    def delete_topic(self, name: str, *, force: bool = False) -> None:
        """Delete the topic ``name`` (RocketMQ's ``deleteTopic``): its configuration and every
        group's committed offsets of it go; its messages stay on disk until retention deletes
        their commit-log files (``retention_hours``), and its consume queues with them.

        What the others see: a send to the topic, in any process, fails with
        TopicNotFoundError from then on (or creates a new topic of that name where topics are
        auto-created); a read of its queues keeps returning what they hold until a topic of
        the same name is created again. That new topic never shows the deleted one's messages
        to consumers: it records the commit-log end at its creation (``since_offset``) and its
        queues start past every older record, whatever offset a consumer asks for.

        Live consumers of the topic would commit their positions again, so this raises
        ConsumerGroupActiveError while any group has one, unless ``force``. An unknown topic is
        a TopicNotFoundError and a system, retry or dead-letter topic an InvalidTopicError;
        neither writes anything."""
        check_topic(name)
        core = self._live()
        root = self._client_context.client_root()
        alive = _admin.live_groups_of(root, name)
        if alive and not force:
            who = "; ".join(f"{g}: {', '.join(m)}" for g, m in alive.items())
            raise ConsumerGroupActiveError(
                f"topic {name!r} has live consumers ({who}); stop them or pass force=True"
            )
        core.delete_topic(name)
        gone = group_offsets(root, durable=self._client_context.durable).remove(
            lambda key: key.rpartition("@")[0] == name
        )
        log.info("deleted topic %r and the committed offsets %s", name, gone)

    def topic(self, name: str) -> TopicConfig:
        """The configuration of topic ``name``; TopicNotFoundError when it does not exist."""
        check_topic(name)
        for t in self._live().topics():
            if t["topicName"] == name:
                return TopicConfig.from_dict(t)
        raise TopicNotFoundError(f"topic {name!r} does not exist")

    def topic_status(self, name: str) -> TopicStatus:
        """The topic's configuration and, for each read queue, its min and max offsets, the
        store time of its newest message and the bytes of its consume queue (see
        ``mqlite.admin.QueueStatus``). Reads one message per queue; TopicNotFoundError for an
        unknown topic."""
        return _admin.topic_status(self, name)

    def topics(self) -> list[TopicConfig]:
        """All topics, sorted by name. A read-only store re-reads ``config/topics.json`` here
        and raises ConfigFileError if neither it nor its ``.bak`` decodes."""
        configs = [TopicConfig.from_dict(d) for d in self._live().topics()]
        return sorted(configs, key=lambda t: t.name)

    def queues(self, topic: str) -> list[MessageQueue]:
        """The topic's message queues."""
        return [MessageQueue(topic, i) for i in range(self._live().queue_count(topic))]

    def offsets(self, mq: MessageQueue) -> tuple[int, int]:
        """``(min, max)`` queue offsets; ``max`` is the offset the next message will get."""
        mq = _queue(mq)
        return self._live().offsets(mq.topic, mq.queue_id)

    def offset_for_timestamp(self, mq: MessageQueue, ts: datetime | int) -> int:
        """The first queue offset whose store time is at or after ``ts`` (datetime or epoch ms)."""
        mq = _queue(mq)
        if isinstance(ts, datetime):
            ms = int(ts.timestamp() * 1000)
        elif isinstance(ts, int) and not isinstance(ts, bool):
            ms = ts
        else:
            raise TypeError(f"ts must be a datetime or int milliseconds, not {type(ts).__name__}")
        return self._live().offset_for_timestamp(mq.topic, mq.queue_id, ms)

    def flush(self) -> None:
        """Write dirty pages to disk now (after the files being created in the background, such
        as a new topic's queue files, are complete)."""
        self._live().flush()

    def deliver_due(self) -> int:
        """Deliver now the delayed, timer and retry messages that the store's clock makes due,
        in a process that hosts delivery (the only writer, or the leader of several); returns
        how many it delivered (0 elsewhere). The store's own thread does this by itself; tests
        on a ``clock=ManualClock(...)`` call it after moving the clock, as that thread wakes
        on the system's time, not the manual clock's."""
        return self._live().deliver_due()

    def delete_expired_files(self) -> int:
        """Run a retention pass now (see ``run_retention``) and return how many commit-log
        files this pass deleted; every deletion since the last report is logged."""
        core = self._live()
        n = core.delete_expired_files()
        _admin.report_deletions(core)
        return n

    def run_retention(self) -> list[DeletedFile]:
        """Run a retention pass now and report every commit-log file retention deleted since
        the last report, this pass's and the background passes' (oldest first), each also
        logged at INFO on the ``mqlite.retention`` logger.

        A pass deletes, oldest first and never the file being written, the commit-log files
        last modified more than ``retention_hours`` ago, and, while the file system is used
        above ``disk_force_clean_ratio``, younger ones down to that ratio; then the
        consume-queue files that only point into them. It stops at the first file it may not
        delete: one holding records not yet indexed, or a pending timer or delayed message.
        The writer also runs a pass every 10 seconds; among several writer processes, only
        the one that runs the background duties deletes (elsewhere this reports nothing).
        Each deletion is logged and reported once: by the next call of this, or logged only
        when ``delete_expired_files``, ``info`` or ``close`` comes first. The record keeps the
        last 4,096 deletions between reports and counts the older ones."""
        core = self._live()
        core.delete_expired_files()
        return _admin.report_deletions(core)

    def stats(self) -> dict[str, Any]:
        """Counters and sizes, as plain data: commit-log range, flushed and dispatched offsets,
        what recovery found, and the sizes in use (``commit_log_file_size`` and
        ``consume_queue_file_units``, which the store records, and ``max_message_size``).

        ``commit_log_max_offset`` is one past the newest record; a read-only handle finds it
        by checking the records the writer has added since its last look (it cannot see the
        writer's position), and reports it as ``dispatched_offset`` too."""
        return self._live().stats()

    # -- pending timers ---------------------------------------------------------------------------

    def cancel_timer(
        self, msg_id: str | None = None, *, key: str | None = None, topic: str | None = None
    ) -> list[TimerChange]:
        """Cancel the pending timer message named by ``msg_id`` (a send's ``msg_id`` or
        ``offset_msg_id``) or every one whose message has ``key`` (of ``topic`` when given).
        A timer is a message sent with ``deliver_at`` or ``delay``, or with a ``delay_level``
        (retries included): both kinds are cancelled, moved and listed alike.

        Returns one TimerChange per timer matched, with its outcome: ``CANCELLED`` (it will
        never be delivered; the cancel is durable before this returns), ``ALREADY_DELIVERED``,
        ``ALREADY_CANCELLED``, or a single ``NOT_FOUND`` when nothing matched (an unknown id is
        an answer, not an error: the store cannot tell it from a timer retention removed). A
        cancel racing the delivery, in any process, ends one way: the answer is what happened.

        Cost: by ``offset_msg_id``, a read of the log written since the delivering process last
        recorded its progress; by ``msg_id`` or ``key``, also one record read per timer not yet
        known done (no index yet). A malformed ``msg_id``, both or neither of ``msg_id`` and
        ``key``, or ``topic`` without ``key`` raise IllegalArgumentError and write nothing. A
        store error part way through a cancel by key leaves the timers before it cancelled."""
        m, k, t = _timers.target(msg_id, key, topic)
        return _timers.changes(self._live()._change_timers(m, k, t))

    def reschedule_timer(
        self,
        msg_id: str | None = None,
        *,
        key: str | None = None,
        topic: str | None = None,
        deliver_at: datetime | int | None = None,
        delay: timedelta | float | None = None,
    ) -> list[TimerChange]:
        """Move pending timers (named as for ``cancel_timer``) to ``deliver_at`` (a datetime,
        naive ones local time, or epoch ms) or ``delay`` (a timedelta or seconds) from now.

        Each pending one keeps its id and is delivered at the new time, never before it (a
        past time is due at once; a delayed message leaves its level's order): outcome ``RESCHEDULED``, durable before this returns (one
        record, so a crash never leaves it cancelled without its new time). Otherwise the
        outcomes of ``cancel_timer``. Give exactly one of ``deliver_at`` and ``delay``; a
        negative delay or a time more than ``timer_max_delay_hours`` ahead raises
        IllegalArgumentError and writes nothing."""
        m, k, t = _timers.target(msg_id, key, topic)
        if (deliver_at is None) == (delay is None):
            raise IllegalArgumentError("give exactly one of deliver_at and delay")
        core = self._live()
        if delay is not None:
            return _timers.changes(core._change_timers(m, k, t, delay_ms=_timers.delay_ms(delay)))
        due = _timers.epoch_ms("deliver_at", deliver_at)
        return _timers.changes(core._change_timers(m, k, t, due_ms=due))

    def list_timers(
        self,
        *,
        topic: str | None = None,
        key: str | None = None,
        due_from: datetime | int | None = None,
        due_to: datetime | int | None = None,
        limit: int = 1000,
    ) -> list[PendingTimer]:
        """The pending timers (neither delivered nor cancelled) going to ``topic``, whose
        message has ``key``, due in ``[due_from, due_to)``; the earliest due first, at most
        ``limit``. Reads one record per pending timer (and the log since the delivering
        process's last recorded progress). ``pending_timers()`` is the cheap count."""
        for name, value in (("topic", topic), ("key", key)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a str, not {type(value).__name__}")
        lo = None if due_from is None else _timers.epoch_ms("due_from", due_from)
        hi = None if due_to is None else _timers.epoch_ms("due_to", due_to)
        n = _timers.limit_arg(limit)
        return _timers.timers(self._live()._list_timers(topic, key, lo, hi, n))

    def pending_timers(self) -> int:
        """How many timer and delayed (delay-level) messages are stored and neither delivered
        nor cancelled, as far as this process knows (a process that does not deliver sees what the delivering one last
        recorded). Cheap: no record is read. ``list_timers`` gives the exact list."""
        return self._live().pending_timers()

    # -- reading --------------------------------------------------------------------------------

    def read_result(
        self,
        mq: MessageQueue,
        offset: int,
        max_messages: int = 32,
        *,
        tags: str | Sequence[str] | None = None,
    ) -> _core.GetResult:
        """Read from ``offset``; the result carries the status and ``next_offset``."""
        mq = _queue(mq)
        return self._live().read(mq.topic, mq.queue_id, offset, max_messages, parse_tags(tags))

    def read(
        self,
        mq: MessageQueue,
        offset: int,
        max_messages: int = 32,
        *,
        tags: str | Sequence[str] | None = None,
    ) -> list[MessageExt]:
        """Up to ``max_messages`` messages from ``offset``, filtered by a tag expression."""
        return self.read_result(mq, offset, max_messages, tags=tags).messages

    def get(self, msg_id: str) -> MessageExt:
        """The message with this id: its unique id (``SendResult.msg_id``, ``MessageExt.msg_id``),
        looked up through the key index in every topic, or its offset id
        (``SendResult.offset_msg_id``), which names its commit-log offset. Copies keep their
        origin's unique id (retries, dead letters, a delayed message's waiting record): the copy
        in one of your topics comes first, then one in a retry or dead-letter topic, then one in
        another system topic. MessageNotFoundError
        when no message has it (a unique id of a message not indexed yet, or sent while the
        index was off, is not found)."""
        return self._live().get(msg_id)

    def find_by_key(
        self,
        topic: str,
        key: str,
        begin: datetime | int | None = None,
        end: datetime | int | None = None,
        limit: int = 32,
    ) -> KeyQueryResult:
        """The messages of ``topic`` whose ``keys`` hold ``key`` (or whose unique id is ``key``),
        stored between ``begin`` and ``end`` (datetimes or epoch milliseconds, both inclusive;
        ``None``: unbounded), **newest first** as RocketMQ answers, at most ``limit`` (1 to
        10,000).

        Every hit of the index is checked on the message itself, so messages whose keys merely
        share a hash never appear and never count toward ``limit``. The result is a list with
        ``truncated`` (more messages matched than ``limit``), ``index_lag`` (bytes of the log
        the index had not reached: messages there may match too) and ``index_error`` (the
        failure the index is retrying, if any); ``complete`` is true when none of these cut the
        answer short.

        Raises TopicNotFoundError for an unknown topic, IllegalArgumentError for an empty key,
        one holding a space or a control character, ``begin`` after ``end`` or a bad limit, and
        IndexUnavailableError when the store was opened with ``index_enabled=False``."""
        lo = -(2**63) if begin is None else _timestamp_ms(begin, "begin")
        hi = 2**63 - 1 if end is None else _timestamp_ms(end, "end")
        messages, truncated, status = self._live().find_by_key(
            topic, key, lo, hi, limit
        )
        return KeyQueryResult(messages, truncated, status)

    def index_status(self) -> dict[str, Any]:
        """The key index: ``enabled``, ``files``, ``progress`` (every message below this
        commit-log offset is indexed), ``log_end``, ``lag`` (``log_end - progress``) and
        ``last_error`` (the failure its background thread is retrying, or None)."""
        return dict(self._live().index_status())

    def get_by_offset(self, commit_log_offset: int) -> MessageExt:
        """The message stored at this commit-log offset."""
        return self._live().get_by_offset(commit_log_offset)

    def wait_for(
        self,
        positions: Mapping[MessageQueue, int] | Iterable[tuple[MessageQueue, int]],
        timeout: float | None = None,
    ) -> bool:
        """Block until a message exists at or beyond the given offset of any queue.

        Returns True when one does, False on timeout (``None`` waits forever). Closing the
        store ends the wait too, with True: check ``closed`` before reading. On the main thread
        Ctrl-C ends it with KeyboardInterrupt (within 0.1 s).
        """
        items = positions.items() if isinstance(positions, Mapping) else positions
        queues = [(_queue(mq).topic, mq.queue_id, offset) for mq, offset in items]
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))):
            raise TypeError(f"timeout must be a number or None, not {type(timeout).__name__}")
        if timeout is not None and not 0 <= timeout < float("inf"):  # also NaN
            raise IllegalArgumentError(f"timeout must be a finite number >= 0 or None, got {timeout!r}")
        return self._live().wait_for(queues, timeout)

    # -- consumers ------------------------------------------------------------------------------

    def pull_consumer(self, group: str, **options: Any) -> PullConsumer:
        """A ``PullConsumer`` in ``group``; see ``PullConsumer`` for the options."""
        return PullConsumer(self, group, **options)

    def push_consumer(self, group: str, **options: Any) -> PushConsumer:
        """A ``PushConsumer`` in ``group``; see ``PushConsumer`` for the options."""
        return PushConsumer(self, group, **options)

    def subscription_group(self, group: str) -> SubscriptionGroupConfig:
        """The group's settings in ``config/subscriptionGroup.json`` (RocketMQ's shape;
        RocketMQ's defaults when it has no entry): see ``mqlite.subgroup``."""
        self._live()
        return SubscriptionGroups(self._client_context.client_root()).get(group)

    def update_subscription_group(
        self,
        group: str,
        *,
        consume_enable: bool | None = None,
        consume_broadcast_enable: bool | None = None,
        retry_max_times: int | None = None,
        retry_queue_nums: int | None = None,
    ) -> SubscriptionGroupConfig:
        """Changes the given settings of ``group`` in ``config/subscriptionGroup.json`` and
        returns them all. ``retry_max_times`` is the ``max_reconsume_times`` of the group's
        consumers that pass none; ``consume_enable=False`` takes every queue from the group's
        CLUSTERING consumers at their next rebalance (``consume_broadcast_enable``: its
        BROADCASTING ones) until it is enabled again; ``retry_queue_nums`` can only be 1.
        InvalidConfigError for a bad value, nothing written."""
        self._live()
        ctx = self._client_context
        return SubscriptionGroups(ctx.client_root(), durable=ctx.durable).update(
            group, consume_enable=consume_enable, consume_broadcast_enable=consume_broadcast_enable,
            retry_max_times=retry_max_times, retry_queue_nums=retry_queue_nums,
        )

    def dead_letters(self, group: str) -> DeadLetterQueue:
        """The dead-letter topic ``%DLQ%<group>`` of a consumer group: list and inspect its
        messages (with their last error), re-drive them to their origin topics, purge, export
        (see ``mqlite.dlq``)."""
        self._live()
        return DeadLetterQueue(self, group)

    def retries(self, group: str) -> RetryView:
        """The retries of a consumer group in ``%RETRY%<group>`` that it has not consumed yet
        (see ``mqlite.dlq``)."""
        self._live()
        return retries(self, group)

    def consumer_groups(self) -> list[str]:
        """The clustering groups with committed offsets in this store, sorted (RocketMQ's
        ``consumerOffset.json`` keys are ``topic@group``; a broadcasting consumer keeps its
        offsets to itself and is not listed)."""
        self._live()
        table = group_offsets(self._client_context.client_root()).load()
        return sorted({key.rpartition("@")[2] for key in table if "@" in key})

    def consumer_progress(self, group: str) -> list[QueueProgress]:
        """The clustering group's progress per queue it committed an offset for: committed
        offset, min and max offsets, lag, the store time of the last message it consumed and
        the client id of the live member that owns the queue now (``None``: none). Reads one
        message per queue."""
        check_group(group)
        self._live()
        return _admin.progress(self, self._client_context.client_root(), group)

    def group_summary(self, group: str) -> GroupSummary:
        """``consumer_progress`` with the group's live members and the depth of its retry and
        dead-letter topics (``None`` where the topic does not exist). Reading the depths reads
        those topics' records. On a read-only store ``retry_waiting`` is ``None`` (only
        writers list pending timers); the rest is the same."""
        check_group(group)
        self._live()
        return _admin.summary(self, self._client_context.client_root(), group)

    def delete_group(self, group: str, *, force: bool = False) -> list[str]:
        """Delete the consumer group: its committed offsets of every topic, its settings in
        ``config/subscriptionGroup.json`` and its member and queue lock files; returns the
        ``topic@group`` offset keys removed. Its retry and dead-letter topics are left (they
        hold messages; ``dead_letters(group).purge()`` hides them).

        A group with live members raises ConsumerGroupActiveError, unless ``force``: the
        offsets and settings then go, the lock files stay (the members hold them), and the
        members' next commits record offsets again. A group with no offsets, members or
        settings is a ConsumerGroupNotFoundError; a bad name an InvalidGroupError. Neither
        writes anything."""
        check_group(group)
        self._live()
        ctx = self._client_context
        gone = _admin.delete_group(ctx.client_root(), group, force=force, durable=ctx.durable)
        log.info("deleted consumer group %r and the committed offsets %s", group, gone)
        return gone

    def info(self) -> StoreInfo:
        """The store at a glance (``mqlite.admin.StoreInfo``): files and their disk use by
        kind, the commit-log range, the oldest and newest message store times, topic and group
        counts, pending timers and the usage of the file system holding the store. Reads one
        message per queue and walks the store's directories."""
        _admin.report_deletions(self._live())
        return _admin.info(self)

    def reset_offset(
        self,
        group: str,
        topic: str,
        *,
        to: Literal["earliest", "latest"] | datetime | int | None = None,
        offset: int | None = None,
        queue_id: int | None = None,
        force: bool = False,
        create: bool = False,
    ) -> dict[MessageQueue, int]:
        """Set the clustering group's offsets of every queue of ``topic`` (with ``queue_id``:
        of that queue only, the others keep theirs); returns them.

        Give one of ``to``: ``"earliest"``, ``"latest"`` or a time (a ``datetime``: the first
        message stored at or after it), or ``offset``: a queue offset, clamped to each queue's
        range. (``to=<int>`` still means a queue offset, with a DeprecationWarning: an int is
        never a time here, while an int ``consume_from`` used to be epoch milliseconds.)

        A group that has no committed offsets and that no consumer ever subscribed with is
        probably misspelled: it is a ConsumerGroupNotFoundError, unless ``create`` (then the
        group starts at these offsets). Live consumers of the group would overwrite the reset
        with their own positions, so this raises ConsumerGroupActiveError while any is
        subscribed, unless ``force``. Bad names raise InvalidGroupError / InvalidTopicError,
        a ``queue_id`` the topic does not have InvalidQueueError, before any file is touched.
        """
        check_group(group)
        check_topic(topic)
        core = self._live()
        if isinstance(to, int) and not isinstance(to, bool) and offset is None:
            deprecated("reset_offset(to=<int>) is deprecated: pass the queue offset as offset=<int>")
            to, offset = None, to
        if (to is None) == (offset is None):
            raise IllegalArgumentError("give one of to= ('earliest', 'latest' or a datetime) and offset=")
        queues = self.queues(topic)
        if queue_id is not None:
            queue_id = int_arg("queue_id", queue_id)
            if not 0 <= queue_id < len(queues):
                raise InvalidQueueError(
                    f"topic {topic!r} has queues 0 to {len(queues) - 1}, not {queue_id}"
                )
            queues = [MessageQueue(topic, queue_id)]
        if offset is not None:
            offset = int_arg("offset", offset)
        elif not (to in ("earliest", "latest") or isinstance(to, datetime)):
            raise IllegalArgumentError(
                f"to must be 'earliest', 'latest' or a datetime (offset= takes an int), got {to!r}"
            )
        root = self._client_context.client_root()
        offsets = group_offsets(root, durable=self._client_context.durable)
        if not create and not _group_known(root, group, offsets.load()):
            raise ConsumerGroupNotFoundError(
                f"consumer group {group!r} has no committed offsets and no consumer ever "
                f"subscribed with it (known groups: {self.consumer_groups()}); "
                "pass create=True to start it at these offsets"
            )
        alive = live_members(root, group, topic)
        if alive and not force:
            raise ConsumerGroupActiveError(
                f"group {group!r} has {len(alive)} live consumer(s) of {topic!r}: "
                f"{', '.join(alive)}; stop them or pass force=True"
            )
        result: dict[MessageQueue, int] = {}
        for mq in queues:
            low, high = core.offsets(topic, mq.queue_id)
            if offset is not None:
                result[mq] = min(max(offset, low), high)
            elif isinstance(to, datetime):
                result[mq] = self.offset_for_timestamp(mq, to)
            else:
                result[mq] = low if to == "earliest" else high
        offsets.update(offset_key(topic, group), {mq.queue_id: o for mq, o in result.items()},
                       replace=queue_id is None)
        return result


def _group_known(root: Path, group: str, table: Mapping[str, Any]) -> bool:
    """Whether ``group`` has committed offsets (of any topic) or a consumer of it ever joined
    (its directory of member and queue locks exists)."""
    suffix = "@" + group
    return any(key.endswith(suffix) for key in table) or (root / "consumer_groups" / group).is_dir()


def open(path: str | os.PathLike[str], **config: Any) -> Store:  # noqa: A001 - mirrors sqlite3.connect
    """Open (or create) the store at ``path``; see ``Store`` for the options."""
    return Store(path, **config)
