"""Topic metadata that scales: each topic change is one record appended to
``config/topics.journal`` (not a rewrite of ``config/topics.json``), ``Store.create_topics`` writes
the table once for a whole batch, and the journal is folded into ``topics.json`` at close. Every
topic whose creation returned survives a reopen and a ``kill -9``; a torn journal tail is cut."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import mqlite
from mqlite import IllegalArgumentError, InvalidTopicError, Message


def topics_json(root: Path) -> dict[str, dict[str, object]]:
    table: dict[str, dict[str, object]] = json.loads((root / "config" / "topics.json").read_text())[
        "topicConfigTable"
    ]
    return table


def journal(root: Path) -> Path:
    return root / "config" / "topics.journal"


def test_create_topics_writes_the_table_once_and_checks_every_name_first(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with mqlite.open(root) as s:
        s.create_topic("existing", 2)
        size = journal(root).stat().st_size
        assert s.create_topics(["b", "a", "existing", "a"], 3) == ["a", "b"]
        # One append for the batch: two records, whatever the batch's length.
        one_record = journal(root).stat().st_size - size
        assert one_record > 0
        # A bad name anywhere, or an existing topic with exist_ok=False: nothing is created.
        before = journal(root).stat().st_size
        with pytest.raises(InvalidTopicError):
            s.create_topics(["c", "d/e"])
        with pytest.raises(IllegalArgumentError):
            s.create_topics(["c", "existing"], exist_ok=False)
        assert journal(root).stat().st_size == before
        assert [t.name for t in s.topics()] == ["a", "b", "existing"]
        queues = {t.name: t.read_queues for t in s.topics()}
        assert queues == {"a": 3, "b": 3, "existing": 2}  # an existing topic is left as it was
        s.producer().send(Message("a", b"x"), queue_id=2)
        # Nothing rewrote topics.json while the store was open.
        assert not (root / "config" / "topics.json").exists()
    # The clean close folded the journal into topics.json, the file RocketMQ reads.
    assert sorted(topics_json(root)) == ["a", "b", "existing"]
    assert journal(root).stat().st_size == 8
    with mqlite.open(root, read_only=True) as r:
        assert {t.name: t.write_queues for t in r.topics()}["b"] == 3


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import mqlite
    root, n = sys.argv[1], int(sys.argv[2])
    s = mqlite.open(root)
    s.create_topics([f"Batch{i}" for i in range(n)], 1)
    for i in range(5):
        s.create_topic(f"One{i}", 1)
    s.producer().send(mqlite.Message("Auto", b"x"))  # auto-created on its first send
    print("created", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no close: the journal is not compacted
    """
)


def test_topics_whose_creation_returned_survive_a_kill_and_a_reopen(tmp_path: Path) -> None:
    root = tmp_path / "s"
    n = 100
    proc = subprocess.run([sys.executable, "-c", CHILD, str(root), str(n)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout.strip() == "created"
    expected = {f"Batch{i}" for i in range(n)} | {f"One{i}" for i in range(5)} | {"Auto"}
    assert journal(root).stat().st_size > 8
    # A reader replays the journal without changing it.
    with mqlite.open(root, read_only=True) as r:
        assert {t.name for t in r.topics()} == expected
    assert journal(root).stat().st_size > 8
    # The writer compacts it at open; the table is whole after a clean close, and again.
    for _ in range(2):
        with mqlite.open(root) as s:
            assert {t.name for t in s.topics()} == expected
            assert journal(root).stat().st_size == 8
        assert set(topics_json(root)) == expected


def test_a_torn_journal_tail_is_cut_never_read(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with mqlite.open(root) as s:
        s.create_topic("kept", 1)
    with mqlite.open(root) as s:
        s.create_topic("first", 1)
        whole = journal(root).read_bytes()
        s.create_topic("torn", 1)
        both = journal(root).read_bytes()
    # As a crash during the second append leaves it: every cut of its record.
    for cut in range(len(whole) + 1, len(both), 7):
        (root / "config" / "topics.json").write_text(json.dumps({"topicConfigTable": {
            "kept": topics_json(root)["kept"]}}))
        journal(root).write_bytes(both[:cut])
        with mqlite.open(root, read_only=True) as r:
            assert [t.name for t in r.topics()] == ["first", "kept"], cut
    with mqlite.open(root) as s:
        assert [t.name for t in s.topics()] == ["first", "kept"]
        s.create_topic("after", 1)
    assert sorted(topics_json(root)) == ["after", "first", "kept"]


def test_damage_before_the_journal_tail_is_a_config_file_error(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with mqlite.open(root) as s:
        s.create_topic("kept", 1)
    with mqlite.open(root) as s:
        s.create_topics(["a", "b"], 1)
        s.create_topic("c", 1)
        data = bytearray(journal(root).read_bytes())
    data[20] ^= 0x01  # inside the first record, with a whole record after it
    journal(root).write_bytes(bytes(data))
    before = (root / "config" / "topics.json").read_bytes()
    for read_only in (True, False):
        with pytest.raises(mqlite.ConfigFileError) as info:
            mqlite.open(root, read_only=read_only)
        assert info.value.path == str(journal(root))
    assert journal(root).read_bytes() == bytes(data)
    assert (root / "config" / "topics.json").read_bytes() == before


@pytest.mark.perf
def test_ten_thousand_topics_are_created_in_seconds(tmp_path: Path) -> None:
    root = tmp_path / "s"
    names = [f"T{i:05}" for i in range(10_000)]
    with mqlite.open(root) as s:
        start = time.perf_counter()
        assert len(s.create_topics(names, 1)) == 10_000
        elapsed = time.perf_counter() - start
    with mqlite.open(root, read_only=True) as r:
        assert len(r.topics()) == 10_000
    assert elapsed < 30, f"10,000 topics took {elapsed:.1f} s"
