"""The Spark source (mqlite.spark): batch and streaming reads of the "mqlite" format on one
session-scoped local[2] SparkSession, plus the planning and columnar pieces without Spark.

Skipped as a whole when pyspark is not importable (pip install 'mqlite[spark]')."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install 'mqlite[spark]'")
pytest.importorskip("pyarrow", reason="pyarrow is not installed: pip install 'mqlite[spark]'")

import pyarrow as pa  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: E402

import mqlite  # noqa: E402
from mqlite import Message, MessageQueue, _core  # noqa: E402
from mqlite.errors import FilterExpressionError, IllegalArgumentError  # noqa: E402
from mqlite.spark import MqliteStreamReader, QueueRange, parse_options, register  # noqa: E402
from mqlite.spark.arrow import read_range  # noqa: E402
from mqlite.testing import ManualClock  # noqa: E402

pytestmark = pytest.mark.spark

T = "orders"


def fill(path: Path, per_queue: int, queues: int = 2, topic: str = T, **open_options: Any) -> None:
    """``per_queue`` messages into each of ``queues`` queues: body ``q:i``, tag A for odd i,
    B for even, key ``k<i>``, property ``n=i``."""
    with mqlite.open(path, **open_options) as store:
        if topic not in {t.name for t in store.topics()}:
            store.create_topic(topic, queues)
        p = store.producer()
        for q in range(queues):
            start = store.offsets(MessageQueue(topic, q))[1]
            for i in range(start, start + per_queue):
                msg = Message(topic, f"{q}:{i}".encode(), tags="A" if i % 2 else "B", keys=[f"k{i}"], properties={"n": str(i)})
                p.send(msg, queue_id=q)


def offsets_of(rows: list[Any]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for r in rows:
        out.setdefault(r["queueId"], []).append(r["offset"])
    return {q: sorted(v) for q, v in sorted(out.items())}


def read(spark: SparkSession, path: Path, **options: str) -> Any:
    reader = spark.read.format("mqlite")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(str(path))


# -- without Spark: options, admission control, the columnar read ----------------------------


def test_options_are_checked_with_typed_errors_naming_the_option() -> None:
    ok = parse_options({"path": "/x", "subscribe": "a, b"}, streaming=False)
    assert ok.subscribe == ("a", "b") and ok.starting == "earliest" and ok.fail_on_data_loss
    assert parse_options({"path": "/x", "subscribe": "a"}, streaming=True).starting == "latest"
    assert parse_options({"PATH": "/x", "ASSIGN": '{"a": [1, 0]}'}, streaming=True).assign == {"a": (0, 1)}
    bad: list[tuple[dict[str, str], str]] = [
        ({"subscribe": "a"}, "path"),
        ({"path": "/x"}, "exactly one"),
        ({"path": "/x", "subscribe": "a", "assign": '{"a":[0]}'}, "exactly one"),
        ({"path": "/x", "subscribe": "a", "bogus": "1"}, "bogus"),
        ({"path": "/x", "subscribe": "a", "startingOffsets": "{"}, "startingOffsets"),
        ({"path": "/x", "subscribe": "a", "startingOffsets": '{"a": {"0": -3}}'}, "startingOffsets"),
        ({"path": "/x", "subscribe": "a", "startingOffsets": "latest"}, "startingOffsets"),
        ({"path": "/x", "subscribe": "a", "endingOffsets": '{"a": {"0": -2}}'}, "endingOffsets"),
        ({"path": "/x", "subscribe": "a", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"path": "/x", "subscribe": "a", "failOnDataLoss": "yes"}, "failOnDataLoss"),
        ({"path": "/x", "subscribe": "a", "startingTimestamp": "soon"}, "startingTimestamp"),
        ({"path": "/x", "subscribePattern": "("}, "subscribePattern"),
        ({"path": "/x", "assign": "[0]"}, "assign"),
    ]
    for options, named in bad:
        with pytest.raises(IllegalArgumentError, match=named):
            parse_options(options, streaming=False)
    with pytest.raises(FilterExpressionError):
        parse_options({"path": "/x", "subscribe": "a", "sql": "n >"}, streaming=False)
    with pytest.raises(IllegalArgumentError, match="endingOffsets"):
        parse_options({"path": "/x", "subscribe": "a", "endingOffsets": "latest"}, streaming=True)


def test_topic_selection(store_path: Path) -> None:
    from mqlite.spark.plan import subscribed_queues

    with mqlite.open(store_path) as store:
        store.create_topic("orders_eu", 2)
        store.create_topic("orders_us", 1)
        store.create_topic("payments", 1)

        def select(streaming: bool = False, **options: str) -> list[tuple[str, int]]:
            return subscribed_queues(store, parse_options({"path": str(store_path), **options}, streaming=streaming), streaming=streaming)

        assert select(subscribePattern="orders_.*") == [("orders_eu", 0), ("orders_eu", 1), ("orders_us", 0)]
        assert select(subscribe="payments, orders_us") == [("orders_us", 0), ("payments", 0)]
        assert select(assign='{"orders_eu": [1]}') == [("orders_eu", 1)]
        with pytest.raises(mqlite.TopicNotFoundError):
            select(subscribe="nosuch")
        assert select(True, subscribe="nosuch") == []  # a stream waits for the topic


def test_read_limit_is_shared_by_backlog_and_always_progresses(store_path: Path) -> None:
    fill(store_path, 0, queues=3)
    with mqlite.open(store_path) as store:
        p = store.producer()
        for q, n in ((0, 60), (1, 30), (2, 1)):
            for _ in range(n):
                p.send(Message(T, b"x"), queue_id=q)
    opts = parse_options({"path": str(store_path), "subscribe": T, "startingOffsets": "earliest"}, streaming=True)
    reader = MqliteStreamReader(opts)
    start = reader.initialOffset()
    assert start == {T: {"0": 0, "1": 0, "2": 0}}
    assert reader.latestOffset(start, ReadAllAvailable()) == {T: {"0": 60, "1": 30, "2": 1}}
    capped = reader.latestOffset(start, ReadMaxRows(10))
    assert sum(capped[T].values()) == 10 and capped[T]["0"] > capped[T]["1"]
    # Fewer rows than queues still moves on.
    assert sum(reader.latestOffset(start, ReadMaxRows(1))[T].values()) == 1
    assert reader.reportLatestOffset() == {T: {"0": 60, "1": 30, "2": 1}}


def test_columnar_read_matches_the_messages(store_path: Path) -> None:
    fill(store_path, 20, queues=1)
    with mqlite.open(store_path) as store:
        expect = store.read(MessageQueue(T, 0), 5, 10)
    opts = parse_options({"path": str(store_path), "subscribe": T, "includeProperties": "true"}, streaming=False)
    batches = list(read_range(opts, QueueRange(T, 0, 5, 15)))
    table = pa.Table.from_batches(batches).to_pylist()
    assert [r["offset"] for r in table] == list(range(5, 15))
    for row, m in zip(table, expect):
        assert row["value"] == m.body and row["tags"] == m.tags and row["keys"] == list(m.keys)
        assert row["msgId"] == m.msg_id and row["reconsumeTimes"] == m.reconsume_times
        assert int(row["timestamp"].timestamp() * 1000) == m.store_timestamp
        assert dict(row["properties"])["n"] == m.properties["n"]
    # A tag filter skips in Rust and never passes the range's end.
    with mqlite.open(store_path, read_only=True) as ro:
        status, nxt, _lo, _hi, n, _cols = _core.read_columns(ro._live(), T, 0, 5, 9, 100, ["A"])
        assert (status, nxt, n) == ("FOUND", 9, 2)
        with pytest.raises(IllegalArgumentError):
            _core.read_columns(ro._live(), T, 0, -1, 9, 100)
        with pytest.raises(IllegalArgumentError):
            _core.read_columns(ro._live(), T, 0, 0, 9, 0)
    # No tag is a null; several keys are a list; an empty range is no rows.
    with mqlite.open(store_path) as store:
        store.producer().send(Message(T, b"z", keys=["a", "b"]), queue_id=0)
    (row,) = pa.Table.from_batches(list(read_range(opts, QueueRange(T, 0, 20, 21)))).to_pylist()
    assert row["tags"] is None and row["keys"] == ["a", "b"] and row["value"] == b"z"
    assert list(read_range(opts, QueueRange(T, 0, 21, 21))) == [] and list(read_range(opts, None)) == []


# -- batch ------------------------------------------------------------------------------------


def test_batch_reads_every_message_once_with_its_offsets(spark: SparkSession, store_path: Path) -> None:
    fill(store_path, 150, queues=2)
    df = read(spark, store_path, subscribe=T)
    rows = df.collect()
    assert len(rows) == 300
    assert offsets_of(rows) == {0: list(range(150)), 1: list(range(150))}
    assert {r["value"] for r in rows} == {f"{q}:{i}".encode() for q in (0, 1) for i in range(150)}
    assert df.schema.fieldNames() == [
        "value", "topic", "queueId", "offset", "timestamp", "bornTimestamp", "tags", "keys", "msgId", "reconsumeTimes",
    ]


def test_batch_ranges_partitions_and_explicit_registration(spark: SparkSession, store_path: Path) -> None:
    fill(store_path, 100, queues=2)
    register(spark)  # explicit registration works next to the automatic one
    df = read(
        spark, store_path, subscribe=T, maxOffsetsPerPartition="30",
        startingOffsets='{"orders": {"0": 10, "1": -2}}', endingOffsets='{"orders": {"0": 95, "1": -1}}',
    )
    # queue 0: [10, 95) in 3 ranges of 30; queue 1: [0, 100) in 4.
    assert df.rdd.getNumPartitions() == 7
    assert offsets_of(df.collect()) == {0: list(range(10, 95)), 1: list(range(100))}
    only = read(spark, store_path, assign='{"orders": [1]}', endingOffsets='{"orders": {"1": 3}}').collect()
    assert offsets_of(only) == {1: [0, 1, 2]}


def test_batch_tag_and_sql_filters(spark: SparkSession, store_path: Path) -> None:
    fill(store_path, 40, queues=2)
    tagged = read(spark, store_path, subscribe=T, tags="A").collect()
    assert len(tagged) == 40 and {r["tags"] for r in tagged} == {"A"}
    by_sql = read(spark, store_path, subscribe=T, sql="n >= 30 AND TAGS = 'B'").collect()
    assert offsets_of(by_sql) == {0: [30, 32, 34, 36, 38], 1: [30, 32, 34, 36, 38]}
    assert "properties" not in by_sql[0].asDict()
    props = read(spark, store_path, subscribe=T, includeProperties="true", sql="n = 7").collect()
    assert len(props) == 2 and all(r["properties"]["n"] == "7" for r in props)


def test_batch_starting_timestamp(spark: SparkSession, store_path: Path) -> None:
    clock = ManualClock(1_700_000_000_000)
    fill(store_path, 10, queues=1, clock=clock)
    clock.advance_ms(60_000)
    fill(store_path, 5, queues=1, clock=clock)
    rows = read(spark, store_path, subscribe=T, startingTimestamp=str(1_700_000_030_000)).collect()
    assert offsets_of(rows) == {0: list(range(10, 15))}


def test_bad_option_fails_the_query_with_the_option_named(spark: SparkSession, store_path: Path) -> None:
    fill(store_path, 1, queues=1)
    with pytest.raises(Exception, match="maxOffsetsPerTrigger"):
        read(spark, store_path, subscribe=T, maxOffsetsPerTrigger="-5").collect()
    with pytest.raises(Exception, match="TopicNotFoundError"):
        read(spark, store_path, subscribe="nosuch").collect()


RETENTION = {
    "commit_log_file_size": 256 << 10,
    "max_message_size": 16 << 10,
    "consume_queue_file_units": 256,
    "retention_hours": 1e-6,  # every file but the one being written is expired
}


def test_fail_on_data_loss_both_ways(spark: SparkSession, store_path: Path) -> None:
    with mqlite.open(store_path, **RETENTION) as store:
        store.create_topic(T, 1)
        p = store.producer()
        for i in range(3000):  # about 18 files of 256 KiB
            p.send(Message(T, bytes(1500)), queue_id=0)
        assert store.delete_expired_files() >= 5
        low, high = store.offsets(MessageQueue(T, 0))
    assert 0 < low < high == 3000
    from_zero = '{"orders": {"0": 0}}'
    with pytest.raises(Exception, match="failOnDataLoss=false"):
        read(spark, store_path, subscribe=T, startingOffsets=from_zero).collect()
    rows = read(spark, store_path, subscribe=T, startingOffsets=from_zero, failOnDataLoss="false").collect()
    assert offsets_of(rows) == {0: list(range(low, 3000))}
    # "earliest" is the queue's first offset now: nothing was lost.
    assert read(spark, store_path, subscribe=T).count() == 3000 - low


# -- streaming --------------------------------------------------------------------------------


def run_available_now(spark: SparkSession, path: Path, out: Path, chk: Path, **options: str) -> Any:
    reader = spark.readStream.format("mqlite").option("subscribe", T).option("startingOffsets", "earliest")
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (
        reader.load(str(path)).select("queueId", "offset", "value")
        .writeStream.format("parquet").option("checkpointLocation", str(chk))
        .trigger(availableNow=True).start(str(out))
    )
    query.awaitTermination()
    assert query.exception() is None
    return query


def written(spark: SparkSession, out: Path) -> list[Any]:
    return spark.read.parquet(str(out)).collect()


def test_stream_restart_from_checkpoint_has_no_loss_and_no_duplicate(
    spark: SparkSession, tmp_path: Path, store_path: Path
) -> None:
    out, chk = tmp_path / "out", tmp_path / "chk"
    fill(store_path, 50, queues=2)
    run_available_now(spark, store_path, out, chk, consumerGroup="spark-orders")
    assert offsets_of(written(spark, out)) == {0: list(range(50)), 1: list(range(50))}
    fill(store_path, 30, queues=2)
    run_available_now(spark, store_path, out, chk, consumerGroup="spark-orders")
    rows = written(spark, out)
    assert offsets_of(rows) == {0: list(range(80)), 1: list(range(80))}  # sorted lists: no duplicate
    # Spark commits a micro-batch's end to the source when it plans the next one: the group
    # holds the end of the first run (its last batch was committed by the second run's first).
    with mqlite.open(store_path) as store:
        progress = {(p.topic, p.queue_id): p.committed for p in store.consumer_progress("spark-orders")}
    assert progress == {(T, 0): 50, (T, 1): 50}


def test_available_now_honours_the_read_limit_and_its_target(
    spark: SparkSession, tmp_path: Path, store_path: Path
) -> None:
    fill(store_path, 50, queues=2)
    out, chk = tmp_path / "out", tmp_path / "chk"
    sent_later: list[int] = []

    def batch(df: Any, batch_id: int) -> None:
        df.write.mode("append").parquet(str(out))
        if batch_id == 0:
            # Sent after the query started: past availableNow's target, so not read by it.
            fill(store_path, 10, queues=2)
            sent_later.append(batch_id)

    query = (
        spark.readStream.format("mqlite").option("subscribe", T).option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "30").load(str(store_path)).select("queueId", "offset")
        .writeStream.foreachBatch(batch).option("checkpointLocation", str(chk))
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    assert query.exception() is None and sent_later == [0]
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [30, 30, 30, 10]
    assert offsets_of(written(spark, out)) == {0: list(range(50)), 1: list(range(50))}
    latest = query.recentProgress[-1]["sources"][0]["latestOffset"]
    assert latest is not None and '"0":60' in latest.replace(" ", "")


# Writes to both queues until the stop file appears, paced at about one message per queue
# per millisecond so that a query running meanwhile has a bounded backlog.
WRITER = """
import sys, os, time, mqlite
path, stop = sys.argv[1], sys.argv[2]
with mqlite.open(path) as store:
    p = store.producer()
    n = 0
    while True:
        for q in (0, 1):
            p.send(mqlite.Message("orders", b"w%d" % n), queue_id=q)
        n += 1
        if n == 20:
            print("writing", flush=True)
        if n >= 20 and os.path.exists(stop):
            break
        time.sleep(0.001)
print(n, flush=True)
"""


def test_stream_reads_while_another_process_writes(
    spark: SparkSession, tmp_path: Path, store_path: Path, spawn_py: Callable[..., Any]
) -> None:
    fill(store_path, 0, queues=2)
    out, chk, stop = tmp_path / "out", tmp_path / "chk", tmp_path / "stop"
    writer = spawn_py(WRITER, store_path, stop)
    assert writer.stdout.readline().strip() == "writing"
    run_available_now(spark, store_path, out, chk)  # while it writes: the stop file is not there yet
    during = len(written(spark, out))
    stop.touch()
    per_queue = int(writer.stdout.readline())
    assert writer.wait(timeout=60) == 0
    run_available_now(spark, store_path, out, chk)
    rows = written(spark, out)
    assert during >= 40
    assert offsets_of(rows) == {0: list(range(per_queue)), 1: list(range(per_queue))}
