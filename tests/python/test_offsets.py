"""config/consumerOffset.json: shape, atomic writes, .bak, fastjson keys, progress and reset."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import mqlite
from mqlite import ConsumeFromWhere, Message, MessageModel, MessageQueue
from mqlite.offsets import OffsetFile, group_offsets

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def fill(store: mqlite.Store, n: int = 10) -> None:
    store.create_topic("t", 2)
    p = store.producer()
    for i in range(n):
        p.send(Message("t", str(i).encode()), queue_id=i % 2)


def test_file_shape_is_rocketmq(store: mqlite.Store, store_path: Path) -> None:
    fill(store)
    with store.pull_consumer("billing", consume_from=FIRST) as c:
        c.subscribe("t")
        while c.poll(0.05):
            pass
    # While the store is open the group's commits go to its own file, in the same shape.
    config = store_path / "config"
    for path in (config / "consumerOffset.d" / "billing.json", None):
        if path is None:
            store.close()  # the writer's close folds the group files into consumerOffset.json
            path = config / "consumerOffset.json"
            assert not list((config / "consumerOffset.d").iterdir())
        data = json.loads(path.read_text())
        assert data["offsetTable"] == {"t@billing": {"0": 5, "1": 5}}
        assert set(data["dataVersion"]) == {"counter", "stateVersion", "timestamp"}
        assert data["dataVersion"]["counter"] >= 1
    assert (config / "consumerOffset.d").exists()
    assert not list(config.glob(".*.tmp"))


def test_reader_accepts_fastjson_unquoted_keys_and_falls_back_to_bak(tmp_path: Path) -> None:
    f = OffsetFile(tmp_path / "consumerOffset.json", tmp_path / ".lock")
    f.path.write_text('{"offsetTable":{"t@g":{0:250,1:7},"%RETRY%g@g":{0:3}}}')
    assert f.load() == {"t@g": {0: 250, 1: 7}, "%RETRY%g@g": {0: 3}}
    f.update("t@g", {1: 9})
    assert f.get("t@g") == {0: 250, 1: 9}
    f.path.write_text("{ torn")
    assert f.get("t@g") == {0: 250, 1: 7}  # the previous version, from .bak
    f.path.unlink()
    assert f.get("t@g") == {0: 250, 1: 7}


def test_commits_from_several_writers_merge(tmp_path: Path) -> None:
    a = group_offsets(tmp_path)
    b = group_offsets(tmp_path)
    a.update("t@g1", {0: 1})
    b.update("t@g2", {0: 2})
    a.update("t@g1", {1: 5})
    assert a.load() == {"t@g1": {0: 1, 1: 5}, "t@g2": {0: 2}}
    b.update("t@g1", {0: 9}, replace=True)
    assert b.get("t@g1") == {0: 9}


def test_progress_and_lag(store: mqlite.Store) -> None:
    fill(store)
    with store.pull_consumer("g", consume_from=FIRST, auto_commit=False) as c:
        c.subscribe("t")
        c.commit({MessageQueue("t", 0): 2})
    progress = store.consumer_progress("g")
    assert [(p.message_queue, p.committed, p.max_offset, p.lag) for p in progress] == [
        (MessageQueue("t", 0), 2, 5, 3),
        (MessageQueue("t", 1), 0, 5, 5),
    ]
    assert store.consumer_progress("nobody") == []


def test_consumer_groups_lists_the_groups_with_committed_offsets(store: mqlite.Store) -> None:
    assert store.consumer_groups() == []
    fill(store)
    for group in ("orders-b", "audit", "orders-a"):
        with store.pull_consumer(group, consume_from=FIRST, auto_commit=False) as c:
            c.subscribe("t")
            c.commit({MessageQueue("t", 0): 1})
    # a broadcasting consumer keeps its offsets in its own file: not a group of the shared table
    with store.pull_consumer("fan", message_model=mqlite.MessageModel.BROADCASTING,
                             client_id="c1", consume_from=FIRST) as c:
        c.subscribe("t")
        c.commit()
    assert store.consumer_groups() == ["audit", "orders-a", "orders-b"]


def test_reset_offset(store: mqlite.Store) -> None:
    fill(store)
    c = store.pull_consumer("g", consume_from=FIRST)
    c.subscribe("t")
    with pytest.raises(mqlite.ConsumerGroupActiveError):
        store.reset_offset("g", "t", to="latest")
    c.close()
    assert store.reset_offset("g", "t", to="latest") == {MessageQueue("t", 0): 5, MessageQueue("t", 1): 5}
    assert store.reset_offset("g", "t", offset=3) == {MessageQueue("t", 0): 3, MessageQueue("t", 1): 3}
    assert store.reset_offset("g", "t", offset=99)[MessageQueue("t", 0)] == 5
    past = datetime.now() - timedelta(hours=1)
    assert set(store.reset_offset("g", "t", to=past).values()) == {0}
    store.reset_offset("g", "t", to="earliest")
    with store.pull_consumer("g") as c:
        c.subscribe("t")
        got = []
        while batch := c.poll(0.05):
            got += batch
    assert len(got) == 10
    with pytest.raises(mqlite.IllegalArgumentError):
        store.reset_offset("g", "t", to="middle")  # type: ignore[arg-type]
    with pytest.raises(mqlite.IllegalArgumentError, match="one of"):
        store.reset_offset("g", "t", to="latest", offset=1)
    with pytest.raises(mqlite.IllegalArgumentError, match="one of"):
        store.reset_offset("g", "t")
    with pytest.raises(TypeError):
        store.reset_offset("g", "t", offset=True)


def test_reset_offset_to_an_int_is_a_deprecated_queue_offset(store: mqlite.Store) -> None:
    fill(store)
    store.reset_offset("g", "t", offset=0, create=True)
    with pytest.warns(DeprecationWarning, match="offset="):
        assert set(store.reset_offset("g", "t", to=3).values()) == {3}
    assert store.consumer_progress("g")[0].committed == 3


def test_reset_offset_of_an_unknown_group_is_an_error_unless_created(store: mqlite.Store, store_path: Path) -> None:
    fill(store)
    with store.pull_consumer("orders", consume_from=FIRST) as c:
        c.subscribe("t")
    before = offsets_file_bytes(store_path)
    with pytest.raises(mqlite.ConsumerGroupNotFoundError, match="'ordres'.*create=True") as info:
        store.reset_offset("ordres", "t", to="latest")  # misspelled
    assert "orders" in str(info.value)  # the known groups are named
    assert offsets_file_bytes(store_path) == before, "nothing was written"
    assert store.consumer_groups() == ["orders"]
    # A group is known by its commits of any topic.
    store.create_topic("u", 1)
    assert store.reset_offset("orders", "u", to="earliest") == {MessageQueue("u", 0): 0}
    assert store.reset_offset("fresh", "t", to="latest", create=True)[MessageQueue("t", 1)] == 5
    assert store.consumer_groups() == ["fresh", "orders"]


def offsets_file_bytes(root: Path) -> dict[str, bytes]:
    """Every clustering offsets file: consumerOffset.json and the per-group files."""
    config = root / "config"
    files = [config / "consumerOffset.json", *sorted((config / "consumerOffset.d").glob("*"))]
    return {p.name: p.read_bytes() for p in files if p.exists()}


def test_broadcast_offsets_are_per_consumer(store: mqlite.Store, store_path: Path) -> None:
    fill(store)
    for cid in ("one", "two"):
        with store.pull_consumer(
            "b", message_model=MessageModel.BROADCASTING, client_id=cid, consume_from=FIRST
        ) as c:
            c.subscribe("t")
            got = []
            while batch := c.poll(0.05):
                got += batch
            assert len(got) == 10
    for cid in ("one", "two"):
        data = json.loads((store_path / "config" / "broadcast" / "b" / f"{cid}.json").read_text())
        assert data["offsetTable"] == {"t@b": {"0": 5, "1": 5}}
    assert store.consumer_progress("b") == []  # not in the shared clustering file
    with store.pull_consumer("b", message_model=MessageModel.BROADCASTING, client_id="one") as c:
        c.subscribe("t")
        assert c.poll(0.05) == []  # resumes where "one" stopped


def test_a_commit_reads_and_writes_only_its_groups_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 groups x 16 queues: each group's commit touches its own file, whatever the number
    of groups; the table reloads whole, and a compaction folds it into consumerOffset.json."""
    from mqlite import offsets as offsets_mod

    f = group_offsets(tmp_path, durable=False)
    want = {f"t@g{g}": {q: g * 100 + q for q in range(16)} for g in range(1000)}
    for key, queues in want.items():
        f.update(key, queues)
    config = tmp_path / "config"
    assert not (config / "consumerOffset.json").exists()
    assert len(list((config / "consumerOffset.d").glob("*.json"))) == 1000
    touched: list[Path] = []
    real_read, real_write = offsets_mod.read_with_backup, offsets_mod.atomic_write_json
    monkeypatch.setattr(offsets_mod, "read_with_backup", lambda p, d: (touched.append(p), real_read(p, d))[1])
    monkeypatch.setattr(offsets_mod, "atomic_write_json",
                        lambda p, *a, **k: (touched.append(p), real_write(p, *a, **k))[1])
    f.update("u@g500", {0: 1})
    f.update("t@g500", {3: 10**6})
    assert set(touched) == {config / "consumerOffset.d" / "g500.json"}
    monkeypatch.undo()
    want["u@g500"] = {0: 1}
    want["t@g500"][3] = 10**6
    assert group_offsets(tmp_path).load() == want
    assert group_offsets(tmp_path).get("t@g7") == want["t@g7"]
    f.compact()
    assert list((config / "consumerOffset.d").iterdir()) == []
    table = json.loads((config / "consumerOffset.json").read_text())["offsetTable"]
    assert table["t@g500"]["3"] == 10**6 and len(table) == 1001
    assert group_offsets(tmp_path).load() == want
    # After the compaction, a group's commit is laid over the main file again, queue by queue.
    f.update("t@g1", {0: 5})
    assert group_offsets(tmp_path).get("t@g1") == {**want["t@g1"], 0: 5}
    # A reset replaces the entry everywhere (it compacts: no group file lays older queues over it).
    f.update("t@g1", {2: 1}, replace=True)
    assert group_offsets(tmp_path).get("t@g1") == {2: 1}
    assert list((config / "consumerOffset.d").iterdir()) == []


def test_a_group_file_holding_another_groups_key_is_a_config_file_error(tmp_path: Path) -> None:
    f = group_offsets(tmp_path, durable=False)
    f.update("t@g", {0: 1})
    path = tmp_path / "config" / "consumerOffset.d" / "g.json"
    path.write_text('{"offsetTable": {"t@other": {"0": 3}}}')
    with pytest.raises(mqlite.ConfigFileError) as info:
        f.load()
    assert info.value.path == str(path) and info.value.field == "offsetTable.t@other"
