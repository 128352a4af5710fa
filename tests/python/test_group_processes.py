"""A consumer group across processes: three read-only member processes share a topic written
by this process; one is killed with SIGKILL and its queues move to the survivors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import mqlite
from mqlite import Message

CHILD = Path(__file__).with_name("group_child.py")
QUEUES = 6


class Member:
    """A child process and the lines it printed."""

    def __init__(self, store: Path, cid: str, stop: Path) -> None:
        env = dict(os.environ)
        root = str(Path(mqlite.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.cid = cid
        self.proc = subprocess.Popen(
            [sys.executable, "-u", str(CHILD), str(store), "grp", "t", cid, str(stop)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )
        self.lines: list[dict[str, object]] = []
        self.stderr = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(json.loads(raw))

    def assignment(self) -> list[int]:
        for line in reversed(self.lines):
            if "assign" in line:
                return list(line["assign"])  # type: ignore[call-overload]
        return []

    def consumed(self) -> list[tuple[int, int]]:
        return [(int(ln["q"]), int(ln["o"])) for ln in list(self.lines) if "q" in ln]  # type: ignore[call-overload]

    def finish(self) -> None:
        if self.proc.stdout is not None and self.proc.stdout.closed:
            return
        self.proc.wait(timeout=30)
        self._reader.join(timeout=10)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.proc.stdout.close()
        self.stderr = self.proc.stderr.read().decode(errors="replace")
        self.proc.stderr.close()


def wait_until(cond: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError("timed out")


def test_members_in_processes_share_and_take_over_after_kill(tmp_path: Path) -> None:
    path = tmp_path / "store"
    stop = tmp_path / "stop"
    with mqlite.open(path) as store:
        store.create_topic("t", QUEUES)
        store.flush()
        members = [Member(path, f"p{i}", stop) for i in range(3)]
        try:
            wait_until(lambda: sorted(q for m in members for q in m.assignment()) == list(range(QUEUES))
                       and all(len(m.assignment()) == 2 for m in members))
            producer = store.producer()
            for i in range(300):
                producer.send(Message("t", str(i).encode()))
            wait_until(lambda: sum(len(m.consumed()) for m in members) >= 300)

            victim, survivors = members[1], [members[0], members[2]]
            victim_queues = victim.assignment()
            victim.proc.send_signal(signal.SIGKILL)
            victim.finish()
            wait_until(lambda: sorted(q for m in survivors for q in m.assignment()) == list(range(QUEUES)))
            for i in range(300, 600):
                producer.send(Message("t", str(i).encode()))
            wait_until(lambda: len({k for m in members for k in m.consumed()}) >= 600)
        finally:
            stop.touch()
            for m in members:
                m.finish()
        codes = [m.proc.returncode for m in members]
        assert codes == [0, -signal.SIGKILL, 0], [m.stderr for m in members]
        assert all(m.lines[-1] == {"closed": True} for m in (members[0], members[2]))

        everything = Counter(k for m in members for k in m.consumed())
        assert len(everything) == 600  # nothing lost
        duplicates = [k for k, n in everything.items() if n > 1]
        victim_keys = set(victim.consumed())
        # A duplicate can only be a message the killed member consumed but had not committed.
        assert all(k in victim_keys and k[0] in victim_queues for k in duplicates)
        for m in members:
            per_queue: dict[int, list[int]] = {}
            for q, o in m.consumed():
                per_queue.setdefault(q, []).append(o)
            assert all(offs == sorted(offs) for offs in per_queue.values())  # per-queue order
        progress = store.consumer_progress("grp")
        assert [p.lag for p in progress] == [0] * QUEUES
