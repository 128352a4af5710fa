"""The ``meta`` file (rust/FORMAT.md §11): a store records its geometry when it is created, every
open takes the geometry from it, an explicit size that differs is a typed error that changes
nothing, and a store written before the file existed still opens both ways."""

from __future__ import annotations

import hashlib
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

import mqlite
from mqlite import Message, MessageQueue

LEGACY = Path(__file__).resolve().parent.parent / "fixtures" / "legacy" / "store.tar.gz"
SMALL = {"commit_log_file_size": 64 << 10, "consume_queue_file_units": 100, "max_message_size": 4096}


def digest(root: Path) -> dict[str, str]:
    """Every regular file under ``root`` and the SHA-256 of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def read_meta(root: Path) -> tuple[int, int, int, str]:
    """(format version, commit-log file size, consume-queue units, created by) of slot A, after
    checking both slots' magic and CRC and that slot B repeats slot A."""
    b = (root / "meta").read_bytes()
    assert len(b) == 4096
    slot = b[:128]
    assert b[2048:2176] == slot and b[128:2048] == bytes(1920) and b[2176:] == bytes(1920)
    magic, version, size, units, n = struct.unpack_from(">IIQQB", slot)
    assert magic == 0x4D514C4D
    assert struct.unpack_from(">I", slot, 124)[0] == zlib.crc32(slot[:124])
    return version, size, units, slot[25 : 25 + n].decode()


def small_store(path: Path, messages: int = 10) -> None:
    with mqlite.open(path, **SMALL) as store:
        store.create_topic("t", 1)
        with store.producer() as p:
            for i in range(messages):
                p.send(Message("t", b"%d" % i))


def test_a_new_store_records_its_geometry(tmp_path: Path) -> None:
    small_store(tmp_path / "s")
    version, size, units, created_by = read_meta(tmp_path / "s")
    assert (version, size, units) == (1, 64 << 10, 100)
    assert created_by == f"mqlite {mqlite.__version__}"
    # Every later open, the read-only one included, uses it without options.
    with mqlite.open(tmp_path / "s", read_only=True) as reader:
        stats = reader.stats()
        assert (stats["commit_log_file_size"], stats["consume_queue_file_units"]) == (64 << 10, 100)
        assert reader.offsets(MessageQueue("t", 0)) == (0, 10)


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "read-only"])
@pytest.mark.parametrize(
    ("field", "given", "stored"),
    [("commit_log_file_size", 1 << 20, 64 << 10), ("consume_queue_file_units", 200, 100)],
)
def test_an_explicit_size_that_differs_from_the_stores_is_invalid_config(
    tmp_path: Path, read_only: bool, field: str, given: int, stored: int
) -> None:
    """One commit-log file and one queue file: the shape in which a wrong size used to be
    taken for a roll cut short, and the file regrown to it."""
    path = tmp_path / "s"
    small_store(path)
    before = digest(path)
    with pytest.raises(mqlite.InvalidConfigError) as info:
        mqlite.open(path, read_only=read_only, **{field: given})
    err = info.value
    assert (err.field, err.stored, err.given) == (field, stored, given)  # type: ignore[attr-defined]
    assert err.code == "INVALID_CONFIG"
    assert field in str(err) and str(stored) in str(err) and str(given) in str(err)
    assert digest(path) == before, "a refused open changed the store"
    # The size the store has is accepted when given.
    with mqlite.open(path, read_only=read_only, **{field: stored}) as s:
        assert s.offsets(MessageQueue("t", 0)) == (0, 10)


def test_an_option_of_the_wrong_type_names_its_field(tmp_path: Path) -> None:
    with pytest.raises(mqlite.InvalidConfigError) as info:
        mqlite.open(tmp_path / "s", commit_log_file_size="big")
    assert info.value.field == "commit_log_file_size"  # type: ignore[attr-defined]
    with pytest.raises(mqlite.InvalidConfigError) as info:
        mqlite.open(tmp_path / "s", commit_log_file_size=1000)  # the core's range check
    assert info.value.field == "commit_log_file_size"  # type: ignore[attr-defined]
    assert (info.value.stored, info.value.given) == (None, None)  # type: ignore[attr-defined]
    assert not (tmp_path / "s").exists()


def test_a_damaged_meta_file_is_a_config_file_error_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s"
    small_store(path)
    meta = bytearray((path / "meta").read_bytes())
    meta[10] ^= 1  # slot A: the other copy stands in
    (path / "meta").write_bytes(bytes(meta))
    with mqlite.open(path, read_only=True) as reader:
        assert reader.stats()["commit_log_file_size"] == 64 << 10
    meta[2048 + 10] ^= 1  # slot B too
    (path / "meta").write_bytes(bytes(meta))
    before = digest(path)
    for read_only in (True, False):
        with pytest.raises(mqlite.ConfigFileError) as info:
            mqlite.open(path, read_only=read_only)
        assert info.value.path == str(path / "meta")  # type: ignore[attr-defined]
    assert digest(path) == before


def extract_legacy(into: Path) -> Path:
    subprocess.run(["tar", "-xzf", str(LEGACY), "-C", str(into)], check=True)
    return into / "legacy-store"


def body(topic: str, i: int) -> bytes:
    # tests/fixtures/legacy/make_store.py
    return b"%s-%04d " % (topic.encode(), i) + bytes([65 + i % 26]) * 200


def assert_legacy_messages(store: mqlite.Store) -> None:
    for q in (0, 1):
        got = store.read(MessageQueue("orders", q), 0, 200)
        assert [m.body for m in got] == [body("orders", i) for i in range(q, 300, 2)]
    got = store.read(MessageQueue("events", 0), 0, 100)
    assert [m.body for m in got] == [body("events", i) for i in range(40)]
    progress = {(p.topic, p.queue_id): p.committed for p in store.consumer_progress("billing")}
    assert progress == {("orders", 0): 40, ("orders", 1): 30}


def test_a_store_written_before_meta_opens_both_ways(tmp_path: Path) -> None:
    """The committed fixture has 64 KiB commit-log files and 100-unit queue files and no
    ``meta``: a read-only open finds the sizes and writes nothing; a writer open records them
    and changes no data byte; later opens use the record."""
    root = extract_legacy(tmp_path)
    before = digest(root)
    with mqlite.open(root, read_only=True) as reader:
        assert (reader.stats()["commit_log_file_size"], reader.stats()["consume_queue_file_units"]) == (
            64 << 10,
            100,
        )
        assert_legacy_messages(reader)
    assert digest(root) == before, "a read-only open changed or added a file"

    with mqlite.open(root) as store:
        assert_legacy_messages(store)
    after = digest(root)
    data = ("commitlog/", "consumequeue/")
    assert {k: v for k, v in after.items() if k.startswith(data)} == {
        k: v for k, v in before.items() if k.startswith(data)
    }
    assert read_meta(root) == (1, 64 << 10, 100, f"mqlite {mqlite.__version__} (sizes from files)")

    with mqlite.open(root) as store:
        store.producer().send(Message("orders", b"after"), queue_id=0)
    with mqlite.open(root, read_only=True) as reader:
        assert reader.read(MessageQueue("orders", 0), 150, 2)[0].body == b"after"
    # The geometry the files showed is the store's now: a different size given is refused.
    with pytest.raises(mqlite.InvalidConfigError):
        mqlite.open(root, consume_queue_file_units=50_000)
