"""Several producer processes sending to one store (the default shared open, docs/design-many-writers.md).

    python benches/python/writers.py [--n 50000] [--size 128] [--repeat 3] [--json out.json]
    python benches/python/writers.py --smoke      # tiny: checks that it runs

Each row starts its producer processes (fresh interpreters; the store and its topic made
beforehand by this process, which then closes it), lets them import and open, then releases
them together; each sends ``--n`` messages of ``--size`` bytes with ``send`` over 4 queues and
reports when it started and ended (CLOCK_MONOTONIC, one clock for every process) and the
latency of each send. Rows:

- ``exclusive x1``: one process opened ``exclusive=True`` (the single writer);
- ``shared x1``, ``shared x2``, ``shared x4``: 1, 2 and 4 processes, the default open;
- ``shared x4 sync``: 4 processes with ``shared=True, flush="sync"`` (``--n`` / 10 each).

Reported per row (the median over ``--repeat`` runs, rows interleaved within each repetition):
the aggregate rate (every process's messages over the span from the first start to the last
end), its ratio to ``shared x1`` (and ``shared x1`` to ``exclusive x1``), and the p50 and p99
of one send, the worst process's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any

import mqlite

QUEUES = 4

CHILD = r"""
import json, sys, time
import mqlite
from mqlite import Message
path, n, size, shared, flush = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
store = mqlite.open(path, shared=shared, flush=flush, **({"wait": 30.0} if shared else {}))
producer = store.producer()
msgs = [Message("w", bytes(size)) for _ in range(64)]
lat = [0] * n
print("ready", flush=True)
sys.stdin.readline()
clock = time.perf_counter_ns
t0 = clock()
for i in range(n):
    a = clock()
    producer.send(msgs[i & 63], queue_id=i % 4)
    lat[i] = clock() - a
t1 = clock()
lat.sort()
print(json.dumps({"start": t0, "end": t1, "n": n, "p50_us": lat[n // 2] / 1e3,
                  "p99_us": lat[min(n - 1, int(n * 0.99))] / 1e3}), flush=True)
store.close()
"""

ROWS = [  # name, processes, shared, flush, share of --n per process
    ("exclusive x1", 1, False, "async", 1.0),
    ("shared x1", 1, True, "async", 1.0),
    ("shared x2", 2, True, "async", 1.0),
    ("shared x4", 4, True, "async", 1.0),
    ("shared x4 sync", 4, True, "sync", 0.1),
]


def run_row(work: str, procs: int, shared: bool, flush: str, n: int, size: int) -> dict[str, Any]:
    path = tempfile.mkdtemp(prefix="w-", dir=work) + "/store"
    with mqlite.open(path) as store:
        store.create_topic("w", QUEUES)
    children = [
        subprocess.Popen([sys.executable, "-c", CHILD, path, str(n), str(size), str(int(shared)), flush],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(procs)
    ]
    try:
        for c in children:
            assert c.stdout is not None and c.stdout.readline().strip() == "ready"
        for c in children:
            assert c.stdin is not None
            c.stdin.write("go\n")
            c.stdin.flush()
        results = []
        for c in children:
            assert c.stdout is not None
            results.append(json.loads(c.stdout.readline()))
            if c.wait(timeout=600) != 0:
                raise RuntimeError(f"a producer process failed with {c.returncode}")
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.wait()
    span = (max(r["end"] for r in results) - min(r["start"] for r in results)) / 1e9
    shutil.rmtree(path.rsplit("/", 1)[0], ignore_errors=True)
    return {
        "rate": sum(r["n"] for r in results) / span,
        "p50_us": max(r["p50_us"] for r in results),
        "p99_us": max(r["p99_us"] for r in results),
        "per_process": results,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=50_000, help="messages per process (sync rows: a tenth)")
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition")
    args = ap.parse_args(argv)
    if args.smoke:
        args.n, args.repeat = 500, 1
    work = tempfile.mkdtemp(prefix="mqlite-writers-", dir=args.workdir)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in ROWS}
    try:
        for rep in range(args.repeat):
            for name, procs, shared, flush, share in ROWS:
                r = run_row(work, procs, shared, flush, max(1, int(args.n * share)), args.size)
                runs[name].append(r)
                print(f"[{rep + 1}/{args.repeat}] {name}: {r['rate']:,.0f} msg/s, "
                      f"p50 {r['p50_us']:.1f} us, p99 {r['p99_us']:.1f} us", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows: dict[str, dict[str, float]] = {}
    for name in runs:
        rows[name] = {k: statistics.median(r[k] for r in runs[name]) for k in ("rate", "p50_us", "p99_us")}
    one = rows["shared x1"]["rate"]
    for name, row in rows.items():
        row["ratio"] = row["rate"] / (rows["exclusive x1"]["rate"] if name == "shared x1" else one)
    print(f"| {args.size} B, send() | processes | msg/s (all) | ratio | p50 us | p99 us |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, procs, *_ in ROWS:
        row = rows[name]
        against = "to exclusive x1" if name == "shared x1" else "to shared x1"
        print(f"| {name} | {procs} | {row['rate']:,.0f} | {row['ratio']:.2f} {against} | "
              f"{row['p50_us']:.1f} | {row['p99_us']:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows, "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
