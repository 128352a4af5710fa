"""The source's options: parsed and checked once, on the driver, into a picklable value.

Spark hands a data source its options as a case-insensitive mapping of strings. Every option
is checked here before any file is read, so a typo or a bad value is an
``IllegalArgumentError`` (``FilterExpressionError`` for a bad ``tags`` or ``sql``) that names
the option, never a failure in a Python worker later.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Union

from mqlite.errors import IllegalArgumentError
from mqlite.group import check_group
from mqlite.selector import compile_sql
from mqlite.topic import check_topic, parse_tags

__all__ = ["EARLIEST", "LATEST", "OffsetSpec", "SourceOptions", "parse_options"]

# Kafka's sentinels in per-queue offset JSON.
EARLIEST = -2
LATEST = -1

# "earliest", "latest", or {topic: {queue_id: offset or sentinel}}.
OffsetSpec = Union[Literal["earliest", "latest"], dict[str, dict[int, int]]]

_KNOWN = (
    "path",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "maxOffsetsPerTrigger",
    "maxOffsetsPerPartition",
    "failOnDataLoss",
    "tags",
    "sql",
    "includeProperties",
    "consumerGroup",
)

# A partition covers at most this many queue offsets unless maxOffsetsPerPartition says.
DEFAULT_MAX_OFFSETS_PER_PARTITION = 1_000_000


@dataclass(frozen=True)
class SourceOptions:
    """The checked options of one ``spark.read`` / ``spark.readStream`` of format ``mqlite``."""

    path: str
    # Exactly one of the three topic selections is set.
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: dict[str, tuple[int, ...]] | None
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp: int | None
    max_offsets_per_trigger: int | None
    max_offsets_per_partition: int
    fail_on_data_loss: bool
    tags: tuple[str, ...] | None
    sql: str | None
    include_properties: bool
    consumer_group: str | None


def _bool(name: str, raw: str | None, default: bool) -> bool:
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in ("true", "false"):
        return value == "true"
    raise IllegalArgumentError(f"option {name} must be 'true' or 'false', got {raw!r}")


def _positive(name: str, raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise IllegalArgumentError(f"option {name} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise IllegalArgumentError(f"option {name} must be a positive integer, got {raw!r}")
    return value


def _queue_id(name: str, raw: object) -> int:
    try:
        q = int(str(raw))
    except ValueError:
        q = -1
    if q < 0 or isinstance(raw, bool):
        raise IllegalArgumentError(f"option {name}: queue id {raw!r} is not an integer >= 0")
    return q


def _json(name: str, raw: str) -> object:
    try:
        return json.loads(raw)
    except ValueError as e:
        raise IllegalArgumentError(f"option {name} is not valid JSON ({e}): {raw!r}") from None


def _offsets(name: str, raw: str | None, default: str, *, batch_end: bool) -> OffsetSpec:
    """``earliest``, ``latest`` or ``{"topic": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest)."""
    text = (raw if raw is not None else default).strip()
    if text.lower() in ("earliest", "latest"):
        word: Literal["earliest", "latest"] = "earliest" if text.lower() == "earliest" else "latest"
        if batch_end and word == "earliest":
            raise IllegalArgumentError(f"option {name} may not be 'earliest' (an empty read)")
        return word
    spec = _json(name, text)
    if not isinstance(spec, dict):
        raise IllegalArgumentError(
            f"option {name} must be 'earliest', 'latest' or a JSON object "
            f'{{"topic": {{"0": offset}}}}, got {raw!r}'
        )
    out: dict[str, dict[int, int]] = {}
    for topic, queues in spec.items():
        check_topic(topic)
        if not isinstance(queues, dict):
            raise IllegalArgumentError(f"option {name}: topic {topic!r} must map queue ids to offsets")
        parsed: dict[int, int] = {}
        for q, off in queues.items():
            if isinstance(off, bool) or not isinstance(off, int) or off < EARLIEST:
                raise IllegalArgumentError(
                    f"option {name}: offset of {topic}/{q} must be an integer >= 0, "
                    f"-2 (earliest) or -1 (latest), got {off!r}"
                )
            if batch_end and off == EARLIEST:
                raise IllegalArgumentError(f"option {name}: -2 (earliest) is not an ending offset")
            parsed[_queue_id(name, q)] = off
        out[topic] = parsed
    return out


def _assign(raw: str) -> dict[str, tuple[int, ...]]:
    spec = _json("assign", raw)
    if not isinstance(spec, dict) or not spec:
        raise IllegalArgumentError(f'option assign must be a JSON object {{"topic": [0, 1]}}, got {raw!r}')
    out: dict[str, tuple[int, ...]] = {}
    for topic, queues in spec.items():
        check_topic(topic)
        if not isinstance(queues, list):
            raise IllegalArgumentError(f"option assign: topic {topic!r} must map to a list of queue ids")
        out[topic] = tuple(sorted({_queue_id("assign", q) for q in queues}))
    return out


def known_options(
    options: Mapping[str, str], known: tuple[str, ...], what: str, ignore: tuple[str, ...] = ()
) -> dict[str, str]:
    """``options`` under their ``known`` spellings (Spark matches option names without case),
    values as strings, those in ``ignore`` (lower case) dropped; ``IllegalArgumentError`` for
    any other name, ``what`` naming the reader or writer in the message."""
    by_lower = {name.lower(): name for name in known}
    given: dict[str, str] = {}
    for key, value in options.items():
        if str(key).lower() in ignore:
            continue
        name = by_lower.get(str(key).lower())
        if name is None:
            raise IllegalArgumentError(f"unknown option {key!r} {what}; known: {', '.join(known)}")
        given[name] = str(value)
    return given


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Checks ``options`` (Spark's, string values); raises ``IllegalArgumentError``."""
    given = known_options(options, _KNOWN, "for format mqlite")
    path = given.get("path")
    if not path:
        raise IllegalArgumentError("option path (the store directory) is required: .load(path)")
    chosen = [k for k in ("subscribe", "subscribePattern", "assign") if k in given]
    if len(chosen) != 1:
        raise IllegalArgumentError(
            "give exactly one of the options subscribe, subscribePattern and assign"
            + (f" (got {', '.join(chosen)})" if chosen else "")
        )
    subscribe = None
    if "subscribe" in given:
        names = [t.strip() for t in given["subscribe"].split(",") if t.strip()]
        if not names:
            raise IllegalArgumentError("option subscribe names no topic")
        subscribe = tuple(dict.fromkeys(check_topic(t) for t in names))
    pattern = given.get("subscribePattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as e:
            raise IllegalArgumentError(f"option subscribePattern is not a regular expression: {e}") from None
    if streaming and "endingOffsets" in given:
        raise IllegalArgumentError("option endingOffsets is for batch reads only")
    if not streaming and (given.get("startingOffsets", "").strip().lower() == "latest"):
        raise IllegalArgumentError("option startingOffsets may not be 'latest' in a batch read (an empty read)")
    timestamp = None
    if "startingTimestamp" in given:
        raw = given["startingTimestamp"]
        try:
            timestamp = int(raw.strip())
        except ValueError:
            timestamp = -1
        if timestamp < 0:
            raise IllegalArgumentError(
                f"option startingTimestamp must be epoch milliseconds >= 0, got {raw!r}"
            )
    sql = given.get("sql")
    if sql is not None:
        compile_sql(sql)  # FilterExpressionError now rather than in every task
    group = given.get("consumerGroup")
    if group is not None:
        check_group(group)
    tags = parse_tags(given.get("tags"))
    return SourceOptions(
        path=path,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=_assign(given["assign"]) if "assign" in given else None,
        starting=_offsets(
            "startingOffsets", given.get("startingOffsets"), "latest" if streaming else "earliest", batch_end=False
        ),
        ending=_offsets("endingOffsets", given.get("endingOffsets"), "latest", batch_end=True),
        starting_timestamp=timestamp,
        max_offsets_per_trigger=_positive("maxOffsetsPerTrigger", given.get("maxOffsetsPerTrigger")),
        max_offsets_per_partition=_positive("maxOffsetsPerPartition", given.get("maxOffsetsPerPartition"))
        or DEFAULT_MAX_OFFSETS_PER_PARTITION,
        fail_on_data_loss=_bool("failOnDataLoss", given.get("failOnDataLoss"), True),
        tags=tuple(tags) if tags is not None else None,
        sql=sql,
        include_properties=_bool("includeProperties", given.get("includeProperties"), False),
        consumer_group=group,
    )
