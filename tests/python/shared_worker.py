"""A writer process driven by commands, for the shared writers' state machine
(test_shared_state_machine.py); run as a script.

    python -u shared_worker.py

Reads one JSON command per line on stdin and answers one JSON line on stdout (``{"error":
"<type>: <text>"}`` when the command raised):

- ``{"op": "open", "path": P, "config": {...}}``: ``mqlite.open(P, shared=True, **config)``
- ``{"op": "close"}``: closes the store (the process stays, for the next open)
- ``{"op": "send", "topic": T, "queue": Q, "body": HEX}``: ``{"qo": queue offset}``
- ``{"op": "batch", "topic": T, "queue": Q, "bodies": [HEX]}``: ``{"qos": [queue offsets]}``
- ``{"op": "loop", "topic": T, "queue": Q, "n": N, "seed": S}``: sends the bodies
  ``loop_body(S, i)`` for i < N one by one, answering ``{"qo": ..}`` after each
- ``{"op": "read", "topic": T, "queue": Q, "offset": O, "count": C}``: ``{"bodies": [HEX]}``,
  every message from O on, up to C
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import mqlite
from mqlite import Message, MessageQueue


def loop_body(seed: int, i: int) -> bytes:
    return b"loop-%d-%d-" % (seed, i) + b"x" * ((seed * 31 + i * 17) % 700)


def main() -> None:
    store: mqlite.Store | None = None
    producer: Any = None

    def say(obj: object) -> None:
        os.write(1, (json.dumps(obj) + "\n").encode())

    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "open":
                store = mqlite.open(cmd["path"], shared=True, **cmd["config"])
                producer = store.producer()
                say({"ok": True})
            elif op == "close":
                assert store is not None
                store.close()
                store = producer = None
                say({"ok": True})
            elif op == "send":
                r = producer.send(Message(cmd["topic"], bytes.fromhex(cmd["body"])), queue_id=cmd["queue"])
                say({"qo": r.queue_offset})
            elif op == "batch":
                res = producer.send_batch([bytes.fromhex(b) for b in cmd["bodies"]],
                                          topic=cmd["topic"], queue_id=cmd["queue"])
                say({"qos": [r.queue_offset for r in res]})
            elif op == "loop":
                for i in range(cmd["n"]):
                    body = loop_body(cmd["seed"], i)
                    r = producer.send(Message(cmd["topic"], body), queue_id=cmd["queue"])
                    say({"qo": r.queue_offset})
            elif op == "read":
                assert store is not None
                mq = MessageQueue(cmd["topic"], cmd["queue"])
                out: list[str] = []
                offset = cmd["offset"]
                while len(out) < cmd["count"]:
                    res = store.read_result(mq, offset, cmd["count"] - len(out))
                    if not res.messages:
                        break
                    out.extend(m.body.hex() for m in res.messages)
                    offset = res.messages[-1].queue_offset + 1
                say({"bodies": out})
            else:
                say({"error": f"unknown op {op}"})
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
            say({"error": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":
    main()
