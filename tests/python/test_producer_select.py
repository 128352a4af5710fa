"""Producer queue selection (sharding key, selector), async and one-way sends, flush."""

from __future__ import annotations

import threading
import zlib
from collections.abc import Sequence
from typing import Any

import pytest

import mqlite
from mqlite import Message, MessageQueue, SendResult


def test_sharding_key_keeps_a_key_on_one_queue(mem_store: mqlite.Store) -> None:
    mem_store.create_topic("t", 4)
    p = mem_store.producer()
    queues: dict[str, set[int]] = {}
    for i in range(40):
        key = f"order-{i % 5}"
        r = p.send(Message("t", str(i).encode(), keys=[key, "x"]), sharding_key=key)
        queues.setdefault(key, set()).add(r.message_queue.queue_id)
        assert r.message_queue.queue_id == zlib.crc32(key.encode()) % 4
    assert all(len(q) == 1 for q in queues.values())
    assert p.send(Message("t", b"b"), sharding_key=b"order-1").message_queue.queue_id == next(
        iter(queues["order-1"])
    )
    m = mem_store.read(MessageQueue("t", zlib.crc32(b"order-0") % 4), 0, 1)[0]
    assert m.properties["KEYS"] == "order-0 x"


# Key -> queue for topics of 3, 4, 7 and 16 write queues, as the producer has always mapped
# them (CRC32 of the key's UTF-8 bytes, or of the bytes given, modulo the queue count): a key
# must keep to its queue across versions, or ordered consumers would see its messages reordered.
PINNED_KEYS: list[tuple[str | bytes, tuple[int, int, int, int]]] = [
    ("order-1", (1, 3, 6, 15)),
    ("order-2", (0, 1, 6, 5)),
    ("user:42", (1, 2, 4, 6)),
    ("", (0, 0, 0, 0)),
    ("ключ", (0, 2, 1, 10)),
    ("a" * 300, (1, 1, 2, 9)),
    (b"\x00\xffbytes", (1, 1, 0, 1)),
]


@pytest.mark.parametrize("how", ["send", "send_async", "send_oneway"])
def test_sharding_keys_keep_their_queues(mem_store: mqlite.Store, how: str) -> None:
    counts = (3, 4, 7, 16)
    for n in counts:
        mem_store.create_topic(f"t{n}", n)
    p = mem_store.producer()
    for key, want in PINNED_KEYS:
        for n, queue in zip(counts, want):
            before = [mem_store.offsets(MessageQueue(f"t{n}", q))[1] for q in range(n)]
            getattr(p, how)(Message(f"t{n}", b"x"), sharding_key=key)
            p.flush()
            after = [mem_store.offsets(MessageQueue(f"t{n}", q))[1] for q in range(n)]
            grew = [q for q in range(n) if after[q] != before[q]]
            assert grew == [queue], (key, n)


def test_sharding_keys_are_hashed_by_the_native_producer(
    mem_store: mqlite.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sharded send goes to the store as one routed put (the queue count is read under the
    same lookup as the append): no Python queue selection runs for it. Selectors still do."""

    def refuse(*args: Any, **kwargs: Any) -> int:
        raise AssertionError("a sharding key was hashed in Python")

    monkeypatch.setattr(mqlite.Producer, "_select", refuse)
    mem_store.create_topic("t", 4)
    p = mem_store.producer()
    assert p.send(Message("t", b"x"), sharding_key="order-1").message_queue.queue_id == 3
    assert p.send_async(Message("t", b"x"), sharding_key=b"order-2").result(5).message_queue.queue_id == 1
    p.send_oneway(Message("t", b"x"), sharding_key="user:42")
    assert p.flush(5) == 0
    assert mem_store.offsets(MessageQueue("t", 2)) == (0, 1)
    # Any bytes-like key hashes as its bytes; other types are refused, as before.
    for key in (b"order-1", bytearray(b"order-1"), memoryview(b"order-1")):
        assert p.send(Message("t", b"x"), sharding_key=key).message_queue.queue_id == 3
    with pytest.raises(mqlite.IllegalArgumentError, match="sharding_key must be str or bytes, not int"):
        p.send(Message("t", b"x"), sharding_key=5)  # type: ignore[arg-type]
    with pytest.raises(UnicodeEncodeError):
        p.send(Message("t", b"x"), sharding_key="\ud800")
    with pytest.raises(AssertionError, match="hashed in Python"):
        p.send(Message("t", b"x"), selector=lambda mqs, m, a: mqs[0])


def test_default_is_round_robin(mem_store: mqlite.Store) -> None:
    mem_store.create_topic("t", 3)
    p = mem_store.producer()
    ids = [p.send(Message("t", b"x")).message_queue.queue_id for _ in range(6)]
    assert sorted(ids) == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("how", ["send", "send_async", "send_oneway", "send_batch"])
def test_round_robin_turns_are_per_topic(mem_store: mqlite.Store, how: str) -> None:
    # Sends alternating with another topic's must not decide which queue of this topic is next
    # (RocketMQ keeps one turn per producer and topic).
    mem_store.create_topic("two", 2)
    mem_store.create_topic("one", 1)
    p = mem_store.producer()
    for _ in range(6):
        for topic in ("two", "one"):
            if how == "send_batch":
                p.send_batch([b"x"], topic=topic)
            else:
                getattr(p, how)(Message(topic, b"x"))
    p.flush()
    mq = mem_store.queues("two")
    assert [mem_store.offsets(q)[1] for q in mq] == [3, 3]


def test_selector(mem_store: mqlite.Store) -> None:
    mem_store.create_topic("t", 4)
    p = mem_store.producer()
    calls: list[tuple[int, Any]] = []

    def pick(mqs: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        calls.append((len(mqs), arg))
        return mqs[int(arg) % len(mqs)]

    assert p.send(Message("t", b"x"), selector=pick, arg=7).message_queue == MessageQueue("t", 3)
    assert calls == [(4, 7)]
    with pytest.raises(mqlite.IllegalArgumentError, match="selector"):
        p.send(Message("t", b"x"), selector=lambda mqs, m, a: MessageQueue("t", 9))
    with pytest.raises(mqlite.IllegalArgumentError, match="at most one"):
        p.send(Message("t", b"x"), queue_id=1, sharding_key="k")
    with pytest.raises(mqlite.IllegalArgumentError):
        p.send(Message("t", b"x"), sharding_key=5)  # type: ignore[arg-type]
    # a sharded send auto-creates the topic as a plain send does, unless that is off
    assert p.send(Message("auto", b"x"), sharding_key="k").message_queue.topic == "auto"
    assert len(mem_store.queues("auto")) == 4
    with mqlite.open(":memory:", auto_create_topics=False) as strict:
        with pytest.raises(mqlite.TopicNotFoundError):
            strict.producer().send(Message("nope", b"x"), sharding_key="k")


def test_send_async_future_and_callback(mem_store: mqlite.Store) -> None:
    mem_store.create_topic("t", 2)
    p = mem_store.producer()
    results: list[tuple[SendResult | None, BaseException | None]] = []
    done = threading.Event()

    def callback(result: SendResult | None, exc: BaseException | None) -> None:
        results.append((result, exc))
        if len(results) == 2:
            done.set()

    f1 = p.send_async(Message("t", b"a"), callback, sharding_key="k")
    f2 = p.send_async(Message("", b"bad"), callback)
    assert f1.result(5).send_status is mqlite.SendStatus.SEND_OK
    with pytest.raises(mqlite.InvalidTopicError):
        f2.result(5)
    assert done.wait(5)
    assert results[0][0] is not None and results[0][1] is None
    assert results[1][0] is None and isinstance(results[1][1], mqlite.InvalidTopicError)


def test_oneway_and_flush(mem_store: mqlite.Store) -> None:
    mem_store.create_topic("t", 1)
    p = mem_store.producer()
    assert p.flush() == 0
    for i in range(500):
        p.send_oneway(Message("t", str(i).encode()))
    assert p.flush(10) == 0
    assert mem_store.offsets(MessageQueue("t", 0)) == (0, 500)
    bodies = [m.body for m in mem_store.read(MessageQueue("t", 0), 0, 500)]
    assert bodies == [str(i).encode() for i in range(500)]  # one worker: call order kept
    with p:
        futures = [p.send_async(Message("t", b"x")) for _ in range(50)]
    assert all(f.done() for f in futures)  # close() flushed
    with pytest.raises(mqlite.StoreClosedError):
        p.send_async(Message("t", b"x"))


def test_send_async_in_a_sync_store_is_acknowledged_after_the_disk(tmp_path) -> None:
    """Pipelined sends of a flush="sync" store: every future resolves SEND_OK only once the
    store's flushed offset covers the record; many threads share flushes; nothing is lost across
    a close and reopen; a bad message fails its own future only."""
    path = tmp_path / "s"
    per_thread, threads = 400, 4
    acked: list[tuple[int, int, int]] = []  # (commit-log end, flushed offset seen, thread)
    lock = threading.Lock()
    with mqlite.open(path, flush="sync") as store:
        store.create_topic("t", 4)
        producer = store.producer()

        def work(t: int) -> None:
            futures = [producer.send_async(Message("t", b"%d-%d" % (t, i))) for i in range(per_thread)]
            for f in futures:
                r = f.result(30)
                assert r.send_status is mqlite.SendStatus.SEND_OK
                flushed = store._live().stats()["flushed_offset"]
                with lock:
                    acked.append((r._end(), flushed, t))

        ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        bad = producer.send_async(Message("t", b""))  # empty body: refused
        with pytest.raises(mqlite.InvalidMessageError):
            bad.result(5)
        assert len(acked) == per_thread * threads
        assert all(end <= flushed for end, flushed, _ in acked), "acknowledged before the disk"
        last = producer.send_async(Message("t", b"last"))
    assert last.done() and last.result().send_status is mqlite.SendStatus.SEND_OK
    with mqlite.open(path) as again:
        total = sum(again.offsets(MessageQueue("t", q))[1] for q in range(4))
        assert total == per_thread * threads + 1


def test_send_pipelined_is_deprecated_and_acknowledges_only_after_the_disk(tmp_path) -> None:
    """The pipelined append is private to send_async/send_oneway; the old public name still
    sends, with a DeprecationWarning, and its SEND_OK means what send's does: durable."""
    assert not hasattr(mqlite._core.Producer, "send_pipelined")
    with mqlite.open(tmp_path / "s", flush="sync") as store:
        store.create_topic("t", 2)
        p = store.producer()
        for q in (None, 1):
            with pytest.warns(DeprecationWarning, match="send_async"):
                r = p.send_pipelined(Message("t", b"x"), q)
            assert r.send_status is mqlite.SendStatus.SEND_OK
            assert store.stats()["flushed_offset"] >= r._end(), "acknowledged before the disk"
        assert r.message_queue == MessageQueue("t", 1)


def test_send_futures_are_concurrent_futures_that_cannot_be_cancelled(mem_store: mqlite.Store) -> None:
    """Send futures share one condition per store and are resolved in bulk: they still behave
    as concurrent.futures.Future for wait(), as_completed(), callbacks and cancel()."""
    import concurrent.futures as cf

    mem_store.create_topic("t", 2)
    producers = [mem_store.producer(), mem_store.producer()]
    futures = [producers[i % 2].send_async(Message("t", b"%d" % i)) for i in range(200)]
    assert all(isinstance(f, cf.Future) for f in futures)
    assert not any(f.cancel() for f in futures)  # appended already: not cancellable
    done, not_done = cf.wait(futures, timeout=10)
    assert len(done) == 200 and not not_done
    assert sum(1 for _ in cf.as_completed(futures, timeout=10)) == 200
    assert all(not f.cancelled() and f.exception() is None for f in futures)
    seen: list[Any] = []
    futures[0].add_done_callback(seen.append)  # already done: called at once
    assert seen == [futures[0]]
    late: list[Any] = []
    bad = producers[0].send_async(Message("", b"x"))
    bad.add_done_callback(late.append)
    assert isinstance(bad.exception(5), mqlite.InvalidTopicError)
    assert producers[0].flush(5) == 0 and late == [bad]


def test_send_future_waits_for_its_own_completion_only() -> None:
    """A wake-up for another future of the same condition does not end result()'s wait, and a
    timeout raises concurrent.futures.TimeoutError."""
    import concurrent.futures as cf

    from mqlite._completion import CompletionCondition, SendFuture

    cond = CompletionCondition(threading.RLock())
    mine, other = SendFuture(cond), SendFuture(cond)
    assert mine.running() and not mine.done()
    with pytest.raises(cf.TimeoutError):
        mine.result(timeout=0.05)
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(mine.result(timeout=5)))
    t.start()
    with cond:
        other._finish(None, ValueError("other"))
        cond.notify_all()
    t.join(0.2)
    assert t.is_alive() and not got  # still waiting: the wake-up was for `other`
    sentinel: Any = object()
    with cond:
        mine._finish(sentinel, None)
        cond.notify_all()
    t.join(5)
    assert got == [sentinel]
    with pytest.raises(ValueError):
        other.result(0)


def test_send_future_keeps_the_base_class_contract() -> None:
    """SendFuture skips Future.__init__ (see its docstring): it must set exactly the attributes
    the running Python's Future.__init__ sets, and its completion must leave the same state as
    set_result/set_exception, so wait(), as_completed() and add_done_callback keep working."""
    import concurrent.futures as cf

    from mqlite._completion import CompletionCondition, SendFuture

    cond = CompletionCondition(threading.RLock())
    plain, mine = cf.Future(), SendFuture(cond)  # type: ignore[var-annotated]
    assert set(vars(mine)) == set(vars(plain))
    plain.set_running_or_notify_cancel()
    assert mine._state == plain._state and not mine.cancel()
    seen: list[Any] = []
    mine.add_done_callback(seen.append)
    sentinel: Any = object()
    waiter = threading.Thread(target=lambda: seen.append(cf.wait([mine], timeout=5)))
    waiter.start()
    with cond:
        mine._finish(sentinel, None)
        cond.notify_all()
    mine._run_done_callbacks()
    waiter.join(5)
    plain.set_result(sentinel)
    assert mine._state == plain._state and mine.done() and mine.result() is sentinel
    assert seen[0] is mine and seen[1].done == {mine}
    assert list(cf.as_completed([mine], timeout=5)) == [mine]


def test_send_async_racing_a_close_fails_instead_of_hanging(tmp_path) -> None:
    """A send appended just before the store's completion thread stopped (a close racing it)
    gets a StoreClosedError at once; nothing waits for a thread that is gone."""
    store = mqlite.open(tmp_path / "s")
    store.create_topic("t", 1)
    producer = store.producer()
    assert producer.send_async(Message("t", b"a")).result(5).send_status is mqlite.SendStatus.SEND_OK
    completer = store._client_context.completer()
    completer.stop()  # what close() does after flushing the producers
    from mqlite._completion import SendFuture

    late = SendFuture(completer.cond)
    called: list[Any] = []
    completer.put((late, lambda r, e: called.append(e), None, None, producer._tally))
    with pytest.raises(mqlite.StoreClosedError):
        late.result(timeout=1)
    assert len(called) == 1 and isinstance(called[0], mqlite.StoreClosedError)
    assert producer.flush(1) == 0
    store.close()


def test_completion_thread_ends_with_its_store(tmp_path) -> None:
    """One completion thread per store, started by the first async send; it ends on close()
    and also when the store is dropped without one."""
    import gc
    import time

    def senders() -> int:
        return sum(t.name == "mqlite-async-send" and t.is_alive() for t in threading.enumerate())

    before = senders()
    with mqlite.open(tmp_path / "a") as store:
        store.create_topic("t", 1)
        p1, p2 = store.producer(), store.producer()
        p1.send_async(Message("t", b"1")).result(5)
        p2.send_async(Message("t", b"2")).result(5)
        assert senders() == before + 1  # shared by the store's producers
    assert senders() == before
    dropped = mqlite.open(tmp_path / "b")
    dropped.create_topic("t", 1)
    dropped.producer().send_async(Message("t", b"x")).result(5)
    assert senders() == before + 1
    del dropped
    gc.collect()
    deadline = time.monotonic() + 5
    while senders() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert senders() == before


def test_send_callback_may_flush_close_and_close_the_store(tmp_path) -> None:
    """Callbacks run on the completion thread, the only thread that completes sends: flush()
    and close() called there return instead of waiting for themselves, and closing the store
    from a callback works too."""
    store = mqlite.open(tmp_path / "s")
    store.create_topic("t", 1)
    producer = store.producer()
    seen: list[Any] = []
    done = threading.Event()

    def first(result: SendResult | None, exc: BaseException | None) -> None:
        seen.append(producer.flush())  # this send itself is still pending: 1
        producer.close()
        seen.append(producer.closed)

    producer.send_async(Message("t", b"1"), first).result(5)
    assert producer.flush(5) == 0
    assert seen == [1, True]

    other = store.producer()

    def last(result: SendResult | None, exc: BaseException | None) -> None:
        store.close()
        done.set()

    other.send_async(Message("t", b"2"), last)
    assert done.wait(5), "store.close() inside a send callback did not return"
    assert store.closed
    with mqlite.open(tmp_path / "s") as again:
        assert again.offsets(MessageQueue("t", 0)) == (0, 2)


def test_close_stops_accepting_sends_before_it_drains_them(tmp_path) -> None:
    """close() first refuses new sends (StoreClosedError), then completes the ones it accepted.

    A send callback that sends again keeps one async send pending at every moment: a close that
    waited for "no send pending" while still accepting sends would never return."""
    store = mqlite.open(tmp_path / "s", flush="sync")
    store.create_topic("t", 1)
    producer = store.producer()
    futures: list[Any] = []
    refused = threading.Event()
    give_up = threading.Event()  # ends the chain if close() never refuses it

    def chain(result: SendResult | None, exc: BaseException | None) -> None:
        if give_up.is_set():
            return
        try:
            futures.append(producer.send_async(Message("t", b"x"), chain))
        except mqlite.StoreClosedError:
            refused.set()

    futures.append(producer.send_async(Message("t", b"x"), chain))
    closed = threading.Event()
    closer = threading.Thread(target=lambda: (store.close(), closed.set()), daemon=True)
    closer.start()
    try:
        assert closed.wait(30), "close() kept waiting for sends it was still accepting"
    finally:
        give_up.set()
        closer.join(30)
    assert refused.is_set()
    with pytest.raises(mqlite.StoreClosedError):
        producer.send_async(Message("t", b"x"))
    # Every send accepted before the close was confirmed durable; none was lost.
    assert all(f.result(0).send_status is mqlite.SendStatus.SEND_OK for f in futures)
    with mqlite.open(tmp_path / "s") as again:
        assert again.offsets(MessageQueue("t", 0)) == (0, len(futures))
