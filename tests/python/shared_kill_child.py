"""A process of the shared-writer kill loop (test_shared_kill_loop.py); run as a script.

    python -u shared_kill_child.py producer|consumer STORE INCARNATION SEED OUT_FILE STOP_FILE FLUSH

Both import mqlite, then wait for a line on stdin (so the test can start them ahead, as spares),
open the store with ``shared=True`` and ``flush=FLUSH`` (the topics exist before any child
starts) and print ``R`` on stdout once the open returned. They record what the parent checks in ``OUT_FILE``,
one line per ``os.write`` (a line without its ``\\n`` was cut by a kill and is ignored):

- a producer sends from its main thread (so the append lock's owner word holds its pid) until
  ``STOP_FILE`` exists, then closes the store and exits 0. Each operation is a ``send`` to a
  queue, a ``send`` with a sharding key, or a ``send_batch`` of 1-6 bodies to a queue, and
  only after it returned the producer appends one line per message:
  ``A <topic> <queue> <queue_offset> <commit_log_offset> <incarnation> <seq> <key or ->``.
  A line in the file is an acknowledgement the parent counts. About 5 % of the operations send
  a scheduled message instead (a timer due within 200 ms to ``TIMER_TOPIC``, or delay level 1,
  1 s, to ``DELAY_TOPIC``) and append ``T <topic> <incarnation> <seq> <due ms, 0 for a level>``.
- a consumer polls the group ``GROUP`` (clustering, both topics), appends
  ``S <topic> <queue> <queue_offset> <incarnation> <seq>`` for each message it received (or
  ``C <topic> <queue> <queue_offset> <reason>`` for a body that fails its digest), sends the
  first delivery of every twentieth message back (level 1) and appends ``B <incarnation> <seq>``
  once ``send_back`` returned, appends ``Y <incarnation> <seq>`` for a retry it received from
  ``%RETRY%<GROUP>``, and only then commits; once ``STOP_FILE`` exists and a poll comes back
  empty it closes and exits 0.

Bodies carry ``(incarnation, seq)``, random padding and a BLAKE2b digest of the rest.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import time
from pathlib import Path

import mqlite
from mqlite import Message

CONFIG = {
    "shared": True,
    "wait": 30.0,
    "commit_log_file_size": 64 << 10,
    "consume_queue_file_units": 128,
    "max_message_size": 4 << 10,
    "delay_levels": "1s",
}
TOPICS = ("killA", "killB")
TIMER_TOPIC = "killT"  # timers (deliver_at), one queue: delivered exactly once
DELAY_TOPIC = "killD"  # delay level 1, one queue: delivered at least once
SCHEDULED_SHARE = 0.05  # of a producer's operations
QUEUES = 4
KEYS = tuple(f"key-{k}" for k in range(6))
GROUP = "kill-group"
DIGEST = 8
# Seconds between a producer's operations (MQLITE_SHARED_KILL_PAUSE; 0: as fast as it can).
PAUSE = float(os.environ.get("MQLITE_SHARED_KILL_PAUSE", "0.003"))


def make_body(incarnation: int, seq: int, rng: random.Random) -> bytes:
    pad = rng.choice((0, rng.randrange(0, 48), rng.randrange(0, 600)))
    payload = b"%08d%010d|" % (incarnation, seq) + rng.randbytes(pad)
    return payload + hashlib.blake2b(payload, digest_size=DIGEST).digest()


def parse_body(body: bytes) -> tuple[int, int]:
    """``(incarnation, seq)``; raises ``ValueError`` if the body is damaged."""
    payload, digest = body[:-DIGEST], body[-DIGEST:]
    if len(payload) < 19 or hashlib.blake2b(payload, digest_size=DIGEST).digest() != digest:
        raise ValueError(f"body of {len(body)} bytes fails its digest")
    if payload[18:19] != b"|":
        raise ValueError("body header damaged")
    return int(payload[0:8]), int(payload[8:18])


def produce(store: mqlite.Store, incarnation: int, rng: random.Random, out: int, stop: Path) -> None:
    producer = store.producer()
    seq = 0
    while not stop.exists():
        topic = rng.choice(TOPICS)
        kind = rng.random()
        if kind < SCHEDULED_SHARE:
            if kind < SCHEDULED_SHARE / 2:
                due = int(time.time() * 1000) + rng.randrange(200)
                producer.send(Message(TIMER_TOPIC, make_body(incarnation, seq, rng), deliver_at=due))
                lines = f"T {TIMER_TOPIC} {incarnation} {seq} {due}\n"
            else:
                producer.send(Message(DELAY_TOPIC, make_body(incarnation, seq, rng), delay_level=1))
                lines = f"T {DELAY_TOPIC} {incarnation} {seq} 0\n"
            seq += 1
        elif kind < 0.3:
            n = rng.randint(1, 6)
            queue = rng.randrange(QUEUES)
            bodies = [make_body(incarnation, seq + k, rng) for k in range(n)]
            results = list(producer.send_batch(bodies, topic=topic, queue_id=queue))
            lines = "".join(
                f"A {topic} {queue} {r.queue_offset} {r.commit_log_offset} {incarnation} {seq + k} -\n"
                for k, r in enumerate(results)
            )
            seq += n
        else:
            key = rng.choice(KEYS) if kind < 0.6 else None
            msg = Message(topic, make_body(incarnation, seq, rng))
            if key is None:
                r = producer.send(msg, queue_id=rng.randrange(QUEUES))
            else:
                r = producer.send(msg, sharding_key=key)
            lines = (f"A {topic} {r.message_queue.queue_id} {r.queue_offset} {r.commit_log_offset} "
                     f"{incarnation} {seq} {key or '-'}\n")
            seq += 1
        os.write(out, lines.encode())
        # a few hundred operations a second: enough to keep the lock contended, few enough
        # messages for the final check to read them all quickly
        time.sleep(PAUSE)


def consume(store: mqlite.Store, incarnation: int, out: int, stop: Path) -> None:
    consumer = store.pull_consumer(
        GROUP, client_id=f"c{incarnation}", auto_commit=False, rebalance_interval=0.05,
        consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    for topic in TOPICS:
        consumer.subscribe(topic)
    while True:
        msgs = consumer.poll(0.05, 64)
        if not msgs:
            if stop.exists():
                break
            continue
        lines = []
        for m in msgs:
            topic = m.message_queue.topic
            try:
                inc, seq = parse_body(m.body)
            except ValueError as exc:
                lines.append(f"C {topic} {m.queue_id} {m.queue_offset} {exc}\n")
                continue
            if topic not in TOPICS:  # the group's retry topic
                lines.append(f"Y {inc} {seq}\n")
                continue
            lines.append(f"S {topic} {m.queue_id} {m.queue_offset} {inc} {seq}\n")
        os.write(out, "".join(lines).encode())
        backs = []
        for m in msgs:
            if m.reconsume_times == 0 and m.message_queue.topic in TOPICS:
                try:
                    inc, seq = parse_body(m.body)
                except ValueError:
                    continue
                if seq % 20 == 3:
                    consumer.send_back(m, 1, error="fails on purpose")
                    backs.append(f"B {inc} {seq}\n")
        if backs:
            os.write(out, "".join(backs).encode())
        consumer.commit()
    consumer.close()


def main() -> None:
    role, path, incarnation, seed, out_file, stop_file, flush = sys.argv[1:8]
    rng = random.Random(int(seed))
    out = os.open(out_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    if not sys.stdin.readline():
        return  # the test ended before it needed this spare
    with mqlite.open(path, flush=flush, **CONFIG) as store:
        os.write(1, b"R\n")
        if role == "producer":
            produce(store, int(incarnation), rng, out, Path(stop_file))
        else:
            consume(store, int(incarnation), out, Path(stop_file))
    os.close(out)


if __name__ == "__main__":
    main()
