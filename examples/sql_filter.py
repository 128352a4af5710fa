"""Server-side-style filtering: a tag expression and a SQL92 selector over message properties.

Run: python examples/sql_filter.py [STORE_DIR]   (a temporary directory by default)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import mqlite
from mqlite import ConsumeFromWhere, Message, MessageSelector

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET


def main(path: Path) -> int:
    with mqlite.open(path) as store:
        store.create_topic("trades", queues=2)
        producer = store.producer()
        for i, region in enumerate(["eu", "us", "eu", "apac", "eu", "us"] * 2):
            producer.send(Message("trades", f"trade-{i}".encode(), tags="big" if i % 3 == 0 else "small",
                                  properties={"amount": str(i * 10), "region": region}))

        def consume(group: str, expression: str | MessageSelector) -> list[str]:
            with store.pull_consumer(group, consume_from=FIRST) as consumer:
                consumer.subscribe("trades", expression)
                out = []
                while batch := consumer.poll(0.1):
                    out += [m.body.decode() for m in batch]
                return sorted(out, key=lambda s: int(s.split("-")[1]))

        tagged = consume("big-trades", "big")
        sql = consume("eu-large", MessageSelector.by_sql("amount > 30 AND region = 'eu'"))
        print(f"tag 'big': {tagged}")
        print(f"SQL amount > 30 AND region = 'eu': {sql}")
        expected_sql = [f"trade-{i}" for i in (4, 6, 8, 10)]
        return 0 if tagged == [f"trade-{i}" for i in (0, 3, 6, 9)] and sql == expected_sql else 1


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(main(Path(sys.argv[1])))
    with tempfile.TemporaryDirectory(prefix="mqlite-sql-") as tmp:
        sys.exit(main(Path(tmp) / "store"))
