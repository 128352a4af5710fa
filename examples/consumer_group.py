"""A consumer group across processes: three consumer processes share a topic's queues; one is
killed with SIGKILL mid-way and its queues move to the two survivors. Nothing is lost.

Run: python examples/consumer_group.py [STORE_DIR]   (a temporary directory by default)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import mqlite
from mqlite import ConsumeFromWhere, Message

QUEUES = 6


def member(path: str, client_id: str, stop_file: str) -> None:
    """One consumer process: print a JSON line per message and per assignment change."""
    with mqlite.open(path, read_only=True) as store:  # the parent is the writer
        consumer = store.pull_consumer("workers", client_id=client_id, auto_commit_interval=0.2,
                                       rebalance_interval=0.1,
                                       consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe("jobs")
        last = None
        while not os.path.exists(stop_file):
            for m in consumer.poll(0.05):
                print(json.dumps({"job": m.body.decode()}), flush=True)
            now = [mq.queue_id for mq in consumer.assignment()]
            if now != last:
                print(json.dumps({"queues": now}), flush=True)
                last = now
        consumer.close()


class Child:
    def __init__(self, path: Path, client_id: str, stop: Path) -> None:
        self.name = client_id
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--member", str(path), client_id, str(stop)],
            stdout=subprocess.PIPE, text=True,
        )
        self.jobs: list[str] = []
        self.queues: list[int] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            if "job" in event:
                self.jobs.append(event["job"])
            else:
                self.queues = event["queues"]

    def wait(self) -> None:
        self.proc.wait(30)
        self.reader.join(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def wait_until(cond: object, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def main(path: Path) -> int:
    stop = path.parent / "stop-consumers"
    with mqlite.open(path) as store:
        store.create_topic("jobs", queues=QUEUES)
        children = [Child(path, f"worker-{i}", stop) for i in range(3)]
        try:
            if not wait_until(lambda: all(len(c.queues) == QUEUES // 3 for c in children)):
                print("the group did not settle")
                return 1
            for c in children:
                print(f"{c.name} owns queues {c.queues}")
            producer = store.producer()
            for i in range(300):
                producer.send(Message("jobs", f"job-{i}".encode()))
            wait_until(lambda: sum(len(c.jobs) for c in children) >= 300)
            time.sleep(0.5)  # let auto-commit (every 0.2 s) record the progress before the kill

            victim = children[1]
            victim.proc.send_signal(signal.SIGKILL)
            victim.wait()
            print(f"killed {victim.name} after it consumed {len(victim.jobs)} jobs")
            survivors = [children[0], children[2]]
            wait_until(lambda: sorted(q for c in survivors for q in c.queues) == list(range(QUEUES)))
            for c in survivors:
                print(f"{c.name} now owns queues {c.queues}")
            for i in range(300, 600):
                producer.send(Message("jobs", f"job-{i}".encode()))
            wait_until(lambda: len({j for c in children for j in c.jobs}) >= 600)
        finally:
            stop.touch()
            for c in children:
                c.wait()
        distinct = {j for c in children for j in c.jobs}
        total = sum(len(c.jobs) for c in children)
        print(f"{len(distinct)} distinct jobs consumed; {total - len(distinct)} re-delivered "
              "(consumed by the killed worker after its last commit)")
        return 0 if len(distinct) == 600 else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--member":
        member(*sys.argv[2:5])
    elif len(sys.argv) > 1:
        sys.exit(main(Path(sys.argv[1])))
    else:
        with tempfile.TemporaryDirectory(prefix="mqlite-group-") as tmp:
            sys.exit(main(Path(tmp) / "store"))
