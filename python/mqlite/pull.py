"""``PullConsumer``: subscribe or assign, ``poll``, ``commit``, ``seek`` (RocketMQ's lite pull
consumer with Kafka's verbs).

Offsets are the **next** offset to consume. ``poll`` returns messages and moves the position past
them; with ``auto_commit`` the positions reached by earlier polls are committed every
``auto_commit_interval`` seconds (checked in ``poll``, written on the consumer's offset writer
thread so that ``poll`` does not wait for the file's fsyncs), and at once when a queue is revoked
and on ``close``. So a message counts as consumed once the next ``poll`` is called
(at-least-once: a crash re-delivers what was polled since the last commit written). Group rebalancing also runs inside ``poll`` (every
``rebalance_interval`` seconds, also while ``poll`` waits) and in ``subscribe``.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from mqlite import _core, pollwatch
from mqlite._args import deprecated
from mqlite._context import HasClientContext, context_of
from mqlite._files import open_lock, try_flock
from mqlite.allocate import AllocateMessageQueueAveragely, AllocateMessageQueueStrategy
from mqlite.errors import (
    ClientClosedError,
    ClientIdInUseError,
    IllegalArgumentError,
    IllegalStateError,
    InvalidConfigError,
    OffsetOutOfRangeError,
    QueueNotAssignedError,
    TopicNotFoundError,
)
from mqlite.group import GroupMember, check_client_id, check_group, new_client_id
from mqlite.message import MessageExt, MessageQueue
from mqlite.offsets import OffsetFile, OffsetWriter, broadcast_offsets, group_offsets, offset_key
from mqlite.retry import (
    RETRY_PREFIX,
    SentBack,
    check_max_reconsume_times,
    retry_topic,
)
from mqlite.retry import send_back as _send_back
from mqlite.selector import MessageSelector
from mqlite.status import ConsumeFromWhere, MessageModel
from mqlite.subgroup import SubscriptionGroups
from mqlite.topic import check_topic

__all__ = ["PullConsumer", "RebalanceCallback"]

log = logging.getLogger("mqlite.consumer")

RebalanceCallback = Callable[["PullConsumer", list[MessageQueue]], None]


class QueueOwner(Protocol):
    """What a component that drives a PullConsumer and keeps state of its own per owned queue
    (the push consumer) implements; see ``drive``.

    Both methods run with the consumer's lock held, on the thread that rebalances (inside
    ``poll``, ``subscribe``, ``unsubscribe`` or ``close``), before the ``on_assign`` /
    ``on_revoke`` callbacks of the subscription.
    """

    def queues_assigned(self, cursors: Mapping[MessageQueue, _core.QueueCursor]) -> None:
        """Queues gained, each with the cursor ``poll`` reads it through: the same object until
        the queue is revoked."""

    def queues_revoked(self, mqs: list[MessageQueue]) -> Mapping[MessageQueue, int]:
        """Queues about to be given up; returns the offsets to commit for them, which the
        consumer writes before another member can own them."""


class Membership:
    """A driver's handle on the PullConsumer it drives (see ``drive``): the consumer, used
    through its public API, and the one commit that API has no form for."""

    __slots__ = ("consumer",)

    def __init__(self, consumer: PullConsumer) -> None:
        self.consumer = consumer

    def submit(self, offsets: Mapping[MessageQueue, int]) -> None:
        """Commits the owner's offsets on the consumer's offset writer thread (the caller does
        not wait), as ``commit_async`` does but without its ownership check: the owner's
        offsets come from reads of its queues, and a revoke writes what is pending first."""
        self.consumer._submit(offsets)

    def poll_within(
        self, timeout: float, max_messages: int, max_bytes: int, oversized_first: bool
    ) -> tuple[list[MessageExt], bool]:
        """``poll`` bounded by ``max_bytes`` (whole stored records). With ``oversized_first`` a
        first message larger than that is returned alone; without it no message over the bound
        is. Returns the messages and whether a message was left because it did not fit (the
        poll then returns at once)."""
        full: list[_core.QueueCursor] = []
        msgs = self.consumer._poll(timeout, max_messages, max_bytes, oversized_first, full.append)
        return msgs, bool(full)


def drive(store: HasClientContext, group: str, owner: QueueOwner, **options: Any) -> Membership:
    """A PullConsumer whose queue assignments ``owner`` follows (options as ``PullConsumer``)."""
    consumer = PullConsumer(store, group, **options)
    consumer._owner = owner
    return Membership(consumer)

#: Kafka's max.poll.interval.ms default, in seconds.
DEFAULT_MAX_POLL_INTERVAL = 300.0
_WAIT_SLICE = 0.1  # poll re-checks close, rebalance and assignment changes at least this often
_MAX_POLL = 65_536
# Default byte bound of one poll (whole stored records): four messages of the largest default
# size (4 MiB), and far above 32 messages of the usual few KiB, so it binds only for big
# messages. An embedded consumer shares its process with the application: Kafka's 50 MiB
# (fetch.max.bytes) and RocketMQ's 100 MiB per queue are a broker client's budgets.
DEFAULT_MAX_POLL_BYTES = 16 << 20


def _cursor(mq: MessageQueue, position: int, sub: _Subscription | None) -> _core.QueueCursor:
    """The native per-queue state ``poll`` reads and advances (see ``_core.QueueCursor``)."""
    tags = sub.selector.tags if sub is not None else None
    sql = sub.selector if sub is not None and sub.selector.type == "SQL92" else None
    return _core.QueueCursor(mq, mq.topic, mq.queue_id, position, tags, sql)


class _Subscription:
    __slots__ = ("topic", "selector", "on_assign", "on_revoke")

    def __init__(
        self,
        topic: str,
        selector: MessageSelector,
        on_assign: RebalanceCallback | None,
        on_revoke: RebalanceCallback | None,
    ) -> None:
        self.topic = topic
        self.selector = selector
        self.on_assign = on_assign
        self.on_revoke = on_revoke


def _selector(expression: str | MessageSelector) -> MessageSelector:
    if isinstance(expression, MessageSelector):
        return expression
    if isinstance(expression, str):
        return MessageSelector.by_tag(expression)
    raise TypeError(f"expression must be a str or MessageSelector, not {type(expression).__name__}")


def check_positive(name: str, value: object, *, integer: bool = False) -> None:
    """InvalidConfigError unless ``value`` is a number (an int with ``integer``) above 0; a bool
    is not a number here."""
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        kind = "an int" if integer else "a number"
        raise InvalidConfigError(f"{name} must be {kind} > 0, got {value!r}")


def _timestamp_ms(ts: datetime | int) -> int:
    if isinstance(ts, datetime):
        return int(ts.timestamp() * 1000)
    if isinstance(ts, int) and not isinstance(ts, bool):
        return ts
    raise TypeError(f"timestamp must be a datetime or int milliseconds, not {type(ts).__name__}")


class HeldBatch:
    """A polled batch not yet (wholly) handed out: ``next`` indexes the first message not yet
    handed out; ``returned`` once the rest was given back (it is then not handed out)."""

    __slots__ = ("batch", "next", "returned")

    def __init__(self, batch: list[MessageExt]) -> None:
        self.batch = batch
        self.next = 0
        self.returned = False


class PullConsumer:
    """Polls messages for a consumer group; see the module docstring for the offset semantics.

    ``subscribe`` joins the group: in CLUSTERING mode the topic's queues are shared among the
    group's live consumers (threads or processes on this machine), each queue owned by exactly one
    of them; in BROADCASTING mode every consumer reads every queue and keeps its own offsets.
    ``assign`` instead takes explicit queues with no group coordination.

    A queue without a committed offset starts at ``consume_from``: the first or the last
    offset, or the first message stored at or after a time (a ``datetime``, or
    ``CONSUME_FROM_TIMESTAMP`` with ``consume_timestamp``, a ``datetime`` or epoch milliseconds;
    half an hour ago when None). An int ``consume_from`` (epoch milliseconds) still works but is
    deprecated: everywhere else an int is a queue offset.
    """

    def __init__(
        self,
        store: HasClientContext,
        group: str,
        *,
        message_model: MessageModel = MessageModel.CLUSTERING,
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
        consume_from: ConsumeFromWhere | datetime | int = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: datetime | int | None = None,
        max_poll_messages: int = 32,
        max_poll_bytes: int = DEFAULT_MAX_POLL_BYTES,
        client_id: str | None = None,
        allocate_strategy: AllocateMessageQueueStrategy | None = None,
        rebalance_interval: float = 0.5,
        max_reconsume_times: int | None = None,
        max_poll_interval: float | None = DEFAULT_MAX_POLL_INTERVAL,
    ) -> None:
        self._group = check_group(group)
        if max_poll_interval is not None:
            check_positive("max_poll_interval", max_poll_interval)
        self._max_reconsume = (
            None if max_reconsume_times is None else check_max_reconsume_times(max_reconsume_times)
        )
        if not isinstance(message_model, MessageModel):
            raise InvalidConfigError(f"message_model must be a MessageModel, got {message_model!r}")
        if not isinstance(auto_commit, bool):
            raise InvalidConfigError(f"auto_commit must be a bool, got {auto_commit!r}")
        check_positive("auto_commit_interval", auto_commit_interval)
        check_positive("rebalance_interval", rebalance_interval)
        check_positive("max_poll_messages", max_poll_messages, integer=True)
        if max_poll_messages > _MAX_POLL:
            raise InvalidConfigError(f"max_poll_messages must be <= {_MAX_POLL}")
        check_positive("max_poll_bytes", max_poll_bytes, integer=True)
        if not isinstance(consume_from, (ConsumeFromWhere, datetime)) and (
            isinstance(consume_from, bool) or not isinstance(consume_from, int)
        ):
            raise InvalidConfigError(
                f"consume_from must be a ConsumeFromWhere, datetime or int ms, got {consume_from!r}"
            )
        if isinstance(consume_from, int):
            # An int that is a time here and a queue offset elsewhere (reset_offset, seek).
            deprecated(
                "consume_from=<int> (epoch milliseconds) is deprecated: pass a datetime, or "
                "consume_from=ConsumeFromWhere.CONSUME_FROM_TIMESTAMP with consume_timestamp="
            )
        if consume_timestamp is not None and not isinstance(consume_timestamp, datetime) and (
            isinstance(consume_timestamp, bool) or not isinstance(consume_timestamp, int)
        ):
            raise InvalidConfigError(
                f"consume_timestamp must be a datetime, int ms or None, got {consume_timestamp!r}"
            )
        strategy = allocate_strategy or AllocateMessageQueueAveragely()
        if not callable(getattr(strategy, "allocate", None)):
            raise InvalidConfigError("allocate_strategy must have an allocate() method")
        ctx = context_of(store)
        self._ctx = ctx
        self._core = ctx.live()
        self._model = message_model
        self._auto_commit = auto_commit
        self._commit_interval = float(auto_commit_interval)
        self._consume_from = consume_from
        self._consume_timestamp = consume_timestamp
        self._max_poll = max_poll_messages
        self._max_poll_bytes = max_poll_bytes
        self._client_id = check_client_id(client_id) if client_id is not None else new_client_id()
        self._strategy = strategy
        self._rebalance_interval = float(rebalance_interval)
        root = ctx.client_root()
        durable = ctx.durable
        self._root: Path = root
        self._group_config = SubscriptionGroups(root, durable=durable)
        self._offsets: OffsetFile = (
            group_offsets(root, durable=durable)
            if message_model is MessageModel.CLUSTERING
            else broadcast_offsets(root, self._group, self._client_id, durable=durable)
        )
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._subs: dict[str, _Subscription] = {}
        self._queues: dict[MessageQueue, _core.QueueCursor] = {}
        # The assigned queues of each topic (the keys of ``_queues``, grouped): a topic's
        # rebalance looks at its own queues only.
        self._by_topic: dict[str, set[MessageQueue]] = {}
        # Per subscribed topic, the allocation inputs (queue count, live members) whose result
        # this member holds whole: a rebalance that finds the same inputs has nothing to do
        # (allocation strategies are deterministic).
        self._settled: dict[str, tuple[int, tuple[str, ...], bool]] = {}
        self._paused: set[MessageQueue] = set()
        self._active: list[_core.QueueCursor] = []
        self._order: list[tuple[MessageQueue, _core.QueueCursor]] = []  # ``_queues``, sorted
        # Each active queue's index in ``_active``: where the next poll's rotation starts.
        self._slot: dict[MessageQueue, int] = {}
        self._rr = 0
        self._manual: bool | None = None
        self._member: GroupMember | None = None
        self._bcast_lock: int | None = None
        self._next_rebalance = 0.0
        self._next_commit = time.monotonic() + self._commit_interval
        self._closed = False
        self._pid = os.getpid()
        self._owner: QueueOwner | None = None  # see ``drive``
        self._handout: HeldBatch | None = None
        self._writer = OffsetWriter(_weak_write(self), "mqlite-offsets")
        # max_poll_interval (see ``_give_up``): polls running now, when the last one ended,
        # what it returned, and whether the queues were given up since.
        self._max_poll_interval = None if max_poll_interval is None else float(max_poll_interval)
        self._polling = 0
        self._last_poll = time.monotonic()
        self._last_batch: list[MessageExt] = []
        self._given_up = False

    # -- properties -----------------------------------------------------------------------------

    @property
    def group(self) -> str:
        """The consumer group."""
        return self._group

    @property
    def client_id(self) -> str:
        """This consumer's id in the group (file names under ``consumer_groups/``)."""
        return self._client_id

    @property
    def message_model(self) -> MessageModel:
        """CLUSTERING or BROADCASTING."""
        return self._model

    @property
    def closed(self) -> bool:
        """True after ``close()``."""
        return self._closed

    def subscription(self) -> dict[str, MessageSelector]:
        """Subscribed topics and their filters."""
        with self._lock:
            return {t: s.selector for t, s in self._subs.items()}

    # -- subscribe / assign ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError(f"consumer {self._client_id!r} of group {self._group!r} is closed")
        if not self._ctx.ok:
            raise self._ctx.dead()

    def subscribe(
        self,
        topic: str,
        expression: str | MessageSelector = "*",
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
    ) -> None:
        """Subscribe to ``topic`` with a tag expression (``"TagA || TagB"``) or a selector.

        Subscribing again replaces the topic's filter. ``on_assign``/``on_revoke`` are called with
        the queues gained or lost at each rebalance (``on_revoke`` before their offsets are
        released, so it may still ``commit`` them). A name a send would refuse raises
        InvalidTopicError before any file is touched.
        """
        check_topic(topic)
        selector = _selector(expression)
        with self._lock:
            self._check_open()
            if self._manual:
                raise IllegalStateError("subscribe() after assign(): use one or the other")
            self._manual = False
            self._last_poll = time.monotonic()
            if self._given_up:
                self._rejoin()
            old = self._subs.get(topic)
            if old is not None and old.selector != selector:
                self._revoke(sorted(self._by_topic.get(topic, ())))
            self._subs[topic] = _Subscription(topic, selector, on_assign, on_revoke)
            topics = [topic]
            if self._model is MessageModel.CLUSTERING:
                if self._member is None:
                    self._member = GroupMember(self._root, self._group, self._client_id)
                self._member.join(topic)
                if self._max_poll_interval is not None:
                    pollwatch.watch(self)
                retry = retry_topic(self._group)
                if retry not in self._subs:
                    # The group's sent-back messages come back through its retry topic, read
                    # by every member that subscribes (RocketMQ's push consumer does the same).
                    self._subs[retry] = _Subscription(retry, MessageSelector.by_tag("*"), None, None)
                    self._member.join(retry)
                    topics.append(retry)
            elif self._bcast_lock is None:
                self._lock_broadcast_id()
            # Only these topics' queues change; the others keep the periodic rebalance's pace.
            self._rebalance(topics)

    def _lock_broadcast_id(self) -> None:
        fd = open_lock(self._offsets.path.with_name(f".{self._client_id}.member.lock"))
        if not try_flock(fd):
            os.close(fd)
            raise ClientIdInUseError(
                f"client id {self._client_id!r} is already used by a live broadcasting consumer "
                f"of group {self._group!r}"
            )
        self._bcast_lock = fd

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic``: commit (with auto_commit) and give its queues up."""
        check_topic(topic)
        with self._lock:
            self._check_open()
            if topic not in self._subs:
                return
            gone = [topic]
            retry = retry_topic(self._group)
            if topic != retry and all(t == retry for t in self._subs if t != topic):
                gone.append(retry)  # the automatic retry subscription goes with the last topic
            for t in gone:
                if t not in self._subs:
                    continue
                self._revoke(sorted(self._by_topic.get(t, ())))
                del self._subs[t]
                self._settled.pop(t, None)
                if self._member is not None:
                    self._member.leave(t)

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consume exactly these queues, with no group coordination (replaces any assignment)."""
        wanted = list(dict.fromkeys(queues))
        for mq in wanted:
            if not isinstance(mq, MessageQueue):
                raise TypeError(f"expected MessageQueue items, not {type(mq).__name__}")
            check_topic(mq.topic)
        with self._lock:
            self._check_open()
            if self._manual is False:
                raise IllegalStateError("assign() after subscribe(): use one or the other")
            self._manual = True
            keep = set(wanted)
            self._revoke([mq for mq in self._queues if mq not in keep])
            self._add([mq for mq in wanted if mq not in self._queues], commit_initial=False)

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer currently reads, sorted."""
        with self._lock:
            return sorted(self._queues)

    # -- rebalance ------------------------------------------------------------------------------

    def _queue_count(self, topic: str) -> int:
        try:
            return self._core.consumer_queue_count(topic)
        except TopicNotFoundError:
            return 0

    def _rebalance(self, topics: Iterable[str] | None = None) -> None:
        """Recompute this member's queues of ``topics`` (every subscribed topic when None; lock
        held).

        Per topic, the queue count and the live members are looked up; only when they differ
        from the inputs of an allocation this member holds whole (``_settled``) are the queues
        allocated and compared with the owned ones, so a steady group's rebalance costs a few
        file-system calls per topic, not work per queue. The queues gained are added in one
        step (one offsets read).
        """
        if topics is None:
            self._next_rebalance = time.monotonic() + self._rebalance_interval
            topics = list(self._subs)
        if self._manual is not False:
            return
        if self._member is None:
            self._rebalance_topics(topics)
            return
        # The queues held are recorded once for the whole rebalance (GroupMember.batch).
        with self._member.batch():
            self._rebalance_topics(topics)

    def _rebalance_topics(self, topics: Iterable[str]) -> None:
        """``_rebalance``'s work on ``topics`` (lock held)."""
        lost: list[MessageQueue] = []
        gained: list[MessageQueue] = []
        allocated: dict[str, tuple[tuple[int, tuple[str, ...], bool], set[MessageQueue]]] = {}
        # subscriptionGroup.json (mqlite.subgroup): a group whose consumption is disabled
        # owns nothing, re-checked at every rebalance (a stat while the file is unchanged).
        settings = self._group_config.get(self._group)
        enabled = (settings.consume_enable if self._model is MessageModel.CLUSTERING
                   else settings.consume_broadcast_enable)
        for topic in topics:
            count = self._queue_count(topic)
            cids: tuple[str, ...] = ()
            if self._member is not None:
                self._member.check(topic)
                cids = tuple(self._member.live_members(topic))
            inputs = (count, cids, enabled)
            if self._settled.get(topic) == inputs:
                continue
            self._settled.pop(topic, None)
            mqs = [MessageQueue(topic, i) for i in range(count)]
            if not enabled or not mqs:
                mine = set()  # nothing to allocate (a retry topic with no send-back yet)
            elif self._member is not None:
                mine = set(self._strategy.allocate(self._group, self._client_id, mqs, list(cids)))
            else:
                mine = set(mqs)
            owned = self._by_topic.get(topic, set())
            lost += sorted(owned - mine)
            gained += sorted(mine - owned)
            allocated[topic] = (inputs, mine)
        self._revoke(lost)
        if self._member is not None:
            gained = [mq for mq in gained if self._member.try_acquire(mq)]
        try:
            self._add(gained, commit_initial=True)
        except BaseException:
            # Not added (a store error): the queues go back to the group, not held idle.
            if self._member is not None:
                for mq in gained:
                    self._member.release(mq)
            raise
        for topic, (inputs, mine) in allocated.items():
            if self._by_topic.get(topic, set()) == mine:
                # Every allocated queue is held (none still locked by its previous owner).
                self._settled[topic] = inputs

    def _initial_offset(self, mq: MessageQueue) -> int:
        low, high = self._core.offsets(mq.topic, mq.queue_id)
        if mq.topic.startswith(RETRY_PREFIX):
            return low  # RocketMQ: a retry topic is read from its start, whatever consume_from says
        cf = self._consume_from
        if cf is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
            return low
        if cf is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET:
            return high
        if cf is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            ts = self._consume_timestamp
            if ts is None:
                ts = datetime.now() - timedelta(minutes=30)
            return self._core.offset_for_timestamp(mq.topic, mq.queue_id, _timestamp_ms(ts))
        # A datetime or epoch milliseconds (the constructor accepts nothing else).
        return self._core.offset_for_timestamp(mq.topic, mq.queue_id, _timestamp_ms(cf))

    def _add(self, mqs: list[MessageQueue], *, commit_initial: bool) -> None:
        if not mqs:
            return
        table = self._offsets.load(self._group)
        fresh: dict[MessageQueue, int] = {}
        added: dict[MessageQueue, _core.QueueCursor] = {}
        # Every position is computed before any queue is added: all or nothing.
        for mq in mqs:
            stored = table.get(offset_key(mq.topic, self._group), {}).get(mq.queue_id)
            if stored is None:
                position = self._initial_offset(mq)
                fresh[mq] = position
            else:
                position = min(stored, self._core.offsets(mq.topic, mq.queue_id)[1])
            q = _cursor(mq, position, self._subs.get(mq.topic))
            q.committed = stored
            added[mq] = q
        self._queues.update(added)
        for mq in added:
            self._by_topic.setdefault(mq.topic, set()).add(mq)
        if commit_initial and fresh:
            # Pin the starting point so a later owner continues from here, not from "last".
            self._write(fresh)
        self._refresh_active(reassigned=True)
        self._callbacks(mqs, assign=True)

    def _revoke(self, mqs: list[MessageQueue]) -> None:
        mqs = [mq for mq in mqs if mq in self._queues]
        if not mqs:
            return
        h = self._handout
        gone = set(mqs)
        if h is not None and any(m.message_queue in gone for m in h.batch[h.next :]):
            # Not handed out and no longer ours: rewound before the commit below, never yielded.
            self._give_back()
        # Commits of these queues still pending are written now: none may land once another
        # member owns them.
        self._writer.flush(mqs)
        if self._auto_commit:
            changed = {mq: self._queues[mq].position for mq in mqs}
            self._write({mq: p for mq, p in changed.items() if p != self._queues[mq].committed})
        self._callbacks(mqs, assign=False)
        # The queues held are recorded once for all these (GroupMember.batch).
        with self._member.batch() if self._member is not None else contextlib.nullcontext():
            for mq in mqs:
                del self._queues[mq]
                self._paused.discard(mq)
                held = self._by_topic.get(mq.topic)
                if held is not None:
                    held.discard(mq)
                    if not held:
                        del self._by_topic[mq.topic]
                    # A topic's allocation is held whole no more: the next rebalance looks again.
                    self._settled.pop(mq.topic, None)
                if self._member is not None:
                    self._member.release(mq)
        self._refresh_active(reassigned=True)

    def _callbacks(self, mqs: list[MessageQueue], *, assign: bool) -> None:
        by_topic: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_topic.setdefault(mq.topic, []).append(mq)
        owner = self._owner
        if owner is not None:
            if assign:
                owner.queues_assigned({mq: self._queues[mq] for mq in sorted(mqs)})
            else:
                offsets = owner.queues_revoked(sorted(mqs))
                if offsets:
                    self._write(offsets)  # offsets come from reads: never ahead of the data
        for topic, group in by_topic.items():
            sub = self._subs.get(topic)
            fn2 = None if sub is None else (sub.on_assign if assign else sub.on_revoke)
            if fn2 is None:
                continue
            try:
                fn2(self, group)
            except Exception:
                log.exception("%s callback of consumer %s failed", "on_assign" if assign else "on_revoke", self._client_id)

    def _refresh_active(self, *, reassigned: bool = False) -> None:
        """Rebuilds the cursors a poll reads: the assigned queues in order, the paused ones
        left out (lock held). ``reassigned``: queues were added or revoked, so the order itself
        is rebuilt (a pause or resume only filters it). The rotation keeps its place: it starts
        at the queue it was to start at, or the next one in order if that one is gone."""
        if reassigned:
            self._order = sorted(self._queues.items())
        # ``live`` is what a poll in flight checks before it advances a cursor: a revoked or
        # paused queue keeps its position.
        old = self._active
        start = old[self._rr % len(old)].mq if old else None
        for q in old:
            q.live = False
        paused = self._paused
        mqs = [mq for mq, _ in self._order if mq not in paused]
        self._active = [q for mq, q in self._order if mq not in paused]
        self._slot = {mq: i for i, mq in enumerate(mqs)}
        for q in self._active:
            q.live = True
        self._rr = bisect.bisect_left(mqs, start) if start is not None else 0
        self._wake.set()

    # -- polling --------------------------------------------------------------------------------

    def _rotation(self) -> tuple[list[_core.QueueCursor], int]:
        """The active queues and the index to start reading them at: after the queue the latest
        poll took its last message from (see ``_poll``). The list is handed out as is (it is
        replaced, never mutated), not rotated: a poll over thousands of queues copies nothing."""
        active = self._active
        k = len(active)
        return active, (self._rr % k if k > 1 else 0)

    def poll(self, timeout: float | None = 1.0, max_messages: int | None = None) -> list[MessageExt]:
        """Up to ``max_messages`` messages from the assigned, unpaused queues (round robin),
        taking at most ``max_poll_bytes`` bytes (whole stored records) together; a single
        message larger than that is returned alone. Each poll starts after the queue the
        previous one took its last message from, so every queue with data is served within
        one round of the queues.

        Blocks until a message arrives or ``timeout`` seconds pass (``None``: no limit), waking as
        soon as one is stored. Returns ``[]`` on timeout or when the consumer is closed meanwhile.

        A queue that cannot be read (``CorruptedLogError`` for damage, ``TopicNotReadableError``)
        does not stop the others: ``poll`` returns their messages, and that queue keeps its
        position (nothing of it is skipped) and is read again at every poll. Its error is logged
        once (logger ``mqlite.consumer``, again if it changes, and when the queue reads again)
        and listed by ``queue_errors()``. ``poll`` raises a queue's error only when every queue
        it read failed.

        A poll that raises (say a ``KeyboardInterrupt`` while it filters) moves no position:
        the next poll returns the same messages.
        """
        if max_messages is None:
            n = self._max_poll
        else:
            n = max_messages
            if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= _MAX_POLL:
                raise IllegalArgumentError(f"max_messages must be an int in [1, {_MAX_POLL}], got {n!r}")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0
        ):
            raise IllegalArgumentError(f"timeout must be a number >= 0 or None, got {timeout!r}")
        return self._poll(timeout, n, self._max_poll_bytes, True, None)

    def _poll(
        self,
        timeout: float | None,
        n: int,
        max_bytes: int,
        oversized_first: bool,
        on_full: Callable[[_core.QueueCursor], object] | None,
    ) -> list[MessageExt]:
        """``poll`` with checked arguments and its byte bound (see ``Membership.poll_within``);
        ``on_full`` is told of a cursor whose next message did not fit, and the poll then
        returns what it has at once."""
        # An int beyond the float range waits as long as float("inf") does: without limit.
        deadline = (
            None if timeout is None or timeout > sys.float_info.max else time.monotonic() + timeout
        )
        lock = self._lock
        lock.acquire()
        try:
            self._check_open()
            self._polling += 1  # the poll watch leaves a polling member alone
        finally:
            lock.release()
        try:
            if self._given_up:
                with lock:
                    if self._given_up:
                        self._rejoin()
            msgs = self._poll_loop(deadline, n, max_bytes, oversized_first, on_full)
        finally:
            lock.acquire()
            self._polling -= 1
            self._last_poll = time.monotonic()
            lock.release()
        if msgs and self._max_poll_interval is not None:
            self._last_batch = msgs  # not consumed until the next poll (see _give_up)
        return msgs

    def _poll_loop(
        self,
        deadline: float | None,
        n: int,
        max_bytes: int,
        oversized_first: bool,
        on_full: Callable[[_core.QueueCursor], object] | None,
    ) -> list[MessageExt]:
        first = True
        lock = self._lock
        while True:
            # Explicit acquire/release rather than ``with``: this runs on every poll, and on
            # CPython 3.11 the context-manager protocol costs 2x the lock itself.
            lock.acquire()
            try:
                if not first and self._closed:
                    return []
                self._check_open()
                if first and self._handout is not None:
                    self._give_back()
                first = False
                core = self._ctx.live()
                now = time.monotonic()
                if now >= self._next_rebalance:
                    self._rebalance()
                if self._auto_commit and now >= self._next_commit:
                    self._commit_positions(wait=False)
                order, start = self._rotation()
                if not order:
                    # Cleared under the lock the assignment changes under: no lost wake-up.
                    self._wake.clear()
            finally:
                lock.release()
            left = _WAIT_SLICE
            if deadline is not None:
                left = max(0.0, min(left, deadline - time.monotonic()))
            if not order:
                if left <= 0:
                    return []
                self._wake.wait(left)
                continue
            # Read, and if nothing is there wait and read again, then advance the cursors nobody
            # moved (seek, rebalance) meanwhile, all in one call: one GIL hand-off when a
            # message arrives.
            msgs = core.poll_cursors(
                order, n, left, self._lock, self._queue_error_changed, self._expired_skipped,
                max_bytes=max_bytes, oversized_first=oversized_first, on_full=on_full,
                start=start,
            )
            if msgs:
                # The next poll starts after the last queue this one took messages from (as
                # Kafka's fetcher moves the partitions that returned data to the back): every
                # queue with data is served within one round, whatever the others hold, and a
                # poll does not re-read the queues that earlier polls of the round emptied.
                slot = self._slot.get(msgs[-1].message_queue)
                if slot is not None:
                    self._rr = slot + 1
                return msgs
            if not oversized_first:
                # One read (or wait) only: the caller (the push consumer) holds messages and
                # decides whether to wait for room or poll again.
                return msgs
            if deadline is not None and time.monotonic() >= deadline:
                return []

    # -- max_poll_interval ----------------------------------------------------------------------

    def poll_deadline(self) -> float | None:
        """For the poll watch (``mqlite.pollwatch``): when this member must have polled by, or
        None when it has nothing to give up (not a subscribed CLUSTERING member, polling now,
        given up already, closed, or no ``max_poll_interval``)."""
        if (self._max_poll_interval is None or self._closed or self._given_up or self._polling
                or self._manual is not False or self._member is None or not self._subs):
            return None
        return self._last_poll + self._max_poll_interval

    def poll_overdue(self) -> None:
        """For the poll watch: gives the queues up if the deadline is still passed."""
        with self._lock:
            deadline = self.poll_deadline()
            if deadline is not None and time.monotonic() >= deadline:
                self._give_up()

    def _give_up(self) -> None:
        """This member has not polled for ``max_poll_interval`` (lock held): it leaves every
        topic, so the group's other members take its queues, with a WARNING. The messages of
        its last poll count as not consumed (they are consumed once the next poll is called):
        the positions move back to them, though never behind a committed offset, and with
        auto_commit that is what the revoke commits. The next poll (or subscribe) rejoins."""
        mqs = sorted(self._queues)
        log.warning(
            "consumer %s of group %s has not polled for %.1f s (max_poll_interval): it gives up "
            "%d queue(s) and takes its share back at its next poll",
            self._client_id, self._group, time.monotonic() - self._last_poll, len(mqs),
        )
        self._given_up = True
        self._give_back()
        firsts: dict[MessageQueue, int] = {}
        for m in self._last_batch:
            firsts.setdefault(m.message_queue, m.queue_offset)
        self._last_batch = []
        for mq, offset in firsts.items():
            q = self._queues.get(mq)
            if q is not None:
                q.position = min(q.position, max(offset, q.committed or 0))
        self._revoke(mqs)
        member = self._member
        if member is not None:
            for topic in list(self._subs):
                member.leave(topic)
        self._settled.clear()

    def _rejoin(self) -> None:
        """Joins the group's topics again after ``_give_up`` (lock held)."""
        log.info("consumer %s of group %s polls again: it rejoins the group", self._client_id, self._group)
        self._given_up = False
        member = self._member
        if member is not None:
            for topic in self._subs:
                member.join(topic)
        self._settled.clear()
        self._rebalance()

    def _queue_error_changed(self, cursor: _core.QueueCursor) -> None:
        """A poll's read of ``cursor``'s queue failed for a new reason, or read again (lock held)."""
        if cursor.error is None:
            log.info("%s reads again for consumer %s of group %s", cursor.mq, self._client_id, self._group)
        else:
            log.error(
                "%s cannot be read by consumer %s of group %s; it stays at offset %d and is read "
                "again at every poll, the other queues are served: %s",
                cursor.mq, self._client_id, self._group, cursor.position, cursor.error,
            )

    def _expired_skipped(self, cursor: _core.QueueCursor, start: int, end: int) -> None:
        """A poll moved ``cursor`` from ``start`` up to its queue's minimum ``end``: retention
        deleted those messages before this consumer read them (lock held)."""
        log.warning(
            "%s: consumer %s of group %s skipped offsets %d to %d (%d messages): retention "
            "deleted them before they were consumed",
            cursor.mq, self._client_id, self._group, start, end - 1, end - start,
        )

    def queue_errors(self) -> dict[MessageQueue, BaseException]:
        """The assigned queues whose latest read by ``poll`` failed, with the exception (see
        ``poll``). A queue leaves the list when a read of it succeeds or it is unassigned."""
        with self._lock:
            return {mq: q.error for mq, q in self._queues.items() if q.error is not None}

    def __iter__(self) -> Iterator[MessageExt]:
        """Yield messages until ``close()``; leaving the loop early re-delivers the unyielded rest
        (so does ``close()`` or a ``poll()`` while the loop is suspended mid-batch)."""
        while not self._closed:
            yield from self._hand_out(self.poll(_WAIT_SLICE * 5))

    def _hand_out(self, batch: list[MessageExt]) -> Generator[MessageExt, None, None]:
        """Yields ``batch`` one message at a time (see ``_hold``)."""
        return self._hand_out_held(self._hold(batch))

    def _hold(self, batch: list[MessageExt]) -> HeldBatch:
        """Registers ``batch`` as fetched but not yet handed out: until its messages are yielded
        (``_hand_out_held``) or settled (``_settle``), commits stop at the first of them, and
        ``close()``, ``poll()``, ``seek()`` or a revocation gives the rest back (rewinds the
        positions), after which it is not handed out any more."""
        h = HeldBatch(batch)
        with self._lock:
            self._give_back()
            self._handout = h
        return h

    def _hand_out_held(self, h: HeldBatch) -> Generator[MessageExt, None, None]:
        """Yields a held batch one message at a time; leaving the loop gives the rest back."""
        try:
            while h.next < len(h.batch) and not h.returned:
                msg = h.batch[h.next]
                h.next += 1
                yield msg
        finally:
            self._return(h)

    def _settle(self, h: HeldBatch) -> bool:
        """Hands a held batch out whole (an awaited poll's result reached its caller); False if
        it was given back meanwhile (the positions were rewound: a later poll fetches it)."""
        with self._lock:
            if h.returned:
                return False
            h.next = len(h.batch)
            self._return(h)
            return True

    def _return(self, h: HeldBatch) -> None:
        """Gives back the unyielded rest of ``h`` once: the positions move back to it."""
        with self._lock:
            if h.returned:
                return
            h.returned = True
            if self._handout is h:
                self._handout = None
            if h.next < len(h.batch) and not self._closed:
                self._rewind(h.batch[h.next :])

    def _give_back(self) -> None:
        """Gives back the rest of the batch being handed out, if any (lock held)."""
        if self._handout is not None:
            self._return(self._handout)

    def _delivered_positions(self) -> dict[MessageQueue, int]:
        """Each queue's position, but no further than the first message of a held batch not
        yet handed out: what a commit may store (lock held)."""
        out = {mq: q.position for mq, q in self._queues.items()}
        h = self._handout
        if h is not None and not h.returned:
            for m in h.batch[h.next :]:
                mq = m.message_queue
                if mq in out and m.queue_offset < out[mq]:
                    out[mq] = m.queue_offset
        return out

    def _rewind(self, rest: list[MessageExt]) -> None:
        firsts: dict[MessageQueue, int] = {}
        for m in rest:
            firsts.setdefault(m.message_queue, m.queue_offset)
        with self._lock:
            for mq, offset in firsts.items():
                q = self._queues.get(mq)
                if q is not None and offset < q.position:
                    q.position = offset

    # -- offsets --------------------------------------------------------------------------------

    def _owned(self, mq: MessageQueue) -> _core.QueueCursor:
        if not isinstance(mq, MessageQueue):
            raise TypeError(f"expected a MessageQueue, not {type(mq).__name__}")
        q = self._queues.get(mq)
        if q is None:
            raise QueueNotAssignedError(
                f"{mq} is not assigned to consumer {self._client_id!r} of group {self._group!r}"
            )
        return q

    def _write(self, offsets: Mapping[MessageQueue, int]) -> None:
        """Commits ``offsets`` now (after any automatic commit under way, which they supersede)."""
        self._writer.write(offsets)

    def _submit(self, offsets: Mapping[MessageQueue, int]) -> None:
        """Commits ``offsets`` on the offset writer's thread: the caller does not wait."""
        self._writer.submit(offsets)

    def _write_file(self, offsets: Mapping[MessageQueue, int]) -> None:
        if not offsets:
            return
        by_topic: dict[str, dict[int, int]] = {}
        for mq, off in offsets.items():
            by_topic.setdefault(mq.topic, {})[mq.queue_id] = off
        for topic, table in by_topic.items():
            self._offsets.update(offset_key(topic, self._group), table)
        for mq, off in offsets.items():
            q = self._queues.get(mq)
            if q is not None:
                q.committed = off

    def _commit_positions(self, *, wait: bool = True) -> None:
        self._next_commit = time.monotonic() + self._commit_interval
        changed = {mq: p for mq, p in self._delivered_positions().items()
                   if p != self._queues[mq].committed}
        if changed:
            if wait:
                self._write(changed)
            else:
                self._submit(changed)

    def commit(
        self, offsets: Mapping[MessageQueue, int] | None = None, *, message: MessageExt | None = None
    ) -> None:
        """Durably store offsets (the next offset to consume) for the group.

        With no arguments: the current position of every assigned queue. ``message=m`` commits
        ``m.queue_offset + 1`` for its queue. An offset is clamped to the queue's max offset, so a
        committed offset is never ahead of the data. Raises QueueNotAssignedError for a queue
        this consumer does not own (it may have moved to another member).
        """
        with self._lock:
            self._check_open()
            if offsets is None and message is None:
                self._commit_positions()
                return
            self._write(self._clamped(offsets, message))

    def commit_async(
        self, offsets: Mapping[MessageQueue, int] | None = None, *, message: MessageExt | None = None
    ) -> None:
        """``commit`` without waiting for the disk (Kafka's ``commitAsync``).

        The arguments are checked here, with the same errors as ``commit``. The write happens on
        the consumer's offset writer thread; a failed one is logged, not raised. Later commits of
        a queue supersede it. ``commit()``, a revoke and ``close()`` write after it, so an older
        offset never lands after a newer one.
        """
        with self._lock:
            self._check_open()
            if offsets is None and message is None:
                self._commit_positions(wait=False)
                return
            self._submit(self._clamped(offsets, message))

    def _clamped(
        self, offsets: Mapping[MessageQueue, int] | None, message: MessageExt | None
    ) -> dict[MessageQueue, int]:
        """An explicit commit's offsets, checked (owned queues, ints >= 0) and clamped to each
        queue's max offset (lock held)."""
        wanted: dict[MessageQueue, int] = {}
        if message is not None:
            wanted[message.message_queue] = message.queue_offset + 1
        for mq, off in (offsets or {}).items():
            if isinstance(off, bool) or not isinstance(off, int) or off < 0:
                raise IllegalArgumentError(f"offset for {mq} must be an int >= 0, got {off!r}")
            wanted[mq] = off
        for mq in wanted:
            self._owned(mq)
        return {mq: min(off, self._core.offsets(mq.topic, mq.queue_id)[1]) for mq, off in wanted.items()}

    commit_sync = commit

    def send_back(
        self,
        msg: MessageExt,
        delay: int = 0,
        *,
        dead: bool = False,
        error: BaseException | str | None = None,
    ) -> SentBack:
        """Sends ``msg``, a message this consumer failed, back to the group's retry topic
        ``%RETRY%<group>`` (RocketMQ's consumer send-back): a copy is stored there after level
        ``delay`` of the store's delay table (0: level 3 + its reconsume count, capped at the
        table's last level), or in the dead-letter topic ``%DLQ%<group>`` at once when
        ``dead`` is true or the message has been consumed ``max_reconsume_times`` times.
        ``error`` (an exception: its type and text; a str: the text) is stored on the copy.

        The copy is durable when this returns. The original still counts as polled: its
        position is committed as usual, and the copy carries it on. A subscribed CLUSTERING
        consumer reads its group's retry topic itself, where a retried message shows its
        original ``topic`` and a ``reconsume_times`` one higher; a consumer that ``assign``s
        queues reads ``MessageQueue("%RETRY%<group>", 0)`` when it wants them.

        Raises IllegalArgumentError for an argument of the wrong kind or a message that is
        not one a consumer reads, InvalidMessageError for a level the delay table lacks
        (nothing is written then), and the store's errors.
        """
        with self._lock:
            self._check_open()
            core = self._ctx.live()
        return _send_back(core, self._group, msg, delay, dead, self.max_reconsume_times, error)

    @property
    def max_reconsume_times(self) -> int:
        """Reconsume count at which ``send_back`` sends to the dead-letter topic instead: the
        constructor's, or the group's ``retryMaxTimes`` in ``subscriptionGroup.json`` (16)."""
        if self._max_reconsume is not None:
            return self._max_reconsume
        return self._group_config.get(self._group).retry_max_times

    def committed(self, mq: MessageQueue) -> int | None:
        """The group's stored offset for ``mq`` (None if never committed)."""
        if not isinstance(mq, MessageQueue):
            raise TypeError(f"expected a MessageQueue, not {type(mq).__name__}")
        return self._offsets.get(offset_key(mq.topic, self._group)).get(mq.queue_id)

    def position(self, mq: MessageQueue) -> int:
        """The offset the next poll reads from in ``mq``."""
        with self._lock:
            self._check_open()
            return self._owned(mq).position

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Move the position of an assigned queue; OffsetOutOfRangeError outside [min, max]."""
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise IllegalArgumentError(f"offset must be an int, got {offset!r}")
        with self._lock:
            self._check_open()
            q = self._owned(mq)
            low, high = self._core.offsets(mq.topic, mq.queue_id)
            if not low <= offset <= high:
                raise OffsetOutOfRangeError(f"offset {offset} of {mq} is outside [{low}, {high}]")
            self._give_back()  # a held batch is stale after a seek: its rewind must not undo it
            q.position = offset
            self._wake.set()

    def _targets(self, mq: MessageQueue | None) -> list[MessageQueue]:
        with self._lock:
            self._check_open()
            return sorted(self._queues) if mq is None else [self._owned(mq).mq]

    def seek_to_begin(self, mq: MessageQueue | None = None) -> None:
        """Move to the oldest stored message of ``mq`` (all assigned queues when None)."""
        for q in self._targets(mq):
            self.seek(q, self._core.offsets(q.topic, q.queue_id)[0])

    def seek_to_end(self, mq: MessageQueue | None = None) -> None:
        """Move past the newest message of ``mq`` (all assigned queues when None)."""
        for q in self._targets(mq):
            self.seek(q, self._core.offsets(q.topic, q.queue_id)[1])

    def offset_for_timestamp(self, mq: MessageQueue, ts: datetime | int) -> int:
        """The first offset of ``mq`` stored at or after ``ts`` (datetime or epoch ms)."""
        return self._core.offset_for_timestamp(mq.topic, mq.queue_id, _timestamp_ms(ts))

    def seek_to_timestamp(self, ts: datetime | int, mq: MessageQueue | None = None) -> None:
        """Move to the first message stored at or after ``ts`` (all assigned queues when None)."""
        for q in self._targets(mq):
            self.seek(q, self.offset_for_timestamp(q, ts))

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        """Stop fetching from these assigned queues until ``resume``."""
        with self._lock:
            self._check_open()
            mqs = list(queues)
            for mq in mqs:  # every queue is checked before any is paused: all or nothing
                self._owned(mq)
            self._paused.update(mqs)
            self._refresh_active()

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        """Fetch again from paused queues."""
        with self._lock:
            self._check_open()
            for mq in queues:
                self._paused.discard(mq)
            self._refresh_active()

    def paused(self) -> list[MessageQueue]:
        """The paused queues, sorted."""
        with self._lock:
            return sorted(self._paused)

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Commit (with auto_commit), give every queue up and leave the group. Idempotent."""
        pollwatch.unwatch(self)
        with self._lock:
            if self._closed:
                return
            if os.getpid() != self._pid:
                self._closed = True  # forked child: the locks belong to the parent
                return
            try:
                self._give_back()
                self._revoke(sorted(self._queues))
            finally:
                self._writer.close()
                self._closed = True
                self._queues.clear()
                self._by_topic.clear()
                self._settled.clear()
                self._active = []
                self._order = []
                self._slot = {}
                if self._member is not None:
                    self._member.close()
                if self._bcast_lock is not None:
                    os.close(self._bcast_lock)
                    self._bcast_lock = None
                self._wake.set()

    def __enter__(self) -> PullConsumer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        member = getattr(self, "_member", None)
        if member is not None and not self._closed and os.getpid() == self._pid:
            member.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._queues)} queues"
        return f"<mqlite.PullConsumer group={self._group!r} client_id={self._client_id!r} {state}>"


class Handouts:
    """How a caller that receives a PullConsumer's batches on another thread (the asyncio
    consumer) hands them out: a polled batch counts as handed out only once its receiver has it.

    Until then commits stop at its first message, and ``close()``, ``poll()``, ``seek()`` or a
    revocation gives it back (the positions move back to it), after which it is not handed out.
    """

    __slots__ = ("_consumer",)

    def __init__(self, consumer: PullConsumer) -> None:
        self._consumer = consumer

    def poll(self, timeout: float | None, max_messages: int | None) -> HeldBatch:
        """``PullConsumer.poll``, its batch held (any batch held before is given back)."""
        c = self._consumer
        return c._hold(c.poll(timeout, max_messages))

    def settle(self, held: HeldBatch) -> bool:
        """The receiver has the whole batch; False if it was given back meanwhile (a later poll
        fetches it again)."""
        return self._consumer._settle(held)

    def give_back(self, held: HeldBatch) -> None:
        """Nobody will receive the rest of the batch: the positions move back to it."""
        self._consumer._return(held)

    def one_by_one(self, held: HeldBatch) -> Generator[MessageExt, None, None]:
        """Hands the batch out a message at a time; closing the generator early gives the rest
        back."""
        return self._consumer._hand_out_held(held)


def _weak_write(consumer: PullConsumer) -> Callable[[dict[MessageQueue, int]], None]:
    """``consumer._write_file`` through a weak reference: the offset writer's thread must not keep
    a consumer dropped without ``close()`` alive (its ``__del__`` leaves the group)."""
    ref = weakref.WeakMethod(consumer._write_file)

    def write(offsets: dict[MessageQueue, int]) -> None:
        method = ref()
        if method is not None:
            method(offsets)

    return write
