"""The administration API (docs/admin.md): topic update, delete and status; group progress,
reset of one queue, summary and delete; store info. Real store directories; other processes
where what they see is the point."""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import mqlite
from helpers import wait_until
from mqlite import ConsumeFromWhere, Message, MessageQueue
from mqlite.topic import PERM_READ

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET

_CHILD_WRITER = """
import sys, mqlite
from mqlite import Message
s = mqlite.open(sys.argv[1], auto_create_topics=False)
print("OPEN", flush=True)
for line in sys.stdin:
    if line.strip() == "quit":
        break
    topic, body = line.split()
    try:
        s.producer().send(Message(topic, body.encode()))
        print("SENT", flush=True)
    except mqlite.MQError as e:
        print(type(e).__name__, flush=True)
s.close()
"""

_CHILD_CONSUMER = """
import sys, mqlite
s = mqlite.open(sys.argv[1])
c = s.pull_consumer(sys.argv[2], client_id=sys.argv[3], consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
c.subscribe(sys.argv[4])
got = 0
while got < int(sys.argv[5]):
    got += len(c.poll(0.05))
c.commit()
print("OWNS", sorted(mq.queue_id for mq in c.assignment()), flush=True)
sys.stdin.readline()
c.close()
s.close()
"""


def _send(store: mqlite.Store, topic: str, bodies: list[bytes], queue: int | None = None) -> None:
    p = store.producer()
    for b in bodies:
        if queue is None:
            p.send(Message(topic, b))
        else:
            p.send(Message(topic, b), queue)


def _read_all(store: mqlite.Store, group: str, topic: str) -> list[bytes]:
    got: list[bytes] = []
    with store.pull_consumer(group, consume_from=FIRST) as c:
        c.subscribe(topic)
        wait_until(lambda: c.assignment(), what="the assignment")
        while batch := c.poll(0.05):
            got += [m.body for m in batch]
    return got


# -- topics ---------------------------------------------------------------------------------------


def test_update_topic_changes_only_the_given_settings(store: mqlite.Store, store_path: Path) -> None:
    store.create_topic("t", 4)
    t = store.update_topic("t", write_queues=2)
    assert (t.read_queues, t.write_queues, t.perm, t.order) == (4, 2, 6, False)
    t = store.update_topic("t", perm=PERM_READ, order=True)
    assert (t.read_queues, t.write_queues, t.perm, t.order) == (4, 2, 4, True)
    with pytest.raises(mqlite.TopicNotWritableError):
        store.producer().send(Message("t", b"x"))
    # The old form still sets both counts.
    t = store.update_topic("t", queues=6)
    assert (t.read_queues, t.write_queues) == (6, 6)
    assert store.topic("t") == t


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"read_queues": 5}, "cannot shrink"),
        ({"write_queues": 7}, "never be read"),
        ({"read_queues": 0}, "read_queues"),
        ({"write_queues": 1025}, "write_queues"),
        ({"perm": 8}, "perm"),
        ({"queues": 2}, "cannot shrink"),
    ],
)
def test_a_refused_topic_update_writes_nothing(
    store: mqlite.Store, store_path: Path, kwargs: dict[str, int], error: str
) -> None:
    store.create_topic("t", 6)
    store.close()
    before = {p.name: p.read_bytes() for p in (store_path / "config").iterdir() if p.is_file()}
    with mqlite.open(store_path) as s:
        s.flush()
        on_disk = {p.name: p.read_bytes() for p in (store_path / "config").iterdir() if p.is_file()}
        with pytest.raises(mqlite.IllegalArgumentError, match=error):
            s.update_topic("t", **kwargs)  # type: ignore[arg-type]
        after = {p.name: p.read_bytes() for p in (store_path / "config").iterdir() if p.is_file()}
        assert after == on_disk
        assert s.topic("t").read_queues == 6
    assert before["topics.json"]


def test_update_or_delete_of_an_unknown_or_system_topic_is_refused(store: mqlite.Store) -> None:
    with pytest.raises(mqlite.TopicNotFoundError):
        store.update_topic("nope", read_queues=2)
    with pytest.raises(mqlite.TopicNotFoundError):
        store.delete_topic("nope")
    with pytest.raises(mqlite.TopicNotFoundError):
        store.topic("nope")
    with pytest.raises(mqlite.InvalidTopicError):
        store.delete_topic("%DLQ%g")
    with pytest.raises(mqlite.InvalidTopicError):
        store.delete_topic("bad name")


def test_a_deleted_topic_loses_its_offsets_and_a_new_one_of_its_name_hides_its_messages(
    store_path: Path,
) -> None:
    with mqlite.open(store_path, auto_create_topics=False) as store:
        store.create_topic("t", 2)
        store.create_topic("other", 1)
        _send(store, "t", [b"old%d" % i for i in range(6)])
        _send(store, "other", [b"kept"])
        assert len(_read_all(store, "g", "t")) == 6
        assert _read_all(store, "g", "other") == [b"kept"]
        assert {p.topic for p in store.consumer_progress("g")} == {"t", "other"}

        store.delete_topic("t")
        assert [t.name for t in store.topics()] == ["other"]
        assert {p.topic for p in store.consumer_progress("g")} == {"other"}
        with pytest.raises(mqlite.TopicNotFoundError):
            store.producer().send(Message("t", b"late"))

        store.create_topic("t", 2)
        assert store.topic("t").since_offset > 0
        _send(store, "t", [b"new"], queue=0)
        # A group that never read it, and the group that read the old one, see only the new.
        assert _read_all(store, "fresh", "t") == [b"new"]
        assert _read_all(store, "g", "t") == [b"new"]
        assert store.offsets(MessageQueue("t", 1))[0] == store.offsets(MessageQueue("t", 1))[1]
    # The deletion and the new start outlive the process.
    with mqlite.open(store_path) as store:
        assert store.topic("t").since_offset > 0
        assert [m.body for m in store.read(MessageQueue("t", 0), 0)] == []
        low, _ = store.offsets(MessageQueue("t", 0))
        assert [m.body for m in store.read(MessageQueue("t", 0), low)] == [b"new"]


def test_delete_topic_is_refused_while_a_consumer_is_live_unless_forced(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    c = store.pull_consumer("g", client_id="c1")
    c.subscribe("t")
    with pytest.raises(mqlite.ConsumerGroupActiveError, match="c1"):
        store.delete_topic("t")
    assert store.topic("t").name == "t"
    store.delete_topic("t", force=True)
    assert store.topics() == []
    c.close()


def test_a_topic_deleted_here_refuses_the_sends_of_another_writer_process(
    store_path: Path, spawn_py: Callable[..., subprocess.Popen[str]]
) -> None:
    with mqlite.open(store_path) as store:
        store.create_topic("t", 1)
        child = spawn_py(_CHILD_WRITER, store_path)
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "OPEN"
        child.stdin.write("t before\n")
        assert child.stdout.readline().strip() == "SENT"
        store.delete_topic("t")
        child.stdin.write("t after\n")
        assert child.stdout.readline().strip() == "TopicNotFoundError"
        store.create_topic("t", 1)
        child.stdin.write("t again\n")
        assert child.stdout.readline().strip() == "SENT"
        child.stdin.write("quit\n")
        assert child.wait(timeout=30) == 0
        low, high = store.offsets(MessageQueue("t", 0))
        assert [m.body for m in store.read(MessageQueue("t", 0), low)] == [b"again"]
        assert (low, high) == (1, 2)


def test_topic_status_reports_each_queue(store: mqlite.Store) -> None:
    store.create_topic("t", 3)
    _send(store, "t", [b"a", b"b"], queue=0)
    _send(store, "t", [b"c"], queue=1)
    newest = store.read(MessageQueue("t", 0), 1)[0].store_timestamp
    st = store.topic_status("t")
    assert st.config == store.topic("t")
    q0, q1, q2 = st.queues
    assert (q0.min_offset, q0.max_offset, q0.messages, q0.consume_queue_bytes) == (0, 2, 2, 40)
    assert q0.last_store_timestamp == newest
    assert (q1.messages, q1.consume_queue_bytes) == (1, 20)
    assert (q2.messages, q2.last_store_timestamp) == (0, None)
    assert st.messages == 3
    assert st.last_store_timestamp == max(q0.last_store_timestamp, q1.last_store_timestamp or 0)
    with pytest.raises(mqlite.TopicNotFoundError):
        store.topic_status("nope")


# -- groups ---------------------------------------------------------------------------------------


def test_progress_names_the_owner_and_the_last_consume_time_of_each_queue(
    store_path: Path, spawn_py: Callable[..., subprocess.Popen[str]]
) -> None:
    with mqlite.open(store_path) as store:
        store.create_topic("t", 2)
        _send(store, "t", [b"a", b"b"], queue=0)
        _send(store, "t", [b"c"], queue=1)
        last = {q: store.read(MessageQueue("t", q), 0)[-1].store_timestamp for q in (0, 1)}
        child = spawn_py(_CHILD_CONSUMER, store_path, "g", "member-1", "t", 3)
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().split() == ["OWNS", "[0,", "1]"]
        progress = store.consumer_progress("g")
        assert [(p.queue_id, p.committed, p.lag, p.owner) for p in progress] == [
            (0, 2, 0, "member-1"), (1, 1, 0, "member-1")]
        assert {p.queue_id: p.last_consume_timestamp for p in progress} == last
        summary = store.group_summary("g")
        assert summary.members == ["member-1"]
        assert (summary.lag, summary.retry_depth, summary.retry_waiting, summary.dlq_depth) == (0, None, 0, None)
        child.stdin.write("bye\n")
        child.stdin.flush()
        assert child.wait(timeout=30) == 0
        assert [p.owner for p in store.consumer_progress("g")] == [None, None]


def test_a_dead_members_owner_record_names_no_owner(store: mqlite.Store, store_path: Path) -> None:
    store.create_topic("t", 2)
    _send(store, "t", [b"a"], queue=0)
    c = store.pull_consumer("g", client_id="gone", consume_from=FIRST)
    c.subscribe("t")
    wait_until(lambda: c.poll(0.05), what="the message")
    c.commit()
    assert [p.owner for p in store.consumer_progress("g")] == ["gone", "gone"]
    record = store_path / "consumer_groups" / "g" / "members.d" / "gone.owned"
    # One record for the rebalance that took both queues.
    assert record.read_bytes() == b"t 0\nt 1\n"
    c.close()
    assert not record.exists()
    # A member killed while holding queues leaves its record, as here: its lock is free, so no
    # owner.
    record.write_bytes(b"t 0\nt 1\n")
    assert [p.owner for p in store.consumer_progress("g")] == [None, None]


def test_group_summary_counts_retries_and_dead_letters(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    _send(store, "t", [b"a", b"b", b"c"])
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t")
        got: list[mqlite.MessageExt] = []
        wait_until(lambda: got.extend(c.poll(0.05)) or len(got) == 3, what="the messages")
        assert c.send_back(got[0], dead=True).dead
        assert c.send_back(got[1], dead=True).dead
        c.send_back(got[2], 1)
        c.commit()
    summary = store.group_summary("g")
    assert (summary.dlq_depth, summary.retry_depth, summary.retry_waiting) == (2, None, 1)
    assert [p.topic for p in summary.queues] == ["t"]


def test_group_summary_of_a_read_only_store_leaves_only_the_waiting_retries_unknown(
    store: mqlite.Store, store_path: Path
) -> None:
    """Pending timers are listed by writers only; a reader (``mqlite group progress``, ``top``)
    still gets the progress, members and depths."""
    store.create_topic("t", 1)
    _send(store, "t", [b"a", b"b"])
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t")
        got: list[mqlite.MessageExt] = []
        wait_until(lambda: got.extend(c.poll(0.05)) or len(got) == 2, what="the messages")
        assert c.send_back(got[0], dead=True).dead
        c.send_back(got[1], 1)
        c.commit()
    store.flush()
    with mqlite.Store(store_path, read_only=True) as reader:
        summary = reader.group_summary("g")
    assert (summary.dlq_depth, summary.retry_depth, summary.retry_waiting) == (1, None, None)
    assert [(p.topic, p.committed) for p in summary.queues] == [("t", 2)]


def test_reset_offset_of_one_queue_keeps_the_others(store: mqlite.Store) -> None:
    store.create_topic("t", 2)
    _send(store, "t", [b"a", b"b", b"c"], queue=0)
    _send(store, "t", [b"d", b"e"], queue=1)
    store.reset_offset("g", "t", to="latest", create=True)
    assert store.reset_offset("g", "t", to="earliest", queue_id=1) == {MessageQueue("t", 1): 0}
    assert {p.queue_id: p.committed for p in store.consumer_progress("g")} == {0: 3, 1: 0}
    assert store.reset_offset("g", "t", offset=1, queue_id=0) == {MessageQueue("t", 0): 1}
    assert {p.queue_id: p.committed for p in store.consumer_progress("g")} == {0: 1, 1: 0}
    with pytest.raises(mqlite.InvalidQueueError):
        store.reset_offset("g", "t", to="latest", queue_id=2)
    assert {p.queue_id: p.committed for p in store.consumer_progress("g")} == {0: 1, 1: 0}


def test_delete_group_removes_offsets_settings_and_lock_files(store: mqlite.Store, store_path: Path) -> None:
    store.create_topic("t", 1)
    store.create_topic("u", 1)
    _send(store, "t", [b"a"])
    store.update_subscription_group("g", retry_max_times=3)
    c = store.pull_consumer("g", client_id="c1", consume_from=FIRST)
    c.subscribe("t")
    wait_until(lambda: c.poll(0.05), what="the message")
    c.commit()
    store.reset_offset("g", "u", to="latest", force=True)
    store.reset_offset("keep", "t", to="latest", create=True)
    with pytest.raises(mqlite.ConsumerGroupActiveError, match="c1"):
        store.delete_group("g")
    assert store.consumer_groups() == ["g", "keep"]
    c.close()
    assert store.delete_group("g") == ["t@g", "u@g"]
    assert store.consumer_groups() == ["keep"]
    assert store.subscription_group("g").retry_max_times == mqlite.SubscriptionGroupConfig("g").retry_max_times
    assert not (store_path / "consumer_groups" / "g").exists()
    table = json.loads((store_path / "config" / "subscriptionGroup.json").read_text())
    assert "g" not in table["subscriptionGroupTable"]
    with pytest.raises(mqlite.ConsumerGroupNotFoundError):
        store.delete_group("g")
    with pytest.raises(mqlite.ConsumerGroupNotFoundError):
        store.reset_offset("g", "t", to="latest")
    with pytest.raises(mqlite.InvalidGroupError):
        store.delete_group("bad group")


def test_delete_group_forced_beside_a_live_member_keeps_its_lock_files(store: mqlite.Store, store_path: Path) -> None:
    store.create_topic("t", 1)
    with store.pull_consumer("g", client_id="c1") as c:
        c.subscribe("t")
        c.commit({MessageQueue("t", 0): 0})
        assert store.delete_group("g", force=True) == ["t@g"]
        assert (store_path / "consumer_groups" / "g" / "members.d" / "c1.lock").exists()
        assert store.group_summary("g").members == ["c1"]


# -- store ----------------------------------------------------------------------------------------


def test_info_describes_the_store(store: mqlite.Store) -> None:
    empty = store.info()
    assert (empty.oldest_store_timestamp, empty.newest_store_timestamp, empty.topics) == (None, None, 0)
    store.create_topic("t", 2)
    _send(store, "t", [b"a", b"b", b"c"])
    store.reset_offset("g", "t", to="earliest", create=True)
    msgs = [m for q in (0, 1) for m in store.read(MessageQueue("t", q), 0)]
    info = store.info()
    assert info.path == store.path
    assert info.commit_log_min_offset == 0
    assert info.commit_log_max_offset == store.stats()["commit_log_max_offset"]
    assert info.oldest_store_timestamp == min(m.store_timestamp for m in msgs)
    assert info.newest_store_timestamp == max(m.store_timestamp for m in msgs)
    assert (info.topics, info.groups, info.pending_timers) == (1, 1, 0)
    assert info.files["commit_log"].count == 1 and info.files["commit_log"].bytes > 0
    assert info.files["consume_queue"].count >= 2
    assert info.files["index"].count == 0
    assert 0.0 < info.disk_usage_ratio <= 1.0
    assert info.disk_bytes == sum(u.bytes for u in info.files.values())


def test_info_of_a_memory_store(mem_store: mqlite.Store) -> None:
    mem_store.create_topic("t", 1)
    _send(mem_store, "t", [b"a"])
    info = mem_store.info()
    assert info.files == {} and info.disk_usage_ratio == 0.0
    assert info.newest_store_timestamp == info.oldest_store_timestamp is not None


# -- retention ------------------------------------------------------------------------------------

_SMALL = dict(commit_log_file_size=256 << 10, max_message_size=32 << 10, consume_queue_file_units=128)


def _log_files(root: Path) -> list[Path]:
    """The commit-log files, oldest first (not the next one the allocator is preparing)."""
    return sorted(f for f in (root / "commitlog").iterdir() if f.name.isdigit())


def _fill_files(store: mqlite.Store, root: Path, files: int) -> list[Path]:
    """Sends until the commit log has at least ``files`` files; returns them, oldest first."""
    store.create_topic("t", 1)
    p = store.producer()
    while len(_log_files(root)) < files:
        p.send_batch([b"x" * 1000] * 50, topic="t", queue_id=0)
    return _log_files(root)


def test_retention_reports_and_logs_every_expired_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "s"
    with mqlite.open(root, retention_hours=1e-7, **_SMALL) as store:  # type: ignore[arg-type]
        before = _fill_files(store, root, 4)
        then = before[-1].stat().st_mtime - 3600
        for f in before[:-1]:
            os.utime(f, (then, then))
        with caplog.at_level(logging.INFO, logger="mqlite.retention"):
            deleted = store.run_retention()
        # The files aged went, oldest first (some maybe by the background pass, reported too).
        assert [Path(d.path) for d in deleted] == before[: len(deleted)]
        assert len(deleted) >= 1 and before[-1].exists()
        assert all(d.reason == "expired" and d.size == 256 << 10 for d in deleted)
        assert [d.from_offset for d in deleted] == [int(f.name) for f in before[: len(deleted)]]
        logged = [r.getMessage() for r in caplog.records if r.name == "mqlite.retention"]
        assert len(logged) == len(deleted)
        assert all(d.path in line and "expired" in line for d, line in zip(deleted, logged))
        # Reported once.
        assert store.run_retention() == []
        assert store.offsets(MessageQueue("t", 0))[0] > 0


def test_a_disk_used_above_the_ratio_loses_its_oldest_files_whatever_their_age(tmp_path: Path) -> None:
    root = tmp_path / "s"
    # Any file system holding this test's files is used above a ratio of one part in 10**9.
    with mqlite.open(root, disk_force_clean_ratio=1e-9, **_SMALL) as store:  # type: ignore[arg-type]
        before = _fill_files(store, root, 3)
        deleted = store.run_retention()
        # The oldest files went, all but the one being written (and the next one, when the
        # allocator had made it already).
        assert [Path(d.path) for d in deleted] == before[: len(deleted)]
        assert len(deleted) >= len(before) - 2 >= 1
        assert all(d.reason == "disk_full" and not Path(d.path).exists() for d in deleted)
        low, high = store.offsets(MessageQueue("t", 0))
        assert 0 < low < high
        assert store.read(MessageQueue("t", 0), low, 1)[0].body == b"x" * 1000


def test_a_disk_used_below_the_ratio_keeps_young_files(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with mqlite.open(root, disk_force_clean_ratio=1.0, **_SMALL) as store:  # type: ignore[arg-type]
        before = _fill_files(store, root, 3)
        assert store.run_retention() == []
        assert all(f.exists() for f in before)


@pytest.mark.parametrize("ratio", [0, 1.5, float("nan"), -0.5, True, "0.5"])
def test_a_bad_disk_ratio_is_refused_before_the_store_is_made(tmp_path: Path, ratio: object) -> None:
    with pytest.raises((mqlite.InvalidConfigError, TypeError), match="disk_force_clean_ratio"):
        mqlite.open(tmp_path / "s", disk_force_clean_ratio=ratio)  # type: ignore[arg-type]
    assert not (tmp_path / "s").exists()
