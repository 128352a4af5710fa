"""Disk full and file-size limits (reliability plan B.g, real ENOSPC / EFBIG).

1. A 3 MiB tmpfs mounted in a private user+mount namespace (``unshare -rm``, no root needed):
   the child opens a store on it, fills the rest of the file system with a filler file and sends
   until a send fails. The failure must be ``StoreFullError`` (never SIGBUS: the child's exit
   code is checked), every acknowledged message stays readable while the disk is full, sends
   resume in the same process once the filler is deleted, and a reopen shows every
   acknowledged message. Skipped where ``unshare``/tmpfs mounts are not permitted.
2. ``RLIMIT_FSIZE`` below the commit-log file size, set after open (``SIGXFSZ`` ignored): the
   roll to a new file fails with EFBIG -> ``StoreFullError``; raising the limit lets sends
   resume. Works everywhere.

Both run in async and sync flush mode. The other tmpfs tests fill the disk under consumers,
under a consume queue growing its reservation or mapped again, and before the first touch of
the runtime files a shared writer maps (the wake-up page, ``run/writer.shm``'s tables).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import mqlite

CHILD = r"""
import json, os, random, resource, signal, sys
import mqlite
from mqlite import Message, MessageQueue

root, mode, how = sys.argv[1], sys.argv[2], sys.argv[3]
cfg = dict(commit_log_file_size=256 << 10, consume_queue_file_units=64, max_message_size=16 << 10,
           flush=mode)
out = {"how": how, "mode": mode}
store = mqlite.open(os.path.join(root, "store"), **cfg)
producer = store.producer()
acked = []  # (queue, queue_offset, body)
store.create_topic("full", 4)  # topics.json and the queues exist before the disk fills

noise = random.Random(20240611)  # fixed seed: the same bodies every run

def send_until_error(limit, tag):
    for i in range(limit):
        body = b"%s-%06d-" % (tag, i) + noise.randbytes(1500)
        q = i % 4
        try:
            r = producer.send(Message("full", body), queue_id=q)
        except mqlite.MQError as exc:
            return exc
        acked.append((q, r.queue_offset, body))
    return None

send_until_error(8, b"w")
# Each queue's first consume-queue file exists before the disk fills: it is created when the
# queue's first unit is dispatched, and a file that cannot be created leaves an acknowledged
# message unreadable until space returns (the preparer creates them in the background).
for q in range(4):
    assert store.wait_for({MessageQueue("full", q): 1}, 30), f"queue {q} not dispatched"

if how == "tmpfs":
    filler = os.path.join(root, "filler")
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as exc:
            out["filler_errno"] = exc.errno
    out["filler_bytes"] = os.path.getsize(filler)
else:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (128 << 10, hard))

err = send_until_error(5000, b"a")
out["error"] = None if err is None else [type(err).__name__, getattr(err, "code", ""), str(err)]
out["acked_before_full"] = len(acked)

# reads keep working while full
def read_all():
    got = {}
    for q in range(4):
        mq = MessageQueue("full", q)
        lo, hi = store.offsets(mq)
        off = lo
        while off < hi:
            res = store.read_result(mq, off, 64)
            for m in res.messages:
                got[(q, m.queue_offset)] = m.body
            off = res.next_offset
    return got

got = read_all()
out["readable_while_full"] = all(got.get((q, o)) == b for q, o, b in acked)
err2 = send_until_error(3, b"b")
out["still_full_error"] = None if err2 is None else type(err2).__name__

# space comes back
if how == "tmpfs":
    os.remove(filler)
else:
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
n0 = len(acked)
err3 = send_until_error(400, b"c")
out["resume_error"] = None if err3 is None else [type(err3).__name__, str(err3)]
out["acked_after_space_returned"] = len(acked) - n0
store.close()

store = mqlite.open(os.path.join(root, "store"), **cfg)
got = read_all()
out["reopen_all_acked_present"] = all(got.get((q, o)) == b for q, o, b in acked)
out["reopen_total"] = len(got)
out["acked_total"] = len(acked)
# Queue offsets stay contiguous through the refused sends: each queue's acknowledged offsets
# are exactly 0..n (a refused append gives its offset back).
out["offsets_contiguous"] = all(
    sorted(o for q2, o, _ in acked if q2 == q) == list(range(sum(1 for a in acked if a[0] == q)))
    for q in range(4)
)
store.close()
print(json.dumps(out))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    pkg = str(Path(mqlite.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg, env.get("PYTHONPATH")) if p)
    return env


def _unshare_tmpfs_works(where: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs '{where}'"],
        capture_output=True, timeout=30, check=False,
    )
    return probe.returncode == 0


def _check(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert done.returncode == 0, f"child rc {done.returncode} (135/-7 = SIGBUS): {done.stderr[-3000:]}"
    out: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    print(out)
    err = out["error"]
    assert err is not None, "the disk never filled up"
    assert isinstance(err, list)
    assert err[0] == "StoreFullError", f"expected StoreFullError, got {err}"
    assert isinstance(out["acked_before_full"], int) and out["acked_before_full"] > 0
    assert out["readable_while_full"] is True
    assert out["still_full_error"] == "StoreFullError"
    assert out["resume_error"] is None, f"sends did not resume after space returned: {out['resume_error']}"
    assert out["acked_after_space_returned"] == 400
    assert out["reopen_all_acked_present"] is True
    assert out["offsets_contiguous"] is True
    return out


def _run_on_tmpfs(tmp_path: Path, child: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Runs ``child`` with a 3 MiB tmpfs mounted in a private namespace as its first argument
    (skips where that is not permitted)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if not _unshare_tmpfs_works(mnt):
        pytest.skip("unshare -rm with a tmpfs mount is not permitted here")
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(child))
    cmd = (f"mount -t tmpfs -o size=3m tmpfs '{mnt}' && "
           f"exec '{sys.executable}' '{script}' '{mnt}' {' '.join(args)}")
    return subprocess.run(["unshare", "-rm", "sh", "-c", cmd], capture_output=True, text=True,
                          timeout=120, env=_env(), check=False)


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_enospc_on_a_small_tmpfs(tmp_path: Path, mode: str) -> None:
    out = _check(_run_on_tmpfs(tmp_path, CHILD, mode, "tmpfs"))
    assert out["filler_errno"] == 28  # ENOSPC


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_file_size_limit(tmp_path: Path, mode: str) -> None:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD))
    done = subprocess.run([sys.executable, str(script), str(tmp_path), mode, "rlimit"],
                          capture_output=True, text=True, timeout=120, env=_env(), check=False)
    _check(done)


CONSUMER_CHILD = r"""
import json, os, sys
import mqlite
from mqlite import ConsumeFromWhere, Message, MessageQueue

root = sys.argv[1]
store = mqlite.open(os.path.join(root, "store"), commit_log_file_size=256 << 10,
                    consume_queue_file_units=64, max_message_size=16 << 10)
store.create_topic("t", 1)
producer = store.producer()
for i in range(5):
    producer.send(Message("t", b"m%d" % i), queue_id=0)
first = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
# No timed automatic commit: each write below is the one the call under test makes.
quiet = dict(consume_from=first, auto_commit_interval=3600)
kept = store.pull_consumer("kept", **quiet)
kept.subscribe("t")
kept.poll(0)  # assigned at subscribe; polls nothing yet
kept.commit({MessageQueue("t", 0): 2})
busy = store.pull_consumer("busy", **quiet)
busy.subscribe("t")
polled = len(busy.poll(0, max_messages=3))
store.flush()  # the files the store prepares in the background exist before the disk fills

filler = os.path.join(root, "filler")
out = {"polled": polled}

def fill():
    with open(filler, "ab", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            out["filler_errno"] = exc.errno

fill()

def outcome(call):
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the test inspects what was raised
        return {"type": type(exc).__name__, "typed": isinstance(exc, mqlite.MQError),
                "errno": getattr(exc, "errno", None), "filename": getattr(exc, "filename", None),
                "text": str(exc)}
    return None

late = store.pull_consumer("late", **quiet)
out["subscribe"] = outcome(lambda: late.subscribe("t"))
out["commit"] = outcome(busy.commit)
out["close"] = outcome(busy.close)
fill()  # the record of its queues that the member's close removed gave pages back
out["reset_offset"] = outcome(lambda: store.reset_offset("other", "t", offset=0, create=True))
out["kept_while_full"] = kept.committed(MessageQueue("t", 0))

os.remove(filler)  # space comes back
out["reset_offset_after"] = outcome(lambda: store.reset_offset("other", "t", offset=1, create=True))
out["kept_after"] = kept.committed(MessageQueue("t", 0))
out["groups_after"] = store.consumer_groups()
kept.close()
late.close()
store.close()
print(json.dumps(out))
"""


def test_consumer_files_on_a_full_disk_raise_store_full(tmp_path: Path) -> None:
    """subscribe, commit, a consumer's close and reset_offset write consumer files (offsets,
    group locks): on a full file system each raises StoreFullError (errno ENOSPC, the file
    named) as a send does, the offsets already committed stay readable, and writes succeed once
    space is back."""
    done = _run_on_tmpfs(tmp_path, CONSUMER_CHILD)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    print(out)
    assert out["filler_errno"] == 28 and out["polled"] == 3
    for call in ("subscribe", "commit", "close", "reset_offset"):
        failure = out[call]
        assert failure is not None, f"{call} wrote on a full disk"
        assert failure["type"] == "StoreFullError" and failure["typed"], (call, failure)
        assert failure["errno"] == 28 and failure["filename"], (call, failure)
        assert failure["filename"] in failure["text"], (call, failure)
    assert out["kept_while_full"] == 2 and out["kept_after"] == 2
    assert out["reset_offset_after"] is None
    assert "other" in out["groups_after"]



GROW_CHILD = r"""
import json, os, sys
import mqlite
from mqlite import Message, MessageQueue

root, mode = sys.argv[1], sys.argv[2]
# Default-size consume-queue files (1,000,000 bytes): each starts with one 4 KiB page (204
# units) reserved, the rest a hole, and grows its reservation ahead of the writer.
cfg = dict(commit_log_file_size=256 << 10, max_message_size=16 << 10, flush=mode)
path = os.path.join(root, "store")
store = mqlite.open(path, **cfg)
producer = store.producer()
store.create_topic("grow", 1)
mq = MessageQueue("grow", 0)
acked = []
out = {}

def describe(exc):
    if exc is None:
        return None
    return {"type": type(exc).__name__, "errno": getattr(exc, "errno", None),
            "filename": getattr(exc, "filename", None)}

def send_until_error(limit, tag):
    for i in range(limit):
        body = b"%s-%06d" % (tag, i)
        try:
            r = producer.send(Message("grow", body), queue_id=0)
        except mqlite.MQError as exc:
            return exc
        acked.append((r.queue_offset, body))
    return None

def read_all():
    got = {}
    lo, hi = store.offsets(mq)
    off = lo
    while off < hi:
        res = store.read_result(mq, off, 64)
        for m in res.messages:
            got[m.queue_offset] = m.body
        off = res.next_offset
    return got

send_until_error(100, b"w")
store.flush()
unit_file = os.path.join(path, "consumequeue", "grow", "0", "0" * 20)
st = os.stat(unit_file)
out["unit_file"] = [st.st_size, st.st_blocks * 512]

filler = os.path.join(root, "filler")
with open(filler, "wb", buffering=0) as f:
    try:
        while True:
            f.write(b"\0" * 4096)
    except OSError as exc:
        out["filler_errno"] = exc.errno

# The commit-log file has room for these records; the queue's reserved page does not.
out["send_error"] = describe(send_until_error(300, b"a"))
try:
    store.flush()
    out["flush_error"] = None
except mqlite.MQError as exc:
    out["flush_error"] = describe(exc)
got = read_all()
out["reserved_units_readable_while_full"] = all(got.get(o) == b for o, b in acked if o < 204)

os.remove(filler)
store.flush()
got = read_all()
out["all_acked_readable_after"] = all(got.get(o) == b for o, b in acked)
n0 = len(acked)
out["resume_error"] = describe(send_until_error(500, b"c"))
out["acked_after_space_returned"] = len(acked) - n0
store.close()
store = mqlite.open(path, **cfg)
got = read_all()
out["reopen_all_acked_present"] = all(got.get(o) == b for o, b in acked)
store.close()
print(json.dumps(out))
"""


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_queue_growing_its_reservation_on_a_full_disk_raises_store_full(
        tmp_path: Path, mode: str) -> None:
    """A consume-queue file reserves disk for its first page only (the rest is a hole) and
    grows the reservation ahead of the writer. On a full disk the growth fails with
    StoreFullError naming the unit file (from a sync-mode send, or from flush()), never a
    SIGBUS from writing into the hole; the units already reserved stay readable, and once
    space returns every acknowledged message is readable, sends resume, and a reopen shows
    them all."""
    done = _run_on_tmpfs(tmp_path, GROW_CHILD, mode)
    assert done.returncode == 0, f"child rc {done.returncode} (135/-7 = SIGBUS): {done.stderr[-3000:]}"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    print(out)
    size, disk = out["unit_file"]
    assert size == 1_000_000 and disk <= 8192, "a full-length file holding one page"
    assert out["filler_errno"] == 28
    err = out["send_error"] if mode == "sync" else out["flush_error"]
    assert err is not None, "the queue grew on a full disk"
    assert err["type"] == "StoreFullError" and err["errno"] == 28, err
    assert err["filename"].endswith(os.path.join("grow", "0", "0" * 20)), err
    assert out["reserved_units_readable_while_full"] is True
    assert out["all_acked_readable_after"] is True
    assert out["resume_error"] is None
    assert out["acked_after_space_returned"] == 500
    assert out["reopen_all_acked_present"] is True


PARKED_CHILD = r"""
import json, os, sys
import mqlite
from mqlite import Message, MessageQueue

root, mode = sys.argv[1], sys.argv[2]
exclusive = sys.argv[3] == "exclusive" if len(sys.argv) > 3 else True
# No idle mapping kept: a queue that lets go of its file while idle has it unmapped.
cfg = dict(commit_log_file_size=256 << 10, max_message_size=16 << 10, flush=mode,
           max_mapped_files=0, exclusive=exclusive)
path = os.path.join(root, "store")
store = mqlite.open(path, **cfg)
producer = store.producer()
store.create_topic("park", 1)
mq = MessageQueue("park", 0)
acked = []
out = {}
unit_file = os.path.join(path, "consumequeue", "park", "0", "0" * 20)

def describe(exc):
    if exc is None:
        return None
    return {"type": type(exc).__name__, "errno": getattr(exc, "errno", None),
            "filename": getattr(exc, "filename", None)}

def send_until_error(limit, tag):
    for i in range(limit):
        body = b"%s-%06d" % (tag, i)
        try:
            r = producer.send(Message("park", body), queue_id=0)
        except mqlite.MQError as exc:
            return exc
        acked.append((r.queue_offset, body))
    return None

def mapped():
    with open("/proc/self/maps") as f:
        return unit_file in f.read()

def read_all():
    got = {}
    lo, hi = store.offsets(mq)
    off = lo
    while off < hi:
        res = store.read_result(mq, off, 64)
        for m in res.messages:
            got[m.queue_offset] = m.body
        off = res.next_offset
    return got

# 100 units: the file's first reserved page (204 units) has room left.
send_until_error(100, b"w")
# A flush with nothing written since the previous one lets go of the queue's file.
flushes = 0
while mapped() and flushes < 20:
    store.flush()
    flushes += 1
out["unmapped"] = not mapped()

filler = os.path.join(root, "filler")
with open(filler, "wb", buffering=0) as f:
    try:
        while True:
            f.write(b"\0" * 4096)
    except OSError as exc:
        out["filler_errno"] = exc.errno

# The file is mapped again for these units: it must reserve before it writes, never write
# into the hole past its first page (a SIGBUS on a full disk).
out["send_error"] = describe(send_until_error(300, b"a"))
try:
    store.flush()
    out["flush_error"] = None
except mqlite.MQError as exc:
    out["flush_error"] = describe(exc)

os.remove(filler)
store.flush()
got = read_all()
out["all_acked_readable_after"] = all(got.get(o) == b for o, b in acked)
n0 = len(acked)
out["resume_error"] = describe(send_until_error(300, b"c"))
out["acked_after_space_returned"] = len(acked) - n0
store.close()
store = mqlite.open(path, **cfg)
got = read_all()
out["reopen_all_acked_present"] = all(got.get(o) == b for o, b in acked)
store.close()
print(json.dumps(out))
"""


FIRST_TOUCH_CHILD = r"""
import json, os, sys
import mqlite
from mqlite import Message, MessageQueue

root = sys.argv[1]
path = os.path.join(root, "store")
# The default open: a shared writer, with run/writer.shm and the wake-up page mapped.
cfg = dict(commit_log_file_size=256 << 10, max_message_size=16 << 10)
out = {}

def outcome(call):
    try:
        return {"ok": call()}
    except mqlite.MQError as exc:
        return {"type": type(exc).__name__, "errno": getattr(exc, "errno", None),
                "filename": getattr(exc, "filename", None)}

store = mqlite.open(path, **cfg)
store.create_topic("t", 1)  # the topic's journal record is written before the disk fills
mq = MessageQueue("t", 0)
# The commit log's first file is made by the background preparer; a flush waits for its file
# jobs, so the file is in place (its space reserved) before the disk fills.
store.flush()
assert os.path.exists(os.path.join(path, "commitlog", "0" * 20))
# Nothing has been sent: no process has touched the wake-up page or a table chunk yet.

filler = os.path.join(root, "filler")
with open(filler, "wb", buffering=0) as f:
    try:
        while True:
            f.write(b"\0" * 4096)
    except OSError as exc:
        out["filler_errno"] = exc.errno

# A consumer waiting sets its bit in the wake-up word: the page's first touch.
out["wait_while_full"] = outcome(lambda: store.wait_for({mq: 0}, 0.01))
producer = store.producer()
# The first send to the queue inserts its topic and queue into writer.shm's tables: chunks
# nothing touched before.
out["send_while_full"] = outcome(lambda: producer.send(Message("t", b"full"), queue_id=0).queue_offset)
out["offsets_while_full"] = list(store.offsets(mq))

os.remove(filler)  # space comes back
out["send_after"] = outcome(lambda: producer.send(Message("t", b"after"), queue_id=0).queue_offset)
out["wait_after"] = outcome(lambda: store.wait_for({mq: 0}, 60))
store.close()

# A first opener on a full disk builds writer.shm again: its header page cannot be reserved.
with open(filler, "wb", buffering=0) as f:
    try:
        while True:
            f.write(b"\0" * 4096)
    except OSError:
        pass
out["open_while_full"] = outcome(lambda: mqlite.open(path, **cfg).close())
out["run_dir_while_full"] = sorted(os.listdir(os.path.join(path, "run")))
os.remove(filler)
store = mqlite.open(path, **cfg)
out["bodies_after_reopen"] = [m.body.decode() for m in store.read_result(mq, 0, 10).messages]
store.close()
print(json.dumps(out))
"""


def test_shared_mappings_first_touched_on_a_full_disk_raise_store_full_never_sigbus(
        tmp_path: Path) -> None:
    """The runtime files a shared writer maps are sparse where unused. With the disk filled
    before their first touch: a consumer's wait (the wake-up page) works, the first send to a
    queue (new chunks of run/writer.shm's tables) raises StoreFullError naming writer.shm and
    writes nothing, a first opener rebuilding writer.shm raises StoreFullError and leaves no
    half-built file, and everything works once space returns. Before, each was a SIGBUS."""
    done = _run_on_tmpfs(tmp_path, FIRST_TOUCH_CHILD)
    assert done.returncode == 0, f"child rc {done.returncode} (135/-7 = SIGBUS): {done.stderr[-3000:]}"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    print(out)
    assert out["filler_errno"] == 28
    assert out["wait_while_full"] == {"ok": False}
    err = out["send_while_full"]
    assert err["type"] == "StoreFullError" and err["errno"] == 28, err
    assert err["filename"].endswith(os.path.join("run", "writer.shm")), err
    assert out["offsets_while_full"] == [0, 0], "a refused send wrote nothing"
    assert out["send_after"] == {"ok": 0}
    assert out["wait_after"] == {"ok": True}
    err = out["open_while_full"]
    assert err["type"] == "StoreFullError" and err["errno"] == 28, err
    assert ".writer.shm.tmp" not in out["run_dir_while_full"]
    assert out["bodies_after_reopen"] == ["after"]


SPARSE_WAKEUP_CHILD = r"""
import json, os, sys
import mqlite
from mqlite import Message, MessageQueue

root = sys.argv[1]
path = os.path.join(root, "store")
# Consume-queue files of 64 units are reserved whole: the reopened queue's recovery reads
# none of its holes.
cfg = dict(commit_log_file_size=256 << 10, consume_queue_file_units=64,
           max_message_size=16 << 10, exclusive=True)
mq = MessageQueue("t", 0)
out = {}
store = mqlite.open(path, **cfg)
store.create_topic("t", 1)
store.producer().send(Message("t", b"m0"), queue_id=0)  # the queue's file and first page
assert store.wait_for({mq: 0}, 60)
store.close()
# A wake-up file left sparse (as an older mqlite made it): its page is a hole.
wakeup = os.path.join(path, "wakeup")
os.remove(wakeup)
with open(wakeup, "wb") as f:
    f.truncate(4096)
out["wakeup_blocks"] = os.stat(wakeup).st_blocks

filler = os.path.join(root, "filler")
with open(filler, "wb", buffering=0) as f:
    try:
        while True:
            f.write(b"\0" * 4096)
    except OSError as exc:
        out["filler_errno"] = exc.errno

writer = mqlite.open(path, **cfg)  # its wake word cannot be reserved: it goes on without it
follower = mqlite.open(path, read_only=True)  # nor can the follower's: it polls
r = writer.producer().send(Message("t", b"m1"), queue_id=0)  # dispatch would publish the word
out["sent"] = r.queue_offset
out["follower_saw"] = follower.wait_for({mq: 1}, 60)
out["follower_bodies"] = [m.body.decode() for m in follower.read_result(mq, 0, 10).messages]
os.remove(filler)  # a clean close writes the queues' summary
follower.close()
writer.close()
print(json.dumps(out))
"""


def test_a_sparse_wake_up_page_on_a_full_disk_leaves_the_word_off_and_followers_poll(
        tmp_path: Path) -> None:
    """A wake-up file whose page is a hole (an older mqlite's) met with a full disk: neither
    the writer nor a read-only follower can reserve the page, so neither maps it (a fault into
    the hole would be a SIGBUS); the store opens, sends and dispatches, and the follower sees
    the message by polling."""
    done = _run_on_tmpfs(tmp_path, SPARSE_WAKEUP_CHILD)
    assert done.returncode == 0, f"child rc {done.returncode} (135/-7 = SIGBUS): {done.stderr[-3000:]}"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    print(out)
    assert out["wakeup_blocks"] == 0 and out["filler_errno"] == 28
    assert out["sent"] == 1
    assert out["follower_saw"] is True
    assert out["follower_bodies"] == ["m0", "m1"]


def _check_parked(done: subprocess.CompletedProcess[str], mode: str) -> None:
    assert done.returncode == 0, f"child rc {done.returncode} (135/-7 = SIGBUS): {done.stderr[-3000:]}"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    print(out)
    assert out["unmapped"] is True, "the idle queue's file stayed mapped"
    assert out["filler_errno"] == 28
    err = out["send_error"] if mode == "sync" else out["flush_error"]
    assert err is not None, "the queue wrote past its reservation on a full disk"
    assert err["type"] == "StoreFullError" and err["errno"] == 28, err
    assert err["filename"].endswith(os.path.join("park", "0", "0" * 20)), err
    assert out["all_acked_readable_after"] is True
    assert out["resume_error"] is None
    assert out["acked_after_space_returned"] == 300
    assert out["reopen_all_acked_present"] is True


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_queue_file_mapped_again_after_idling_reserves_before_writing_on_a_full_disk(
        tmp_path: Path, mode: str) -> None:
    """A consume queue idle between two flushes lets go of its file, which is unmapped
    (max_mapped_files=0). Mapped again for the next units on a full disk, it counts nothing as
    reserved: the writer's reservation fails with StoreFullError naming the unit file (from a
    sync-mode send, or from flush()), never a SIGBUS from writing into the file's hole through
    the new mapping; once space returns every acknowledged message is readable, sends resume,
    and a reopen shows them all."""
    _check_parked(_run_on_tmpfs(tmp_path, PARKED_CHILD, mode), mode)


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_shared_queue_file_mapped_again_on_a_full_disk_never_raises_sigbus(
        tmp_path: Path, mode: str) -> None:
    """The test above with the default (shared) open, whose runtime mappings (the wake-up page,
    run/writer.shm) are reserved before the disk fills: the same outcome, every run."""
    _check_parked(_run_on_tmpfs(tmp_path, PARKED_CHILD, mode, "shared"), mode)
