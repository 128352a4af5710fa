"""A data pipeline on Spark: an application produces order events while a streaming query
aggregates revenue per minute and region into Parquet, and publishes an alert for every
unusual minute back to mqlite, where a Python consumer prints it.

- The application (a thread here) sends JSON orders, ``{"region", "amount", "ts"}``, to topic
  ``orders``, 100 per minute of event time, the EU spiking in every third minute.
- Query 1 reads ``orders`` (format ``mqlite``, ``trigger(availableNow=True)``: what is there
  when it starts), sums revenue per one-minute window and region with a 30-second watermark,
  and appends the closed windows to Parquet.
- Query 2 runs the same aggregation and writes windows whose revenue passes a threshold to
  topic ``alerts`` through the mqlite sink, exactly-once (``sinkId``).
- A pull consumer of group ``alert-printer`` prints the alerts it has not printed before.

Run it twice: the second run starts from the queries' checkpoints and the consumer's offsets,
so it reads only the orders that arrived since, and prints only new alerts. A window closes
once events 30 s past its end have been read, so the last minute of a run is reported by
the next one.

Run: python examples/spark_pipeline.py [DIR] [--events N]   (DIR: a temporary directory by
default; N: orders produced per run, 2,000 by default). Needs pip install 'mqlite[spark]'
and Java 17.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import mqlite
from mqlite import Message

REGIONS = ("eu", "us", "apac", "latam")
PER_MINUTE = 100
T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: event time of the first order
THRESHOLD = 10_000.0  # revenue of one region in one minute that is "unusual"


def order(i: int) -> bytes:
    """The ``i``-th order ever produced: deterministic, so every run continues the series."""
    minute = i // PER_MINUTE
    region = REGIONS[i % len(REGIONS)]
    amount = 10 + (i * 7919) % 90
    if region == "eu" and minute % 3 == 1:
        amount *= 20  # the spike an alert should catch
    ts = T0_MS + i * 60_000 // PER_MINUTE
    return json.dumps({"region": region, "amount": amount, "ts": ts}).encode()


def produce(store: mqlite.Store, first: int, n: int, half_sent: threading.Event) -> None:
    producer = store.producer()
    for i in range(first, first + n):
        producer.send(Message("orders", order(i), keys=f"order-{i}"))
        if i - first + 1 == n // 2:
            half_sent.set()
    half_sent.set()


def run_queries(spark: Any, store_dir: Path, work: Path) -> tuple[int, int | None]:
    """Runs both availableNow queries; returns (orders read this run, orders read in all, from
    the offsets the revenue query reached; None when it ran no micro-batch)."""
    from pyspark.sql import functions as F

    def windows() -> Any:
        """Revenue and orders per one-minute window and region, closed 30 s after its end."""
        orders = (
            spark.readStream.format("mqlite").option("subscribe", "orders")
            .option("startingOffsets", "earliest").load(str(store_dir))
            .select(F.from_json(F.col("value").cast("string"), "region string, amount double, ts long").alias("o"))
            .select("o.region", "o.amount", F.timestamp_millis("o.ts").alias("ts"))
        )
        return (
            orders.withWatermark("ts", "30 seconds")
            .groupBy(F.window("ts", "1 minute").alias("w"), "region")
            .agg(F.sum("amount").alias("revenue"), F.count("*").alias("orders"))
        )

    revenue = (
        windows().select(F.col("w.start").alias("minute"), "region", "revenue", "orders")
        .writeStream.format("parquet").outputMode("append")
        .option("checkpointLocation", str(work / "chk-revenue")).trigger(availableNow=True)
        .start(str(work / "revenue"))
    )
    revenue.awaitTermination()
    alerts = (
        windows().where(F.col("revenue") > THRESHOLD)
        .select(
            F.to_json(F.struct(F.date_format("w.start", "yyyy-MM-dd HH:mm").alias("minute"), "region", "revenue")).alias("value"),
            F.col("region").alias("keys"),
            F.lit("unusual-minute").alias("tags"),
        )
        .writeStream.format("mqlite").option("topic", "alerts").option("sinkId", "revenue-alerts")
        .option("checkpointLocation", str(work / "chk-alerts")).trigger(availableNow=True)
        .start(str(store_dir))
    )
    alerts.awaitTermination()
    read_now = sum(p["numInputRows"] for p in revenue.recentProgress)
    read_all: int | None = None
    for p in revenue.recentProgress:
        end = p["sources"][0]["endOffset"]
        if end:
            offsets = json.loads(end) if isinstance(end, str) else end
            read_all = sum(int(o) for queues in offsets.values() for o in queues.values())
    if os.path.exists(work / "revenue"):
        top = spark.read.parquet(str(work / "revenue")).orderBy(F.desc("revenue")).limit(3).collect()
        for r in top:
            print(f"  top minute: {r['minute']:%H:%M} {r['region']:<5} revenue {r['revenue']:,.0f} ({r['orders']} orders)")
    return read_now, read_all


def print_alerts(store: mqlite.Store) -> list[str]:
    consumer = store.pull_consumer(
        "alert-printer", consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, auto_commit=False
    )
    consumer.subscribe("alerts")
    printed: list[str] = []
    while batch := consumer.poll(0.5):
        for m in batch:
            printed.append(m.body.decode())
            print(f"alert: {printed[-1]}")
    consumer.commit()
    consumer.close()
    return printed


def run(spark: Any, work: Path, events: int) -> tuple[int, int, list[str]]:
    """One run of the pipeline in ``work``: produce ``events`` orders while the queries run;
    returns (orders read this run, orders read in all runs, alerts printed this run)."""
    store_dir = work / "store"
    with mqlite.open(store_dir) as store:
        if "orders" not in {t.name for t in store.topics()}:
            store.create_topic("orders", 2)
            store.create_topic("alerts", 1)
        first = sum(store.offsets(mq)[1] for mq in store.queues("orders"))
        half_sent = threading.Event()
        app = threading.Thread(target=produce, args=(store, first, events, half_sent))
        app.start()
        half_sent.wait()  # the queries start while the application is still producing
        try:
            read_now, reached = run_queries(spark, store_dir, work)
        finally:
            app.join()
        # No micro-batch: nothing new was there, so the earlier orders were all read before.
        read_all = first if reached is None else reached
        print(f"read {read_now} new events ({read_all} in total); "
              f"{first + events - read_all} left for the next run")
        alerts = print_alerts(store)
        print(f"printed {len(alerts)} new alerts")
    return read_now, read_all, alerts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", nargs="?", default=None)
    parser.add_argument("--events", type=int, default=2_000)
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="mqlite-pipeline-"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]").appName("mqlite-pipeline")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        run(spark, work, args.events)
    finally:
        spark.stop()
    print(f"run again to continue: python {sys.argv[0]} {work} --events {args.events}")


if __name__ == "__main__":
    main()
