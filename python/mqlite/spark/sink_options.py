"""The sink's options and columns: checked once, on the driver, before any task writes.

Spark hands ``df.write`` / ``writeStream`` of format ``mqlite`` its options as strings and the
DataFrame's schema. Both are checked here into picklable values: a wrong option, a column of
the wrong type, an unknown column or no topic at all is an ``IllegalArgumentError`` that names
the option or the column, raised at planning, so nothing is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from mqlite.errors import IllegalArgumentError
from mqlite.group import check_group
from mqlite.spark.options import known_options
from mqlite.topic import check_topic

__all__ = ["DEFAULT_PRODUCER_GROUP", "SinkColumns", "SinkOptions", "check_columns", "parse_sink_options"]

DEFAULT_PRODUCER_GROUP = "mqlite-spark-sink"

_KNOWN = ("path", "topic", "producerGroup", "sinkId")
# Options Spark itself passes to a streaming sink along with the user's.
_SPARK_OWN = ("checkpointlocation",)

# A sink id is part of every transaction id and progress key the sink writes: a short name
# without the separators those use.
_SINK_ID = re.compile(r"[A-Za-z0-9_.\-]{1,100}")


@dataclass(frozen=True)
class SinkOptions:
    """The checked options of one ``df.write`` / ``writeStream`` of format ``mqlite``."""

    path: str
    # Overrides the topic column (Spark's Kafka sink does the same).
    topic: str | None
    producer_group: str
    sink_id: str | None


def parse_sink_options(options: Mapping[str, str], *, streaming: bool) -> SinkOptions:
    """Checks ``options``; ``IllegalArgumentError`` names the first wrong one. A streaming
    write needs ``sinkId``: it names the progress that makes replays harmless."""
    given = known_options(options, _KNOWN, "of the mqlite sink", ignore=_SPARK_OWN)
    path = given.get("path")
    if not path:
        raise IllegalArgumentError("option path (the store directory) is required: .save(path) or .option('path', ...)")
    topic = given.get("topic")
    if topic is not None:
        check_topic(topic)
    group = check_group(given.get("producerGroup", DEFAULT_PRODUCER_GROUP))
    sink_id = given.get("sinkId")
    if sink_id is not None and not _SINK_ID.fullmatch(sink_id):
        raise IllegalArgumentError(
            f"option sinkId must be 1 to 100 characters from [A-Za-z0-9_.-], got {sink_id!r}"
        )
    if streaming and sink_id is None:
        raise IllegalArgumentError(
            "option sinkId is required by writeStream.format('mqlite'): it names the sink's "
            "progress in the store, which makes the sink exactly-once (one id per query)"
        )
    return SinkOptions(path, topic, group, sink_id)


@dataclass(frozen=True)
class SinkColumns:
    """Where each known column is in the DataFrame's rows (its name as the DataFrame spells
    it), or None when absent. ``keys_array``: ``keys`` is array<string> (else a string of
    space-separated keys)."""

    value: str
    topic: str | None = None
    tags: str | None = None
    keys: str | None = None
    keys_array: bool = False
    properties: str | None = None
    queue_id: str | None = None
    sharding_key: str | None = None


_INTS = (IntegerType, LongType, ShortType)
# Canonical name -> (accepted types, what the error says).
_TYPES: dict[str, tuple[tuple[type[DataType], ...], str]] = {
    "value": ((BinaryType, StringType), "binary or string"),
    "topic": ((StringType,), "string"),
    "tags": ((StringType,), "string"),
    "keys": ((StringType, ArrayType), "string or array<string>"),
    "properties": ((MapType,), "map<string,string>"),
    "queueId": (_INTS, "int"),
    "shardingKey": ((StringType, BinaryType), "string or binary"),
}
_COLUMN = {name.lower(): name for name in (*_TYPES, "deliverAt")}


def _fits(name: str, dtype: DataType) -> bool:
    kinds, _ = _TYPES[name]
    if not isinstance(dtype, kinds):
        return False
    if isinstance(dtype, ArrayType):
        return isinstance(dtype.elementType, StringType)
    if isinstance(dtype, MapType):
        return isinstance(dtype.keyType, StringType) and isinstance(dtype.valueType, StringType)
    return True


def check_columns(schema: StructType, opts: SinkOptions) -> SinkColumns:
    """The known columns of ``schema`` (matched case-insensitively, as Spark matches names);
    ``IllegalArgumentError`` names a column of a wrong type, an unknown column, a missing
    ``value``, or the missing topic (no ``topic`` option and no ``topic`` column)."""
    found: dict[str, str] = {}
    for field in schema.fields:
        name = _COLUMN.get(field.name.lower())
        if name is None:
            raise IllegalArgumentError(
                f"column {field.name!r} is not a column of the mqlite sink; it takes "
                f"{', '.join(_TYPES)} (select or drop the others)"
            )
        if name in found:
            raise IllegalArgumentError(f"column {field.name!r} appears twice")
        if name == "deliverAt":
            raise IllegalArgumentError(
                "column 'deliverAt': the mqlite sink writes every row in a transaction, and a "
                "transactional message cannot have a delivery time; drop the column"
            )
        if not _fits(name, field.dataType):
            raise IllegalArgumentError(
                f"column {field.name!r} must be {_TYPES[name][1]}, not {field.dataType.simpleString()}"
            )
        found[name] = field.name
    if "value" not in found:
        raise IllegalArgumentError("column 'value' (binary or string) is required by the mqlite sink")
    if opts.topic is None and "topic" not in found:
        raise IllegalArgumentError("no topic: set option topic or give a 'topic' column (string)")
    if "queueId" in found and "shardingKey" in found:
        raise IllegalArgumentError("columns 'queueId' and 'shardingKey' both choose the queue: give one")
    keys = found.get("keys")
    return SinkColumns(
        value=found["value"],
        topic=found.get("topic"),
        tags=found.get("tags"),
        keys=keys,
        keys_array=keys is not None and isinstance(schema[keys].dataType, ArrayType),
        properties=found.get("properties"),
        queue_id=found.get("queueId"),
        sharding_key=found.get("shardingKey"),
    )
