"""Stores written by Apache RocketMQ itself (tests/fixtures/rocketmq): mqlite opens them read-only
and as a writer, serves every message as RocketMQ stored it, carries the consumer offsets over,
appends after them, and never changes a byte of their data. Damage it cannot prove torn is a
typed error that leaves every file as it was. The lock file excludes a RocketMQ broker too."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import shutil
import struct
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

import mqlite
from mqlite import Message, MessageQueue

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "rocketmq"
VERSIONS = ("rmq49", "rmq5")
TOPICS = {"RmqOrders": 4, "RmqEvents": 2, "Rmq-Misc|v1%": 1}


def expected(version: str) -> list[dict[str, Any]]:
    with gzip.open(FIXTURES / f"{version}.expected.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def extract(version: str, into: Path) -> Path:
    """The fixture store as a fresh copy under ``into`` (sparse files stay sparse)."""
    subprocess.run(
        ["tar", "--sparse", "-xzf", str(FIXTURES / f"{version}-store.tar.gz"), "-C", str(into)],
        check=True,
    )
    with tarfile.open(FIXTURES / f"{version}-store.tar.gz") as t:
        top = t.getnames()[0].split("/")[0]
    return into / top


def digest(root: Path) -> dict[str, str]:
    """Every regular file under ``root`` and the SHA-256 of its bytes, but ``open.lock``: the
    empty file every writable open takes a lock on before it reads anything (FORMAT.md §6), left
    in place because another opener may be waiting on it."""
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.relative_to(root) != Path("open.lock"):
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            out[str(p.relative_to(root))] = h.hexdigest()
    return out


def data_files(d: dict[str, str]) -> dict[str, str]:
    """The message data: commit log, consume queues and index (not mqlite's checkpoint slots,
    the lock's holder line or the config files)."""
    return {k: v for k, v in d.items() if k.split("/")[0] in ("commitlog", "consumequeue", "index")}


def assert_matches(store: mqlite.Store, want: list[dict[str, Any]]) -> None:
    for e in want:
        got = store.read(MessageQueue(e["topic"], e["queue_id"]), e["queue_offset"], 1)
        assert len(got) == 1, e
        m = got[0]
        assert (m.topic, m.queue_id, m.queue_offset) == (e["topic"], e["queue_id"], e["queue_offset"])
        assert m.commit_log_offset == e["commit_log_offset"]
        assert m.store_size == e["store_size"]
        assert m.offset_msg_id == e["msg_id"]
        assert m.flag == e["flag"]
        assert m.body == base64.b64decode(e["body"])
        assert m.tags == e.get("tags")
        assert m.keys == tuple(k for k in e.get("keys", "").split(" ") if k)
        assert m.properties == e["properties"]
        assert m.msg_id == e["properties"]["UNIQ_KEY"]


def progress(store: mqlite.Store) -> dict[tuple[str, int], int]:
    return {(p.topic, p.queue_id): p.committed for p in store.consumer_progress("billing")}


def assert_topics(store: mqlite.Store) -> None:
    got = {t.name: (t.read_queues, t.write_queues, t.perm) for t in store.topics()}
    assert got == {name: (n, n, 6) for name, n in TOPICS.items()}


@pytest.mark.parametrize("version", VERSIONS)
def test_read_only_open_serves_every_message(tmp_path: Path, version: str) -> None:
    root = extract(version, tmp_path)
    before = digest(root)
    with mqlite.open(root, read_only=True) as store:
        assert_topics(store)
        assert_matches(store, expected(version))
        assert progress(store) == {("RmqOrders", 0): 3, ("RmqOrders", 1): 5}
    after = digest(root)
    assert {k: after.get(k) for k in before} == before
    # Reading committed offsets takes the offsets file's lock, an empty file of its own.
    assert set(after) - set(before) <= {"config/.consumerOffset.lock"}


@pytest.mark.parametrize("version", VERSIONS)
def test_writer_open_keeps_every_byte_and_can_append(tmp_path: Path, version: str) -> None:
    root = extract(version, tmp_path)
    want = expected(version)
    before = digest(root)
    with mqlite.open(root) as store:
        assert_topics(store)
        assert_matches(store, want)
        for topic, n in TOPICS.items():
            for q in range(n):
                count = sum(1 for e in want if e["topic"] == topic and e["queue_id"] == q)
                assert store.offsets(MessageQueue(topic, q)) == (0, count)
    after = digest(root)
    # Not one byte of the data changed: the consume queues and the commit log as RocketMQ
    # wrote them, the index mqlite does not read yet, and the offsets RocketMQ committed.
    assert data_files(after) == data_files(before)
    assert after["config/consumerOffset.json"] == before["config/consumerOffset.json"]
    assert after["config/topics.json"] == before["config/topics.json"]
    # mqlite's checkpoint carries RocketMQ's three timestamps on (they only grow), in the
    # layout RocketMQ reads.
    with tarfile.open(FIXTURES / f"{version}-store.tar.gz") as t:
        member = next(m for m in t.getmembers() if m.name.endswith("/checkpoint"))
        original = t.extractfile(member).read()  # type: ignore[union-attr]
    now = struct.unpack_from(">qqq", (root / "checkpoint").read_bytes())
    was = struct.unpack_from(">qqq", original)
    assert all(n >= w for n, w in zip(now, was)) and now[0] == was[0], (now, was)

    # New messages go after RocketMQ's; the group resumes from RocketMQ's committed offsets.
    end = max(e["commit_log_offset"] + e["store_size"] for e in want)
    with mqlite.open(root) as store:
        result = store.producer().send(Message("RmqOrders", b"after rocketmq", tags="mq"), queue_id=0)
        assert result.queue_offset == sum(1 for e in want if e["topic"] == "RmqOrders" and e["queue_id"] == 0)
    with mqlite.open(root) as store:
        assert_matches(store, want)
        new = store.read(MessageQueue("RmqOrders", 0), result.queue_offset, 1)[0]
        assert (new.body, new.tags) == (b"after rocketmq", "mq")
        assert new.commit_log_offset >= end
        assert progress(store) == {("RmqOrders", 0): 3, ("RmqOrders", 1): 5}
        c = store.pull_consumer("billing")
        c.subscribe("RmqOrders")
        got: list[mqlite.MessageExt] = []
        while len(got) < result.queue_offset + 1 - 3 + 10:
            batch = c.poll(timeout=0.5)
            if not batch:
                break
            got.extend(batch)
        firsts = {q: min(m.queue_offset for m in got if m.queue_id == q) for q in (0, 1)}
        assert firsts == {0: 3, 1: 5}, "the group did not resume at RocketMQ's offsets"
        c.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_the_file_sizes_are_found_from_the_files_and_a_writer_records_them(
    tmp_path: Path, version: str
) -> None:
    """RocketMQ writes no ``meta`` file (rust/FORMAT.md §11). A read-only open finds the sizes
    from the files without writing one; a writer adds it, a new file beside the data."""
    root = extract(version, tmp_path)
    with mqlite.open(root, read_only=True) as store:
        stats = store.stats()
        assert (stats["commit_log_file_size"], stats["consume_queue_file_units"]) == (1 << 20, 100)
    assert not (root / "meta").exists(), "a read-only open wrote the meta file"
    before = digest(root)
    with mqlite.open(root) as store:
        assert store.stats()["commit_log_file_size"] == 1 << 20
    after = digest(root)
    assert data_files(after) == data_files(before)
    meta = (root / "meta").read_bytes()
    assert struct.unpack_from(">IIQQ", meta) == (0x4D514C4D, 1, 1 << 20, 100)
    with pytest.raises(mqlite.InvalidConfigError):
        mqlite.open(root, read_only=True, commit_log_file_size=32 << 20)


@pytest.mark.parametrize("version", VERSIONS)
def test_topics_are_found_from_the_consume_queues_without_a_table(tmp_path: Path, version: str) -> None:
    root = extract(version, tmp_path)
    (root / "config" / "topics.json").unlink()
    with mqlite.open(root, read_only=True) as store:
        assert_topics(store)
    assert not (root / "config" / "topics.json").exists(), "a read-only open wrote the table"
    with mqlite.open(root) as store:
        assert_topics(store)
        assert_matches(store, expected(version)[:200])
    # The writer recorded what it found.
    table = json.loads((root / "config" / "topics.json").read_text())["topicConfigTable"]
    assert {name: t["writeQueueNums"] for name, t in table.items()} == TOPICS


def record_at(root: Path, offset: int) -> tuple[Path, int]:
    name = root / "commitlog" / f"{offset - offset % (1 << 20):020d}"
    return name, offset % (1 << 20)


def flip(path: Path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))


@pytest.mark.parametrize("abort", [False, True], ids=["clean", "after-crash"])
@pytest.mark.parametrize("version", VERSIONS)
def test_damage_it_cannot_prove_torn_is_an_error_and_changes_nothing(
    tmp_path: Path, version: str, abort: bool
) -> None:
    """A flipped body byte in the middle of the log (records follow it) and near its end: after
    a clean shutdown every byte was flushed, and after a crash RocketMQ's checkpoint says these
    records were flushed; either way they are not a torn tail."""
    want = expected(version)
    for victim in (want[700], want[-2]):
        case = tmp_path / f"{victim['queue_offset']}-{victim['topic'][:3]}"
        case.mkdir()
        root = extract(version, case)
        if abort:
            (root / "abort").write_bytes(b"")
        path, at = record_at(root, victim["commit_log_offset"])
        flip(path, at + victim["store_size"] - 30)  # inside the properties: the body CRC holds
        flip(path, at + 90)  # inside the body
        before = digest(root)
        with pytest.raises(mqlite.CorruptedLogError) as info:
            mqlite.open(root)
        assert str(path) in str(info.value) and str(victim["commit_log_offset"]) in str(info.value)
        assert digest(root) == before, "a failed open changed the store"
        # The store is not locked or half-open afterwards: a reader still gets the rest.
        with mqlite.open(root, read_only=True) as store:
            ok = want[0]
            assert store.read(MessageQueue(ok["topic"], ok["queue_id"]), ok["queue_offset"], 1)


def test_a_torn_tail_after_a_rocketmq_crash_is_cut_only_above_what_it_flushed(tmp_path: Path) -> None:
    """RocketMQ crashed (abort present) while appending a record it never flushed: the record's
    store time is after the checkpoint's flush time, so its half-written bytes are cut, and
    nothing before it."""
    want = expected("rmq5")
    root = extract("rmq5", tmp_path)
    (root / "abort").write_bytes(b"")
    end = want[-1]["commit_log_offset"] + want[-1]["store_size"]
    path, at = record_at(root, end)
    last = path.read_bytes()
    src = want[-1]["commit_log_offset"] % (1 << 20)
    record = bytearray(last[src : src + want[-1]["store_size"]])
    struct.pack_into(">q", record, 28, end)  # PHYSICALOFFSET
    flushed = struct.unpack_from(">q", (root / "checkpoint").read_bytes(), 0)[0]
    struct.pack_into(">q", record, 56, flushed + 1000)  # STORETIMESTAMP: after the last flush
    torn = bytes(record[: len(record) // 2])
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(torn)
    with mqlite.open(root) as store:
        assert_matches(store, want)
        assert store.offsets(MessageQueue(want[-1]["topic"], want[-1]["queue_id"]))[1] == want[-1]["queue_offset"] + 1
    assert path.read_bytes()[at : at + len(torn)] == bytes(len(torn)), "the torn record was not zeroed"


def test_a_record_rocketmq_appended_to_an_mqlite_store_is_kept(tmp_path: Path) -> None:
    """A RocketMQ broker appends a record without the whole-record CRC property to an mqlite
    store, writes its consume-queue unit and its own checkpoint fields over mqlite's slot A, and
    shuts down cleanly. mqlite serves that record and appends after it."""
    want = expected("rmq49")
    rocket = extract("rmq49", tmp_path)
    src_meta = next(e for e in want if e["topic"] == "RmqOrders" and e["store_size"] < 400)
    path, at = record_at(rocket, src_meta["commit_log_offset"])
    record = bytearray(path.read_bytes()[at : at + src_meta["store_size"]])

    root = tmp_path / "mq"
    with mqlite.open(root, commit_log_file_size=1 << 20, consume_queue_file_units=100) as store:
        store.create_topic("RmqOrders", queues=4)
        for i in range(3):
            store.producer().send(Message("RmqOrders", b"m%d" % i), queue_id=src_meta["queue_id"])
        end = store.read(MessageQueue("RmqOrders", src_meta["queue_id"]), 2, 1)[0]
        end_offset = end.commit_log_offset + end.store_size
    struct.pack_into(">q", record, 20, 3)  # QUEUEOFFSET
    struct.pack_into(">q", record, 28, end_offset)  # PHYSICALOFFSET
    with open(root / "commitlog" / f"{0:020d}", "r+b") as f:
        f.seek(end_offset)
        f.write(record)
    cq = root / "consumequeue" / "RmqOrders" / str(src_meta["queue_id"]) / f"{0:020d}"
    tags_code = struct.unpack_from(">q", (rocket / "consumequeue" / "RmqOrders" / str(src_meta["queue_id"]) / f"{0:020d}").read_bytes(), src_meta["queue_offset"] * 20 + 12)[0]
    with open(cq, "r+b") as f:
        f.seek(3 * 20)
        f.write(struct.pack(">qiq", end_offset, len(record), tags_code))
    with open(root / "checkpoint", "r+b") as f:  # RocketMQ's fields over slot A's first bytes
        stamp = struct.unpack_from(">q", record, 56)[0]
        f.write(struct.pack(">qqqqq", stamp, stamp, 0, 0, end_offset + len(record)))
    with mqlite.open(root) as store:
        got = store.read(MessageQueue("RmqOrders", src_meta["queue_id"]), 0, 10)
        assert [m.body for m in got[:3]] == [b"m0", b"m1", b"m2"]
        assert len(got) == 4 and got[3].body == base64.b64decode(src_meta["body"])
        assert got[3].properties == src_meta["properties"]
        store.producer().send(Message("RmqOrders", b"next"), queue_id=src_meta["queue_id"])
    with mqlite.open(root, read_only=True) as store:
        got = store.read(MessageQueue("RmqOrders", src_meta["queue_id"]), 0, 10)
        assert [m.body for m in got][3:] == [base64.b64decode(src_meta["body"]), b"next"]


# --- locks: a RocketMQ broker takes `lock` with FileChannel.tryLock (a POSIX fcntl lock) ---

FCNTL_HOLDER = textwrap.dedent(
    """
    import fcntl, sys
    f = open(sys.argv[1], "r+b")
    try:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)   # what tryLock(0, 1, false) does
    except OSError as e:
        print("refused", e.errno, flush=True)
        sys.exit(0)
    print("locked", flush=True)
    sys.stdin.read()                                         # hold until the test closes stdin
    """
)

JAVA_TRY_LOCK = textwrap.dedent(
    """
    import java.io.RandomAccessFile;
    import java.nio.channels.FileLock;
    public class TryLock {
        public static void main(String[] args) throws Exception {
            RandomAccessFile f = new RandomAccessFile(args[0], "rw");
            FileLock lock = f.getChannel().tryLock(0, 1, false);   // as a RocketMQ broker does
            System.out.println(lock == null ? "refused" : "locked");
            System.out.flush();
            if (lock != null) { System.in.read(); }
        }
    }
    """
)


def test_a_process_holding_the_brokers_lock_keeps_mqlite_out(tmp_path: Path) -> None:
    root = tmp_path / "s"
    mqlite.open(root).close()
    with subprocess.Popen(
        [sys.executable, "-c", FCNTL_HOLDER, str(root / "lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        before = digest(root)
        with pytest.raises(mqlite.StoreLockedError, match="fcntl lock of pid"):
            mqlite.open(root)
        assert digest(root) == before
        with mqlite.open(root, read_only=True) as store:  # readers are not writers
            assert store.topics() == []
        assert holder.stdin is not None
        holder.stdin.close()
    mqlite.open(root).close()  # released with the holder


def try_fcntl_lock(path: Path) -> str:
    """What a process taking the broker's lock on ``path`` gets ("locked" or "refused ...")."""
    out = subprocess.run(
        [sys.executable, "-c", FCNTL_HOLDER, str(path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout


def test_mqlite_holds_the_lock_a_broker_takes(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with mqlite.open(root):
        assert try_fcntl_lock(root / "lock").startswith("refused")
    assert try_fcntl_lock(root / "lock").startswith("locked")


@pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK (javac) to run Java's tryLock")
def test_javas_try_lock_is_refused_while_mqlite_writes(tmp_path: Path) -> None:
    src = tmp_path / "TryLock.java"
    src.write_text(JAVA_TRY_LOCK)
    subprocess.run(["javac", "-d", str(tmp_path), str(src)], check=True, timeout=300)
    java = ["java", "-cp", str(tmp_path), "TryLock"]
    root = tmp_path / "s"
    with mqlite.open(root):
        out = subprocess.run(java + [str(root / "lock")], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
        assert out.stdout.strip() == "refused", out
    with subprocess.Popen(
        java + [str(root / "lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as broker:
        assert broker.stdout is not None and broker.stdout.readline().strip() == "locked"
        with pytest.raises(mqlite.StoreLockedError, match="fcntl lock"):
            mqlite.open(root)
        assert broker.stdin is not None
        broker.stdin.close()


def test_rocketmq_5s_confirm_offset_protects_what_it_confirmed(tmp_path: Path) -> None:
    """After a crash, the last record was stored after RocketMQ's last flush time, so only the
    5.x confirm offset says it was durable: with it set past the record, damage there is
    corruption; with it unset, the same damage is a torn tail and is cut."""
    want = expected("rmq5")
    last = want[-1]
    end = last["commit_log_offset"] + last["store_size"]
    for confirmed in (True, False):
        case = tmp_path / str(confirmed)
        case.mkdir()
        root = extract("rmq5", case)
        (root / "abort").write_bytes(b"")
        if confirmed:
            with open(root / "checkpoint", "r+b") as f:
                f.seek(32)
                f.write(struct.pack(">q", end))
        path, at = record_at(root, last["commit_log_offset"])
        flip(path, at + 90)
        if confirmed:
            before = digest(root)
            with pytest.raises(mqlite.CorruptedLogError, match="below the durable offset"):
                mqlite.open(root)
            assert digest(root) == before
        else:
            with mqlite.open(root) as store:
                assert_matches(store, want[:-1])
                mq = MessageQueue(last["topic"], last["queue_id"])
                assert store.offsets(mq)[1] == last["queue_offset"]


@pytest.mark.parametrize("version", VERSIONS)
def test_rocketmqs_own_index_file_answers_key_and_unique_id_lookups(tmp_path: Path, version: str) -> None:
    """A read-only open builds nothing: every answer comes from the IndexFile RocketMQ wrote
    (its 5,000,000-slot geometry, Java's String.hashCode of ``topic#key`` over UTF-16, keys
    outside the BMP included)."""
    root = extract(version, tmp_path)
    want = expected(version)
    by_key: dict[tuple[str, str], list[int]] = {}
    for e in want:
        for k in {k for k in e.get("keys", "").split(" ") if k}:
            by_key.setdefault((e["topic"], k), []).append(e["commit_log_offset"])
    before = digest(root)
    with mqlite.open(root, read_only=True) as store:
        status = store.index_status()
        assert status["files"] == 1 and status["lag"] == 0, status
        for (topic, key), offsets in by_key.items():
            got = store.find_by_key(topic, key, limit=10_000)
            assert [m.commit_log_offset for m in got] == sorted(offsets, reverse=True), (topic, key)
            assert all(key in m.keys for m in got)
        for e in want[::37]:
            uniq = e["properties"]["UNIQ_KEY"]
            assert store.get(uniq).commit_log_offset == e["commit_log_offset"]
            assert [m.commit_log_offset for m in store.find_by_key(e["topic"], uniq)] == [e["commit_log_offset"]]
    assert digest(root) == before


@pytest.mark.parametrize("version", VERSIONS)
def test_mqlites_index_of_rocketmqs_log_is_rocketmqs_file_byte_for_byte(tmp_path: Path, version: str) -> None:
    """Java compatibility of what mqlite writes: indexing RocketMQ's own commit log with
    RocketMQ's geometry gives the header, slots and entries of the file RocketMQ built."""
    root = extract(version, tmp_path)
    aside = tmp_path / "rocketmq-index"
    (root / "index").rename(aside)
    (theirs,) = aside.iterdir()
    with mqlite.open(root, exclusive=True, index_hash_slots=5_000_000) as store:
        wait_until(lambda: store.index_status()["lag"] == 0, what="the index to reach the log's end")
    (ours,) = (root / "index").iterdir()
    assert ours.stat().st_size == theirs.stat().st_size == 420_000_040
    with open(theirs, "rb") as a, open(ours, "rb") as b:
        head_a, head_b = a.read(40), b.read(40)
        count = struct.unpack(">i", head_a[36:40])[0]
        assert count > 1500
        assert head_a == head_b, (head_a.hex(), head_b.hex())
        assert a.read(5_000_000 * 4) == b.read(5_000_000 * 4)
        assert a.read(count * 20) == b.read(count * 20)

