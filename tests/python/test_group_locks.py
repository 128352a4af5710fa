"""Consumer-group locks: a member's descriptors do not grow with what it owns, a queue has one
live owner, and a killed member's queues are free at once (rust/FORMAT.md §13)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Callable

from mqlite import MessageQueue
from mqlite.group import GroupMember, live_members

TOPICS = ("a", "b")
QUEUES = 1_000


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def every_queue() -> list[MessageQueue]:
    return [MessageQueue(t, q) for t in TOPICS for q in range(QUEUES)]


def test_a_member_holds_two_descriptors_whatever_it_owns(tmp_path: Path) -> None:
    member = GroupMember(tmp_path, "g", "m1")
    before = open_fds()
    for topic in TOPICS:
        member.join(topic)
    assert all(member.try_acquire(mq) for mq in every_queue())
    assert member.owned() == set(every_queue())
    # The member lock and the group's queue-lock file, for 2 topics and 2,000 queues.
    assert open_fds() - before == 2
    member.close()
    assert open_fds() == before


def test_a_consumer_of_thousands_of_queues_under_a_low_descriptor_limit(
    tmp_path: Path, run_py: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """The user-level symptom: a clustering consumer of 300 queues subscribes and reads under
    ``ulimit -n 64`` (a child process, so only it runs under the limit)."""
    script = """
        import resource, sys
        import mqlite
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        with mqlite.open(sys.argv[1], consume_queue_file_units=64) as store:
            p = store.producer()
            for t in ("a", "b"):
                store.create_topic(t, 150)
                for q in range(0, 150, 15):
                    p.send(mqlite.Message(t, b"x"), queue_id=q)
            c = store.pull_consumer("g", consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
            c.subscribe("a")
            c.subscribe("b")
            got = 0
            for _ in range(20):
                got += len(c.poll(timeout=0))
            print(len(c.assignment()), got)
            c.close()
        """
    done = run_py(script, tmp_path / "s", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["300", "20"]


def test_two_live_members_never_own_one_queue(tmp_path: Path) -> None:
    first, second = GroupMember(tmp_path, "g", "m1"), GroupMember(tmp_path, "g", "m2")
    for m in (first, second):
        m.join("a")
    mine = [MessageQueue("a", q) for q in range(0, QUEUES, 2)]
    assert all(first.try_acquire(mq) for mq in mine)
    # Both members live in this process: their locks conflict all the same (one open file
    # description each), and the second takes exactly the queues the first does not hold.
    taken = {mq for mq in (MessageQueue("a", q) for q in range(QUEUES)) if second.try_acquire(mq)}
    assert taken == {MessageQueue("a", q) for q in range(1, QUEUES, 2)}
    assert first.owned().isdisjoint(second.owned())
    # A queue given up goes to the other member, and only then.
    first.release(MessageQueue("a", 0))
    assert second.try_acquire(MessageQueue("a", 0))
    assert not first.try_acquire(MessageQueue("a", 0))
    first.close()
    second.close()


def test_closing_other_descriptors_of_the_lock_file_keeps_a_members_queues(tmp_path: Path) -> None:
    """POSIX record locks would drop every lock of the process when any descriptor of the file
    closes; a member's byte locks belong to its own open file description."""
    owner = GroupMember(tmp_path, "g", "owner")
    owner.join("a")
    assert all(owner.try_acquire(MessageQueue("a", q)) for q in range(8))
    # Another member of the process opens the same file, locks and unlocks, and closes it.
    passer = GroupMember(tmp_path, "g", "passer")
    passer.join("a")
    assert passer.try_acquire(MessageQueue("a", 100))
    passer.close()
    os.close(os.open(tmp_path / "consumer_groups" / "g" / "queues.lock", os.O_RDONLY))
    rival = GroupMember(tmp_path, "g", "rival")
    rival.join("a")
    assert not any(rival.try_acquire(MessageQueue("a", q)) for q in range(8))
    owner.close()
    rival.close()


def test_topics_of_one_group_never_share_a_queue_byte(tmp_path: Path) -> None:
    """Each topic gets its own slot of bytes in queues.lock: owning queue 0 of one topic never
    blocks queue 0 of another, whatever the order in which processes first meet the topics."""
    names = [f"t{i}" for i in range(200)]
    first, second = GroupMember(tmp_path, "g", "m1"), GroupMember(tmp_path, "g", "m2")
    for topic in names:
        first.join(topic)
        second.join(topic)
    assert all(first.try_acquire(MessageQueue(t, 0)) for t in names[::2])
    assert all(second.try_acquire(MessageQueue(t, 0)) for t in reversed(names[1::2]))
    slots = {p.name: p.read_bytes() for p in (tmp_path / "consumer_groups" / "g" / "slots.d").iterdir()}
    assert sorted(slots.values()) == sorted(t.encode() for t in names)
    first.close()
    second.close()


HOLDER = """
import resource, sys
from pathlib import Path
from mqlite import MessageQueue
from mqlite.group import GroupMember
# Far fewer descriptors than queues: the holder must not need one per queue.
resource.setrlimit(resource.RLIMIT_NOFILE, (32, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
member = GroupMember(Path(sys.argv[1]), "g", "holder")
for topic in ("a", "b"):
    member.join(topic)
    for q in range(1000):
        assert member.try_acquire(MessageQueue(topic, q))
print("owned", len(member.owned()), flush=True)
sys.stdin.read()  # until killed
"""


def test_a_killed_member_loses_its_queues_and_membership_at_once(
    tmp_path: Path, spawn_py: Callable[..., subprocess.Popen[str]]
) -> None:
    holder = spawn_py(HOLDER, tmp_path)
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()  # printed once every lock is held
        assert line.split() == ["owned", "2000"], holder.stderr.read() if holder.stderr else ""
        survivor = GroupMember(tmp_path, "g", "survivor")
        for topic in TOPICS:
            survivor.join(topic)
        assert live_members(tmp_path, "g", "a") == ["holder", "survivor"]
        assert not any(survivor.try_acquire(mq) for mq in every_queue())
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.communicate(timeout=30)
    assert holder.returncode == -signal.SIGKILL
    # The process is gone (reaped above), so the kernel has dropped its locks: no lease to wait
    # out, no rebalance interval.
    assert all(survivor.try_acquire(mq) for mq in every_queue())
    assert live_members(tmp_path, "g", "a") == ["survivor"]
    assert live_members(tmp_path, "g", "b") == ["survivor"]
    group = tmp_path / "consumer_groups" / "g"
    assert not (group / "members.d" / "holder.lock").exists()
    assert sorted(p.name for p in (group / "a" / "members").iterdir()) == ["survivor"]
    survivor.close()
