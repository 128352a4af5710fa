"""Golden files of rust/FORMAT.md §11 to §13 that Python writes or checks: the offsets files
(clustering and broadcasting), the consumer-group lock files and the ``meta`` file as a store
writes it. The fixtures come from tests/fixtures/make_golden.py, which builds them from the
spec, not from mqlite."""

from __future__ import annotations

import hashlib
import stat
import types
from pathlib import Path

import pytest

import mqlite
import mqlite.offsets
from mqlite import Message, MessageModel, MessageQueue
from mqlite.offsets import broadcast_offsets, group_offsets

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GOLDEN_OFFSETS = (FIXTURES / "consumer_offset.json").read_bytes()


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The offsets writer's wall clock reads 1700000000 s (the fixture's timestamp)."""
    monkeypatch.setattr(mqlite.offsets, "time", types.SimpleNamespace(time=lambda: 1_700_000_000.0))


def write_golden_table(f: mqlite.offsets.OffsetFile) -> None:
    f.update("orders@billing", {1: 7, 0: 12})
    f.update("events@billing", {0: 3})


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_the_clustering_offsets_file_has_the_golden_bytes(tmp_path: Path, fixed_clock: None) -> None:
    with mqlite.open(tmp_path / "s") as store:
        write_golden_table(group_offsets(tmp_path / "s"))
        # A group's commits go to its own file, in the same form (FORMAT.md §12).
        path = tmp_path / "s" / "config" / "consumerOffset.d" / "billing.json"
        assert path.read_bytes() == GOLDEN_OFFSETS
        assert mode(path) == 0o600
        # The first write had no file to keep; the second kept the first as .bak.
        assert b'"counter": 1' in path.with_name("billing.json.bak").read_bytes()
        assert (tmp_path / "s" / "config" / ".consumerOffset.lock").stat().st_size == 0
        assert store.consumer_groups() == ["billing"]
    # The clean close folded it into consumerOffset.json, the first version of that file.
    main = tmp_path / "s" / "config" / "consumerOffset.json"
    assert main.read_bytes() == GOLDEN_OFFSETS.replace(b'"counter": 2', b'"counter": 1')
    assert mode(main) == 0o600
    assert not path.exists() and not path.with_name("billing.json.bak").exists()


def test_the_golden_offsets_file_and_fastjsons_form_of_it_are_read(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with mqlite.open(root) as store:
        store.create_topic("orders", 2)
        store.create_topic("events", 1)
        with store.producer() as p:
            for i in range(20):
                p.send(Message("orders", b"%d" % i), queue_id=i % 2)
                p.send(Message("events", b"%d" % i), queue_id=0)
    want = {("events", 0): 3, ("orders", 0): 12, ("orders", 1): 7}
    fastjson = b'{"offsetTable":{"events@billing":{0:3},"orders@billing":{0:12,1:7}}}'
    for text in (GOLDEN_OFFSETS, fastjson):
        (root / "config" / "consumerOffset.json").write_bytes(text)
        with mqlite.open(root, read_only=True) as store:
            got = {(p.topic, p.queue_id): p.committed for p in store.consumer_progress("billing")}
            assert got == want


def test_a_broadcasting_consumers_offsets_file_has_the_same_form(tmp_path: Path, fixed_clock: None) -> None:
    root = tmp_path / "s"
    with mqlite.open(root) as store:
        store.create_topic("orders", 2)
        write_golden_table(broadcast_offsets(root, "billing", "c1"))
        d = root / "config" / "broadcast" / "billing"
        assert (d / "c1.json").read_bytes() == GOLDEN_OFFSETS
        c = store.pull_consumer("billing", message_model=MessageModel.BROADCASTING, client_id="c1")
        c.subscribe("orders")
        assert {(mq.queue_id, c.committed(mq)) for mq in c.assignment()} == {(0, 12), (1, 7)}
        # The writers' lock and the live consumer's id lock: empty files of their own.
        assert {p.name: p.stat().st_size for p in d.glob(".c1.*.lock")} == {
            ".c1.offsets.lock": 0,
            ".c1.member.lock": 0,
        }
        c.close()


def test_the_consumer_group_lock_files(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with mqlite.open(root) as store:
        store.create_topic("orders", 2)
        c = store.pull_consumer("billing", client_id="c1")
        c.subscribe("orders")
        c.poll(timeout=0)
        assert sorted(c.assignment()) == [MessageQueue("orders", 0), MessageQueue("orders", 1)]
        group = root / "consumer_groups" / "billing"
        files = {
            str(p.relative_to(group)): (p.read_bytes(), mode(p))
            for p in group.rglob("*") if p.is_file()
        }
        slot = next(name for name in files if name.startswith("slots.d/"))
        assert files == {
            "members.d/c1.lock": (b"", 0o600),
            "orders/members/c1": (b"", 0o600),
            # A clustering consumer subscribes its group's retry topic too (docs/consumers.md,
            # Retries); it has no queue, so no slot, until a message is sent back.
            "%RETRY%billing/members/c1": (b"", 0o600),
            # The queues the member holds, for reports (ownership is the byte locks below).
            "members.d/c1.owned": (b"orders 0\norders 1\n", 0o600),
            "queues.lock": (b"", 0o600),
            slot: (b"orders", 0o600),
        }
        # The slot number: linear probing from the name's BLAKE2b-64 hash modulo 2**30.
        assert slot == "slots.d/" + str(
            int.from_bytes(hashlib.blake2b(b"orders", digest_size=8).digest(), "big") % (1 << 30)
        )
        # The owner's byte locks: queue q of the topic at byte slot * 2**32 + q.
        first = int(slot.split("/")[1]) << 32
        held = _ofd_write_locks(group / "queues.lock")
        assert held == [(first, first + 1)]  # bytes first..first+1: queues 0 and 1, merged
        c.close()
        # Leaving removes the member's files; the queue-lock and slot files stay for the next.
        assert sorted(str(p.relative_to(group)) for p in group.rglob("*") if p.is_file()) == [
            "queues.lock", slot,
        ]
        assert _ofd_write_locks(group / "queues.lock") == []


def _ofd_write_locks(path: Path) -> list[tuple[int, int]]:
    """The (first, last) byte ranges of the OFD write locks on ``path``, from /proc/locks."""
    ino = path.stat().st_ino
    found = []
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "OFDLCK" in fields and fields[fields.index("OFDLCK") + 2] == "WRITE":
            dev_ino, start, end = fields[-3:]
            if int(dev_ino.split(":")[-1]) == ino:
                found.append((int(start), int(end)))
    return sorted(found)


def test_a_new_store_writes_the_golden_meta_slot(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "s"):
        pass
    meta = (tmp_path / "s" / "meta").read_bytes()
    golden = bytes.fromhex((FIXTURES / "meta_slot.hex").read_text().strip())
    if mqlite.__version__ == "0.1.0":  # the created-by string is part of the slot
        assert meta[:128] == golden
    assert meta[:25] == golden[:25] and meta[2048:2176] == meta[:128]
    assert len(meta) == 4096 and mode(tmp_path / "s" / "meta") == 0o600
