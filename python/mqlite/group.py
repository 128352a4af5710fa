"""Consumer-group membership and queue ownership with kernel file locks.

A member holds two descriptors per group however many topics it subscribes to and queues it
owns. Layout, under ``<store>/consumer_groups/<group>/`` (rust/FORMAT.md §13):

- ``members.d/<client_id>.lock``: a member holds ``flock(LOCK_EX)`` on its file for as long as it
  subscribes to any topic of the group. A member is live exactly while the lock is held; probing
  with ``LOCK_SH | LOCK_NB`` fails on a live member's file. The kernel drops the lock when the
  process dies (even on ``kill -9``), so a dead member's file is found unlocked and removed.
- ``<topic>/members/<client_id>``: an empty marker, present while that member subscribes to
  ``topic``. It counts only while the member's lock above is held; a prober that finds the lock
  free removes the marker.
- ``queues.lock``: one empty file whose bytes stand for the group's queues. The owner of a queue
  holds an exclusive open-file-description record lock (``F_OFD_SETLK``) on the queue's byte,
  ``slot * 2**32 + queue_id``. The lock is the lease: a queue has at most one owner, and a dead
  owner's queues become free at once (the kernel drops the locks of a description when its last
  descriptor closes). Unlike POSIX record locks, closing another descriptor of the same file
  does not drop them, and locks of different descriptions conflict within one process too.
- ``members.d/<client_id>.owned``: the queues the member holds, one ``<topic> <queue_id>`` line
  each, written whole (by rename) when the set changed: once at the end of a rebalance, or at
  once for a queue taken or given up outside one. Removed when the member leaves its last topic.
  It counts only while the member is live, and may lag its locks by the rebalance in progress.
  It is what ``queue_owners`` reports; the byte lock alone decides ownership.
- ``slots.d/<n>``: the topic (its name in ASCII, nothing else) whose queues' bytes start at
  ``n * 2**32``. ``n`` is found by linear probing from a hash of the name and the file is
  published whole with ``link`` (it appears with its content or not at all, and never changes),
  so every process reads the same topic for ``n`` and no two topics share bytes.

Every member opens its own descriptors, so members in threads of one process exclude each other
as members in different processes do (both kinds of lock belong to open file descriptions).

Group and topic names become directory names here: ``group_dir`` and ``topic_dir``, the places
that build these paths, validate them (the rules a send applies), so no path can leave the store.
Topic names never contain a ``.``, so a topic directory never collides with ``members.d``,
``slots.d`` or ``queues.lock``.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import re
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from mqlite import _core
from mqlite._files import FILE_MODE, ensure_dir, open_lock, store_error, store_io, try_flock
from mqlite.errors import ClientIdInUseError, InvalidConfigError, InvalidGroupError
from mqlite.message import MessageQueue
from mqlite.topic import check_topic

__all__ = ["GroupMember", "check_client_id", "check_group", "live_members", "new_client_id", "queue_owners"]

_CLIENT_ID = re.compile(r"[A-Za-z0-9_.@-]{1,128}")
_COUNTER = itertools.count(1)

# A topic's queues own the bytes [slot << _QUEUE_BITS, (slot + 1) << _QUEUE_BITS) of queues.lock:
# room for every queue id a store can hold (queue ids are below 2**32).
_QUEUE_BITS = 32
# Slot numbers are below 2**30, so every byte offset is below 2**62 (off_t holds 2**63 - 1).
_SLOTS = 1 << 30
# More than the longest topic name: a longer slot file names no topic, whatever follows.
_SLOT_READ = 512


def check_group(group: object) -> str:
    """Validate a producer or consumer group name with the engine's rule (1 to 120 characters
    from ``[%|A-Za-z0-9_-]``: RocketMQ 5.x clients refuse longer names); returns it."""
    if not isinstance(group, str):
        raise InvalidGroupError(f"group must be a str, not {type(group).__name__}")
    _core.check_group(group)
    return group


def check_client_id(client_id: object) -> str:
    """Validate a client id (used in file names); returns it."""
    if not isinstance(client_id, str) or not _CLIENT_ID.fullmatch(client_id):
        raise InvalidConfigError(
            f"invalid client_id {client_id!r}: 1 to 128 characters from [A-Za-z0-9_.@-]"
        )
    return client_id


def new_client_id() -> str:
    """A fresh id unique on this machine: ``host@pid-n-random``."""
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:64] or "host"
    return f"{host}@{os.getpid()}-{next(_COUNTER)}-{secrets.token_hex(3)}"


def group_dir(root: Path, group: str) -> Path:
    """The directory of a group's lock files; the name is validated first (InvalidGroupError),
    so it is always inside ``root``."""
    return root / "consumer_groups" / check_group(group)


def topic_dir(root: Path, group: str, topic: str) -> Path:
    """The directory holding a group's subscription markers for one topic; the names are
    validated first (InvalidGroupError, InvalidTopicError), so it is always inside ``root``."""
    return group_dir(root, group) / check_topic(topic)


def _member_lock(gdir: Path, client_id: str) -> Path:
    return gdir / "members.d" / f"{client_id}.lock"


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _touch(path: Path) -> None:
    ensure_dir(path.parent)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, FILE_MODE))


def _live(gdir: Path, client_id: str) -> bool:
    """Whether ``client_id``'s member lock is held. A dead member's lock file is removed while
    the probe's shared lock keeps a new member of that id from locking it."""
    path = _member_lock(gdir, client_id)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        if not try_flock(fd, exclusive=False):
            return True
        if _same_file(fd, path):
            _unlink(path)
        return False
    finally:
        os.close(fd)


@store_io("list group members")
def live_members(root: Path, group: str, topic: str, *, own: str | None = None) -> list[str]:
    """Sorted ids of the live members subscribed to ``topic``; removes dead members' markers.
    ``own`` is counted live without a probe (the caller holds its lock)."""
    gdir = group_dir(root, group)
    markers = topic_dir(root, group, topic) / "members"
    try:
        names = os.listdir(markers)
    except FileNotFoundError:
        return []
    alive: list[str] = []
    for cid in names:
        if not _CLIENT_ID.fullmatch(cid):
            continue  # not a marker this module writes
        if cid == own or _live(gdir, cid):
            alive.append(cid)
        else:
            # A member of this id that starts now re-creates its marker at its next check.
            _unlink(markers / cid)
    return sorted(alive)


def _owned_file(gdir: Path, client_id: str) -> Path:
    return gdir / "members.d" / f"{client_id}.owned"


@store_io("list queue owners")
def queue_owners(root: Path, group: str, topic: str) -> dict[int, str]:
    """The client id of the live member holding each of the topic's held queues, by queue id
    (queues no live member holds are absent)."""
    gdir = group_dir(root, group)
    try:
        names = os.listdir(gdir / "members.d")
    except FileNotFoundError:
        return {}
    out: dict[int, str] = {}
    want = topic.encode("ascii")
    for name in sorted(names):
        cid = name.removesuffix(".owned")
        if cid == name or not _CLIENT_ID.fullmatch(cid):
            continue  # a member lock, or a temporary file being renamed into place
        try:
            lines = _owned_file(gdir, cid).read_bytes().splitlines()
        except FileNotFoundError:
            continue  # the member left meanwhile
        mine = [q for t, _, q in (line.partition(b" ") for line in lines) if t == want and q.isdigit()]
        if mine and _live(gdir, cid):
            out.update((int(q), cid) for q in mine)
    return out


def _slot_start(topic: str) -> int:
    digest = hashlib.blake2b(topic.encode("ascii"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % _SLOTS


def _publish(path: Path, content: bytes) -> bool:
    """Create ``path`` holding ``content`` in one step (``link`` of a complete temporary file);
    False when ``path`` already exists."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    try:
        os.write(fd, content)
    except OSError as exc:
        # A write's error names no file: name the one it was for (a full disk, say).
        _unlink(tmp)
        raise store_error(exc, "write", tmp) from exc
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        _unlink(tmp)
    return True


def topic_slot(gdir: Path, topic: str) -> int:
    """The topic's slot in the group's ``queues.lock``: the first ``slots.d/<n>`` from the name's
    hash on that names the topic, created when a free number comes first. Slot files are never
    removed or changed, so the probe sequence every process walks is the same."""
    slots = ensure_dir(gdir / "slots.d")
    want = topic.encode("ascii")
    n = _slot_start(topic)
    while True:
        path = slots / str(n)
        try:
            with open(path, "rb") as f:
                held = f.read(_SLOT_READ)
        except FileNotFoundError:
            if _publish(path, want):
                return n
            continue  # another process published it first: read what it holds
        except IsADirectoryError:
            held = b""  # not a slot file: the number is taken
        if held == want:
            return n
        n = (n + 1) % _SLOTS


class GroupMember:
    """One consumer's membership in a group: the member lock, a subscription marker per topic
    and the byte locks of its queues, over two descriptors."""

    def __init__(self, root: Path, group: str, client_id: str) -> None:
        self.root = root
        self.group = group
        self.client_id = client_id
        self._dir = group_dir(root, group)
        self._member_fd: int | None = None
        self._queues_fd: int | None = None
        self._topics: set[str] = set()
        self._slots: dict[str, int] = {}
        self._queues: set[MessageQueue] = set()
        # The queues members.d/<id>.owned last recorded, and the depth of `batch` calls.
        self._published: frozenset[MessageQueue] = frozenset()
        self._deferring = 0

    def _marker(self, topic: str) -> Path:
        return topic_dir(self.root, self.group, topic) / "members" / self.client_id

    def _lock_member(self, wait: float, topic: str) -> None:
        """Take this id's member lock, then remove markers a dead member of the same id left
        in other topics (they would count it subscribed where it is not)."""
        path = _member_lock(self._dir, self.client_id)
        deadline = time.monotonic() + wait
        while True:
            fd = open_lock(path)
            if try_flock(fd):
                if _same_file(fd, path):
                    break
                os.close(fd)  # a prober removed a stale file between our open and lock
                continue
            os.close(fd)
            # A prober holds a shared lock for microseconds; a live member holds it for good.
            if time.monotonic() >= deadline:
                raise ClientIdInUseError(
                    f"client id {self.client_id!r} is already used by a live consumer of group "
                    f"{self.group!r} (topic {topic!r})"
                )
            time.sleep(0.002)
        self._member_fd = fd
        for entry in os.scandir(self._dir):
            if "." not in entry.name and entry.is_dir(follow_symlinks=False):
                _unlink(Path(entry.path) / "members" / self.client_id)

    @store_io("join group")
    def join(self, topic: str, wait: float = 0.5) -> None:
        """Register as a live member for ``topic``; ClientIdInUseError if the id is taken."""
        if topic in self._topics:
            return
        marker = self._marker(topic)
        if self._member_fd is None:
            self._lock_member(wait, topic)
        _touch(marker)
        self._topics.add(topic)

    @store_io("join group")
    def check(self, topic: str) -> None:
        """Re-create our marker if a racing prober removed it (it probed our id's lock before
        we took it)."""
        if topic in self._topics:
            marker = self._marker(topic)
            if not marker.exists():
                _touch(marker)

    def leave(self, topic: str) -> None:
        """Release the topic's queues and remove its marker; after the last topic, give the
        member lock up too."""
        with self.batch():
            for mq in [mq for mq in self._queues if mq.topic == topic]:
                self.release(mq)
        if topic not in self._topics:
            return
        self._topics.discard(topic)
        with contextlib.suppress(OSError):
            _unlink(self._marker(topic))
        if not self._topics:
            self._drop_locks()

    def _drop_locks(self) -> None:
        # The record goes while the member lock is still held: a new member of this id cannot
        # have written its own yet.
        with contextlib.suppress(OSError):
            _unlink(_owned_file(self._dir, self.client_id))
        self._published = frozenset()
        fd, self._member_fd = self._member_fd, None
        if fd is not None:
            path = _member_lock(self._dir, self.client_id)
            with contextlib.suppress(OSError):
                if _same_file(fd, path):
                    os.unlink(path)
            os.close(fd)
        qfd, self._queues_fd = self._queues_fd, None
        if qfd is not None:
            os.close(qfd)  # releases every byte lock still held
        self._queues.clear()

    def live_members(self, topic: str) -> list[str]:
        """Sorted ids of the topic's live members, this one included."""
        return live_members(self.root, self.group, topic, own=self.client_id)

    def _byte(self, mq: MessageQueue) -> int:
        slot = self._slots.get(mq.topic)
        if slot is None:
            slot = self._slots[mq.topic] = topic_slot(self._dir, mq.topic)
        return (slot << _QUEUE_BITS) | mq.queue_id

    @store_io("lock queue")
    def try_acquire(self, mq: MessageQueue) -> bool:
        """Take the queue's lock if no live member holds it."""
        if mq in self._queues:
            return True
        if not 0 <= mq.queue_id < 1 << _QUEUE_BITS:
            return False  # no store has such a queue
        if self._queues_fd is None:
            self._queues_fd = open_lock(self._dir / "queues.lock")
        if _core.ofd_try_lock(self._queues_fd, self._byte(mq), 1):
            self._queues.add(mq)
            self._publish()
            return True
        return False

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Queues taken and given up inside are recorded (``members.d/<id>.owned``) once, at
        the end: a rebalance of many queues writes the record once, not once per queue."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1
            self._publish()

    def _publish(self) -> None:
        """Records the queues held, when they changed since the last record. The record only
        informs ``queue_owners``: a failure to write it (a full disk) leaves the queues held and
        is retried at the next change."""
        if self._deferring or self._member_fd is None:
            return
        held = frozenset(self._queues)
        if held == self._published:
            return
        path = _owned_file(self._dir, self.client_id)
        if not held:
            with contextlib.suppress(OSError):
                _unlink(path)
            self._published = held
            return
        lines = "".join(f"{mq.topic} {mq.queue_id}\n" for mq in sorted(held))
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
            try:
                os.write(fd, lines.encode("ascii"))
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                _unlink(tmp)
            return
        self._published = held

    @store_io("unlock queue")
    def release(self, mq: MessageQueue) -> None:
        """Give a queue up."""
        if mq in self._queues and self._queues_fd is not None:
            self._queues.discard(mq)
            _core.ofd_unlock(self._queues_fd, self._byte(mq), 1)
            self._publish()

    def owned(self) -> set[MessageQueue]:
        """The queues whose locks this member holds."""
        return set(self._queues)

    def close(self) -> None:
        """Leave every topic and close both descriptors."""
        for topic in list(self._topics):
            with contextlib.suppress(OSError):
                _unlink(self._marker(topic))
        self._topics.clear()
        self._drop_locks()
