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
from helpers import wait_until

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
    say(step="following")
    deadline = time.monotonic() + 30
    while len(seen) < want and time.monotonic() < deadline:
        store.wait_for({mq: len(seen)}, timeout=1.0)  # the writer's next send wakes it
        seen += read_from(store, mq, len(seen))
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
        assert _line(reader) == {"step": "following"}  # the last batch arrives while it follows
        producer.send_batch([f"m{i}".encode() for i in range(20, 25)], topic="feed")
        followed = _line(reader)
        assert followed["seen"] == [f"m{i}" for i in range(25)]
        assert followed["offsets"] == [0, 25]
        assert reader.wait(timeout=30) == 0



SLEEPER = """
import json, sys, time
import mqlite
from mqlite import MessageQueue

with mqlite.open(sys.argv[1], read_only=True) as store:
    mq = MessageQueue("feed", 0)
    print(json.dumps({"step": "waiting"}), flush=True)
    start = time.monotonic()
    woke = store.wait_for({mq: 1}, timeout=60)
    res = store.read_result(mq, 1, 8)
    print(json.dumps({"woke": woke, "secs": time.monotonic() - start,
                      "bodies": [m.body.decode() for m in res.messages]}), flush=True)
"""


def _wake_word(store_path: Path) -> int:
    return int.from_bytes((store_path / "wakeup").read_bytes()[:4], "big")


def test_a_follower_process_sleeps_on_the_wake_up_word_until_the_writer_wakes_it(
    store_path: Path, spawn_py: SpawnPy
) -> None:
    """A read-only follower waiting in another process sleeps on the futex of ``wakeup`` (it
    sets the word's sleeper bit, FORMAT.md §6) instead of polling, and the writer's next send
    clears the bit and wakes it."""
    with mqlite.open(store_path) as writer:
        writer.create_topic("feed", 1)
        producer = writer.producer()
        producer.send(Message("feed", b"first"))
        assert (store_path / "wakeup").stat().st_size == 4096
        word = _wake_word(store_path)
        assert word & 1 == 0, "nobody asleep yet"

        reader = spawn_py(SLEEPER, store_path)
        assert _line(reader) == {"step": "waiting"}
        # the word is in another process's mapping: its sleeper bit is the event to wait for
        wait_until(lambda: _wake_word(store_path) & 1, timeout=30, what="the follower's sleeper bit")
        assert reader.poll() is None, "still waiting: nothing new was sent"

        producer.send(Message("feed", b"second"))
        woke = _line(reader)
        assert woke["woke"] is True and woke["bodies"] == ["second"]
        after = _wake_word(store_path)
        assert after & 1 == 0 and after >> 1 > word >> 1, "the writer cleared the bit and counted"
        assert reader.wait(timeout=30) == 0


def test_second_writer_in_same_process_is_locked(store_path: Path) -> None:
    with mqlite.open(store_path, exclusive=True) as first:
        first.producer().send(Message("t", b"x"))
        with pytest.raises(mqlite.StoreLockedError) as info:
            mqlite.open(store_path)
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
    with mqlite.open(store_path, exclusive=True) as first:
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
store = mqlite.open(sys.argv[1], exclusive=True)
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


@pytest.mark.parametrize("read_only", [False, True])
def test_close_returns_a_thread_blocked_in_wait_for(store_path: Path, read_only: bool) -> None:
    """``wait_for(timeout=None)`` in another thread ends when the store is closed: a writer
    wakes its waiters, a follower its sleepers on the wake-up word."""
    import threading

    with mqlite.open(store_path) as writer:
        writer.create_topic("feed", 1)
        store = mqlite.open(store_path, read_only=True) if read_only else writer
        result: list[object] = []
        waiter = threading.Thread(
            target=lambda: result.append(store.wait_for({MessageQueue("feed", 0): 0}, None))
        )
        waiter.start()
        if read_only:  # it blocks: a follower sets its sleeper bit before it sleeps
            wait_until(lambda: _wake_word(store_path) & 1, what="the follower's sleeper bit")
        else:
            # An in-process waiter shows no sign of its wait (the store exposes no waiter count),
            # so a pause lets it get there. Not causal: a close landing first would make
            # wait_for raise StoreClosedError instead.
            time.sleep(0.3)
        assert waiter.is_alive() and not result
        store.close()
        waiter.join(timeout=20)
        assert not waiter.is_alive(), "close did not wake the waiting thread"
        assert result == [True]  # as documented: the caller checks ``closed``


@pytest.mark.perf
def test_a_second_writer_is_refused_at_once(store_path: Path) -> None:
    """The timing bar of ``test_second_writer_in_same_process_is_locked``: without ``wait=`` the
    second open raises at once (well under 5 s), it does not wait for the lock."""
    with mqlite.open(store_path, exclusive=True) as first:
        first.producer().send(Message("t", b"x"))
        start = time.monotonic()
        with pytest.raises(mqlite.StoreLockedError):
            mqlite.open(store_path)
        assert time.monotonic() - start < 5
