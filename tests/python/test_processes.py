"""Several processes on one store: read-only followers, the writer lock, and ``wait=``.

Children are fresh interpreters (``subprocess`` with ``sys.executable``), never forks.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import mqlite
from mqlite import Message, MessageQueue

RunPy = Callable[..., subprocess.CompletedProcess[str]]
SpawnPy = Callable[..., subprocess.Popen[str]]

READER = """
import json, sys, time
import mqlite
from mqlite import Message, MessageQueue

def say(**kw):
    print(json.dumps(kw), flush=True)

def read_from(store, mq, offset):
    out = []
    while True:
        res = store.read_result(mq, offset, 32)
        if not res.messages:
            return out
        out.extend(m.body.decode() for m in res.messages)
        offset = res.next_offset

with mqlite.open(sys.argv[1], read_only=True) as store:
    mq = MessageQueue("feed", 0)
    seen = read_from(store, mq, 0)
    say(step="initial", seen=seen, read_only=store.read_only, offsets=list(store.offsets(mq)))
    errors = []
    for attempt in (
        lambda: store.producer().send(Message("feed", b"nope")),
        lambda: store.create_topic("other", 1),
    ):
        try:
            attempt()
            errors.append(None)
        except mqlite.StoreReadOnlyError as exc:
            errors.append([type(exc).__name__, exc.code])
    say(step="writes", errors=errors)
    sys.stdin.readline()
    want = int(sys.argv[2])
    deadline = time.monotonic() + 30
    while len(seen) < want and time.monotonic() < deadline:
        seen += read_from(store, mq, len(seen))
        time.sleep(0.01)
    say(step="followed", seen=seen, offsets=list(store.offsets(mq)))
"""


def _line(proc: subprocess.Popen[str]) -> dict[str, object]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        _, err = proc.communicate(timeout=30)
        pytest.fail(f"child exited early: rc={proc.returncode}\n{err}")
    result: dict[str, object] = json.loads(line)
    return result


def test_read_only_process_follows_the_writer(store_path: Path, spawn_py: SpawnPy) -> None:
    with mqlite.open(store_path) as writer:
        writer.create_topic("feed", 1)
        producer = writer.producer()
        for i in range(10):
            producer.send(Message("feed", f"m{i}".encode()))
        writer.flush()

        reader = spawn_py(READER, store_path, 25)
        initial = _line(reader)
        assert initial["seen"] == [f"m{i}" for i in range(10)]
        assert initial["read_only"] is True and initial["offsets"] == [0, 10]
        errors = _line(reader)["errors"]
        assert isinstance(errors, list) and len(errors) == 2
        assert [e[0] for e in errors] == ["StoreReadOnlyError", "StoreReadOnlyError"]
        assert all(e[1] for e in errors)
        assert writer.offsets(MessageQueue("feed", 0)) == (0, 10)
        assert [t.name for t in writer.topics()] == ["feed"]

        for i in range(10, 20):
            producer.send(Message("feed", f"m{i}".encode()))
        assert reader.stdin is not None
        reader.stdin.write("go\n")
        reader.stdin.flush()
        time.sleep(0.05)
        producer.send_batch([f"m{i}".encode() for i in range(20, 25)], topic="feed")
        followed = _line(reader)
        assert followed["seen"] == [f"m{i}" for i in range(25)]
        assert followed["offsets"] == [0, 25]
        assert reader.wait(timeout=30) == 0


def test_second_writer_in_same_process_is_locked(store_path: Path) -> None:
    with mqlite.open(store_path) as first:
        first.producer().send(Message("t", b"x"))
        start = time.monotonic()
        with pytest.raises(mqlite.StoreLockedError) as info:
            mqlite.open(store_path)
        assert time.monotonic() - start < 5
        assert info.value.retriable is True and info.value.code
        with mqlite.open(store_path, read_only=True) as reader:
            assert reader.topics() == first.topics()
        first.producer().send(Message("t", b"still writable"))
    with mqlite.open(store_path) as again:
        assert sum(again.offsets(mq)[1] for mq in again.queues("t")) == 2


LOCK_PROBE = """
import json, sys, mqlite
try:
    mqlite.open(sys.argv[1]).close()
    print(json.dumps(None))
except mqlite.MQError as exc:
    print(json.dumps([type(exc).__name__, exc.code, exc.retriable]))
"""


def test_second_writer_in_other_process_is_locked(store_path: Path, run_py: RunPy) -> None:
    with mqlite.open(store_path) as first:
        first.create_topic("t", 1)
        first.producer().send(Message("t", b"x"))
        done = run_py(LOCK_PROBE, store_path)
        assert done.returncode == 0, done.stderr
        name, code, retriable = json.loads(done.stdout)
        assert (name, retriable) == ("StoreLockedError", True) and code
        assert first.offsets(MessageQueue("t", 0)) == (0, 1)
    done = run_py(LOCK_PROBE, store_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) is None


HOLDER = """
import sys, time, mqlite
store = mqlite.open(sys.argv[1])
store.producer().send(mqlite.Message("held", b"by child"))
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
store.close()
print("released", flush=True)
"""


def test_wait_lets_a_second_writer_take_its_turn(store_path: Path, spawn_py: SpawnPy) -> None:
    holder = spawn_py(HOLDER, store_path, 1.5)
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(mqlite.StoreLockedError):
        mqlite.open(store_path, wait=0.1)
    start = time.monotonic()
    with mqlite.open(store_path, wait=30) as s:
        waited = time.monotonic() - start
        assert [m.body for mq in s.queues("held") for m in s.read(mq, 0)] == [b"by child"]
        s.producer().send(Message("held", b"by parent"))
    assert 0.2 < waited < 30
    assert holder.wait(timeout=30) == 0
