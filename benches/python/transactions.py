"""Transactional messages: committed transactions per second with 1 and 10 messages per
transaction, and the cost over plain sends of the same messages.

    python benches/python/transactions.py [--repeat 3] [--json out.json]
    python benches/python/transactions.py --quick      # small sizes, one repetition: checks that it runs

Workloads (each in a fresh store under --workdir, the default open, flush="async"):

- ``plain``: ``--n`` messages (20,000) of 100 bytes with ``Producer.send``: msg/s.
- ``txn x1``: the same messages, one per transaction (``send_message_in_transaction``, the
  listener commits at once): transactions/s and msg/s, and msg/s over the plain rate.
- ``txn x10``: the same messages, ten per transaction (``with producer.transaction()``).

A transaction costs a half append, one op record and a re-put per message, each under the
transactions' gate: expect a fraction of the plain rate. Reported: the median over ``--repeat``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import mqlite
from mqlite import LocalTransactionState

BODY = b"x" * 100


class Commit:
    def execute_local_transaction(self, msg: Any, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


def run(kind: str, n: int, work: Path) -> dict[str, float]:
    path = Path(tempfile.mkdtemp(dir=work)) / "store"
    try:
        with mqlite.open(path) as store:
            store.create_topic("bench", queues=4)
            msg = mqlite.Message("bench", BODY)
            t0 = time.perf_counter()
            if kind == "plain":
                producer = store.producer()
                for _ in range(n):
                    producer.send(msg)
                txns = 0
            else:
                per = 1 if kind == "txn x1" else 10
                tp = mqlite.TransactionProducer(store, "bench", Commit(), check_interval=None)
                txns = n // per
                for _ in range(txns):
                    if per == 1:
                        tp.send_message_in_transaction(msg)
                    else:
                        with tp.transaction() as tx:
                            for _ in range(per):
                                tx.send(msg)
                tp.close()
            elapsed = time.perf_counter() - t0
            sent = n if kind == "plain" else txns * (1 if kind == "txn x1" else 10)
            return {"msg_rate": sent / elapsed, "txn_rate": txns / elapsed, "n": sent}
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="n=500, one repetition")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    n, repeat = (500, 1) if args.quick else (args.n, args.repeat)
    work = args.workdir or Path(tempfile.gettempdir())
    kinds = ["plain", "txn x1", "txn x10"]
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    for _ in range(repeat):
        for k in kinds:
            runs[k].append(run(k, n, work))
    med = {k: {f: statistics.median(r[f] for r in runs[k]) for f in ("msg_rate", "txn_rate")} for k in kinds}
    plain = med["plain"]["msg_rate"]
    print("| workload | transactions/s | msg/s | msg/s vs plain send |")
    print("|---|---|---|---|")
    for k in kinds:
        ratio = med[k]["msg_rate"] / plain if plain else 0.0
        print(f"| {k} | {med[k]['txn_rate']:,.0f} | {med[k]['msg_rate']:,.0f} | {ratio:.2f}x |")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "median": med}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
