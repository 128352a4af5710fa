"""Completion of asynchronous sends: ``SendFuture`` and the per-store completion thread.

This module knows nothing of ``Store`` or ``Producer``: the thread reaches the native store
through the callable it is given, and a producer only counts its pending sends in a ``Tally``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FuturesTimeout
from concurrent.futures._base import FINISHED as _FINISHED
from concurrent.futures._base import RUNNING as _RUNNING
from typing import Any

from mqlite import _core
from mqlite.errors import StoreClosedError, StoreUsedAfterForkError
from mqlite.message import SendResult

__all__ = ["Completer", "CompletionCondition", "SendCallback", "SendFuture", "Tally"]

log = logging.getLogger("mqlite.producer")

SendCallback = Callable[[SendResult | None, BaseException | None], None]
"""Called as ``callback(result, None)`` or ``callback(None, exc)`` when an async send ends."""



class CompletionCondition(threading.Condition):
    """The condition of a completion thread and of every future it resolves.

    ``forked`` is set in a forked child (see ``Completer.after_fork``): the thread that would
    complete the futures exists only in the parent, so a wait in the child raises instead."""

    def __init__(self, lock: threading.RLock) -> None:
        super().__init__(lock)
        self.forked: str | None = None

    def check_not_forked(self) -> None:
        """StoreUsedAfterForkError in a forked child: nothing there completes a send."""
        if self.forked is not None:
            raise StoreUsedAfterForkError(self.forked)


class SendFuture(Future):  # type: ignore[type-arg]
    """The ``concurrent.futures.Future`` of an async send.

    It starts RUNNING (the message is appended before ``send_async`` returns, so a send cannot
    be cancelled: ``cancel()`` returns False) and shares its condition with every future the
    same completion thread resolves, which resolves a whole group commit's futures under one
    lock with one notify. ``result``/``exception`` therefore re-check their own state after a
    wake-up until it is theirs or the timeout passes. In a forked child they raise
    StoreUsedAfterForkError for a future still pending at the fork: only the parent completes it.

    Contract with the base class: ``__init__`` does not call ``Future.__init__``, which would
    give every send a condition of its own: a lock, a deque and five bound methods for the
    cycle collector to track per send, and a wake-up per future instead of one per group
    commit, on the path that async sends exist to make fast. It sets instead exactly the attributes
    ``Future.__init__`` sets, with the states of ``concurrent.futures._base``, so that
    ``wait()``, ``as_completed()``, ``add_done_callback`` and ``asyncio.wrap_future`` work on
    it unchanged; ``_finish`` completes it as ``set_result``/``set_exception`` do.
    ``tests/python/test_producer_select.py`` checks both against the running Python, so a
    version that changes them fails there rather than here.
    """

    _condition: CompletionCondition

    def __init__(self, condition: CompletionCondition) -> None:  # no super(): see above
        self._condition = condition
        self._state = _RUNNING
        self._result: SendResult | None = None
        self._exception: BaseException | None = None
        self._waiters: list[Any] = []
        self._done_callbacks: list[Callable[[Future[Any]], object]] = []

    def _wait_finished(self, timeout: float | None) -> None:
        """Waits (condition held) until this future is finished; FuturesTimeout if it is not
        within ``timeout`` seconds."""
        if self._state == _FINISHED:
            return
        if timeout is None:
            while self._state != _FINISHED:
                self._condition.wait()
            return
        deadline = time.monotonic() + timeout
        while self._state != _FINISHED:
            left = deadline - time.monotonic()
            if left <= 0:
                raise FuturesTimeout()
            self._condition.wait(left)

    # A finished future is read without the lock: ``_finish`` sets the outcome before the
    # state, and a finished future never changes again.

    def result(self, timeout: float | None = None) -> SendResult:
        if self._state != _FINISHED:
            self._condition.check_not_forked()
            with self._condition:
                self._wait_finished(timeout)
        if self._exception is not None:
            raise self._exception
        return self._result  # type: ignore[return-value]  # set with the state when no exception

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state != _FINISHED:
            self._condition.check_not_forked()
            with self._condition:
                self._wait_finished(timeout)
        return self._exception

    def _run_done_callbacks(self) -> None:
        """Calls the ``add_done_callback`` functions (after ``_finish``, condition released)."""
        for fn in self._done_callbacks:
            try:
                fn(self)
            except Exception:
                log.exception("exception calling callback for %r", self)

    def _finish(self, result: SendResult | None, error: BaseException | None) -> None:
        """Completes the future (the shared condition held; the caller notifies). The outcome
        is set before the state (see ``result``)."""
        if error is None:
            self._result = result
            self._state = _FINISHED
            for w in self._waiters:
                w.add_result(self)
        else:
            self._exception = error
            self._state = _FINISHED
            for w in self._waiters:
                w.add_exception(self)


def _after_completion(
    fut: SendFuture,
    callback: SendCallback | None,
    result: SendResult | None,
    error: BaseException | None,
) -> None:
    """Runs a completed send's done-callbacks, then its send callback (condition released);
    a failing callback is logged, never propagated into the completion thread."""
    fut._run_done_callbacks()
    if callback is not None:
        try:
            callback(result, error)
        except Exception:
            log.exception("send callback failed")


class Tally:
    """A producer's async sends not yet completed (guarded by the completer's condition)."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending = 0


Item = tuple[SendFuture, "SendCallback | None", "SendResult | None", "BaseException | None", Tally]


class Completer:
    """One thread per store that completes async sends in call order.

    The caller's thread appends (``_send_pipelined``); this thread then waits for the disk once
    for everything queued meanwhile by every producer of the store (sync-flush stores: one
    group commit for all of them), resolves those futures at once and runs the callbacks.

    ``core`` returns the native store, or None once it is gone: the thread keeps nothing alive.
    """

    def __init__(self, core: Callable[[], _core.Store | None], sync: bool) -> None:
        self._core = core
        self._sync = sync
        self._queue: queue.SimpleQueue[Item | None] = queue.SimpleQueue()
        # Re-entrant, as concurrent.futures.wait() takes the condition of every future it
        # watches, which here is this one for all of them. This module's own code takes the
        # lock directly (``with self._lock``: no Python-level __enter__/__exit__ per send).
        self._lock = threading.RLock()
        self.cond = CompletionCondition(self._lock)
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="mqlite-async-send", daemon=True)
        self._thread.start()

    def put(self, item: Item) -> None:
        """Queues an appended send for completion; after ``stop`` (a close racing the send) the
        future fails at once instead of waiting for a thread that is gone."""
        with self._lock:
            if not self._stopped:
                item[4].pending += 1
                self._queue.put(item)  # under the lock: ordered before the stop marker
                return
            fut, callback, result, error, _ = item
            if error is None:
                result, error = None, StoreClosedError(
                    "the store was closed before this send was confirmed (the message may be stored)"
                )
            fut._finish(result, error)
            self.cond.notify_all()
        _after_completion(fut, callback, result, error)

    def _take(self) -> tuple[list[Item], bool]:
        """Everything queued (at least one item, blocking for it); True once told to stop."""
        first = self._queue.get()
        if first is None:
            return [], True
        items = [first]
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return items, False
            if item is None:
                return items, True
            items.append(item)

    def _durable(self, items: list[Item]) -> tuple[bool, BaseException | None]:
        """Waits once for the disk to hold every appended item (sync-flush stores)."""
        if not self._sync:
            return True, None
        end = max((r._end() for _, _, r, _, _ in items if r is not None), default=0)
        if end == 0:
            return True, None
        try:
            # The native store itself, not a liveness check: a closing store refuses new sends
            # before it drains these, and stays open until the drain is over.
            core = self._core()
            if core is None:
                raise StoreClosedError("store was garbage-collected with sends pending")
            return core.wait_durable(end), None
        except BaseException as exc:  # noqa: BLE001 - handed to every future
            return False, exc

    def _run(self) -> None:
        while True:
            items, stop = self._take()
            durable, failure = self._durable(items)
            outcomes: list[tuple[SendResult | None, BaseException | None]] = []
            with self._lock:
                for fut, _, result, error, _ in items:
                    if error is None and failure is not None:
                        result, error = None, failure
                    elif result is not None and not durable:
                        result = result._timed_out()
                    fut._finish(result, error)
                    outcomes.append((result, error))
                self.cond.notify_all()
            for (fut, callback, _, _, _), (result, error) in zip(items, outcomes):
                if callback is not None or fut._done_callbacks:
                    _after_completion(fut, callback, result, error)
            with self._lock:
                for item in items:
                    item[4].pending -= 1
                self.cond.notify_all()
            if stop:
                return

    def flush(self, tally: Tally, timeout: float | None) -> int:
        """Waits until ``tally``'s sends completed (callbacks run); returns how many have not.

        On the completion thread itself (a send callback calling ``flush`` or ``close``) it
        cannot wait, since only this thread completes sends: it returns the count at once."""
        self.cond.check_not_forked()
        with self.cond:
            if threading.current_thread() is not self._thread:
                self.cond.wait_for(lambda: tally.pending == 0, timeout)
            return tally.pending

    def after_fork(self, reason: str) -> None:
        """In a forked child (from the fork handler, before any other code of the child runs):
        the completion thread is the parent's, so waits for its sends raise ``reason`` as a
        StoreUsedAfterForkError and new ones are refused. The lock is reset: the parent's thread
        may have held it at the fork, and it would never be released here."""
        self.cond._at_fork_reinit()  # type: ignore[attr-defined]  # the stdlib's own fork hook
        self.cond.forked = reason
        self._stopped = True

    def stop(self, join: bool = True) -> None:
        with self.cond:
            if not self._stopped:
                self._stopped = True
                self._queue.put(None)
        if join and threading.current_thread() is not self._thread:
            self._thread.join()
