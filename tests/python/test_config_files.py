"""The store's metadata files (config/topics.json, config/consumerOffset.json) as found on disk:
written by RocketMQ, damaged, or edited by hand. A file that does not decode is used through its
.bak or is a ConfigFileError naming the file and the field; it is never taken as empty and never
written over."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mqlite
from mqlite import ConfigFileError, ConsumeFromWhere, Message, MessageQueue

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def topics_json(root: Path) -> Path:
    return root / "config" / "topics.json"


def bak(path: Path) -> Path:
    return path.with_name(path.name + ".bak")


def eight_queue_store(root: Path) -> None:
    """Topic ``t`` with 8 queues and 10 messages in each, then topic ``u``: topics.json holds
    both, its .bak only ``t``."""
    with mqlite.open(root) as s:
        s.create_topic("t", 8)
        p = s.producer()
        for i in range(80):
            p.send(Message("t", b"m%d" % i), queue_id=i % 8)
        s.create_topic("u", 1)


def edit_topic(root: Path, **fields: Any) -> None:
    path = topics_json(root)
    data = json.loads(path.read_text())
    data["topicConfigTable"]["t"].update(fields)
    path.write_text(json.dumps(data))


# Each turns the main topics.json into one that must not load.
DAMAGE: dict[str, Callable[[Path], None]] = {
    "perm as a string": lambda root: edit_topic(root, perm="6"),
    "queue count as a float": lambda root: edit_topic(root, readQueueNums=8.0),
    "negative queue count": lambda root: edit_topic(root, writeQueueNums=-1),
    "queue count beyond u32": lambda root: edit_topic(root, readQueueNums=2**32),
    "order as a number": lambda root: edit_topic(root, order=1),
    "topic entry as a list": lambda root: edit_topic(root, attributes=[1]),
    "topicName differs from its key": lambda root: edit_topic(root, topicName="v"),
    "1e400": lambda root: topics_json(root).write_text(
        topics_json(root).read_text().replace('"perm": 6', '"perm": 1e400')),
    "nested 5000 deep": lambda root: topics_json(root).write_text(
        '{"topicConfigTable": {"t": ' + "[" * 5000 + "]" * 5000 + "}}"),
    "not JSON": lambda root: topics_json(root).write_text('{"topicConfigTable": {"t": {'),
    "path-like topic name": lambda root: topics_json(root).write_text(json.dumps(
        {"topicConfigTable": {"../t": {"topicName": "../t", "perm": 6, "readQueueNums": 1,
                                       "writeQueueNums": 1}}})),
}


@pytest.mark.parametrize("damage", list(DAMAGE), ids=list(DAMAGE))
def test_unreadable_topics_json_without_bak_fails_the_open_and_is_kept(tmp_path: Path, damage: str) -> None:
    root = tmp_path / "s"
    eight_queue_store(root)
    bak(topics_json(root)).unlink()
    DAMAGE[damage](root)
    before = topics_json(root).read_bytes()
    for read_only in (False, True):
        with pytest.raises(ConfigFileError) as info:
            mqlite.open(root, read_only=read_only)
        assert info.value.path == str(topics_json(root))
        assert str(topics_json(root)) in str(info.value)
        assert info.value.code == "CONFIG_FILE"
    # Nothing was written over the file, and no .bak was made of it.
    assert topics_json(root).read_bytes() == before
    assert not bak(topics_json(root)).exists()


def test_the_error_names_the_bad_field(tmp_path: Path) -> None:
    root = tmp_path / "s"
    eight_queue_store(root)
    bak(topics_json(root)).unlink()
    edit_topic(root, perm="6")
    with pytest.raises(ConfigFileError) as info:
        mqlite.open(root)
    assert info.value.field == "topicConfigTable.t.perm"
    assert "topicConfigTable.t.perm" in str(info.value)
    assert "no .bak" in str(info.value)


def test_valid_bak_stands_in_and_is_not_overwritten(tmp_path: Path) -> None:
    root = tmp_path / "s"
    eight_queue_store(root)
    edit_topic(root, perm="6")  # the .bak still holds t (8 queues)
    good_bak = bak(topics_json(root)).read_bytes()
    with mqlite.open(root) as s:
        assert [(t.name, t.read_queues) for t in s.topics()] == [("t", 8)]
        with s.pull_consumer("g", consume_from=FIRST) as c:
            c.subscribe("t")
            got: list[mqlite.MessageExt] = []
            while len(got) < 80:
                batch = c.poll(5)
                assert batch, f"only {len(got)} of 80 messages"
                got += batch
        assert sorted({m.queue_id for m in got}) == list(range(8))
        s.producer().send(Message("t", b"new"), queue_id=7)  # t exists: no auto-creation
        # The next write replaces the unreadable file and leaves the good .bak as it was.
        s.create_topic("w", 2)
    assert bak(topics_json(root)).read_bytes() == good_bak
    table = json.loads(topics_json(root).read_text())["topicConfigTable"]
    assert (table["t"]["readQueueNums"], table["t"]["perm"]) == (8, 6)
    assert sorted(table) == ["t", "w"]


def test_rocketmq_topics_json_loads(tmp_path: Path) -> None:
    """Both RocketMQ shapes: 4.x (no attributes, no stateVersion) and 5.x (attributes), with
    fields mqlite does not use, and fastjson's tab indentation."""
    for version, extra in (("4", {}), ("5", {"attributes": {"queue.type": "BatchCQ"}})):
        root = tmp_path / version
        (root / "config").mkdir(parents=True)
        entry = {"order": False, "perm": 7, "readQueueNums": 1024, "topicFilterType": "SINGLE_TAG",
                 "topicName": "BenchmarkTest", "topicSysFlag": 0, "writeQueueNums": 1024, **extra}
        data = {"dataVersion": {"counter": 3, "timestamp": 1700000000000},
                "topicConfigTable": {"BenchmarkTest": entry,
                                     "Rmq-Misc|v1%": {**entry, "topicName": "Rmq-Misc|v1%",
                                                      "readQueueNums": 1, "writeQueueNums": 1,
                                                      "perm": 6}},
                "someFieldOfALaterVersion": [1, 2]}
        topics_json(root).write_text(json.dumps(data, indent="\t"))
        with mqlite.open(root) as s:
            assert [(t.name, t.read_queues, t.perm) for t in s.topics()] == [
                ("BenchmarkTest", 1024, 7), ("Rmq-Misc|v1%", 1, 6)]


@pytest.mark.parametrize("count", [1025, 100_000, 4_294_967_295])
def test_queue_count_above_the_maximum_is_a_typed_error(tmp_path: Path, count: int) -> None:
    root = tmp_path / "s"
    with mqlite.open(root) as s:
        s.create_topic("t", 4)
    edit_topic(root, readQueueNums=count, writeQueueNums=count)
    with pytest.raises(ConfigFileError) as info:
        mqlite.open(root)
    assert info.value.field == "topicConfigTable.t.readQueueNums"
    assert "1024" in str(info.value)
    assert not (root / "consumer_groups").exists()


def test_create_topic_rejects_the_same_queue_counts(mem_store: mqlite.Store) -> None:
    for count in (0, 1025, 100_000, 4_294_967_295, 2**40):
        with pytest.raises(mqlite.IllegalArgumentError, match="1024"):
            mem_store.create_topic("t", count)
    mem_store.create_topic("t", 1024)
    assert mem_store.topics()[0].read_queues == 1024
