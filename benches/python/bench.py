#!/usr/bin/env python3
"""mqlite Python-path benchmark, with a raw-file baseline measured in the same run.

Workload: N messages (default 200,000) with random bodies of --size bytes (default 128), one
topic with --queues queues (default 4), a fresh temporary store per workload and repetition,
flush="async".  Each workload runs --repeat times (default 3) and the median is reported.

  raw-file append     the baseline: length-prefixed records, one os.write per 100 records,
                      one fdatasync at the end (timed); the same code as RawFilePeer in peers.py
  raw-file read       the baseline's read-back: 1 MiB os.read calls, split into records
  send(Message)       Producer.send one message at a time; the Message objects are built
                      before the timed loop (their construction time is reported separately)
  send_batch(bytes)   Producer.send_batch(list_of_bytes, topic=...) in batches of --batch (1000)
  send_batch(Message) Producer.send_batch(list_of_Message) in batches of --batch
  read                Store.read(MessageQueue(topic, q), offset, --read-batch) over every queue
                      of the send_batch(bytes) store, touching every body
  poll x256, poll()   PullConsumer.poll(max_messages=256) and poll() (its default, 32) over the
                      same store, each in its own consumer group from the first offset
  reopen              mqlite.open() of that store after a clean close, median of 5 (ms)

msgs/s and MB/s count payload bytes only (MB = 1e6 bytes).  Produce timings stop when the last
send returns: with flush="async" the data is then in the kernel's page cache and survives a
process crash; the interval msync (every 500 ms) is not waited for.  The time of one explicit
Store.flush() after each produce workload is reported alongside.

With --sync, also: flush="sync" (group commit; a send returns after the msync covering it)
with 1, 4 and 8 threads each calling the blocking Producer.send for --sync-seconds, and 8
threads each keeping a window of up to 256 outstanding Producer.send_async futures (waiting on
the oldest when the window is full), with one Producer shared by the threads and with one
Producer per thread.

Usage:
    python benches/python/bench.py                      # N=200000, 128 B, median of 3
    python benches/python/bench.py --n 50000 --size 1024 --repeat 5 --json out.json
    python benches/python/bench.py --raw-only           # baseline only (no mqlite needed)
    python benches/python/bench.py --sync               # plus the sync-durability workloads
"""

from __future__ import annotations

import argparse
import collections
import gc
import json
import os
import platform
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional

try:  # optional pretty table
    from rich.console import Console
    from rich.table import Table

    _RICH = True
except Exception:  # pragma: no cover - rich is optional
    _RICH = False

LEN = struct.Struct("<I")  # raw baseline length prefix (as in peers.py)
CHUNK = 1000  # raw baseline: bodies handed to produce per call (as in peers.py)
RAW_BATCH = 100  # raw baseline: records per os.write (as in peers.py RawFilePeer)
TOPIC = "bench"

RAW_DURABILITY = "page cache; write() per 100 records; one fdatasync at end (timed)"
RAW_READ_DURABILITY = "1 MiB read() calls from the page cache"
MQ_DURABILITY = "mmap commit log, async flush (msync every 500 ms, not awaited)"
MQ_SYNC_DURABILITY = "mmap commit log, sync flush: acknowledged after the msync (group commit)"

# What a crash loses, as (process crash, machine crash); for reads: what happens to the position.
RAW_CRASH = ("nothing", "all since the last fdatasync")
MQ_CRASH = ("nothing", "up to 500 ms")
MQ_SYNC_CRASH = ("nothing", "nothing acknowledged")
READ_CRASH = {
    "raw_read": ("position in memory, saved at the end", "same, not fsynced"),
    "read": ("no position kept (the caller tracks offsets)", "same"),
    "poll": ("offsets auto-committed every 5 s: re-delivered", "same"),
}


# ----------------------------------------------------------------------------------------------
# Raw file baseline (same logic as peers.py RawFilePeer)
# ----------------------------------------------------------------------------------------------


class RawFile:
    """Length-prefixed records, one os.write per RAW_BATCH records (peers.py RawFilePeer)."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self.path = os.path.join(workdir, "log.bin")
        self.fd: Optional[int] = os.open(
            self.path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_APPEND, 0o644)
        self.rfd: Optional[int] = None
        self.buf = b""
        self.pos = 0

    def produce_chunk(self, bodies: List[bytes]) -> None:
        pack = LEN.pack
        fd = self.fd
        assert fd is not None
        for i in range(0, len(bodies), RAW_BATCH):
            parts = []
            for b in bodies[i:i + RAW_BATCH]:
                parts.append(pack(len(b)))
                parts.append(b)
            os.write(fd, b"".join(parts))

    def finish_produce(self) -> None:
        assert self.fd is not None
        os.fdatasync(self.fd)
        os.close(self.fd)
        self.fd = None

    def consume_chunk(self, k: int) -> List[bytes]:
        if self.rfd is None:
            self.rfd = os.open(self.path, os.O_RDONLY)
        out: List[bytes] = []
        unpack_from = LEN.unpack_from
        while len(out) < k:
            if len(self.buf) - self.pos < 4 or \
                    len(self.buf) - self.pos < 4 + unpack_from(self.buf, self.pos)[0]:
                more = os.read(self.rfd, 1 << 20)
                if not more:
                    break
                self.buf = self.buf[self.pos:] + more
                self.pos = 0
                continue
            (ln,) = unpack_from(self.buf, self.pos)
            start = self.pos + 4
            out.append(self.buf[start:start + ln])
            self.pos = start + ln
        return out

    def finish_consume(self) -> None:
        # commit the consumer position the way a real consumer would (one small file)
        with open(os.path.join(self.workdir, "offset"), "w") as f:
            f.write(str(self.pos))

    def close(self) -> None:
        for fd in (self.fd, self.rfd):
            if fd is not None:
                os.close(fd)
        self.fd = self.rfd = None


def raw_run(workdir: str, bodies: List[bytes]) -> tuple[float, float, List[bytes]]:
    """Produce then consume every body, timed like peers.py; returns (produce s, consume s,
    bodies read back).  The timed read touches each body (its length) and keeps none, like the
    mqlite read and poll loops; the bodies returned come from a second, untimed read."""
    raw = RawFile(workdir)
    try:
        n = len(bodies)
        gc.collect()
        t0 = time.perf_counter()
        for i in range(0, n, CHUNK):
            raw.produce_chunk(bodies[i:i + CHUNK])
        raw.finish_produce()
        tp = time.perf_counter() - t0
        count = 0
        total = 0
        gc.collect()
        t0 = time.perf_counter()
        while count < n:
            part = raw.consume_chunk(min(CHUNK, n - count))
            if not part:
                break
            count += len(part)
            for b in part:
                total += len(b)
        raw.finish_consume()
        tc = time.perf_counter() - t0
        # untimed: read everything again for the caller to verify
        assert raw.rfd is not None
        os.close(raw.rfd)
        raw.rfd, raw.buf, raw.pos = None, b"", 0
        got: List[bytes] = []
        while True:
            part = raw.consume_chunk(CHUNK)
            if not part:
                break
            got.extend(part)
        if len(got) != count:
            raise SystemExit(f"error: raw baseline read {count} records, then {len(got)}")
        return tp, tc, got
    finally:
        raw.close()


# ----------------------------------------------------------------------------------------------
# mqlite workloads
# ----------------------------------------------------------------------------------------------


def open_store(mqlite: Any, path: str, queues: int) -> Any:
    store = mqlite.open(path, flush="async")
    store.create_topic(TOPIC, queues=queues)
    return store


def timed_flush(store: Any) -> Optional[float]:
    flush = getattr(store, "flush", None)
    if flush is None:
        return None
    t0 = time.perf_counter()
    flush()
    return time.perf_counter() - t0


def wait_dispatched(mqlite: Any, store: Any, queues: int, n: int, timeout: float = 60.0) -> float:
    """Wait until the consume queues index all n messages; returns the seconds waited."""
    mqs = [mqlite.MessageQueue(TOPIC, q) for q in range(queues)]
    t0 = time.perf_counter()
    while True:
        total = sum(store.offsets(mq)[1] - store.offsets(mq)[0] for mq in mqs)
        if total >= n:
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > timeout:
            raise SystemExit(f"error: only {total} of {n} messages visible after {timeout} s")
        time.sleep(0.001)


def mq_send_each(mqlite: Any, path: str, msgs: List[Any], queues: int, res: dict) -> float:
    store = open_store(mqlite, path, queues)
    try:
        send = store.producer().send
        gc.collect()
        t0 = time.perf_counter()
        for m in msgs:
            send(m)
        dt = time.perf_counter() - t0
        res["flush_s"] = timed_flush(store)
        res["dispatch_wait_s"] = wait_dispatched(mqlite, store, queues, len(msgs))
        return dt
    finally:
        store.close()


def mq_send_batch(mqlite: Any, path: str, items: List[Any], batch: int, queues: int, res: dict,
                  topic: Optional[str], keep_open: bool = False) -> tuple[float, Any]:
    store = open_store(mqlite, path, queues)
    try:
        send_batch = store.producer().send_batch
        gc.collect()
        t0 = time.perf_counter()
        if topic is None:
            for i in range(0, len(items), batch):
                send_batch(items[i:i + batch])
        else:
            for i in range(0, len(items), batch):
                send_batch(items[i:i + batch], topic=topic)
        dt = time.perf_counter() - t0
        res["flush_s"] = timed_flush(store)
        res["dispatch_wait_s"] = wait_dispatched(mqlite, store, queues, len(items))
    except BaseException:
        store.close()
        raise
    if keep_open:
        return dt, store
    store.close()
    return dt, None


def mq_read_all(mqlite: Any, store: Any, queues: int, read_batch: int,
                keep: bool = False) -> tuple[float, int, List[bytes]]:
    """Store.read over every queue; returns (seconds, messages, bodies if keep).  Without
    keep, each body is touched (its length) and dropped, as in the poll and raw-read loops."""
    MessageQueue = mqlite.MessageQueue
    got: List[bytes] = []
    count = 0
    total = 0
    gc.collect()
    t0 = time.perf_counter()
    for q in range(queues):
        mq = MessageQueue(TOPIC, q)
        off, end = store.offsets(mq)
        while off < end:
            msgs = store.read(mq, off, read_batch)
            if not msgs:
                break
            if keep:
                got.extend([m.body for m in msgs])
            else:
                for m in msgs:
                    total += len(m.body)
            count += len(msgs)
            off = msgs[-1].queue_offset + 1
    return time.perf_counter() - t0, count, got


def mq_reopen(mqlite: Any, path: str, queues: int, n: int, times: int = 5) -> List[float]:
    # First open (untimed) checks that a clean close kept everything.
    store = mqlite.open(path, flush="async")
    try:
        mqs = [mqlite.MessageQueue(TOPIC, q) for q in range(queues)]
        total = sum(store.offsets(mq)[1] - store.offsets(mq)[0] for mq in mqs)
        if total != n:
            raise SystemExit(f"error: reopened store holds {total} messages, expected {n}")
    finally:
        store.close()
    out = []
    for _ in range(times):
        gc.collect()
        t0 = time.perf_counter()
        store = mqlite.open(path, flush="async")
        out.append(time.perf_counter() - t0)
        store.close()
    return out


def mq_poll_all(mqlite: Any, store: Any, n: int, max_messages: Optional[int],
                group: str) -> tuple[float, int]:
    """PullConsumer.poll over the whole topic from the first offset, touching every body;
    returns (seconds, messages).  The consumer joins the group before the clock starts."""
    consumer = store.pull_consumer(
        group, consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    try:
        consumer.subscribe(TOPIC)
        poll = consumer.poll
        count = 0
        total = 0
        gc.collect()
        t0 = time.perf_counter()
        while count < n:
            msgs = poll(1.0, max_messages)
            if not msgs:
                raise SystemExit(f"error: poll returned nothing after {count} of {n} messages")
            for m in msgs:
                total += len(m.body)
            count += len(msgs)
        dt = time.perf_counter() - t0
    finally:
        consumer.close()
    if count != n:
        raise SystemExit(f"error: poll returned {count} messages, expected {n}")
    return dt, count


# ----------------------------------------------------------------------------------------------
# Sync durability (flush="sync"): group commit with concurrent senders
# ----------------------------------------------------------------------------------------------


def _sync_run(mqlite: Any, path: str, size: int, threads: int, seconds: float,
              body_fn: Any, queues: int) -> dict:
    """Run `threads` workers calling body_fn(producer_or_None, msg, stop) -> (count, not_ok)
    for `seconds`; returns counts and the rate over the time until every worker returned."""
    store = mqlite.open(path, flush="sync")
    try:
        store.create_topic(TOPIC, queues=queues)
        msg = mqlite.Message(TOPIC, os.urandom(size))
        stop = threading.Event()
        start = threading.Barrier(threads + 1)
        counts = [0] * threads
        not_ok = [0] * threads
        errors: List[str] = []

        def worker(i: int) -> None:
            try:
                start.wait()
                counts[i], not_ok[i] = body_fn(store, msg, stop)
            except BaseException as e:  # reported, never hidden
                errors.append(f"{type(e).__name__}: {e}")

        ths = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
        for t in ths:
            t.start()
        gc.collect()
        start.wait()
        t0 = time.perf_counter()
        time.sleep(seconds)
        stop.set()
        for t in ths:
            t.join()
        dt = time.perf_counter() - t0
    finally:
        store.close()
    total = sum(counts)
    res = {"threads": threads, "secs": dt, "count": total, "msgs_per_s": total / dt,
           "not_send_ok": sum(not_ok)}
    if errors:
        res["errors"] = errors[:3]
    return res


def sync_send_threads(mqlite: Any, path: str, size: int, threads: int, seconds: float,
                      queues: int = 4) -> dict:
    """`threads` threads, one Producer each, each calling the blocking send() in a loop."""
    ok_status = mqlite.SendStatus.SEND_OK

    def body(store: Any, msg: Any, stop: threading.Event) -> tuple[int, int]:
        send = store.producer().send
        n = bad = 0
        while not stop.is_set():
            if send(msg).send_status is not ok_status:
                bad += 1
            n += 1
        return n, bad

    return _sync_run(mqlite, path, size, threads, seconds, body, queues)


def sync_send_async_window(mqlite: Any, path: str, size: int, threads: int, window: int,
                           seconds: float, shared_producer: bool, queues: int = 4) -> dict:
    """`threads` threads each calling send_async() and keeping at most `window` futures
    outstanding (waiting on the oldest when full); a send counts once its future resolved."""
    ok_status = mqlite.SendStatus.SEND_OK
    shared: Dict[str, Any] = {}
    lock = threading.Lock()

    def body(store: Any, msg: Any, stop: threading.Event) -> tuple[int, int]:
        if shared_producer:
            with lock:
                if "p" not in shared:
                    shared["p"] = store.producer()
                producer = shared["p"]
        else:
            producer = store.producer()
        send_async = producer.send_async
        pending: collections.deque = collections.deque()
        n = bad = 0
        while not stop.is_set():
            if len(pending) >= window:
                if pending.popleft().result().send_status is not ok_status:
                    bad += 1
                n += 1
            pending.append(send_async(msg))
        while pending:
            if pending.popleft().result().send_status is not ok_status:
                bad += 1
            n += 1
        return n, bad

    res = _sync_run(mqlite, path, size, threads, seconds, body, queues)
    res["window"] = window
    res["shared_producer"] = shared_producer
    return res


def raw_fdatasync_each(path: str, size: int, seconds: float) -> dict:
    """The floor for an acknowledged-after-fsync send: one thread appending `size`-byte
    records to a plain file, os.write + os.fdatasync per record, for `seconds`."""
    body = LEN.pack(size) + os.urandom(size)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        n = 0
        t0 = time.perf_counter()
        end = t0 + seconds
        while time.perf_counter() < end:
            os.write(fd, body)
            os.fdatasync(fd)
            n += 1
        dt = time.perf_counter() - t0
    finally:
        os.close(fd)
    return {"threads": 1, "secs": dt, "count": n, "msgs_per_s": n / dt, "not_send_ok": 0}


SYNC_WORKLOADS = [
    # key, label, kind, threads, shared producer
    ("sync_raw_fdatasync", "raw file write() + fdatasync per record, 1 thread (baseline)",
     "raw", 1, False),
    ("sync_send_1", "send(), 1 thread", "send", 1, False),
    ("sync_send_4", "send(), 4 threads", "send", 4, False),
    ("sync_send_8", "send(), 8 threads", "send", 8, False),
    ("sync_async_8x256", "send_async(), 8 threads x window 256, one shared Producer",
     "async", 8, True),
    ("sync_async_8x256_own", "send_async(), 8 threads x window 256, one Producer per thread",
     "async", 8, False),
]


def run_sync(mqlite: Any, base: str, size: int, seconds: float, rep: int,
             window: int = 256) -> List[dict]:
    """Every SYNC_WORKLOADS row once (a fresh store each); returns result rows."""
    rows = []
    for key, label, kind, threads, shared in SYNC_WORKLOADS:
        work = tempfile.mkdtemp(prefix=f"mq-{key}-", dir=base)
        try:
            path = os.path.join(work, "store")
            if kind == "raw":
                r = raw_fdatasync_each(path, size, seconds)
            elif kind == "send":
                r = sync_send_threads(mqlite, path, size, threads, seconds)
            else:
                r = sync_send_async_window(mqlite, path, size, threads, window, seconds, shared)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        r.update({"run": rep, "key": key, "workload": label, "size": size,
                  "durability": MQ_SYNC_DURABILITY, "process_crash": MQ_SYNC_CRASH[0],
                  "machine_crash": MQ_SYNC_CRASH[1]})
        if kind == "raw":
            r.update({"durability": "plain file, fdatasync after every record",
                      "machine_crash": "nothing acknowledged"})
        rows.append(r)
        print(f"  [run {rep}] sync {label:<58} {fmt_rate(r['msgs_per_s']):>8} msgs/s"
              + (f"  ERRORS {r['errors']}" if r.get("errors") else ""), flush=True)
    return rows


def summarize_sync(results: List[dict]) -> List[dict]:
    groups: Dict[tuple, List[dict]] = {}
    for r in results:
        groups.setdefault((r["size"], r["key"]), []).append(r)
    out = []
    for (size, key), rs in groups.items():
        rates = [r["msgs_per_s"] for r in rs]
        s = {k: rs[0][k] for k in ("key", "workload", "size", "durability", "process_crash",
                                   "machine_crash", "threads")}
        s.update({"runs": len(rs), "msgs_per_s": statistics.median(rates), "min": min(rates),
                  "max": max(rates), "not_send_ok": sum(r["not_send_ok"] for r in rs),
                  "errors": [e for r in rs for e in r.get("errors", [])]})
        if "window" in rs[0]:
            s["window"] = rs[0]["window"]
            s["shared_producer"] = rs[0]["shared_producer"]
        out.append(s)
    base = {s["size"]: s for s in out if s["key"] == "sync_raw_fdatasync"}
    for s in out:
        b = base.get(s["size"])
        if b and b["msgs_per_s"]:
            s["ratio_to_fdatasync"] = s["msgs_per_s"] / b["msgs_per_s"]
    return out


# ----------------------------------------------------------------------------------------------
# Runner
# ----------------------------------------------------------------------------------------------


def one_repetition(args: argparse.Namespace, bodies: List[bytes], mqlite: Any, base: str,
                   rep: int) -> List[dict]:
    n, size = len(bodies), len(bodies[0])
    rows: List[dict] = []

    def record(key: str, workload: str, kind: str, secs: float, count: int, durability: str,
               crash: tuple, extra: Optional[dict] = None) -> None:
        rate = count / secs if secs > 0 else 0.0
        mbps = count * size / secs / 1e6 if secs > 0 else 0.0
        r: Dict[str, Any] = {"run": rep, "key": key, "workload": workload, "kind": kind,
                             "size": size, "secs": secs, "count": count, "msgs_per_s": rate,
                             "mb_per_s": mbps, "durability": durability,
                             "process_crash": crash[0], "machine_crash": crash[1]}
        r.update(extra or {})
        rows.append(r)
        extra_txt = ""
        if extra and extra.get("flush_s") is not None:
            extra_txt = f"  (flush() after: {extra['flush_s'] * 1e3:.1f} ms)"
        print(f"  [run {rep}] {workload:<26} {fmt_rate(rate):>8} msgs/s "
              f"{mbps:8.1f} MB/s{extra_txt}", flush=True)

    # ---- raw baseline
    work = tempfile.mkdtemp(prefix="raw-", dir=base)
    try:
        tp, tc, got = raw_run(work, bodies)
        if got != bodies:
            raise SystemExit("error: raw baseline read back different bodies")
        record("raw_append", "raw-file append", "produce", tp, n, RAW_DURABILITY, RAW_CRASH)
        record("raw_read", "raw-file read", "consume", tc, len(got), RAW_READ_DURABILITY,
               READ_CRASH["raw_read"])
        del got
    finally:
        shutil.rmtree(work, ignore_errors=True)

    if mqlite is None:
        return rows

    # ---- send(Message), one by one
    t0 = time.perf_counter()
    msgs = [mqlite.Message(TOPIC, b) for b in bodies]
    build_s = time.perf_counter() - t0
    work = tempfile.mkdtemp(prefix="mq-send-", dir=base)
    try:
        extra: dict = {"message_build_s": build_s}
        secs = mq_send_each(mqlite, os.path.join(work, "store"), msgs, args.queues, extra)
        record("send", "send(Message)", "produce", secs, n, MQ_DURABILITY, MQ_CRASH, extra)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    # ---- send_batch(bytes) x batch, then read back and reopen the same store
    work = tempfile.mkdtemp(prefix="mq-batch-", dir=base)
    try:
        path = os.path.join(work, "store")
        extra = {}
        secs, store = mq_send_batch(mqlite, path, bodies, args.batch, args.queues, extra,
                                    topic=TOPIC, keep_open=True)
        record("send_batch_bytes", f"send_batch(bytes) x{args.batch}", "produce", secs, n,
               MQ_DURABILITY, MQ_CRASH, extra)
        try:
            secs, count, _ = mq_read_all(mqlite, store, args.queues, args.read_batch)
            _, _, got = mq_read_all(mqlite, store, args.queues, args.read_batch, keep=True)
            if count != n or len(got) != n or sorted(got) != sorted(bodies):
                raise SystemExit(f"error: mqlite read back {len(got)} bodies that differ from "
                                 f"the {n} sent")
            del got
            record("read", f"read x{args.read_batch}", "consume", secs, n,
                   f"Store.read over {args.queues} queues", READ_CRASH["read"])
            for key, label, k in (("poll_256", "poll(max_messages=256)", 256),
                                  ("poll_default", "poll() (default 32)", None)):
                secs, count = mq_poll_all(mqlite, store, n, k, f"bench-{key}")
                record(key, label, "consume", secs, count,
                       "PullConsumer over the same store, auto_commit every 5 s",
                       READ_CRASH["poll"])
        finally:
            store.close()
        opens = mq_reopen(mqlite, path, args.queues, n)
        rows.append({"run": rep, "key": "reopen", "size": size,
                     "workload": "reopen after clean close", "kind": "reopen",
                     "reopen_ms": [s * 1e3 for s in opens],
                     "median_ms": statistics.median(opens) * 1e3})
        print(f"  [run {rep}] {'reopen (clean close)':<26} "
              f"{statistics.median(opens) * 1e3:8.2f} ms (median of {len(opens)})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    # ---- send_batch(Message) x batch
    work = tempfile.mkdtemp(prefix="mq-batchmsg-", dir=base)
    try:
        extra = {}
        secs, _ = mq_send_batch(mqlite, os.path.join(work, "store"), msgs, args.batch,
                                args.queues, extra, topic=None)
        record("send_batch_msg", f"send_batch(Message) x{args.batch}", "produce", secs, n,
               MQ_DURABILITY, MQ_CRASH, extra)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def summarize(results: List[dict]) -> List[dict]:
    """Median per (size, workload) across repetitions; ratios against the raw-file row of the
    same kind and size."""
    groups: Dict[tuple, List[dict]] = {}
    for r in results:
        groups.setdefault((r["size"], r["key"]), []).append(r)
    summary = []
    for (size, key), rs in groups.items():
        s: Dict[str, Any] = {"key": key, "size": size, "workload": rs[0]["workload"],
                             "kind": rs[0]["kind"], "runs": len(rs)}
        if rs[0]["kind"] == "reopen":
            s["median_ms"] = statistics.median(r["median_ms"] for r in rs)
        else:
            rates = [r["msgs_per_s"] for r in rs]
            s.update({
                "durability": rs[0]["durability"],
                "process_crash": rs[0]["process_crash"],
                "machine_crash": rs[0]["machine_crash"],
                "msgs_per_s": statistics.median(rates),
                "min": min(rates),
                "max": max(rates),
                "mb_per_s": statistics.median(r["mb_per_s"] for r in rs),
            })
            for k in ("flush_s", "dispatch_wait_s", "message_build_s"):
                vals = [r[k] for r in rs if r.get(k) is not None]
                if vals:
                    s[k] = statistics.median(vals)
        summary.append(s)
    order = {"produce": 0, "consume": 1, "reopen": 2}
    summary.sort(key=lambda s: (s["size"], order[s["kind"]]))  # stable: run order within a kind
    base = {(s["size"], s["kind"]): s for s in summary if s["key"] in ("raw_append", "raw_read")}
    for s in summary:
        b = base.get((s["size"], s["kind"]))
        if b and "msgs_per_s" in s and b["msgs_per_s"]:
            s["ratio_vs_raw"] = s["msgs_per_s"] / b["msgs_per_s"]
    return summary


def report(summary: List[dict], args: argparse.Namespace, n: int) -> None:
    rows = []
    for s in summary:
        if s["kind"] == "reopen":
            rows.append([s["workload"], "clean close, then mqlite.open()",
                         f"{s['median_ms']:.2f} ms", "-", "-"])
            continue
        ratio = s.get("ratio_vs_raw")
        rows.append([
            s["workload"],
            s["durability"],
            f"{fmt_rate(s['msgs_per_s'])} ({fmt_rate(s['min'])}-{fmt_rate(s['max'])})",
            f"{s['mb_per_s']:.1f}",
            f"{ratio:.2f}" if ratio is not None else "-",
        ])
    title = (f"mqlite Python path, body {args.size} B, N={n}, {args.queues} queues, "
             f"median of {args.repeat} (min-max)")
    print_table(title, ["workload", "durability", "msgs/s", "MB/s", "ratio vs raw file"], rows)
    notes = ["ratio: produce workloads vs raw-file append, read vs raw-file read (same run)."]
    for s in summary:
        if "message_build_s" in s:
            notes.append(f"send(Message): the {n} Message objects were built before the timed "
                         f"loop ({s['message_build_s'] * 1e3:.0f} ms, not included).")
    for s in summary:
        if s.get("flush_s") is not None:
            notes.append(f"{s['workload']}: one Store.flush() after the last send took "
                         f"{s['flush_s'] * 1e3:.1f} ms (not included).")
    for line in notes:
        print("note:", line)


def report_sync(summary: List[dict], seconds: float) -> None:
    rows = [[s["workload"], f"{s['size']}",
             f"{fmt_rate(s['msgs_per_s'])} ({fmt_rate(s['min'])}-{fmt_rate(s['max'])})",
             str(s["not_send_ok"]), "; ".join(s["errors"])[:60]] for s in summary]
    print_table(f"flush=\"sync\" (acknowledged after the msync), {seconds:g} s per run, "
                "median (min-max)", ["workload", "body B", "msgs/s", "not SEND_OK", "errors"],
                rows)


def make_bodies(n: int, size: int) -> List[bytes]:
    """n random bodies of `size` bytes (slices of one random blob)."""
    blob = os.urandom(n * size)
    return [blob[i * size:(i + 1) * size] for i in range(n)]


def fmt_rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def print_table(title: str, header: List[str], rows: List[List[str]]) -> None:
    if _RICH:
        t = Table(title=title)
        for h in header:
            t.add_column(h)
        for r in rows:
            t.add_row(*r)
        Console(width=160).print(t)
        return
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    print(f"\n{title}")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")


PRIME_MIB = 1024


def prime_page_cache(base: str, mib: int = PRIME_MIB) -> dict:
    """Writes `mib` MiB into a file under `base` and deletes it, twice, timing each pass
    (GB/s). Run once before measuring.

    On a virtual machine whose host backs the guest's memory lazily (or takes free pages back
    through a balloon), the first write into page-cache pages the guest has not used lately
    costs a host-side fault per page: on the 2-vCPU development VM a 600 MiB `dd` ran at
    0.43 to 0.72 GB/s into such pages and at 5.3 GB/s into pages a deleted file had just
    freed, and mqlite's `send_batch` fell from 6 to 7 M msgs/s to 1.5 M. Every workload
    deletes its files, so after this priming each one writes into pages freed before it, and
    the figures do not depend on what the machine did before the run. On bare metal both
    passes run at the same speed: the pair shows which case a run was in."""
    if mib <= 0:
        return {}
    chunk = b"\x5a" * (1 << 20)
    path = os.path.join(base, "prime-page-cache.tmp")
    out: Dict[str, Any] = {"mib": mib}
    for label in ("first_pass_gbps", "second_pass_gbps"):
        t0 = time.perf_counter()
        try:
            with open(path, "wb", buffering=0) as f:
                for _ in range(mib):
                    f.write(chunk)
            secs = time.perf_counter() - t0
        finally:
            os.unlink(path)  # drops the dirty pages unwritten: no disk traffic
        out[label] = round(mib * (1 << 20) / secs / 1e9, 2)
    return out


def environment(mqlite: Any) -> dict:
    env = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "mqlite": getattr(mqlite, "__version__", "unknown") if mqlite else None,
    }
    return env


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000, help="messages per workload")
    ap.add_argument("--size", type=int, default=128, help="body bytes (random)")
    ap.add_argument("--repeat", type=int, default=3, help="repetitions; the median is reported")
    ap.add_argument("--queues", type=int, default=4, help="queues of the benchmark topic")
    ap.add_argument("--batch", type=int, default=1000, help="messages per send_batch call")
    ap.add_argument("--read-batch", type=int, default=1024, help="max_messages per Store.read")
    ap.add_argument("--dir", default="", help="base directory for stores (default: a temp dir)")
    ap.add_argument("--json", default="", help="write raw results and the summary to this file")
    ap.add_argument("--raw-only", action="store_true",
                    help="measure only the raw-file baseline (mqlite need not be installed)")
    ap.add_argument("--sync", action="store_true",
                    help="also run the flush=\"sync\" workloads (threads x blocking send, "
                         "8 threads x window of 256 send_async)")
    ap.add_argument("--sync-seconds", type=float, default=2.0,
                    help="duration of each sync workload run")
    ap.add_argument("--prime-mib", type=int, default=PRIME_MIB,
                    help="MiB written and deleted twice before measuring (see prime_page_cache; "
                         "0: none)")
    args = ap.parse_args(argv)
    if args.n < 1 or args.size < 1 or args.repeat < 1 or args.batch < 1 or args.read_batch < 1:
        ap.error("--n, --size, --repeat, --batch and --read-batch must be positive")

    mqlite = None
    if not args.raw_only:
        try:
            import mqlite  # type: ignore[no-redef]
        except ImportError as e:
            print(f"error: mqlite is not importable ({e}); build it with ./scripts/demo.sh "
                  "and run this script with .venv/bin/python, or pass --raw-only",
                  file=sys.stderr)
            return 2

    base = args.dir or tempfile.mkdtemp(prefix="mqlite-bench-")
    os.makedirs(base, exist_ok=True)
    env = environment(mqlite)
    env["page_cache_prime"] = prime_page_cache(base, args.prime_mib)
    print("environment:", json.dumps(env))
    bodies = make_bodies(args.n, args.size)
    results: List[dict] = []
    sync_results: List[dict] = []
    try:
        for rep in range(args.repeat):
            results.extend(one_repetition(args, bodies, mqlite, base, rep))
            if args.sync and mqlite is not None:
                sync_results.extend(run_sync(mqlite, base, args.size, args.sync_seconds, rep))
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    summary = summarize(results)
    report(summary, args, args.n)
    out: Dict[str, Any] = {"env": env, "argv": sys.argv, "args": vars(args), "results": results,
                           "summary": summary}
    if sync_results:
        out["sync_results"] = sync_results
        out["sync_summary"] = summarize_sync(sync_results)
        report_sync(out["sync_summary"], args.sync_seconds)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
