"""Tools for testing programs that use mqlite.

``ManualClock`` is a clock that moves only when told to. A store opened with
``mqlite.open(path, clock=ManualClock(start_ms))`` reads its time from it: store timestamps,
the due time of delayed and timer messages, retry delays, retention age. After moving the
clock, ``Store.deliver_due()`` delivers what became due, so a test of scheduled delivery
checks "not before its time, once after it" without waiting::

    clock = ManualClock(1_700_000_000_000)
    with mqlite.open(path, clock=clock, exclusive=True) as store:
        store.producer().send(Message("t", b"x", delay=60))
        clock.advance_ms(60_000)
        store.deliver_due()

The clock lives in this process: another process opening the same store reads its own clock.
Waits (a poll's timeout, ``wait=``) stay on real time."""

from __future__ import annotations

from mqlite._core import ManualClock

__all__ = ["ManualClock"]
