"""Consumer-group membership and queue ownership with kernel file locks.

Layout, per group and subscribed topic, under ``<store>/consumer_groups/<group>/<topic>/``:

- ``members/<client_id>.lock``: a member holds ``flock(LOCK_EX)`` on its file for as long as it
  subscribes. A member is live exactly while the lock is held; probing with
  ``LOCK_SH | LOCK_NB`` fails on a live member's file. The kernel drops the lock when the process
  dies (even on ``kill -9``), so a dead member's file is found unlocked and removed.
- ``queues/<queue_id>.lock``: the owner of a queue holds ``flock(LOCK_EX | LOCK_NB)`` on it. The
  lock is the lease: a queue has at most one owner, and a dead owner's queues become free at once.

Every member opens its own descriptors, so members in threads of one process exclude each other
as members in different processes do (``flock`` locks belong to open file descriptions).

Group and topic names become directory names here: ``topic_dir``, the one place that builds
these paths, validates both (the rules a send applies), so no path can leave the store.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import os
import re
import secrets
import socket
import time
from pathlib import Path

from mqlite import _core
from mqlite._files import open_lock, store_io, try_flock
from mqlite.errors import ClientIdInUseError, InvalidConfigError, InvalidGroupError
from mqlite.message import MessageQueue
from mqlite.topic import check_topic

__all__ = ["GroupMember", "check_client_id", "check_group", "live_members", "new_client_id"]

_CLIENT_ID = re.compile(r"[A-Za-z0-9_.@-]{1,128}")
_COUNTER = itertools.count(1)


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


def topic_dir(root: Path, group: str, topic: str) -> Path:
    """The directory holding a group's member and queue locks for one topic; the names are
    validated first (InvalidGroupError, InvalidTopicError), so it is always inside ``root``."""
    return root / "consumer_groups" / check_group(group) / check_topic(topic)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


@store_io("list group members")
def live_members(root: Path, group: str, topic: str, *, own: str | None = None) -> list[str]:
    """Sorted ids of the live members subscribed to ``topic``; removes dead members' files."""
    members = topic_dir(root, group, topic) / "members"
    try:
        names = os.listdir(members)
    except FileNotFoundError:
        return []
    alive: list[str] = []
    for name in names:
        if not name.endswith(".lock"):
            continue
        cid = name[: -len(".lock")]
        if cid == own:
            alive.append(cid)
            continue
        path = members / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            if not try_flock(fd, exclusive=False):
                alive.append(cid)
            elif _same_file(fd, path):
                # Unlocked: its owner is gone. Remove it while we hold the probe lock.
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
        finally:
            os.close(fd)
    return sorted(alive)


class GroupMember:
    """One consumer's membership in a group: member locks per topic and owned queue locks."""

    def __init__(self, root: Path, group: str, client_id: str) -> None:
        self.root = root
        self.group = group
        self.client_id = client_id
        self._members: dict[str, int] = {}
        self._queues: dict[MessageQueue, int] = {}

    def _member_path(self, topic: str) -> Path:
        return topic_dir(self.root, self.group, topic) / "members" / f"{self.client_id}.lock"

    @store_io("join group")
    def join(self, topic: str, wait: float = 0.5) -> None:
        """Register as a live member for ``topic``; ClientIdInUseError if the id is taken."""
        if topic in self._members:
            return
        path = self._member_path(topic)
        deadline = time.monotonic() + wait
        while True:
            fd = open_lock(path)
            if try_flock(fd):
                if _same_file(fd, path):
                    self._members[topic] = fd
                    return
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

    @store_io("join group")
    def check(self, topic: str) -> None:
        """Re-create our member file if a racing prober removed it."""
        fd = self._members.get(topic)
        if fd is not None and not _same_file(fd, self._member_path(topic)):
            del self._members[topic]
            os.close(fd)
            self.join(topic)

    def leave(self, topic: str) -> None:
        """Release the topic's queues and the member lock, and remove the member file."""
        for mq in [mq for mq in self._queues if mq.topic == topic]:
            self.release(mq)
        fd = self._members.pop(topic, None)
        if fd is None:
            return
        path = self._member_path(topic)
        try:
            if _same_file(fd, path):
                os.unlink(path)
        except OSError:
            pass
        os.close(fd)

    def live_members(self, topic: str) -> list[str]:
        """Sorted ids of the topic's live members, this one included."""
        return live_members(self.root, self.group, topic, own=self.client_id)

    @store_io("lock queue")
    def try_acquire(self, mq: MessageQueue) -> bool:
        """Take the queue's lock if no live member holds it."""
        if mq in self._queues:
            return True
        path = topic_dir(self.root, self.group, mq.topic) / "queues" / f"{mq.queue_id}.lock"
        fd = open_lock(path)
        if try_flock(fd):
            self._queues[mq] = fd
            return True
        os.close(fd)
        return False

    @store_io("unlock queue")
    def release(self, mq: MessageQueue) -> None:
        """Give a queue up."""
        fd = self._queues.pop(mq, None)
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            except OSError as exc:  # pragma: no cover - closing releases the lock anyway
                if exc.errno != errno.EBADF:
                    raise
            os.close(fd)

    def owned(self) -> set[MessageQueue]:
        """The queues whose locks this member holds."""
        return set(self._queues)

    def close(self) -> None:
        """Leave every topic."""
        for topic in list(self._members):
            self.leave(topic)
        for mq in list(self._queues):
            self.release(mq)
