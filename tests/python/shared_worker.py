"""A writer process driven by commands, for the shared writers' state machine
(test_shared_state_machine.py); run as a script.

    python -u shared_worker.py

Reads one JSON command per line on stdin and answers one JSON line on stdout (``{"error":
"<type>: <text>"}`` when the command raised):

- ``{"op": "open", "path": P, "config": {...}, "clock_ms": MS}``: ``mqlite.open(P, shared=True,
  **config)`` on a ``ManualClock(MS)`` (its own: the test sets it with each command's ``now``)
- ``{"op": "close"}``: closes the store (the process stays, for the next open)
- ``{"op": "send", "topic": T, "queue": Q, "body": HEX}``: ``{"qo": queue offset}``
- ``{"op": "batch", "topic": T, "queue": Q, "bodies": [HEX]}``: ``{"qos": [queue offsets]}``
- ``{"op": "loop", "topic": T, "queue": Q, "n": N, "seed": S}``: sends the bodies
  ``loop_body(S, i)`` for i < N one by one, answering ``{"qo": ..}`` after each
- ``{"op": "read", "topic": T, "queue": Q, "offset": O, "count": C}``: ``{"bodies": [HEX]}``,
  every message from O on, up to C
- ``{"op": "scheduled", "topic": T, "queue": Q, "body": HEX, "keys": [K], "tags": G,
  "properties": {...}, "when": {"delay_level" | "delay_ms" | "deliver_at": N}}``: one send
  waiting for its time: ``{"qo": queue offset, "scheduled": bool, "msg_id": .., "offset_msg_id": ..}``
- ``{"op": "cancel", "args": {...}}``: ``store.cancel_timer(**args)``: ``{"answers": [[outcome,
  id, keys, unique id, due ms]], "wrote": bool}`` (``wrote``: this process's log end moved)
- ``{"op": "send_back", "topic": T, "queue": Q, "offset": O, "group": G, "max": M, "delay": L}``:
  a pull consumer of G (``max_reconsume_times=M``) sends the message at O back with level L:
  ``{"topic": ..., "dead": bool, "reconsume_times": n, "delay_level": l, "was": n}`` (``was``:
  the message's own reconsume count)

Any command may carry ``"now": MS``: the worker's clock is set to it first.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from datetime import timedelta

import mqlite
from mqlite import Message, MessageQueue
from mqlite.testing import ManualClock


def loop_body(seed: int, i: int) -> bytes:
    return b"loop-%d-%d-" % (seed, i) + b"x" * ((seed * 31 + i * 17) % 700)


class Undecided:
    """A local transaction that never answers: the test decides."""

    def execute_local_transaction(self, msg: Any, arg: Any) -> mqlite.LocalTransactionState:
        return mqlite.LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: Any) -> mqlite.LocalTransactionState:
        return mqlite.LocalTransactionState.UNKNOW


def main() -> None:
    store: mqlite.Store | None = None
    producer: Any = None
    clock = ManualClock(0)
    consumers: dict[str, mqlite.PullConsumer] = {}
    txn: mqlite.TransactionProducer | None = None

    def say(obj: object) -> None:
        os.write(1, (json.dumps(obj) + "\n").encode())

    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if "now" in cmd:
                clock.set_ms(cmd["now"])
            if op == "open":
                clock = ManualClock(cmd["clock_ms"])
                store = mqlite.open(cmd["path"], shared=True, clock=clock, **cmd["config"])
                producer = store.producer()
                say({"ok": True})
            elif op == "close":
                assert store is not None
                if txn is not None:
                    txn.close()
                    txn = None
                for c in consumers.values():
                    c.close()
                consumers.clear()
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
            elif op == "scheduled":
                when = dict(cmd["when"])
                if "delay_ms" in when:
                    when["delay"] = timedelta(milliseconds=when.pop("delay_ms"))
                msg = Message(cmd["topic"], bytes.fromhex(cmd["body"]), keys=cmd["keys"] or None,
                              tags=cmd["tags"], properties=cmd["properties"], **when)
                r = producer.send(msg, queue_id=cmd["queue"])
                say({"qo": r.queue_offset, "scheduled": r.scheduled, "msg_id": r.msg_id,
                     "offset_msg_id": r.offset_msg_id})
            elif op == "cancel":
                assert store is not None
                # A listing first catches this process's view of the log up to what others
                # wrote, so the end below moves only by this cancel's own record.
                store.list_timers(limit=1)
                end = store.stats()["commit_log_max_offset"]
                answers = store.cancel_timer(**cmd["args"])
                say({"answers": [[a.outcome.value, a.id] + ([list(a.timer.keys), a.timer.unique_id, a.timer.due_ms]
                                                            if a.timer else [None, None, None]) for a in answers],
                     "wrote": store.stats()["commit_log_max_offset"] > end})
            elif op == "send_back":
                assert store is not None
                group = cmd["group"]
                if group not in consumers:
                    consumers[group] = store.pull_consumer(group, max_reconsume_times=cmd["max"])
                [m] = store.read_result(MessageQueue(cmd["topic"], cmd["queue"]), cmd["offset"], 1).messages
                sent = consumers[group].send_back(m, cmd["delay"])
                say({"topic": sent.topic, "dead": sent.dead, "reconsume_times": sent.reconsume_times,
                     "delay_level": sent.delay_level, "was": m.reconsume_times})
            elif op in ("txn_send", "txn_end"):
                assert store is not None
                if txn is None:
                    txn = mqlite.TransactionProducer(store, "tg", Undecided(), check_interval=None)
                try:
                    if op == "txn_send":
                        msg = Message(cmd["topic"], bytes.fromhex(cmd["body"]))
                        txn.transaction(cmd["tid"]).send(msg, queue_id=cmd["queue"])
                        say({"ok": True})
                    else:
                        decide = txn.commit if cmd["commit"] else txn.rollback
                        progress = tuple(cmd["progress"]) if cmd["progress"] else None
                        wrote = decide(cmd["ids"], progress)
                        say({"wrote": wrote, "progress": txn.progress("sink")})
                except mqlite.TransactionError as exc:
                    say({"refused": type(exc).__name__})
            else:
                say({"error": f"unknown op {op}"})
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
            say({"error": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":
    main()
