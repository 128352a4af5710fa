"""Scheduled delivery: timer lateness, draining a burst, scheduling rate, memory and reopen
with many pending timers, and retries reaching the dead-letter queue.

    python benches/python/timers.py [--repeat 3] [--json out.json]
    python benches/python/timers.py --quick      # small sizes, one repetition: checks that it runs

Workloads (each in a fresh store under --workdir, the default open, flush="async"):

- ``lateness``: ``--spread-n`` timers (``Message(deliver_at=...)``, 100,000) due evenly over
  ``--spread-s`` seconds (10), all sent before the first is due; one pull consumer reads them
  as they come. Per timer: lateness = the delivered copy's store timestamp minus its due time
  (the store's view), and the time the consumer got it minus its due time (the user's view),
  in ms: p50, p99, max. Early deliveries (stored before the due time) are counted: the goal is 0.
  Timers are due from twice the time a calibration of 2,000 sends takes for all of them; any
  sent after its time anyway (stored at once) is counted and left out of the lateness.
- ``burst``: ``--burst-n`` timers (100,000) due in the same millisecond; rate = the timers over
  the time from their due time to the last one's delivery (store timestamps), msg/s.
- ``schedule rate``: ``Producer.send`` of a timer (``deliver_at`` a day ahead), of a
  ``delay_level`` message and of a plain message, ``--rate-n`` each (100,000), in chunks of
  1,000 interleaved; msg/s each and the ratio to the plain send of the same run.
- ``pending``: in a fresh interpreter, ``--pending-n`` timers (1,000,000) a day ahead are sent
  with ``send_batch``; VmRSS and RssAnon after the open of the empty store, after the sends and
  after a reopen (another fresh interpreter), their growth over the empty store, and the
  reopen's time (``mqlite.open``) and its first delivery pass (``Store.deliver_due``).
- ``dlq``: ``--dlq-n`` messages (1,000) that a push consumer's listener always fails, with
  ``max_reconsume_times`` ``--dlq-max`` (2) and a delay table of "1s": every message must be
  delivered exactly max + 1 times and then be in ``%DLQ%<group>`` (a check: "ok" or the
  messages that were not), and the time until the last one got there.

Reported: the median over ``--repeat`` runs (workloads interleaved within each repetition)
for the timed figures; the pending and dlq workloads run once. Lateness depends on the machine
being quiet: run the full sizes on a machine doing nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import mqlite
from mqlite import ConsumeFromWhere, ConsumeStatus, Message, MessageExt, MessageQueue

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
DAY_MS = 86_400_000
BODY = struct.Struct("<qq")  # due ms, index: 16 bytes, then padding to --size
CHUNK = 1_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def body(due: int, i: int, size: int) -> bytes:
    return BODY.pack(due, i).ljust(size, b"x")


def fresh(work: str, name: str) -> str:
    return os.path.join(tempfile.mkdtemp(prefix=f"{name}-", dir=work), "store")


def drop(path: str) -> None:
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def receive(store: mqlite.Store, topic: str, n: int, timeout_s: float) -> list[tuple[MessageExt, int]]:
    """Polls ``topic`` from its first offset until ``n`` messages came or ``timeout_s`` passed;
    each with the time (ms) the poll returned it."""
    got: list[tuple[MessageExt, int]] = []
    deadline = time.monotonic() + timeout_s
    with store.pull_consumer("bench", consume_from=FIRST) as c:
        c.subscribe(topic)
        while len(got) < n and time.monotonic() < deadline:
            batch = c.poll(0.2, max_messages=256)
            at = now_ms()
            got.extend((m, at) for m in batch)
    return got


def send_rate(p: mqlite.Producer, size: int) -> float:
    """Timer sends per second on this machine: 2,000 timers a day ahead to topic ``cal``."""
    far = now_ms() + DAY_MS
    msgs = [Message("cal", bytes(size), deliver_at=far) for _ in range(CHUNK)]
    t0 = time.perf_counter()
    for _ in range(2):
        for m in msgs:
            p.send(m, queue_id=0)
    return 2 * CHUNK / (time.perf_counter() - t0)


def lateness(work: str, n: int, spread_s: float, size: int) -> dict[str, Any]:
    path = fresh(work, "late")
    try:
        with mqlite.open(path) as store:
            store.create_topic("t", 4)
            p = store.producer()
            # Room to send them all before the first is due: twice the time a calibration
            # run of sends takes for n, and half a second.
            lead = 500 + int(2 * n / send_rate(p, size) * 1000)
            first = now_ms() + lead
            step = spread_s * 1000 / n
            t0 = time.perf_counter()
            sent_late: set[int] = set()
            for i in range(n):
                due = first + int(i * step)
                if not p.send(Message("t", body(due, i, size), deliver_at=due)).scheduled:
                    sent_late.add(i)
            send_s = time.perf_counter() - t0
            got = receive(store, "t", n, timeout_s=lead / 1000 + spread_s + 60)
        store_late, user_late = [], []
        early = 0
        for m, at in got:
            due, i = BODY.unpack_from(m.body)
            early += m.store_timestamp < due
            if i in sent_late:  # sent after its time (stored at once): not a timer's lateness
                continue
            store_late.append(m.store_timestamp - due)
            user_late.append(at - due)
        return {
            "n": n, "received": len(got), "early": early, "sent_after_due": len(sent_late), "lead_ms": lead,
            "send_s": send_s, "store_p50_ms": pct(store_late, 0.5), "store_p99_ms": pct(store_late, 0.99),
            "store_max_ms": max(store_late, default=float("nan")), "user_p50_ms": pct(user_late, 0.5),
            "user_p99_ms": pct(user_late, 0.99), "user_max_ms": max(user_late, default=float("nan")),
        }
    finally:
        drop(path)


def burst(work: str, n: int, size: int) -> dict[str, Any]:
    path = fresh(work, "burst")
    try:
        with mqlite.open(path) as store:
            store.create_topic("t", 4)
            p = store.producer()
            due = now_ms() + 1_000 + n // 20
            msgs = [Message("t", body(due, i, size), deliver_at=due) for i in range(CHUNK)]
            for _ in range(n // CHUNK):
                p.send_batch(msgs, queue_id=0)
            got = receive(store, "t", n // CHUNK * CHUNK, timeout_s=(due - now_ms()) / 1000 + 120)
        last = max(m.store_timestamp for m, _ in got)
        span_s = max(last - due, 1) / 1000
        return {"n": len(got), "early": sum(m.store_timestamp < due for m, _ in got),
                "drain_s": span_s, "rate": len(got) / span_s}
    finally:
        drop(path)


def schedule_rate(work: str, n: int, size: int) -> dict[str, Any]:
    path = fresh(work, "rate")
    try:
        with mqlite.open(path) as store:
            store.create_topic("t", 4)
            p = store.producer()
            far = now_ms() + DAY_MS
            kinds = {
                "plain": [Message("t", bytes(size)) for _ in range(CHUNK)],
                "timer": [Message("t", bytes(size), deliver_at=far) for _ in range(CHUNK)],
                "delay_level": [Message("t", bytes(size), delay_level=18) for _ in range(CHUNK)],
            }
            spent = dict.fromkeys(kinds, 0.0)
            clock = time.perf_counter
            for _ in range(max(1, n // CHUNK)):
                for kind, msgs in kinds.items():
                    t0 = clock()
                    for m in msgs:
                        p.send(m, queue_id=0)
                    spent[kind] += clock() - t0
        count = max(1, n // CHUNK) * CHUNK
        rates = {k: count / s for k, s in spent.items()}
        return {"n": count, **{f"{k}_rate": r for k, r in rates.items()},
                **{f"{k}_ratio": rates[k] / rates["plain"] for k in ("timer", "delay_level")}}
    finally:
        drop(path)


PENDING_CHILD = r"""
import json, sys, time
import mqlite
from mqlite import Message
path, n, size, phase = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "RssFile"):
                out[k] = int(v.split()[0])
    return out
res = {}
t0 = time.perf_counter()
store = mqlite.open(path)
res["open_s"] = time.perf_counter() - t0
if phase == "send":
    res["empty"] = status()
    far = int(time.time() * 1000) + 86_400_000
    msgs = [Message("t", bytes(size), deliver_at=far + i) for i in range(1000)]
    p = store.producer()
    t0 = time.perf_counter()
    for _ in range(n // 1000):
        p.send_batch(msgs, queue_id=0)
    res["send_s"] = time.perf_counter() - t0
    store.flush()
    res["pending"] = status()
else:
    t0 = time.perf_counter()
    res["delivered"] = store.deliver_due()
    res["first_pass_s"] = time.perf_counter() - t0
    res["reopened"] = status()
store.close()
print(json.dumps(res))
"""


def pending(work: str, n: int, size: int) -> dict[str, Any]:
    path = fresh(work, "pending")
    try:
        with mqlite.open(path) as store:
            store.create_topic("t", 1)

        def child(phase: str) -> dict[str, Any]:
            done = subprocess.run([sys.executable, "-c", PENDING_CHILD, path, str(n), str(size), phase],
                                  capture_output=True, text=True, timeout=3600, check=True)
            out: dict[str, Any] = json.loads(done.stdout)
            return out

        sent, again = child("send"), child("reopen")
        kib = 1 / 1024
        return {
            "n": n // 1000 * 1000, "send_s": sent["send_s"],
            "rss_empty_mib": sent["empty"]["VmRSS"] * kib, "rss_pending_mib": sent["pending"]["VmRSS"] * kib,
            "rss_growth_mib": (sent["pending"]["VmRSS"] - sent["empty"]["VmRSS"]) * kib,
            "anon_growth_mib": (sent["pending"]["RssAnon"] - sent["empty"]["RssAnon"]) * kib,
            "reopen_s": again["open_s"], "first_pass_s": again["first_pass_s"],
            "delivered_at_reopen": again["delivered"],
            "rss_reopened_mib": again["reopened"]["VmRSS"] * kib,
            "reopened_growth_mib": (again["reopened"]["VmRSS"] - sent["empty"]["VmRSS"]) * kib,
            "reopened_anon_growth_mib": (again["reopened"]["RssAnon"] - sent["empty"]["RssAnon"]) * kib,
        }
    finally:
        drop(path)


def dlq(work: str, n: int, max_times: int) -> dict[str, Any]:
    """Every message fails every time: each is delivered max + 1 times, then is a dead letter."""
    path = fresh(work, "dlq")
    try:
        with mqlite.open(path, delay_levels="1s") as store:
            store.create_topic("t", 4)
            store.producer().send_batch([Message("t", b"%d" % i) for i in range(n)], queue_id=0)
            deliveries: dict[bytes, int] = {}
            lock = threading.Lock()

            def listener(msgs: list[MessageExt]) -> ConsumeStatus:
                with lock:
                    for m in msgs:
                        deliveries[m.body] = deliveries.get(m.body, 0) + 1
                return ConsumeStatus.RECONSUME_LATER

            t0 = time.perf_counter()
            dead_mq = MessageQueue("%DLQ%bench", 0)
            c = store.push_consumer("bench", consume_from=FIRST, max_reconsume_times=max_times, batch_size=1)
            c.subscribe("t")
            c.register_message_listener(listener)
            deadline = time.monotonic() + 60 + 2 * max_times
            with c:
                # The event: messages arriving in the dead-letter queue, until all n are there.
                while time.monotonic() < deadline:
                    made = {t.name for t in store.topics()}
                    have = store.offsets(dead_mq)[1] if dead_mq.topic in made else 0
                    if have >= n:
                        break
                    store.wait_for({dead_mq: have}, timeout=max(0.0, deadline - time.monotonic()))
                elapsed = time.perf_counter() - t0
            dead = [m.body for m in store.read_result(dead_mq, 0, n + 10).messages] \
                if dead_mq.topic in {t.name for t in store.topics()} else []
        wrong = sorted(b for b in {*deliveries, *dead} if deliveries.get(b) != max_times + 1)
        return {
            "n": n, "max_reconsume_times": max_times, "dead_letters": len(dead),
            "dead_letters_distinct": len(set(dead)), "wrong_delivery_counts": len(wrong),
            "check": "ok" if len(dead) == n and len(set(dead)) == n and not wrong else
                     f"FAILED: {len(dead)} dead letters of {n}, {len(wrong)} with deliveries != {max_times + 1}",
            "seconds": elapsed,
        }
    finally:
        drop(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spread-n", type=int, default=100_000)
    ap.add_argument("--spread-s", type=float, default=10.0)
    ap.add_argument("--burst-n", type=int, default=100_000)
    ap.add_argument("--rate-n", type=int, default=100_000)
    ap.add_argument("--pending-n", type=int, default=1_000_000)
    ap.add_argument("--dlq-n", type=int, default=1_000)
    ap.add_argument("--dlq-max", type=int, default=2)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument("--quick", action="store_true", help="small sizes, one repetition")
    args = ap.parse_args(argv)
    if args.quick:
        args.spread_n, args.spread_s, args.burst_n, args.rate_n = 2_000, 1.0, 5_000, 5_000
        args.pending_n, args.dlq_n, args.dlq_max, args.repeat = 20_000, 50, 2, 1
    work = tempfile.mkdtemp(prefix="mqlite-timers-", dir=args.workdir)
    runs: dict[str, list[dict[str, Any]]] = {"lateness": [], "burst": [], "schedule_rate": []}
    try:
        for rep in range(args.repeat):
            runs["lateness"].append(lateness(work, args.spread_n, args.spread_s, args.size))
            runs["burst"].append(burst(work, args.burst_n, args.size))
            runs["schedule_rate"].append(schedule_rate(work, args.rate_n, args.size))
            r = runs["lateness"][-1]
            print(f"[{rep + 1}/{args.repeat}] lateness p99 {r['store_p99_ms']} ms, early {r['early']}; "
                  f"burst {runs['burst'][-1]['rate']:,.0f} msg/s; timer send "
                  f"{runs['schedule_rate'][-1]['timer_rate']:,.0f} msg/s", file=sys.stderr)
        once = {"pending": pending(work, args.pending_n, args.size), "dlq": dlq(work, args.dlq_n, args.dlq_max)}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(name: str, key: str) -> float:
        return statistics.median(float(r[key]) for r in runs[name])

    late, rate, pend, dead = runs["lateness"], runs["schedule_rate"], once["pending"], once["dlq"]
    print(f"\n{args.spread_n:,} timers due over {args.spread_s:g} s ({args.size} B), lateness in ms, "
          f"median of {args.repeat}:")
    print("| view | p50 | p99 | max | early | sent after their time |")
    print("|---|---:|---:|---:|---:|---:|")
    for view in ("store", "user"):
        print(f"| {view} | {med('lateness', f'{view}_p50_ms'):.0f} | {med('lateness', f'{view}_p99_ms'):.0f} | "
              f"{med('lateness', f'{view}_max_ms'):.0f} | {sum(r['early'] for r in late)} | "
              f"{sum(r['sent_after_due'] for r in late)} |")
    print(f"\n| workload | figure |\n|---|---:|")
    print(f"| {args.burst_n:,} timers due in one ms, drained | {med('burst', 'rate'):,.0f} msg/s "
          f"({med('burst', 'drain_s'):.2f} s) |")
    for kind in ("plain", "timer", "delay_level"):
        ratio = "" if kind == "plain" else f" ({med('schedule_rate', f'{kind}_ratio'):.2f} of plain)"
        print(f"| Producer.send, {kind} | {med('schedule_rate', f'{kind}_rate'):,.0f} msg/s{ratio} |")
    print(f"| RSS with {pend['n']:,} pending, above the empty store | {pend['rss_growth_mib']:.1f} MiB "
          f"(anonymous {pend['anon_growth_mib']:.1f} MiB) |")
    print(f"| the same after a reopen | {pend['reopened_growth_mib']:.1f} MiB "
          f"(anonymous {pend['reopened_anon_growth_mib']:.1f} MiB) |")
    print(f"| reopen with {pend['n']:,} pending: open, first delivery pass | {pend['reopen_s']:.3f} s, "
          f"{pend['first_pass_s']:.3f} s |")
    print(f"| {dead['n']:,} always-failing messages, max_reconsume_times {dead['max_reconsume_times']}: "
          f"each delivered max + 1 times, then in the DLQ | {dead['check']} ({dead['seconds']:.1f} s) |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs, **once}, f, indent=1)
    failed = sum(r["early"] for r in late) + sum(r["early"] for r in runs["burst"])
    return 0 if dead["check"] == "ok" and failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
