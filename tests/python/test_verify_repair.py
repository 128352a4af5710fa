"""mqlite.verify and mqlite.repair: damage below the checkpoint is named (file, offset, kind,
messages), and an operator's repair brings the store back with exactly the reported messages
lost, every other message at its old offsets (docs/runbook.md)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import mqlite
from helpers import SMALL_FILES
from mqlite import Message, MessageQueue
from test_rocketmq_stores import digest, extract

PAGE = 4096


def _fill(path: Path, n: int, body: bytes = b"payload-%03d" * 6) -> list[mqlite.SendResult]:
    """A closed store with topic ``t`` (one queue) holding ``n`` messages, in 1 MiB files."""
    with mqlite.open(path, **SMALL_FILES) as s:
        s.create_topic("t", 1)
        p = s.producer()
        return [p.send(Message("t", body.replace(b"%03d", b"%03d" % i), keys=[f"k{i}"])) for i in range(n)]


def _log(path: Path) -> Path:
    return path / "commitlog" / ("0" * 20)


def _flip(file: Path, at: int) -> None:
    with open(file, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))


def _size(r: mqlite.SendResult, sent: list[mqlite.SendResult]) -> int:
    i = sent.index(r)
    return sent[i + 1].commit_log_offset - r.commit_log_offset


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _queue(s: mqlite.Store) -> list[mqlite.MessageExt]:
    out: list[mqlite.MessageExt] = []
    offset = 0
    while True:
        got = s.read_result(MessageQueue("t", 0), offset, 32)
        out.extend(got.messages)
        if got.next_offset == offset:
            return out
        offset = got.next_offset


# The complaint: a flipped byte below the checkpoint left a store its writer could never
# open, with no word of what to do.
def test_open_of_damaged_store_names_verify_repair_and_the_runbook(store_path: Path) -> None:
    sent = _fill(store_path, 5)
    _flip(_log(store_path), sent[2].commit_log_offset + 100)
    with pytest.raises(mqlite.CorruptedLogError) as e:
        mqlite.open(store_path)
    text = str(e.value)
    assert "mqlite.repair" in text and "mqlite.verify" in text and "docs/runbook.md" in text
    assert e.value.offset == sent[2].commit_log_offset


@pytest.mark.parametrize(
    "where",
    [
        pytest.param(lambda r, n: 12, id="header"),  # QUEUEID
        pytest.param(lambda r, n: 90, id="body"),
        pytest.param(lambda r, n: n - 24, id="property"),  # inside the user properties
    ],
)
def test_verify_names_a_damaged_record_and_its_message(
    store_path: Path, where: Callable[[mqlite.SendResult, int], int]
) -> None:
    sent = _fill(store_path, 12)
    bad = sent[6]
    _flip(_log(store_path), bad.commit_log_offset + where(bad, _size(bad, sent)))
    report = mqlite.verify(store_path)
    assert not report.ok
    [d] = report.damage
    assert (d.kind, d.file, d.offset, d.file_offset) == (
        "log_record", str(_log(store_path)), bad.commit_log_offset, bad.commit_log_offset,
    )
    assert d.length == _size(bad, sent)
    [m] = d.messages
    assert (m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.msg_id) == (
        "t", 0, bad.queue_offset, bad.commit_log_offset, bad.offset_msg_id,
    )
    assert report.records == len(sent) - 1
    # The index step checks the key index every writer builds; its entry for the damaged
    # record is the log damage's, not damage of its own.
    assert [s.status for s in report.steps] == ["damaged", "ok", "ok"]


def test_verify_names_a_zeroed_page_and_every_message_on_it(store_path: Path) -> None:
    sent = _fill(store_path, 200)
    assert sent[-1].commit_log_offset > 3 * PAGE
    with open(_log(store_path), "r+b") as f:
        f.seek(2 * PAGE)
        f.write(bytes(PAGE))
    touched = [
        r for i, r in enumerate(sent[:-1])
        if r.commit_log_offset < 3 * PAGE and sent[i + 1].commit_log_offset > 2 * PAGE
    ]
    report = mqlite.verify(store_path)
    [d] = report.damage
    assert d.kind in ("log_record", "log_zeroed")
    assert d.offset == touched[0].commit_log_offset
    assert d.offset + d.length == touched[-1].commit_log_offset + _size(touched[-1], sent)
    assert [m.commit_log_offset for m in d.messages] == [r.commit_log_offset for r in touched]
    assert [m.queue_offset for m in d.messages] == [r.queue_offset for r in touched]


def test_verify_names_a_damaged_consume_queue_unit(store_path: Path) -> None:
    sent = _fill(store_path, 10)
    cq = store_path / "consumequeue" / "t" / "0" / ("0" * 20)
    _flip(cq, 4 * 20 + 7)  # the low byte of unit 4's commit-log offset
    report = mqlite.verify(store_path)
    [d] = report.damage
    assert (d.kind, d.file, d.offset, d.file_offset, d.length) == (
        "queue_mismatch", str(cq), 4 * 20, 4 * 20, 20,
    )
    assert [m.queue_offset for m in d.messages] == [4]
    # The record is whole: a repair rebuilds the queue and loses nothing.
    fixed = mqlite.repair(store_path)
    assert fixed.lost == ()
    with mqlite.open(store_path) as s:
        assert [m.commit_log_offset for m in _queue(s)] == [r.commit_log_offset for r in sent]
    assert mqlite.verify(store_path).ok


def test_verify_reports_progress_up_to_the_total(store_path: Path) -> None:
    _fill(store_path, 10)
    calls: list[tuple[int, int]] = []
    assert mqlite.verify(store_path, progress=lambda done, total: calls.append((done, total))).ok
    assert calls and calls[-1][0] == calls[-1][1] > 0
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))


def test_an_exception_in_progress_ends_verify_and_propagates(store_path: Path) -> None:
    _fill(store_path, 3)

    def stop(done: int, total: int) -> None:
        raise KeyError("stop")

    with pytest.raises(KeyError):
        mqlite.verify(store_path, progress=stop)


_WRITER = """
import sys, threading
import mqlite
from mqlite import Message
s = mqlite.open(sys.argv[1])
p = s.producer()
for i in range(100):
    p.send(Message("t", b"x" * 100))
print("ready", flush=True)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
n = 0
while not stop.is_set():
    p.send(Message("t", b"y" * 100))
    n += 1
    if n % 50 == 0:
        print("tick", flush=True)
s.close()
print("closed", flush=True)
"""


def test_verify_beside_a_live_writer_reports_no_damage(
    store_path: Path, spawn_py: Callable[..., subprocess.Popen[str]]
) -> None:
    child = spawn_py(_WRITER, store_path)
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline().strip() == "ready"
    waited: list[str] = []

    def progress(done: int, total: int) -> None:
        # The writer appends while this verification runs: 50 more sends are seen first.
        if not waited:
            assert child.stdout is not None
            waited.append(child.stdout.readline().strip())

    for _ in range(3):
        waited.clear()
        report = mqlite.verify(store_path, progress=progress)
        assert waited == ["tick"]
        assert report.ok, report.damage
        assert report.records >= 100
    child.stdin.write("stop\n")
    child.stdin.flush()
    out, err = child.communicate(timeout=60)
    assert out.splitlines()[-1] == "closed", err
    assert mqlite.verify(store_path).ok


def test_repair_cut_loses_exactly_the_reported_messages(store_path: Path) -> None:
    sent = _fill(store_path, 20)
    _flip(_log(store_path), sent[7].commit_log_offset + 90)
    damaged = _log(store_path).read_bytes()
    report = mqlite.repair(store_path, mode="cut")
    assert report.changed and not report.dry_run
    assert [m.commit_log_offset for m in report.lost] == [r.commit_log_offset for r in sent[7:]]
    assert [m.queue_offset for m in report.lost] == list(range(7, 20))
    assert [m.unique_id for m in report.lost][1:] == [r.msg_id for r in sent[8:]]
    assert report.log_end_after == sent[7].commit_log_offset
    assert any(a.startswith("queue t:0 now ends at offset 7 (it held up to 19)") for a in report.actions)
    # The copy and the report are kept aside.
    assert report.kept_aside is not None and report.report_file is not None
    assert (Path(report.kept_aside) / "commitlog" / ("0" * 20)).read_bytes() == damaged
    on_disk = json.loads(Path(report.report_file).read_text())
    assert [m["commit_log_offset"] for m in on_disk["lost"]] == [m.commit_log_offset for m in report.lost]
    with mqlite.open(store_path) as s:
        kept = _queue(s)
        assert [(m.queue_offset, m.commit_log_offset, m.body) for m in kept] == [
            (r.queue_offset, r.commit_log_offset, b"payload-%03d" % i * 6) for i, r in enumerate(sent[:7])
        ]
        assert s.producer().send(Message("t", b"after")).queue_offset == 7
    assert mqlite.verify(store_path).ok


def test_repair_skip_loses_only_the_damaged_messages_and_moves_no_offset(store_path: Path) -> None:
    sent = _fill(store_path, 20)
    _flip(_log(store_path), sent[5].commit_log_offset + 12)
    _flip(_log(store_path), sent[12].commit_log_offset + 90)
    report = mqlite.repair(store_path, mode="skip")
    lost = {sent[5].commit_log_offset, sent[12].commit_log_offset}
    assert {m.commit_log_offset for m in report.lost} == lost
    assert {m.queue_offset for m in report.lost} == {5, 12}
    with mqlite.open(store_path) as s:
        kept = [r for r in sent if r.commit_log_offset not in lost]
        assert [(m.queue_offset, m.commit_log_offset) for m in _queue(s)] == [
            (r.queue_offset, r.commit_log_offset) for r in kept
        ]
        for r in kept:
            assert s.get(r.offset_msg_id).keys == (f"k{sent.index(r)}",)
        assert s.producer().send(Message("t", b"after")).queue_offset == 20
    assert mqlite.verify(store_path).ok


def test_repair_skip_of_a_zeroed_page_keeps_every_other_message(store_path: Path) -> None:
    sent = _fill(store_path, 200)
    with open(_log(store_path), "r+b") as f:
        f.seek(2 * PAGE)
        f.write(bytes(PAGE))
    report = mqlite.repair(store_path)
    lost = {m.commit_log_offset for m in report.lost}
    assert lost and all(2 * PAGE - 300 < o < 3 * PAGE for o in lost)
    with mqlite.open(store_path) as s:
        assert [m.commit_log_offset for m in _queue(s)] == [
            r.commit_log_offset for r in sent if r.commit_log_offset not in lost
        ]


def test_dry_run_changes_nothing_and_reports_the_same_loss(store_path: Path) -> None:
    sent = _fill(store_path, 10)
    _flip(_log(store_path), sent[3].commit_log_offset + 90)
    before = _tree_hash(store_path)
    dry = mqlite.repair(store_path, mode="cut", dry_run=True)
    assert _tree_hash(store_path) == before
    assert dry.dry_run and dry.kept_aside is None and dry.report_file is None
    real = mqlite.repair(store_path, mode="cut")
    assert dry.lost == real.lost and dry.actions == real.actions


def test_repair_refuses_a_store_that_is_open(store_path: Path) -> None:
    sent = _fill(store_path, 3)
    with mqlite.open(store_path):
        before = _tree_hash(store_path / "commitlog")
        with pytest.raises(mqlite.StoreLockedError):
            mqlite.repair(store_path)
        assert _tree_hash(store_path / "commitlog") == before
        assert not (store_path / "repair").exists()
    assert len(sent) == 3


def test_repair_of_an_undamaged_store_changes_nothing(store_path: Path) -> None:
    _fill(store_path, 3)
    before = _tree_hash(store_path)
    report = mqlite.repair(store_path)
    assert not report.changed and report.lost == () and report.kept_aside is None
    assert _tree_hash(store_path) == before


def test_bad_arguments_are_typed_errors_and_write_nothing(tmp_path: Path, store_path: Path) -> None:
    _fill(store_path, 1)
    before = _tree_hash(store_path)
    with pytest.raises(mqlite.IllegalArgumentError):
        mqlite.repair(store_path, mode="bogus")  # type: ignore[arg-type]
    with pytest.raises(mqlite.IllegalArgumentError):
        mqlite.repair(store_path, dry_run="yes")  # type: ignore[arg-type]
    with pytest.raises(mqlite.StoreNotFoundError):
        mqlite.verify(tmp_path / "no-store")
    with pytest.raises(mqlite.StoreNotADirectoryError):
        mqlite.repair(_log(store_path))
    (tmp_path / "empty").mkdir()
    with pytest.raises(mqlite.IllegalArgumentError):
        mqlite.verify(tmp_path / "empty")
    with pytest.raises(mqlite.IllegalArgumentError):
        mqlite.verify(123)  # type: ignore[arg-type]
    with pytest.raises(mqlite.IllegalArgumentError):
        mqlite.verify(store_path, progress=5)  # type: ignore[arg-type]
    assert _tree_hash(store_path) == before


def test_verify_checks_a_store_rocketmq_wrote_and_its_index(tmp_path: Path) -> None:
    root = extract("rmq49", tmp_path)
    before = digest(root)
    report = mqlite.verify(root)
    assert report.ok, report.damage
    assert report.records == report.units == 1500
    steps = {s.name: s for s in report.steps}
    assert steps["index"].status == "ok" and steps["index"].detail.startswith("3544 entries")
    assert digest(root) == before  # reading only
    # Damage the key hash of the first entry of the first index file (RocketMQ's layout: a
    # 40-byte header, 4-byte slots, 20-byte entries numbered from 1).
    index = sorted((root / "index").iterdir())[0]
    slots = (index.stat().st_size - 40) // 84
    entry = 40 + slots * 4 + 20
    _flip(index, entry + 3)
    [d] = mqlite.verify(root).damage
    assert (d.kind, d.file, d.offset, d.length) == ("index_entry", str(index), entry, 20)


def test_a_log_that_ends_before_its_durable_end_is_named_and_cut(store_path: Path) -> None:
    sent = _fill(store_path, 10)
    with open(_log(store_path), "r+b") as f:  # the last 4 records lost: zeros to the end
        f.seek(sent[6].commit_log_offset)
        f.write(bytes(sent[-1].commit_log_offset + 4096 - sent[6].commit_log_offset))
    report = mqlite.verify(store_path)
    [d] = report.damage
    assert (d.kind, d.offset) == ("log_short", sent[6].commit_log_offset)
    assert [m.queue_offset for m in d.messages] == [6, 7, 8, 9]
    fixed = mqlite.repair(store_path, mode="skip")  # nothing follows: skip cuts there
    assert [m.commit_log_offset for m in fixed.lost] == [r.commit_log_offset for r in sent[6:]]
    with mqlite.open(store_path) as s:
        assert [m.queue_offset for m in _queue(s)] == list(range(6))
