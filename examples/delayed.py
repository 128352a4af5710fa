"""Delayed delivery with exact cancel: each new order schedules its own auto-cancel message,
due a little later; paying the order cancels that message by the order's key, so only the unpaid
orders are cancelled when their time comes. One customer asks for more time: their timer is
moved (rescheduled), not replaced.

Run: python examples/delayed.py [STORE_DIR]   (a temporary directory by default)
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import mqlite
from mqlite import ConsumeFromWhere, Message, TimerOutcome

PAY_WITHIN = 3.0  # seconds an order may stay unpaid (minutes in real life)


def main(path: Path) -> int:
    with mqlite.open(path) as store:
        store.create_topic("order-timeouts", queues=1)
        producer = store.producer()
        orders = [f"o{n}" for n in range(1, 7)]
        for order in orders:
            # The auto-cancel message, keyed by the order, delivered PAY_WITHIN seconds from now.
            producer.send(Message("order-timeouts", order.encode(), keys=order, delay=PAY_WITHIN))
        print(f"{store.pending_timers()} auto-cancels pending, the first due at "
              f"{store.list_timers(limit=1)[0].deliver_at:%H:%M:%S} UTC")

        # o1, o3 and o5 are paid in time: their auto-cancel is cancelled, exactly.
        for order in ("o1", "o3", "o5"):
            [change] = store.cancel_timer(key=order, topic="order-timeouts")
            print(f"{order} paid: its auto-cancel is {change.outcome.value}")
        # o6's customer gets ten more minutes: the same timer, moved.
        [moved] = store.reschedule_timer(key="o6", topic="order-timeouts", delay=600)
        assert moved.timer is not None
        print(f"o6 extended: {moved.outcome.value}, now due at {moved.timer.deliver_at:%H:%M} UTC")

        # The auto-cancel worker: whatever arrives is an unpaid order whose time is up.
        cancelled: list[str] = []
        with store.pull_consumer("order-janitor",
                                 consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) as janitor:
            janitor.subscribe("order-timeouts")
            deadline = time.monotonic() + 60
            while len(cancelled) < 2 and time.monotonic() < deadline:
                cancelled += [m.body.decode() for m in janitor.poll(1.0)]
        print(f"auto-cancelled {len(cancelled)} unpaid orders: {', '.join(sorted(cancelled))}")

        # Paying too late: the answer says the auto-cancel already went.
        [late] = store.cancel_timer(key="o2", topic="order-timeouts")
        print(f"o2 paid too late: its auto-cancel was {late.outcome.value}")
        left = [t.keys[0] for t in store.list_timers(topic="order-timeouts")]
        print(f"still pending: {left}")
        ok = (sorted(cancelled) == ["o2", "o4"] and late.outcome is TimerOutcome.ALREADY_DELIVERED
              and left == ["o6"])
        return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(main(Path(sys.argv[1])))
    with tempfile.TemporaryDirectory() as tmp:
        sys.exit(main(Path(tmp) / "store"))
