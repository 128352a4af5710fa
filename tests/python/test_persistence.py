"""Reopen, in-memory stores, and rolling across many commit-log and consume-queue files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import mqlite
from helpers import SMALL_FILES, read_all
from mqlite import Message, MessageQueue


def test_reopen_keeps_everything_and_offsets_continue(store_path: Path) -> None:
    with mqlite.open(store_path) as s:
        s.create_topic("orders", 2, order=True)
        producer = s.producer()
        singles = [producer.send(Message("orders", f"s{i}".encode(), tags="T", keys=f"k{i}",
                                         properties={"i": str(i)})) for i in range(6)]
        batch = producer.send_batch([b"b0", b"b1", b"b2"], topic="orders", queue_id=1)
        before = {mq: s.offsets(mq) for mq in s.queues("orders")}
        bodies = {mq: [m.body for m in read_all(s, mq)] for mq in s.queues("orders")}
        topics = s.topics()
    assert before[MessageQueue("orders", 1)] == (0, 6)

    with mqlite.open(store_path) as s:
        assert s.topics() == topics
        assert {mq: s.offsets(mq) for mq in s.queues("orders")} == before
        assert {mq: [m.body for m in read_all(s, mq)] for mq in s.queues("orders")} == bodies
        m = s.get(singles[3].offset_msg_id)
        assert (m.body, m.tags, m.keys, m.properties["i"]) == (b"s3", "T", ("k3",), "3")
        assert s.get_by_offset(batch[2].commit_log_offset).body == b"b2"
        r = s.producer().send(Message("orders", b"after"), queue_id=1)
        assert r.queue_offset == 6
        assert r.commit_log_offset > batch[-1].commit_log_offset
        assert s.offsets(MessageQueue("orders", 1)) == (0, 7)


def test_memory_store_works_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with mqlite.open(":memory:") as a, mqlite.open(":memory:") as b:
        assert a.path == ":memory:" and not a.read_only
        a.create_topic("only-in-a", 2)
        r = a.producer().send(Message("only-in-a", b"hello", tags="T"), queue_id=1)
        batch = a.producer().send_batch([b"x", b"y"], topic="only-in-a", queue_id=1)
        assert [m.body for m in a.read(r.message_queue, 0)] == [b"hello", b"x", b"y"]
        assert a.get(r.offset_msg_id).body == b"hello"
        assert batch.first_queue_offset == 1
        assert "only-in-a" not in [t.name for t in b.topics()]
    assert list(tmp_path.iterdir()) == []


def test_rolls_many_files_and_reads_everything_back(store_path: Path) -> None:
    body_size = 1000
    total = 3000
    with mqlite.open(store_path, **SMALL_FILES) as s:
        s.create_topic("roll", 1)
        producer = s.producer()
        sent = 0
        while sent < total:
            if sent % 400 == 0:
                producer.send(Message("roll", f"{sent:08d}".encode().ljust(body_size, b"s")))
                sent += 1
                continue
            n = min(40, total - sent)
            bodies = [f"{sent + i:08d}".encode().ljust(body_size, b"b") for i in range(n)]
            res = producer.send_batch(bodies, topic="roll")
            assert res.first_queue_offset == sent
            sent += n
        mq = MessageQueue("roll", 0)
        assert s.offsets(mq) == (0, total)
        got = read_all(s, mq)
        assert [int(m.body[:8]) for m in got] == list(range(total))
        assert [m.queue_offset for m in got] == list(range(total))
        assert all(len(m.body) == body_size for m in got)
        last = got[-1]

    commit_log_files = list((store_path / "commitlog").iterdir())
    cq_files = list((store_path / "consumequeue" / "roll" / "0").iterdir())
    assert len(commit_log_files) >= 3, commit_log_files
    assert len(cq_files) >= 3, cq_files

    with mqlite.open(store_path, **SMALL_FILES) as s:
        mq = MessageQueue("roll", 0)
        assert s.offsets(mq) == (0, total)
        got = read_all(s, mq)
        assert [int(m.body[:8]) for m in got] == list(range(total))
        assert s.get(last.offset_msg_id).queue_offset == total - 1
        for offset in (0, 999, 1000, 1001, 1999, 2000, total - 1):
            [m] = s.read(mq, offset, 1)
            assert int(m.body[:8]) == offset
        r = s.producer().send(Message("roll", b"next"))
        assert r.queue_offset == total


def age_commit_log(store: Path) -> None:
    """Moves every commit-log file's modification time (what retention looks at) an hour back:
    past the retention of these tests, without waiting for the clock."""
    then = time.time() - 3600
    for f in (store / "commitlog").iterdir():
        os.utime(f, (then, then))


def test_expired_files_are_deleted_from_the_head(tmp_path: Path) -> None:
    """Retention deletes whole commit-log files, oldest first, never the one being written;
    reads below the new minimum report OFFSET_TOO_SMALL and everything kept stays readable."""
    opts = dict(commit_log_file_size=256 << 10, max_message_size=32 << 10,
                consume_queue_file_units=128, retention_hours=1e-7)
    with mqlite.open(tmp_path / "s", **opts) as store:
        store.create_topic("t", 1)
        p = store.producer()
        body = b"x" * 1000
        for _ in range(20):
            p.send_batch([body] * 50, topic="t", queue_id=0)
        files_before = sorted((tmp_path / "s" / "commitlog").iterdir())
        assert len(files_before) >= 4
        age_commit_log(tmp_path / "s")
        deleted = store.delete_expired_files()
        files_after = sorted((tmp_path / "s" / "commitlog").iterdir())
        assert deleted >= 1
        # The oldest files went; the file being written survives. (The background allocator
        # may have added the next file meanwhile, so only the files seen before are compared;
        # the background retention pass, with the same 1e-7 h limit, may have deleted some of
        # the oldest files too, so at least `deleted` went, always from the head.)
        kept_old = [f for f in files_after if f in files_before]
        assert 1 <= len(kept_old) <= len(files_before) - deleted
        assert kept_old == files_before[len(files_before) - len(kept_old):]
        assert files_before[-1] in files_after
        mq = MessageQueue("t", 0)
        lo, hi = store.offsets(mq)
        assert hi == 1000
        r = store.read_result(mq, 0, 10)
        # every kept message is readable from wherever the consume queue now starts
        kept = []
        off = r.next_offset if r.status == "OFFSET_TOO_SMALL" else 0
        while off < hi:
            res = store.read_result(mq, off, 500)
            kept.extend(res.messages)
            off = res.next_offset
        assert kept and all(m.body == body for m in kept)
        assert kept[-1].queue_offset == 999


def test_reopen_uses_the_file_sizes_the_store_was_created_with(tmp_path) -> None:
    import mqlite
    from mqlite import Message, MessageQueue

    path = tmp_path / "s"
    with mqlite.open(path, commit_log_file_size=1 << 20, consume_queue_file_units=100,
                     max_message_size=64 << 10) as store:
        store.create_topic("t", 1)
        p = store.producer()
        for i in range(300):
            p.send(Message("t", b"%d" % i + b"x" * 4000))   # several commit-log and queue files
    # No sizes given: the writer and a read-only follower both take them from the files.
    with mqlite.open(path) as again:
        assert again.offsets(MessageQueue("t", 0)) == (0, 300)
        again.producer().send(Message("t", b"more"))
        with mqlite.open(path, read_only=True) as reader:
            got = reader.read(MessageQueue("t", 0), 299, 2)
            assert [m.body[:3] for m in got] == [b"299", b"mor"]
    # Sizes given explicitly and wrong are still an error, not a silent reinterpretation.
    with pytest.raises(mqlite.MQError):
        mqlite.open(path, commit_log_file_size=2 << 20)


def test_reopen_of_a_store_with_one_small_file_keeps_its_sizes(tmp_path) -> None:
    """One file per directory, of a size that is not a multiple of 1 MiB (a new store with
    small files, or what retention leaves): the sizes still come from the files, so a reopen
    neither grows the file nor reads the queue as empty."""
    import mqlite
    from mqlite import Message, MessageQueue

    path = tmp_path / "s"
    with mqlite.open(path, commit_log_file_size=64 << 10, consume_queue_file_units=100,
                     max_message_size=4096) as store:
        store.create_topic("t", 1)
        with store.producer() as p:
            for _ in range(10):
                p.send(Message("t", b"x" * 100))
    assert (path / "commitlog" / ("0" * 20)).stat().st_size == 64 << 10
    with mqlite.open(path, read_only=True) as reader:
        assert reader.offsets(MessageQueue("t", 0)) == (0, 10)
    with mqlite.open(path) as again:
        assert again.offsets(MessageQueue("t", 0)) == (0, 10)
        with again.producer() as p:
            for _ in range(250):
                p.send(Message("t", b"y" * 1000))  # several 64 KiB files, 100-unit queue files
    assert (path / "commitlog" / ("0" * 20)).stat().st_size == 64 << 10
    # An explicit small file size alone: the message limit follows it (no 4 MiB default clash).
    with mqlite.open(path, commit_log_file_size=64 << 10, consume_queue_file_units=100) as s:
        assert s.offsets(MessageQueue("t", 0)) == (0, 260)
        with pytest.raises(mqlite.MessageTooLargeError):
            s.producer().send(Message("t", b"z" * (40 << 10)))


@pytest.mark.parametrize("cut", [0, 1000, 1999])
def test_reopen_after_a_consume_queue_file_was_cut_short_reads_everything(tmp_path, cut: int) -> None:
    """A consume-queue file cut short (here the first of three, to a unit boundary, to a
    partial unit or to nothing) in a store closed cleanly: a plain reopen still finds the size
    the files were made with, and the writer rebuilds the lost units from the commit log. A
    read-only open before it writes nothing and serves what is left before the short file."""
    path = tmp_path / "s"
    with mqlite.open(path, consume_queue_file_units=100) as store:
        store.create_topic("t", 1)
        with store.producer() as p:
            for i in range(250):
                p.send(Message("t", b"%d" % i), queue_id=0)
    queue_dir = path / "consumequeue" / "t" / "0"
    os.truncate(queue_dir / ("0" * 20), cut)
    listing = {f.name: f.stat().st_size for f in queue_dir.iterdir()}
    with mqlite.open(path, read_only=True) as reader:
        assert reader.read(MessageQueue("t", 0), 0, 300) == []
    assert {f.name: f.stat().st_size for f in queue_dir.iterdir()} == listing
    with mqlite.open(path) as store:
        assert store.offsets(MessageQueue("t", 0)) == (0, 250)
        got = store.read(MessageQueue("t", 0), 0, 300)
        assert [m.body for m in got] == [b"%d" % i for i in range(250)]
    assert {f.stat().st_size for f in queue_dir.iterdir()} == {2000}


def test_after_retention_the_minimum_offset_is_the_first_readable_message(tmp_path) -> None:
    """The head consume-queue file can outlive some of the records it indexes: the queue's
    minimum moves to the first unit whose record is still stored (RocketMQ's correctMinOffset),
    at deletion and again at the next open."""
    import mqlite
    from mqlite import Message, MessageQueue

    opts = dict(commit_log_file_size=64 << 10, max_message_size=4096,
                consume_queue_file_units=100, retention_hours=1e-6)
    path = tmp_path / "s"
    mq = MessageQueue("t", 0)
    with mqlite.open(path, **opts) as s:
        s.create_topic("t", 1)
        with s.producer() as p:
            for i in range(1000):
                p.send(Message("t", b"x" * 500 + b"%d" % i))
        s.flush()
        age_commit_log(path)
        assert s.delete_expired_files() > 0
        low, high = s.offsets(mq)
        first = s.read_result(mq, low, 1).messages
        assert high == 1000 and low > 0
        assert [m.queue_offset for m in first] == [low]  # readable, not a deleted record
        assert s.read_result(mq, low - 1, 1).messages == []
    with mqlite.open(path, read_only=True) as reader:  # sizes from the files, no options
        assert reader.offsets(mq) == (low, high)
        assert [m.queue_offset for m in reader.read(mq, low, 1)] == [low]
    with mqlite.open(path, **opts) as s:
        assert s.offsets(mq) == (low, high)
