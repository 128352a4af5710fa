"""mqlite quickstart: send, read, look up, reopen.

Run: python examples/quickstart.py [STORE_DIR]   (a temporary directory by default)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import mqlite
from mqlite import Message, MessageQueue


def main(path: Path) -> None:
    with mqlite.open(path) as store:
        store.create_topic("orders", queues=2)
        producer = store.producer("checkout")

        # One message at a time: tags for filtering, keys for look-up, properties for anything else.
        first = producer.send(
            Message("orders", b'{"id": 1}', tags="created", keys=["order-1"],
                    properties={"region": "eu"})
        )
        print(f"sent {first.msg_id} -> queue {first.message_queue.queue_id} "
              f"offset {first.queue_offset} ({first.send_status.name})")

        # A batch goes to one queue in a single call.
        batch = producer.send_batch(
            [Message("orders", f'{{"id": {i}}}'.encode(), tags="paid" if i % 2 else "created")
             for i in range(2, 6)],
            queue_id=0,
        )
        print(f"sent a batch of {len(batch)} to queue 0, offsets "
              f"{batch[0].queue_offset}..{batch[-1].queue_offset}")

        # Read queue 0 back, all messages and then only the "paid" ones.
        q0 = MessageQueue("orders", 0)
        low, high = store.offsets(q0)
        print(f"queue 0 holds offsets [{low}, {high})")
        for m in store.read(q0, low):
            print(f"  {m.queue_offset}: {m.body.decode()} tags={m.tags}")
        paid = store.read(q0, low, tags="paid")
        print(f"  {len(paid)} tagged 'paid'")

        # Look a message up by the id the send returned.
        found = store.get(first.offset_msg_id)
        print(f"get({first.offset_msg_id}) -> {found.body.decode()} keys={found.keys} "
              f"region={found.properties['region']}")

    # Everything is on disk: reopen and check.
    with mqlite.open(path, read_only=True) as store:
        counts = {mq.queue_id: store.offsets(mq) for mq in store.queues("orders")}
        print(f"reopened: (min, max) offsets per queue {counts}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory(prefix="mqlite-quickstart-") as tmp:
            main(Path(tmp) / "store")
