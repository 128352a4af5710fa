"""Transactional messages: an order service records a payment in its own database and publishes
the "order paid" event together. The event is stored as a half message first, invisible to
consumers; the payment is written; then the event is committed. One payment process crashes
after writing the payment and before committing: its event stays pending until a check-back
(by another member of the producer group) asks the database and commits it. A payment that
failed is rolled back and never published.

Run: python examples/transactions.py [STORE_DIR]   (a temporary directory by default)
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import mqlite
from mqlite import LocalTransactionState, Message

GROUP = "payments"


class Payments:
    """The service's local transaction: a row in its own database, keyed by order id."""

    def __init__(self, db: Path) -> None:
        self.db = sqlite3.connect(db, isolation_level=None)
        self.db.execute("CREATE TABLE IF NOT EXISTS paid (order_id TEXT PRIMARY KEY, amount INT)")

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        order, amount = arg
        if amount <= 0:
            return LocalTransactionState.ROLLBACK_MESSAGE
        self.db.execute("INSERT INTO paid VALUES (?, ?)", (order, amount))
        if order == "o3" and os.environ.get("CRASH_AFTER_PAYMENT"):
            os.kill(os.getpid(), signal.SIGKILL)  # the crash: payment written, event not committed
        return LocalTransactionState.COMMIT_MESSAGE

    def check_local_transaction(self, msg: mqlite.MessageExt) -> LocalTransactionState:
        row = self.db.execute("SELECT 1 FROM paid WHERE order_id = ?", (msg.keys[0],)).fetchone()
        return LocalTransactionState.COMMIT_MESSAGE if row else LocalTransactionState.ROLLBACK_MESSAGE


def pay(store_path: Path, db: Path, orders: list[tuple[str, int]]) -> None:
    with mqlite.open(store_path) as store:
        store.create_topic("orders-paid", queues=2)
        producer = mqlite.TransactionProducer(store, GROUP, Payments(db), check_interval=None)
        for order, amount in orders:
            msg = Message("orders-paid", f"{order} paid {amount}".encode(), keys=order)
            r = producer.send_message_in_transaction(msg, (order, amount), transaction_id=f"pay-{order}")
            print(f"{order}: {r.local_state.name}")
        producer.close()


def main(path: Path) -> int:
    db = path.parent / "payments.db"
    pay(path, db, [("o1", 30), ("o2", 0)])
    # A second payment process that dies inside o3's local transaction.
    child = subprocess.run(
        [sys.executable, __file__, str(path), "--child"],
        env={**os.environ, "CRASH_AFTER_PAYMENT": "1"}, check=False, capture_output=True, text=True,
    )
    print(f"payment process for o3 killed: {child.returncode == -signal.SIGKILL}")
    with mqlite.open(path) as store:
        # Another member of the group comes up; its check-back resolves o3 from the database.
        producer = mqlite.TransactionProducer(store, GROUP, Payments(db), check_timeout=0, check_interval=None)
        print("pending:", [(t.id, t.checks) for t in producer.pending()])
        checked = producer.check_now()
        print(f"check-back resolved {checked}; pending now: {producer.pending()}")
        events = []
        for q in range(2):
            events += [m.body.decode() for m in store.read(mqlite.MessageQueue("orders-paid", q), 0)]
        producer.close()
    print("events published:", sorted(events))
    ok = sorted(events) == ["o1 paid 30", "o3 paid 45"]
    print(f"check-back committed order o3 and o2 was never published: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    if "--child" in sys.argv:
        pay(Path(sys.argv[1]), Path(sys.argv[1]).parent / "payments.db", [("o3", 45)])
        sys.exit(0)
    if len(sys.argv) > 1:
        sys.exit(main(Path(sys.argv[1])))
    with tempfile.TemporaryDirectory() as d:
        sys.exit(main(Path(d) / "store"))
