"""Transactional messages: half messages, commit, rollback, checks, idempotent ids, the atomic
multi-commit with progress, and kill -9 of a producer between its halves and its decision and
while it commits."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mqlite
from mqlite import LocalTransactionState as S

from helpers import read_all


class Listener:
    def __init__(self, local: Any = S.COMMIT_MESSAGE, check: Any = S.COMMIT_MESSAGE) -> None:
        self.local = local
        self.check = check
        self.checked: list[mqlite.MessageExt] = []

    def execute_local_transaction(self, msg: mqlite.Message, arg: Any) -> Any:
        if isinstance(self.local, BaseException):
            raise self.local
        return self.local

    def check_local_transaction(self, msg: mqlite.MessageExt) -> Any:
        self.checked.append(msg)
        return self.check


def bodies(store: mqlite.Store, topic: str = "T") -> list[bytes]:
    out: list[bytes] = []
    for q in range(2):
        out += [m.body for m in read_all(store, mqlite.MessageQueue(topic, q))]
    return sorted(out)


def producer(store: mqlite.Store, listener: Any, **kw: Any) -> mqlite.TransactionProducer:
    kw.setdefault("check_interval", None)
    return mqlite.TransactionProducer(store, "G", listener, **kw)


def test_commit_makes_the_message_visible_once(store: mqlite.Store) -> None:
    store.create_topic("T", queues=2)
    p = producer(store, Listener())
    r = p.send_message_in_transaction(mqlite.Message("T", b"a", keys="k"), arg=1)
    assert r.local_state is S.COMMIT_MESSAGE
    assert bodies(store) == [b"a"]
    # Committing again (the same id) writes nothing and keeps one copy.
    assert p.commit([r.transaction_id]) is False
    assert bodies(store) == [b"a"]
    assert p.pending() == []


def test_rollback_and_unknown_keep_the_message_invisible(store: mqlite.Store) -> None:
    store.create_topic("T", queues=2)
    listener = Listener(local=S.ROLLBACK_MESSAGE)
    p = producer(store, listener)
    p.send_message_in_transaction(mqlite.Message("T", b"rb"))
    listener.local = S.UNKNOW
    r = p.send_message_in_transaction(mqlite.Message("T", b"unk"))
    assert bodies(store) == []
    assert [t.id for t in p.pending()] == [r.transaction_id]
    # An exception of the local transaction rolls back and propagates.
    listener.local = RuntimeError("boom")
    with pytest.raises(RuntimeError):
        p.send_message_in_transaction(mqlite.Message("T", b"exc"))
    assert [t.id for t in p.pending()] == [r.transaction_id]


def test_pending_and_resolve_without_a_producer(store: mqlite.Store, store_path: Path) -> None:
    """What operators' tools call (``mqlite txn list|resolve``): no listener, no producer."""
    from mqlite.transaction import pending, resolve

    store.create_topic("T", queues=2)
    p = producer(store, Listener(local=S.UNKNOW))
    a = p.send_message_in_transaction(mqlite.Message("T", b"a")).transaction_id
    with mqlite.TransactionProducer(store, "H", Listener(local=S.UNKNOW), check_interval=None) as other:
        b = other.send_message_in_transaction(mqlite.Message("T", b"b")).transaction_id
    assert [(t.id, t.group, len(t.half_offsets)) for t in pending(store)] == [(a, "G", 1), (b, "H", 1)]
    assert pending(store, "H") == p.pending(all_groups=True)[1:]
    assert resolve(store, a, True) is True and resolve(store, a, True) is False
    assert resolve(store, b, False) is True
    assert pending(store) == [] and bodies(store) == [b"a"]
    with pytest.raises(mqlite.TransactionStateError):
        resolve(store, b, True)
    with pytest.raises(mqlite.TransactionNotFoundError):
        resolve(store, "never", True)
    with pytest.raises(mqlite.IllegalArgumentError):
        pending(store, 7)  # type: ignore[arg-type]
    store.flush()
    with mqlite.Store(store_path, read_only=True) as reader, pytest.raises(mqlite.StoreReadOnlyError):
        pending(reader)


def test_commit_after_rollback_is_refused_and_writes_nothing(store: mqlite.Store) -> None:
    store.create_topic("T", queues=2)
    p = producer(store, Listener(local=S.UNKNOW))
    r = p.send_message_in_transaction(mqlite.Message("T", b"x"), transaction_id="order-1")
    assert p.rollback(["order-1"]) is True
    end = store.stats()["max_offset"] if "max_offset" in store.stats() else None
    with pytest.raises(mqlite.TransactionStateError, match="rolled back"):
        p.commit([r.transaction_id])
    with pytest.raises(mqlite.TransactionStateError):
        p.send_message_in_transaction(mqlite.Message("T", b"y"), transaction_id="order-1")
    if end is not None:
        assert store.stats()["max_offset"] == end
    assert bodies(store) == []
    assert p.rollback(["order-1"]) is False


def test_bad_input_is_typed(store: mqlite.Store) -> None:
    store.create_topic("T", queues=2)
    p = producer(store, Listener(local="yes"))
    with pytest.raises(mqlite.TransactionNotFoundError):
        p.commit(["never-prepared"])
    with pytest.raises(mqlite.IllegalArgumentError):
        p.send_message_in_transaction(mqlite.Message("T", b"x"))  # listener answers a str
    with pytest.raises(mqlite.InvalidBatchError):
        p.send_message_in_transaction([mqlite.Message("T", b"x")])  # type: ignore[arg-type]
    with pytest.raises(mqlite.IllegalArgumentError):
        p.commit(["a,b"])
    with pytest.raises(mqlite.IllegalArgumentError):
        p.commit("abc")  # type: ignore[arg-type]
    with pytest.raises(mqlite.InvalidMessageError):
        p.send_message_in_transaction(mqlite.Message("T", b"x", delay_level=2))
    assert bodies(store) == []


def test_context_manager_commits_several_messages_or_none(store: mqlite.Store) -> None:
    store.create_topic("T", queues=2)
    p = producer(store, Listener())
    with p.transaction("tx-ok") as tx:
        for i in range(3):
            tx.send(mqlite.Message("T", b"ok%d" % i))
    with pytest.raises(ValueError):
        with p.transaction("tx-fail") as tx:
            tx.send(mqlite.Message("T", b"fail"))
            raise ValueError("abort")
    assert bodies(store) == [b"ok0", b"ok1", b"ok2"]
    states = {t.id: t.state for t in p.pending(all_groups=True)}
    assert states == {}


def test_multi_commit_with_progress_is_one_append(store_path: Path) -> None:
    with mqlite.open(store_path) as store:
        store.create_topic("T", queues=2)
        p = producer(store, Listener(local=S.UNKNOW))
        ids = [p.send_message_in_transaction(mqlite.Message("T", b"m%d" % i)).transaction_id for i in range(4)]
        assert p.progress("sink") is None
        assert p.commit(ids[:3], progress=("sink", "batch-7")) is True
        assert p.progress("sink") == "batch-7"
        # The replay of the same batch: nothing new.
        assert p.commit(ids[:3], progress=("sink", "batch-7")) is False
        p.close()
    # Rebuilt from the log in a new process-equivalent open.
    with mqlite.open(store_path) as store:
        p = producer(store, Listener())
        assert p.progress("sink") == "batch-7"
        assert bodies(store) == [b"m0", b"m1", b"m2"]
        assert [t.id for t in p.pending()] == [ids[3]]
        p.close()


def test_check_back_commits_and_max_checks_discards(store: mqlite.Store) -> None:
    store.create_topic("T", queues=2)
    listener = Listener(local=S.UNKNOW, check=S.UNKNOW)
    p = producer(store, listener, check_timeout=0, check_interval=None, max_checks=2)
    a = p.send_message_in_transaction(mqlite.Message("T", b"a")).transaction_id
    # Two real checks answer UNKNOW; the third pass discards instead of asking a third time.
    assert p.check_now() == 1
    assert p.check_now() == 1
    assert [t.checks for t in p.pending()] == [2]
    assert p.check_now() == 0
    assert len(listener.checked) == 2
    assert listener.checked[0].topic == "T" and listener.checked[0].body == b"a"
    assert p.pending() == []
    assert [m.body for m in read_all(store, mqlite.MessageQueue("TRANS_CHECK_MAX_TIME_TOPIC", 0))] == [b"a"]
    with pytest.raises(mqlite.TransactionStateError, match="discarded"):
        p.commit([a])
    # A check answering COMMIT commits.
    listener.check = S.COMMIT_MESSAGE
    p.send_message_in_transaction(mqlite.Message("T", b"b"))
    assert p.check_now() == 1
    assert bodies(store) == [b"b"]


def test_checks_wait_for_the_timeout(store: mqlite.Store) -> None:
    store.create_topic("T", queues=2)
    listener = Listener(local=S.UNKNOW)
    p = producer(store, listener, check_timeout=3600)
    p.send_message_in_transaction(mqlite.Message("T", b"young"))
    assert p.check_now() == 0
    assert listener.checked == []


CHILD = """
import sys, mqlite
from mqlite import LocalTransactionState as S
class L:
    def execute_local_transaction(self, msg, arg): return S.UNKNOW
    def check_local_transaction(self, msg): return S.UNKNOW
store = mqlite.open(sys.argv[1])
store.create_topic("T", queues=2)
p = mqlite.TransactionProducer(store, "G", L(), check_interval=None)
mode = sys.argv[2]
n = 0
while True:
    ids = []
    for j in range(3):
        ids.append(p.send_message_in_transaction(mqlite.Message("T", b"%d-%d" % (n, j)), transaction_id="t%d-%d" % (n, j)).transaction_id)
    if mode == "commit":
        p.commit(ids, progress=("batch", str(n)))
    print(n, flush=True)
    n += 1
    if mode == "halves" and n == 2:
        sys.stdin.readline()
"""


def _kill_after(spawn_py: Callable[..., subprocess.Popen[str]], path: Path, mode: str, lines: int) -> None:
    proc = spawn_py(CHILD, path, mode)
    assert proc.stdout is not None
    for _ in range(lines):
        assert proc.stdout.readline(), proc.stderr.read() if proc.stderr else ""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def test_kill_between_halves_and_decision_is_resolved_by_the_group(
    store_path: Path, spawn_py: Callable[..., subprocess.Popen[str]]
) -> None:
    _kill_after(spawn_py, store_path, "halves", 2)
    with mqlite.open(store_path) as store:
        assert bodies(store) == []
        p = producer(store, Listener(check=S.COMMIT_MESSAGE), check_timeout=0)
        assert len(p.pending()) == 6
        assert p.check_now() == 6
        assert bodies(store) == sorted(b"%d-%d" % (n, j) for n in range(2) for j in range(3))
        assert p.pending() == []
        p.close()


def test_kill_during_commits_loses_and_duplicates_nothing(
    store_path: Path, spawn_py: Callable[..., subprocess.Popen[str]]
) -> None:
    _kill_after(spawn_py, store_path, "commit", 5)
    with mqlite.open(store_path) as store:
        p = producer(store, Listener(check=S.ROLLBACK_MESSAGE), check_timeout=0)
        # A pass finishes whatever a crash left of a commit's re-puts.
        p.check_now()
        batch = int(p.progress("batch") or -1)
        assert batch >= 4
        got = bodies(store)
        # Every batch up to the progress, whole, once; nothing of a later (uncommitted) one.
        assert got == sorted(b"%d-%d" % (n, j) for n in range(batch + 1) for j in range(3))
        assert p.pending() == []
        p.close()


def test_asyncio_variants(store: mqlite.Store) -> None:
    import asyncio

    from mqlite.aio import AsyncTransactionProducer

    store.create_topic("T", queues=2)

    async def main() -> list[str]:
        async with AsyncTransactionProducer(store, "G", Listener(local=S.UNKNOW), check_interval=None) as p:
            r = await p.send_message_in_transaction(mqlite.Message("T", b"one"))
            assert [t.id for t in await p.pending()] == [r.transaction_id]
            assert await p.commit([r.transaction_id], progress=("k", "1")) is True
            async with p.transaction("multi") as tx:
                await tx.send(mqlite.Message("T", b"two"))
                await tx.send(mqlite.Message("T", b"three"))
            try:
                async with p.transaction("bad") as tx:
                    await tx.send(mqlite.Message("T", b"never"))
                    raise KeyError("abort")
            except KeyError:
                pass
            assert await p.resolve("multi", True) is False
            return [await p.progress("k") or ""]

    assert asyncio.run(main()) == ["1"]
    assert bodies(store) == [b"one", b"three", b"two"]


CHECK_CHILD = """
import sys, mqlite
from mqlite import LocalTransactionState as S
class L:
    def execute_local_transaction(self, msg, arg): return S.UNKNOW
    def check_local_transaction(self, msg):
        print("checking", msg.body.decode(), flush=True)
        sys.stdin.readline()  # killed here, inside the listener call
        return S.COMMIT_MESSAGE
store = mqlite.open(sys.argv[1])
store.create_topic("T", queues=2)
p = mqlite.TransactionProducer(store, "G", L(), check_timeout=0, check_interval=None)
p.send_message_in_transaction(mqlite.Message("T", b"c"), transaction_id="during-check")
p.check_now()
"""


def test_kill_during_a_check_counts_it_and_a_later_check_resolves(
    store_path: Path, spawn_py: Callable[..., subprocess.Popen[str]]
) -> None:
    proc = spawn_py(CHECK_CHILD, store_path)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "checking c", proc.stderr.read() if proc.stderr else ""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with mqlite.open(store_path) as store:
        p = producer(store, Listener(check=S.COMMIT_MESSAGE), check_timeout=0)
        [t] = p.pending()
        assert (t.id, t.checks) == ("during-check", 1)
        assert bodies(store) == []
        assert p.check_now() == 1
        assert bodies(store) == [b"c"] and p.pending() == []
        p.close()


def test_the_check_thread_resolves_a_transaction_and_stops_at_close(store: mqlite.Store) -> None:
    import threading

    store.create_topic("T", queues=2)
    asked = threading.Event()

    class Checked(Listener):
        def check_local_transaction(self, msg: mqlite.MessageExt) -> Any:
            asked.set()
            return S.COMMIT_MESSAGE

    p = mqlite.TransactionProducer(store, "G", Checked(local=S.UNKNOW), check_timeout=0, check_interval=0.01)
    p.send_message_in_transaction(mqlite.Message("T", b"by-thread"))
    assert asked.wait(30), "the check thread never asked"
    p.close()
    assert p._checker is not None and not p._checker.is_alive()
    assert bodies(store) == [b"by-thread"]


def test_pending_ages_follow_the_store_clock(store_path: Path) -> None:
    from mqlite.testing import ManualClock

    clock = ManualClock(1_700_000_000_000)
    with mqlite.open(store_path, clock=clock) as store:
        store.create_topic("T", queues=2)
        p = producer(store, Listener(local=S.UNKNOW, check=S.UNKNOW), check_timeout=6)
        p.send_message_in_transaction(mqlite.Message("T", b"a"), transaction_id="aged")
        clock.advance_ms(5_999)
        assert [(t.id, t.age_ms) for t in p.pending()] == [("aged", 5_999)]
        assert p.check_now() == 0
        clock.advance_ms(1)
        assert p.check_now() == 1  # checked at exactly the timeout; the listener said UNKNOW
        assert [t.checks for t in p.pending()] == [1]
        p.close()


CHECKER_CHILD = """
import sys, mqlite
from mqlite import LocalTransactionState as S
class L:
    def execute_local_transaction(self, msg, arg): return S.UNKNOW
    def check_local_transaction(self, msg): return S.COMMIT_MESSAGE
store = mqlite.open(sys.argv[1])
p = mqlite.TransactionProducer(store, "G", L(), check_timeout=0, check_interval=None)
print("ready", flush=True)
sys.stdin.readline()
checked = 0
for _ in range(20):
    checked += p.check_now(limit=3)
print("checked", checked, flush=True)
p.close()
store.close()
"""


def test_checkers_in_two_processes_commit_each_message_once(
    store_path: Path, spawn_py: Callable[..., subprocess.Popen[str]]
) -> None:
    with mqlite.open(store_path) as store:
        store.create_topic("T", queues=2)
        p = producer(store, Listener(local=S.UNKNOW))
        for i in range(12):
            p.send_message_in_transaction(mqlite.Message("T", b"m%02d" % i))
        p.close()
    procs = [spawn_py(CHECKER_CHILD, store_path) for _ in range(2)]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:  # both start their check passes on this line
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    total = 0
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line[:1] == ["checked"], proc.stderr.read() if proc.stderr else ""
        total += int(line[1])
        assert proc.wait() == 0
    assert total >= 12
    with mqlite.open(store_path) as store:
        assert bodies(store) == [b"m%02d" % i for i in range(12)]
        assert producer(store, Listener()).pending() == []
