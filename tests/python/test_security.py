"""Security checks (reliability plan B.h).

- created directories are 0o700 and files 0o600 under umask 022 and 000, and both are
  configurable (``dir_mode``, ``file_mode``);
- a symlink planted at a store file name is refused with a typed error, and its target (a
  canary file) is never written;
- every descriptor the store opens is close-on-exec: a child started with ``close_fds=False``
  inherits none of them;
- topic and group names cannot reach outside the store through consumers and admin calls:
  ``subscribe``, ``reset_offset`` and a read-only reader refuse ``..`` and absolute names
  before touching a file, and never create or delete anything outside the store;
- the Python package uses no pickle / marshal / shelve / eval / exec.
"""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import mqlite
from mqlite import Message
from mqlite import errors as E

SMALL = {"commit_log_file_size": 64 << 10, "consume_queue_file_units": 64, "max_message_size": 4096}
PACKAGE = Path(mqlite.__file__).resolve().parent


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def populate(root: Path, **config: object) -> None:
    """A store with every kind of file: commit-log roll, two consume-queue files, topics.json."""
    with mqlite.open(root, **{**SMALL, **config}) as store:
        store.create_topic("sec", 2)
        producer = store.producer()
        for i in range(300):
            producer.send(Message("sec", b"p" * 400), queue_id=i % 2)
        store.flush()
        assert store.stats()["commit_log_max_offset"] > 64 << 10, "no roll happened"


def modes(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    dirs, files = {}, {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            p = os.path.join(dirpath, d)
            dirs[os.path.relpath(p, root)] = stat.S_IMODE(os.lstat(p).st_mode)
        for f in filenames:
            p = os.path.join(dirpath, f)
            files[os.path.relpath(p, root)] = stat.S_IMODE(os.lstat(p).st_mode)
    dirs["."] = stat.S_IMODE(os.lstat(root).st_mode)
    return dirs, files


@pytest.mark.parametrize("mask", [0o022, 0o000], ids=["umask022", "umask000"])
def test_default_modes_are_private(tmp_path: Path, mask: int) -> None:
    root = tmp_path / "store"
    with umask(mask):
        populate(root)
    dirs, files = modes(root)
    assert len(files) >= 6 and any(f.startswith("consumequeue/") for f in files)
    assert any(f.startswith("commitlog/") for f in files) and "checkpoint" in files
    assert {d: m for d, m in dirs.items() if m != 0o700} == {}
    assert {f: m for f, m in files.items() if m != 0o600} == {}


def test_modes_are_configurable(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with umask(0o000):
        populate(root, file_mode=0o640, dir_mode=0o750)
    dirs, files = modes(root)
    assert {d: m for d, m in dirs.items() if m != 0o750} == {}
    assert {f: m for f, m in files.items() if m != 0o640} == {}


def test_invalid_mode_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(E.InvalidConfigError, match="mode"):
        mqlite.open(tmp_path / "s", file_mode=0o4777)
    assert not (tmp_path / "s").exists()


# ---- planted symlinks -----------------------------------------------------------------------

SYMLINK_TARGETS = [
    "commitlog/00000000000000000000",
    "commitlog/00000000000000065536",  # the name the next roll would use
    "consumequeue/sec/0/00000000000000000000",
    "checkpoint",
    "lock",
    "abort",
]


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[Path]:
    c = tmp_path / "canary"
    c.write_bytes(b"canary " * 100)
    digest = hashlib.sha256(c.read_bytes()).hexdigest()
    yield c
    assert hashlib.sha256(c.read_bytes()).hexdigest() == digest, "the symlink target was written"


@pytest.mark.parametrize("name", SYMLINK_TARGETS)
def test_symlink_at_a_store_file_name_is_refused(tmp_path: Path, canary: Path, name: str) -> None:
    root = tmp_path / "store"
    with mqlite.open(root, **SMALL) as store:
        store.producer().send(Message("sec", b"x"), queue_id=0)
    path = root / name
    if path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(canary)
    mode_before = canary.stat().st_mode
    with pytest.raises((E.StoreIOError, E.CorruptedLogError)) as info:
        with mqlite.open(root, **SMALL) as store:
            producer = store.producer()
            for _ in range(300):  # enough to roll into the planted next file
                producer.send(Message("sec", b"y" * 400), queue_id=0)
    text = str(info.value)
    assert name.split("/")[-1] in text and ("symlink" in text or "symbolic link" in text), text
    assert path.is_symlink(), "the planted link itself is left for the operator"
    assert canary.stat().st_mode == mode_before


def test_symlink_at_topics_json_is_refused(tmp_path: Path, canary: Path) -> None:
    root = tmp_path / "store"
    with mqlite.open(root, **SMALL) as store:
        store.create_topic("sec", 2)
    path = root / "config" / "topics.json"
    path.unlink()
    path.symlink_to(canary)
    with pytest.raises((E.StoreIOError, E.CorruptedLogError)):
        mqlite.open(root, **SMALL).close()


def test_symlink_at_topics_json_never_writes_the_target(tmp_path: Path, canary: Path) -> None:
    root = tmp_path / "store"
    with mqlite.open(root, **SMALL) as store:
        store.create_topic("sec", 2)
    path = root / "config" / "topics.json"
    path.unlink()
    path.symlink_to(canary)
    try:
        with mqlite.open(root, **SMALL) as store:
            store.create_topic("another", 1)  # rewrites topics.json
    except (E.StoreIOError, E.CorruptedLogError):
        pass
    # the canary fixture checks the target is unchanged


# ---- names that would leave the store ------------------------------------------------------

def outside_tree(base: Path, store: Path) -> dict[str, bytes | None]:
    """Every path under ``base`` but outside ``store``, with file contents (None: directory)."""
    out: dict[str, bytes | None] = {}
    for p in sorted(base.rglob("*")):
        if p == store or store in p.parents:
            continue
        out[str(p.relative_to(base))] = None if p.is_dir() else p.read_bytes()
    return out


def test_consumer_and_admin_topics_cannot_leave_the_store(tmp_path: Path) -> None:
    victim = tmp_path / "victim" / "members"
    victim.mkdir(parents=True)
    (victim / "precious.lock").write_text("not mqlite's file")  # unlocked: a dead member's look
    (tmp_path / "abs" / "members").mkdir(parents=True)
    (tmp_path / "abs" / "members" / "other.lock").write_text("")
    root = tmp_path / "store"
    with mqlite.open(root) as store:
        store.create_topic("t", 1)
        before = outside_tree(tmp_path, root)
        # <store>/consumer_groups/g/../../../victim is <tmp_path>/victim
        names = ["../../../victim", "../../../outside", str(tmp_path / "abs"), str(tmp_path / "abs2")]
        for name in names:
            with store.pull_consumer("g") as consumer:
                with pytest.raises(E.InvalidTopicError):
                    consumer.subscribe(name)
            with pytest.raises(E.InvalidTopicError):
                store.reset_offset("g", name, offset=0, force=True)
            push = store.push_consumer("g")
            with pytest.raises(E.InvalidTopicError):
                push.subscribe(name)
            push.shutdown()
        for group in ("../../victim", str(tmp_path / "abs")):
            with pytest.raises(E.InvalidGroupError):
                store.reset_offset(group, "t", offset=0, force=True)
            with pytest.raises(E.InvalidGroupError):
                store.pull_consumer(group)
        assert outside_tree(tmp_path, root) == before, "a path outside the store changed"
        assert not (root / "consumer_groups").exists(), "a refused name created group files"


def test_read_only_reader_does_not_follow_a_topic_outside_the_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with mqlite.open(root, **SMALL) as store:
        store.create_topic("t", 1)
        store.producer().send(Message("t", b"secret"), queue_id=0)
    # A consume queue planted next to the store, where "../../planted" would lead from
    # <store>/consumequeue.
    shutil.copytree(root / "consumequeue" / "t", tmp_path / "planted")
    with mqlite.open(root, read_only=True) as reader:
        for call in (
            lambda: reader.read(mqlite.MessageQueue("../../planted", 0), 0),
            lambda: reader.offsets(mqlite.MessageQueue("../../planted", 0)),
            lambda: reader.offset_for_timestamp(mqlite.MessageQueue("../../planted", 0), 0),
            lambda: reader.queues("../../planted"),
        ):
            with pytest.raises(E.InvalidTopicError):
                call()


# ---- close-on-exec --------------------------------------------------------------------------

def store_fds(root: Path) -> dict[int, str]:
    out = {}
    real = str(root.resolve())
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(real):
            out[int(fd)] = target
    return out


def test_every_store_descriptor_is_close_on_exec(tmp_path: Path) -> None:
    root = tmp_path / "store"
    populate(root)
    with mqlite.open(root, **SMALL) as store:
        store.producer().send(Message("sec", b"x"), queue_id=0)
        fds = store_fds(root)
        assert fds, "the open store holds no descriptor in its directory?"
        checked = 0
        for fd in fds:
            flags = None
            try:
                with open(f"/proc/self/fdinfo/{fd}") as info:
                    for line in info:
                        if line.startswith("flags:"):
                            flags = int(line.split()[1], 8)
            except FileNotFoundError:
                continue  # closed meanwhile by a store thread (a short-lived file such as a temp)
            checked += 1
            assert flags is not None and flags & 0o2000000, f"fd {fd} ({fds[fd]}) lacks O_CLOEXEC"
        assert checked, "every store descriptor vanished before it could be checked"
        # a child that inherits every inheritable descriptor sees none of them
        probe = (
            "import os, sys\n"
            "root = sys.argv[1]\n"
            "for f in os.listdir('/proc/self/fd'):\n"
            "    try:\n"
            "        t = os.readlink('/proc/self/fd/' + f)\n"
            "    except OSError:\n"
            "        continue\n"
            "    if t.startswith(root):\n"
            "        print(f, t)\n"
        )
        done = subprocess.run([sys.executable, "-c", probe, str(root.resolve())], close_fds=False,
                              capture_output=True, text=True, timeout=60, check=True)
        assert done.stdout.strip() == "", f"descriptors leaked into the child: {done.stdout}"


# ---- no deserialisation of untrusted data ---------------------------------------------------

FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}


def test_package_uses_no_pickle_marshal_eval_exec() -> None:
    sources = sorted(PACKAGE.rglob("*.py"))
    assert sources, PACKAGE
    hits = []
    for path in sources:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                hits += [f"{path.name}:{node.lineno} import {a.name}" for a in node.names
                         if a.name.split(".")[0] in FORBIDDEN_MODULES]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FORBIDDEN_MODULES:
                hits.append(f"{path.name}:{node.lineno} from {node.module} import")
            elif isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if name in FORBIDDEN_CALLS and not (isinstance(f, ast.Attribute) and name == "compile"):
                    hits.append(f"{path.name}:{node.lineno} call {name}()")
    assert hits == [], hits
