#!/usr/bin/env python3
"""Spark source throughput: rows/s of a batch read through the Arrow path (mqlite.spark as
shipped: column buffers from the store, no Python object per message) against a row path (the
same planning, with a reader that yields one tuple per message from ``Store.read``, which
Spark converts to Arrow itself), on one local[2] session.

Workload: --n messages (default 1,000,000) of --size bytes (default 100) in one topic of
--queues queues (default 4), written with send_batch before the session starts. Each path
runs ``SELECT count(*), sum(length(value))`` over the topic (every column crosses from the
Python workers to the JVM: a Python data source is not pruned), once to warm the workers,
then --repeat times (default 3); the median is reported. Rows/s counts messages.

Usage:
    python benches/python/spark_source.py                # 1,000,000 messages
    python benches/python/spark_source.py --smoke        # 20,000 messages, one timed run
    python benches/python/spark_source.py --json out.json
Needs pyspark >= 4.2, pyarrow and Java 17 (pip install 'mqlite[spark]').
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

import mqlite  # noqa: E402
from mqlite import MessageQueue  # noqa: E402
from mqlite.spark import MqliteBatchReader, MqliteDataSource, QueueRange, parse_options  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.datasource import DataSourceReader, InputPartition  # noqa: E402

TOPIC = "bench"


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


class RowReader(MqliteBatchReader):
    """The row path: one Python tuple per message, read with ``Store.read``."""

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
        if not isinstance(partition, QueueRange):
            return
        with mqlite.open(self.opts.path, read_only=True) as store:
            mq = MessageQueue(partition.topic, partition.queue_id)
            pos = partition.start
            while pos < partition.end:
                r = store.read_result(mq, pos, min(10_000, partition.end - pos))
                for m in r.messages:
                    yield (
                        m.body, partition.topic, partition.queue_id, m.queue_offset,
                        _ts(m.store_timestamp), _ts(m.born_timestamp), m.tags, list(m.keys),
                        m.msg_id, m.reconsume_times,
                    )
                if r.next_offset <= pos:
                    break
                pos = r.next_offset


class RowSource(MqliteDataSource):
    @classmethod
    def name(cls) -> str:
        return "mqlite_rows"

    def reader(self, schema: Any) -> DataSourceReader:
        return RowReader(parse_options(self.options, streaming=False))


def fill(path: str, n: int, size: int, queues: int) -> None:
    body = os.urandom(size)
    with mqlite.open(path) as store:
        store.create_topic(TOPIC, queues)
        producer = store.producer()
        per = n // queues
        for q in range(queues):
            for i in range(0, per, 1000):
                producer.send_batch([body] * min(1000, per - i), topic=TOPIC, queue_id=q)


def timed(spark: SparkSession, fmt: str, path: str, n: int) -> float:
    t = time.perf_counter()
    row = (
        spark.read.format(fmt).option("subscribe", TOPIC).load(path)
        .selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()[0]
    )
    elapsed = time.perf_counter() - t
    if row["n"] != n:
        raise SystemExit(f"{fmt}: read {row['n']} rows, expected {n}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="20,000 messages, one timed run per path")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    if args.smoke:
        args.n, args.repeat = 20_000, 1
    n = args.n // args.queues * args.queues
    with tempfile.TemporaryDirectory(prefix="mqlite-spark-bench-") as tmp:
        path = os.path.join(tmp, "store")
        t = time.perf_counter()
        fill(path, n, args.size, args.queues)
        print(f"wrote {n:,} messages of {args.size} B in {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        spark = (
            SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2").getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(RowSource)
        print(f"session started in {time.perf_counter() - t:.1f} s")
        results: dict[str, Any] = {}
        try:
            for label, fmt in (("arrow", "mqlite"), ("rows", "mqlite_rows")):
                timed(spark, fmt, path, n)  # warm-up: worker start-up, JIT
                runs = [timed(spark, fmt, path, n) for _ in range(args.repeat)]
                median = statistics.median(runs)
                results[label] = {"seconds": runs, "median_s": median, "rows_per_s": n / median}
                print(f"{label:6} {n / median:>12,.0f} rows/s  (median of {len(runs)}: {median:.2f} s)")
        finally:
            spark.stop()
    ratio = results["arrow"]["rows_per_s"] / results["rows"]["rows_per_s"]
    print(f"arrow path / row path: {ratio:.1f}x")
    if args.json:
        doc = {
            "command": "python benches/python/spark_source.py" + (" --smoke" if args.smoke else ""),
            "n": n, "size": args.size, "queues": args.queues, "machine": platform.platform(),
            "cpus": os.cpu_count(), "results": results, "arrow_over_rows": ratio,
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main()
