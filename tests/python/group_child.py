"""A consumer-group member in its own process, for the cross-process group tests.

    python -u group_child.py STORE GROUP TOPIC CLIENT_ID STOP_FILE

Opens the store read-only, subscribes ``TOPIC`` in ``GROUP`` (clustering, from the first offset,
auto-commit every 0.2 s, rebalance every 0.1 s) and prints one JSON object per line:
``{"assign": [queue ids]}`` whenever its assignment changes, ``{"q": .., "o": .., "b": ..}`` per
message, and ``{"closed": true}`` after a clean close once STOP_FILE exists.
"""

from __future__ import annotations

import json
import os
import sys

import mqlite


def say(**kw: object) -> None:
    os.write(1, (json.dumps(kw) + "\n").encode())


def main(path: str, group: str, topic: str, client_id: str, stop_file: str) -> None:
    with mqlite.open(path, read_only=True) as store:
        consumer = store.pull_consumer(
            group, client_id=client_id, auto_commit_interval=0.2, rebalance_interval=0.1,
            consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        )
        consumer.subscribe(topic)
        last: list[int] | None = None
        while not os.path.exists(stop_file):
            for m in consumer.poll(0.05):
                say(q=m.queue_id, o=m.queue_offset, b=m.body.decode())
            now = [mq.queue_id for mq in consumer.assignment()]
            if now != last:
                say(assign=now)
                last = now
        consumer.close()
        say(closed=True)


if __name__ == "__main__":
    main(*sys.argv[1:6])
