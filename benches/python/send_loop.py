#!/usr/bin/env python3
"""The single-send hot path alone: 200,000 ``Producer.send(Message)`` of 128-byte bodies into a
fresh store, Python's garbage collector off, best of 3 runs, in millions of sends per second.

Small and quick enough to bisect a regression across builds: install each build into its own
virtual environment and run this script with each interpreter in turn, several times,
interleaved (this VM's speed drifts by more than the differences looked for).

    python benches/python/send_loop.py [--n 200000] [--runs 3]
"""

from __future__ import annotations

import argparse
import gc
import shutil
import tempfile
import time

import mqlite


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000, help="sends per run")
    ap.add_argument("--runs", type=int, default=3, help="runs; the best is printed")
    args = ap.parse_args()
    rates = []
    for _ in range(args.runs):
        d = tempfile.mkdtemp(prefix="mqlite-send-loop-")
        try:
            store = mqlite.open(d)
            store.create_topic("t", 4)
            producer = store.producer()
            msgs = [mqlite.Message("t", b"x" * 128) for _ in range(args.n)]
            gc.disable()
            t = time.perf_counter()
            for m in msgs:
                producer.send(m)
            elapsed = time.perf_counter() - t
            gc.enable()
            store.close()
        finally:
            shutil.rmtree(d, ignore_errors=True)
        rates.append(args.n / elapsed)
    print(f"{max(rates) / 1e6:.3f}")


if __name__ == "__main__":
    main()
