"""The resident set stays flat while a store many files long is written and consumed.

Commit-log and consume-queue files are memory-mapped; without care every page a producer
writes or a consumer reads stays mapped, and the process's RSS grows with the store. The store
releases the mappings of old files (the data stays in the page cache and on disk), so a
consumer reading hundreds of MiB keeps a small, constant resident set. Measured in a fresh
interpreter from /proc/self/status.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

PRODUCE_AND_CONSUME = """
import json, sys, time
import mqlite
from mqlite import MessageQueue

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")

path, total_mib = sys.argv[1], int(sys.argv[2])
body = b"m" * 4096
batch = [body] * 256                      # 1 MiB of bodies per send_batch
out = {}
with mqlite.open(path, commit_log_file_size=8 << 20) as store:
    store.create_topic("big", 1)
    p = store.producer()
    base = rss_mib()
    for _ in range(total_mib):
        p.send_batch(batch, topic="big", queue_id=0)
    store.flush()
    time.sleep(1.1)   # one release interval: the flush thread releases what was written
    out["produce_growth"] = rss_mib() - base

with mqlite.open(path, read_only=True, commit_log_file_size=8 << 20) as store:
    mq = MessageQueue("big", 0)
    offset, seen, peak = 0, 0, 0.0
    start = rss_mib()
    while True:
        got = store.read(mq, offset, 256)
        if not got:
            break
        for m in got:
            assert len(m.body) == 4096
            seen += 1
        offset = got[-1].queue_offset + 1
        peak = max(peak, rss_mib())
    out.update(start=start, peak=peak, seen=seen)
print(json.dumps(out))
"""


@pytest.mark.perf  # RSS of a 256 MiB run: depends on the machine and takes a while
def test_rss_stays_flat_while_a_big_store_is_written_and_consumed(tmp_path: Path, run_py) -> None:
    total_mib = 256
    done = run_py(PRODUCE_AND_CONSUME, tmp_path / "store", total_mib, timeout=240)
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout)
    assert r["seen"] == total_mib * 256
    # 256 MiB went through the mappings; what stays resident is a few files' worth.
    assert r["produce_growth"] < 64, r
    assert r["peak"] - r["start"] < 64, r


def test_close_unmaps_files_and_closes_descriptors(tmp_path: Path) -> None:
    import mqlite

    path = tmp_path / "s"
    store = mqlite.open(path, commit_log_file_size=1 << 20, max_message_size=64 << 10)
    store.create_topic("t", 4)
    producer = store.producer()
    for _ in range(10):
        producer.send_batch([b"x" * 1024] * 200, topic="t")

    def mapped() -> int:
        with open("/proc/self/maps") as f:
            return sum(str(path) in line for line in f)

    def fds() -> int:
        return sum(
            os.path.realpath(f"/proc/self/fd/{fd}").startswith(str(path))
            for fd in os.listdir("/proc/self/fd")
        )

    assert mapped() > 2 and fds() > 2
    store.close()
    # The handles are still referenced here: closing alone must let go of every file.
    assert mapped() == 0
    assert fds() == 0
    with pytest.raises(mqlite.StoreClosedError):
        producer.send(mqlite.Message("t", b"late"))
    with mqlite.open(path, commit_log_file_size=1 << 20, max_message_size=64 << 10) as again:
        assert again.offsets(mqlite.MessageQueue("t", 0))[1] > 0
