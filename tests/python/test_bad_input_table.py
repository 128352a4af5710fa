"""Bad input, table form (reliability plan B.f).

Every row: the call raises the listed exception, the message names the offending field, not a
byte of any store file changes (relative path, size and SHA-256 of every file under the store
root, compared before and after), nothing is created next to the store, and the store stays
usable (a good send and a read afterwards). The rows cover sends, reads, admin calls and
consumers; for each int argument an int beyond 64 bits gets the same typed error as one just
out of range, and a str with a lone surrogate is a typed error naming its field. Rows of the
plan that the current API has no surface for (delay levels, format versions) are listed in
docs/reliability.md.

Also a Hypothesis fuzz of topic names (2,000 examples in CI) through sends, and one (500) through
``subscribe`` and ``reset_offset``, checking that no path is ever created outside the store root,
and that every accepted name is a plain directory name.
"""

from __future__ import annotations

import hashlib
import os
import errno
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mqlite
from mqlite import Message, MessageQueue, MessageSelector
from mqlite import errors as E

T = "orders"
SMALL = {
    "commit_log_file_size": 64 << 10,
    "consume_queue_file_units": 64,
    "max_message_size": 4096,
    # no background checkpoint write during a row: every byte on disk stays put
    "flush_interval_ms": 60_000,
}


def tree(root: Path) -> dict[str, tuple[int, str]]:
    """Relative path -> (size, sha256) of every file under ``root``; directories as (-1, "")."""
    out: dict[str, tuple[int, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root) + "/"] = (-1, "")
        for f in filenames:
            p = os.path.join(dirpath, f)
            if p.endswith(os.path.join(os.sep + "run", "writer.shm")):
                # The writers' runtime state (FORMAT.md §14: rebuilt from the log, never a
                # source of truth); a refused append may leave its scratch words (the intent
                # of an append) changed, never a record or a queue offset.
                continue
            with open(p, "rb") as fh:
                data = fh.read()
            out[os.path.relpath(p, root)] = (len(data), hashlib.sha256(data).hexdigest())
    return out


@dataclass
class Env:
    store: mqlite.Store
    producer: mqlite.Producer
    root: Path
    sandbox: Path

    def before(self) -> tuple[dict[str, tuple[int, str]], dict[str, tuple[int, str]], dict[str, Any]]:
        stats = self.store.stats()
        keep = {k: stats[k] for k in ("commit_log_max_offset", "dispatched_offset")}
        return tree(self.root), tree(self.sandbox), keep


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    root = sandbox / "store"
    store = mqlite.open(root, **SMALL)
    store.create_topic(T, 4)
    producer = store.producer()
    producer.send(Message(T, b"seed"), queue_id=0)
    store.flush()  # checkpoint written now; the 60 s flush interval keeps it still during a row
    try:
        yield Env(store, producer, root, sandbox)
    finally:
        store.close()


# (row id, call, expected exception, words of which one must appear in the message)
Row = tuple[str, Callable[[Env], Any], type[BaseException], tuple[str, ...]]


def send(msg: Message, queue_id: int | None = 0) -> Callable[[Env], Any]:
    return lambda e: e.producer.send(msg, queue_id=queue_id)


def read(offset: Any = 0, max_messages: Any = 32, queue: int = 0) -> Callable[[Env], Any]:
    return lambda e: e.store.read(MessageQueue(T, queue), offset, max_messages)


def pull(call: Callable[[mqlite.PullConsumer], Any], group: str = "g") -> Callable[[Env], Any]:
    """``call`` on a pull consumer that commits nothing by itself, closed afterwards."""
    def run(e: Env) -> Any:
        with e.store.pull_consumer(group, auto_commit=False) as consumer:
            return call(consumer)
    return run


def assigned(call: Callable[[mqlite.PullConsumer], Any]) -> Callable[[Env], Any]:
    """``call`` on a pull consumer assigned queue 0 of the topic (no group files)."""
    def run(c: mqlite.PullConsumer) -> Any:
        c.assign([MessageQueue(T, 0)])
        return call(c)
    return pull(run)


def push_subscribe(topic: Any) -> Callable[[Env], Any]:
    def run(e: Env) -> Any:
        consumer = e.store.push_consumer("g")
        try:
            consumer.subscribe(topic)
        finally:
            consumer.shutdown()
    return run


BIG = 2**64  # beyond every native integer type
LONE = "\ud800"  # a lone surrogate: a str with no UTF-8 form


ROWS: list[Row] = [
    # topics
    ("topic empty", send(Message("", b"x")), E.InvalidTopicError, ("topic",)),
    ("topic space", send(Message(" ", b"x")), E.InvalidTopicError, ("topic",)),
    ("topic dot", send(Message(".", b"x")), E.InvalidTopicError, ("topic",)),
    ("topic dotdot", send(Message("..", b"x")), E.InvalidTopicError, ("topic",)),
    ("topic traversal", send(Message("../x", b"x")), E.InvalidTopicError, ("topic",)),
    ("topic slash", send(Message("a/b", b"x")), E.InvalidTopicError, ("topic",)),
    ("topic backslash", send(Message("a\\b", b"x")), E.InvalidTopicError, ("topic",)),
    ("topic NUL", send(Message("a\x00b", b"x")), E.InvalidTopicError, ("topic",)),
    ("topic non-ascii", send(Message("tøpic", b"x")), E.InvalidTopicError, ("topic",)),
    ("topic 128 bytes", send(Message("x" * 128, b"x")), E.InvalidTopicError, ("topic",)),
    ("topic %RETRY%", send(Message("%RETRY%g", b"x")), E.InvalidTopicError, ("topic",)),
    ("topic %DLQ%", send(Message("%DLQ%g", b"x")), E.InvalidTopicError, ("topic",)),
    ("topic system", send(Message("SCHEDULE_TOPIC_XXXX", b"x")), E.InvalidTopicError, ("topic",)),
    ("topic bytes", send(Message(b"orders", b"x")), TypeError, ("topic",)),  # type: ignore[arg-type]
    ("topic int", send(Message(7, b"x")), TypeError, ("topic",)),  # type: ignore[arg-type]
    ("topic None", send(Message(None, b"x")), TypeError, ("topic",)),  # type: ignore[arg-type]
    ("create_topic traversal", lambda e: e.store.create_topic("../evil", 1), E.InvalidTopicError, ("topic",)),
    ("create_topic 0 queues", lambda e: e.store.create_topic("fresh", 0), E.IllegalArgumentError, ("queues",)),
    ("create_topic 1025 queues", lambda e: e.store.create_topic("fresh", 1025), E.IllegalArgumentError, ("queues",)),
    # queue ids
    ("queue -1", send(Message(T, b"x"), -1), E.InvalidQueueError, ("queue",)),
    ("queue = count", send(Message(T, b"x"), 4), E.InvalidQueueError, ("queue",)),
    ("queue huge", send(Message(T, b"x"), 2**31), (E.InvalidQueueError, TypeError), ("queue",)),  # type: ignore[list-item]
    ("queue str", send(Message(T, b"x"), "1"), TypeError, ("queue", "int")),  # type: ignore[arg-type]
    # bodies
    ("body None", send(Message(T, None)), TypeError, ("body",)),  # type: ignore[arg-type]
    ("body str", send(Message(T, "text")), TypeError, ("body",)),  # type: ignore[arg-type]
    ("body memoryview", send(Message(T, memoryview(b"x"))), TypeError, ("body",)),  # type: ignore[arg-type]
    ("body empty", send(Message(T, b"")), E.InvalidMessageError, ("body",)),
    ("body too large", send(Message(T, b"x" * 4097)), E.MessageTooLargeError, ("4096", "limit")),
    # properties, tags, keys
    ("property empty name", send(Message(T, b"x", properties={"": "v"})), E.InvalidMessageError, ("propert",)),
    ("property empty value", send(Message(T, b"x", properties={"k": ""})), E.InvalidMessageError, ("propert",)),
    ("property \\x01", send(Message(T, b"x", properties={"a\x01": "v"})), E.InvalidMessageError, ("propert",)),
    ("property \\x02", send(Message(T, b"x", properties={"a": "v\x02"})), E.InvalidMessageError, ("propert",)),
    ("property reserved KEYS", send(Message(T, b"x", properties={"KEYS": "k"})), E.InvalidMessageError, ("reserved", "KEYS")),
    ("property reserved TAGS", send(Message(T, b"x", properties={"TAGS": "t"})), E.InvalidMessageError, ("reserved", "TAGS")),
    ("property reserved UNIQ_KEY", send(Message(T, b"x", properties={"UNIQ_KEY": "u"})), E.InvalidMessageError, ("reserved", "UNIQ_KEY")),
    ("property reserved DELAY", send(Message(T, b"x", properties={"DELAY": "3"})), E.InvalidMessageError, ("reserved", "DELAY")),
    ("properties > 32767 bytes", send(Message(T, b"x", properties={"big": "v" * 40_000})), E.PropertiesTooLargeError, ("propert",)),
    ("property name not str", send(Message(T, b"x", properties={1: "v"})), TypeError, ("propert", "str")),  # type: ignore[dict-item]
    ("tag with ||", send(Message(T, b"x", tags="a||b")), E.InvalidMessageError, ("tag",)),
    ("tag empty", send(Message(T, b"x", tags="")), E.InvalidMessageError, ("tag",)),
    ("key with space", send(Message(T, b"x", keys=["a b"])), E.InvalidMessageError, ("key",)),
    ("key empty", send(Message(T, b"x", keys=[""])), E.InvalidMessageError, ("key",)),
    ("flag beyond i32", send(Message(T, b"x", flag=2**40)), E.InvalidMessageError, ("flag",)),
    ("flag beyond i64", send(Message(T, b"x", flag=BIG)), E.InvalidMessageError, ("flag",)),
    ("flag str", send(Message(T, b"x", flag="1")), TypeError, ("flag",)),  # type: ignore[arg-type]
    ("flag bool", send(Message(T, b"x", flag=True)), TypeError, ("flag",)),
    # batches
    ("batch empty", lambda e: e.producer.send_batch([], topic=T, queue_id=0), E.InvalidBatchError, ("batch", "empty")),
    ("batch mixing topics", lambda e: e.producer.send_batch([Message(T, b"a"), Message("other", b"b")]),
     E.InvalidBatchError, ("batch", "topic")),
    ("batch without topic", lambda e: e.producer.send_batch([b"x"]), E.InvalidBatchError, ("topic",)),
    ("batch with one bad body", lambda e: e.producer.send_batch([b"ok", b""], topic=T, queue_id=0),
     E.InvalidMessageError, ("body",)),
    ("batch larger than a file", lambda e: e.producer.send_batch([b"x" * 4000] * 40, topic=T, queue_id=0),
     E.InvalidBatchError, ("batch", "file", "large")),
    # reads
    ("read max_messages 0", read(0, 0), E.IllegalArgumentError, ("max_messages",)),
    ("read max_messages -1", read(0, -1), E.IllegalArgumentError, ("max_messages",)),
    ("read max_messages huge", read(0, 10**6), E.IllegalArgumentError, ("max_messages",)),
    ("read offset -1", read(-1), E.IllegalArgumentError, ("offset",)),
    ("read offset str", read("0"), TypeError, ("int", "str")),
    ("read queue -1", read(0, 32, -1), E.InvalidQueueError, ("queue",)),
    ("get_by_offset -1", lambda e: e.store.get_by_offset(-1), E.IllegalArgumentError, ("offset",)),
    ("get malformed id", lambda e: e.store.get("not-an-id"), E.MessageNotFoundError, ("not-an-id", "id")),
    ("wait_for negative timeout", lambda e: e.store.wait_for({MessageQueue(T, 0): 0}, timeout=-1),
     ValueError, ("timeout",)),
    # filters
    ("sql 400 parentheses", lambda e: MessageSelector.by_sql("(" * 400 + "a = 1" + ")" * 400),
     E.FilterExpressionError, ("nested",)),
    ("sql 1000 NOTs", lambda e: MessageSelector.by_sql("NOT " * 1000 + "a = 1"), E.FilterExpressionError, ("nested",)),
    ("sql 5000-digit literal", lambda e: MessageSelector.by_sql("a > " + "9" * 5000),
     E.FilterExpressionError, ("digits",)),
    # groups
    ("producer group with /", lambda e: e.store.producer("a/b"), E.InvalidGroupError, ("group",)),
    ("producer group too long", lambda e: e.store.producer("g" * 300), E.InvalidGroupError, ("group",)),
    # ints beyond 64 bits: the same typed error as a value just out of range
    ("queue 2**63", send(Message(T, b"x"), 2**63), E.InvalidQueueError, ("queue",)),
    ("queue -2**64", send(Message(T, b"x"), -BIG), E.InvalidQueueError, ("queue",)),
    ("batch queue 2**64", lambda e: e.producer.send_batch([b"x"], topic=T, queue_id=BIG),
     E.InvalidQueueError, ("queue",)),
    ("MessageQueue 2**63", lambda e: MessageQueue(T, 2**63), E.InvalidQueueError, ("queue",)),
    ("read offset 2**63", read(2**63), E.IllegalArgumentError, ("offset",)),
    ("read offset -2**64", read(-BIG), E.IllegalArgumentError, ("offset",)),
    ("read max_messages 2**64", read(0, BIG), E.IllegalArgumentError, ("max_messages",)),
    ("get_by_offset 2**64", lambda e: e.store.get_by_offset(BIG), E.IllegalArgumentError, ("offset",)),
    ("offset_for_timestamp 2**63", lambda e: e.store.offset_for_timestamp(MessageQueue(T, 0), 2**63),
     E.IllegalArgumentError, ("timestamp",)),
    ("wait_for offset 2**64", lambda e: e.store.wait_for({MessageQueue(T, 0): BIG}, 0),
     E.IllegalArgumentError, ("offset",)),
    ("wait_for timeout 2**1100", lambda e: e.store.wait_for({MessageQueue(T, 0): 0}, 2**1100),
     E.IllegalArgumentError, ("timeout",)),
    ("poll timeout nan", assigned(lambda c: c.poll(float("nan"))), E.IllegalArgumentError, ("timeout",)),
    ("create_topic 2**64 queues", lambda e: e.store.create_topic("fresh", BIG), E.IllegalArgumentError,
     ("queues",)),
    ("create_topic perm -1", lambda e: e.store.create_topic("fresh", 1, perm=-1), E.IllegalArgumentError,
     ("perm",)),
    ("create_topic perm 8", lambda e: e.store.create_topic("fresh", 1, perm=8), E.IllegalArgumentError,
     ("perm",)),
    ("create_topic perm 2**64", lambda e: e.store.create_topic("fresh", 1, perm=BIG),
     E.IllegalArgumentError, ("perm",)),
    ("producer compress_over -1", lambda e: e.store.producer(compress_over=-1), E.InvalidConfigError,
     ("compress_over",)),
    ("producer compress_over 2**64", lambda e: e.store.producer(compress_over=BIG), E.InvalidConfigError,
     ("compress_over",)),
    ("producer compression_level 2**40", lambda e: e.store.producer(compress_over=1, compression_level=2**40),
     E.InvalidConfigError, ("compression_level",)),
    ("open commit_log_file_size 2**64", lambda e: mqlite.open(e.sandbox / "other", commit_log_file_size=BIG),
     E.InvalidConfigError, ("commit_log_file_size",)),
    ("open default_queues 2**64", lambda e: mqlite.open(e.sandbox / "other", default_queues=BIG),
     E.InvalidConfigError, ("default_queues",)),
    ("pull seek_to_timestamp 2**63", assigned(lambda c: c.seek_to_timestamp(2**63)), E.IllegalArgumentError,
     ("timestamp",)),
    ("pull offset_for_timestamp -2**64", assigned(lambda c: c.offset_for_timestamp(MessageQueue(T, 0), -BIG)),
     E.IllegalArgumentError, ("timestamp",)),
    # strs with a lone surrogate: a typed error naming the field
    ("topic surrogate", send(Message(LONE, b"x")), E.InvalidTopicError, ("topic",)),
    ("tag surrogate", send(Message(T, b"x", tags=LONE)), E.InvalidMessageError, ("tags",)),
    ("key surrogate", send(Message(T, b"x", keys=[LONE])), E.InvalidMessageError, ("keys",)),
    ("property name surrogate", send(Message(T, b"x", properties={LONE: "v"})), E.InvalidMessageError,
     ("propert",)),
    ("property value surrogate", send(Message(T, b"x", properties={"k": LONE})), E.InvalidMessageError,
     ("propert",)),
    ("batch topic surrogate", lambda e: e.producer.send_batch([b"x"], topic=LONE), E.InvalidTopicError,
     ("topic",)),
    ("MessageQueue surrogate", lambda e: MessageQueue(LONE, 0), E.InvalidTopicError, ("topic",)),
    ("read tags surrogate", lambda e: e.store.read(MessageQueue(T, 0), 0, tags=LONE),
     E.FilterExpressionError, ("tags",)),
    ("get surrogate id", lambda e: e.store.get(LONE), E.MessageNotFoundError, ("msg_id",)),
    ("get_property surrogate", lambda e: e.store.read(MessageQueue(T, 0), 0)[0].get_property(LONE),
     E.IllegalArgumentError, ("name",)),
    ("create_topic surrogate", lambda e: e.store.create_topic(LONE, 1), E.InvalidTopicError, ("topic",)),
    ("producer group surrogate", lambda e: e.store.producer(LONE), E.InvalidGroupError, ("group",)),
    ("producer compression surrogate", lambda e: e.store.producer(compress_over=1, compression=LONE),  # type: ignore[arg-type]
     E.InvalidConfigError, ("compression",)),
    ("open path surrogate", lambda e: mqlite.open(str(e.sandbox / "s") + LONE), E.InvalidConfigError,
     ("path",)),
    ("open flush surrogate", lambda e: mqlite.open(e.sandbox / "other", flush=LONE),  # type: ignore[arg-type]
     E.InvalidConfigError, ("flush",)),
    ("subscribe surrogate", pull(lambda c: c.subscribe(LONE)), E.InvalidTopicError, ("topic",)),
    ("pull consumer group surrogate", lambda e: e.store.pull_consumer(LONE), E.InvalidGroupError, ("group",)),
    # consumers and admin calls: topic and group names as a send checks them, before any file
    ("subscribe traversal", pull(lambda c: c.subscribe("../../../outside")), E.InvalidTopicError, ("topic",)),
    ("subscribe absolute", lambda e: pull(lambda c: c.subscribe(str(e.sandbox / "abs")))(e),
     E.InvalidTopicError, ("topic",)),
    ("subscribe dotdot", pull(lambda c: c.subscribe("..")), E.InvalidTopicError, ("topic",)),
    ("subscribe 70,000 characters", pull(lambda c: c.subscribe("a" * 70_000)), E.InvalidTopicError,
     ("topic",)),
    ("subscribe empty", pull(lambda c: c.subscribe("")), E.InvalidTopicError, ("topic",)),
    ("subscribe bytes", pull(lambda c: c.subscribe(b"orders")), TypeError, ("topic",)),  # type: ignore[arg-type]
    ("unsubscribe traversal", pull(lambda c: c.unsubscribe("../x")), E.InvalidTopicError, ("topic",)),
    ("assign traversal", pull(lambda c: c.assign([MessageQueue("../x", 0)])), E.InvalidTopicError,
     ("topic",)),
    ("push subscribe traversal", push_subscribe("../../../outside"), E.InvalidTopicError, ("topic",)),
    ("push subscribe None", push_subscribe(None), TypeError, ("topic",)),
    ("pull consumer group traversal", lambda e: e.store.pull_consumer("../g"), E.InvalidGroupError,
     ("group",)),
    ("push consumer group traversal", lambda e: e.store.push_consumer("../g"), E.InvalidGroupError,
     ("group",)),
    ("broadcast consumer group too long",
     lambda e: e.store.pull_consumer("g" * 121, message_model=mqlite.MessageModel.BROADCASTING),
     E.InvalidGroupError, ("group",)),
    ("reset_offset traversal", lambda e: e.store.reset_offset("g", "../../../victim", offset=0, force=True),
     E.InvalidTopicError, ("topic",)),
    ("reset_offset absolute", lambda e: e.store.reset_offset("g", str(e.sandbox / "abs"), offset=0),
     E.InvalidTopicError, ("topic",)),
    ("reset_offset group traversal", lambda e: e.store.reset_offset("../g", T, offset=0), E.InvalidGroupError,
     ("group",)),
    ("consumer_progress group traversal", lambda e: e.store.consumer_progress("../../g"),
     E.InvalidGroupError, ("group",)),
    ("queues traversal", lambda e: e.store.queues("../x"), E.InvalidTopicError, ("topic",)),
    ("offsets traversal", lambda e: e.store.offsets(MessageQueue("../x", 0)), E.InvalidTopicError,
     ("topic",)),
    ("read traversal", lambda e: e.store.read(MessageQueue("../../x", 0), 0), E.InvalidTopicError,
     ("topic",)),
    ("offset_for_timestamp traversal", lambda e: e.store.offset_for_timestamp(MessageQueue("/abs", 0), 0),
     E.InvalidTopicError, ("topic",)),
    ("wait_for traversal", lambda e: e.store.wait_for({MessageQueue("../x", 0): 0}, 0), E.InvalidTopicError,
     ("topic",)),
    ("create_topic absolute", lambda e: e.store.create_topic(str(e.sandbox / "abs"), 1), E.InvalidTopicError,
     ("topic",)),
]


@pytest.mark.parametrize(("row", "call", "exc", "words"), ROWS, ids=[r[0] for r in ROWS])
def test_row(env: Env, row: str, call: Callable[[Env], Any], exc: type[BaseException], words: tuple[str, ...]) -> None:
    files, outside, offsets = env.before()
    with pytest.raises(exc) as info:
        call(env)
    text = str(info.value).lower()
    assert any(w.lower() in text for w in words), f"{row}: message {str(info.value)!r} names none of {words}"
    if isinstance(info.value, E.MQError):
        assert info.value.code and isinstance(info.value.code, str)
    after_files, after_outside, after_offsets = env.before()
    assert after_offsets == offsets, f"{row}: offsets moved"
    assert after_files == files, f"{row}: store files changed: " + repr(
        {k for k in set(files) | set(after_files) if files.get(k) != after_files.get(k)})
    assert after_outside == outside, f"{row}: files changed next to the store"
    # still usable
    r = env.producer.send(Message(T, b"after"), queue_id=0)
    assert r.queue_offset == 1
    assert [m.body for m in env.store.read(MessageQueue(T, 0), 0)] == [b"seed", b"after"]


def test_poll_with_a_timeout_beyond_the_float_range_waits_without_limit(env: Env) -> None:
    """An int timeout too large for a float is no error: it waits as ``float("inf")`` does (here
    not at all: a message is there)."""
    with env.store.pull_consumer("g", auto_commit=False) as consumer:
        consumer.assign([MessageQueue(T, 0)])
        consumer.seek(MessageQueue(T, 0), 0)
        assert [m.body for m in consumer.poll(timeout=2**1100)] == [b"seed"]


def test_a_batch_result_index_beyond_64_bits_is_an_index_error(env: Env) -> None:
    result = env.producer.send_batch([b"a"], topic=T, queue_id=1)
    for index in (1, -2, BIG, -BIG):
        with pytest.raises(IndexError):
            result[index]
    assert result[-1].queue_offset == 0


def test_read_past_the_end_is_a_status_not_an_exception(env: Env) -> None:
    res = env.store.read_result(MessageQueue(T, 0), 10**6)
    assert res.status == "OFFSET_OVERFLOW_BADLY"
    assert res.messages == [] and res.next_offset == 1
    assert env.store.read_result(MessageQueue(T, 0), 1).status == "OFFSET_OVERFLOW_ONE"


def test_calls_after_close_raise_and_write_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = mqlite.open(root, **SMALL)
    producer = store.producer()
    producer.send(Message(T, b"x"), queue_id=0)
    store.close()
    files = tree(root)
    for call in (lambda: producer.send(Message(T, b"y")), lambda: store.create_topic("n", 1),
                 lambda: store.read(MessageQueue(T, 0), 0), store.flush, store.stats,
                 store.delete_expired_files):
        with pytest.raises(E.StoreClosedError, match="closed"):
            call()
    assert tree(root) == files


# ---- store paths --------------------------------------------------------------------------

def test_store_path_is_a_file(tmp_path: Path) -> None:
    p = tmp_path / "afile"
    p.write_bytes(b"keep")
    with pytest.raises(E.StoreIOError) as info:
        mqlite.open(p)
    assert str(p) in str(info.value) and "directory" in str(info.value).lower()
    assert p.read_bytes() == b"keep"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["afile"]


def test_read_only_open_of_missing_store_creates_nothing(tmp_path: Path) -> None:
    for p in (tmp_path / "missing", tmp_path / "no" / "parent"):
        with pytest.raises(E.StoreIOError) as info:
            mqlite.open(p, read_only=True)
        assert str(p) in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_store_path_is_a_symlink_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(E.StoreIOError) as info:
        mqlite.open(link)
    assert "symlink" in str(info.value)
    assert list(real.iterdir()) == [], "nothing written through the link"


def test_store_path_errors_are_os_errors(tmp_path: Path) -> None:
    p = tmp_path / "afile"
    p.write_bytes(b"")
    with pytest.raises(NotADirectoryError) as nd:
        mqlite.open(p)
    assert isinstance(nd.value, E.StoreIOError) and nd.value.errno == errno.ENOTDIR
    assert nd.value.filename == str(p)
    with pytest.raises(FileNotFoundError) as nf:
        mqlite.open(tmp_path / "missing", read_only=True)
    assert isinstance(nf.value, E.StoreIOError) and nf.value.errno == errno.ENOENT


# ---- topic-name fuzz ------------------------------------------------------------------------

ALLOWED = re.compile(r"[A-Za-z0-9_%|-]{1,127}")
SYSTEM = ("%RETRY%", "%DLQ%", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_", "rmq_sys_", "TBW102")

topic_names = st.one_of(
    st.text(max_size=140),
    st.text(alphabet="./\\\x00 -_%|aZ09~:*?\"<>\n", max_size=20),
    st.builds(lambda a, b: a + b, st.sampled_from(["../", "..", "./", "/", "~/", "\\..\\", "%2e%2e/"]),
              st.text(alphabet="abc./", max_size=10)),
)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=topic_names)
def test_topic_name_fuzz_creates_no_path_outside_the_store(fuzz_env: tuple[mqlite.Store, Path, Path], name: str) -> None:
    store, root, sandbox = fuzz_env
    producer = store.producer()
    try:
        r = producer.send(Message(name, b"x"))
    except E.InvalidTopicError:
        assert not ALLOWED.fullmatch(name) or name.startswith(SYSTEM) or name in (".", ".."), name
    else:
        assert ALLOWED.fullmatch(name), f"accepted topic {name!r} outside [A-Za-z0-9_%|-]{{1,127}}"
        assert r.message_queue.topic == name
        qdir = root / "consumequeue" / name
        assert qdir.is_dir() and qdir.resolve().parent == (root / "consumequeue").resolve()
    # everything in the sandbox is the store itself
    assert [p.name for p in sandbox.iterdir()] == ["store"]


def valid_topic(name: str) -> bool:
    """The name rule: 1 to 127 characters of ``[A-Za-z0-9_%|-]``, 255 for retry / DLQ topics."""
    limit = 255 if name.startswith(("%RETRY%", "%DLQ%")) else 127
    return bool(re.fullmatch(r"[A-Za-z0-9_%|-]+", name)) and len(name) <= limit


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=topic_names)
def test_topic_name_fuzz_through_consumers_and_admin(
    fuzz_env: tuple[mqlite.Store, Path, Path], name: str
) -> None:
    store, root, sandbox = fuzz_env
    groups = root / "consumer_groups" / "fuzz"
    consumer = store.pull_consumer("fuzz", auto_commit=False)
    try:
        consumer.subscribe(name)
    except E.InvalidTopicError:
        assert not valid_topic(name), f"subscribe refused the valid topic {name!r}"
    else:
        assert valid_topic(name), f"subscribe accepted {name!r}"
        assert (groups / name).is_dir() and (groups / name).resolve().parent == groups.resolve()
    finally:
        consumer.close()
    try:
        store.reset_offset("fuzz", name, offset=0, create=True)
    except E.InvalidTopicError:
        assert not valid_topic(name), f"reset_offset refused the valid topic {name!r}"
    except E.TopicNotFoundError:
        assert valid_topic(name)
    else:
        assert valid_topic(name), f"reset_offset accepted {name!r}"
    # The admin calls check the name before anything else (the other fuzz test's sends may
    # have created the topic: then they find it, and the delete deletes it).
    for admin in (store.topic_status, store.topic, store.delete_topic):
        try:
            admin(name)
        except E.InvalidTopicError:
            # A bad name, or a system topic (which cannot be deleted).
            assert not valid_topic(name) or admin is store.delete_topic, f"{admin.__name__} refused {name!r}"
        except E.TopicNotFoundError:
            assert valid_topic(name), f"{admin.__name__} looked the invalid topic {name!r} up"
        else:
            assert valid_topic(name), f"{admin.__name__} accepted {name!r}"
    assert [p.name for p in sandbox.iterdir()] == ["store"]


@pytest.fixture(scope="module")
def fuzz_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[mqlite.Store, Path, Path]]:
    base = tmp_path_factory.mktemp("fuzz")
    sandbox = base / "sandbox"
    sandbox.mkdir()
    root = sandbox / "store"
    # neighbours a traversal would reach
    (base / "canary").write_text("canary")
    before = {p for p in base.rglob("*") if root not in p.parents and p != root}
    store = mqlite.open(root, default_queues=1, **SMALL)
    yield store, root, sandbox
    store.close()
    after = {p for p in base.rglob("*") if root not in p.parents and p != root}
    assert after == before, f"paths created outside the store root: {sorted(map(str, after - before))[:10]}"
    assert (base / "canary").read_text() == "canary"
    # every topic directory is a direct child of consumequeue/ or of its group's directory,
    # beside the group's own lock files (FORMAT.md §13)
    for p in (root / "consumequeue").iterdir():
        assert p.is_dir() and not p.is_symlink() and ALLOWED.fullmatch(p.name), p
    groups = root / "consumer_groups"
    for p in groups.glob("*/*") if groups.exists() else []:
        if p.name in ("members.d", "slots.d", "queues.lock"):
            continue
        assert p.is_dir() and not p.is_symlink() and valid_topic(p.name), p
