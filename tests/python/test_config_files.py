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
    """Topic ``t`` with 8 queues and 10 messages in each, then, in a second session, topic
    ``u``: topics.json holds both, its .bak only ``t`` (each clean close writes topics.json
    whole, keeping the previous one as the .bak)."""
    with mqlite.open(root) as s:
        s.create_topic("t", 8)
        p = s.producer()
        for i in range(80):
            p.send(Message("t", b"m%d" % i), queue_id=i % 8)
    with mqlite.open(root) as s:
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
    assert ".bak is missing or empty" in str(info.value)


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


# -- config/consumerOffset.json -------------------------------------------------------------------


def offsets_json(root: Path) -> Path:
    return root / "config" / "consumerOffset.json"


def committed_store(root: Path) -> None:
    """Topic ``t`` (1 queue, 5 messages) and group ``g`` committed at 2 in one session and at 3
    in the next: each clean close writes consumerOffset.json, so its .bak holds 2."""
    with mqlite.open(root) as s:
        s.create_topic("t", 1)
        p = s.producer()
        for _ in range(5):
            p.send(Message("t", b"m"), queue_id=0)
        with s.pull_consumer("g", auto_commit=False, consume_from=FIRST) as c:
            c.subscribe("t")
            c.commit({MessageQueue("t", 0): 2})
    with mqlite.open(root) as s, s.pull_consumer("g", auto_commit=False) as c:
        c.subscribe("t")
        c.commit({MessageQueue("t", 0): 3})


def entry_text(value: str) -> str:
    return '{"offsetTable": {"t@g": {"0": %s}}}' % value


# name -> (file text, the field the error names)
HOSTILE: dict[str, tuple[str, str]] = {
    "negative": (entry_text("-5"), "offsetTable.t@g.0"),
    "2**64": (entry_text(str(2**64)), "offsetTable.t@g.0"),
    "string": (entry_text('"x"'), "offsetTable.t@g.0"),
    "null": (entry_text("null"), "offsetTable.t@g.0"),
    "float": (entry_text("3.0"), "offsetTable.t@g.0"),
    "bool": (entry_text("true"), "offsetTable.t@g.0"),
    "1e400": (entry_text("1e400"), "offsetTable.t@g.0"),
    "5000 digits": (entry_text("9" * 5000), ""),
    "queue id not a number": ('{"offsetTable": {"t@g": {"x": 1}}}', "offsetTable.t@g.x"),
    "negative queue id": ('{"offsetTable": {"t@g": {-1: 1}}}', "offsetTable.t@g.-1"),
    "entry is a list": ('{"offsetTable": {"t@g": [1]}}', "offsetTable.t@g"),
    "key without @": ('{"offsetTable": {"tg": {"0": 1}}}', "offsetTable.tg"),
    "table is a list": ('{"offsetTable": []}', "offsetTable"),
    "no table": ('{"dataVersion": {"counter": 1}}', "offsetTable"),
    "nested 5000 deep": ('{"a": ' + "[" * 5000 + "]" * 5000 + "}", ""),
    "not JSON": ('{"offsetTable": {"t@g": {"0": 3', ""),
    "not UTF-8": ('{"offsetTable": {"t\udcff@g": {}}}', ""),
}


@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_hostile_consumer_offsets_are_a_typed_error_everywhere(tmp_path: Path, case: str) -> None:
    root = tmp_path / "s"
    committed_store(root)
    text, field = HOSTILE[case]
    for f in (offsets_json(root), bak(offsets_json(root))):
        f.write_bytes(text.encode("utf-8", "surrogateescape"))
    def subscribe(s: mqlite.Store, **options: Any) -> None:
        with s.pull_consumer("g", **options) as c:
            c.subscribe("t")

    calls: dict[str, Callable[[mqlite.Store], Any]] = {
        "subscribe": subscribe,
        "subscribe from last": lambda s: subscribe(
            s, consume_from=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET),
        "consumer_groups": lambda s: s.consumer_groups(),
        "consumer_progress": lambda s: s.consumer_progress("g"),
        "reset_offset": lambda s: s.reset_offset("other", "t", offset=0, create=True),
    }
    with mqlite.open(root) as s:
        for name, call in calls.items():
            with pytest.raises(ConfigFileError) as info:
                call(s)
            e = info.value
            assert e.path == str(offsets_json(root)), name
            assert e.field == field, name
            assert str(offsets_json(root)) in str(e)
            if field.startswith("offsetTable.t@g."):
                assert "group 'g'" in str(e) and "topic 't'" in str(e) and "queue" in str(e)
    # Nothing was written over either file.
    for f in (offsets_json(root), bak(offsets_json(root))):
        assert f.read_bytes() == text.encode("utf-8", "surrogateescape")


def test_unreadable_offsets_file_falls_back_to_its_bak_which_the_next_commit_keeps(tmp_path: Path) -> None:
    root = tmp_path / "s"
    committed_store(root)
    good_bak = bak(offsets_json(root)).read_bytes()  # g committed at 2
    offsets_json(root).write_text(entry_text("-5"))
    with mqlite.open(root) as s:
        assert s.consumer_progress("g")[0].committed == 2
        with s.pull_consumer("g", auto_commit=False,
                             consume_from=ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET) as c:
            c.subscribe("t")
            assert [m.queue_offset for m in c.poll(5)] == [2, 3, 4]  # not skipped to the end
            c.commit()
        assert s.consumer_progress("g")[0].committed == 5
    assert bak(offsets_json(root)).read_bytes() == good_bak
    # The next commit rotates as usual.
    with mqlite.open(root) as s, s.pull_consumer("g", auto_commit=False) as c:
        c.subscribe("t")
        c.commit({MessageQueue("t", 0): 4})
    assert json.loads(bak(offsets_json(root)).read_text())["offsetTable"]["t@g"] == {"0": 5}


def test_rocketmq_consumer_offsets_load(tmp_path: Path) -> None:
    """fastjson's output: unquoted queue ids, tab indentation, no dataVersion."""
    root = tmp_path / "s"
    committed_store(root)
    offsets_json(root).write_text('{\n\t"offsetTable":{\n\t\t"t@billing":{0:3,1:5\n\t\t}\n\t}\n}')
    with mqlite.open(root) as s:
        assert s.consumer_groups() == ["billing"]
        assert [(p.queue_id, p.committed) for p in s.consumer_progress("billing")] == [(0, 3), (1, 5)]
        with s.pull_consumer("billing", auto_commit=False) as c:
            c.subscribe("t")
            c.commit({MessageQueue("t", 0): 4})
    data = json.loads(offsets_json(root).read_text())
    assert data["offsetTable"]["t@billing"] == {"0": 4, "1": 5}
    assert data["dataVersion"]["counter"] == 1
