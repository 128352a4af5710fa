"""Cross-process end-to-end latency: the writer sends here, a read-only follower PullConsumer
polls in a child process (a fresh interpreter). Reports the follower's p50/p99 (perf_counter_ns
is CLOCK_MONOTONIC: one clock for both processes) and the CPU an idle follower spends while it
waits one second with nothing arriving.

    python benches/python/xproc.py [--m 4000] [--rate 2000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import mqlite

CHILD = r"""
import json, resource, struct, sys, time
import mqlite
store = mqlite.open(sys.argv[1], read_only=True)
consumer = store.pull_consumer("x", consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
consumer.subscribe("lat")
print("ready", flush=True)
n = int(sys.argv[2])
r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
consumer.poll(1.0)
r1 = resource.getrusage(resource.RUSAGE_SELF)
idle = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / (time.monotonic() - t0)
print("go", flush=True)
lat, got = [], 0
while got < n:
    for m in consumer.poll(5.0):
        now = time.perf_counter_ns()
        seq, ts = struct.unpack_from("<qq", m.body)
        if seq >= 0:
            lat.append(now - ts)
        got += 1
lat.sort()
print(json.dumps({"p50_us": lat[len(lat) // 2] / 1e3, "p99_us": lat[int(len(lat) * 0.99)] / 1e3,
                  "idle_cpu": idle}), flush=True)
consumer.close()
store.close()
"""


def run(m: int, rate: float, warm: int = 300) -> dict:
    base = tempfile.mkdtemp(prefix="mqlite-xproc-")
    try:
        store = mqlite.open(base + "/s", flush="async")
        store.create_topic("lat", queues=1)
        producer = store.producer()
        child = subprocess.Popen([sys.executable, "-c", CHILD, base + "/s", str(warm + m)],
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        assert child.stdout.readline().strip() == "go"
        pad = b"\0" * 112
        interval, nxt = 1.0 / rate, time.perf_counter()
        for i in range(warm + m):
            nxt += interval
            while (d := nxt - time.perf_counter()) > 0:
                time.sleep(d if d > 0.0002 else 0)
            seq = i - warm if i >= warm else -1
            producer.send(mqlite.Message("lat", struct.pack("<qq", seq, time.perf_counter_ns()) + pad),
                          queue_id=0)
        result = json.loads(child.stdout.readline())
        child.wait(timeout=60)
        store.close()
        return result
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=4000, help="timed messages (after 300 warm-up ones)")
    ap.add_argument("--rate", type=float, default=2000.0, help="send rate, msgs/s")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    for _ in range(args.repeat):
        r = run(args.m, args.rate)
        print(f"cross-process send -> follower poll: p50 {r['p50_us']:.1f} us, p99 {r['p99_us']:.1f} us; "
              f"idle follower CPU {100 * r['idle_cpu']:.2f}% of a core")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
