"""PushConsumer: concurrent and orderly listeners, failures kept for redelivery, offsets, groups."""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable

import pytest
from helpers import wait_until

import mqlite
from mqlite import _core
from mqlite.errors import InvalidConfigError
from mqlite import (
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageQueue,
    MessageSelector,
    PushConsumer,
)

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


class CommitRounds:
    """Counts a push consumer's commit rounds (``_commit``: the poller computes what may be
    committed and submits it to the offset writer, every ``commit_interval``)."""

    def __init__(self, c: PushConsumer) -> None:
        self.rounds = 0
        self._writer = c._consumer._writer
        real = c._commit

        def commit() -> None:
            real()
            self.rounds += 1

        c._commit = commit  # type: ignore[method-assign]

    def settle(self) -> None:
        """Returns once a whole commit round began after this call and what it submitted is in
        the offset file: a commit the consumer's state allows now has been written by then."""
        n = self.rounds
        wait_until(lambda: self.rounds >= n + 2, what="two commit rounds")
        self._writer.flush(list(self._writer.pending()))  # after the write under way, if any


def retries_now(c: PushConsumer) -> None:
    """Every scheduled redelivery of ``c`` is due now, and later ones come at once: a test that
    needs a failed message to stay failed while it looks sets a long ``retry_delay``, then this."""
    with c._lock:
        c._retry_delay = 0.001
        c._timers[:] = [(0.0, seq, pq, msgs) for _, seq, pq, msgs in c._timers]
        heapq.heapify(c._timers)


def send(store: mqlite.Store, n: int, queues: int = 4, start: int = 0) -> None:
    store.create_topic("t", queues, exist_ok=True)
    p = store.producer()
    for i in range(start, start + n):
        p.send(Message("t", str(i).encode()), sharding_key=f"k{i % 7}")


def test_concurrent_consumes_everything_and_commits(store: mqlite.Store) -> None:
    send(store, 200)
    seen: list[int] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            seen.extend(int(m.body) for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    c = store.push_consumer("g", threads=3, batch_size=4, consume_from=FIRST)
    c.subscribe("t")
    c.register_message_listener(listener)
    with c:
        assert c.running
        wait_until(lambda: len(seen) >= 200)
        send(store, 50, start=200)
        wait_until(lambda: len(seen) >= 250)
    assert not c.running
    assert sorted(seen) == list(range(250))
    assert all(p.lag == 0 for p in store.consumer_progress("g"))


def test_a_message_sent_to_an_idle_consumer_reaches_the_listener(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    got: list[bytes] = []
    arrived = threading.Event()
    c = store.push_consumer("g", threads=2)
    c.subscribe("t")
    c.register_message_listener(
        lambda msgs: got.extend(m.body for m in msgs) or arrived.set() or ConsumeStatus.CONSUME_SUCCESS  # type: ignore[func-returns-value]
    )
    with c:
        # consume_from is "last": the queue's starting offset is pinned when it is assigned
        wait_until(lambda: c.assignment() == [MessageQueue("t", 0)])
        store.producer().send(Message("t", b"x"))
        assert arrived.wait(20)
    assert got == [b"x"]


@pytest.mark.perf
def test_wakes_promptly(store: mqlite.Store) -> None:
    """The timing bar of the test above: the listener has the message within 50 ms of the send."""
    store.create_topic("t", 1)
    got = threading.Event()
    c = store.push_consumer("g", threads=2)
    c.subscribe("t")
    c.register_message_listener(lambda msgs: got.set() or ConsumeStatus.CONSUME_SUCCESS)  # type: ignore[func-returns-value]
    with c:
        wait_until(lambda: c.assignment() == [MessageQueue("t", 0)])
        wait_until(lambda: c._token.waiters() == 1)  # one thread polls, the other waits for the token
        start = time.monotonic()
        store.producer().send(Message("t", b"x"))
        assert got.wait(2)
        assert time.monotonic() - start < 0.05


def test_reconsume_later_and_exceptions_are_redelivered_not_acknowledged(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    p = store.producer()
    for i in range(5):
        p.send(Message("t", str(i).encode()))
    attempts: dict[int, int] = {}
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        n = int(msgs[0].body)
        with lock:
            attempts[n] = attempts.get(n, 0) + 1
            tries = attempts[n]
        if n == 1 and tries < 3:
            return ConsumeStatus.RECONSUME_LATER
        if n == 3 and tries < 2:
            raise RuntimeError("boom")
        return ConsumeStatus.CONSUME_SUCCESS

    c = store.push_consumer("g", threads=2, consume_from=FIRST, retry_delay=0.05, send_back=False, commit_interval=0.05)
    c.subscribe("t")
    c.register_message_listener(listener)
    mq = MessageQueue("t", 0)
    with c:
        # while 1 is failing the committed offset stays at 1 (the oldest unacknowledged)
        wait_until(lambda: attempts.get(4, 0) >= 1)
        offsets = group_offset(store, mq)
        assert offsets is None or offsets <= 1
        wait_until(lambda: attempts.get(1, 0) >= 3 and attempts.get(3, 0) >= 2)
        wait_until(lambda: group_offset(store, mq) == 5)
    assert attempts == {0: 1, 1: 3, 2: 1, 3: 2, 4: 1}


def test_messages_arriving_one_by_one_failures_are_kept(store: mqlite.Store) -> None:
    # A quick listener is called by the polling thread as soon as each message arrives (the
    # leader's direct path); a failure there must be redelivered and hold the committed offset.
    store.create_topic("t", 1)
    attempts: dict[int, int] = {}
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            for m in msgs:
                attempts[int(m.body)] = attempts.get(int(m.body), 0) + 1
        n = int(msgs[0].body)
        if n == 1 and attempts[1] < 3:
            return ConsumeStatus.RECONSUME_LATER
        if n == 2 and attempts[2] < 2:
            raise RuntimeError("boom")
        return ConsumeStatus.CONSUME_SUCCESS

    c = store.push_consumer("g", threads=2, retry_delay=30, send_back=False, commit_interval=0.02)
    c.subscribe("t")
    c.register_message_listener(listener)
    rounds = CommitRounds(c)
    mq = MessageQueue("t", 0)
    p = store.producer()
    with c:
        wait_until(lambda: c.assignment() == [mq])  # consume_from "last": pinned at assignment
        for i in range(4):
            p.send(Message("t", str(i).encode()))
            wait_until(lambda: attempts.get(i, 0) >= 1)
        # 1 has failed once and waits for its retry (30 s away): a commit made now may not pass it
        assert attempts[1] == 1
        rounds.settle()
        committed = group_offset(store, mq)
        assert committed is not None and committed <= 1
        retries_now(c)
        wait_until(lambda: group_offset(store, mq) == 4)
    assert attempts == {0: 1, 1: 3, 2: 2, 3: 1}


def group_offset(store: mqlite.Store, mq: MessageQueue) -> int | None:
    for p in store.consumer_progress("g"):
        if p.message_queue == mq:
            return p.committed
    return None


def test_failed_message_survives_shutdown(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    p = store.producer()
    for i in range(3):
        p.send(Message("t", str(i).encode()))
    c = store.push_consumer("g", consume_from=FIRST, retry_delay=10, send_back=False)
    c.subscribe("t")
    called: list[bytes] = []
    c.register_message_listener(
        lambda msgs: called.extend(m.body for m in msgs)  # type: ignore[func-returns-value]
        or (ConsumeStatus.RECONSUME_LATER if msgs[0].body == b"1" else ConsumeStatus.CONSUME_SUCCESS)
    )
    c.start()
    wait_until(lambda: sorted(called) == [b"0", b"1", b"2"])  # 1 failed, its retry 10 s away
    c.shutdown()
    assert group_offset(store, MessageQueue("t", 0)) == 1
    again: list[bytes] = []
    c2 = store.push_consumer("g")
    c2.subscribe("t")
    c2.register_message_listener(lambda msgs: again.extend(m.body for m in msgs) or ConsumeStatus.CONSUME_SUCCESS)  # type: ignore[func-returns-value]
    with c2:
        wait_until(lambda: len(again) >= 2)
    assert again == [b"1", b"2"]


def test_orderly_keeps_queue_order_one_thread_per_queue(store: mqlite.Store) -> None:
    send(store, 400, queues=4)
    per_queue: dict[int, list[int]] = {}
    active: dict[int, int] = {}
    overlap = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        q = msgs[0].queue_id
        with lock:
            active[q] = active.get(q, 0) + 1
            if active[q] > 1:
                overlap.append(q)
        time.sleep(0.0005)
        with lock:
            per_queue.setdefault(q, []).extend(m.queue_offset for m in msgs)
            active[q] -= 1
        return ConsumeOrderlyStatus.SUCCESS

    c = store.push_consumer("g", orderly=True, threads=4, batch_size=3, consume_from=FIRST)
    c.subscribe("t")
    c.register_message_listener(listener)
    with c:
        wait_until(lambda: sum(len(v) for v in per_queue.values()) >= 400)
    assert not overlap
    assert sum(len(v) for v in per_queue.values()) == 400
    assert all(offs == list(range(len(offs))) for offs in per_queue.values())


def test_orderly_suspend_redelivers_same_messages_in_order(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    p = store.producer()
    for i in range(6):
        p.send(Message("t", str(i).encode()))
    log: list[int] = []
    failed = threading.Event()

    def listener(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
        n = int(msgs[0].body)
        if n == 2 and not failed.is_set():
            failed.set()
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        log.append(n)
        return ConsumeOrderlyStatus.SUCCESS

    c = store.push_consumer("g", orderly=True, consume_from=FIRST, suspend_time=0.1)
    c.subscribe("t")
    c.register_message_listener(listener)
    with c:
        wait_until(lambda: len(log) >= 6)
    assert log == [0, 1, 2, 3, 4, 5]


def test_two_push_consumers_split_the_queues(store: mqlite.Store) -> None:
    send(store, 0)
    seen: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}

    def make(name: str) -> PushConsumer:
        c = store.push_consumer("g", client_id=name, consume_from=FIRST, rebalance_interval=0.05)
        c.subscribe("t")
        c.register_message_listener(
            lambda msgs: seen[name].extend((m.queue_id, m.queue_offset) for m in msgs)  # type: ignore[func-returns-value]
            or ConsumeStatus.CONSUME_SUCCESS
        )
        return c

    with make("a") as a, make("b") as b:
        wait_until(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
        send(store, 100)
        wait_until(lambda: len(seen["a"]) + len(seen["b"]) >= 100)
    assert {q for q, _ in seen["a"]}.isdisjoint({q for q, _ in seen["b"]})
    allkeys = seen["a"] + seen["b"]
    assert len(allkeys) == len(set(allkeys)) == 100


def test_lifecycle_errors(store: mqlite.Store) -> None:
    c = store.push_consumer("g")
    with pytest.raises(mqlite.IllegalStateError):
        c.start()  # no listener
    c.register_message_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
    with pytest.raises(mqlite.IllegalStateError):
        c.start()  # no subscription
    with pytest.raises(mqlite.InvalidConfigError):
        store.push_consumer("g", threads=0)
    with pytest.raises(TypeError):
        c.register_message_listener("nope")  # type: ignore[arg-type]
    c.subscribe("t")
    c.start()
    with pytest.raises(mqlite.IllegalStateError):
        c.start()
    c.shutdown()
    c.shutdown()
    with pytest.raises(mqlite.IllegalStateError):
        c.subscribe("t")


def test_shutdown_from_inside_a_listener_returns_and_completes(store: mqlite.Store) -> None:
    """A listener that shuts its own consumer down must not wait for itself: shutdown returns
    at once, and the consumer still commits what was consumed and leaves the group."""
    store.create_topic("t", 1)
    returned = threading.Event()
    c = store.push_consumer("g", consume_from=FIRST, threads=2)
    c.subscribe("t")

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        c.shutdown(timeout=5)
        returned.set()
        return ConsumeStatus.CONSUME_SUCCESS

    c.register_message_listener(listener)
    c.start()
    store.producer().send(Message("t", b"x"))
    assert returned.wait(5), "shutdown() inside the listener did not return"
    wait_until(lambda: group_offset(store, MessageQueue("t", 0)) == 1)
    wait_until(lambda: not any(t.name.startswith("mqlite-push") for t in threading.enumerate()))
    assert not c.running
    c.shutdown()  # idempotent
    # the group has no live member left: a new consumer takes the queue at once
    got: list[bytes] = []
    c2 = store.push_consumer("g")
    c2.subscribe("t")
    c2.register_message_listener(lambda msgs: got.extend(m.body for m in msgs) or ConsumeStatus.CONSUME_SUCCESS)  # type: ignore[func-returns-value]
    with c2:
        store.producer().send(Message("t", b"y"))
        wait_until(lambda: got == [b"y"])


def test_a_slow_listener_call_does_not_hold_up_other_queues(store: mqlite.Store) -> None:
    """The poller runs quick listeners itself; one call that turns out slow loses it the poll,
    so a message on another queue is not kept waiting for that call."""
    store.create_topic("t", 4)
    p = store.producer()
    arrived: list[bytes] = []
    in_slow, release = threading.Event(), threading.Event()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            if m.body == b"slow":
                in_slow.set()
                release.wait(60)
            arrived.append(m.body)
        return ConsumeStatus.CONSUME_SUCCESS

    c = store.push_consumer("g", threads=4)
    c.subscribe("t")
    c.register_message_listener(listener)
    with c:
        wait_until(lambda: len(c.assignment()) == 4)  # consume_from "last": pinned at assignment
        for i in range(100):  # one at a time to a quick listener: the poller takes the fast path
            p.send(Message("t", b"w%d" % i))
            wait_until(lambda: len(arrived) == i + 1)
        p.send(Message("t", b"slow"), queue_id=0)
        assert in_slow.wait(20)
        p.send(Message("t", b"other"), queue_id=1)
        # delivered while the slow call still runs (it waits for `release`): not held up by it
        wait_until(lambda: b"other" in arrived, timeout=30, what="the message on the other queue")
        assert b"slow" not in arrived
        release.set()
        wait_until(lambda: b"slow" in arrived)


def test_commits_stay_behind_a_batch_the_poller_still_runs(store: mqlite.Store) -> None:
    """The poller runs a quick listener's batch straight after its poll, outside the ready
    queue. While that call hangs, another thread takes the poll over and later messages of the
    same queue are consumed and acknowledged: the commits made meanwhile must not pass the
    hanging message (a crash would lose it)."""
    store.create_topic("t", 1)
    p = store.producer()
    arrived: list[bytes] = []
    in_slow, release = threading.Event(), threading.Event()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            if m.body == b"slow":
                in_slow.set()
                release.wait(60)
            arrived.append(m.body)
        return ConsumeStatus.CONSUME_SUCCESS

    c = store.push_consumer("g", threads=4, consume_from=FIRST, commit_interval=0.05)
    c.subscribe("t")
    c.register_message_listener(listener)
    rounds = CommitRounds(c)
    mq = MessageQueue("t", 0)
    with c:
        for i in range(50):  # one at a time to a quick listener: the poller takes the fast path
            p.send(Message("t", b"w%d" % i))
            wait_until(lambda: len(arrived) == i + 1)
        slow = p.send(Message("t", b"slow")).queue_offset
        assert in_slow.wait(20)  # the poller is stuck in the call; another thread takes the poll over
        for i in range(10):
            p.send(Message("t", b"late%d" % i))
        wait_until(lambda: sum(b.startswith(b"late") for b in arrived) == 10)
        rounds.settle()  # commits made after the late messages were acknowledged are written
        assert (group_offset(store, mq) or 0) <= slow
        release.set()
        wait_until(lambda: b"slow" in arrived)
        wait_until(lambda: group_offset(store, mq) == slow + 11)


def test_shutdown_timeout_bounds_a_stuck_listener_and_nothing_is_acknowledged(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    store.producer().send(Message("t", b"stuck"))
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        started.set()
        release.wait(120)
        finished.set()
        return ConsumeStatus.CONSUME_SUCCESS

    # Without the timeout's bound, shutdown would wait for the listener up to revoke_timeout.
    c = store.push_consumer("g", consume_from=FIRST, revoke_timeout=120)
    c.subscribe("t")
    c.register_message_listener(listener)
    c.start()
    assert started.wait(20)
    stopping = threading.Thread(target=lambda: c.shutdown(timeout=0.5), daemon=True)
    stopping.start()
    stopping.join(60)
    assert not stopping.is_alive(), "shutdown(timeout=0.5) waited for the stuck listener"
    assert not finished.is_set()  # it returned while the listener was still stuck
    release.set()
    assert group_offset(store, MessageQueue("t", 0)) in (None, 0)  # will be delivered again


def test_a_revoke_waits_for_the_batch_running_on_the_polling_thread(store: mqlite.Store) -> None:
    """A quick listener gets each poll on the polling thread itself (``_claim``; the batch is
    not counted in ``running``). When the queue moves to a new member while such a batch runs,
    the revoke (made by the thread that took the stalled poll over) must wait for it, commit
    past it and only then let the queue go: the new member does not get it again."""
    store.create_topic("t", 1)
    p = store.producer()
    started, release = threading.Event(), threading.Event()
    old_got: list[bytes] = []
    new_got: list[bytes] = []

    def old_listener(msgs: list[MessageExt]) -> ConsumeStatus:
        if msgs[0].body == b"slow":
            started.set()
            release.wait(10)
        old_got.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    old = store.push_consumer("g", client_id="b-old", threads=2, consume_from=FIRST, rebalance_interval=0.02)
    old.subscribe("t")
    old.register_message_listener(old_listener)
    new = store.push_consumer("g", client_id="a-new", consume_from=FIRST, rebalance_interval=0.02)
    new.subscribe("t")
    new.register_message_listener(lambda msgs: new_got.extend(m.body for m in msgs) or ConsumeStatus.CONSUME_SUCCESS)  # type: ignore[func-returns-value]
    with old:
        for i in range(20):  # one at a time to a quick listener: the poller takes the fast path
            p.send(Message("t", b"%d" % i))
            wait_until(lambda: len(old_got) == i + 1)
        p.send(Message("t", b"slow"))
        assert started.wait(5)
        with new:  # sorts first: the queue is to move to it
            # The old member's revoke of the queue (made by the thread that took the stalled poll
            # over) waits for the running batch; had it not waited, the new member has the queue.
            wait_until(lambda: old._idle_waiters > 0 or new.assignment() != [], what="the revoke")
            assert new_got == [] and new.assignment() == [], "the queue moved while its batch ran"
            release.set()
            wait_until(lambda: new.assignment() == [MessageQueue("t", 0)])
            p.send(Message("t", b"after"))
            wait_until(lambda: new_got == [b"after"])
    assert old_got[-1] == b"slow" and new_got == [b"after"]


def test_a_listener_raising_system_exit_is_retried_and_its_thread_lives(
    store: mqlite.Store, caplog: pytest.LogCaptureFixture
) -> None:
    store.create_topic("t", 1)
    store.producer().send(Message("t", b"m"))
    calls: list[float] = []

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise SystemExit("not an Exception")
        return ConsumeStatus.CONSUME_SUCCESS

    c = store.push_consumer("g", consume_from=FIRST, threads=1, retry_delay=0.05, send_back=False, revoke_timeout=5)
    c.subscribe("t")
    c.register_message_listener(listener)
    with caplog.at_level("WARNING", logger="mqlite.consumer"), c:
        wait_until(lambda: len(calls) == 2)
    # nothing was left running: shutdown did not wait out revoke_timeout (it says so when it does)
    assert "while listeners still run" not in caplog.text
    assert group_offset(store, MessageQueue("t", 0)) == 1


def test_store_closed_under_a_running_consumer_stops_it_quietly(
    store_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    store = mqlite.open(str(store_path))
    store.create_topic("t", 1)
    c = store.push_consumer("g", threads=3)
    c.subscribe("t")
    c.register_message_listener(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
    c.start()
    wait_until(lambda: c.assignment() == [MessageQueue("t", 0)])  # its threads poll the queue
    with caplog.at_level("WARNING", logger="mqlite.consumer"):
        store.close()
        # every consuming thread ends; they are the ones that would log a failing poll
        wait_until(lambda: not any(t.name.startswith("mqlite-push") for t in threading.enumerate()))
        errors = [r for r in caplog.records if r.levelname == "ERROR"]
        assert len(errors) == 1 and "store closed" in errors[0].getMessage()
        stopping = threading.Thread(target=c.shutdown, daemon=True)
        stopping.start()
        stopping.join(60)
        assert not stopping.is_alive(), "shutdown hung on the closed store"
    assert "while listeners still run" not in caplog.text


def test_commit_passes_messages_the_filter_skips(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    p = store.producer()
    for i in range(50):
        p.send(Message("t", b"%d" % i, tags="skip"))
    p.send(Message("t", b"wanted", tags="want"))
    got: list[bytes] = []
    c = store.push_consumer("g", consume_from=FIRST, commit_interval=0.05)
    c.subscribe("t", "want")
    c.register_message_listener(lambda msgs: got.extend(m.body for m in msgs) or ConsumeStatus.CONSUME_SUCCESS)  # type: ignore[func-returns-value]
    with c:
        wait_until(lambda: got == [b"wanted"])
        wait_until(lambda: group_offset(store, MessageQueue("t", 0)) == 51)
        for i in range(50):  # nothing after this is delivered: the offset still moves on
            p.send(Message("t", b"%d" % i, tags="skip"))
        wait_until(lambda: group_offset(store, MessageQueue("t", 0)) == 101)
    assert got == [b"wanted"]


def test_flow_control_pause_racing_a_resume_does_not_stall_a_queue(
    store: mqlite.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The poller marks a full queue paused, then pauses it in the PullConsumer; a listener that
    drains the queue in between resumes it first. The late pause must not stick."""
    n = 600
    store.create_topic("t", 2)
    with store.producer() as p:
        for i in range(n):
            p.send(Message("t", b"%d" % i))
    real_pause = mqlite.PullConsumer.pause

    def slow_pause(self: mqlite.PullConsumer, queues: object) -> None:
        time.sleep(0.02)  # widens the window between the flag and the pause
        real_pause(self, queues)  # type: ignore[arg-type]

    monkeypatch.setattr(mqlite.PullConsumer, "pause", slow_pause)
    seen: set[tuple[int, int]] = set()
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            seen.update((m.queue_id, m.queue_offset) for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    c = store.push_consumer("g", consume_from=FIRST, threads=4, max_buffered_per_queue=2)
    c.subscribe("t")
    c.register_message_listener(listener)
    with c:
        wait_until(lambda: len(seen) == n, timeout=30)


def _token_waiters(token: object, n: int, keep: Callable[[], bool], got: list[int]) -> list[threading.Thread]:
    def wait() -> None:
        if token.acquire(keep):  # type: ignore[attr-defined]
            got.append(threading.get_ident())

    threads = [threading.Thread(target=wait, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


def test_poll_token_timer_never_calls_back_into_python() -> None:
    # The stall watch runs without the GIL: a waiter comes back to Python (keep_waiting) before
    # its first sleep and after each wake_all, never on the watcher's timer. It used to be a
    # Python watcher waking every `stall` seconds, which cost the push path's p99 a third.
    token = _core.PollToken(0.05)
    assert token.acquire(lambda: True)
    assert token.held()
    checks = []
    running = True

    def keep() -> bool:
        checks.append(1)
        return running

    got: list[int] = []
    threads = _token_waiters(token, 3, keep, got)
    wait_until(lambda: token.waiters() == 3)
    looks = token.watch_looks()
    wait_until(lambda: token.watch_looks() >= looks + 12)  # twelve watch periods
    assert len(checks) == 3, checks
    running = False
    token.wake_all()  # every waiter re-checks at once, none holds on for a timer
    for t in threads:
        t.join(2)
        assert not t.is_alive()
    assert got == []
    assert len(checks) == 6
    assert token.held()


def test_poll_token_release_hands_the_token_to_one_waiter() -> None:
    token = _core.PollToken(10.0)
    assert token.acquire(lambda: True)
    running = [True]
    checks: list[int] = []

    def keep() -> bool:
        checks.append(1)
        return running[0]

    got: list[int] = []
    threads = _token_waiters(token, 2, keep, got)
    wait_until(lambda: token.waiters() == 2)  # both asleep: neither took the held token
    assert got == []
    token.release()
    assert not token.held()
    wait_until(lambda: len(got) == 1)
    wait_until(lambda: token.waiters() == 1)
    assert len(got) == 1  # the other waiter still waits: its holder is not busy
    before = len(checks)
    token.wake_all()
    wait_until(lambda: len(checks) == before + 1 and token.waiters() == 1)  # re-checked, asleep again
    assert len(got) == 1  # wake_all only makes waiters re-check keep_waiting
    token.release()  # not the holder: a no-op
    assert len(got) == 1
    assert sum(t.is_alive() for t in threads) == 1
    running[0] = False
    token.wake_all()
    for t in threads:
        t.join(2)
        assert not t.is_alive()
    assert len(got) == 1


def test_poll_token_stalled_holders_are_taken_over_one_after_another() -> None:
    # After the watcher takes the token over, another waiter must take up the watch: a second
    # stall is detected too, and a holder that is polling (not busy) is never taken over.
    token = _core.PollToken(0.05)
    holders: list[int] = []
    kept: list[bool] = []
    stuck = threading.Event()

    def member() -> None:
        assert token.acquire(lambda: True)
        holders.append(threading.get_ident())
        token.busy()  # stuck in a listener until the test says otherwise
        stuck.wait(10)
        kept.append(token.idle())  # False once taken over meanwhile
        token.release()  # a no-op for a holder that was taken over

    assert token.acquire(lambda: True)
    threads = [threading.Thread(target=member, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    wait_until(lambda: token.waiters() == 3)
    looks = token.watch_looks()
    wait_until(lambda: token.watch_looks() >= looks + 4)  # four watch periods with the holder polling
    assert holders == []  # nobody took over
    token.busy()
    wait_until(lambda: len(holders) == 1, 5)  # the first stall: a waiter takes over
    assert not token.idle() and not token.held()
    wait_until(lambda: len(holders) == 2, 5)  # the new holder is stuck too: taken over again
    wait_until(lambda: len(holders) == 3, 5)
    assert len(set(holders)) == 3
    stuck.set()
    for t in threads:
        t.join(5)
        assert not t.is_alive()
    assert sorted(kept) == [False, False, True]  # only the last holder, never taken over, kept it
    assert not token.held()
    assert token.acquire(lambda: True)  # released by the last holder


def test_poll_token_rejects_a_bad_stall() -> None:
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidConfigError):
            _core.PollToken(bad)



def test_a_poison_message_under_a_sql_filter_is_skipped_and_the_worker_lives(store: mqlite.Store) -> None:
    """A message the SQL filter cannot evaluate (a 5,000-digit number) is filtered out: the
    rest of its poll is delivered and the one worker goes on consuming."""
    store.create_topic("t", 1)
    p = store.producer()
    for body, a in ((b"good-1", "10"), (b"poison", "9" * 5000), (b"good-2", "20"), (b"after", "30")):
        p.send(Message("t", body, properties={"a": a}), queue_id=0)
    got: list[bytes] = []
    done = threading.Event()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        got.extend(m.body for m in msgs)
        if b"after" in got:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    c = store.push_consumer("g", threads=1, consume_from=FIRST)
    c.subscribe("t", MessageSelector.by_sql("a > 5"))
    c.register_message_listener(listener)
    with c:
        assert done.wait(10), f"delivered only {got}"
        assert c.running and all(t.is_alive() for t in c._workers)
    assert got == [b"good-1", b"good-2", b"after"]
    assert group_offset(store, MessageQueue("t", 0)) == 4


class _Garbage:
    """A listener's stray return value whose ``==`` raises, as a numpy array's does."""

    def __eq__(self, other: object) -> bool:
        raise ValueError("the truth value of an array is ambiguous")

    __hash__ = object.__hash__


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrent", "orderly"])
def test_a_listener_returning_garbage_is_retried_and_its_thread_lives(
    store: mqlite.Store, caplog: pytest.LogCaptureFixture, orderly: bool
) -> None:
    """Anything a listener returns that is not a status counts as RECONSUME_LATER (logged),
    even an object whose comparison raises; its worker thread goes on consuming."""
    store.create_topic("t", 1)
    p = store.producer()
    p.send(Message("t", b"bad"))
    calls: list[bytes] = []
    retried, after = threading.Event(), threading.Event()

    def listener(msgs: list[MessageExt]) -> object:
        calls.append(msgs[0].body)
        if calls == [b"bad"]:
            return _Garbage()
        (after if msgs[0].body == b"after" else retried).set()
        return ConsumeStatus.CONSUME_SUCCESS

    c = store.push_consumer("g", consume_from=FIRST, threads=1, orderly=orderly, retry_delay=0.05, send_back=False,
                            suspend_time=0.05)
    c.subscribe("t")
    c.register_message_listener(listener)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="mqlite.consumer"):
        with c:
            assert retried.wait(10), f"listener calls: {calls}"
            p.send(Message("t", b"after"))
            assert after.wait(10), f"listener calls: {calls}"
            assert c.running and all(t.is_alive() for t in c._workers)
    assert calls == [b"bad", b"bad", b"after"]
    assert group_offset(store, MessageQueue("t", 0)) == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    # One warning, for the garbage; none from shutdown's revoke waiting for a batch that
    # never finished.
    assert len(warnings) == 1 and "_Garbage" in warnings[0], warnings


def test_an_unexpected_error_in_the_poll_path_does_not_kill_the_worker(
    store: mqlite.Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception that is not an MQError, raised where the worker polls, is logged and the
    worker polls again: with one thread the consumer still consumes."""
    store.create_topic("t", 1)
    store.producer().send(Message("t", b"m"))
    got = threading.Event()
    c = store.push_consumer("g", consume_from=FIRST, threads=1)
    c.subscribe("t")
    c.register_message_listener(lambda msgs: got.set() or ConsumeStatus.CONSUME_SUCCESS)  # type: ignore[func-returns-value]
    real_poll = c._consumer._poll  # what the push consumer's polls go through
    failed: list[int] = []

    def poll_failing_once(*args: object, **kwargs: object) -> list[MessageExt]:
        if not failed:
            failed.append(1)
            raise RuntimeError("injected poll failure")
        return real_poll(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(c._consumer, "_poll", poll_failing_once)
    with caplog.at_level(logging.ERROR, logger="mqlite.consumer"):
        with c:
            assert got.wait(10)
            assert c.running and all(t.is_alive() for t in c._workers)
    assert failed == [1]
    assert group_offset(store, MessageQueue("t", 0)) == 1
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None
    assert "injected poll failure" in str(errors[0].exc_info[1])
