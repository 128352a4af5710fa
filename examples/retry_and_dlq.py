"""Retries and dead letters: a flaky handler's failed messages come back from the group's retry
topic after growing delays; a poison message reaches the dead-letter topic after
max_reconsume_times retries, where it is inspected and, once the handler is fixed, re-driven.

Run: python examples/retry_and_dlq.py [STORE_DIR]   (a temporary directory by default)
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

import mqlite
from mqlite import ConsumeFromWhere, ConsumeStatus, Message, MessageExt

# A short delay table so the example runs in a few seconds; the default is RocketMQ's
# "1s 5s 10s 30s 1m ... 2h". A retry waits level 3 + its reconsume count.
DELAY_LEVELS = "1s 1s 1s 2s 3s"


def main(path: Path) -> int:
    with mqlite.open(path, delay_levels=DELAY_LEVELS) as store:
        store.create_topic("payments", queues=2)
        producer = store.producer()
        for n in range(1, 6):
            producer.send(Message("payments", f"payment-{n}".encode(), keys=[f"p{n}"]))

        attempts: dict[bytes, list[float]] = {}  # body -> the times it was handled
        ok: set[bytes] = set()
        fixed = threading.Event()
        done = threading.Event()
        lock = threading.Lock()

        def handle(msgs: list[MessageExt]) -> ConsumeStatus:
            m = msgs[0]
            with lock:
                tries = attempts.setdefault(m.body, [])
                tries.append(time.monotonic())
            if m.body == b"payment-3" and not fixed.is_set():
                raise ValueError("card issuer unreachable")      # poison until the fix
            if len(tries) == 1 and m.body != b"payment-3":
                return ConsumeStatus.RECONSUME_LATER               # flaky: works the second time
            with lock:
                ok.add(m.body)
                if len(ok) == 5:
                    done.set()
            return ConsumeStatus.CONSUME_SUCCESS

        consumer = store.push_consumer("billing", threads=2, max_reconsume_times=2,
                                       consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        consumer.subscribe("payments")
        consumer.register_message_listener(handle)
        dlq = store.dead_letters("billing")
        with consumer:
            deadline = time.monotonic() + 60
            while (len(ok) < 4 or dlq.count() < 1) and time.monotonic() < deadline:
                time.sleep(0.01)
            print(f"consumed after a retry: {len(ok)} of 5; the poison message failed "
                  f"{len(attempts[b'payment-3'])} times")
            for letter in dlq.list(origin_topic="payments"):
                print(f"dead letter {letter.body.decode()} ({letter.keys[0]}): "
                      f"{letter.error_type}: {letter.error}, reconsumed {letter.reconsume_times - 1} times")
            fixed.set()                                          # the handler is fixed ...
            redriven = dlq.redrive(origin_topic="payments")      # ... so the letters go back
            print(f"re-driven {len(redriven)}, purged {dlq.purge()}")
            if not done.wait(60):
                print("the re-driven message was not consumed")
                return 1
        retried = sum(1 for b, t in attempts.items() if b != b"payment-3" and len(t) == 2)
        gaps = [round((t[i + 1] - t[i]) * 1000) for t in [attempts[b"payment-3"][:3]] for i in range(2)]
        print(f"the poison message's retries waited about {gaps} ms (levels 3 and 4: growing)")
        print(f"all 5 consumed: {len(ok) == 5}; {retried} went through the retry topic")
        return 0 if len(ok) == 5 and len(attempts[b"payment-3"]) == 4 else 1


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(main(Path(sys.argv[1])))
    with tempfile.TemporaryDirectory() as tmp:
        sys.exit(main(Path(tmp) / "store"))
