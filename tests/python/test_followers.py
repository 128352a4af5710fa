"""Read-only followers beside a writer that restarts and deletes files, retention passes, and a
pull consumer with one queue it cannot read.

Writers that crash are real processes (``kill -9``); the follower is this test process.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import mqlite
from mqlite import ConsumeFromWhere, Message, MessageQueue

SpawnPy = Callable[..., subprocess.Popen[str]]

CL_FILE = 1 << 20
CQ_UNITS = 1000

# Sends argv[2] messages of argv[3] bytes each to queue 0 of topic "t", makes sure the file
# prepared ahead of the next roll exists (flush waits for files being created), says "ready"
# and then closes the store cleanly ("close" on stdin) or waits to be killed.
WRITER = f"""
import sys
import mqlite
from mqlite import Message
path, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = mqlite.open(path, commit_log_file_size={CL_FILE}, consume_queue_file_units={CQ_UNITS},
                max_message_size=64 << 10, exclusive=True)
s.create_topic("t", 1)
p = s.producer()
first = s.offsets(mqlite.MessageQueue("t", 0))[1]
for i in range(first, first + n):
    p.send(Message("t", b"%08d" % i + b"x" * (size - 8)), queue_id=0)
s.flush()
s.flush()
print("ready", flush=True)
if sys.stdin.readline().strip() == "close":
    s.close()
    print("closed", flush=True)
sys.stdin.readline()
"""


def _ready(proc: subprocess.Popen[str], word: str = "ready") -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != word:
        proc.kill()
        _, err = proc.communicate(timeout=30)
        pytest.fail(f"writer said {line!r}, not {word!r}: {err}")


def _deleted_mappings(store: Path) -> list[str]:
    """Files of the store this process still maps although they were deleted."""
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[-2] for line in maps
                       if line.rstrip().endswith("(deleted)") and str(store) in line})


def _read_all(store: mqlite.Store, mq: MessageQueue) -> list[int]:
    low, high = store.offsets(mq)
    seen: list[int] = []
    offset = low
    while offset < high:
        result = store.read_result(mq, offset, 256)
        assert result.next_offset > offset, result.status
        seen.extend(int(m.body[:8]) for m in result.messages)
        offset = result.next_offset
    return seen


@pytest.mark.parametrize("end", ["kill", "close"])
@pytest.mark.parametrize("kind", ["commitlog", "consumequeue"])
def test_follower_reads_a_file_the_next_writer_recreated_under_the_same_name(
    store_path: Path, spawn_py: SpawnPy, kind: str, end: str
) -> None:
    """The all-zero file an exclusive writer prepared ahead of its next roll is deleted by the
    next writer's recovery (after a kill -9) or by close (shared writers leave it for any of them
    to roll to), and created again, as another file, when the next
    writer rolls to it. A follower that mapped the first one reads the second: every message,
    no CorruptedLogError, and the deleted file is no longer mapped."""
    mq = MessageQueue("t", 0)
    # Past the half of the first file (commit log: 8 KiB records; consume queue: 20-byte units
    # of small records), so that the next file is prepared; then well past the roll.
    size, first, second = (8000, 70, 200) if kind == "commitlog" else (64, 600, 1600)
    sub = store_path / ("commitlog" if kind == "commitlog" else "consumequeue/t/0")
    step = CL_FILE if kind == "commitlog" else CQ_UNITS * 20
    prepared = sub / f"{step:020d}"

    w1 = spawn_py(WRITER, store_path, first, size)
    _ready(w1)
    assert prepared.exists() and prepared.stat().st_size == step, "the next file was prepared"
    with mqlite.open(store_path, read_only=True) as follower:
        assert _read_all(follower, mq) == list(range(first))
        old_inode = prepared.stat().st_ino
        assert w1.stdin is not None
        if end == "kill":
            os.kill(w1.pid, signal.SIGKILL)
        else:
            w1.stdin.write("close\n")
            w1.stdin.flush()
            _ready(w1, "closed")
        w1.kill()
        w1.wait(timeout=30)

        w2 = spawn_py(WRITER, store_path, second, size)
        _ready(w2)
        assert prepared.stat().st_ino != old_inode, "the name now holds another file"
        assert _read_all(follower, mq) == list(range(first + second))
        assert follower.offsets(mq) == (0, first + second)
        assert _deleted_mappings(store_path) == []


MONITOR = """
import json, os, sys, time
import mqlite
from mqlite import MessageQueue
s = mqlite.open(sys.argv[1], read_only=True)
queues = [MessageQueue("t", 0), MessageQueue("t", 1)]
print(json.dumps([s.offsets(q) for q in queues]), flush=True)
want = int(sys.stdin.readline())
# Only queue 0 is looked at from now on (queue 1 "moved away"); no message is read.
deadline = time.monotonic() + 20
while s.offsets(queues[0])[0] < want and time.monotonic() < deadline:
    time.sleep(0.01)
held = []
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        continue
    if target.endswith("(deleted)") and sys.argv[1] in target:
        held.append(target)
with open("/proc/self/maps") as maps:
    mapped = sorted({l.split()[-2] for l in maps if l.rstrip().endswith("(deleted)") and sys.argv[1] in l})
print(json.dumps({"offsets": s.offsets(queues[0]), "held": held, "mapped": mapped}), flush=True)
sys.stdin.readline()
"""


def _age(paths: list[Path], seconds: float) -> None:
    old = time.time() - seconds
    for p in paths:
        os.utime(p, (old, old))


def test_a_follower_that_reads_nothing_lets_go_of_the_files_retention_deleted(
    store_path: Path, spawn_py: SpawnPy
) -> None:
    """A read-only handle that only asks for offsets (a monitor, or a consumer whose queues moved
    away) stops holding the commit-log and consume-queue files the writer's retention deleted,
    including those of a queue it no longer looks at, and reports the new minimum offset."""
    import json

    size = 64 << 10
    opts = dict(commit_log_file_size=size, consume_queue_file_units=100, max_message_size=4096,
                retention_hours=1.0)
    body = b"x" * 2000
    with mqlite.open(store_path, **opts) as writer:
        writer.create_topic("t", 2)
        p = writer.producer()
        for i in range(300):
            p.send(Message("t", body), queue_id=i % 2)
        writer.flush()
        monitor = spawn_py(MONITOR, store_path)
        assert monitor.stdout is not None and monitor.stdin is not None
        assert json.loads(monitor.stdout.readline()) == [[0, 150], [0, 150]]
        for i in range(300):
            p.send(Message("t", body), queue_id=i % 2)
        writer.flush()
        end = writer.stats()["commit_log_max_offset"]
        writing = end - end % size
        old = [f for f in (store_path / "commitlog").iterdir() if int(f.name) < writing]
        cq1_before = sorted((store_path / "consumequeue/t/1").iterdir())
        _age(old, 2 * 3600)
        deleted = 0
        while n := writer.delete_expired_files():  # one pass is enough (see the test below)
            deleted += n
        assert deleted == len(old) > 10
        assert len(sorted((store_path / "consumequeue/t/1").iterdir())) < len(cq1_before)
        low, high = writer.offsets(MessageQueue("t", 0))
        assert low > 0
        monitor.stdin.write(f"{low}\n")
        monitor.stdin.flush()
        seen = json.loads(monitor.stdout.readline())
        assert seen == {"offsets": [low, high], "held": [], "mapped": []}


def test_one_pass_of_retention_deletes_every_expired_file(tmp_path: Path) -> None:
    """Retention is not rationed: a pass deletes every expired commit-log file (the background
    pass the same way, a time slice at a time), oldest first, never the file being written."""
    size = 64 << 10
    with mqlite.open(tmp_path / "s", commit_log_file_size=size, consume_queue_file_units=100,
                     max_message_size=4096, retention_hours=1.0) as store:
        store.create_topic("t", 1)
        with store.producer() as p:
            for _ in range(1200):
                p.send(Message("t", b"y" * 2000))
        store.flush()
        end = store.stats()["commit_log_max_offset"]
        writing = end - end % size
        old = sorted(f for f in (tmp_path / "s" / "commitlog").iterdir() if int(f.name) < writing)
        assert len(old) > 30
        _age(old, 2 * 3600)
        assert store.delete_expired_files() == len(old)
        assert not any(f.exists() for f in old)
        assert store.stats()["commit_log_min_offset"] == writing
        assert store.delete_expired_files() == 0


def _damage(store_path: Path, sent: mqlite.SendResult, body: bytes, file_size: int) -> tuple[Path, int, int]:
    """Flips one byte of ``body`` in the commit log, in the record ``sent`` put there; returns
    what restores it."""
    start = sent.commit_log_offset - sent.commit_log_offset % file_size
    path = store_path / "commitlog" / f"{start:020d}"
    with open(path, "r+b") as f:
        f.seek(sent.commit_log_offset - start)
        record = f.read(4096)
        at = sent.commit_log_offset - start + record.index(body)
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0xFF]))
    return path, at, byte


def _restore(path: Path, at: int, byte: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(bytes([byte]))


def test_a_queue_that_cannot_be_read_does_not_stop_the_others(
    store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """poll() returns what it can: the messages of the readable queues and those of the failing
    queue before the damage. The failing queue keeps its position (nothing is skipped), its error
    is in queue_errors() and logged once, and it is served again once it reads."""
    size = 1 << 20
    with mqlite.open(store_path, commit_log_file_size=size, consume_queue_file_units=1000,
                     max_message_size=64 << 10) as store:
        store.create_topic("t", 2)
        p = store.producer()
        sent = {(q, i): p.send(Message("t", b"q%d-m%d" % (q, i)), queue_id=q)
                for i in range(3) for q in (0, 1)}
        store.flush()
        damaged = _damage(store_path, sent[(0, 1)], b"q0-m1", size)
        q0, q1 = MessageQueue("t", 0), MessageQueue("t", 1)
        with store.pull_consumer("g", consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) as c:
            c.assign([q0, q1])
            with caplog.at_level(logging.INFO, logger="mqlite.consumer"):
                got = sorted(m.body for m in c.poll(0))
                assert got == [b"q0-m0", b"q1-m0", b"q1-m1", b"q1-m2"]
                assert c.poll(0) == []  # queue 0 is retried, still failing; queue 1 is done
                errors = c.queue_errors()
                assert list(errors) == [q0] and isinstance(errors[q0], mqlite.CorruptedLogError)
                assert c.position(q0) == 1 and c.position(q1) == 3
                logged = [r for r in caplog.records if r.levelno == logging.ERROR]
                assert len(logged) == 1 and str(q0) in logged[0].getMessage()
                _restore(*damaged)
                assert [m.body for m in c.poll(0)] == [b"q0-m1", b"q0-m2"]
                assert c.queue_errors() == {}
                assert any(r.levelno == logging.INFO and str(q0) in r.getMessage()
                           for r in caplog.records)
        # A consumer whose every queue fails gets the error from poll itself.
        damaged = _damage(store_path, sent[(0, 0)], b"q0-m0", size)
        with store.pull_consumer("g2", consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET) as c:
            c.assign([q0])
            with pytest.raises(mqlite.CorruptedLogError):
                c.poll(0.2)
            assert c.position(q0) == 0 and list(c.queue_errors()) == [q0]
        _restore(*damaged)


def test_a_follower_reports_the_writers_commit_log_end_not_the_file_size(tmp_path: Path) -> None:
    """A read-only handle cannot see the writer's position; its stats still give the end of the
    last record, across a roll into a new file and after more sends."""
    size = 64 << 10
    with mqlite.open(tmp_path / "s", commit_log_file_size=size, consume_queue_file_units=100,
                     max_message_size=4096) as writer:
        writer.create_topic("t", 1)
        p = writer.producer()
        follower = mqlite.open(tmp_path / "s", read_only=True)
        try:
            for n in (5, 40, 1):  # the 40 sends of 2000 bytes roll into a second file
                for _ in range(n):
                    p.send(Message("t", b"y" * 2000))
                writer.flush()
                want = writer.stats()["commit_log_max_offset"]
                got = follower.stats()
                assert (got["commit_log_max_offset"], got["dispatched_offset"]) == (want, want)
            assert want > size
        finally:
            follower.close()
