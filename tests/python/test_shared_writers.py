"""Several writer processes on one store (``shared=True``, docs/design-many-writers.md).

Children are fresh interpreters (``subprocess`` with ``sys.executable``), never forks.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import mqlite
from mqlite import Message, MessageQueue

SpawnPy = Callable[..., subprocess.Popen[str]]

QUEUES = 3
PER_PROCESS = 400

SENDER = """
import sys
import mqlite
from mqlite import Message

path, who, count, queues = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with mqlite.open(path, shared=True) as store:
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


def test_processes_send_to_one_store_and_see_each_other(
    store_path: Path, spawn_py: SpawnPy
) -> None:
    with mqlite.open(store_path, shared=True) as store:
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
    with mqlite.open(store_path):
        with pytest.raises(mqlite.StoreLockedError):
            mqlite.open(store_path, shared=True)
    with mqlite.open(store_path, shared=True), mqlite.open(store_path, shared=True):
        with pytest.raises(mqlite.StoreLockedError):
            mqlite.open(store_path)


def test_shared_needs_a_directory_and_a_writer() -> None:
    with pytest.raises(mqlite.InvalidConfigError):
        mqlite.open(":memory:", shared=True)


def test_shared_and_read_only_conflict(store_path: Path) -> None:
    with pytest.raises(mqlite.InvalidConfigError):
        mqlite.open(store_path, shared=True, read_only=True)
    with mqlite.open(store_path, shared=True) as store:
        store.create_topic("shared", 1)
        store.producer().send(Message("shared", b"0:0"), queue_id=0)
