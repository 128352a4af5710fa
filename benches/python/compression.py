"""Body compression from Python: what each codec costs and saves on one workload, in one run.

Workload: N messages (default 20,000) whose bodies are JSON event arrays of --size bytes
(default 4096; compressible text, as application payloads are), each sent with
``Producer.send`` and read back with ``PullConsumer.poll`` reading every body. Rows: no
compression (the baseline of the same run), then ``compress_over=1024`` with zlib, lz4 and zstd at
RocketMQ's default level 5. Reported: send msg/s, poll-and-read-body msg/s, commit-log bytes per
message, each the median of --repeat runs (flush mode async).

    python benches/python/compression.py
    python benches/python/compression.py --n 50000 --size 16384 --json out.json
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

CODECS: list[str | None] = [None, "zlib", "lz4", "zstd"]


def make_body(size: int, seed: int) -> bytes:
    out = b"["
    i = seed
    while len(out) < size:
        event = {"event": ("view", "click", "buy")[i % 3], "user": 1000 + i * 7 % 997,
                 "path": f"/products/{i * 13 % 401}", "ts": 1_700_000_000_000 + i}
        out += json.dumps(event).encode() + b","
        i += 1
    return out[:size]


def one_run(mqlite: Any, base: Path, codec: str | None, bodies: list[bytes]) -> dict[str, float]:
    n = len(bodies)
    with mqlite.open(base / f"store-{codec}") as store:
        store.create_topic("bench", queues=1)
        producer = (store.producer() if codec is None
                    else store.producer(compress_over=1024, compression=codec))
        msgs = [mqlite.Message("bench", b) for b in bodies]
        t = time.perf_counter()
        for m in msgs:
            producer.send(m, queue_id=0)
        send_s = time.perf_counter() - t
        stored = store.stats()["commit_log_max_offset"] / n
        consumer = store.pull_consumer("bench", consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe("bench")
        got = 0
        t = time.perf_counter()
        while got < n:
            batch = consumer.poll(5.0, 256)
            if not batch:
                raise RuntimeError(f"only {got} of {n} messages came back")
            for m in batch:
                got += len(m.body) > 0
        poll_s = time.perf_counter() - t
        consumer.close()
    # Deleted at once: its page-cache pages are then reused by the next run rather than new
    # ones taken (which on a VM can mean a host page fault each), alike for every row.
    shutil.rmtree(base / f"store-{codec}")
    return {"send": n / send_s, "poll": n / poll_s, "bytes": stored}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    import mqlite

    distinct = [make_body(args.size, seed) for seed in range(64)]
    bodies = [distinct[i % 64] for i in range(args.n)]
    runs: dict[str, list[dict[str, float]]] = {str(c): [] for c in CODECS}
    with tempfile.TemporaryDirectory(prefix="mqlite-compression-") as tmp:
        for rep in range(args.repeat):
            for codec in CODECS:  # interleaved, so drift hits every row alike
                runs[str(codec)].append(one_run(mqlite, Path(tmp) / str(rep), codec, bodies))
    rows = []
    base = {k: statistics.median(r[k] for r in runs["None"]) for k in ("send", "poll", "bytes")}
    for codec in CODECS:
        med = {k: statistics.median(r[k] for r in runs[str(codec)]) for k in ("send", "poll", "bytes")}
        rows.append({"codec": codec or "none", **med,
                     "send_ratio": med["send"] / base["send"], "poll_ratio": med["poll"] / base["poll"],
                     "bytes_ratio": med["bytes"] / base["bytes"]})
    print(f"{args.n} messages of {args.size} B JSON, median of {args.repeat}, flush async")
    print(f"{'codec':6} {'send msg/s':>12} {'vs none':>8} {'poll msg/s':>12} {'vs none':>8} "
          f"{'log B/msg':>10} {'vs none':>8}")
    for r in rows:
        print(f"{r['codec']:6} {r['send']:12,.0f} {r['send_ratio']:7.2f}x {r['poll']:12,.0f} "
              f"{r['poll_ratio']:7.2f}x {r['bytes']:10,.0f} {r['bytes_ratio']:7.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
