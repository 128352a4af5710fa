"""Completion of asynchronous sends: ``SendFuture`` and the per-store completion thread.

This module knows nothing of ``Store`` or ``Producer``: the thread reaches the native store
through the weak reference it is given, and a producer only counts its pending sends in a
``Tally``.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from mqlite import _core
from mqlite.errors import StoreClosedError, StoreUsedAfterForkError
from mqlite.message import SendResult

__all__ = ["Completer", "SendCallback", "SendFuture", "Tally"]

log = logging.getLogger("mqlite.producer")

SendCallback = Callable[[SendResult | None, BaseException | None], None]
"""Called as ``callback(result, None)`` or ``callback(None, exc)`` when an async send ends."""


class SendFuture(Future):  # type: ignore[type-arg]
    """The ``concurrent.futures.Future`` of an async send.

    A plain ``Future`` (``super().__init__()``; completed with ``set_result`` and
    ``set_exception`` only, so ``wait()``, ``as_completed()`` and ``add_done_callback`` work as
    the standard library documents them) with two differences:

    - it starts RUNNING: the message is appended before ``send_async`` returns, so a send
      cannot be cancelled (``cancel()`` returns False);
    - in a forked child, ``result``/``exception`` of a future still pending at the fork raise
      StoreUsedAfterForkError instead of waiting: only the parent's completion thread would
      complete it.
    """

    def __init__(self, completer: Completer) -> None:
        super().__init__()
        self._completer = completer
        self.set_running_or_notify_cancel()

    def result(self, timeout: float | None = None) -> SendResult:
        if not self.done():
            self._completer.check_not_forked()
        outcome: SendResult = super().result(timeout)
        return outcome

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self.done():
            self._completer.check_not_forked()
        return super().exception(timeout)


class Tally:
    """A producer's async sends not yet completed (guarded by the completer's condition)."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending = 0


Item = tuple[SendFuture, "SendCallback | None", "SendResult | None", "BaseException | None", Tally]
"""An appended send: its future, callback, result or error, and its producer's tally."""


def _complete(fut: SendFuture, callback: SendCallback | None, result: SendResult | None,
              error: BaseException | None) -> None:
    """Resolves ``fut`` (which runs its done-callbacks), then runs the send callback; a failing
    callback is logged, never propagated into the completion thread."""
    if error is None:
        fut.set_result(result)
    else:
        fut.set_exception(error)
    if callback is not None:
        try:
            callback(result, error)
        except Exception:
            log.exception("send callback failed")


class Completer:
    """One thread per store that completes async sends in call order.

    The caller's thread appends; this thread then waits for the disk once for everything queued
    meanwhile by every producer of the store (sync-flush stores: one group commit for all of
    them), then resolves those futures and runs the callbacks, in call order.

    ``core`` returns the native store, or None once it is gone; the thread holds nothing that
    keeps the store alive.
    """

    def __init__(self, core: Callable[[], _core.Store | None], sync: bool) -> None:
        self._core = core
        self._sync = sync
        self._queue: queue.SimpleQueue[Item | None] = queue.SimpleQueue()
        # Guards the tallies and the stopped flag; ``flush`` waits on it. This module's own code
        # takes the lock directly (``with self._lock``: no Python-level __enter__/__exit__).
        self._lock = threading.Lock()
        self.cond = threading.Condition(self._lock)
        # Set in a forked child (see ``after_fork``): the reason waits there raise.
        self._forked: str | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="mqlite-async-send", daemon=True)
        self._thread.start()

    def check_not_forked(self) -> None:
        """StoreUsedAfterForkError in a forked child: nothing there completes a send."""
        if self._forked is not None:
            raise StoreUsedAfterForkError(self._forked)

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
        _complete(fut, callback, result, error)

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
            for fut, callback, result, error, _ in items:
                if error is None and failure is not None:
                    result, error = None, failure
                elif result is not None and not durable:
                    result = result._timed_out()
                _complete(fut, callback, result, error)
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
        self.check_not_forked()
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
        self._forked = reason
        self._stopped = True

    def stop(self, join: bool = True) -> None:
        """Completes every send queued before it, then ends the thread."""
        with self._lock:
            if not self._stopped:
                self._stopped = True
                self._queue.put(None)
        if join and threading.current_thread() is not self._thread:
            self._thread.join()
