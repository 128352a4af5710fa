#!/usr/bin/env python3
"""Time of a process's first transaction call on a store with a long commit log.

Builds a store holding ``--mib`` MiB of plain messages with one committed transaction at the
start and one at the end, closes it (the close leaves ``config/transactions.json``), then
reopens it in fresh interpreters and times the first ``TransactionProducer.progress()`` call:
with the snapshot (the call walks only the log past its offset), and without it (the snapshot
and its ``.bak`` removed: the call walks the whole log, as a store without a snapshot does).

    python benches/python/txn_first_call.py --mib 1024 [--runs 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import mqlite
from mqlite import Message

CHILD = """
import sys, time, mqlite
class L:
    def execute_local_transaction(self, msg, arg): return mqlite.LocalTransactionState.COMMIT_MESSAGE
    def check_local_transaction(self, msg): return mqlite.LocalTransactionState.COMMIT_MESSAGE
store = mqlite.open(sys.argv[1])
p = mqlite.TransactionProducer(store, "bench", L(), check_interval=None)
t = time.perf_counter()
value = p.progress("k")
print((time.perf_counter() - t) * 1000)
assert value == "end", value
p.close()
store.close()
"""


class Listener:
    def execute_local_transaction(self, msg: Message, arg: object) -> mqlite.LocalTransactionState:
        return mqlite.LocalTransactionState.COMMIT_MESSAGE

    def check_local_transaction(self, msg: Message) -> mqlite.LocalTransactionState:
        return mqlite.LocalTransactionState.COMMIT_MESSAGE


def build(path: str, mib: int) -> None:
    with mqlite.open(path) as store:
        store.create_topic("bench", 1)
        p = mqlite.TransactionProducer(store, "bench", Listener(), check_interval=None)
        with p.transaction("first") as tx:
            tx.send(Message("bench", b"first"))
        p.commit(["first"], progress=("k", "start"))
        body = b"x" * 1024
        for _ in range(mib):
            p.send_batch([body] * 1000, topic="bench")
        with p.transaction("last") as tx:
            tx.send(Message("bench", b"last"))
        p.commit(["last"], progress=("k", "end"))
        p.close()


def first_call_ms(path: str, runs: int, drop_snapshot: bool) -> list[float]:
    out = []
    for _ in range(runs):
        if drop_snapshot:
            for name in ("transactions.json", "transactions.json.bak"):
                try:
                    os.remove(os.path.join(path, "config", name))
                except FileNotFoundError:
                    pass
        done = subprocess.run([sys.executable, "-c", CHILD, path], capture_output=True, text=True, check=True)
        out.append(float(done.stdout.strip()))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=1024, help="MiB of plain messages in the log")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "store")
        t = time.perf_counter()
        build(path, args.mib)
        built_s = time.perf_counter() - t
        with_snapshot = first_call_ms(path, args.runs, drop_snapshot=False)
        without = first_call_ms(path, args.runs, drop_snapshot=True)
    result = {
        "log_mib": args.mib,
        "build_s": round(built_s, 1),
        "first_call_with_snapshot_ms": round(statistics.median(with_snapshot), 1),
        "first_call_without_snapshot_ms": round(statistics.median(without), 1),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
