"""The key index (RocketMQ's IndexFile): ``Store.find_by_key``, ``Store.get`` by unique id,
``Store.index_status``; collisions, limits, time bounds, readers beside a writer, crashes,
damage and a disabled index."""

from __future__ import annotations

import os
import random
import signal
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

import mqlite
from mqlite.errors import IllegalArgumentError, IndexUnavailableError, MessageNotFoundError, TopicNotFoundError
from mqlite.testing import ManualClock

TOPIC = "Orders"


def java_hash(s: str) -> int:
    h = 0
    for unit in s.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def indexed(store: mqlite.Store) -> None:
    """Waits for the index's thread to reach the log's end (the event it publishes)."""
    wait_until(lambda: store.index_status()["lag"] == 0, what="the index to reach the log's end")


def test_keys_and_unique_ids_are_found(store: mqlite.Store) -> None:
    p = store.producer()
    sent = {}
    for i in range(300):
        r = p.send(mqlite.Message(TOPIC, f"m{i}".encode(), keys=[f"order-{i}", f"customer-{i % 7}"]))
        sent[i] = r
    indexed(store)
    for i in (0, 1, 150, 299):
        got = store.find_by_key(TOPIC, f"order-{i}")
        assert [m.body for m in got] == [f"m{i}".encode()]
        assert got.complete and not got.truncated and got.index_lag == 0
        # SendResult.msg_id (the unique id) and the offset id both name the message.
        assert store.get(sent[i].msg_id).body == f"m{i}".encode()
        assert store.get(sent[i].offset_msg_id).body == f"m{i}".encode()
        # A unique id is itself a key of its message.
        assert [m.body for m in store.find_by_key(TOPIC, sent[i].msg_id)] == [f"m{i}".encode()]
    customers = store.find_by_key(TOPIC, "customer-3", limit=100)
    want = [f"m{i}".encode() for i in range(299, -1, -1) if i % 7 == 3]
    assert [m.body for m in customers] == want  # newest first
    assert store.find_by_key(TOPIC, "order-300") == []
    status = store.index_status()
    assert status["enabled"] and status["files"] == 1 and status["last_error"] is None
    assert status["progress"] == status["log_end"]


def test_a_send_is_found_by_id_and_key_as_soon_as_it_returns(store: mqlite.Store) -> None:
    # No wait for the index's thread: a lookup in the process that builds the index brings it
    # up to the log's end first.
    p = store.producer()
    for i in range(20):
        r = p.send(mqlite.Message(TOPIC, f"m{i}".encode(), keys=f"now-{i}"))
        assert store.get(r.msg_id).body == f"m{i}".encode()
        got = store.find_by_key(TOPIC, f"now-{i}")
        assert [m.body for m in got] == [f"m{i}".encode()] and got.complete


def test_colliding_keys_never_leak_nor_count_toward_the_limit(store: mqlite.Store) -> None:
    # "Aa" and "BB" have the same Java hash, and so do their concatenations.
    colliding = ["AaAa", "AaBB", "BBAa", "BBBB"]
    assert len({java_hash(f"{TOPIC}#{k}") for k in colliding}) == 1
    p = store.producer()
    for round_ in range(5):
        for k in colliding:
            p.send(mqlite.Message(TOPIC, f"{k}/{round_}".encode(), keys=k))
    indexed(store)
    for k in colliding:
        got = store.find_by_key(TOPIC, k, limit=3)
        assert [m.body for m in got] == [f"{k}/{r}".encode() for r in (4, 3, 2)]
        assert got.truncated and not got.complete
        everything = store.find_by_key(TOPIC, k, limit=5)
        assert len(everything) == 5 and not everything.truncated
    # The same key in another topic hashes elsewhere and is kept apart by the re-check.
    p.send(mqlite.Message("Other", b"other", keys="AaAa"))
    indexed(store)
    assert [m.body for m in store.find_by_key("Other", "AaAa")] == [b"other"]
    assert len(store.find_by_key(TOPIC, "AaAa", limit=10)) == 5


def test_time_bounds_are_inclusive_milliseconds(store_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    with mqlite.open(store_path, clock=clock) as store:
        p = store.producer()
        stamps = []
        for step in (0, 250, 1_000, 1_999, 60_000):
            clock.set_ms(1_700_000_000_000 + step)
            p.send(mqlite.Message(TOPIC, str(step).encode(), keys="k"))
            stamps.append(1_700_000_000_000 + step)
        indexed(store)

        def bodies(begin: Any = None, end: Any = None) -> list[int]:
            return [int(m.body) for m in store.find_by_key(TOPIC, "k", begin, end)]

        assert bodies() == [60_000, 1_999, 1_000, 250, 0]
        # A bound inside a second keeps the ms precision the index itself lacks.
        assert bodies(stamps[1], stamps[3]) == [1_999, 1_000, 250]
        assert bodies(stamps[1] + 1, stamps[3] - 1) == [1_000]
        assert bodies(begin=stamps[4]) == [60_000]
        as_dt = datetime.fromtimestamp(stamps[2] / 1000, tz=timezone.utc)
        assert bodies(end=as_dt) == [1_000, 250, 0]
        with pytest.raises(IllegalArgumentError):
            store.find_by_key(TOPIC, "k", stamps[3], stamps[1])


@pytest.mark.parametrize(
    "key, error",
    [("", IllegalArgumentError), ("a b", IllegalArgumentError), ("a\nb", IllegalArgumentError)],
)
def test_bad_keys_are_typed_errors(store: mqlite.Store, key: str, error: type[Exception]) -> None:
    store.producer().send(mqlite.Message(TOPIC, b"x", keys="a"))
    with pytest.raises(error):
        store.find_by_key(TOPIC, key)


def test_bad_arguments_are_typed_errors(store: mqlite.Store) -> None:
    store.producer().send(mqlite.Message(TOPIC, b"x", keys="a"))
    with pytest.raises(TopicNotFoundError):
        store.find_by_key("NoSuchTopic", "a")
    for limit in (0, 10_001, -1):
        with pytest.raises(IllegalArgumentError):
            store.find_by_key(TOPIC, "a", limit=limit)
    with pytest.raises(TypeError):
        store.find_by_key(TOPIC, "a", begin="yesterday")  # type: ignore[arg-type]
    with pytest.raises(MessageNotFoundError):
        store.get("not-an-id")
    with pytest.raises(MessageNotFoundError):
        store.get("")


def test_index_rolls_to_new_files(store_path: Path) -> None:
    with mqlite.open(store_path, index_hash_slots=64) as store:  # 256 entries a file
        p = store.producer()
        ids = [p.send(mqlite.Message(TOPIC, str(i).encode(), keys=f"k{i % 50}")).msg_id for i in range(600)]
        indexed(store)
        assert store.index_status()["files"] >= 4
        got = store.find_by_key(TOPIC, "k7", limit=100)
        assert [int(m.body) for m in got] == [i for i in range(599, -1, -1) if i % 50 == 7]
        assert store.get(ids[0]).body == b"0"
    names = sorted(os.listdir(store_path / "index"))
    assert all(len(n) == 17 and n.isdigit() for n in names)
    assert all((store_path / "index" / n).stat().st_size == 40 + 84 * 64 for n in names)


def test_disabled_index_says_so(store_path: Path) -> None:
    with mqlite.open(store_path, index_enabled=False) as store:
        r = store.producer().send(mqlite.Message(TOPIC, b"x", keys="a"))
        with pytest.raises(IndexUnavailableError):
            store.find_by_key(TOPIC, "a")
        assert store.index_status()["enabled"] is False
        # The offset id still works; the unique id cannot be looked up.
        assert store.get(r.offset_msg_id).body == b"x"
        with pytest.raises(MessageNotFoundError):
            store.get(r.msg_id)
    assert not (store_path / "index").exists()


def test_in_memory_store_indexes(mem_store: mqlite.Store) -> None:
    r = mem_store.producer().send(mqlite.Message(TOPIC, b"x", keys="a"))
    indexed(mem_store)
    assert [m.body for m in mem_store.find_by_key(TOPIC, "a")] == [b"x"]
    assert mem_store.get(r.msg_id).body == b"x"


WRITER = """
import sys, mqlite
store = mqlite.open(sys.argv[1])
prefix = sys.argv[3] if len(sys.argv) > 3 else ""
p = store.producer()
for i in range(int(sys.argv[2])):
    r = p.send(mqlite.Message("Orders", f"{prefix}{i}".encode(), keys=f"key-{prefix}{i}"))
    print("A", i, r.msg_id, flush=True)
print("DONE", flush=True)
sys.stdin.readline()
store.close()
"""


def test_read_only_reader_beside_a_running_writer(store_path: Path, spawn_py: Any) -> None:
    mqlite.open(store_path).close()
    child = spawn_py(WRITER, store_path, 200)
    acked = []
    while (line := child.stdout.readline()).startswith("A"):
        _, i, msg_id = line.split()
        acked.append((int(i), msg_id))
    assert line.strip() == "DONE", child.stderr.read()
    with mqlite.open(store_path, read_only=True) as reader:
        wait_until(lambda: reader.index_status()["lag"] == 0, what="the writer's index to reach its log end")
        for i, msg_id in acked[::17]:
            assert [m.body for m in reader.find_by_key(TOPIC, f"key-{i}")] == [str(i).encode()]
            assert reader.get(msg_id).body == str(i).encode()
    child.stdin.write("\n")
    child.stdin.flush()
    assert child.wait(timeout=60) == 0


def test_everything_acknowledged_is_found_after_kill_9(store_path: Path, spawn_py: Any) -> None:
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    acked: list[tuple[int, str]] = []
    for cycle in range(2):
        child = spawn_py(WRITER, store_path, 100_000, f"{cycle}-")
        stop_after = rng.randrange(50, 400)
        for _ in range(stop_after):
            line = child.stdout.readline()
            assert line.startswith("A"), child.stderr.read()
            _, i, msg_id = line.split()
            acked.append((cycle * 1_000_000 + int(i), msg_id))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    with mqlite.open(store_path) as store:
        indexed(store)
        for n, msg_id in acked:
            cycle, i = divmod(n, 1_000_000)
            assert store.get(msg_id).body == f"{cycle}-{i}".encode()
        for n, _ in acked[::23]:
            cycle, i = divmod(n, 1_000_000)
            assert [m.body for m in store.find_by_key(TOPIC, f"key-{cycle}-{i}")] == [f"{cycle}-{i}".encode()]


def test_damaged_index_never_crashes_nor_answers_wrong(store_path: Path) -> None:
    with mqlite.open(store_path, index_hash_slots=64) as store:
        p = store.producer()
        for i in range(200):
            p.send(mqlite.Message(TOPIC, str(i).encode(), keys=f"k{i % 10}"))
        indexed(store)
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    for f in sorted((store_path / "index").iterdir()):
        data = bytearray(f.read_bytes())
        for _ in range(300):
            data[rng.randrange(len(data))] = rng.randrange(256)
        f.write_bytes(bytes(data))
    with mqlite.open(store_path, read_only=True) as reader:
        for k in range(10):
            got = reader.find_by_key(TOPIC, f"k{k}", limit=100)
            bodies = [int(m.body) for m in got]
            # Damage may hide messages; it never shows a wrong one or one twice.
            assert all(b % 10 == k for b in bodies) and len(set(bodies)) == len(bodies)


SHARED_CHILD = """
import sys, time, mqlite

def indexed(store):
    deadline = time.monotonic() + 60
    while store.index_status()["lag"] != 0:
        assert time.monotonic() < deadline, store.index_status()
        time.sleep(0.005)  # a poll of the index's published progress

def check(store, prefix, ids):
    for i, msg_id in enumerate(ids):
        assert [m.body for m in store.find_by_key("Orders", f"{prefix}{i}")] == [f"{prefix}{i}".encode()]
        assert store.get(msg_id).body == f"{prefix}{i}".encode()

store = mqlite.open(sys.argv[1])
p = store.producer()
first = [p.send(mqlite.Message("Orders", f"c{i}".encode(), keys=f"c{i}")).msg_id for i in range(50)]
print("SENT", flush=True)
sys.stdin.readline()
indexed(store)
check(store, "c", first)
print("OK1", flush=True)
sys.stdin.readline()
later = [p.send(mqlite.Message("Orders", f"d{i}".encode(), keys=f"d{i}")).msg_id for i in range(50)]
indexed(store)
check(store, "c", first)
check(store, "d", later)
store.close()
print("OK2", flush=True)
"""


def test_shared_writers_leader_builds_the_index_and_every_process_reads_it(store_path: Path, spawn_py: Any) -> None:
    leader = mqlite.open(store_path)
    child = spawn_py(SHARED_CHILD, store_path)
    assert child.stdout.readline().strip() == "SENT", child.stderr.read()
    # The other process's messages, indexed by this (leading) process.
    indexed(leader)
    assert [m.body for m in leader.find_by_key(TOPIC, "c7")] == [b"c7"]
    child.stdin.write("\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "OK1", child.stderr.read()
    # The child becomes the leader and indexes what it sends from then on.
    leader.close()
    child.stdin.write("\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "OK2", child.stderr.read()
    assert child.wait(timeout=60) == 0
    with mqlite.open(store_path, read_only=True) as reader:
        assert [m.body for m in reader.find_by_key(TOPIC, "d3")] == [b"d3"]
        assert len(os.listdir(store_path / "index")) == 1


def test_a_unique_id_names_the_copy_in_the_users_topic_first(store_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    late = "zz-late"  # listed after the system topics
    with mqlite.open(store_path, clock=clock, delay_levels="1s") as store:
        r = store.producer().send(mqlite.Message(late, b"later", keys="late", delay_level=1))
        # Waiting: only the scheduler's record holds the id.
        assert store.get(r.msg_id).topic == "SCHEDULE_TOPIC_XXXX"
        assert store.find_by_key(late, "late") == []
        clock.advance_ms(1_000)
        store.deliver_due()
        wait_until(lambda: store.get(r.msg_id).topic == late, what="the delivered copy to be indexed")
        assert [m.body for m in store.find_by_key(late, "late")] == [b"later"]


def test_a_topic_created_again_finds_none_of_the_deleted_ones_messages(store: mqlite.Store) -> None:
    """A deleted topic's messages stay in the log and the index until retention, but a topic
    created again under the name never finds them by key: only its own."""
    store.create_topic("orders", 1)
    p = store.producer()
    old = p.send(mqlite.Message("orders", b"old", keys=["k"]))
    store.delete_topic("orders")
    store.create_topic("orders", 1)
    new = p.send(mqlite.Message("orders", b"new", keys=["k"]))
    assert [m.body for m in store.find_by_key("orders", "k")] == [b"new"]
    assert store.find_by_key("orders", old.msg_id) == []
    assert [m.body for m in store.find_by_key("orders", new.msg_id)] == [b"new"]
