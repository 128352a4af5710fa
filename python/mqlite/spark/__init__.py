"""mqlite topics as Spark DataFrames: the ``mqlite`` format of PySpark's Python data source
API (pyspark >= 4.2; ``pip install 'mqlite[spark]'``).

>>> from mqlite.spark import register
>>> register(spark)  # optional: installing mqlite also registers the format (pyspark_mqlite)
>>> df = spark.read.format("mqlite").option("subscribe", "orders").load("/data/mq")
>>> df.select("value").write.format("mqlite").option("topic", "copy").mode("append").save("/data/mq")

docs/spark.md gives the options, the schema, the sink's columns and what exactly-once means.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

try:
    import pyarrow  # noqa: F401
    import pyspark.sql.datasource  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"mqlite.spark needs pyspark >= 4.2 and pyarrow ({e}); install them with: pip install 'mqlite[spark]'"
    ) from e

from mqlite.spark.options import SourceOptions, parse_options
from mqlite.spark.plan import QueueRange
from mqlite.spark.sink import MqliteBatchWriter, MqliteStreamWriter, SinkCommitMessage
from mqlite.spark.sink_options import SinkOptions, parse_sink_options
from mqlite.spark.sink_txn import SinkCheckListener, sink_producer
from mqlite.spark.source import MqliteBatchReader, MqliteDataSource, MqliteStreamReader

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "MqliteBatchReader",
    "MqliteBatchWriter",
    "MqliteDataSource",
    "MqliteStreamReader",
    "MqliteStreamWriter",
    "QueueRange",
    "SinkCheckListener",
    "SinkCommitMessage",
    "SinkOptions",
    "SourceOptions",
    "parse_options",
    "parse_sink_options",
    "register",
    "sink_producer",
]


def register(spark: SparkSession) -> None:
    """Registers the ``mqlite`` format with ``spark`` (``spark.dataSource.register``). Not
    needed when mqlite is installed in the workers' environment: Spark finds the format through
    the ``pyspark_mqlite`` package."""
    spark.dataSource.register(MqliteDataSource)
