"""Every exception class is raised by a real call: one row per class, each a call that raises
exactly that class (the categories MQError, MQClientError and StoreError are only caught).

Rows that need a process of their own (a fork, a file-size limit) run a child interpreter that
reports the class it got, and its cause, as JSON."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mqlite
from mqlite import Message, MessageQueue, MessageSelector
from mqlite import errors as E

CATEGORIES = {E.MQError, E.MQClientError, E.StoreError, E.TransactionError}
FIRST = mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def _child(script: str, *args: object) -> dict[str, Any]:
    """Runs ``script`` in a fresh interpreter; its last stdout line is JSON."""
    env = dict(os.environ)
    here = str(Path(mqlite.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


# A store whose checkpoint can no longer be written: RLIMIT_FSIZE below the checkpoint's second
# slot makes its write fail with EFBIG (the mapped commit log is unaffected).
_FSIZE_CHILD = """
import json, resource, signal, sys, mqlite
store = mqlite.open(sys.argv[1])
producer = store.producer()
producer.send(mqlite.Message("t", b"x"))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.RLIM_INFINITY))
def outcome(call):
    try:
        call()
    except Exception as exc:
        cause = exc.__cause__
        return {"type": type(exc).__name__, "cause": type(cause).__name__ if cause else None,
                "errno": getattr(cause, "errno", None)}
    return {"type": None}
first = outcome(store.flush)
later = outcome(lambda: producer.send(mqlite.Message("t", b"y")))
print(json.dumps({"flush": first, "send": later}))
"""

_FORK_CHILD = """
import json, os, sys, mqlite
store = mqlite.open(sys.argv[1])
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        store.topics()
        name = "none"
    except Exception as exc:
        name = type(exc).__name__
    os.write(w, name.encode())
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
print(json.dumps({"type": os.read(r, 100).decode()}))
"""


def _store_full(p: Path) -> str:
    got = _child(_FSIZE_CHILD, p)["flush"]
    assert got["type"] is not None
    return str(got["type"])


def _poisoned(p: Path) -> str:
    got = _child(_FSIZE_CHILD, p)["send"]
    # The typed cause survives: the failed flush, an OSError with its errno.
    assert (got["cause"], got["errno"]) == ("StoreFullError", errno.EFBIG), got
    return str(got["type"])


def _corrupted(p: Path) -> None:
    with mqlite.open(p) as s:
        s.producer().send(Message("t", b"payload" * 8))
    log = next((p / "commitlog").iterdir())
    with open(log, "r+b") as f:  # flip a byte inside the first record, below the durable offset
        f.seek(120)
        byte = f.read(1)
        f.seek(120)
        f.write(bytes([byte[0] ^ 0xFF]))
    mqlite.open(p)


def _config_file(p: Path) -> None:
    mqlite.open(p).close()
    for name in ("topics.json", "topics.json.bak"):
        (p / "config" / name).write_text("{not json")
    mqlite.open(p)


def _compression(p: Path) -> None:
    with mqlite.open(p) as s:
        at = s.producer().send(Message("t", b"x")).commit_log_offset
    # Flag the stored body as compressed with a codec that does not exist (SYSFLAG at byte 36),
    # renewing the whole-record CRC property (its last 20 bytes) so the record stays valid.
    log = next((p / "commitlog").iterdir())
    data = bytearray(log.read_bytes())
    total = int.from_bytes(data[at : at + 4], "big")
    rec = data[at : at + total]
    rec[36:40] = (0x701).to_bytes(4, "big")
    assert bytes(rec[-20:-11]) == b"__CRC32#\x01"
    rec[-11:-1] = str(zlib.crc32(bytes(rec[:-20])) & 0x7FFFFFFF).zfill(10)[::-1].encode()
    data[at : at + total] = rec
    log.write_bytes(bytes(data))
    with mqlite.open(p) as s:
        s.get_by_offset(at).body  # noqa: B018 - the access raises


def _with_topic(p: Path, **topic: Any) -> mqlite.Store:
    s = mqlite.open(p)
    s.create_topic("t", 1, **topic)
    return s


def _two_members(p: Path) -> None:
    s = _with_topic(p)
    first = s.pull_consumer("g", client_id="same")
    first.subscribe("t")
    s.pull_consumer("g", client_id="same").subscribe("t")


def _reset_live_group(p: Path) -> None:
    s = _with_topic(p)
    live = s.pull_consumer("g")
    live.subscribe("t")
    s.reset_offset("g", "t", to="earliest")


def _closed_client(p: Path) -> None:
    c = _with_topic(p).pull_consumer("g")
    c.close()
    c.subscribe("t")


def _subscribe_after_assign(p: Path) -> None:
    c = _with_topic(p).pull_consumer("g")
    c.assign([MessageQueue("t", 0)])
    c.subscribe("t")


def _seek_out_of_range(p: Path) -> None:
    c = _with_topic(p).pull_consumer("g")
    c.assign([MessageQueue("t", 0)])
    c.seek(MessageQueue("t", 0), 5)


def _read_only_write(p: Path) -> None:
    mqlite.open(p).close()
    mqlite.open(p, read_only=True).create_topic("u")


def _closed_store(p: Path) -> None:
    s = mqlite.open(p)
    s.close()
    s.topics()


def _symlinked_store(p: Path) -> None:
    p.mkdir()
    link = p.parent / "link"
    link.symlink_to(p)
    mqlite.open(link)


def _not_a_directory(p: Path) -> None:
    p.write_bytes(b"")
    mqlite.open(p)


class _Unknown:
    def execute_local_transaction(self, msg: Any, arg: Any) -> mqlite.LocalTransactionState:
        return mqlite.LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: Any) -> mqlite.LocalTransactionState:
        return mqlite.LocalTransactionState.UNKNOW


def _txn_producer(p: Path) -> mqlite.TransactionProducer:
    return mqlite.TransactionProducer(mqlite.open(p), "G", _Unknown(), check_interval=None)


def _commit_after_rollback(p: Path) -> None:
    producer = _txn_producer(p)
    tid = producer.send_message_in_transaction(Message("t", b"x")).transaction_id
    producer.rollback([tid])
    producer.commit([tid])


ROWS: list[tuple[type[E.MQError], Callable[[Path], object]]] = [
    (E.IllegalArgumentError, lambda p: mqlite.open(p).wait_for({}, timeout=-1)),
    (E.InvalidTopicError, lambda p: mqlite.open(p).create_topic("no spaces")),
    (E.InvalidQueueError, lambda p: _with_topic(p).producer().send(Message("t", b"x"), queue_id=7)),
    (E.InvalidMessageError, lambda p: _with_topic(p).producer().send(Message("t", b"x", properties={"": "v"}))),
    (E.MessageTooLargeError,
     lambda p: mqlite.open(p, max_message_size=1024).producer().send(Message("t", bytes(2048)))),
    (E.PropertiesTooLargeError,
     lambda p: _with_topic(p).producer().send(Message("t", b"x", properties={"k": "v" * 40_000}))),
    (E.InvalidBatchError, lambda p: _with_topic(p).producer().send_batch([], topic="t")),
    (E.InvalidConfigError, lambda p: mqlite.open(p).pull_consumer("g", max_poll_messages=0)),
    (E.InvalidGroupError, lambda p: mqlite.open(p).pull_consumer("no spaces")),
    (E.ConsumerGroupNotFoundError, lambda p: _with_topic(p).reset_offset("never-seen", "t", to="earliest")),
    (E.FilterExpressionError, lambda p: MessageSelector.by_sql("a >")),
    (E.IllegalStateError, _subscribe_after_assign),
    (E.StoreClosedError, _closed_store),
    (E.StoreReadOnlyError, _read_only_write),
    (E.IndexUnavailableError, lambda p: _index_off(p).find_by_key("t", "k")),
    (E.StoreUsedAfterForkError, lambda p: _child(_FORK_CHILD, p)["type"]),
    (E.ClientClosedError, _closed_client),
    (E.ClientIdInUseError, _two_members),
    (E.QueueNotAssignedError, lambda p: _with_topic(p).pull_consumer("g").seek(MessageQueue("t", 0), 0)),
    (E.ConsumerGroupActiveError, _reset_live_group),
    (E.TopicNotFoundError,
     lambda p: mqlite.open(p, auto_create_topics=False).producer().send(Message("t", b"x"))),
    (E.TopicNotReadableError, lambda p: _with_topic(p, perm=2).read(MessageQueue("t", 0), 0)),
    (E.TopicNotWritableError, lambda p: _with_topic(p, perm=4).producer().send(Message("t", b"x"))),
    (E.MessageNotFoundError, lambda p: mqlite.open(p).get_by_offset(1 << 40)),
    (E.StoreLockedError, lambda p: (mqlite.open(p, exclusive=True), mqlite.open(p))),
    (E.StoreFullError, _store_full),
    (E.StorePoisonedError, _poisoned),
    (E.CorruptedLogError, _corrupted),
    (E.ConfigFileError, _config_file),
    (E.CompressionError, _compression),
    (E.StoreIOError, _symlinked_store),
    (E.StoreNotADirectoryError, _not_a_directory),
    (E.StoreNotFoundError, lambda p: mqlite.open(p, read_only=True)),
    (E.OffsetOutOfRangeError, _seek_out_of_range),
    (E.TransactionNotFoundError, lambda p: _txn_producer(p).commit(["never-prepared"])),
    (E.TransactionStateError, _commit_after_rollback),
]


def _index_off(path: Path) -> mqlite.Store:
    store = mqlite.open(path, index_enabled=False)
    store.create_topic("t")
    return store


def test_every_raisable_class_has_a_row() -> None:
    listed = {getattr(E, name) for name in E.__all__}
    assert {cls for cls, _ in ROWS} == listed - CATEGORIES


@pytest.mark.parametrize(("cls", "call"), ROWS, ids=[cls.__name__ for cls, _ in ROWS])
def test_a_real_call_raises_exactly(cls: type[E.MQError], call: Callable[[Path], object], tmp_path: Path) -> None:
    try:
        outcome = call(tmp_path / "s")
    except E.MQError as exc:
        assert type(exc) is cls, f"{type(exc).__name__}: {exc}"
        assert exc.code and str(exc)
        return
    assert outcome == cls.__name__, f"expected {cls.__name__}, the call gave {outcome!r}"


def test_corrupted_log_error_names_the_file_offset_and_decoder_verdict(tmp_path: Path) -> None:
    p = tmp_path / "s"
    with pytest.raises(E.CorruptedLogError) as info:
        _corrupted(p)
    exc = info.value
    assert exc.path == str(next((p / "commitlog").iterdir()))
    assert exc.offset == 0
    assert exc.decode_error is not None and "CRC mismatch" in exc.decode_error


def test_removed_classes_stay_importable_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="raised by nothing"):
        cls = E.MQTimeoutError  # type: ignore[attr-defined]
    assert issubclass(cls, E.MQError)
    with pytest.warns(DeprecationWarning):
        assert issubclass(E.FlushDiskTimeoutError, TimeoutError)  # type: ignore[attr-defined]
    # The package exports them as before, without a hook on attribute access (see below).
    assert mqlite.MQTimeoutError is cls
    with pytest.raises(AttributeError):
        E.NoSuchError  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(AttributeError):
        mqlite.NoSuchError  # type: ignore[attr-defined]  # noqa: B018


def test_the_package_has_no_attribute_hook() -> None:
    # A module-level __getattr__ makes CPython give up specializing `mqlite.X` loads: every
    # `mqlite.Message(...)` in a user's loop would pay a slow look-up.
    assert "__getattr__" not in vars(mqlite)
