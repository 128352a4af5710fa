#!/usr/bin/env python3
"""Spark sink throughput and the example pipeline's end-to-end time, on one local[2] session.

- Sink rows/s: a DataFrame of --n rows (default 200,000) of --size bytes (default 100) in
  two partitions, written with ``df.write.format("mqlite")`` (every row a half message of its
  task's transaction, then one commit), once to warm the workers, then --repeat times
  (default 3) to a fresh topic each; the median is reported. Interleaved with each run, the
  same DataFrame written to Spark's ``noop`` format (Spark's own cost of making the rows) and
  to a Python data source whose writer only iterates them (Spark's cost of handing rows to a
  Python writer: the ceiling of any Python sink on this session), as the baselines.
- Pipeline: examples/spark_pipeline.py's ``run`` with --events orders (default 1,000,000),
  from the first order sent to the alerts printed (both availableNow queries included).

Usage:
    python benches/python/spark_sink.py                 # 200,000 rows, 1,000,000 events
    python benches/python/spark_sink.py --smoke         # 5,000 rows, 2,000 events, one run
    python benches/python/spark_sink.py --json out.json
Needs pyspark >= 4.2, pyarrow and Java 17 (pip install 'mqlite[spark]').
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

import mqlite  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceWriter, WriterCommitMessage  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"


def sink_once(spark: SparkSession, path: str, topic: str, n: int, size: int) -> float:
    df = spark.range(0, n, 1, 2).selectExpr(f"CAST(repeat('x', {size}) AS BINARY) AS value")
    t = time.perf_counter()
    df.write.format("mqlite").option("topic", topic).mode("append").save(path)
    elapsed = time.perf_counter() - t
    with mqlite.open(path) as store:
        got = sum(store.offsets(mq)[1] - store.offsets(mq)[0] for mq in store.queues(topic))
    if got != n:
        raise SystemExit(f"sink: {topic} holds {got} rows, expected {n}")
    return elapsed


class _IterateWriter(DataSourceWriter):
    def write(self, iterator: Any) -> WriterCommitMessage:
        for row in iterator:
            row["value"]
        return WriterCommitMessage()


class _IterateSource(DataSource):
    """A Python sink that only iterates its rows: the baseline of every Python writer."""

    @classmethod
    def name(cls) -> str:
        return "iterate_only"

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return _IterateWriter()


def iterate_once(spark: SparkSession, n: int, size: int) -> float:
    df = spark.range(0, n, 1, 2).selectExpr(f"CAST(repeat('x', {size}) AS BINARY) AS value")
    t = time.perf_counter()
    df.write.format("iterate_only").mode("append").save()
    return time.perf_counter() - t


def noop_once(spark: SparkSession, n: int, size: int) -> float:
    df = spark.range(0, n, 1, 2).selectExpr(f"CAST(repeat('x', {size}) AS BINARY) AS value")
    t = time.perf_counter()
    df.write.format("noop").mode("append").save()
    return time.perf_counter() - t


def pipeline_once(spark: SparkSession, work: Path, events: int) -> float:
    spec = importlib.util.spec_from_file_location("spark_pipeline", EXAMPLE)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {EXAMPLE}")
    pipeline: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pipeline)
    t = time.perf_counter()
    pipeline.run(spark, work, events)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="5,000 rows, 2,000 events, one timed run")
    ap.add_argument("--no-pipeline", action="store_true", help="measure the sink only")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    if args.smoke:
        args.n, args.events, args.repeat = 5_000, 2_000, 1
    with tempfile.TemporaryDirectory(prefix="mqlite-spark-sink-bench-") as tmp:
        path = os.path.join(tmp, "store")
        with mqlite.open(path) as store:
            for i in range(args.repeat + 1):
                store.create_topic(f"sink{i}", 4)
        spark = (
            SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2").getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        results: dict[str, Any] = {}
        try:
            sink_once(spark, path, "sink0", min(args.n, 1000), args.size)  # warm-up
            spark.dataSource.register(_IterateSource)
            noop_once(spark, min(args.n, 1000), args.size)
            iterate_once(spark, min(args.n, 1000), args.size)
            runs: dict[str, list[float]] = {"sink": [], "noop": [], "iterate": []}
            for i in range(args.repeat):
                runs["noop"].append(noop_once(spark, args.n, args.size))
                runs["iterate"].append(iterate_once(spark, args.n, args.size))
                runs["sink"].append(sink_once(spark, path, f"sink{i + 1}", args.n, args.size))
            labels = {"sink": "mqlite sink", "noop": "noop (Spark alone)",
                      "iterate": "Python writer that only iterates"}
            for key, seconds in runs.items():
                median = statistics.median(seconds)
                results[key] = {"seconds": seconds, "median_s": median, "rows_per_s": args.n / median}
                print(f"{labels[key]:<34} {args.n / median:>10,.0f} rows/s  (median of {len(seconds)}: {median:.2f} s)")
            if not args.no_pipeline:
                seconds = pipeline_once(spark, Path(tmp) / "pipeline", args.events)
                results["pipeline"] = {"events": args.events, "seconds": seconds}
                print(f"pipeline {args.events:,} events end to end in {seconds:.1f} s")
        finally:
            spark.stop()
    if args.json:
        doc = {
            "command": "python benches/python/spark_sink.py" + (" --smoke" if args.smoke else ""),
            "n": args.n, "size": args.size, "machine": platform.platform(), "cpus": os.cpu_count(),
            "results": results,
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main()
