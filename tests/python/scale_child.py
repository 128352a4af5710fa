"""One scale scenario in its own process, under a soft ``RLIMIT_NOFILE`` of 256.

    python scale_child.py SCENARIO DIR

SCENARIO is ``topics`` (10,000 topics x 4 queues, traffic to every queue), ``log_files``
(thousands of 64 KiB commit-log files written, reopened, read from the start and expired) or
``group`` (one consumer group reading every message of 4,000 queues). DIR is an empty directory
for the store. The limit is set first, so nothing the scenario does can raise it, and only this
process runs under it.

Prints one JSON object on stdout: ``ok``; ``error`` (type, errno, message and the step it
happened in, or null); ``steps`` (what each completed step measured: the process's open
descriptors and the store's share of them, mappings of the whole process and of store files,
VmRSS and VmHWM in KiB); the maxima over every sample (``max_fds``, ``max_store_fds``,
``max_maps``, ``max_store_maps``); and the scenario's own facts (messages sent, read, missing).
The test asserts on them, so a failure shows what was measured rather than a bare traceback.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

NOFILE = 256

TOPICS = 10_000
QUEUES_PER_TOPIC = 4
# Commit-log files of the smallest size; 8 KiB bodies put seven records in each.
LOG_FILE_SIZE = 64 << 10
LOG_FILES = 3_000
LOG_BODY = 8 << 10
LOG_QUEUES = 4
# Four topics of 1,000 queues, two messages each.
GROUP_TOPICS = 4
GROUP_QUEUES = 1_000
GROUP_PER_QUEUE = 2
GROUP = "scale_group"
# The smallest consume-queue files (64 units of 20 bytes): what is measured is the number of
# files, not their size.
CQ_UNITS = 64


def _limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, hard))


class Probe:
    """Samples the process's descriptors, mappings and memory; keeps every step and the maxima.

    ``base_fds`` is the descriptor count before the store opened (the interpreter's own), so
    ``store_fds`` is what the store and its clients hold."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.base_fds = self.fds()
        self.steps: dict[str, dict[str, int]] = {}
        self.max = {"fds": 0, "store_fds": 0, "maps": 0, "store_maps": 0}

    @staticmethod
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def maps(self) -> tuple[int, int]:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
        return len(lines), sum(1 for line in lines if self.root in line)

    @staticmethod
    def memory() -> dict[str, int]:
        out = {}
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key.lower() + "_kib"] = int(value.split()[0])
        return out

    def sample(self) -> dict[str, int]:
        fds = self.fds()
        maps, store_maps = self.maps()
        now = {"fds": fds, "store_fds": fds - self.base_fds, "maps": maps,
               "store_maps": store_maps}
        for key, value in now.items():
            self.max[key] = max(self.max[key], value)
        return now

    def step(self, name: str) -> None:
        self.steps[name] = {**self.sample(), **self.memory()}


def _topics(root: Path, probe: Probe, facts: dict[str, Any], mark: Callable[[str], None]) -> None:
    import mqlite

    config = {"consume_queue_file_units": CQ_UNITS, "default_queues": QUEUES_PER_TOPIC}
    names = [f"t{i:05d}" for i in range(TOPICS)]
    sent = 0
    mark("create")
    with mqlite.open(root, **config) as store:
        probe.step("opened")
        # Half created explicitly, half auto-created by their first send.
        for name in names[: TOPICS // 2]:
            store.create_topic(name, QUEUES_PER_TOPIC)
        probe.step("created_half")
        mark("send")
        producer = store.producer()
        for i, name in enumerate(names):
            for q in range(QUEUES_PER_TOPIC):
                producer.send(mqlite.Message(name, f"{name}/{q}".encode()), queue_id=q)
                sent += 1
            if i % 500 == 0:
                probe.sample()
        facts["sent"] = sent
        facts["topics"] = len(store.topics())
        probe.step("sent")
        mark("flush")
        store.flush()
        probe.step("flushed")
    probe.step("closed")
    mark("reopen")
    read = missing = 0
    with mqlite.open(root, **config) as store:
        probe.step("reopened")
        mark("read")
        for i, name in enumerate(names):
            for q in range(QUEUES_PER_TOPIC):
                got = store.read(mqlite.MessageQueue(name, q), 0, 4)
                if [m.body for m in got] == [f"{name}/{q}".encode()]:
                    read += 1
                else:
                    missing += 1
            if i % 500 == 0:
                probe.sample()
        probe.step("read")
    facts["read"], facts["missing"] = read, missing


def _log_body(i: int) -> bytes:
    head = f"{i:08d}".encode()
    return head + bytes([i % 251]) * (LOG_BODY - len(head))


def _log_files(root: Path, probe: Probe, facts: dict[str, Any],
               mark: Callable[[str], None]) -> None:
    import mqlite

    config = {"commit_log_file_size": LOG_FILE_SIZE, "consume_queue_file_units": CQ_UNITS}
    log_dir = root / "commitlog"
    sent = 0
    mark("write")
    with mqlite.open(root, **config) as store:
        probe.step("opened")
        producer = store.producer()
        store.create_topic("log", LOG_QUEUES)
        while len(os.listdir(log_dir)) < LOG_FILES:
            for _ in range(64):
                producer.send(mqlite.Message("log", _log_body(sent)), queue_id=sent % LOG_QUEUES)
                sent += 1
            probe.sample()
        store.flush()
        probe.step("written")
    facts["sent"] = sent
    facts["log_files"] = len(os.listdir(log_dir))
    mark("reopen")
    read = 0
    with mqlite.open(root, **config) as store:
        probe.step("reopened")
        mark("read")
        for q in range(LOG_QUEUES):
            mq = mqlite.MessageQueue("log", q)
            offset, end = store.offsets(mq)
            while offset < end:
                result = store.read_result(mq, offset, 64)
                # Message i went to queue i % LOG_QUEUES at queue offset i // LOG_QUEUES.
                read += sum(m.body == _log_body(m.queue_offset * LOG_QUEUES + q)
                            for m in result.messages)
                offset = result.next_offset
                probe.sample()
        probe.step("read")
    facts["read"] = read
    facts["missing"] = sent - read
    # Retention of a millisecond: every file but the one being written is expired.
    mark("expire")
    with mqlite.open(root, retention_hours=1 / 3_600_000, **config) as store:
        deleted = store.delete_expired_files()
        probe.step("expired")
        facts["deleted"] = deleted
        facts["log_files_left"] = len(os.listdir(log_dir))
        lows = []
        for q in range(LOG_QUEUES):
            mq = mqlite.MessageQueue("log", q)
            low, high = store.offsets(mq)
            lows.append(low)
            # What is left is still read, from the new first offset.
            got = store.read(mq, low, 64)
            if high > low and (not got or any(
                    m.body != _log_body(m.queue_offset * LOG_QUEUES + q) for m in got)):
                facts.setdefault("bad_after_expiry", []).append(q)
        facts["queue_min_offsets"] = lows


def _group(root: Path, probe: Probe, facts: dict[str, Any], mark: Callable[[str], None]) -> None:
    import mqlite

    config = {"consume_queue_file_units": CQ_UNITS}
    topics = [f"g{i}" for i in range(GROUP_TOPICS)]
    want: set[tuple[str, int, int]] = set()
    mark("send")
    with mqlite.open(root, **config) as store:
        probe.step("opened")
        producer = store.producer()
        for topic in topics:
            store.create_topic(topic, GROUP_QUEUES)
            for q in range(GROUP_QUEUES):
                for n in range(GROUP_PER_QUEUE):
                    producer.send(mqlite.Message(topic, f"{topic}/{q}/{n}".encode()), queue_id=q)
                    want.add((topic, q, n))
        store.flush()
        probe.step("sent")
    facts["sent"] = len(want)
    mark("consume")
    got: set[tuple[str, int, int]] = set()
    bad = 0
    with mqlite.open(root, **config) as store:
        consumer = store.pull_consumer(
            GROUP, consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            auto_commit=False, max_poll_messages=256,
        )
        for topic in topics:
            consumer.subscribe(topic)
        probe.step("subscribed")
        facts["assigned"] = len(consumer.assignment())
        empty = 0
        # Every queue is assigned at subscribe (one member): polls return messages until all
        # are read; a few empty polls in a row after that end the loop.
        while len(got) < len(want) and empty < 3:
            batch = consumer.poll(timeout=0.5)
            empty = 0 if batch else empty + 1
            for m in batch:
                key = (m.topic, m.queue_id, m.queue_offset)
                if m.body != f"{m.topic}/{m.queue_id}/{m.queue_offset}".encode():
                    bad += 1
                got.add(key)
            probe.sample()
        probe.step("consumed")
        mark("commit")
        consumer.commit()
        consumer.close()
        probe.step("committed")
    facts["read"] = len(got & want)
    facts["missing"] = len(want - got)
    facts["bad"] = bad
    mark("progress")
    with mqlite.open(root, **config) as store:
        progress = store.consumer_progress(GROUP)
        facts["progress_queues"] = len(progress)
        facts["progress_lag"] = sum(p.max_offset - p.committed for p in progress)
        probe.step("reopened")


SCENARIOS = {"topics": _topics, "log_files": _log_files, "group": _group}


def _first_error(exc: BaseException) -> BaseException:
    """The earliest mqlite error of the chain: a failure inside ``with mqlite.open(...)`` can
    make the close that follows fail too, and the close's error is raised last."""
    from mqlite.errors import MQError

    found = exc
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, MQError):
            found = seen
        seen = seen.__context__
    return found


def main(scenario: str, where: str) -> int:
    _limit()
    root = Path(where) / "store"
    probe = Probe(root)
    facts: dict[str, Any] = {}
    step = ["start"]
    error = None
    try:
        SCENARIOS[scenario](root, probe, facts, lambda name: step.__setitem__(0, name))
    except BaseException as exc:  # reported, with its errno, for the test to assert on
        first = _first_error(exc)
        error = {"type": type(first).__name__, "errno": getattr(first, "errno", None),
                 "message": str(first)[:500], "step": step[0],
                 "traceback": traceback.format_exc()[-6000:]}
    out = {"ok": error is None, "error": error, "nofile": resource.getrlimit(
        resource.RLIMIT_NOFILE)[0], "base_fds": probe.base_fds, "steps": probe.steps,
        **{f"max_{k}": v for k, v in probe.max.items()}, **facts}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
