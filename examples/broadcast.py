"""Broadcasting: every consumer of the group receives every message and keeps its own offsets
(in <store>/config/broadcast/<group>/<client_id>.json).

Run: python examples/broadcast.py [STORE_DIR]   (a temporary directory by default)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import mqlite
from mqlite import ConsumeFromWhere, Message, MessageModel


def main(path: Path) -> int:
    with mqlite.open(path) as store:
        store.create_topic("config-changes", queues=2)
        producer = store.producer()
        for i in range(6):
            producer.send(Message("config-changes", f"setting-{i}=on".encode()))

        ok = True
        for client_id in ("cache-node-1", "cache-node-2", "cache-node-3"):
            with store.pull_consumer(
                "caches", message_model=MessageModel.BROADCASTING, client_id=client_id,
                consume_from=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            ) as consumer:
                consumer.subscribe("config-changes")
                got = []
                while batch := consumer.poll(0.1):
                    got += [m.body.decode() for m in batch]
            print(f"{client_id} received {len(got)} messages: {sorted(got)[:2]} ...")
            ok = ok and len(got) == 6
        files = sorted(p.name for p in (path / "config" / "broadcast" / "caches").glob("*.json"))
        print(f"offset files: {files}")
        return 0 if ok and len(files) == 3 else 1


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(main(Path(sys.argv[1])))
    with tempfile.TemporaryDirectory(prefix="mqlite-broadcast-") as tmp:
        sys.exit(main(Path(tmp) / "store"))
