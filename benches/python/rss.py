#!/usr/bin/env python3
"""Resident memory of a process consuming a big mqlite store.

In this process: produce --mib MiB of --size byte bodies with Producer.send_batch (batches of
1000, one topic of 4 queues, flush="async") into a fresh store under --dir, close it, reopen it,
then consume everything with one PullConsumer (CONSUME_FROM_FIRST_OFFSET, poll(max_messages=256)),
touching every body (len and first byte).  VmRSS, RssAnon and RssFile are read from
/proc/self/status after the reopen and then every --every MiB of bodies consumed.  The store is
deleted at the end unless --keep is given.

Prints progress to stderr and, with --json, writes the result there ("-" = stdout).

    python benches/python/rss.py --mib 2048 --dir /work/bench-rss --json -
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Dict, List, Optional

TOPIC = "rss"
BATCH = 1000


def proc_status() -> Dict[str, int]:
    """VmRSS, RssAnon, RssFile, RssShmem and VmHWM of this process, in KiB (Linux only)."""
    out: Dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
                    out[key] = int(rest.split()[0])
    except OSError:
        pass
    return out


def run(mib: int, size: int, every_mib: int, base: str, keep: bool = False,
        log=print) -> dict:
    import mqlite

    target = mib << 20
    n = max(BATCH, target // size // BATCH * BATCH)
    work = tempfile.mkdtemp(prefix="mqlite-rss-", dir=base)
    path = os.path.join(work, "store")
    res: dict = {"mib": mib, "size": size, "messages": n, "body_bytes": n * size,
                 "every_mib": every_mib, "store_dir_parent": base}
    try:
        # ---- produce
        blob = os.urandom(BATCH * size)
        bodies = [blob[i * size:(i + 1) * size] for i in range(BATCH)]
        res["rss_before_produce_kib"] = proc_status().get("VmRSS")
        t0 = time.perf_counter()
        store = mqlite.open(path, flush="async")
        try:
            store.create_topic(TOPIC, queues=4)
            send_batch = store.producer().send_batch
            for i in range(n // BATCH):
                send_batch(bodies, topic=TOPIC)
                if i % 256 == 255:
                    log(f"  produced {(i + 1) * BATCH * size >> 20} MiB")
            res["rss_after_produce_kib"] = proc_status().get("VmRSS")
        finally:
            store.close()
        res["produce_s"] = time.perf_counter() - t0
        # Store.close() alone keeps the mappings resident until the Store object is freed
        # (measured on this build): drop every reference so the consume phase starts clean.
        res["rss_after_close_kib"] = proc_status().get("VmRSS")
        del bodies, blob, send_batch, store
        gc.collect()
        res["rss_after_release_kib"] = proc_status().get("VmRSS")

        # ---- reopen and consume
        t0 = time.perf_counter()
        store = mqlite.open(path, flush="async")
        res["reopen_ms"] = (time.perf_counter() - t0) * 1e3
        series: List[dict] = []
        try:
            consumer = store.pull_consumer(
                "rss", consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
            consumer.subscribe(TOPIC)
            start = proc_status()
            series.append({"consumed_mib": 0.0, **start})
            step = every_mib << 20
            next_sample = step
            consumed = 0
            count = 0
            acc = 0
            t0 = time.perf_counter()
            while count < n:
                msgs = consumer.poll(2.0, 256)
                if not msgs:
                    raise RuntimeError(f"poll returned nothing after {count} of {n} messages")
                for m in msgs:
                    b = m.body
                    consumed += len(b)
                    acc ^= b[0]
                count += len(msgs)
                if consumed >= next_sample:
                    st = proc_status()
                    series.append({"consumed_mib": consumed / 2**20, **st})
                    next_sample += step
                    log(f"  consumed {consumed >> 20} MiB, VmRSS {st.get('VmRSS', 0) >> 10} MiB")
            res["consume_s"] = time.perf_counter() - t0
            end = proc_status()
            if series[-1]["consumed_mib"] != consumed / 2**20:
                series.append({"consumed_mib": consumed / 2**20, **end})
            consumer.close()
        finally:
            store.close()
        res["rss_after_store_close_kib"] = proc_status().get("VmRSS")
        del consumer, store
        gc.collect()
        res["rss_after_release_end_kib"] = proc_status().get("VmRSS")
        res["consumed_messages"] = count
        res["consumed_bytes"] = consumed
        res["series"] = series
        rss = [p["VmRSS"] for p in series if "VmRSS" in p]
        res["rss_start_kib"] = rss[0] if rss else None
        res["rss_max_kib"] = max(rss) if rss else None
        res["rss_end_kib"] = rss[-1] if rss else None
        res["touch_xor"] = acc
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return res


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=2048, help="MiB of bodies to produce")
    ap.add_argument("--size", type=int, default=1024, help="body bytes")
    ap.add_argument("--every", type=int, default=100, help="sample VmRSS every this many MiB")
    ap.add_argument("--dir", default=".", help="parent directory of the temporary store")
    ap.add_argument("--keep", action="store_true", help="keep the store")
    ap.add_argument("--json", default="", help="write the result here ('-' = stdout)")
    args = ap.parse_args(argv)
    if args.mib < 1 or args.size < 1 or args.every < 1:
        ap.error("--mib, --size and --every must be positive")
    os.makedirs(args.dir, exist_ok=True)
    res = run(args.mib, args.size, args.every, args.dir, args.keep,
              log=lambda s: print(s, file=sys.stderr, flush=True))
    kib = 1024
    print(f"RSS while consuming {res['consumed_bytes'] >> 20} MiB: start "
          f"{res['rss_start_kib'] // kib} MiB, max {res['rss_max_kib'] // kib} MiB, end "
          f"{res['rss_end_kib'] // kib} MiB", file=sys.stderr)
    if args.json == "-":
        print(json.dumps(res))
    elif args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
