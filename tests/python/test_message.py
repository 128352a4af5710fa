"""Pure-Python pieces: Message, enums, TopicConfig, tag expressions, option checks."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import mqlite
from mqlite import GetMessageStatus, InvalidConfigError, Message, MessageQueue, SendStatus, TopicConfig
from mqlite.topic import parse_tags


def test_message_defaults_and_slots() -> None:
    m = Message("orders", b"x")
    assert (m.topic, m.body, m.tags, m.keys, m.properties, m.flag, m.delay_level) == (
        "orders", b"x", None, (), {}, 0, 0
    )
    assert not hasattr(m, "__dict__")
    assert Message("t", b"y").properties is not m.properties
    assert [f.name for f in dataclasses.fields(Message)] == [
        "topic", "body", "tags", "keys", "properties", "flag", "delay_level", "deliver_at", "delay"
    ]


def test_status_enums_have_rocketmq_names() -> None:
    assert [s.name for s in SendStatus] == [
        "SEND_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"
    ]
    for name in ("FOUND", "NO_MESSAGE_IN_QUEUE", "OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_ONE",
                 "OFFSET_OVERFLOW_BADLY", "NO_MATCHED_MESSAGE", "OFFSET_FOUND_NULL"):
        assert GetMessageStatus(name) == name
        assert str(GetMessageStatus[name]) == name


def test_message_queue_value_semantics() -> None:
    a, b = MessageQueue("t", 1), MessageQueue("t", 1)
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert (a.topic, a.queue_id) == ("t", 1)
    assert sorted([MessageQueue("t", 2), MessageQueue("s", 3), a]) == [
        MessageQueue("s", 3), a, MessageQueue("t", 2)
    ]
    assert a != MessageQueue("t", 2)


def test_topic_config_from_dict() -> None:
    t = TopicConfig.from_dict(
        {"topicName": "o", "readQueueNums": 8, "writeQueueNums": 4, "perm": 4, "order": True}
    )
    assert t == TopicConfig("o", 8, 4, 4, True)
    assert t.readable and not t.writable
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.perm = 6  # type: ignore[misc]


@pytest.mark.parametrize(
    ("expr", "tags"),
    [
        (None, None), ("", None), ("*", None), ("  *  ", None), ("A || *", None),
        ("TagA", ["TagA"]), ("TagA || TagB", ["TagA", "TagB"]), (" TagA||TagB ||", ["TagA", "TagB"]),
        ("A || A", ["A"]), (["A", "B"], ["A", "B"]), (("A",), ["A"]), ([], None),
    ],
)
def test_parse_tags(expr: object, tags: list[str] | None) -> None:
    assert parse_tags(expr) == tags  # type: ignore[arg-type]


@pytest.mark.parametrize("expr", [1, [b"A"], [None]])
def test_parse_tags_rejects_non_strings(expr: object) -> None:
    with pytest.raises(TypeError):
        parse_tags(expr)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [
        {"flush": "fsync"}, {"flush": 5}, {"wait": -1}, {"wait": "1"}, {"wait": float("inf")},
        {"wait": True}, {"read_only": "yes"}, {"auto_create_topics": 1},
        {"commit_log_file_size": "big"}, {"commit_log_file_size": 0}, {"commit_log_file_size": 1.5},
        {"consume_queue_file_units": -3}, {"max_message_size": True}, {"default_queues": 0},
        {"file_mode": 0o1777}, {"dir_mode": -1}, {"retention_hours": 0}, {"retention_hours": float("nan")},
        {"flush_interval_ms": 0}, {"sync_flush_timeout_ms": "5s"},
        # ints beyond 64 bits: the same InvalidConfigError as a value just out of range
        {"flush_interval_ms": 2**64}, {"sync_flush_timeout_ms": 2**63}, {"commit_log_file_size": 2**64},
        {"consume_queue_file_units": 2**64}, {"max_message_size": 2**63}, {"default_queues": 2**64},
        {"wait": 2**1100}, {"retention_hours": 2**1100},
    ],
)
def test_bad_options_raise_invalid_config_and_create_nothing(tmp_path: Path, options: dict[str, object]) -> None:
    with pytest.raises(InvalidConfigError) as info:
        mqlite.open(tmp_path / "store", **options)
    assert info.value.code
    assert list(tmp_path.iterdir()) == []


def test_unknown_option_is_a_type_error(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        mqlite.open(tmp_path / "store", no_such_option=1)
    assert list(tmp_path.iterdir()) == []


def test_version_is_exported() -> None:
    assert isinstance(mqlite.__version__, str) and mqlite.__version__
    assert set(mqlite.__all__) <= set(dir(mqlite))


def test_message_behaves_as_a_dataclass() -> None:
    import copy
    import pickle

    m = Message("orders", b"x", tags="A", keys=["k1", "k2"], properties={"a": "1"}, flag=3)
    assert dataclasses.is_dataclass(m) and dataclasses.is_dataclass(Message)
    assert dataclasses.asdict(m) == {
        "topic": "orders", "body": b"x", "tags": "A", "keys": ["k1", "k2"],
        "properties": {"a": "1"}, "flag": 3, "delay_level": 0, "deliver_at": None,
        "delay": None,
    }
    changed = dataclasses.replace(m, tags="B")
    assert changed.tags == "B" and changed.topic == "orders" and m.tags == "A"
    assert repr(Message("t", b"y")) == (
        "Message(topic='t', body=b'y', tags=None, keys=(), properties={}, flag=0, delay_level=0,"
        " deliver_at=None, delay=None)"
    )
    assert m == Message("orders", b"x", "A", ["k1", "k2"], {"a": "1"}, 3)
    assert m != changed and m != ("orders", b"x")
    with pytest.raises(TypeError):
        hash(m)
    assert pickle.loads(pickle.dumps(m)) == m
    assert copy.copy(m) == m and copy.deepcopy(m) == m
    m.topic = "other"  # mutable, as the dataclass was
    assert m.topic == "other"
    match m:
        case Message(topic, body, tags):
            assert (topic, body, tags) == ("other", b"x", "A")
        case _:
            pytest.fail("positional match failed")


def test_a_message_subclass_is_read_through_its_attributes(mem_store) -> None:
    from mqlite import MessageQueue

    class Upper(Message):
        @property  # type: ignore[misc]
        def tags(self) -> str:  # overrides the field: the send must see this value
            return "UPPER"

    r = mem_store.producer().send(Upper("t", b"x", tags="lower"), queue_id=0)
    assert mem_store.read(MessageQueue("t", 0), r.queue_offset, 1)[0].tags == "UPPER"


# ---- reading a message while it is being sent ---------------------------------------------------


def test_a_message_can_be_read_and_changed_from_inside_its_own_send(mem_store) -> None:
    """A ``keys`` iterable runs Python code during the send: logging the message there (repr),
    comparing, copying or reducing it, reading its properties and setting a field all work; the
    send uses the fields as they were when it began."""
    import copy

    seen: dict[str, object] = {}

    class Keys:
        def __iter__(self):  # type: ignore[no-untyped-def]
            seen["repr"] = repr(msg)
            seen["eq"] = msg == msg
            seen["copy"] = copy.copy(msg)
            seen["reduce"] = msg.__reduce__()
            seen["properties"] = dict(msg.properties)
            msg.tags = "late"
            yield "k1"

    msg = Message("t", b"x", keys=Keys())
    r = mem_store.producer().send(msg, queue_id=0)
    assert str(seen["repr"]).startswith("Message(topic='t', body=b'x'") and seen["eq"] is True
    assert isinstance(seen["copy"], Message) and seen["properties"] == {}
    assert msg.tags == "late"
    stored = mem_store.read(MessageQueue("t", 0), r.queue_offset, 1)[0]
    assert (stored.keys, stored.tags) == (("k1",), None)


def test_another_thread_reads_and_changes_a_message_while_it_is_sent(mem_store) -> None:
    """While a send runs Python code of the message (here its ``keys``), another thread reads,
    prints, compares and changes the same message without an error."""
    import copy
    import pickle
    import threading

    inside, finished = threading.Event(), threading.Event()

    class Keys:
        def __iter__(self):  # type: ignore[no-untyped-def]
            inside.set()
            assert finished.wait(30), "the other thread did not finish"
            yield "k1"

    msg = Message("t", b"x", keys=Keys())
    outcome: dict[str, object] = {}

    def other() -> None:
        try:
            assert inside.wait(30), "the send never reached the keys"
            outcome["properties"] = dict(msg.properties)
            msg.properties = {"p": "v"}
            msg.tags = "changed"
            outcome["repr"] = repr(msg)
            outcome["eq"] = msg == copy.copy(msg)
            outcome["pickled"] = pickle.loads(pickle.dumps(Message(msg.topic, msg.body))) == Message("t", b"x")
        except BaseException as exc:  # noqa: BLE001 - reported below, with its type
            outcome["error"] = exc
        finally:
            finished.set()

    thread = threading.Thread(target=other)
    thread.start()
    r = mem_store.producer().send(msg, queue_id=0)
    thread.join()
    assert "error" not in outcome, repr(outcome.get("error"))
    assert outcome["properties"] == {} and outcome["eq"] is True and outcome["pickled"] is True
    assert "tags='changed'" in str(outcome["repr"])
    stored = mem_store.read(MessageQueue("t", 0), r.queue_offset, 1)[0]
    assert (stored.keys, stored.tags, stored.get_property("p")) == (("k1",), None, None)
