"""Child process of the kill -9 loop (reliability plan B.a); run as a script, never imported by
the store code.

    python -u crash_child.py STORE MODE CYCLE SEED PRODUCERS

Protocol on stdout (one line per ``os.write``, so each line is atomic on the pipe):

- ``O``                         about to open the store (recovery of the previous crash starts)
- ``R <open_ms> <abnormal>``    open returned
- ``A <topic> <queue> <queue_offset> <commit_log_offset> <cycle> <producer> <seq>``
                                one line per message, written only after ``send`` or
                                ``send_batch`` returned: the parent's record of acknowledgements
- ``S <topic> <cycle> <producer> <seq> <due_ms>``
                                a scheduled message acknowledged: a timer (``deliver_at``, to
                                ``TIMER_TOPIC``, due at ``due_ms``) or a delay level 1 (1 s, to
                                ``DELAY_TOPIC``; ``due_ms`` 0: due 1 s after it was stored)
- ``B <cycle> <producer> <seq>``  the consumer failed the message and ``send_back`` returned: its
                                retry is durable (it reaches ``%RETRY%<GROUP>`` after 1 s)

- ``X <id> <cycle> <producer> <seq>``
                                a message of transaction ``id`` (to ``TXN_TOPIC``) stored as a
                                half: its ``send`` returned
- ``D <id> <c|r>``              transaction ``id`` is about to be committed (``c``) or rolled
                                back (``r``); ``E <id> <c|r>``: that call returned

- ``K <point> <n> <old> <new> <path>``  kill-point mode (``MQLITE_PY_KILL_AT=<point>:<n>``): the n-th
                                hit of ``point`` was reached; the SHA-256 of the file being
                                replaced (``-`` if absent) and of its new content; the child then
                                aborts (``os.abort()``: no cleanup, like kill -9 for the files)

The child sends until it is SIGKILLed (or aborts at its kill point). Bodies encode ``(cycle, producer, seq)`` plus random
padding and an 8-byte BLAKE2b digest of everything before it, so the parent can tell a
damaged body from a good one.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mqlite
from mqlite import _files

# Small files so that commit-log and consume-queue files roll every few hundred messages.
CONFIG: dict[str, Any] = {
    "commit_log_file_size": 256 << 10,
    "max_message_size": 16 << 10,
    "consume_queue_file_units": 256,
    "delay_levels": "1s",
}
TOPICS = ("crashA", "crashB")
QUEUES = 4
GROUP = "crash-group"  # the child's consumer group; it commits offsets while being killed
TIMER_TOPIC = "crashT"  # timers (deliver_at): delivered exactly once across crashes
DELAY_TOPIC = "crashD"  # delay level 1: delivered at least once
SCHEDULED_SHARE = 0.05  # of the sends
TIMER_MAX_MS = 200  # timers are due within this of their send
TXN_TOPIC = "crashX"  # transactional messages: visible once if committed, never otherwise
TXN_GROUP = "crash-txn"
TXN_PRODUCER = 9  # the producer id in the bodies of transactional messages


def fails(seq: int) -> bool:
    """Whether the consumer fails (sends back) the first delivery of message ``seq``."""
    return seq % 20 == 3
HEADER = 26  # b"%08d%02d%010d%05d|": 8 + 2 + 10 + 5 + 1
DIGEST = 8


def make_body(cycle: int, producer: int, seq: int, rng: random.Random) -> bytes:
    pad = rng.choice((0, rng.randrange(0, 64), rng.randrange(0, 2048)))
    head = b"%08d%02d%010d%05d|" % (cycle, producer, seq, pad)
    payload = head + rng.randbytes(pad)
    return payload + hashlib.blake2b(payload, digest_size=DIGEST).digest()


def parse_body(body: bytes) -> tuple[int, int, int]:
    """``(cycle, producer, seq)``; raises ``ValueError`` if the body is damaged."""
    if len(body) < HEADER + DIGEST:
        raise ValueError(f"body too short: {len(body)}")
    payload, digest = body[:-DIGEST], body[-DIGEST:]
    if hashlib.blake2b(payload, digest_size=DIGEST).digest() != digest:
        raise ValueError("body digest mismatch")
    head = payload[:HEADER]
    pad = int(head[20:25])
    if head[25:26] != b"|" or len(payload) != HEADER + pad:
        raise ValueError("body header inconsistent")
    return int(head[0:8]), int(head[8:10]), int(head[10:20])


def arm_kill_point(spec: str, emit: Callable[[str], None]) -> None:
    """Abort the process at the n-th hit of a kill point of ``mqlite._files`` (``spec``:
    ``<point>:<n>``), after reporting the replaced file's old and new content hashes."""
    point, n = spec.rsplit(":", 1)
    if point not in _files.KILL_POINTS or int(n) < 1:
        raise SystemExit(f"bad MQLITE_PY_KILL_AT {spec!r}; points: {_files.KILL_POINTS}")
    hits = 0
    lock = threading.Lock()

    def digest(path: Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "-"

    def hook(name: str, path: Path) -> None:
        nonlocal hits
        if name != point:
            return
        with lock:
            hits += 1
            if hits == int(n):
                tmp = path.with_name(f".{path.name}.tmp")
                emit(f"K {point} {n} {digest(path)} {digest(tmp)} {path}\n")
                os.abort()

    _files.kill_hook = hook


class Unasked:
    """The listener of the child's transactions: its transactions are decided by the caller, and
    checks never come (no check thread, and a child lives less than the check timeout)."""

    def execute_local_transaction(self, msg: mqlite.Message, arg: object) -> mqlite.LocalTransactionState:
        return mqlite.LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: mqlite.Message) -> mqlite.LocalTransactionState:
        return mqlite.LocalTransactionState.UNKNOW


def main() -> None:
    path, mode, cycle, seed, producers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    out_lock = threading.Lock()

    def emit(text: str) -> None:
        data = text.encode()
        with out_lock:
            os.write(1, data)

    if os.environ.get("MQLITE_PY_KILL_AT"):
        arm_kill_point(os.environ["MQLITE_PY_KILL_AT"], emit)
    emit("O\n")
    t0 = time.perf_counter()
    store = mqlite.open(path, flush=mode, **CONFIG)
    open_ms = (time.perf_counter() - t0) * 1000
    emit(f"R {open_ms:.3f} {int(bool(store.stats()['recovery_abnormal']))}\n")
    for topic in TOPICS:
        store.create_topic(topic, QUEUES)
    for topic in (TIMER_TOPIC, DELAY_TOPIC):
        store.create_topic(topic, 1)
    store.create_topic(TXN_TOPIC, 2)

    def run(producer_id: int) -> None:
        rng = random.Random(seed * 1000 + producer_id)
        producer = store.producer()
        seq = 0
        while True:
            topic = rng.choice(TOPICS)
            queue = rng.randrange(QUEUES)
            draw = rng.random()
            if draw < SCHEDULED_SHARE:
                body = make_body(cycle, producer_id, seq, rng)
                if draw < SCHEDULED_SHARE / 2:
                    due = int(time.time() * 1000) + rng.randrange(TIMER_MAX_MS)
                    producer.send(mqlite.Message(TIMER_TOPIC, body, deliver_at=due))
                    lines = f"S {TIMER_TOPIC} {cycle} {producer_id} {seq} {due}\n"
                else:
                    producer.send(mqlite.Message(DELAY_TOPIC, body, delay_level=1))
                    lines = f"S {DELAY_TOPIC} {cycle} {producer_id} {seq} 0\n"
                seq += 1
            elif draw < 0.3:
                n = rng.randint(1, 8)
                bodies = [make_body(cycle, producer_id, seq + k, rng) for k in range(n)]
                result = producer.send_batch(bodies, topic=topic, queue_id=queue)
                lines = "".join(
                    f"A {topic} {queue} {r.queue_offset} {r.commit_log_offset} {cycle} {producer_id} {seq + k}\n"
                    for k, r in enumerate(result)
                )
                seq += n
            else:
                body = make_body(cycle, producer_id, seq, rng)
                r = producer.send(mqlite.Message(topic, body), queue_id=queue)
                lines = f"A {topic} {queue} {r.queue_offset} {r.commit_log_offset} {cycle} {producer_id} {seq}\n"
                seq += 1
            # Each write stays below PIPE_BUF (4096) so it is atomic on the pipe.
            while lines:
                cut = lines.rfind("\n", 0, 4000) + 1 if len(lines) > 4000 else len(lines)
                emit(lines[:cut])
                lines = lines[cut:]

    def consume() -> None:
        # Commits often, so kills land before, during and after offset writes.
        consumer = store.pull_consumer(
            GROUP,
            auto_commit=False,
            consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        )
        for topic in TOPICS:
            consumer.subscribe(topic)
        while True:
            got = consumer.poll(0.005, 8)
            for m in got:
                if m.reconsume_times == 0 and m.topic in TOPICS:
                    ident = parse_body(m.body)
                    if fails(ident[2]):
                        consumer.send_back(m, 1, error="fails on purpose")
                        emit("B %d %d %d\n" % ident)
            if got:
                consumer.commit()

    def transact() -> None:
        # Transactions of 1 or 2 messages: most committed, some rolled back, some left open
        # (the checks never reach them: a child lives far less than the check timeout).
        rng = random.Random(seed * 1000 + TXN_PRODUCER)
        producer = mqlite.TransactionProducer(store, TXN_GROUP, Unasked(), check_interval=None)
        seq = 0
        n = 0
        while True:
            tid = f"{cycle}-{n}"
            n += 1
            tx = producer.transaction(tid)
            for _ in range(rng.randint(1, 2)):
                tx.send(mqlite.Message(TXN_TOPIC, make_body(cycle, TXN_PRODUCER, seq, rng)), queue_id=rng.randrange(2))
                emit(f"X {tid} {cycle} {TXN_PRODUCER} {seq}\n")
                seq += 1
            draw = rng.random()
            if draw < 0.1:
                continue
            how = "c" if draw < 0.7 else "r"
            emit(f"D {tid} {how}\n")
            if how == "c":
                producer.commit([tid])
            else:
                producer.rollback([tid])
            emit(f"E {tid} {how}\n")

    threads = [threading.Thread(target=run, args=(p,), daemon=True) for p in range(producers)]
    threads.append(threading.Thread(target=consume, daemon=True))
    threads.append(threading.Thread(target=transact, daemon=True))
    for t in threads:
        t.start()
    # Never returns normally: the parent kills the process.
    for t in threads:
        t.join()
    os._exit(3)  # a producer thread died: the parent sees rc 3 and the traceback on stderr


if __name__ == "__main__":
    main()
