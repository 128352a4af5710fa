"""Message(delay_level=n): scheduled delivery by delay level, end to end on a real store.

The store's timer-engine thread delivers on the system clock; a consumer's poll waiting for the
message is the event (no sleep). Rust tests (tests/delay_levels.rs) cover timing on a manual
clock."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import mqlite
from mqlite import ConsumeFromWhere, InvalidConfigError, InvalidMessageError, Message, MessageQueue

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def poll_until(c: mqlite.PullConsumer, n: int, timeout: float = 30.0) -> list[mqlite.MessageExt]:
    got: list[mqlite.MessageExt] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got.extend(c.poll(1.0))
    return got


def test_a_delayed_message_reaches_its_topic_after_its_delay_as_it_was_sent(tmp_path: Path) -> None:
    with mqlite.open(tmp_path / "s", delay_levels="1s 1d") as store:
        store.create_topic("t", 2)
        p = store.producer()
        sent = p.send(
            Message("t", b"later", tags="A", keys=["k1", "k2"], properties={"p": "v"}, delay_level=1),
            queue_id=1,
        )
        p.send(Message("t", b"tomorrow", delay_level=2), queue_id=1)
        p.send(Message("t", b"now"), queue_id=1)
        with store.pull_consumer("g", consume_from=FIRST) as c:
            c.subscribe("t")
            got = poll_until(c, 2)
        assert [m.body for m in got] == [b"now", b"later"]
        later = got[1]
        assert later.queue_id == 1
        assert later.tags == "A"
        assert later.keys == ("k1", "k2")
        assert later.msg_id == sent.msg_id
        assert later.properties["p"] == "v"
        assert later.properties["REAL_TOPIC"] == "t"
        assert "DELAY" not in later.properties and "MQLITE_DELAY_MS" not in later.properties
        # Never early: stored in its topic a whole second after it was sent.
        assert later.store_timestamp - later.born_timestamp >= 1000
    offsets = json.loads((tmp_path / "s" / "config" / "delayOffset.json").read_text())
    assert offsets["offsetTable"] == {"1": 1}


@pytest.mark.parametrize(
    ("level", "error"),
    [(3, InvalidMessageError), (-1, InvalidMessageError), (2**70, InvalidMessageError),
     ("1", TypeError), (True, TypeError), (1.0, TypeError)],
)
def test_a_bad_delay_level_is_refused_writing_nothing(tmp_path: Path, level: object, error: type) -> None:
    with mqlite.open(tmp_path / "s", delay_levels="1s 1d") as store:
        with pytest.raises(error, match="delay"):
            store.producer().send(Message("t", b"x", delay_level=level))  # type: ignore[arg-type]
        assert store.stats()["commit_log_max_offset"] == 0
        assert "t" not in [t.name for t in store.topics()]


@pytest.mark.parametrize("table", ["", "1x", "0s", "1s 41d", " ".join(["1s"] * 65)])
def test_a_bad_level_table_is_refused(tmp_path: Path, table: str) -> None:
    with pytest.raises(InvalidConfigError) as err:
        mqlite.open(tmp_path / "s", delay_levels=table)
    assert err.value.field == "delay_levels"


def test_a_delayed_send_names_the_queue_it_was_sent_to_and_says_it_is_scheduled(tmp_path: Path) -> None:
    # Day-long levels: nothing falls due while the test runs.
    with mqlite.open(tmp_path / "s", delay_levels="1d 2d") as store:
        store.create_topic("t", 4)
        p = store.producer()
        first = p.send(Message("t", b"a", delay_level=2), queue_id=3)
        second = p.send_async(Message("t", b"b", delay_level=2), queue_id=0).result(10)
        assert first.message_queue == MessageQueue("t", 3)
        assert second.message_queue == MessageQueue("t", 0)
        assert first.scheduled and second.scheduled
        # Offsets in the queue they wait in: level 2's, one after the other.
        assert (first.queue_offset, second.queue_offset) == (0, 1)
        assert "scheduled=True" in repr(first)
        batch = p.send_batch([Message("t", b"c", delay_level=1)] * 2, queue_id=2)
        assert batch.message_queue == MessageQueue("t", 2) and batch.scheduled
        assert [(r.message_queue, r.scheduled, r.queue_offset) for r in batch] == [
            (MessageQueue("t", 2), True, 0),
            (MessageQueue("t", 2), True, 1),
        ]
        plain = p.send(Message("t", b"now"), queue_id=3)
        assert (plain.message_queue, plain.scheduled, plain.queue_offset) == (MessageQueue("t", 3), False, 0)
        assert not p.send_batch([b"x"], topic="t", queue_id=1).scheduled
        assert "scheduled" not in repr(plain)


def test_the_leader_delivers_a_delay_another_writer_process_sent(
    tmp_path: Path, run_py: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """Several writer processes: another process stores the delayed message and exits; the
    leader (this process, the first to open) delivers it when due."""
    path = tmp_path / "s"
    with mqlite.open(path, delay_levels="1s 1d") as store:
        store.create_topic("t", 1)
        child = run_py(
            "import sys, mqlite\n"
            "with mqlite.open(sys.argv[1], delay_levels='1s 1d', wait=30) as s:\n"
            "    r = s.producer().send(mqlite.Message('t', b'from a child', delay_level=1))\n"
            "    assert r.scheduled\n",
            path,
        )
        assert child.returncode == 0, child.stderr
        with store.pull_consumer("g", consume_from=FIRST) as c:
            c.subscribe("t")
            got = poll_until(c, 1)
        assert [m.body for m in got] == [b"from a child"]
        assert got[0].store_timestamp - got[0].born_timestamp >= 1000
