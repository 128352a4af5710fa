"""The ``mqlite`` command line and the runnable examples."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import mqlite
from mqlite import Message
from mqlite.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def filled(store_path: Path) -> Path:
    with mqlite.open(store_path) as s:
        s.create_topic("orders", 2)
        s.create_topic("empty", 1, perm=4)
        p = s.producer()
        for i in range(5):
            p.send(Message("orders", f"o{i}".encode(), tags="T", keys=f"k{i}"), queue_id=0)
        p.send(Message("orders", b"\xff\xfe"), queue_id=1)
    return store_path


def _json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_topics_json(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics", str(filled), "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["orders"]["messages"] == 6 and rows["orders"]["write_queues"] == 2
    assert rows["empty"]["messages"] == 0 and rows["empty"]["perm"] == 4


def test_topics_table(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topics", str(filled)]) == 0
    out = capsys.readouterr().out
    assert "orders" in out and "empty" in out


@pytest.fixture
def grouped(filled: Path) -> Path:
    """``filled`` with two groups: ``done`` has consumed everything, ``behind`` nothing."""
    with mqlite.open(filled) as s:
        s.reset_offset("done", "orders", to="latest", create=True)
        s.reset_offset("behind", "orders", to="earliest", create=True)
    return filled


def test_groups_lists_each_group_with_its_lag(grouped: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["groups", str(grouped), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows == [
        {"group": "behind", "topics": 1, "queues": 2, "lag": 6},
        {"group": "done", "topics": 1, "queues": 2, "lag": 0},
    ]
    assert main(["groups", str(grouped)]) == 0
    out = capsys.readouterr().out
    assert "behind" in out and "done" in out


def test_groups_of_one_group_show_each_queue(grouped: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["groups", str(grouped), "-g", "behind", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"topic": "orders", "queue_id": 0, "committed": 0, "max_offset": 5, "lag": 5},
        {"topic": "orders", "queue_id": 1, "committed": 0, "max_offset": 1, "lag": 1},
    ]


def test_groups_errors(grouped: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["groups", str(grouped), "-g", "nobody"]) == 1
    assert "'nobody' has no committed offsets" in capsys.readouterr().err
    assert main(["groups", str(grouped), "-g", "bad group!"]) == 1
    assert "[INVALID_GROUP]" in capsys.readouterr().err


def test_names_that_would_leave_the_store_are_refused(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for topic in ("../../outside", str(filled.parent / "abs"), ".."):
        assert main(["tail", str(filled), topic]) == 1
        assert "[INVALID_TOPIC]" in capsys.readouterr().err
    for group in ("../g", str(filled.parent / "abs")):
        assert main(["groups", str(filled), "-g", group]) == 1
        assert "[INVALID_GROUP]" in capsys.readouterr().err
    assert sorted(p.name for p in filled.parent.iterdir()) == [filled.name]


def test_groups_of_a_store_without_consumers(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["groups", str(filled), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_tail_offsets(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def tail(*args: str) -> list[dict[str, object]]:
        assert main(["tail", str(filled), "orders", "--json", *args]) == 0
        return _json_lines(capsys.readouterr().out)

    rows = tail("-q", "0", "-o", "beginning", "-n", "100")
    assert [r["body"] for r in rows] == [f"o{i}" for i in range(5)]
    assert rows[0]["keys"] == ["k0"] and rows[0]["tags"] == "T"
    assert [r["body"] for r in tail("-q", "0", "-n", "2")] == ["o3", "o4"]
    assert [r["queue_offset"] for r in tail("-q", "0", "-o", "1", "-n", "2")] == [1, 2]
    assert [r["queue_offset"] for r in tail("-q", "0", "-o", "-2")] == [3, 4]
    both = tail("-o", "beginning")
    assert len(both) == 6
    binary = [r for r in both if r["queue_id"] == 1]
    assert binary[0]["body_encoding"] == "base64" and binary[0]["body"] == "//4="


def test_tail_table_and_errors(filled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tail", str(filled), "orders", "-q", "0"]) == 0
    assert "o4" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["tail", str(filled), "orders", "-o", "middle"])


def test_bad_queue_count_and_a_directory_without_a_store(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tail", str(filled), "orders", "-q", "7"]) == 1
    assert "INVALID_QUEUE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tail", str(filled), "orders", "-n", "-3"])
    capsys.readouterr()
    (tmp_path / "plain").mkdir()
    assert main(["topics", str(tmp_path / "plain")]) == 1
    assert "holds no mqlite store" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    for read_only in (False, True):
        with pytest.raises(mqlite.StoreNotADirectoryError):
            mqlite.open(tmp_path / "file", read_only=read_only)


def test_demo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--dir", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    assert "send_batch" in out and "unchanged" in out and "CHANGED" not in out


def test_python_dash_m(run_py: Callable[..., subprocess.CompletedProcess[str]], filled: Path) -> None:
    done = run_py("import runpy, sys; sys.argv = ['mqlite', 'topics', sys.argv[1], '--json']; "
                  "runpy.run_module('mqlite', run_name='__main__')", filled)
    assert done.returncode == 0, done.stderr
    assert {r["name"] for r in json.loads(done.stdout)} == {"orders", "empty"}


def test_quickstart_example_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py"), str(tmp_path / "qs")],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "reopened" in done.stdout and "tagged 'paid'" in done.stdout
    with mqlite.open(tmp_path / "qs", read_only=True) as s:
        assert sum(s.offsets(mq)[1] for mq in s.queues("orders")) == 5
