"""Automatic offset commits are written on a thread of their own (``mqlite.offsets.OffsetWriter``):
a poll or a push delivery never waits for the offset file, and writes of one queue keep their order
(a revoke's write is never overtaken by an older background one)."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import WatchedLock, wait_until

import mqlite
from mqlite import ConsumeFromWhere, ConsumeStatus, Message, MessageExt, MessageQueue
from mqlite import offsets as offsets_mod
from mqlite.offsets import OffsetFile, OffsetWriter

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


class GatedWrites:
    """A write function that records each batch and, while ``closed``, blocks in it.

    ``active`` counts the writes inside it now; ``overlapped`` is set when a write enters while
    another one is inside (two writes of one consumer must never run at once)."""

    def __init__(self) -> None:
        self.calls: list[dict[Any, int]] = []
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.active = 0
        self.overlapped = threading.Event()
        self._count = threading.Lock()

    def enter(self) -> None:
        with self._count:
            self.active += 1
            if self.active > 1:
                self.overlapped.set()
        self.entered.set()
        self.gate.wait(20)

    def leave(self, offsets: dict[Any, int]) -> None:
        with self._count:
            self.active -= 1
        self.calls.append(dict(offsets))

    def __call__(self, offsets: dict[Any, int]) -> None:
        self.enter()
        self.leave(offsets)

    def hold(self) -> int:
        """Closes the gate (the next write blocks in it); returns how many writes were done."""
        self.entered.clear()
        self.gate.clear()
        return len(self.calls)


def in_thread(fn: Callable[[], object]) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_a_direct_write_waits_for_the_background_one_and_lands_after_it() -> None:
    w = GatedWrites()
    writer = OffsetWriter(w, "test-offsets")
    writer._io = io = WatchedLock()  # type: ignore[assignment]
    w.gate.clear()
    writer.submit({"q": 10})
    assert w.entered.wait(5)  # the background write of 10 is under way (held at the gate)
    sync = in_thread(lambda: writer.write({"q": 15}))
    # Either the direct write waits for the write under way, or it enters the write function
    # beside it: whichever happens first decides.
    wait_until(lambda: io.contended.is_set() or w.overlapped.is_set(), what="the direct write")
    assert not w.overlapped.is_set(), "the direct write must wait for the background write under way"
    assert sync.is_alive()
    w.gate.set()
    sync.join(5)
    writer.close(5)
    assert w.calls == [{"q": 10}, {"q": 15}]


def test_a_direct_write_is_never_overtaken_by_an_older_pending_offset() -> None:
    w = GatedWrites()
    writer = OffsetWriter(w, "test-offsets")
    w.gate.clear()
    writer.submit({"a": 1})
    assert w.entered.wait(5)
    writer.submit({"b": 5, "c": 7})  # pending behind the write under way
    sync = in_thread(lambda: writer.write({"b": 6}))
    w.gate.set()
    sync.join(5)
    writer.close(5)
    # b's pending 5 is either dropped or written before the direct 6, never after it
    assert w.calls[0] == {"a": 1}
    b_values = [call["b"] for call in w.calls if "b" in call]
    assert b_values[-1] == 6 and b_values in ([6], [5, 6])
    assert any(call.get("c") == 7 for call in w.calls)


def test_flush_writes_the_pending_offsets_of_its_queues_after_the_write_under_way() -> None:
    w = GatedWrites()
    writer = OffsetWriter(w, "test-offsets")
    writer._io = io = WatchedLock()  # type: ignore[assignment]
    w.gate.clear()
    writer.submit({"a": 1})
    assert w.entered.wait(5)
    writer.submit({"a": 2, "b": 3})
    done = threading.Event()
    t = in_thread(lambda: (writer.flush(["a"]), done.set()))  # type: ignore[func-returns-value]
    wait_until(lambda: io.contended.is_set() or w.overlapped.is_set() or done.is_set(), what="flush")
    assert not w.overlapped.is_set() and not done.is_set(), "flush must wait until the write under way is done"
    w.gate.set()
    t.join(5)
    # once flush returned, a's offsets were written in order and nothing of "a" is left
    assert "a" not in writer.pending()
    a_values = [call["a"] for call in w.calls if "a" in call]
    assert a_values == [1, 2]
    written_before = len(w.calls)
    writer.submit({"b": 4})
    writer.close(5)
    assert all("a" not in call for call in w.calls[written_before:])
    assert w.calls[-1].get("b") == 4


def test_a_later_submit_supersedes_and_close_writes_what_is_pending() -> None:
    w = GatedWrites()
    writer = OffsetWriter(w, "test-offsets-closed")
    w.gate.clear()
    writer.submit({"x": 0})
    assert w.entered.wait(5)
    writer.submit({"a": 1})
    writer.submit({"a": 2})
    w.gate.set()
    writer.close(5)
    assert w.calls == [{"x": 0}, {"a": 2}]
    # After close a submit is dropped and starts no thread. With the gate closed, a thread it
    # started could not finish its write, so it would still be alive here.
    w.gate.clear()
    writer.submit({"a": 3})
    assert writer.pending() == {}
    assert not any(t.name == "test-offsets-closed" for t in threading.enumerate())
    w.gate.set()
    assert w.calls == [{"x": 0}, {"a": 2}]


def test_an_idle_writer_thread_ends_and_a_new_submit_starts_another(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offsets_mod, "_WRITER_IDLE", 0.05)
    w = GatedWrites()
    writer = OffsetWriter(w, "test-offsets-idle")

    def threads() -> int:
        return sum(t.name == "test-offsets-idle" for t in threading.enumerate())

    writer.submit({"a": 1})
    wait_until(lambda: w.calls == [{"a": 1}] and threads() == 0)
    writer.submit({"a": 2})
    wait_until(lambda: w.calls == [{"a": 1}, {"a": 2}])
    writer.close(5)
    wait_until(lambda: threads() == 0)


def test_a_failed_background_write_is_logged_and_retried_by_the_next_commit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[dict[Any, int]] = []

    def flaky(offsets: dict[Any, int]) -> None:
        calls.append(dict(offsets))
        if len(calls) == 1:
            raise OSError(28, "No space left on device")

    writer = OffsetWriter(flaky, "test-offsets")
    with caplog.at_level("ERROR", logger="mqlite.consumer"):
        writer.submit({"a": 1})
        wait_until(lambda: len(calls) == 1)
        writer.submit({"a": 1})
        wait_until(lambda: len(calls) == 2)
    writer.close(5)
    assert "offset commit failed" in caplog.text and "No space left" in caplog.text


# -- through the consumers, with the real offset file ------------------------------------------


@pytest.fixture
def stall_offset_file(monkeypatch: pytest.MonkeyPatch) -> Iterator[GatedWrites]:
    """Every ``OffsetFile.update`` blocks while the gate is closed (a slow disk's fsyncs)."""
    gate = GatedWrites()
    real = OffsetFile.update

    def update(self: OffsetFile, key: str, offsets: Any, *, replace: bool = False) -> None:
        gate.enter()
        real(self, key, offsets, replace=replace)
        gate.leave({key: max(offsets.values())})

    monkeypatch.setattr(OffsetFile, "update", update)
    yield gate
    gate.gate.set()


def topic_of(store: mqlite.Store, n: int) -> MessageQueue:
    """Topic "t" with one queue holding messages b"0" .. b"<n-1>"; returns that queue."""
    store.create_topic("t", 1)
    p = store.producer()
    for i in range(n):
        p.send(Message("t", b"%d" % i))
    return MessageQueue("t", 0)


def committed(store: mqlite.Store, group: str, mq: MessageQueue) -> int | None:
    for p in store.consumer_progress(group):
        if p.message_queue == mq:
            return p.committed
    return None


def test_push_delivery_goes_on_while_an_offset_commit_waits_for_the_disk(
    store: mqlite.Store, stall_offset_file: GatedWrites
) -> None:
    store.create_topic("t", 1)
    p = store.producer()
    got: list[bytes] = []
    c = store.push_consumer("g", consume_from=FIRST, commit_interval=0.02)
    c.subscribe("t")
    c.register_message_listener(lambda msgs: got.extend(m.body for m in msgs) or ConsumeStatus.CONSUME_SUCCESS)  # type: ignore[func-returns-value]
    mq = MessageQueue("t", 0)
    with c:
        p.send(Message("t", b"first"))
        wait_until(lambda: got == [b"first"])
        stall_offset_file.hold()
        p.send(Message("t", b"second"))
        assert stall_offset_file.entered.wait(5)  # a commit is stuck in the offset file
        for i in range(20):
            p.send(Message("t", b"%d" % i))
        # delivered while the commit still waits: the poller did not stay behind it
        wait_until(lambda: len(got) == 22)
        assert not stall_offset_file.gate.is_set()
        stall_offset_file.gate.set()
        wait_until(lambda: committed(store, "g", mq) == 22)
    assert committed(store, "g", mq) == 22


def test_pull_poll_goes_on_while_an_auto_commit_waits_and_close_commits_after_it(
    store: mqlite.Store, stall_offset_file: GatedWrites
) -> None:
    mq = topic_of(store, 10)
    c = store.pull_consumer("g", consume_from=FIRST, auto_commit_interval=0.01, max_poll_messages=4)
    c._writer._io = io = WatchedLock()  # type: ignore[assignment]
    c.subscribe("t")
    got: list[MessageExt] = []
    got.extend(c.poll(1))  # assignment (its initial offset is written at once), first batch
    writes_done = stall_offset_file.hold()
    c._next_commit = 0.0  # the auto-commit interval has passed
    got.extend(c.poll(1))  # due: the auto-commit of the first batch goes to the writer thread
    assert stall_offset_file.entered.wait(5)
    while len(got) < 10:  # polls return while that commit is stuck
        batch = c.poll(1)
        assert batch, "poll must not wait for the stuck commit"
        got.extend(batch)
    # every poll returned while the commit was still held at the gate
    assert len(stall_offset_file.calls) == writes_done
    closing = in_thread(c.close)
    wait_until(lambda: io.contended.is_set() or stall_offset_file.overlapped.is_set(), what="close")
    assert not stall_offset_file.overlapped.is_set(), "close must wait for the commit under way before its own"
    assert closing.is_alive()
    stall_offset_file.gate.set()
    closing.join(10)
    assert [int(m.body) for m in got] == list(range(10))
    assert committed(store, "g", mq) == 10
    # the stuck (older) write landed before close's final one, never after it
    values = [v for call in stall_offset_file.calls for v in call.values()]
    assert values[-1] == 10 and values == sorted(values)


def test_a_consumer_dropped_without_close_is_collected_after_an_auto_commit(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    store.producer().send(Message("t", b"x"))
    c = store.pull_consumer("g", consume_from=FIRST, auto_commit_interval=0.01)
    c.subscribe("t")
    assert c.poll(1)
    c._next_commit = 0.0  # the auto-commit interval has passed
    c.poll(0.05)  # starts the offset writer thread with an auto-commit
    wait_until(lambda: committed(store, "g", MessageQueue("t", 0)) == 1)
    ref = weakref.ref(c)
    del c
    gc.collect()
    assert ref() is None, "the offset writer thread must not keep the consumer alive"


def test_commit_async_returns_at_once_and_a_later_commit_lands_after_it(
    store: mqlite.Store, stall_offset_file: GatedWrites
) -> None:
    mq = topic_of(store, 6)
    c = store.pull_consumer("g", consume_from=FIRST, auto_commit=False)
    c._writer._io = io = WatchedLock()  # type: ignore[assignment]
    c.subscribe("t")
    msgs = c.poll(1)
    assert len(msgs) == 6
    writes_done = stall_offset_file.hold()
    c.commit_async(message=msgs[2])  # 3, held in the offset file
    assert stall_offset_file.entered.wait(5)
    assert len(stall_offset_file.calls) == writes_done  # returned while the write waits
    syncing = in_thread(lambda: c.commit({mq: 5}))
    wait_until(lambda: io.contended.is_set() or stall_offset_file.overlapped.is_set(), what="commit()")
    assert not stall_offset_file.overlapped.is_set(), "commit() must wait for the async write under way"
    assert syncing.is_alive()
    stall_offset_file.gate.set()
    syncing.join(10)
    assert committed(store, "g", mq) == 5
    assert [v for call in stall_offset_file.calls[writes_done:] for v in call.values()] == [3, 5]
    c.commit_async()  # the position, 6
    c.close()  # writes after it
    assert committed(store, "g", mq) == 6


def test_commit_async_rejects_what_commit_rejects_and_writes_nothing(store: mqlite.Store) -> None:
    store.create_topic("t", 2)
    store.producer().send(Message("t", b"x"), queue_id=0)
    c = store.pull_consumer("g", consume_from=FIRST, auto_commit=False)
    c.assign([MessageQueue("t", 0)])
    with pytest.raises(mqlite.QueueNotAssignedError):
        c.commit_async({MessageQueue("t", 1): 0})
    with pytest.raises(mqlite.IllegalArgumentError):
        c.commit_async({MessageQueue("t", 0): -1})
    c.commit_async({MessageQueue("t", 0): 99})  # clamped to the queue's max offset
    c.close()
    assert committed(store, "g", MessageQueue("t", 0)) == 1
    assert committed(store, "g", MessageQueue("t", 1)) is None
    with pytest.raises(mqlite.ClientClosedError):
        c.commit_async()


def test_a_revoked_queue_s_pending_commits_land_before_the_new_owner_s(
    store: mqlite.Store, stall_offset_file: GatedWrites
) -> None:
    """An async commit held in the offset file and another one pending when the queue moves to
    another member: the revoke writes both (in order) before letting the queue go, so the new
    owner's commit is the last word."""
    mq = topic_of(store, 10)
    opts: dict[str, Any] = {"consume_from": FIRST, "auto_commit": False, "rebalance_interval": 0.01}
    old = store.pull_consumer("g", client_id="b-old", **opts)
    old._writer._io = io = WatchedLock()  # type: ignore[assignment]
    old.subscribe("t")
    assert len(old.poll(1)) == 10
    writes_done = stall_offset_file.hold()
    old.commit_async({mq: 3})
    assert stall_offset_file.entered.wait(5)  # held in the offset file
    old.commit_async({mq: 5})  # pending behind it
    new = store.pull_consumer("g", client_id="a-new", **opts)  # sorts first: takes the queue
    new.subscribe("t")

    def revoke() -> None:  # the old member's rebalance (inside poll) revokes the queue
        for _ in range(1000):
            if not old.assignment():
                return
            old.poll(0.02)

    revoking = in_thread(revoke)
    # the revoke reaches the flush of the queue's commits and waits for the one held
    wait_until(lambda: io.contended.is_set() or not revoking.is_alive(), what="the revoke")
    assert revoking.is_alive(), "the revoke must wait for the commit held in the offset file"
    new.poll(0.01)
    # while the old member's commits wait in the offset file, it does not let the queue go
    assert new.assignment() == [] and revoking.is_alive()
    stall_offset_file.gate.set()
    revoking.join(10)
    taken: list[MessageExt] = []
    wait_until(lambda: bool(taken.extend(new.poll(0.01)) or taken))  # type: ignore[func-returns-value]
    assert taken[0].queue_offset == 5  # continues from the old member's last commit
    new.commit({mq: 8})
    values = [v for call in stall_offset_file.calls[writes_done:] for v in call.values()]
    assert values == [3, 5, 8]
    new.close()
    old.close()  # both writer threads have ended: no older write can land after this check
    assert committed(store, "g", mq) == 8
