"""Plain helpers shared by the test modules."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import mqlite

# Small files so tests can roll commit-log and consume-queue files quickly.
SMALL_FILES: dict[str, Any] = {
    "commit_log_file_size": 1 << 20,
    "consume_queue_file_units": 1000,
    "max_message_size": 64 * 1024,
}


def read_all(store: mqlite.Store, mq: mqlite.MessageQueue, **kw: Any) -> list[mqlite.MessageExt]:
    """Every message of one queue, following ``next_offset``."""
    low, high = store.offsets(mq)
    out: list[mqlite.MessageExt] = []
    offset = low
    while offset < high:
        result = store.read_result(mq, offset, 32, **kw)
        out.extend(result.messages)
        assert result.next_offset > offset, result.status
        offset = result.next_offset
    return out


def snapshot(store: mqlite.Store) -> dict[object, object]:
    """Topic names and every queue's (min, max) offsets: what a failed call must leave unchanged."""
    snap: dict[object, object] = {"topics": [t.name for t in store.topics()]}
    for topic in store.topics():
        for mq in store.queues(topic.name):
            snap[mq] = store.offsets(mq)
    return snap


def wait_until(cond: Callable[[], object], timeout: float = 10.0, what: str = "the condition") -> None:
    """Returns once ``cond()`` is true: an event another thread or process sets. ``timeout`` is a
    generous upper bound for a loaded machine, never the thing tested; passing it fails."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)  # a poll of the condition, not a guess at how long it takes


class WatchedLock:
    """A ``threading.Lock`` that records a thread waiting for it: ``contended`` is set when an
    acquire finds the lock held and starts to wait. A test swaps it in for a lock of the code
    under test to see, without a sleep, that a thread reached the point where it must wait."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.contended = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(False):
            return True
        if not blocking:
            return False
        self.contended.set()
        return self._lock.acquire(True, timeout)

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
