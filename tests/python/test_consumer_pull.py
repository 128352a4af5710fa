"""PullConsumer: subscribe, poll, commit, seek, pause, iteration, consume-from, filters."""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import mqlite
from mqlite import (
    ConsumeFromWhere,
    Message,
    MessageQueue,
    MessageSelector,
    PullConsumer,
)

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def fill(store: mqlite.Store, topic: str = "t", n: int = 20, queues: int = 2) -> None:
    store.create_topic(topic, queues)
    p = store.producer()
    for i in range(n):
        tag = "A" if i % 2 else "B"
        p.send(Message(topic, f"{i}".encode(), tags=tag, properties={"n": str(i)}), queue_id=i % queues)


def drain(c: PullConsumer, timeout: float = 0.05) -> list[mqlite.MessageExt]:
    out: list[mqlite.MessageExt] = []
    while batch := c.poll(timeout):
        out.extend(batch)
    return out


def bodies(msgs: list[mqlite.MessageExt]) -> list[int]:
    return sorted(int(m.body) for m in msgs)


def test_subscribe_poll_everything_once(store: mqlite.Store) -> None:
    fill(store)
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t")
        assert c.assignment() == [MessageQueue("t", 0), MessageQueue("t", 1)]
        got = drain(c)
    assert bodies(got) == list(range(20))
    per_queue = {q: [m.queue_offset for m in got if m.queue_id == q] for q in (0, 1)}
    assert all(offs == sorted(offs) for offs in per_queue.values())


def test_close_commits_and_next_consumer_resumes(store: mqlite.Store) -> None:
    fill(store)
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t")
        first = c.poll(1, max_messages=5)
        assert len(first) == 5
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t")
        rest = drain(c)
    assert sorted(bodies(first) + bodies(rest)) == list(range(20))
    assert not set(bodies(first)) & set(bodies(rest))
    progress = {p.queue_id: p for p in store.consumer_progress("g")}
    assert all(p.committed == p.max_offset == 10 and p.lag == 0 for p in progress.values())


def test_consume_from_last_skips_history_but_sees_new(store: mqlite.Store) -> None:
    fill(store)
    with store.pull_consumer("g") as c:
        c.subscribe("t")
        assert c.poll(0.05) == []
        store.producer().send(Message("t", b"new"))
        assert [m.body for m in c.poll(1)] == [b"new"]


def test_consume_from_timestamp(store: mqlite.Store) -> None:
    fill(store, n=4)
    time.sleep(0.02)
    cut = datetime.now()
    time.sleep(0.02)
    p = store.producer()
    p.send(Message("t", b"100"), queue_id=0)
    with store.pull_consumer("g", consume_from=cut) as c:
        c.subscribe("t")
        assert bodies(drain(c)) == [100]
    with store.pull_consumer(
        "g2", consume_from=ConsumeFromWhere.CONSUME_FROM_TIMESTAMP,
        consume_timestamp=cut - timedelta(hours=1),
    ) as c:
        c.subscribe("t")
        assert bodies(drain(c)) == [0, 1, 2, 3, 100]


def test_consume_from_an_int_is_deprecated_epoch_milliseconds(store: mqlite.Store) -> None:
    """An int consume_from is a time while reset_offset(offset=) and seek take queue offsets: it
    keeps working, with a DeprecationWarning pointing at the caller."""
    fill(store, n=4)
    with pytest.warns(DeprecationWarning, match="consume_timestamp") as record:
        c = store.pull_consumer("g", consume_from=0)
    assert record[0].filename == __file__
    with c:
        c.subscribe("t")
        assert bodies(drain(c)) == [0, 1, 2, 3]
    with pytest.warns(DeprecationWarning) as record:
        store.push_consumer("p", consume_from=0).shutdown()
    assert record[0].filename == __file__


def test_a_consumer_behind_retention_warns_once_of_the_offsets_it_skips(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    size = 64 << 10
    with mqlite.open(tmp_path / "s", commit_log_file_size=size, consume_queue_file_units=100,
                     max_message_size=4096, retention_hours=1.0) as store:
        store.create_topic("t", 1)
        mq = MessageQueue("t", 0)
        with store.pull_consumer("slow", consume_from=FIRST) as c:
            c.subscribe("t")  # commits its starting point, 0
        p = store.producer()
        for _ in range(300):
            p.send(Message("t", b"y" * 2000))
        store.flush()
        end = store.stats()["commit_log_max_offset"]
        old = [f for f in (tmp_path / "s" / "commitlog").iterdir() if int(f.name) < end - end % size]
        stale = time.time() - 2 * 3600  # older than the retention time
        for f in old:
            os.utime(f, (stale, stale))
        assert store.delete_expired_files() == len(old) > 0
        low, high = store.offsets(mq)
        assert 0 < low < high == 300
        # The deleted messages are not lag: nobody can consume them any more.
        [progress] = store.consumer_progress("slow")
        assert (progress.committed, progress.min_offset, progress.lag) == (0, low, high - low)

        with caplog.at_level(logging.WARNING, logger="mqlite.consumer"):
            with store.pull_consumer("slow") as c:
                c.subscribe("t")
                got: list[mqlite.MessageExt] = []
                while len(got) < high - low:
                    batch = c.poll(10)
                    assert batch, "nothing after the jump"
                    got += batch
                assert c.poll(0) == []
        assert [m.queue_offset for m in got] == list(range(low, high))
        skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
        assert len(skipped) == 1, skipped
        assert "group slow" in skipped[0] and str(mq) in skipped[0]
        assert f"offsets 0 to {low - 1} ({low} messages)" in skipped[0]
        [progress] = store.consumer_progress("slow")
        assert (progress.committed, progress.lag) == (high, 0)


def test_poll_blocks_then_wakes_on_a_send(store: mqlite.Store) -> None:
    """An empty poll waits out its timeout; a poll waiting with a long timeout returns the
    message another thread sends meanwhile, long before that timeout (the causes, not the
    latency: that is ``test_poll_wakes_within_150_ms``, perf tier)."""
    store.create_topic("t", 2)
    with store.pull_consumer("g") as c:
        c.subscribe("t")
        start = time.monotonic()
        assert c.poll(0.2) == []
        assert time.monotonic() - start >= 0.19  # not before its timeout (a lower bound only)
        polling = threading.Event()

        def send_once_polling() -> None:
            assert polling.wait(30)
            store.producer().send(Message("t", b"x"))

        sender = threading.Thread(target=send_once_polling)
        sender.start()
        start = time.monotonic()
        polling.set()
        got = c.poll(60)
        waited = time.monotonic() - start
        sender.join(30)
    assert [m.body for m in got] == [b"x"]
    assert waited < 30  # woken by the send, not by the timeout


@pytest.mark.perf
def test_poll_wakes_within_150_ms(store: mqlite.Store) -> None:
    """The wake-up latency of a blocked poll: a timing window, so in the perf tier."""
    store.create_topic("t", 2)
    with store.pull_consumer("g") as c:
        c.subscribe("t")
        timer = threading.Timer(0.3, lambda: store.producer().send(Message("t", b"x")))
        timer.start()
        start = time.monotonic()
        got = c.poll(5)
        waited = time.monotonic() - start
        timer.join()
    assert [m.body for m in got] == [b"x"]
    assert 0.25 <= waited < 0.45


def test_tag_expression_and_sql_selector(store: mqlite.Store) -> None:
    fill(store)
    with store.pull_consumer("tags", consume_from=FIRST) as c:
        c.subscribe("t", "A || C")
        assert bodies(drain(c)) == list(range(1, 20, 2))
    with store.pull_consumer("sql", consume_from=FIRST) as c:
        c.subscribe("t", MessageSelector.by_sql("n >= 5 AND n < 9 OR n IN (15, 17)"))
        assert bodies(drain(c)) == [5, 6, 7, 8, 15, 17]
        # filtered messages still move the position: nothing is left behind
        assert all(c.position(mq) == 10 for mq in c.assignment())


class _Interrupt(BaseException):
    """Stands in for a KeyboardInterrupt arriving while a poll filters its batch."""


def test_an_exception_while_filtering_moves_no_cursor(
    store: mqlite.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poll that raises while filtering its batch delivers nothing and moves no cursor, not
    even that of a queue it had already filtered: the next poll returns every message."""
    fill(store, n=6)  # queue 0: 0 2 4, queue 1: 1 3 5
    accepts = MessageSelector._accepts
    raised: list[int] = []

    def accepts_interrupted_once(self: MessageSelector, message: mqlite.MessageExt) -> bool:
        if message.body == b"3" and not raised:
            raised.append(message.queue_offset)
            raise _Interrupt
        return accepts(self, message)

    monkeypatch.setattr(MessageSelector, "_accepts", accepts_interrupted_once)
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t", MessageSelector.by_sql("n >= 0"))
        with pytest.raises(_Interrupt):
            c.poll(1, 100)
        assert raised == [1]
        assert {mq.queue_id: c.position(mq) for mq in c.assignment()} == {0: 0, 1: 0}
        assert bodies(drain(c)) == list(range(6))
    assert {c.committed(MessageQueue("t", q)) for q in (0, 1)} == {3}


def test_manual_commit_and_committed(store: mqlite.Store) -> None:
    fill(store)
    mq = MessageQueue("t", 0)
    with store.pull_consumer("g", consume_from=FIRST, auto_commit=False) as c:
        c.subscribe("t")
        # the starting point is pinned at assignment so a later owner starts there too
        assert c.committed(mq) == 0
        msgs = [m for m in drain(c) if m.queue_id == 0]
        c.commit(message=msgs[2])
        assert c.committed(mq) == 3
        c.commit({mq: 1000})  # clamped: never ahead of the data
        assert c.committed(mq) == 10
        c.commit({mq: 4})
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t")
        assert c.position(mq) == 4


def test_seek_variants(store: mqlite.Store) -> None:
    fill(store)
    mq = MessageQueue("t", 1)
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.assign([mq])
        assert c.assignment() == [mq]
        c.seek(mq, 7)
        assert [m.queue_offset for m in c.poll(1)] == [7, 8, 9]
        c.seek_to_begin(mq)
        assert c.position(mq) == 0
        c.seek_to_end()
        assert c.position(mq) == 10
        ts = store.read(mq, 4, 1)[0].store_timestamp
        assert c.offset_for_timestamp(mq, ts) <= 4
        c.seek_to_timestamp(ts + 10_000)
        assert c.position(mq) == 10
        with pytest.raises(mqlite.OffsetOutOfRangeError):
            c.seek(mq, 11)
        with pytest.raises(mqlite.QueueNotAssignedError):
            c.seek(MessageQueue("t", 0), 0)
        with pytest.raises(mqlite.QueueNotAssignedError):
            c.commit({MessageQueue("t", 0): 1})


def test_pause_and_resume(store: mqlite.Store) -> None:
    fill(store)
    q0, q1 = MessageQueue("t", 0), MessageQueue("t", 1)
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t")
        c.pause([q0])
        assert c.paused() == [q0]
        assert {m.queue_id for m in drain(c)} == {1}
        c.resume([q0])
        assert {m.queue_id for m in drain(c)} == {0}
        assert c.position(q1) == 10


def test_iteration_and_early_break_redelivers(store: mqlite.Store) -> None:
    fill(store, queues=1)
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t")
        seen = []
        for m in c:
            seen.append(int(m.body))
            if len(seen) == 3:
                break
        assert seen == [0, 1, 2]
        assert c.position(MessageQueue("t", 0)) == 3
        rest = drain(c)
    assert bodies(rest) == list(range(3, 20))


def test_iteration_ends_on_close_from_another_thread(store: mqlite.Store) -> None:
    store.create_topic("t", 1)
    c = store.pull_consumer("g")
    c.subscribe("t")
    threading.Timer(0.2, c.close).start()
    start = time.monotonic()
    assert list(c) == []
    assert time.monotonic() - start < 2
    with pytest.raises(mqlite.ClientClosedError):
        c.poll(0)


def test_close_inside_the_loop_gives_the_rest_back(store: mqlite.Store) -> None:
    fill(store, queues=1)
    mq = MessageQueue("t", 0)
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t")
        seen = []
        for m in c:  # one poll fetches all 20; close() after the third message
            seen.append(int(m.body))
            if len(seen) == 3:
                c.close()
        assert seen == [0, 1, 2]  # nothing handed out after close()
        assert c.committed(mq) == 3  # committed up to the delivered messages, not the batch
    with store.pull_consumer("g") as c:
        c.subscribe("t")
        assert bodies(drain(c)) == list(range(3, 20))


def test_poll_while_the_loop_is_suspended_takes_the_rest_over(store: mqlite.Store) -> None:
    fill(store, queues=1)
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t")
        it = iter(c)
        first = [int(next(it).body), int(next(it).body)]
        rest = [int(m.body) for m in c.poll(0.5, max_messages=256)]  # the loop is mid-batch
        rest += [int(m.body) for m in drain(c)]
        assert first == [0, 1]
        assert rest == list(range(2, 20))  # once each: the suspended loop yields no more of them
        it.close()
        assert drain(c) == []


def test_commit_inside_the_loop_stops_at_what_was_handed_out(store: mqlite.Store) -> None:
    fill(store, queues=1)
    mq = MessageQueue("t", 0)
    with store.pull_consumer("g", consume_from=FIRST, auto_commit=False) as c:
        c.subscribe("t")
        for m in c:  # the first poll fetched all 20
            c.commit()
            assert c.committed(mq) == m.queue_offset + 1  # not the position past the batch
            if m.queue_offset == 4:
                break
        assert c.committed(mq) == 5


def test_unsubscribe_or_seek_inside_the_loop(store: mqlite.Store) -> None:
    fill(store, queues=1)
    mq = MessageQueue("t", 0)
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t")
        got = []
        for m in c:
            got.append(m.queue_offset)
            if m.queue_offset == 0:
                c.unsubscribe("t")  # revokes the queue: commits 1, hands out no more of it
            if len(got) > 5 or not c.assignment():
                break
        assert got == [0]
        assert c.committed(mq) == 1
    with store.pull_consumer("g2", consume_from=FIRST) as c:
        c.subscribe("t")
        for m in c:
            if m.queue_offset == 1:
                c.seek(mq, 15)
                break
        assert c.position(mq) == 15  # leaving the loop does not rewind over the seek
        assert [m.queue_offset for m in c.poll(0.5)] == [15, 16, 17, 18, 19]


def test_failed_pause_changes_nothing_and_closed_consumer_refuses(store: mqlite.Store) -> None:
    fill(store, queues=1)
    mq = MessageQueue("t", 0)
    c = store.pull_consumer("g", consume_from=FIRST)
    c.subscribe("t")
    with pytest.raises(mqlite.QueueNotAssignedError):
        c.pause([mq, MessageQueue("t", 5)])
    assert c.paused() == []
    assert len(drain(c)) == 20  # still fetched: the failed pause paused nothing
    c.close()
    for call in (lambda: c.position(mq), lambda: c.seek_to_begin(), lambda: c.resume([mq]),
                 lambda: c.pause([mq])):
        with pytest.raises(mqlite.ClientClosedError):
            call()


def test_consume_timestamp_is_checked_up_front(store: mqlite.Store) -> None:
    ts = ConsumeFromWhere.CONSUME_FROM_TIMESTAMP
    for bad in ("20240101000000", 1.5, True):
        with pytest.raises(mqlite.InvalidConfigError, match="consume_timestamp"):
            store.pull_consumer("g", consume_from=ts, consume_timestamp=bad)  # type: ignore[arg-type]
    store.pull_consumer("g", consume_from=ts, consume_timestamp=0).close()


def test_subscribe_and_assign_do_not_mix(store: mqlite.Store) -> None:
    fill(store)
    with store.pull_consumer("g") as c:
        c.subscribe("t")
        with pytest.raises(mqlite.IllegalStateError):
            c.assign([MessageQueue("t", 0)])
    with store.pull_consumer("g2") as c:
        c.assign([MessageQueue("t", 0)])
        with pytest.raises(mqlite.IllegalStateError):
            c.subscribe("t")


def test_group_names_have_one_limit_for_producers_and_consumers(store: mqlite.Store) -> None:
    # RocketMQ 5.x's 120 characters, whichever kind of group: the same name either works as
    # both a producer and a consumer group or fails as both, with the same error.
    longest = "g" * 120
    store.producer(longest).close()
    store.pull_consumer(longest).close()
    for bad in ("g" * 121, "bad group!", ""):
        with pytest.raises(mqlite.InvalidGroupError):
            store.producer(bad)
        with pytest.raises(mqlite.InvalidGroupError):
            store.pull_consumer(bad)


def test_bad_arguments(store: mqlite.Store) -> None:
    with pytest.raises(mqlite.InvalidGroupError):
        store.pull_consumer("bad group!")
    with pytest.raises(mqlite.InvalidConfigError):
        store.pull_consumer("g", max_poll_messages=0)
    with pytest.raises(mqlite.InvalidConfigError):
        store.pull_consumer("g", client_id="a/b")
    with store.pull_consumer("g") as c:
        with pytest.raises(mqlite.FilterExpressionError):
            c.subscribe("t", MessageSelector.by_sql("a >"))
        with pytest.raises(mqlite.IllegalArgumentError):
            c.poll(-1)
        with pytest.raises(mqlite.IllegalArgumentError):
            c.poll(0, max_messages=0)


def test_subscribe_unknown_topic_picks_it_up_later(store: mqlite.Store) -> None:
    with store.pull_consumer("g", rebalance_interval=0.05, consume_from=FIRST) as c:
        c.subscribe("later")
        assert c.assignment() == []
        store.create_topic("later", 2)
        store.producer().send(Message("later", b"hi"))
        deadline = time.monotonic() + 3
        got: list[mqlite.MessageExt] = []
        while not got and time.monotonic() < deadline:
            got = c.poll(0.1)
        assert [m.body for m in got] == [b"hi"]
        assert len(c.assignment()) == 2


def test_unsubscribe_gives_queues_back(store: mqlite.Store) -> None:
    fill(store)
    with store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t")
        c.unsubscribe("t")
        assert c.assignment() == [] and c.subscription() == {}


def test_memory_store_consumers(mem_store: mqlite.Store) -> None:
    fill(mem_store)
    with mem_store.pull_consumer("g", consume_from=FIRST) as c:
        c.subscribe("t")
        assert len(drain(c)) == 20
    assert [p.committed for p in mem_store.consumer_progress("g")] == [10, 10]


def test_read_only_process_consumes(store_path: Path, run_py: object) -> None:
    with mqlite.open(store_path) as s:
        fill(s, n=6)
        script = """
import sys, mqlite
with mqlite.open(sys.argv[1], read_only=True) as s:
    c = s.pull_consumer("ro", consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.subscribe("t")
    got = []
    while batch := c.poll(0.1):
        got += [int(m.body) for m in batch]
    c.close()
    print(sorted(got))
"""
        out = run_py(script, store_path)  # type: ignore[operator]
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == str(list(range(6)))
        assert [p.committed for p in s.consumer_progress("ro")] == [3, 3]
