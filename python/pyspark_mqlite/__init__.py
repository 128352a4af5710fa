"""Makes ``format("mqlite")`` work without ``spark.dataSource.register``: Spark registers the
``DefaultSource`` of every installed top-level module whose name starts with ``pyspark_``."""

from mqlite.spark import MqliteDataSource as DefaultSource

__all__ = ["DefaultSource"]
