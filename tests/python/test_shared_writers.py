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
            # A follower sees a record once the writer's dispatch indexed it: waited for.
            assert reader.wait_for({MessageQueue("shared", 0): 0}, timeout=30)
            assert [m.body for m in reader.read(MessageQueue("shared", 0), 0)] == [b"0:0"]


# A shared writer that obeys one JSON command per line on stdin and answers one JSON line:
# the parent orders both processes' steps by these answers, never by time.
PEER = """
import json, sys
import mqlite
from mqlite import ConsumeFromWhere, Message

def obey(store, producer, cmd, args):
    if cmd == "topic":
        found = [t for t in store.topics() if t.name == args[0]]
        return [[t.read_queues, t.write_queues, t.perm, t.order] for t in found]
    if cmd == "send":
        return producer.send(Message(args[0], args[1].encode()), queue_id=args[2]).queue_offset
    if cmd == "auto":
        return producer.send(Message(args[0], args[1].encode())).queue_offset
    if cmd == "consume":
        group, topic, count = args
        store.queues(topic)  # an unknown topic is an error here, not an endless poll
        consumer = store.pull_consumer(
            group, client_id="peer", consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        )
        consumer.subscribe(topic)
        got = []
        while len(got) < count:
            got += [(m.queue_id, m.queue_offset, m.body.decode()) for m in consumer.poll(5)]
        consumer.commit()
        consumer.close()
        return sorted(got)
    if cmd == "progress":
        return [[p.queue_id, p.committed, p.max_offset] for p in store.consumer_progress(args[0])]
    raise ValueError(cmd)

with mqlite.open(sys.argv[1], shared=True) as store:
    producer = store.producer()
    print(json.dumps("open"))
    for line in sys.stdin:
        cmd, *args = json.loads(line)
        if cmd == "quit":
            break
        try:
            out = obey(store, producer, cmd, args)
        except mqlite.MQError as e:
            out = {"error": type(e).__name__}
        print(json.dumps(out))
"""


class Peer:
    """A shared-writer child process and its command pipe."""

    def __init__(self, spawn_py: SpawnPy, path: Path) -> None:
        self.proc = spawn_py(PEER, path)
        assert self.ask_line() == "open"

    def ask_line(self) -> object:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read() if self.proc.stderr else "the peer ended"
        return json.loads(line)

    def ask(self, *cmd: object) -> object:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.ask_line()

    def close(self) -> None:
        _, err = self.proc.communicate(json.dumps(["quit"]) + "\n", timeout=60)
        assert self.proc.returncode == 0, err


def test_a_topic_made_in_one_process_is_used_at_once_in_another(
    store_path: Path, spawn_py: SpawnPy
) -> None:
    with mqlite.open(store_path, shared=True) as store:
        peer = Peer(spawn_py, store_path)
        # Created here after the peer opened: it sends to the last queue and reads it.
        store.create_topic("made", 6, order=True)
        assert peer.ask("topic", "made") == [[6, 6, 6, True]]
        assert peer.ask("send", "made", "there", 5) == 0
        store.producer().send(Message("made", b"here"), queue_id=5)
        assert peer.ask("consume", "g", "made", 2) == [[5, 0, "there"], [5, 1, "here"]]
        # Grown here: the peer sends to a new queue at once.
        store.update_topic("made", queues=8)
        assert peer.ask("send", "made", "grown", 7) == 0
        # Auto-created there by a send: known, listed and read here at once.
        assert peer.ask("auto", "auto", "first") == 0
        assert [t.name for t in store.topics()] == ["auto", "made"]
        auto = [q for q in store.queues("auto") if store.offsets(q)[1] == 1]
        assert [m.body for m in store.read(auto[0], 0)] == [b"first"]
        peer.close()
    with mqlite.open(store_path) as reopened:
        made = {t.name: t for t in reopened.topics()}["made"]
        assert (made.read_queues, made.write_queues, made.order) == (8, 8, True)


def test_a_consumer_group_commits_across_shared_writer_processes(
    store_path: Path, spawn_py: SpawnPy
) -> None:
    with mqlite.open(store_path, shared=True) as store:
        peer = Peer(spawn_py, store_path)
        store.create_topic("jobs", 2)
        producer = store.producer()
        for i in range(6):
            producer.send(Message("jobs", f"{i}".encode()), queue_id=i % 2)
        # The peer's member takes both queues, consumes and commits, then leaves the group.
        got = peer.ask("consume", "workers", "jobs", 6)
        assert isinstance(got, list), got
        assert sorted(b for _, _, b in got) == [str(i) for i in range(6)]
        # This process's member resumes from the peer's commits: only what was sent since.
        producer.send(Message("jobs", b"later"), queue_id=1)
        consumer = store.pull_consumer("workers", client_id="here")
        consumer.subscribe("jobs")
        seen: list[bytes] = []
        while not seen:
            seen += [m.body for m in consumer.poll(5)]
        assert seen == [b"later"]
        consumer.commit()
        consumer.close()
        # And the peer reads this process's commit.
        assert peer.ask("progress", "workers") == [[0, 3, 3], [1, 4, 4]]
        assert store.consumer_groups() == ["workers"]
        peer.close()


def test_first_opener_after_a_clean_close_sees_what_another_wrote(store_path: Path) -> None:
    """After a clean close the consume queues are known by the close's record until first use;
    a queue the first shared opener has not used yet may meanwhile be written by another
    process, and must then load with the other process's messages (it was refused as
    corrupted: the record said it ended at 0)."""
    with mqlite.open(store_path) as store:
        store.create_topic("shared", 2)
    with mqlite.open(store_path, shared=True) as first, mqlite.open(store_path, shared=True) as second:
        producer = second.producer()
        for i in range(3):
            producer.send(Message("shared", f"1:{i}".encode()), queue_id=0)
        want = [f"1:{i}".encode() for i in range(3)]
        assert [m.body for m in second.read(MessageQueue("shared", 0), 0, 10)] == want
        assert [m.body for m in first.read(MessageQueue("shared", 0), 0, 10)] == want
        first.producer().send(Message("shared", b"0:0"), queue_id=0)
    with mqlite.open(store_path) as again:
        assert [m.body for m in again.read(MessageQueue("shared", 0), 0, 10)] == [*want, b"0:0"]


LATER_OPENER = """
import json, sys, mqlite
from mqlite import MessageQueue
from mqlite._core import _queue_loads

path, topic = sys.argv[1], sys.argv[2]
before = _queue_loads()
with mqlite.open(path) as store:
    at_open = _queue_loads() - before
    bodies = [m.body.decode() for m in store.read(MessageQueue(topic, 1), 0, 10)]
    after_read = _queue_loads() - before
print(json.dumps([at_open, after_read, bodies]))
"""


def test_a_later_opener_loads_no_queue_at_open(store_path: Path, run_py: RunPy) -> None:
    """A process that opens beside a running writer loads no consume queue at its open, however
    many the store has: each is loaded (and checked) at its first use. (Every queue was loaded
    at the open, so each worker of a pool paid for the whole store and mapped files of queues
    it never used.) Counted by the core's queue-load counter, not timed."""
    topics = [f"lazy{i:03d}" for i in range(150)]
    with mqlite.open(store_path, consume_queue_file_units=64) as store:
        store.create_topics(topics, 4)
        producer = store.producer()
        for t in topics[::10]:
            producer.send(Message(t, t.encode()), queue_id=1)
    with mqlite.open(store_path):
        done = run_py(LATER_OPENER, store_path, "lazy020")
        assert done.returncode == 0, done.stderr
        at_open, after_read, bodies = json.loads(done.stdout.strip().splitlines()[-1])
    assert at_open == 0, f"the later opener loaded {at_open} of 600 queues at open"
    assert (after_read, bodies) == (1, ["lazy020"])
