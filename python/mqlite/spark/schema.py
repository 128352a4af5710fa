"""The source's schema, as Spark DDL and as the exact Arrow schema Spark checks batches
against (Spark compares the first batch's schema with ``to_arrow_schema(schema, timezone="UTC")``,
so batches are built against that very schema)."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["arrow_schema", "ddl", "spark_schema"]

_COLUMNS = (
    "value BINARY, topic STRING, queueId INT, offset BIGINT, timestamp TIMESTAMP, "
    "bornTimestamp TIMESTAMP, tags STRING, keys ARRAY<STRING>, msgId STRING, reconsumeTimes INT"
)
_PROPERTIES = ", properties MAP<STRING, STRING>"


def ddl(include_properties: bool) -> str:
    """The schema as a DDL string: ``properties`` only with ``includeProperties``."""
    return _COLUMNS + (_PROPERTIES if include_properties else "")


@lru_cache(maxsize=2)
def arrow_schema(include_properties: bool) -> pa.Schema:
    """The Arrow schema Spark expects of the source's batches."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(include_properties), timezone="UTC")


def spark_schema(include_properties: bool) -> StructType:
    """The schema as a ``StructType`` (the same as ``ddl``, built without a session)."""
    from pyspark.sql import types as t

    fields = [
        t.StructField("value", t.BinaryType()),
        t.StructField("topic", t.StringType()),
        t.StructField("queueId", t.IntegerType()),
        t.StructField("offset", t.LongType()),
        t.StructField("timestamp", t.TimestampType()),
        t.StructField("bornTimestamp", t.TimestampType()),
        t.StructField("tags", t.StringType()),
        t.StructField("keys", t.ArrayType(t.StringType())),
        t.StructField("msgId", t.StringType()),
        t.StructField("reconsumeTimes", t.IntegerType()),
    ]
    if include_properties:
        fields.append(t.StructField("properties", t.MapType(t.StringType(), t.StringType())))
    return t.StructType(fields)
