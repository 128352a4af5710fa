"""Concurrency: threads and processes on one store (reliability plan B.e).

- (a) 4 producer threads x 3 consumer threads (one ``PullConsumer`` group, clustering) on one
  store, 20,000 messages: every acknowledged message is consumed exactly once, at its
  acknowledged queue offset, in queue order, with no exception in any thread.
- (b) the test process writes (rolling commit-log and consume-queue files and expiring old
  ones) while 2 read-only processes tail every queue: each reader sees every message that still
  exists, in order, intact, and exits 0.
- (c) a second writer process is refused by an ``exclusive=True`` writer with ``StoreLockedError``
  before it touches a file.
- (d) after a real ``os.fork()`` every store call in the child raises
  ``StoreUsedAfterForkError`` and the child exits 0; the parent keeps working. So do the calls
  that would wait for the parent's threads (pending futures, flush, poll token, push shutdown).

Children are fresh interpreters (``subprocess``), except the child of (d), which is the fork
under test.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

import mqlite
from mqlite import ConsumeFromWhere, Message, MessageQueue

RunPy = Callable[..., subprocess.CompletedProcess[str]]
SpawnPy = Callable[..., subprocess.Popen[str]]

# -- (a) threads ----------------------------------------------------------------------------------

PRODUCERS = 4
CONSUMERS = 3
QUEUES = 4
TOTAL = 20_000
PER_PRODUCER = TOTAL // PRODUCERS


def test_producer_and_consumer_threads_consume_every_message_exactly_once(store_path: Path) -> None:
    store = mqlite.open(
        store_path, commit_log_file_size=1 << 20, max_message_size=64 << 10, consume_queue_file_units=1024
    )
    store.create_topic("conc", QUEUES)
    errors: list[BaseException] = []
    acks: list[list[tuple[int, int, int]]] = [[] for _ in range(PRODUCERS)]  # (queue, offset, seq)
    got: list[list[tuple[int, int, bytes]]] = [[] for _ in range(CONSUMERS)]  # (queue, offset, body)
    consumed = 0
    count_lock = threading.Lock()
    all_consumed = threading.Event()
    go = threading.Event()
    consumers = [
        store.pull_consumer(
            "conc-group",
            consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            max_poll_messages=64,
            rebalance_interval=0.05,
        )
        for _ in range(CONSUMERS)
    ]
    for c in consumers:
        c.subscribe("conc")

    def produce(pid: int) -> None:
        try:
            producer = store.producer()
            go.wait()
            for seq in range(PER_PRODUCER):
                r = producer.send(Message("conc", f"{pid}:{seq}".encode()))
                acks[pid].append((r.message_queue.queue_id, r.queue_offset, seq))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def consume(cid: int) -> None:
        nonlocal consumed
        try:
            c = consumers[cid]
            deadline = time.monotonic() + 60
            while not all_consumed.is_set() and time.monotonic() < deadline:
                batch = c.poll(timeout=0.05)
                got[cid].extend((m.queue_id, m.queue_offset, m.body) for m in batch)
                with count_lock:
                    consumed += len(batch)
                    if consumed >= TOTAL:
                        all_consumed.set()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(CONSUMERS)]
    threads += [threading.Thread(target=produce, args=(i,)) for i in range(PRODUCERS)]
    start = time.monotonic()
    for t in threads:
        t.start()
    # Let the group settle (every queue owned by exactly one member) before sending.
    settle = time.monotonic() + 10
    while time.monotonic() < settle:
        owned = [mq for c in consumers for mq in c.assignment()]
        if sorted(owned) == [MessageQueue("conc", q) for q in range(QUEUES)]:
            break
        time.sleep(0.02)
    go.set()
    for t in threads:
        t.join(timeout=90)
    elapsed = time.monotonic() - start
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert errors == [], errors
    for c in consumers:
        c.close()

    # Acknowledgements: per producer, queue offsets grow with seq in each queue.
    acked: dict[tuple[int, int], tuple[int, int]] = {}
    for pid, lst in enumerate(acks):
        assert len(lst) == PER_PRODUCER
        last: dict[int, int] = {}
        for q, off, seq in lst:
            assert off > last.get(q, -1), "a producer's sends are out of order in a queue"
            last[q] = off
            assert (q, off) not in acked, "two sends acknowledged at one queue offset"
            acked[(q, off)] = (pid, seq)
    # Consumption: exactly once, at the acknowledged offset, each consumer in queue order.
    seen: dict[tuple[int, int], int] = defaultdict(int)
    for lst in got:
        last_off: dict[int, int] = {}
        for q, off, body in lst:
            assert off > last_off.get(q, -1), "a consumer received a queue out of order"
            last_off[q] = off
            pid, seq = acked[(q, off)]
            assert body == f"{pid}:{seq}".encode()
            seen[(q, off)] += 1
    duplicated = sum(n - 1 for n in seen.values() if n > 1)
    lost = len(set(acked) - set(seen))
    assert (lost, duplicated) == (0, 0)
    assert len(seen) == TOTAL
    for q in range(QUEUES):
        assert store.offsets(MessageQueue("conc", q))[1] == sum(1 for k in acked if k[0] == q)
    store.close()
    print(f"\n(a) {PRODUCERS} producers x {CONSUMERS} consumers, {TOTAL} messages in {elapsed:.1f} s; "
          f"per consumer {[len(x) for x in got]}; lost 0, duplicated 0")


# -- (b) writer + tailing read-only processes ------------------------------------------------------

TAIL_QUEUES = 4
TAIL_TOTAL = 6_000  # about 9 MB: some 35 commit-log files of 256 KiB and 6 CQ files per queue
TAIL_CHUNK = 150  # per queue: the writer expires files after each chunk
TAIL_CONFIG = {
    "commit_log_file_size": 256 << 10,
    "max_message_size": 16 << 10,
    "consume_queue_file_units": 256,
    "retention_hours": 1e-6,  # 3.6 ms: every file but the one being written is expired
}

TAILER = """
import hashlib, json, sys, time
import mqlite
from mqlite import MessageQueue

path, queues, per_queue, chunk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[5])
# The same file sizes as the writer: they are not stored in the store directory.
store = mqlite.open(path, read_only=True, **json.loads(sys.argv[4]))
mqs = [MessageQueue("tail", q) for q in range(queues)]
pos = {mq: 0 for mq in mqs}
seen = {mq.queue_id: [] for mq in mqs}     # queue offsets seen, in order
skipped = {mq.queue_id: [] for mq in mqs}  # [from, to) ranges reported as expired
bad = []
print(json.dumps({"ready": True}), flush=True)
reported = 0
deadline = time.monotonic() + 60
while any(pos[mq] < per_queue for mq in mqs) and time.monotonic() < deadline:
    at = min(pos.values())
    if at // chunk > reported // chunk:
        reported = at
        print(json.dumps({"at": at}), flush=True)
    progressed = False
    for mq in mqs:
        if pos[mq] >= per_queue:
            continue
        res = store.read_result(mq, pos[mq], 64)
        if res.messages:
            for m in res.messages:
                q, k, digest, pad = m.body.split(b":", 3)
                ok = (int(q), int(k)) == (mq.queue_id, m.queue_offset)
                ok = ok and hashlib.blake2b(pad, digest_size=8).hexdigest().encode() == digest
                if not ok or m.queue_offset < pos[mq]:
                    bad.append([mq.queue_id, m.queue_offset])
                seen[mq.queue_id].append(m.queue_offset)
                pos[mq] = m.queue_offset + 1
            progressed = True
        elif res.status == "OFFSET_TOO_SMALL":
            skipped[mq.queue_id].append([pos[mq], res.next_offset, res.status, res.min_offset, res.max_offset])
            pos[mq] = res.next_offset
            progressed = True
        elif res.next_offset > pos[mq] and res.status != "OFFSET_OVERFLOW_BADLY":
            skipped[mq.queue_id].append([pos[mq], res.next_offset, res.status, res.min_offset, res.max_offset])
            pos[mq] = res.next_offset
            progressed = True
    if not progressed:
        store.wait_for([(mq, pos[mq]) for mq in mqs if pos[mq] < per_queue], 0.05)
mins = {mq.queue_id: store.offsets(mq)[0] for mq in mqs}
print(json.dumps({"seen": seen, "skipped": skipped, "bad": bad, "pos": [pos[mq] for mq in mqs],
                  "mins": mins}), flush=True)
store.close()
"""


def _wait_for_progress(proc: subprocess.Popen[str], at: int, timeout: float = 30) -> None:
    """Reads the reader's progress lines until it reports position ``at`` on every queue."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"reader exited early: {proc.communicate(timeout=10)[1]}")
        if json.loads(line).get("at", -1) >= at:
            return
    pytest.fail(f"reader did not reach {at} within {timeout} s")


def _tail_body(q: int, k: int) -> bytes:
    pad = hashlib.sha256(f"{q}/{k}".encode()).digest() * (1 + (k * 7919 + q) % 90)
    digest = hashlib.blake2b(pad, digest_size=8).hexdigest().encode()
    return b"%d:%d:%s:%s" % (q, k, digest, pad)


def test_read_only_processes_tail_a_rolling_expiring_writer(store_path: Path, spawn_py: SpawnPy) -> None:
    per_queue = TAIL_TOTAL // TAIL_QUEUES
    writer = mqlite.open(store_path, **TAIL_CONFIG)
    writer.create_topic("tail", TAIL_QUEUES)
    producer = writer.producer()
    producer.send(Message("tail", _tail_body(0, 0)), queue_id=0)
    writer.flush()
    readers = [
        spawn_py(TAILER, store_path, TAIL_QUEUES, per_queue, json.dumps(TAIL_CONFIG), TAIL_CHUNK)
        for _ in range(2)
    ]
    for r in readers:
        assert r.stdout is not None
        assert json.loads(r.stdout.readline()) == {"ready": True}
    start = time.monotonic()
    deleted = 0
    sent = [1] + [0] * (TAIL_QUEUES - 1)
    for end in range(TAIL_CHUNK, per_queue + 1, TAIL_CHUNK):
        # Write a chunk (about 3.5 commit-log files) while the readers read it...
        while any(n < end for n in sent):
            for q in range(TAIL_QUEUES):
                if sent[q] < end:
                    r = producer.send(Message("tail", _tail_body(q, sent[q])), queue_id=q)
                    assert r.queue_offset == sent[q]
                    sent[q] += 1
        # ...then expire every file but the current one once both readers have read it (a
        # reader that lags behind expiry hits bug 3, see the test below).
        if end < per_queue:
            for r in readers:
                _wait_for_progress(r, end)
            deleted += writer.delete_expired_files()
    write_time = time.monotonic() - start
    final_min = {q: writer.offsets(MessageQueue("tail", q))[0] for q in range(TAIL_QUEUES)}
    stats = writer.stats()
    results = []
    for r in readers:
        out, err = r.communicate(timeout=60)
        assert r.returncode == 0, err
        results.append(json.loads([x for x in out.strip().splitlines() if '"seen"' in x][-1]))
    writer.close()

    assert deleted >= 20, f"only {deleted} commit-log files expired: the test lost its point"
    assert stats["commit_log_min_offset"] > 0
    seen_total = []
    for res in results:
        assert res["bad"] == [], "a reader got a corrupt or misplaced message"
        assert res["pos"] == [per_queue] * TAIL_QUEUES
        n = 0
        for q in range(TAIL_QUEUES):
            seen = res["seen"][str(q)]
            assert seen == sorted(set(seen)), "out of order or duplicated"
            # every offset was either seen or reported expired (OFFSET_TOO_SMALL)
            covered = set(seen)
            for lo, hi, *_ in res["skipped"][str(q)]:
                assert lo < hi
                assert not covered & set(range(lo, hi))
                covered |= set(range(lo, hi))
            assert covered == set(range(per_queue)), f"queue {q}: offsets neither seen nor expired"
            # everything that still exists at the end was seen
            missed = sorted(set(range(final_min[q], per_queue)) - set(seen))
            assert not missed, (f"queue {q}: {len(missed)} messages that still exist were never seen "
                                f"(first {missed[:3]}); skips {res['skipped'][str(q)]}")
            n += len(seen)
        seen_total.append(n)
    print(f"\n(b) wrote {TAIL_TOTAL} messages in {write_time:.1f} s, {deleted} commit-log files expired; "
          f"readers saw {seen_total} (the rest expired before they got there); 0 corrupt, 0 out of order")


def test_read_only_store_reads_past_files_expired_before_it_mapped_them(store_path: Path) -> None:
    writer = mqlite.open(store_path, **TAIL_CONFIG)
    writer.create_topic("tail", 1)
    producer = writer.producer()
    mq = MessageQueue("tail", 0)
    for k in range(10):
        producer.send(Message("tail", _tail_body(0, k)), queue_id=0)
    # The writer's own read dispatches what it appended (read-your-writes): the units are on
    # disk for the follower before it looks, whatever the pace of the dispatch thread.
    assert writer.read_result(mq, 9, 1).status == "FOUND"
    reader = mqlite.open(store_path, read_only=True, **TAIL_CONFIG)
    assert reader.read_result(mq, 0, 5).status == "FOUND"  # maps the first files
    for k in range(10, 3000):  # about 18 files of 256 KiB
        producer.send(Message("tail", _tail_body(0, k)), queue_id=0)
    assert writer.delete_expired_files() >= 5
    low = writer.offsets(mq)[0]
    assert 0 < low < 2990
    try:
        fresh = mqlite.open(store_path, read_only=True, **TAIL_CONFIG)
        assert [m.queue_offset for m in fresh.read(mq, 2990, 5)] == list(range(2990, 2995))
        fresh.close()
        res = reader.read_result(mq, 2990, 5)
        assert (res.status, [m.queue_offset for m in res.messages]) == ("FOUND", list(range(2990, 2995)))
    finally:
        reader.close()
        writer.close()


# -- (c) a second writer process -------------------------------------------------------------------

SECOND_WRITER = """
import json, sys, time
import mqlite
t0 = time.monotonic()
try:
    mqlite.open(sys.argv[1]).close()
    print(json.dumps({"opened": True}))
except mqlite.StoreLockedError as exc:
    print(json.dumps({"opened": False, "error": type(exc).__name__, "ms": (time.monotonic() - t0) * 1000}))
"""


def _snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns, digest)
    return out


def test_second_writer_process_is_refused_before_touching_a_file(store_path: Path, run_py: RunPy) -> None:
    # A long flush interval keeps the writer's own flush thread from rewriting the checkpoint
    # while the snapshots are compared.
    with mqlite.open(store_path, commit_log_file_size=256 << 10, max_message_size=16 << 10,
                     flush_interval_ms=60_000, exclusive=True) as writer:
        writer.create_topic("t", 2)
        for i in range(50):
            writer.producer().send(Message("t", b"x%d" % i))
        writer.flush()
        before = _snapshot(store_path)
        time.sleep(0.2)
        assert _snapshot(store_path) == before, "the idle writer changed files: no baseline"
        done = run_py(SECOND_WRITER, store_path)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["opened"] is False and result["error"] == "StoreLockedError"
        assert result["ms"] < 1000
        assert _snapshot(store_path) == before, "the refused writer changed the store"
        # the first writer is unaffected
        r = writer.producer().send(Message("t", b"after"), queue_id=0)
        assert writer.read(r.message_queue, r.queue_offset)[0].body == b"after"


# -- (d) use after fork ---------------------------------------------------------------------------

FORK_CHILD = """
import json, os, sys
import mqlite
from mqlite import Message, MessageQueue

store = mqlite.open(sys.argv[1])
producer = store.producer()
mq = MessageQueue("f", 0)
store.create_topic("f", 1)
producer.send(Message("f", b"before fork"))
consumer = store.pull_consumer("fork-group", consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
consumer.assign([mq])
calls = {
    "send": lambda: producer.send(Message("f", b"from child")),
    "new_producer": store.producer,
    "read": lambda: store.read(mq, 0),
    "offsets": lambda: store.offsets(mq),
    "flush": store.flush,
    "stats": store.stats,
    "topics": store.topics,
    "delete_expired_files": store.delete_expired_files,
    "poll": lambda: consumer.poll(timeout=0),
    "core_read": lambda: store._core.read("f", 0, 0, 1, None),
    "core_flush": lambda: store._core.flush(),
}
pid = os.fork()
if pid == 0:
    refused = []
    for name, call in calls.items():
        try:
            call()
        except mqlite.StoreUsedAfterForkError:
            refused.append(name)
        except BaseException:
            pass
    os._exit(0 if len(refused) == len(calls) else 3)
_, status = os.waitpid(pid, 0)
child_rc = os.waitstatus_to_exitcode(status)
r = producer.send(Message("f", b"parent after fork"))
bodies = [m.body.decode() for m in store.read(mq, 0, 10)]
polled = [m.body.decode() for m in consumer.poll(timeout=1)]
consumer.close()
store.close()
with mqlite.open(sys.argv[1]) as again:
    reopened = [m.body.decode() for m in again.read(mq, 0, 10)]
    abnormal = again.stats()["recovery_abnormal"]
print(json.dumps({"child_rc": child_rc, "offset": r.queue_offset, "bodies": bodies,
                  "polled": polled, "reopened": reopened, "abnormal": abnormal}))
"""


def test_store_used_after_fork_is_refused_in_the_child(store_path: Path, run_py: RunPy) -> None:
    done = run_py(FORK_CHILD, store_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["child_rc"] == 0, "a store call in the forked child did not raise StoreUsedAfterForkError"
    assert result["offset"] == 1
    assert result["bodies"] == ["before fork", "parent after fork"]
    assert result["polled"] == ["before fork", "parent after fork"]
    assert result["reopened"] == result["bodies"]
    assert result["abnormal"] is False


FORK_WAITS = """
import json, os, signal, sys, threading
import mqlite
from mqlite import ConsumeStatus, Message, MessageQueue, _core

store = mqlite.open(sys.argv[1], flush="sync")
store.create_topic("t", 1)
producer = store.producer()
# The first send's callback holds the completion thread, so the second send stays pending.
entered, release = threading.Event(), threading.Event()
def hold(result, exc):
    entered.set()
    release.wait()
producer.send_async(Message("t", b"first"), hold)
entered.wait()
pending = producer.send_async(Message("t", b"second"))
# A poll token held (not in a listener call) by a thread of this process.
token = _core.PollToken(0.05)
held = threading.Event()
def holder():
    token.acquire(lambda: True)
    held.set()
    release.wait()
    token.release()
threading.Thread(target=holder, daemon=True).start()
held.wait()
push = store.push_consumer("g", threads=1)
push.subscribe("t")
push.register_message_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
push.start()
calls = {
    "future.result": lambda: pending.result(),
    "future.exception": lambda: pending.exception(timeout=60),
    "producer.flush": producer.flush,
    "producer.close": producer.close,
    "token.acquire": lambda: token.acquire(lambda: True),
    "push.shutdown": lambda: push.shutdown(timeout=2),
}
pid = os.fork()
if pid == 0:
    signal.alarm(30)  # a call that hangs ends the child (SIGALRM) instead of the test run
    outcome = {}
    for name, call in calls.items():
        try:
            call()
            outcome[name] = "returned"
        except BaseException as exc:
            outcome[name] = type(exc).__name__
    print(json.dumps(outcome), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
release.set()
second = pending.result(30).send_status.name
push.shutdown()
store.close()
print(json.dumps({"child_rc": os.waitstatus_to_exitcode(status), "second": second}))
"""


def test_blocking_calls_in_a_forked_child_raise_instead_of_waiting(store_path: Path, run_py: RunPy) -> None:
    """In a forked child none of the parent's threads exist: a pending send's future, a
    producer's flush/close, a poll token held by another thread and a running push consumer's
    shutdown raise StoreUsedAfterForkError at once instead of waiting for them forever."""
    done = run_py(FORK_WAITS, store_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["child_rc"] == 0, f"a call in the forked child hung: {done.stdout}"
    assert json.loads(lines[-2]) == {
        "future.result": "StoreUsedAfterForkError",
        "future.exception": "StoreUsedAfterForkError",
        "producer.flush": "StoreUsedAfterForkError",
        "producer.close": "StoreUsedAfterForkError",
        "token.acquire": "StoreUsedAfterForkError",
        "push.shutdown": "StoreUsedAfterForkError",
    }
    assert result["second"] == "SEND_OK"  # the parent still confirms it


def _content(root: Path) -> dict[str, tuple[int, str]]:
    """Sizes and digests only: the open writer's own preparer thread may fault in (and so
    touch the mtime of) its commit-log pages at any moment; bytes and sizes must not change."""
    return {name: (size, digest) for name, (size, _, digest) in _snapshot(root).items()}


def test_second_writer_in_this_process_is_refused(store_path: Path) -> None:
    with mqlite.open(store_path, flush_interval_ms=60_000, exclusive=True) as first:
        first.producer().send(Message("t", b"x"))
        first.flush()
        before = _content(store_path)
        with pytest.raises(mqlite.StoreLockedError):
            mqlite.open(store_path)
        assert _content(store_path) == before
