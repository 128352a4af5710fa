"""Several writer processes on one store (the default open; ``exclusive=True`` keeps others out;
docs/design-many-writers.md).

Children are fresh interpreters (``subprocess`` with ``sys.executable``), never forks.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import mqlite
from mqlite import Message, MessageQueue

SpawnPy = Callable[..., subprocess.Popen[str]]
RunPy = Callable[..., subprocess.CompletedProcess[str]]

QUEUES = 3
PER_PROCESS = 400

SENDER = """
import sys
import mqlite
from mqlite import Message

path, who, count, queues = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with mqlite.open(path) as store:
    producer = store.producer()
    for i in range(count):
        producer.send(Message("shared", f"{who}:{i}".encode()), queue_id=i % queues)
"""


def _everything(store: mqlite.Store) -> set[tuple[int, int]]:
    """Every message of every queue as (process, index), checked: offsets contiguous, each
    message once, each process's order kept within a queue."""
    seen: set[tuple[int, int]] = set()
    for q in range(QUEUES):
        mq = MessageQueue("shared", q)
        offset = 0
        last: dict[int, int] = {}
        while True:
            res = store.read_result(mq, offset, 64)
            if not res.messages:
                break
            for m in res.messages:
                assert m.queue_offset == offset
                offset += 1
                who, i = map(int, m.body.decode().split(":"))
                assert i % QUEUES == q
                assert last.get(who, -1) < i, (who, i, q)
                last[who] = i
                assert (who, i) not in seen
                seen.add((who, i))
    return seen


HOLDER = """
import sys, mqlite
store = mqlite.open(sys.argv[1])
store.create_topic("held", 1)
store.producer().send(mqlite.Message("held", b"x"), queue_id=0)
print("open", flush=True)
sys.stdin.readline()
store.close()
"""

CONFLICT_PROBE = """
import json, sys, mqlite
try:
    mqlite.open(sys.argv[1], consume_queue_file_units=64).close()
    print(json.dumps(None))
except mqlite.InvalidConfigError as exc:
    print(json.dumps([type(exc).__name__, exc.field, exc.stored, exc.given]))
"""


def test_processes_send_to_one_store_and_see_each_other(
    store_path: Path, spawn_py: SpawnPy
) -> None:
    with mqlite.open(store_path) as store:
        store.create_topic("shared", QUEUES)
        procs = [spawn_py(SENDER, store_path, who, PER_PROCESS, QUEUES) for who in range(3)]
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        want = {(who, i) for who in range(3) for i in range(PER_PROCESS)}
        assert _everything(store) == want
    with mqlite.open(store_path) as reopened:
        assert _everything(reopened) == want


def test_exclusive_and_shared_opens_refuse_each_other(store_path: Path) -> None:
    with mqlite.open(store_path, exclusive=True):
        with pytest.raises(mqlite.StoreLockedError):
            mqlite.open(store_path)
        with pytest.raises(mqlite.StoreLockedError):
            mqlite.open(store_path, exclusive=True)
    with mqlite.open(store_path), mqlite.open(store_path):
        with pytest.raises(mqlite.StoreLockedError):
            mqlite.open(store_path, exclusive=True)
        # The deprecated alias: shared=False is exclusive=True.
        with pytest.raises(mqlite.StoreLockedError):
            mqlite.open(store_path, shared=False)
        mqlite.open(store_path, shared=True).close()


def test_exclusive_waits_for_the_shared_writers_to_close(
    store_path: Path, spawn_py: SpawnPy
) -> None:
    holder = spawn_py(HOLDER, store_path)
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline().strip() == "open"
    with pytest.raises(mqlite.StoreLockedError):
        mqlite.open(store_path, exclusive=True, wait=0.05)
    holder.stdin.write("close\n")
    holder.stdin.flush()
    with mqlite.open(store_path, exclusive=True, wait=60) as store:
        assert [m.body for m in store.read(mqlite.MessageQueue("held", 0), 0)] == [b"x"]
    assert holder.wait(timeout=60) == 0


def test_memory_and_read_only_stores_are_unaffected_by_the_default(store_path: Path) -> None:
    with mqlite.open(":memory:") as mem:
        mem.producer().send(Message("t", b"m"))
        with pytest.raises(mqlite.InvalidConfigError):
            mqlite.open(store_path, exclusive=True, read_only=True)
        with pytest.raises(mqlite.InvalidConfigError, match="exclusive"):
            mqlite.open(store_path, exclusive=True, shared=True)


def test_options_that_contradict_the_store_are_refused_in_every_process(
    store_path: Path, run_py: RunPy
) -> None:
    with mqlite.open(store_path, commit_log_file_size=1 << 20) as store:
        store.producer().send(Message("t", b"x"))
        for opener in ("here", "child"):
            if opener == "here":
                with pytest.raises(mqlite.InvalidConfigError) as info:
                    mqlite.open(store_path, commit_log_file_size=2 << 20)
                err = info.value
                assert (err.field, err.stored, err.given) == (
                    "commit_log_file_size", 1 << 20, 2 << 20)
                assert "commit_log_file_size" in str(err)
            else:
                done = run_py(CONFLICT_PROBE, store_path)
                assert done.returncode == 0, done.stderr
                assert json.loads(done.stdout) == [
                    "InvalidConfigError", "consume_queue_file_units", 50_000, 64]
        store.producer().send(Message("t", b"still open"))


def test_shared_alias_and_read_only(store_path: Path) -> None:
    with mqlite.open(store_path, shared=True) as store:
        store.create_topic("shared", 1)
        store.producer().send(Message("shared", b"0:0"), queue_id=0)
        with mqlite.open(store_path, read_only=True) as reader:
            assert [m.body for m in reader.read(MessageQueue("shared", 0), 0)] == [b"0:0"]
