"""A Spark driver in its own process for test_spark_sink.py's driver-kill test.

    python spark_driver_child.py STORE CHECKPOINT MODE [HOLD_FILE]

Runs one availableNow streaming query that copies topic ``in`` to topic ``out`` with sink id
``copy``, on its own local[2] session. MODE ``hold``: the sink is the ``mqlite`` sink with one
change, its driver-side ``commit`` first records the batch, the transactions it was handed and
its process id in HOLD_FILE (written whole, then renamed), then waits to be killed: the test
kills this driver, its JVM and the committing worker there, between the tasks' writes and the
commit. MODE ``run``: the plain ``mqlite`` sink; prints ``done`` when the query ends.

The held writer's class is defined here, in ``__main__``, so Spark's pickling ships it by
value to the Python worker that runs the commit.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark.sql import SparkSession  # noqa: E402

from mqlite.spark import MqliteDataSource, MqliteStreamWriter, SinkCommitMessage  # noqa: E402

store, checkpoint, mode = sys.argv[1:4]
hold_file = sys.argv[4] if len(sys.argv) > 4 else ""


class HeldWriter(MqliteStreamWriter):
    """The mqlite stream writer whose commit never runs: it announces itself and waits."""

    hold_file = ""

    def commit(self, messages: list[Any], batchId: int) -> None:
        ids = [m.txn_id for m in messages if isinstance(m, SinkCommitMessage) and m.txn_id]
        tmp = self.hold_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"batch": batchId, "ids": ids, "pid": os.getpid()}, f)
        os.rename(tmp, self.hold_file)
        threading.Event().wait(600)  # the test kills this process long before


class HeldSource(MqliteDataSource):
    @classmethod
    def name(cls) -> str:
        return "mqlite_held"

    def streamWriter(self, schema: Any, overwrite: bool) -> HeldWriter:
        plain = super().streamWriter(schema, overwrite)
        assert isinstance(plain, MqliteStreamWriter)
        writer = HeldWriter(plain.opts, plain.cols)
        writer.hold_file = hold_file
        return writer


spark = (
    SparkSession.builder.master("local[2]")
    .appName("mqlite-driver-child")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.driver.memory", "512m")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
spark.dataSource.register(MqliteDataSource)
spark.dataSource.register(HeldSource)
print("session", flush=True)
df = (
    spark.readStream.format("mqlite")
    .option("subscribe", "in")
    .option("startingOffsets", "earliest")
    .load(store)
)
fmt = "mqlite_held" if mode == "hold" else "mqlite"
query = (
    df.select("value")
    .writeStream.format(fmt)
    .option("topic", "out")
    .option("sinkId", "copy")
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
    .start(store)
)
query.awaitTermination()
spark.stop()
print("done", flush=True)
