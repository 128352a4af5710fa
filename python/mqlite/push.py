"""``PushConsumer``: background threads call a listener (RocketMQ's DefaultMQPushConsumer).

Threads work leader/follower: one idle thread at a time polls (and wakes the moment a message is
stored), then processes what it got itself, handing the rest of the batch to the next idle
thread; so a message reaches the listener after a single thread hand-off. A quick listener runs
before the poll is handed on (no thread is woken on the message's path); if such a call runs
past ``_STALL`` seconds, a waiting thread takes the poll over, so one slow call holds other
queues up for a moment at most. Who polls is decided by ``_core.PollToken``, in Rust so that the
waiter watching for such a stall wakes without taking the GIL (``rust/py/src/token.rs``).

Concurrent mode: batches run on any thread. ``RECONSUME_LATER`` (or an exception, or a return
value that is not a status, or a ``ReconsumeLater``) fails the batch. In CLUSTERING mode each
failed message is sent back (``Store.send_back``, RocketMQ's consumer send-back): a copy goes
to the group's retry topic ``%RETRY%<group>`` after a delay level growing with its reconsume
count (or the level a ``ReconsumeLater`` names), or, once it has been consumed
``max_reconsume_times`` times (or for ``ReconsumeLater(dead=True)``), to the dead-letter topic
``%DLQ%<group>``; the exception's type and text are stored on the copy. The consumer reads its
retry topic itself (a retried message shows its original ``topic`` and its
``reconsume_times``), and the original counts as consumed: the committed offset moves past it.
A message whose send-back fails, and every failed message in BROADCASTING mode or with
``send_back=False``, is kept for local redelivery after ``retry_delay`` seconds, doubling up to
``max_retry_delay``; the committed offset of a queue never passes such a message. Orderly mode: a queue is
consumed by one thread at a time, in queue order; ``SUSPEND_CURRENT_QUEUE_A_MOMENT`` (or an
exception, or a return value that is not a status) re-delivers the same messages to the same
queue after ``suspend_time`` seconds. In CLUSTERING mode with ``send_back``, each failure is
counted durably (``mqlite.attempts``) and a message that failed more than
``max_reconsume_times`` times goes to ``%DLQ%<group>``; the queue then moves on.

No error ends a consuming thread while the consumer runs (only ``shutdown`` and the store's
closing do): the listener's are failures of its batch, and any other is logged on
``mqlite.consumer`` and the thread goes on.

Memory: the messages a consumer holds (polled and not yet acknowledged: queued, running,
waiting for redelivery) take at most ``max_buffered_bytes`` bytes together (whole stored
records; RocketMQ's ``pullThresholdSizeForQueue``, for the whole consumer): a poll asks for no
more than the room left, and with none left the poller waits until a listener acknowledges
something. A single message larger than the bound is still delivered, alone.
``max_buffered_per_queue`` bounds each queue's count as well.

Offsets are committed every ``commit_interval`` seconds (written on the consumer's offset
writer thread, so delivery never waits for the file's fsyncs), and at once when a queue moves to
another member (after its running batches finish) and on ``shutdown``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Union

from mqlite import _core
from mqlite._context import HasClientContext, context_of
from mqlite.allocate import AllocateMessageQueueStrategy
from mqlite.attempts import AttemptFile
from mqlite.errors import (
    ClientClosedError,
    IllegalStateError,
    InvalidConfigError,
    InvalidMessageError,
    MQError,
    StoreClosedError,
)
from mqlite.message import MessageExt, MessageQueue
from mqlite.pull import DEFAULT_MAX_POLL_BYTES, check_positive, drive
from mqlite.retry import check_max_reconsume_times
from mqlite.selector import MessageSelector
from mqlite.status import (
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    ConsumeStatus,
    MessageModel,
    ReconsumeLater,
)
from mqlite.topic import check_topic

__all__ = ["MessageListener", "PushConsumer"]

log = logging.getLogger("mqlite.consumer")

MessageListener = Callable[[list[MessageExt]], Union[ConsumeStatus, ConsumeOrderlyStatus, ReconsumeLater]]
# A failed batch: (delay level for the send-back: 0 automatic, -1 dead letter, else a level;
# the error's type name; its text). None is success.
_Failure = tuple[int, str, str]
_NOT_A_STATUS = (0, "NotAStatus", "the listener returned no status")
_POLL_SLICE = 0.1
# _LOCKS: on the per-message paths locks are taken with explicit acquire()/release() in
# try/finally rather than ``with``: on CPython 3.11 ``with lock:`` costs about 210 ns against
# 90 ns (the context-manager protocol looks up and binds __enter__/__exit__ each time), and
# ``with condition:`` adds a Python-level __enter__ on top.
_STALL = 0.05  # s: a poller busy this long in a listener call loses the poll to a waiting thread
_QUICK_LISTENER = 200e-6  # s: a listener quicker than this on average takes the fast path (_claim)


class _ProcessQueue:
    """Messages of one owned queue between poll and acknowledgement."""

    __slots__ = (
        "mq", "cursor", "unacked", "acked", "position", "running", "backlog", "queued",
        "suspended_until", "dropped", "paused", "attempts", "direct", "held_bytes",
    )

    def __init__(self, mq: MessageQueue, cursor: _core.QueueCursor) -> None:
        self.mq = mq
        # The pull consumer's cursor of this queue: the same object from assignment to
        # revocation, which is this process queue's whole life.
        self.cursor = cursor
        self.unacked: list[int] = []  # min-heap of dispatched, unacknowledged offsets
        self.acked: set[int] = set()  # acknowledged offsets still inside ``unacked``
        self.position = cursor.position  # offset after the last polled one
        self.running = 0
        self.backlog: deque[MessageExt] = deque()  # orderly: polled, not yet consumed
        self.queued = False
        self.suspended_until = 0.0
        self.dropped = False
        self.paused = False
        self.attempts: dict[int, int] = {}
        # First offset of the batch the poller is running straight after its poll (``_claim``),
        # which is in neither ``unacked`` nor ``position`` until it settles.
        self.direct: int | None = None
        # Bytes of this queue's messages the consumer holds (queued, running, awaiting
        # redelivery), not counting a direct batch while it runs; released when revoked.
        self.held_bytes = 0

    def ack(self, msgs: Sequence[MessageExt]) -> None:
        for m in msgs:
            self.acked.add(m.queue_offset)
            self.attempts.pop(m.queue_offset, None)
        heap, acked = self.unacked, self.acked
        while heap and heap[0] in acked:
            acked.discard(heapq.heappop(heap))

    def commit_offset(self) -> int:
        """The next offset to consume as far as the group is concerned: the oldest unacked."""
        off = self.unacked[0] if self.unacked else self.position
        direct = self.direct
        return off if direct is None or direct >= off else direct

    @property
    def buffered(self) -> int:
        return len(self.unacked) - len(self.acked)


class PushConsumer:
    """Calls a registered listener with the messages of its subscriptions, on ``threads`` threads.

    Group semantics (CLUSTERING/BROADCASTING, rebalancing across threads and processes) are those
    of ``PullConsumer``, which this class drives.
    """

    def __init__(
        self,
        store: HasClientContext,
        group: str,
        *,
        orderly: bool = False,
        threads: int = 4,
        batch_size: int = 1,
        message_model: MessageModel = MessageModel.CLUSTERING,
        consume_from: ConsumeFromWhere | datetime | int = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
        consume_timestamp: datetime | int | None = None,
        client_id: str | None = None,
        allocate_strategy: AllocateMessageQueueStrategy | None = None,
        pull_batch_size: int = 32,
        max_buffered_per_queue: int = 1000,
        max_buffered_bytes: int = DEFAULT_MAX_POLL_BYTES,
        suspend_time: float = 1.0,
        retry_delay: float = 1.0,
        max_retry_delay: float = 60.0,
        commit_interval: float = 5.0,
        rebalance_interval: float = 0.5,
        revoke_timeout: float = 30.0,
        max_reconsume_times: int | None = None,
        send_back: bool = True,
    ) -> None:
        if not isinstance(send_back, bool):
            raise InvalidConfigError(f"send_back must be a bool, got {send_back!r}")
        if max_reconsume_times is not None:
            check_max_reconsume_times(max_reconsume_times)
        if not isinstance(orderly, bool):
            raise InvalidConfigError(f"orderly must be a bool, got {orderly!r}")
        for name, value in (("threads", threads), ("batch_size", batch_size),
                            ("pull_batch_size", pull_batch_size),
                            ("max_buffered_per_queue", max_buffered_per_queue),
                            ("max_buffered_bytes", max_buffered_bytes)):
            check_positive(name, value, integer=True)
        for name, fvalue in (("suspend_time", suspend_time), ("retry_delay", retry_delay),
                             ("max_retry_delay", max_retry_delay), ("commit_interval", commit_interval),
                             ("revoke_timeout", revoke_timeout)):
            check_positive(name, fvalue)
        self._ctx = context_of(store)
        # The pull consumer this drives: it calls queues_assigned/queues_revoked (lock held).
        self._member = drive(
            store, group, _Owner(self), message_model=message_model, auto_commit=False,
            consume_from=consume_from, consume_timestamp=consume_timestamp,
            max_poll_messages=pull_batch_size, client_id=client_id,
            allocate_strategy=allocate_strategy, rebalance_interval=rebalance_interval,
            max_reconsume_times=max_reconsume_times,
            max_poll_interval=None,  # the poller polls on its own: a slow listener is not a silent member
        )
        self._consumer = self._member.consumer
        # Failed messages go back to the store (see the module doc), not to a local timer.
        self._sends_back = send_back and message_model is MessageModel.CLUSTERING
        self._retry_topic = f"%RETRY%{group}"
        # Orderly CLUSTERING: failure counts that outlive this consumer (see _orderly_failed).
        self._attempt_file = (
            AttemptFile(self._consumer._root, group, durable=self._ctx.durable)
            if orderly and self._sends_back else None
        )
        self._orderly = orderly
        self._threads_n = threads
        self._batch = batch_size
        self._pull_batch = pull_batch_size
        self._max_buffered = max_buffered_per_queue
        self._max_bytes = max_buffered_bytes
        self._suspend_time = float(suspend_time)
        self._retry_delay = float(retry_delay)
        self._max_retry_delay = float(max_retry_delay)
        self._commit_interval = float(commit_interval)
        self._revoke_timeout = float(revoke_timeout)
        self._listener: MessageListener | None = None
        self._subs: dict[str, str | MessageSelector] = {}
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        # Bytes of the messages held (see the module doc): raised only by the poller, after a
        # poll; lowered (lock held) when messages are acknowledged, dropped or revoked, which
        # wakes a poller waiting on ``_room`` for space.
        self._held_bytes = 0
        self._peak_held_bytes = 0
        self._room = threading.Condition(self._lock)
        self._room_waiters = 0
        self._token = _core.PollToken(_STALL)  # see rust/py/src/token.rs
        self._pqs: dict[MessageQueue, _ProcessQueue] = {}
        self._idle_waiters = 0  # threads in _wait_idle: the only waiters on _cond
        self._last_claimed: _ProcessQueue | None = None  # see _claim
        self._ready: deque[tuple[_ProcessQueue, list[MessageExt]]] = deque()
        self._ready_queues: deque[_ProcessQueue] = deque()
        self._timers: list[tuple[float, int, _ProcessQueue, list[MessageExt] | None]] = []
        self._seq = itertools.count()
        self._workers: list[threading.Thread] = []
        self._state = "created"
        self._next_commit = 0.0
        # Moving average of the listener's duration (s): a quick listener runs on the polling
        # thread before it hands leadership on (see `_worker`).
        self._listener_time = 0.0
        self._stop_deadline: float | None = None
        self._store_gone = False
        self._pid = os.getpid()

    # -- configuration --------------------------------------------------------------------------

    @property
    def group(self) -> str:
        """The consumer group."""
        return self._consumer.group

    @property
    def client_id(self) -> str:
        """This consumer's id in the group."""
        return self._consumer.client_id

    @property
    def orderly(self) -> bool:
        """Whether queues are consumed one thread at a time, in order."""
        return self._orderly

    @property
    def running(self) -> bool:
        """True between ``start()`` and ``shutdown()``."""
        return self._state == "running"

    def assignment(self) -> list[MessageQueue]:
        """The queues this consumer currently owns."""
        return self._consumer.assignment()

    @property
    def buffered_bytes(self) -> int:
        """Bytes (whole stored records) of the messages this consumer holds now: polled and not
        yet acknowledged. At most ``max_buffered_bytes``, or one message when that one alone
        is larger."""
        return self._held_bytes

    @property
    def peak_buffered_bytes(self) -> int:
        """The most ``buffered_bytes`` has been since the consumer was created."""
        return self._peak_held_bytes

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Consume ``topic`` filtered by a tag expression or selector (before or after start)."""
        if self._state == "stopped":
            raise IllegalStateError("subscribe() after shutdown()")
        if isinstance(expression, str):
            MessageSelector.by_tag(expression)
        elif not isinstance(expression, MessageSelector):
            raise TypeError(f"expression must be a str or MessageSelector, not {type(expression).__name__}")
        check_topic(topic)
        self._subs[topic] = expression
        if self._state == "running":
            self._consumer.subscribe(topic, expression)

    def register_message_listener(self, listener: MessageListener) -> None:
        """Set the function called with each batch; it returns a ConsumeStatus (concurrent) or a
        ConsumeOrderlyStatus (orderly). An exception, or a return value that is not a status,
        counts as a failure (RECONSUME_LATER or SUSPEND_CURRENT_QUEUE_A_MOMENT), logged."""
        if not callable(listener):
            raise TypeError("listener must be callable")
        if self._state != "created":
            raise IllegalStateError("register the listener before start()")
        self._listener = listener

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Join the group and start the consuming threads."""
        if self._state != "created":
            raise IllegalStateError(f"start() on a consumer that is {self._state}")
        if self._listener is None:
            raise IllegalStateError("register_message_listener() before start()")
        if not self._subs:
            raise IllegalStateError("subscribe() to at least one topic before start()")
        self._state = "running"
        self._next_commit = time.monotonic() + self._commit_interval
        try:
            for topic, expression in self._subs.items():
                self._consumer.subscribe(topic, expression)
            if self._sends_back and self._retry_topic not in self._subs:
                self._consumer.subscribe(self._retry_topic, "*")
        except BaseException:
            self._state = "stopped"
            self._consumer.close()
            raise
        for i in range(self._threads_n):
            t = threading.Thread(target=self._worker, name=f"mqlite-push-{i}", daemon=True)
            t.start()
            self._workers.append(t)

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop the threads (running listeners finish), commit and leave the group. Idempotent.

        Called from inside a listener it returns at once: the listener's own thread cannot wait
        for itself, so the rest (joining the threads, committing, leaving the group) runs on
        another thread as soon as that listener has returned.

        In a forked child of the process that started the consumer it raises
        StoreUsedAfterForkError at once: the threads, and the locks they may hold, are the
        parent's (which goes on consuming).
        """
        if self._state != "running":
            if self._state == "created":
                self._state = "stopped"
            return
        if os.getpid() != self._pid:
            self._state = "stopped"
            raise self._ctx.dead()
        with self._cond:
            self._state = "stopping"
            self._cond.notify_all()
        self._token.wake_all()
        if threading.current_thread() in self._workers:
            threading.Thread(
                target=self._stop, args=(timeout,), name="mqlite-push-shutdown", daemon=True
            ).start()
            return
        self._stop(timeout)

    def _stop(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        self._stop_deadline = deadline
        for t in self._workers:
            if t is not threading.current_thread():
                t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self._token.acquire(lambda: True)  # no poll runs meanwhile (a stalled poller is taken over)
        try:
            self._consumer.close()  # revokes every queue: commits the oldest unacked offsets
        finally:
            self._token.release()
        self._state = "stopped"

    def __enter__(self) -> PushConsumer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        mode = "orderly" if self._orderly else "concurrent"
        return f"<mqlite.PushConsumer group={self.group!r} {mode} {self._state}>"

    # -- assignment changes (_Owner: called by the polling thread inside PullConsumer.poll) ------

    def _queues_assigned(self, cursors: Mapping[MessageQueue, _core.QueueCursor]) -> None:
        """A process queue per gained queue."""
        with self._lock:
            for mq, cursor in cursors.items():
                self._pqs[mq] = _ProcessQueue(mq, cursor)

    def _queues_revoked(self, mqs: list[MessageQueue]) -> Mapping[MessageQueue, int]:
        """Drops the queues' process queues once no listener runs on them (up to
        ``revoke_timeout``); returns their oldest unacknowledged offsets."""
        with self._cond:
            pqs = [pq for mq in mqs if (pq := self._pqs.get(mq)) is not None]
            for pq in pqs:
                pq.dropped = True
            if not self._wait_idle(pqs):
                log.warning("revoking %s while listeners still run; they will be re-delivered", mqs)
            offsets = {pq.mq: pq.commit_offset() for pq in pqs if pq.commit_offset() != pq.cursor.committed}
            for pq in pqs:
                del self._pqs[pq.mq]
                self._release_held(pq.held_bytes)
                pq.held_bytes = 0
        return offsets

    def _wait_idle(self, pqs: list[_ProcessQueue]) -> bool:
        """Waits (``_cond`` held) until no listener runs on ``pqs``: at most ``revoke_timeout``,
        and no longer than a ``shutdown(timeout)`` begun meanwhile allows. True if idle."""
        limit = time.monotonic() + self._revoke_timeout
        while True:
            if all(pq.running == 0 and pq.direct is None for pq in pqs):
                return True
            end = limit if self._stop_deadline is None else min(limit, self._stop_deadline)
            left = end - time.monotonic()
            if left <= 0:
                return False
            self._idle_waiters += 1
            try:
                self._cond.wait(min(left, _POLL_SLICE))
            finally:
                self._idle_waiters -= 1

    # -- the worker loop ------------------------------------------------------------------------

    def _worker(self) -> None:
        """A consuming thread. It ends when the consumer stops or the store closes; any other
        exception is logged and the thread consumes on, so it never dies while ``running``."""
        while True:
            try:
                self._consume()
                return
            except BaseException:  # noqa: BLE001 - whatever it is, the thread must go on
                if self._state != "running":
                    return
                log.exception("push consumer %s: unexpected error in a consuming thread; it goes on",
                              self.client_id)
                # An error that recurs at once is retried at this pace, not in a busy loop.
                time.sleep(_POLL_SLICE)

    def _consume(self) -> None:
        """The consuming loop: runs ready batches and, holding the token, polls. Returns when
        the thread must end. The token is released however ``_lead`` ends, and a batch taken
        to run is settled however its listener ends (``_call`` never raises), so an exception
        leaving this loop leaves no queue waiting for a batch that will not finish."""
        token = self._token
        running = lambda: self._state == "running"  # noqa: E731 - the token's wait condition
        while self._state == "running":
            work = self._take()
            if work is None:
                if not token.acquire(running):
                    return
                try:
                    work, end = self._lead()
                finally:
                    token.release()
                if end:
                    return
            if work is not None:
                self._run(work)

    def _lead(self) -> tuple[tuple[_ProcessQueue, list[MessageExt]] | None, bool]:
        """Polls while holding the token. A batch polled while the listener is quick and nothing
        else is ready runs here at once (sparing the message a thread wake-up), and the token
        is kept for the next poll, so no other thread is woken per message; any other batch is
        returned to run after the token is given up. Returns (that batch or None, True when the
        thread must end)."""
        token = self._token
        while self._state == "running":
            work = self._take()
            if work is None:
                try:
                    msgs = self._poll_once()
                except StoreClosedError as exc:
                    # Every later poll would fail the same way: the threads end here (said
                    # once); shutdown() still commits what it can.
                    if self._state == "running" and not self._store_gone:
                        self._store_gone = True
                        log.error("store closed under a running push consumer: %s", exc)
                    return None, True
                except MQError as exc:
                    if self._state == "running":
                        log.error("poll failed: %s", exc)
                        time.sleep(_POLL_SLICE)
                    return None, False
                if msgs:
                    # The fast path, kept short: this is the message's way to the listener.
                    pq = self._claim(msgs)
                    if pq is not None:
                        started = time.perf_counter()
                        token.busy()
                        failure = self._call(msgs, started)
                        self._settle_direct(pq, msgs, None if failure is None else
                                            self._sent_back(pq, msgs, failure))
                        if not token.idle():
                            return None, False  # taken over meanwhile: that thread polls now
                        continue
                    self._spread(msgs)
                work = self._take()
                if work is None:
                    return None, False
            if not self._run_as_leader():
                return work, False
            token.busy()
            self._run(work)
            if not token.idle():
                return None, False  # taken over while the listener ran: that thread polls now
        return None, False

    def _run(self, work: tuple[_ProcessQueue, list[MessageExt]]) -> None:
        if self._orderly:
            self._run_orderly(*work)
        else:
            self._run_concurrent(*work)

    def _run_as_leader(self) -> bool:
        """True when the poller should run its batch itself before passing the poll on: the
        listener has been quick (under 200 µs on average) and no other batch is waiting."""
        return self._listener_time < _QUICK_LISTENER and not self._ready and not self._ready_queues

    def _take(self) -> tuple[_ProcessQueue, list[MessageExt]] | None:
        """A batch ready to run, marked running; None when there is nothing."""
        if not self._timers and not self._ready and not self._ready_queues:
            # The usual case, read without the lock (each read is atomic under the GIL): work
            # queued just after this check is found by the next _take, as it would be had it
            # been queued just after a locked check.
            return None
        with self._lock:
            timers = self._timers
            if timers and timers[0][0] <= time.monotonic():
                self._fire_timers()
            if self._orderly:
                while self._ready_queues:
                    pq = self._ready_queues.popleft()
                    pq.queued = False
                    if pq.dropped or pq.running or not pq.backlog:
                        continue
                    pq.running = 1
                    return pq, list(itertools.islice(pq.backlog, self._batch))
                return None
            while self._ready:
                pq, msgs = self._ready.popleft()
                if pq.dropped:
                    continue
                pq.running += 1
                return pq, msgs
            return None

    def _fire_timers(self) -> None:
        now = time.monotonic()
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, _, pq, msgs = heapq.heappop(timers)
            if pq.dropped:
                continue
            if msgs is None:
                pq.suspended_until = 0.0
                self._queue_orderly(pq)
            else:
                self._ready.append((pq, msgs))

    def _queue_orderly(self, pq: _ProcessQueue) -> None:
        if not pq.queued and not pq.running and pq.backlog and pq.suspended_until == 0.0:
            pq.queued = True
            self._ready_queues.append(pq)

    def _poll_once(self) -> list[MessageExt]:
        """Commits if it is time, then polls once (holding the token)."""
        now = time.monotonic()
        wait = _POLL_SLICE
        if self._timers:  # unlocked peek, as in _take; the look at the heap is locked
            with self._lock:
                if self._timers:
                    wait = max(0.0, min(wait, self._timers[0][0] - now))
        if now >= self._next_commit:
            self._commit()
        held = self._held_bytes  # read unlocked: only this thread raises it
        room = self._max_bytes - held
        if room <= 0:
            self._wait_for_room(held, wait)
            return []
        msgs, full = self._member.poll_within(wait, self._pull_batch, room, held == 0)
        if msgs:
            size = sum(m.store_size for m in msgs)
            with self._lock:
                self._held_bytes += size
                if self._held_bytes > self._peak_held_bytes:
                    self._peak_held_bytes = self._held_bytes
        elif full:
            self._wait_for_room(held, wait)
        return msgs

    def _wait_for_room(self, held: int, timeout: float) -> None:
        """Waits until the held bytes drop below ``held`` (a listener acknowledged something, or
        a queue was revoked), at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._room:
            while self._held_bytes >= held and self._state == "running":
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._room_waiters += 1
                try:
                    self._room.wait(left)
                finally:
                    self._room_waiters -= 1

    def _release_held(self, size: int) -> None:
        """``size`` bytes of held messages are let go (lock held): wakes a poller waiting for room."""
        if size:
            self._held_bytes -= size
            if self._room_waiters:
                self._room.notify()

    def _release(self, pq: _ProcessQueue, msgs: Sequence[MessageExt]) -> None:
        """``msgs`` of ``pq``, held until now, are acknowledged (lock held). A revoked queue's
        bytes were released when it was revoked."""
        if pq.dropped:
            return
        size = sum(m.store_size for m in msgs)
        pq.held_bytes -= size
        self._release_held(size)

    def _spread(self, msgs: list[MessageExt]) -> None:
        """Turns a poll into ready work: batches (concurrent) or queue backlogs (orderly)."""
        to_pause: list[MessageQueue] = []
        with self._lock:
            start = 0
            n = len(msgs)
            while start < n:
                mq = msgs[start].message_queue
                end = start + 1
                while end < n and msgs[end].message_queue == mq:
                    end += 1
                pq = self._pqs.get(mq)
                run = msgs[start:end]
                start = end
                size = sum(m.store_size for m in run)
                if pq is None:
                    self._release_held(size)  # revoked since the poll: not delivered here
                    continue
                pq.held_bytes += size
                pq.position = pq.cursor.position
                for m in run:
                    heapq.heappush(pq.unacked, m.queue_offset)
                if self._orderly:
                    pq.backlog.extend(run)
                    self._queue_orderly(pq)
                else:
                    b = self._batch
                    for i in range(0, len(run), b):
                        self._ready.append((pq, run[i : i + b]))
                if not pq.paused and pq.buffered >= self._max_buffered:
                    pq.paused = True
                    to_pause.append(mq)
        if to_pause:
            self._consumer.pause(to_pause)
            # A listener may have drained a queue and resumed it between the flag set above and
            # this pause (its resume came first): undo the pause, or the queue stays paused.
            with self._lock:
                undo = [mq for mq in to_pause if (pq2 := self._pqs.get(mq)) is None or not pq2.paused]
            if undo:
                self._consumer.resume(undo)

    def _claim(self, msgs: list[MessageExt]) -> _ProcessQueue | None:
        """Leader fast path (concurrent mode): a quick listener with nothing else waiting gets a
        poll of one batch of one queue straight away, without going through the ready queue.
        Returns the batch's process queue, with the batch's first offset recorded as the queue's
        ``direct`` batch (a running batch for ``_wait_idle``, and a commit made while it runs
        stays behind it), for the caller to run at once on the polling thread and then
        ``_settle_direct``; None when the batch must go through ``_spread``. The least work
        that keeps those guarantees: this is on every message's way from the store to the
        listener.

        Without the lock: only the token holder (this thread) claims, revokes (inside its poll)
        and sets ``direct``; the thread that ran a direct batch clears the mark in
        ``_settle_direct``, before which a later claim of the queue sees it set and goes the
        ordinary way. The batch is not counted in ``running``, which other threads' batches
        update under the lock.
        """
        if (self._orderly or len(msgs) > self._batch or self._ready
                or self._listener_time >= _QUICK_LISTENER):
            return None
        mq = msgs[0].message_queue
        if len(msgs) > 1 and msgs[-1].message_queue != mq:
            return None
        # A poll's messages carry the very queue object the assignment was made with, so an
        # identity check finds the usual case without hashing the queue.
        pq = self._last_claimed
        if pq is None or pq.mq is not mq or pq.dropped:
            pq = self._pqs.get(mq)
        # A queue revoked since the poll is not run (its new owner reads it from the committed
        # offset); one whose earlier direct batch still runs (this thread took the poll over
        # from a stalled one) goes the ordinary way.
        if pq is None or pq.dropped or pq.direct is not None:
            return None
        pq.direct = msgs[0].queue_offset
        self._last_claimed = pq
        return pq

    def _settle_direct(self, pq: _ProcessQueue, msgs: list[MessageExt],
                       failed: list[MessageExt] | None) -> None:
        """After a ``_claim``ed batch ran: the queue's position passes it; ``failed``, the
        messages of a failed batch not sent back (``_sent_back``), are kept unacknowledged
        (commits stay behind them) for redelivery."""
        lock = self._lock  # explicit acquire/release: see _LOCKS
        lock.acquire()
        try:
            pq.direct = None
            end = msgs[-1].queue_offset + 1
            if end > pq.position:
                pq.position = end
            # The direct batch's bytes were counted by the poll only; from here the queue holds
            # them (a failed batch, kept for redelivery) or they are let go.
            size = sum(m.store_size for m in msgs)
            if not failed or pq.dropped:
                self._release_held(size)
            else:
                kept = sum(m.store_size for m in failed)
                self._release_held(size - kept)
                pq.held_bytes += kept
                for m in failed:
                    heapq.heappush(pq.unacked, m.queue_offset)
                self._retry_later(pq, failed)
            resume = self._batch_done(pq, direct=True)
        finally:
            lock.release()
        self._resume(resume)

    def _retry_later(self, pq: _ProcessQueue, msgs: list[MessageExt]) -> None:
        """Schedules a failed batch's local redelivery with exponential backoff (lock held)."""
        first = msgs[0].queue_offset
        tries = pq.attempts.get(first, 0) + 1
        pq.attempts[first] = tries
        delay = min(self._retry_delay * 2 ** (tries - 1), self._max_retry_delay)
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._seq), pq, msgs))

    def _commit(self) -> None:
        self._next_commit = time.monotonic() + self._commit_interval
        with self._lock:
            # Called by the poller before it polls: every fetched message is in ``unacked``, so a
            # queue with none may commit its cursor, which also passes messages the filter
            # skipped or retention removed (RocketMQ moves such an offset forward the same way).
            for idle in self._pqs.values():
                position = idle.cursor.position
                if (not idle.unacked and not idle.running and idle.direct is None
                        and position > idle.position):
                    idle.position = position
            offsets = {mq: pq.commit_offset() for mq, pq in self._pqs.items()
                       if pq.commit_offset() != pq.cursor.committed}
        # Written on the offset writer's thread: the poller goes straight back to polling rather
        # than wait for the offset file's fsyncs. A revoke writes what is still pending first.
        self._member.submit(offsets)

    def _call(self, msgs: list[MessageExt], started: float | None = None) -> _Failure | None:
        """Runs the listener on ``msgs`` (``started``: a ``time.perf_counter()`` reading the
        caller took just before, saving one). None when it reported success, else the
        failure. Never raises: whatever the listener raises or returns other than a status is
        a failure, logged in one line (the traceback at DEBUG level)."""
        listener = self._listener
        if listener is None:  # start() refuses to run without one
            raise IllegalStateError("no message listener registered")
        if started is None:
            started = time.perf_counter()
        try:
            # ``object``: whatever the annotation says, a listener may return anything.
            status: object = listener(msgs)
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: the batch is retried, the thread lives
            kind, text = type(exc).__qualname__, _exc_text(exc)
            log.warning("message listener raised %s: %s on %d message(s) of %s (reconsume times %d)",
                        kind, text, len(msgs), msgs[0].message_queue, msgs[0].reconsume_times)
            log.debug("the listener's traceback", exc_info=True)
            return 0, kind, text
        finally:
            self._listener_time += (time.perf_counter() - started - self._listener_time) * 0.1
        # Identity, not ``in``/``==``: the returned object's ``__eq__`` is the listener's code
        # and may raise (a numpy array's does).
        if status is ConsumeStatus.CONSUME_SUCCESS or status is ConsumeOrderlyStatus.SUCCESS:
            return None
        if status is ConsumeStatus.RECONSUME_LATER:
            return 0, "", ""
        if type(status) is ReconsumeLater and not self._orderly:
            return status.delay_level, "", ""
        if status is not ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT:
            log.warning("message listener returned %s, not a status, for %d message(s) of %s; treated as %s",
                        _describe(status), len(msgs), msgs[0].message_queue,
                        "SUSPEND_CURRENT_QUEUE_A_MOMENT" if self._orderly else "RECONSUME_LATER")
            return _NOT_A_STATUS
        return 0, "", ""

    def _batch_done(self, pq: _ProcessQueue, *, direct: bool = False) -> MessageQueue | None:
        """A batch of ``pq`` stopped running (lock held; ``direct``: the claimed batch, whose
        mark the caller cleared, else one counted in ``running``): wakes a revoke waiting for
        that (the only waiters on ``_cond``), and returns the queue to resume if it was paused
        and has drained enough."""
        if not direct:
            pq.running -= 1
        if self._idle_waiters:
            self._cond.notify_all()
        if pq.paused and pq.buffered <= self._max_buffered // 2 and not pq.dropped:
            pq.paused = False
            return pq.mq
        return None

    def _resume(self, mq: MessageQueue | None) -> None:
        if mq is not None:
            try:
                self._consumer.resume([mq])
            except (ClientClosedError, StoreClosedError):
                pass  # a listener that outlasted shutdown, or the store closed under it

    def _run_concurrent(self, pq: _ProcessQueue, msgs: list[MessageExt]) -> None:
        failure = self._call(msgs)
        if failure is None:
            self._settle(pq, msgs, True)
            return
        left = self._sent_back(pq, msgs, failure)
        if len(left) < len(msgs):
            kept = {id(m) for m in left}
            self._settle(pq, [m for m in msgs if id(m) not in kept], True)
        if left:
            self._settle(pq, left, False, counted=len(left) == len(msgs))

    def _sent_back(self, pq: _ProcessQueue, msgs: list[MessageExt], failure: _Failure) -> list[MessageExt]:
        """Sends a failed batch's messages back to the store (see the module doc); returns
        those that stay with this consumer for local redelivery: all of them when it does not
        send back or the queue was revoked meanwhile (its next owner reads it from the
        committed offset), and each whose send-back failed (logged)."""
        if not self._sends_back or pq.dropped:
            return msgs
        level, kind, text = failure
        store = self._consumer._core
        limit = self._consumer.max_reconsume_times
        left: list[MessageExt] = []
        for m in msgs:
            try:
                try:
                    store.send_back(self.group, m.commit_log_offset, level, limit, kind, text)
                except InvalidMessageError as exc:
                    if level <= 0:
                        raise
                    log.warning("delay level %d refused (%s); the automatic level is used", level, exc)
                    store.send_back(self.group, m.commit_log_offset, 0, limit, kind, text)
            except MQError as exc:
                log.error("sending back %s of %s failed (%s); it is redelivered here", m.msg_id,
                          m.message_queue, exc)
                left.append(m)
        return left

    def _settle(self, pq: _ProcessQueue, msgs: list[MessageExt], ok: bool, *, counted: bool = True) -> None:
        """After a concurrent batch ran: acknowledge it or schedule its redelivery.
        ``counted``: this call ends the batch's run (a batch settled in two parts ends once)."""
        lock = self._lock  # explicit acquire/release: see _LOCKS
        lock.acquire()
        try:
            if ok:
                pq.ack(msgs)
                self._release(pq, msgs)
            else:
                self._retry_later(pq, msgs)
            resume = self._batch_done(pq) if counted else None
        finally:
            lock.release()
        self._resume(resume)

    def _run_orderly(self, pq: _ProcessQueue, batch: list[MessageExt]) -> None:
        while True:
            failure = self._call(batch)
            done = batch
            if failure is not None:
                done = self._orderly_failed(pq, batch, failure)
            elif self._attempt_file is not None:
                self._forget_attempts(pq, batch[-1].queue_offset + 1)
            ok = len(done) == len(batch)
            with self._cond:
                if done:
                    for _ in done:
                        pq.backlog.popleft()
                    pq.ack(done)
                    self._release(pq, done)
                if not ok:
                    pq.suspended_until = time.monotonic() + self._suspend_time
                    heapq.heappush(self._timers, (pq.suspended_until, next(self._seq), pq, None))
                if not ok or pq.dropped or self._state != "running" or not pq.backlog:
                    resume = self._batch_done(pq)  # the queue's one running batch (_take)
                    break
                batch = list(itertools.islice(pq.backlog, self._batch))
        self._resume(resume)


    def _orderly_failed(self, pq: _ProcessQueue, batch: list[MessageExt], failure: _Failure) -> list[MessageExt]:
        """Counts an orderly batch's failure durably (``AttemptFile``) and sends the messages
        at its head that have now failed more than ``max_reconsume_times`` times to the
        dead-letter topic; returns those (the queue moves past them), or [] when the batch is
        to be suspended whole. Without an attempt file (BROADCASTING, ``send_back=False``)
        nothing is counted and the batch is suspended, as always."""
        attempts = self._attempt_file
        if attempts is None or pq.dropped:
            return []
        _, kind, text = failure
        try:
            counts = attempts.failed(pq.mq, [m.queue_offset for m in batch])
        except MQError as exc:
            log.error("counting the failure of %s at offset %d failed (%s); it is suspended uncounted",
                      pq.mq, batch[0].queue_offset, exc)
            return []
        # Counts never grow along a queue's backlog (each failure counts a prefix of it), so
        # the exhausted messages are a prefix of the batch.
        dead: list[MessageExt] = []
        limit = self._consumer.max_reconsume_times
        for m in batch:
            if counts[m.queue_offset] <= limit:
                break
            try:
                self._consumer._core.send_back(self.group, m.commit_log_offset, -1, limit,
                                               kind or None, text or None)
            except MQError as exc:
                log.error("sending %s of %s to the dead-letter topic failed (%s); it is suspended",
                          m.msg_id, pq.mq, exc)
                break
            log.warning("%s of %s failed %d times: sent to %%DLQ%%%s", m.msg_id, pq.mq,
                        counts[m.queue_offset], self.group)
            dead.append(m)
        if dead:
            self._forget_attempts(pq, dead[-1].queue_offset + 1)
        return dead

    def _forget_attempts(self, pq: _ProcessQueue, below: int) -> None:
        """Drops the failure counts of ``pq``'s messages below ``below`` (consumed)."""
        if self._attempt_file is None:
            return
        try:
            self._attempt_file.passed(pq.mq, below)
        except MQError as exc:  # stale counts only: the next failure of the queue drops them
            log.warning("dropping the failure counts of %s failed: %s", pq.mq, exc)


class _Owner:
    """The push consumer as the ``pull.QueueOwner`` of the pull consumer it drives."""

    __slots__ = ("_push",)

    def __init__(self, push: PushConsumer) -> None:
        self._push = push

    def queues_assigned(self, cursors: Mapping[MessageQueue, _core.QueueCursor]) -> None:
        self._push._queues_assigned(cursors)

    def queues_revoked(self, mqs: list[MessageQueue]) -> Mapping[MessageQueue, int]:
        return self._push._queues_revoked(mqs)


def _exc_text(exc: BaseException) -> str:
    """``str(exc)``, or a stand-in when that raises; the store bounds its length."""
    try:
        return str(exc)
    except BaseException:  # noqa: BLE001 - an exception's __str__ is the listener's code
        return f"(the {type(exc).__qualname__}'s str() raised)"


def _describe(obj: object) -> str:
    """``repr(obj)`` cut to 100 characters for a log line, or its type's name when repr raises
    (a listener's return value: its repr is the listener's code)."""
    try:
        text = repr(obj)
    except BaseException:  # noqa: BLE001 - a log line must not fail the consuming thread
        return f"a {type(obj).__qualname__} (whose repr raised)"
    return text if len(text) <= 100 else text[:97] + "..."
