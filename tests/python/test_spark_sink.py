"""The Spark sink (mqlite.spark.sink): df.write and writeStream of format "mqlite" on the
session-scoped local[2,3] SparkSession of conftest.py, and its exactly-once pieces (options,
columns, transaction ids, the check-back listener, commit of a replayed batch) without Spark.

Skipped as a whole when pyspark is not importable (pip install 'mqlite[spark]')."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyspark is not installed: pip install 'mqlite[spark]'")
pytest.importorskip("pyarrow", reason="pyarrow is not installed: pip install 'mqlite[spark]'")

from pyspark.sql import Row, SparkSession  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

import mqlite  # noqa: E402
from mqlite import Message  # noqa: E402
from mqlite.errors import IllegalArgumentError, InvalidTopicError  # noqa: E402
from mqlite.spark import MqliteStreamWriter, SinkCommitMessage, parse_sink_options, sink_producer  # noqa: E402
from mqlite.spark.sink import _send_rows  # noqa: E402
from mqlite.spark.sink_options import DEFAULT_PRODUCER_GROUP, check_columns  # noqa: E402
from mqlite.spark.sink_rows import to_message  # noqa: E402
from mqlite.spark.sink_txn import new_txn_id, parse_txn_id, stream_key  # noqa: E402

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"
DRIVER_CHILD = Path(__file__).resolve().parent / "spark_driver_child.py"


def bodies(path: Path, topic: str) -> list[bytes]:
    """Every body of ``topic`` (every queue), in queue then offset order."""
    out: list[bytes] = []
    with mqlite.open(path) as store:
        if topic not in {t.name for t in store.topics()}:
            return out
        for mq in store.queues(topic):
            lo, hi = store.offsets(mq)
            while lo < hi:
                got = store.read(mq, lo, hi - lo)
                out.extend(m.body for m in got)
                lo += len(got)
    return out


def pending(path: Path) -> list[Any]:
    with mqlite.open(path) as store:
        producer = sink_producer(store, DEFAULT_PRODUCER_GROUP)
        try:
            return producer.pending(all_groups=True)
        finally:
            producer.close()


_TYPES = {
    "binary": T.BinaryType(),
    "string": T.StringType(),
    "int": T.IntegerType(),
    "timestamp": T.TimestampType(),
    "array<int>": T.ArrayType(T.IntegerType()),
    "array<string>": T.ArrayType(T.StringType()),
    "map<string,string>": T.MapType(T.StringType(), T.StringType()),
    "map<string,int>": T.MapType(T.StringType(), T.IntegerType()),
}


def schema(ddl: str) -> T.StructType:
    """A schema from ``"name type, ..."`` with no JVM (StructType.fromDDL needs a session)."""
    fields = []
    for part in ddl.split(", "):
        name, kind = part.split(" ")
        fields.append(T.StructField(name, _TYPES[kind]))
    return T.StructType(fields)


def source(path: Path, topic: str, n: int, queues: int = 2) -> None:
    with mqlite.open(path) as store:
        store.create_topic(topic, queues)
        p = store.producer()
        for i in range(n):
            p.send(Message(topic, b"m%d" % i))


# ---- without Spark ------------------------------------------------------------------------


def test_options_are_checked_and_named() -> None:
    assert parse_sink_options({"PATH": "/s", "topic": "t"}, streaming=False).producer_group == DEFAULT_PRODUCER_GROUP
    cases = [
        ({"topic": "t"}, False, "option path"),
        ({"path": "/s", "tpoic": "t"}, False, "'tpoic'"),
        ({"path": "/s", "sinkId": "a,b"}, False, "option sinkId"),
        ({"path": "/s", "topic": "t"}, True, "option sinkId is required"),
    ]
    for options, streaming, needle in cases:
        with pytest.raises(IllegalArgumentError, match=needle):
            parse_sink_options(options, streaming=streaming)
    with pytest.raises(InvalidTopicError):
        parse_sink_options({"path": "/s", "topic": "bad topic"}, streaming=False)
    # Spark's own streaming option passes.
    parse_sink_options({"path": "/s", "sinkId": "q", "checkpointLocation": "/c"}, streaming=True)


@pytest.mark.parametrize(
    ("ddl", "topic", "needle"),
    [
        ("value int", "t", "column 'value' must be binary or string, not int"),
        ("value binary, keys array<int>", "t", "column 'keys' must be string or array<string>"),
        ("value binary, properties map<string,int>", "t", "column 'properties' must be map<string,string>"),
        ("value binary, queueId string", "t", "column 'queueId' must be int"),
        ("value binary, tag string", "t", "column 'tag' is not a column of the mqlite sink"),
        ("value binary, deliverAt timestamp", "t", "column 'deliverAt'"),
        ("topic string", "t", "column 'value'"),
        ("value binary", None, "no topic"),
        ("value binary, topic int", None, "column 'topic' must be string"),
        ("value binary, queueId int, shardingKey string", "t", "give one"),
    ],
)
def test_bad_columns_are_typed_errors_naming_the_column(ddl: str, topic: str | None, needle: str) -> None:
    opts = parse_sink_options({"path": "/s", **({"topic": topic} if topic else {})}, streaming=False)
    with pytest.raises(IllegalArgumentError, match=needle):
        check_columns(schema(ddl), opts)


def test_row_to_message_columns(store_path: Path) -> None:
    opts = parse_sink_options({"path": "/s"}, streaming=False)
    cols = check_columns(
        schema("VALUE string, topic string, tags string, keys string, properties map<string,string>, shardingKey string"),
        opts,
    )
    row = Row(VALUE="hi", topic="t", tags="A", keys="k1 k2", properties={"p": "1", "n": None}, shardingKey="order-17")
    msg, queue = to_message(row, cols, None, lambda topic: 4)
    assert (msg.topic, msg.body, msg.tags, list(msg.keys), msg.properties["p"]) == ("t", b"hi", "A", ["k1", "k2"], "1")
    assert "n" not in msg.properties
    # A sharding key picks the queue Producer.send(sharding_key=...) picks.
    with mqlite.open(store_path) as store:
        store.create_topic("t", 4)
        assert queue == store.producer().send(Message("t", b"x"), sharding_key="order-17").message_queue.queue_id
    with pytest.raises(IllegalArgumentError, match="column 'VALUE' is null"):
        to_message(Row(VALUE=None, topic="t", tags=None, keys=None, properties=None, shardingKey=None), cols, None, lambda t: 4)
    with pytest.raises(IllegalArgumentError, match="column 'topic' is null"):
        to_message(Row(VALUE="v", topic=None, tags=None, keys=None, properties=None, shardingKey=None), cols, None, lambda t: 4)
    qcols = check_columns(schema("value binary, queueId int"), parse_sink_options({"path": "/s", "topic": "t"}, streaming=False))
    with pytest.raises(IllegalArgumentError, match="queue 4 is not a write queue"):
        to_message(Row(value=b"v", queueId=4), qcols, "t", lambda t: 4)


def test_transaction_ids_round_trip() -> None:
    tid = parse_txn_id(new_txn_id("orders.v1", 17, 3, 1))
    assert tid is not None and (tid.sink_id, tid.batch, tid.partition, tid.attempt) == ("orders.v1", 17, 3, 1)
    job = parse_txn_id(new_txn_id("batch", "job-abc", 0, 0))
    assert job is not None and job.batch == "abc"
    assert parse_txn_id("not-a-sink-id") is None
    assert new_txn_id("s", 1, 0, 0) != new_txn_id("s", 1, 0, 0)  # a restarted run never reuses an id


def write_orphan(path: Path, sink_id: str, batch: int, partition: int, n: int) -> str:
    """A task attempt that wrote ``n`` rows of ``batch`` and was never heard of again."""
    cols = check_columns(schema("value binary"), parse_sink_options({"path": "/s", "topic": "out"}, streaming=False))
    tid = new_txn_id(sink_id, batch, partition, 0)
    with mqlite.open(path) as store:
        producer = sink_producer(store, DEFAULT_PRODUCER_GROUP)
        rows = (Row(value=b"%d:%d:%d" % (batch, partition, i)) for i in range(n))
        assert _send_rows(producer, tid, rows, cols, "out") == n
        producer.close()
    return tid


@pytest.mark.parametrize("bad_at", [5, 2048 + 5], ids=["first-call", "after-a-stored-call"])
def test_a_task_that_fails_leaves_no_open_transaction(store_path: Path, bad_at: int) -> None:
    """A bad row (a null value) at ``bad_at``: the row's typed error reaches the task, and
    whatever the task stored before it (nothing, or a whole 2,048-row call) is rolled back."""
    cols = check_columns(schema("value binary"), parse_sink_options({"path": "/s", "topic": "out"}, streaming=False))
    tid = new_txn_id("s", 1, 0, 0)
    rows = (Row(value=None if i == bad_at else b"%d" % i) for i in range(bad_at + 10))
    with mqlite.open(store_path) as store:
        producer = sink_producer(store, DEFAULT_PRODUCER_GROUP)
        with pytest.raises(IllegalArgumentError, match="null"):
            _send_rows(producer, tid, rows, cols, "out")
        producer.close()
    assert pending(store_path) == []
    assert bodies(store_path, "out") == []


def stream_writer(path: Path, sink_id: str = "s") -> MqliteStreamWriter:
    opts = parse_sink_options({"path": str(path), "topic": "out", "sinkId": sink_id}, streaming=True)
    return MqliteStreamWriter(opts, check_columns(schema("value binary"), opts))


def test_commit_decides_the_batch_and_the_check_back_rolls_back_its_orphans(store_path: Path) -> None:
    listed = write_orphan(store_path, "s", 4, 0, 3)
    orphan_old = write_orphan(store_path, "s", 3, 1, 2)  # a failed attempt of an earlier batch
    orphan_same = write_orphan(store_path, "s", 4, 1, 2)  # a speculative attempt nobody listed
    later = write_orphan(store_path, "s", 5, 0, 2)  # a batch still open
    other_sink = write_orphan(store_path, "t", 1, 0, 1)  # another sink's, never decided
    stream_writer(store_path).commit([SinkCommitMessage(listed, 3, 4), None], 4)
    assert sorted(bodies(store_path, "out")) == [b"4:0:0", b"4:0:1", b"4:0:2"]
    with mqlite.open(store_path) as store:
        producer = sink_producer(store, DEFAULT_PRODUCER_GROUP)
        assert producer.progress(stream_key("s")) == "4"
        producer.close()
    open_ids = {p.id for p in pending(store_path)}
    assert open_ids == {later, other_sink}
    assert orphan_old not in open_ids and orphan_same not in open_ids


def test_a_replayed_batch_is_rolled_back(store_path: Path) -> None:
    first = write_orphan(store_path, "s", 2, 0, 2)
    stream_writer(store_path).commit([SinkCommitMessage(first, 2, 2)], 2)
    # The driver died after the commit, before Spark recorded it: batch 2 runs again.
    again = write_orphan(store_path, "s", 2, 0, 2)
    stream_writer(store_path).commit([SinkCommitMessage(again, 2, 2)], 2)
    assert sorted(bodies(store_path, "out")) == [b"2:0:0", b"2:0:1"]
    assert pending(store_path) == []


def test_commit_refuses_a_message_of_another_batch(store_path: Path) -> None:
    tid = write_orphan(store_path, "s", 1, 0, 1)
    with pytest.raises(mqlite.errors.IllegalStateError, match="batch 1"):
        stream_writer(store_path).commit([SinkCommitMessage(tid, 1, 1)], 2)
    assert bodies(store_path, "out") == []


# ---- on Spark -----------------------------------------------------------------------------


def test_batch_write_columns_and_read_back(spark: SparkSession, store_path: Path) -> None:
    with mqlite.open(store_path) as store:
        store.create_topic("a", 2)
        store.create_topic("b", 3)
    rows = [
        (f"v{i}", "a" if i % 2 else "b", f"T{i % 3}", [f"k{i}", "all"], {"n": str(i)}, i % 2)
        for i in range(40)
    ]
    df = spark.createDataFrame(rows, "value string, topic string, tags string, keys array<string>, properties map<string,string>, queueId int")
    df.write.format("mqlite").mode("append").save(str(store_path))
    back = spark.read.format("mqlite").option("subscribe", "a,b").option("includeProperties", "true").load(str(store_path)).collect()
    assert len(back) == 40
    by_body = {r["value"]: r for r in back}
    for i in range(40):
        r = by_body[f"v{i}".encode()]
        assert (r["topic"], r["tags"], list(r["keys"]), r["properties"]["n"], r["queueId"]) == (
            "a" if i % 2 else "b", f"T{i % 3}", [f"k{i}", "all"], str(i), i % 2
        )
    assert pending(store_path) == []
    # The topic option overrides the column, and a string value is its UTF-8 bytes.
    df.select("value", "topic").write.format("mqlite").option("topic", "c").mode("append").save(str(store_path))
    assert sorted(bodies(store_path, "c")) == sorted(f"v{i}".encode() for i in range(40))


def test_batch_write_errors_are_typed_and_write_nothing(spark: SparkSession, store_path: Path) -> None:
    source(store_path, "out", 0)
    df = spark.createDataFrame([(1,)], "value int")
    with pytest.raises(Exception, match="IllegalArgumentError.*column 'value' must be binary or string"):
        df.write.format("mqlite").option("topic", "out").mode("append").save(str(store_path))
    ok = spark.createDataFrame([(b"x",)], "value binary")
    with pytest.raises(Exception, match="IllegalArgumentError.*no topic"):
        ok.write.format("mqlite").mode("append").save(str(store_path))
    with pytest.raises(Exception, match="IllegalArgumentError.*only appends"):
        ok.write.format("mqlite").option("topic", "out").mode("overwrite").save(str(store_path))
    assert bodies(store_path, "out") == []


def test_failed_batch_job_leaves_nothing_visible(spark: SparkSession, store_path: Path) -> None:
    """One task writes its rows and succeeds, the other meets a null value on every attempt:
    the job is aborted, and neither task's rows reach the topic."""
    source(store_path, "out", 0)
    good = [(b"p0-%d" % i,) for i in range(10)]
    bad = [(b"p1-%d" % i,) for i in range(5)] + [(None,)]
    df = spark.createDataFrame(spark.sparkContext.parallelize(good + bad, 2), "value binary")
    with pytest.raises(Exception, match="column 'value' is null"):
        df.write.format("mqlite").option("topic", "out").mode("append").save(str(store_path))
    assert bodies(store_path, "out") == []
    assert pending(store_path) == []


def streaming_copy(spark: SparkSession, path: Path, chk: Path, transform: Callable[[Any], Any] = lambda df: df, **options: str) -> None:
    df = (
        spark.readStream.format("mqlite").option("subscribe", "in").option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "50").load(str(path)).select("value")
    )
    writer = transform(df).writeStream.format("mqlite").option("topic", "out").option("sinkId", "copy")
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.option("checkpointLocation", str(chk)).trigger(availableNow=True).start(str(path)).awaitTermination()


def test_stream_task_failure_once_is_exactly_once(spark: SparkSession, store_path: Path, tmp_path: Path) -> None:
    """A UDF raises on the first attempt of the first task to run it (a marker file says so):
    Spark retries the task; the failed attempt's rows never show, the retry's show once."""
    from pyspark.sql.functions import col, udf

    source(store_path, "in", 100)
    marker = str(tmp_path / "failed-once")

    @udf("binary", useArrow=False)
    def fail_once(v: bytes) -> bytes:
        import os

        if not os.path.exists(marker) and v.endswith(b"7"):
            open(marker, "w").close()
            raise ValueError("first attempt fails")
        return v

    streaming_copy(spark, store_path, tmp_path / "chk", lambda df: df.select(fail_once(col("value")).alias("value")))
    assert (tmp_path / "failed-once").exists()
    assert sorted(bodies(store_path, "out")) == sorted(b"m%d" % i for i in range(100))
    assert pending(store_path) == []


def _driver(store_path: Path, chk: Path, mode: str, *extra: Path) -> subprocess.Popen[str]:
    """spark_driver_child.py in its own process group (its JVM and workers with it)."""
    env = dict(os.environ)
    here = str(Path(mqlite.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, str(DRIVER_CHILD), str(store_path), str(chk), mode, *map(str, extra)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )


def _kill(pid: int, group: bool) -> None:
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.timeout(600)
def test_a_driver_killed_between_the_writes_and_the_commit(store_path: Path, tmp_path: Path) -> None:
    """A real driver process (its own session: JVM, Python workers) streams topic in to out.
    Its tasks write batch 0 as open transactions; its commit announces itself (a file it
    writes) before deciding anything, and the test kills the driver's whole process group and
    the committing worker with SIGKILL. A new driver restarted from the checkpoint replays
    batch 0: every message once, the dead run's transactions rolled back by the check pass,
    nothing pending. A third run copies only the new input."""
    source(store_path, "in", 100)
    chk, hold = tmp_path / "chk", tmp_path / "held.json"
    child = _driver(store_path, chk, "hold", hold)
    try:
        deadline = time.monotonic() + 400
        while not hold.exists():  # written (whole, by rename) by the driver's commit
            if child.poll() is not None:
                pytest.fail(f"driver exited {child.returncode} before its commit: {child.communicate()[1][-3000:]}")
            assert time.monotonic() < deadline, "the driver never reached its commit"
            time.sleep(0.1)
        held = json.loads(hold.read_text())
        assert held["batch"] == 0 and held["ids"], held
        # The tasks' rows are in the store as open transactions; none is visible.
        assert set(held["ids"]) <= {t.id for t in pending(store_path)}
        assert bodies(store_path, "out") == []
    finally:
        _kill(child.pid, group=True)
        if hold.exists():
            _kill(json.loads(hold.read_text())["pid"], group=False)
        child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL

    def run_to_the_end() -> None:
        done = _driver(store_path, chk, "run")
        try:
            out, err = done.communicate(timeout=400)
        finally:
            _kill(done.pid, group=True)
        assert done.returncode == 0 and "done" in out, err[-3000:]

    run_to_the_end()
    assert sorted(bodies(store_path, "out")) == sorted(b"m%d" % i for i in range(100))
    assert pending(store_path) == []
    # More input, a third run: only the new messages.
    with mqlite.open(store_path) as store:
        p = store.producer()
        for i in range(100, 130):
            p.send(Message("in", b"m%d" % i))
    run_to_the_end()
    assert sorted(bodies(store_path, "out")) == sorted(b"m%d" % i for i in range(130))


def test_stream_sink_while_the_application_writes(
    spark: SparkSession, store_path: Path, tmp_path: Path, spawn_py: Callable[..., Any]
) -> None:
    """Spark's tasks write the sink topic while another process sends to it."""
    source(store_path, "in", 60)
    with mqlite.open(store_path) as store:
        store.create_topic("out", 2)
    child = spawn_py(
        """
        import sys, mqlite
        with mqlite.open(sys.argv[1]) as store:
            p = store.producer()
            print("ready", flush=True)
            for i in range(300):
                p.send(mqlite.Message("out", b"app%d" % i))
        print("done", flush=True)
        """,
        store_path,
    )
    assert child.stdout.readline().strip() == "ready"
    streaming_copy(spark, store_path, tmp_path / "chk")
    assert child.stdout.readline().strip() == "done"
    assert child.wait(timeout=60) == 0
    got = bodies(store_path, "out")
    assert sorted(b for b in got if b.startswith(b"m")) == sorted(b"m%d" % i for i in range(60))
    assert len(got) == 360


def test_example_pipeline_runs_twice_and_resumes(spark: SparkSession, tmp_path: Path) -> None:
    """examples/spark_pipeline.py at a small size, twice on one directory (on this session):
    the second run reads only the orders that arrived since the first, and prints only new
    alerts; each spike minute is alerted once."""
    spec = importlib.util.spec_from_file_location("spark_pipeline", EXAMPLE)
    assert spec is not None and spec.loader is not None
    pipeline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pipeline)
    now1, all1, alerts1 = pipeline.run(spark, tmp_path, 400)
    now2, all2, alerts2 = pipeline.run(spark, tmp_path, 400)
    assert now1 == all1 and 200 <= all1 <= 400  # the queries started once half was sent
    assert all2 == all1 + now2 and 400 <= all2 <= 800
    alerts = alerts1 + alerts2
    assert len(set(alerts)) == len(alerts) >= 1
    assert all('"region":"eu"' in a for a in alerts)
    assert any('"minute":"2026-01-01 00:01"' in a for a in alerts)
