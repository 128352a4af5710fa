"""Bad input (reliability plan B.f): each call raises its typed error and writes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import mqlite
from helpers import snapshot
from mqlite import Message, MessageQueue
from mqlite import errors as E

T = "orders"


class Guard:
    """Sends one good message, then checks that nothing was appended since."""

    def __init__(self, store: mqlite.Store) -> None:
        self.store = store
        self.producer = store.producer()
        self.last = self.producer.send(Message(T, b"good"), queue_id=0)
        self.before = snapshot(store)

    def check_unchanged(self) -> None:
        assert snapshot(self.store) == self.before
        size = self.store.get_by_offset(self.last.commit_log_offset).store_size
        nxt = self.producer.send(Message(T, b"good"), queue_id=0)
        assert nxt.commit_log_offset == self.last.commit_log_offset + size, "bytes were appended"
        assert nxt.queue_offset == self.last.queue_offset + 1
        self.rebase(nxt)

    def rebase(self, last: mqlite.SendResult | None = None) -> None:
        """Accept the changes made so far (a topic created, a good message sent)."""
        if last is not None:
            self.last = last
        self.before = snapshot(self.store)


@pytest.fixture
def guard(tmp_path: Path) -> Iterator[Guard]:
    with mqlite.open(tmp_path / "store") as store:
        store.create_topic(T, 4)
        g = Guard(store)
        before = sorted(p.name for p in tmp_path.iterdir())
        yield g
        g.check_unchanged()
        assert sorted(p.name for p in tmp_path.iterdir()) == before, "files created outside the store"


def expect(exc_type: type[BaseException], fn: Callable[[], Any]) -> BaseException:
    with pytest.raises(exc_type) as info:
        fn()
    if isinstance(info.value, E.MQError):
        assert isinstance(info.value.code, str) and info.value.code
        assert str(info.value)
    return info.value


BAD_MESSAGES: list[tuple[str, Message, type[BaseException]]] = [
    ("empty body", Message(T, b""), E.InvalidMessageError),
    ("properties over 32767 bytes", Message(T, b"x", properties={"big": "v" * 40_000}),
     E.PropertiesTooLargeError),
    ("\\x01 in property name", Message(T, b"x", properties={"a\x01b": "v"}), E.InvalidMessageError),
    ("\\x02 in property name", Message(T, b"x", properties={"a\x02b": "v"}), E.InvalidMessageError),
    ("\\x01 in property value", Message(T, b"x", properties={"a": "v\x01"}), E.InvalidMessageError),
    ("\\x02 in property value", Message(T, b"x", properties={"a": "v\x02w"}), E.InvalidMessageError),
    ("empty property name", Message(T, b"x", properties={"": "v"}), E.InvalidMessageError),
    ("reserved KEYS", Message(T, b"x", properties={"KEYS": "k"}), E.InvalidMessageError),
    ("reserved UNIQ_KEY", Message(T, b"x", properties={"UNIQ_KEY": "u"}), E.InvalidMessageError),
    ("reserved TAGS", Message(T, b"x", properties={"TAGS": "t"}), E.InvalidMessageError),
    ("body is str", Message(T, "text"), TypeError),  # type: ignore[arg-type]
    ("body is None", Message(T, None), TypeError),  # type: ignore[arg-type]
    ("topic is bytes", Message(b"orders", b"x"), TypeError),  # type: ignore[arg-type]
    ("topic is int", Message(7, b"x"), TypeError),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("case", "msg", "exc"), BAD_MESSAGES, ids=[c[0] for c in BAD_MESSAGES])
def test_bad_message(guard: Guard, case: str, msg: Message, exc: type[BaseException]) -> None:
    expect(exc, lambda: guard.producer.send(msg))
    guard.check_unchanged()
    expect(exc, lambda: guard.producer.send_batch([Message(T, b"fine"), msg]))
    guard.check_unchanged()


# RocketMQ's character set is [A-Za-z0-9_%|-]: "%" and "|" are legal, "." and "/" never are.
BAD_TOPICS = ["", " ", ".", "..", "../x", "a/b", "a\\b", "a\x00b", "x" * 128, "tøpic", "a b",
              "SCHEDULE_TOPIC_XXXX", "%RETRY%group", "%DLQ%group"]


def test_percent_and_pipe_are_legal_topic_characters(guard: Guard) -> None:
    for name in ("a%b", "a|b"):
        r = guard.producer.send(Message(name, b"x"))
        assert guard.store.read(r.message_queue, 0)[0].topic == name
    guard.rebase(guard.producer.send(Message(T, b"good"), queue_id=0))


@pytest.mark.parametrize("topic", BAD_TOPICS, ids=repr)
def test_bad_topic(guard: Guard, topic: str) -> None:
    expect(E.InvalidTopicError, lambda: guard.producer.send(Message(topic, b"x")))
    expect(E.InvalidTopicError, lambda: guard.producer.send_batch([b"x"], topic=topic))
    expect(E.InvalidTopicError, lambda: guard.store.create_topic(topic, 1))
    guard.check_unchanged()


def test_longest_topic_name_is_accepted(guard: Guard) -> None:
    name = "t" * 127
    guard.store.create_topic(name, 1)
    r = guard.producer.send(Message(name, b"x"))
    assert guard.store.read(r.message_queue, 0)[0].topic == name
    guard.rebase(r)


@pytest.mark.parametrize("queue_id", [4, 99, -1])
def test_queue_id_out_of_range(guard: Guard, queue_id: int) -> None:
    expect(E.InvalidQueueError, lambda: guard.producer.send(Message(T, b"x"), queue_id=queue_id))
    expect(E.InvalidQueueError, lambda: guard.producer.send_batch([b"x"], topic=T, queue_id=queue_id))
    guard.check_unchanged()


@pytest.mark.parametrize("not_a_message", [b"raw", "text", None, {"topic": T, "body": b"x"}], ids=repr)
def test_send_of_something_that_is_not_a_message(guard: Guard, not_a_message: Any) -> None:
    with pytest.raises(TypeError, match="expected a mqlite.Message"):
        guard.producer.send(not_a_message)
    with pytest.raises(TypeError, match="expected a mqlite.Message"):
        guard.producer.send_async(not_a_message).result(5)
    guard.producer.send_oneway(not_a_message)  # logged, never raised


def test_queue_id_wrong_type(guard: Guard) -> None:
    expect(TypeError, lambda: guard.producer.send(Message(T, b"x"), queue_id="1"))  # type: ignore[arg-type]
    guard.check_unchanged()


@pytest.mark.parametrize("flag", [True, False])
def test_a_bool_is_not_an_int(guard: Guard, flag: bool) -> None:
    """bool is a subclass of int: True must not pass as queue 1, offset 1 or one queue."""
    p, store, mq = guard.producer, guard.store, MessageQueue(T, 0)
    calls: list[Callable[[], Any]] = [
        lambda: p.send(Message(T, b"x"), queue_id=flag),
        lambda: p.send(Message(T, b"x"), flag),
        lambda: p.send(Message(T, b"x"), queue_id=flag, selector=lambda qs, m, a: qs[0]),
        lambda: p.send_async(Message(T, b"x"), queue_id=flag).result(5),
        lambda: p.send_batch([b"x"], topic=T, queue_id=flag),
        lambda: p.send(Message(T, b"x", flag=flag)),
        lambda: MessageQueue(T, flag),
        lambda: store.read(mq, flag),
        lambda: store.read(mq, 0, flag),
        lambda: store.get_by_offset(flag),
        lambda: store.wait_for({mq: flag}, 0),
        lambda: store.create_topic("other", flag),
        lambda: store.update_topic(T, queues=flag),
        lambda: store.offset_for_timestamp(mq, flag),
    ]
    for call in calls:
        with pytest.raises(TypeError, match="bool"):
            call()
    guard.check_unchanged()


def test_message_too_large(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "small", max_message_size=1024) as store:
        store.create_topic(T, 4)
        g = Guard(store)
        expect(E.MessageTooLargeError, lambda: g.producer.send(Message(T, b"x" * 2048)))
        g.check_unchanged()
        expect(E.MessageTooLargeError, lambda: g.producer.send_batch([b"ok", b"x" * 2048], topic=T))
        g.check_unchanged()
        assert g.producer.send(Message(T, b"x" * 100)).send_status is mqlite.SendStatus.SEND_OK


def test_bad_batches(guard: Guard) -> None:
    expect(E.InvalidBatchError, lambda: guard.producer.send_batch([]))
    expect(E.InvalidBatchError, lambda: guard.producer.send_batch([Message(T, b"a"), Message("other", b"b")]))
    expect(E.InvalidBatchError, lambda: guard.producer.send_batch([b"no topic given"]))
    guard.check_unchanged()
    assert "other" not in [t.name for t in guard.store.topics()]


def test_rejected_batch_does_not_create_its_topic(guard: Guard) -> None:
    # Round robin needs the topic's queue count: the messages are checked before the topic is
    # looked up (and auto-created), so a rejected batch leaves no topic behind.
    expect(E.InvalidMessageError, lambda: guard.producer.send_batch([b"ok", b""], topic="fresh"))
    guard.check_unchanged()
    assert "fresh" not in [t.name for t in guard.store.topics()]


def test_topic_without_write_permission(guard: Guard) -> None:
    guard.store.create_topic("readonly-topic", 2, perm=4)
    guard.rebase()
    expect(E.TopicNotWritableError, lambda: guard.producer.send(Message("readonly-topic", b"x")))
    expect(E.TopicNotWritableError, lambda: guard.producer.send_batch([b"x"], topic="readonly-topic"))
    guard.check_unchanged()


def test_unknown_topic_without_auto_create(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "store", auto_create_topics=False) as store:
        store.create_topic(T, 4)
        g = Guard(store)
        expect(E.TopicNotFoundError, lambda: g.producer.send(Message("unknown", b"x")))
        expect(E.TopicNotFoundError, lambda: g.producer.send_batch([b"x"], topic="unknown"))
        expect(E.TopicNotFoundError, lambda: store.queues("unknown"))
        g.check_unchanged()
        assert [t.name for t in store.topics()] == [T]


def test_calls_after_close(store_path: Path) -> None:
    store = mqlite.open(store_path)
    producer = store.producer()
    r = producer.send(Message(T, b"x"))
    store.close()
    store.close()  # idempotent
    assert store.closed and producer.closed
    mq = r.message_queue
    calls: list[Callable[[], Any]] = [
        lambda: producer.send(Message(T, b"x")),
        lambda: producer.send_batch([b"x"], topic=T),
        store.producer, store.topics, store.flush, store.stats,
        lambda: store.create_topic("new", 1),
        lambda: store.queues(T),
        lambda: store.offsets(mq),
        lambda: store.read(mq, 0),
        lambda: store.read_result(mq, 0),
        lambda: store.get(r.offset_msg_id),
        lambda: store.get_by_offset(r.commit_log_offset),
        lambda: store.offset_for_timestamp(mq, 0),
        lambda: store.wait_for({mq: 0}, timeout=0),
    ]
    for call in calls:
        expect(E.StoreClosedError, call)
    assert Path(store.path).resolve() == store_path.resolve()
    with mqlite.open(store_path) as again:
        assert again.offsets(mq) == (0, 1)


def test_closed_producer_leaves_store_usable(store: mqlite.Store) -> None:
    with store.producer() as producer:
        producer.send(Message(T, b"x"), queue_id=0)
    assert producer.closed and not store.closed
    expect(E.StoreClosedError, lambda: producer.send(Message(T, b"y")))
    assert store.producer().send(Message(T, b"z"), queue_id=0).queue_offset == 1
    assert store.offsets(MessageQueue(T, 0)) == (0, 2)


def test_a_closed_producer_says_what_closed(tmp_path: Path) -> None:
    """A send on a closed producer raises StoreClosedError naming the producer when it was
    closed, and the store once the store is: for every send method, and the same for the
    package's producer and the native one used directly."""
    store = mqlite.open(tmp_path / "s")
    store.create_topic(T, 1)
    producer, fresh = store.producer("G"), store.producer("F")
    bare = mqlite._core.Producer(store._client_context.core, "B")

    def sends(p: Any) -> list[Callable[[], Any]]:
        return [
            lambda: p.send(Message(T, b"x")),
            lambda: p.send_async(Message(T, b"x")),
            lambda: p.send_oneway(Message(T, b"x")),
            lambda: p.send_batch([b"x"], topic=T),
        ]

    producer.close()
    bare._mark_closed()
    for send in sends(producer):
        assert str(expect(E.StoreClosedError, send)) == "producer 'G' is closed"
    for send in (lambda: bare.send(Message(T, b"x")), lambda: bare.send_batch([b"x"], T)):
        assert str(expect(E.StoreClosedError, send)) == "producer 'B' is closed"
    assert fresh.send(Message(T, b"y")).queue_offset == 0  # the store is fine
    bare = mqlite._core.Producer(store._client_context.core, "B2")
    store.close()
    closed = f"store {store.path!r} is closed"
    for send in [*sends(producer), *sends(fresh), lambda: bare.send(Message(T, b"x"))]:
        assert str(expect(E.StoreClosedError, send)) == closed


FORK_PROBE = """
import json, os, sys, mqlite, mqlite._context
store = mqlite.open(sys.argv[1])
forked = (f"store {store.path!r} was opened in process {os.getpid()}; "
          "open it again in the child (use the 'spawn' start method)")
producer = store.producer()
r = producer.send(mqlite.Message("t", b"x"))
mqlite._context._after_fork_in_child()  # what os.register_at_fork runs in a child
out = []
messages = []
for call in (lambda: producer.send(mqlite.Message("t", b"y")), store.topics, store.producer,
             lambda: store.read(r.message_queue, 0), store.flush):
    try:
        call()
        out.append(None)
    except mqlite.StoreUsedAfterForkError as exc:
        out.append(exc.code)
        messages.append(str(exc))
store.close()
print(json.dumps({"errors": out, "closed": store.closed, "producer": messages[0] == forked}))
"""


def test_use_after_fork_is_refused(store_path: Path, run_py: Callable[..., Any]) -> None:
    done = run_py(FORK_PROBE, store_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["closed"] is True
    assert len(result["errors"]) == 5 and all(result["errors"])
    assert result["producer"] is True, "a producer's send names the store and its process"


def test_store_calls_with_out_of_range_numbers(guard: Guard) -> None:
    s = guard.store
    with pytest.raises(TypeError):
        s.create_topic("n1", True)  # type: ignore[arg-type]
    with pytest.raises(E.IllegalArgumentError, match="perm"):
        s.create_topic("n2", 2, perm=-1)
    with pytest.raises(E.IllegalArgumentError, match="offset"):
        s.read(MessageQueue(T, 0), 2**64)
    for timeout in (-1, float("nan"), float("inf")):
        with pytest.raises(E.IllegalArgumentError, match="timeout"):
            s.wait_for({MessageQueue(T, 0): 5}, timeout)
    assert "n1" not in {t.name for t in s.topics()} and "n2" not in {t.name for t in s.topics()}


def test_topic_without_read_permission(guard: Guard) -> None:
    """RocketMQ offers consumers no queue of a topic that forbids reads, and refuses a pull."""
    s = guard.store
    s.create_topic("write-only", 2, perm=2)
    sent = guard.producer.send(Message("write-only", b"x"), queue_id=0)  # sends are allowed
    expect(E.TopicNotReadableError, lambda: s.read(MessageQueue("write-only", 0), 0))
    with s.pull_consumer("g") as c:
        c.subscribe("write-only")
        assert c.poll(0.2) == [] and c.assignment() == []
    with s.pull_consumer("g2") as c:
        c.assign([MessageQueue("write-only", 0)])
        expect(E.TopicNotReadableError, lambda: c.poll(0.2))
    guard.rebase(sent)  # the one good send and the consumers' files; nothing else
