"""Verify throughput: how fast ``mqlite.verify`` reads a store, in GB/s of store bytes.

Workload: a store of --mb megabytes of commit log (default 256) written with ``send_batch`` of
--size-byte bodies (default 1024) over --queues queues of one topic, closed. Then ``verify`` runs
--repeat times (default 5); reported: bytes scanned (commit log and consume queues), records,
and the median and best GB/s. A cold page cache is not forced: the first run reads from the
disk, later ones mostly from memory; both figures are printed (first run, median of the rest).
The machine's sequential read floor is the same run's ``cat``-like read of every file.

    python benches/python/verify.py
    python benches/python/verify.py --mb 1024 --size 4096 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import mqlite
from mqlite import Message


def build(path: Path, mb: int, size: int, queues: int) -> None:
    body = bytes(range(256)) * (size // 256 + 1)
    with mqlite.open(path, flush="async") as s:
        s.create_topic("bench", queues)
        p = s.producer()
        batch = [Message("bench", body[:size], keys=[f"k{i}"]) for i in range(64)]
        written = 0
        while written < mb << 20:
            p.send_batch(batch)
            written += 64 * (size + 150)


def read_floor(path: Path) -> float:
    n = 0
    t = time.perf_counter()
    for root, _, files in os.walk(path):
        for name in files:
            with open(Path(root) / name, "rb") as f:
                while chunk := f.read(1 << 20):
                    n += len(chunk)
    return n / (time.perf_counter() - t) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="mqlite-verify-bench-"))
    try:
        store = base / "store"
        build(store, args.mb, args.size, args.queues)
        rates: list[float] = []
        report = None
        for _ in range(args.repeat):
            t = time.perf_counter()
            report = mqlite.verify(store)
            rates.append(report.bytes_scanned / (time.perf_counter() - t) / 1e9)
            assert report.ok, report.damage
        assert report is not None
        floor = read_floor(store)
        out = {
            "bytes_scanned": report.bytes_scanned,
            "records": report.records,
            "first_gb_s": round(rates[0], 3),
            "median_gb_s": round(statistics.median(rates[1:] or rates), 3),
            "best_gb_s": round(max(rates), 3),
            "read_floor_gb_s": round(floor, 3),
        }
        print(json.dumps(out, indent=2))
        if args.json:
            args.json.write_text(json.dumps(out, indent=2))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
