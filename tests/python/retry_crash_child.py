"""A push consumer in its own process for the retry crash test.

    python -u retry_crash_child.py STORE

Opens the store (delay table "1s"), consumes topic ``t`` in group ``g`` from the first offset
and prints one line per listener call: ``fail <body>`` when it fails the message (its first
delivery, reconsume count 0: it is sent back) or ``ok <body>`` when it accepts it (a retry).
Runs until killed.
"""

from __future__ import annotations

import os
import sys
import threading

import mqlite
from mqlite import ConsumeFromWhere, ConsumeStatus, MessageExt


def main(path: str) -> None:
    store = mqlite.open(path, delay_levels="1s")

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        m = msgs[0]
        verdict = "fail" if m.reconsume_times == 0 else "ok"
        os.write(1, f"{verdict} {m.body.decode()}\n".encode())
        return ConsumeStatus.RECONSUME_LATER if verdict == "fail" else ConsumeStatus.CONSUME_SUCCESS

    c = store.push_consumer("g", consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                            threads=2, batch_size=1, commit_interval=0.05)
    c.subscribe("t")
    c.register_message_listener(listener)
    c.start()
    threading.Event().wait()  # until killed


if __name__ == "__main__":
    main(sys.argv[1])
