"""The watch on ``max_poll_interval`` (Kafka's ``max.poll.interval.ms``): one daemon thread,
``mqlite-poll-watch``, for every consumer of the process that has the option set, tells a
consumer that has not polled for that long to give its queues up (``Watched.poll_overdue``).

Invariants
- The thread holds only weak references: a consumer dropped without ``close`` is forgotten.
- It runs only while some consumer is watched, and ends when none is left; ``watch`` starts it
  again.
- It decides nothing itself: the consumer checks, under its own lock, whether it is still
  overdue (a poll may have started meanwhile) and gives up at most once per silence.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Protocol

__all__ = ["Watched", "watch"]

log = logging.getLogger("mqlite.consumer")

_IDLE = 1.0  # s: longest sleep, so a consumer's changed deadline is seen within it


class Watched(Protocol):
    def poll_deadline(self) -> float | None:
        """``time.monotonic()`` by which the consumer must poll, or None (polling now, given
        up already, closed, or nothing to give up)."""

    def poll_overdue(self) -> None:
        """The deadline passed: give the queues up if that is still so."""


_lock = threading.Lock()
_watched: weakref.WeakSet[Watched] = weakref.WeakSet()
_thread: threading.Thread | None = None


def watch(consumer: Watched) -> None:
    """Watch ``consumer`` until it is garbage (its deadline None while closed)."""
    global _thread
    with _lock:
        _watched.add(consumer)
        if _thread is None:
            _thread = threading.Thread(target=_run, name="mqlite-poll-watch", daemon=True)
            _thread.start()


def unwatch(consumer: Watched) -> None:
    with _lock:
        _watched.discard(consumer)


def _run() -> None:
    global _thread
    while True:
        with _lock:
            consumers = list(_watched)
            if not consumers:
                _thread = None
                return
        now = time.monotonic()
        wait = _IDLE
        for c in consumers:
            try:
                deadline = c.poll_deadline()
                if deadline is None:
                    continue
                if deadline <= now:
                    c.poll_overdue()
                else:
                    wait = min(wait, deadline - now)
            except Exception:  # noqa: BLE001 - the watch goes on for the other consumers
                log.exception("max_poll_interval check of %r failed", c)
        del consumers
        time.sleep(max(wait, 0.001))  # the next deadline: a timer, not a synchronisation
