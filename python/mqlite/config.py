"""Every configuration option of mqlite, in one table, and the checks of ``mqlite.open``'s.

``OPEN_OPTIONS`` lists each ``mqlite.open()`` option with its type, its default (the value the
core applies when the option is left ``None``), what it means and what it costs on disk or in
memory. ``store_options`` checks the options a caller gives against it, and
``docs/configuration.md`` is generated from it (``python scripts/gen_config_docs.py``); a test
fails when either drifts from ``Store.__init__``'s signature or from the core's defaults.

Only what Rust's signature cannot express is checked here (a bool where an int is expected, a
float, a negative number). Ranges that depend on the store (its file sizes) are the core's: an
option left ``None`` is passed on as ``None``.

``PRODUCER_OPTIONS``, ``PULL_CONSUMER_OPTIONS`` and ``PUSH_CONSUMER_OPTIONS`` give the meaning of
each option of ``Store.producer()``, ``Store.pull_consumer()`` and ``Store.push_consumer()``;
their types and defaults are those of the signatures, which the generated page reads."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mqlite._core import ManualClock
from mqlite.errors import InvalidConfigError

__all__ = [
    "OPEN_OPTIONS",
    "PRODUCER_OPTIONS",
    "PULL_CONSUMER_OPTIONS",
    "PUSH_CONSUMER_OPTIONS",
    "Option",
    "store_options",
]

Kind = Literal["bool", "int", "number", "positive", "flush", "text", "clock"]


@dataclass(frozen=True)
class Option:
    """One ``mqlite.open()`` option.

    ``kind`` selects the check: ``"int"`` (an int in ``[minimum, maximum]``), ``"bool"``,
    ``"number"`` (a finite int or float >= 0), ``"positive"`` (the same, > 0), ``"flush"``
    (``"async"`` or ``"sync"``), ``"text"`` (a str the core parses) or ``"clock"`` (a
    ``mqlite.testing.ManualClock``). ``default`` is the value in force when the option is not given
    (``None``: none, e.g. no waiting); ``unit`` says how the page shows it."""

    name: str
    kind: Kind
    type: str
    default: object
    meaning: str
    footprint: str = ""
    unit: Literal["", "bytes", "ms", "s", "h", "mode"] = ""
    minimum: int = 0
    maximum: int | None = None
    default_note: str = ""


OPEN_OPTIONS: tuple[Option, ...] = (
    Option(
        "read_only", "bool", "bool", False,
        "Open as a follower beside the writer (another process's, or none): no lock, nothing "
        "written, only fully written records are seen and the writer's tail is followed.",
        "Maps the files it reads; the mappings of files the writer deleted are released at its "
        "next call (checked at most every 200 ms).",
    ),
    Option(
        "exclusive", "bool", "bool", False,
        "Open as the store's only writer: while it is open, every other writable open, in any "
        "process, raises StoreLockedError (or waits up to wait), and it is refused in turn while "
        "other writers have the store open. Not given: one of any number of writer processes "
        "(docs/processes.md), each sending to the same log and seeing the others' messages; one "
        "of them, the leader, flushes, checkpoints and deletes expired files for all (another "
        "takes over at once when it closes or dies), and with flush=\"sync\" the senders of "
        "every process share its group commits. "
        "Stores in memory are always exclusive; read_only=True with exclusive=True raises "
        "InvalidConfigError.",
        "Shared (the default) maps the writer state `<store>/run/writer.shm` (one page plus "
        "sparse tables). Topics created or grown in any process are seen by every other at its "
        "next call.",
    ),
    Option(
        "shared", "bool", "bool", None,
        "Deprecated alias of exclusive from the preview of many writers: shared=True is the "
        "default, shared=False is exclusive=True; giving both and contradicting raises "
        "InvalidConfigError.",
        default_note="the default, shared",
    ),
    Option(
        "wait", "number", "float | None", None,
        "Seconds to wait for another writer to release the store's lock. Not given: fail at "
        "once with StoreLockedError. Ctrl-C interrupts the wait.",
        unit="s", default_note="fail at once",
    ),
    Option(
        "flush", "flush", '"async" | "sync"', "async",
        '"async": a background thread msyncs every flush_interval_ms; a process crash loses '
        'nothing, a power loss at most the last interval. "sync": group commit, a send returns '
        "once the disk holds it.",
        "Sync mode costs a disk flush per blocking send (shared by concurrent senders); use "
        "send_async for throughput.",
    ),
    Option(
        "flush_interval_ms", "int", "int", 500,
        "Interval of the async flush, and of the consume-queue and checkpoint flushes in both "
        "modes.",
        "The most an OS crash or power loss loses in async mode.",
        unit="ms", minimum=1,
    ),
    Option(
        "sync_flush_timeout_ms", "int", "int", 5000,
        "Sync mode: how long a send waits for the disk before it returns FLUSH_DISK_TIMEOUT "
        "(the message is written, not yet known to be durable).",
        unit="ms", minimum=1,
    ),
    Option(
        "commit_log_file_size", "int", "int", 32 << 20,
        "Size of each commit-log file: a multiple of 4096 in [64 KiB, 1 GiB]. Chosen when the "
        "store is created and recorded in `<store>/meta`; a different value given later raises "
        "InvalidConfigError.",
        "Preallocated: one file, plus the next one once the current file is half full (a "
        "prepared file unused at close() is deleted).",
        unit="bytes", minimum=1,
    ),
    Option(
        "consume_queue_file_units", "int", "int", 50_000,
        "Units (20 bytes each) per consume-queue file, in [64, 10,000,000]. Chosen when the "
        "store is created, as commit_log_file_size.",
        "Each queue's file has its full length (1,000,000 bytes by default) but holds disk "
        "only for its units: one 4 KiB page when created, reserved further ahead of the writer "
        "as units arrive (at most about twice the units' 20 bytes each). A queue that fills half "
        "a file within 10 s gets its next file prepared then; others create it when they roll.",
        minimum=1,
    ),
    Option(
        "max_message_size", "int", "int", 4 << 20,
        "Largest accepted body in bytes; a larger one raises MessageTooLargeError.",
        unit="bytes", minimum=1,
        default_note="or the largest body a smaller commit-log file holds",
    ),
    Option(
        "auto_create_topics", "bool", "bool", True,
        "Create an unknown topic, with default_queues queues, on its first send.",
    ),
    Option(
        "default_queues", "int", "int", 4,
        "Queues of an auto-created topic (at most 1,024 per topic).",
        "No file until a queue's first message; then one consume-queue file holding a 4 KiB "
        "page of disk, growing with its units.",
        minimum=1,
    ),
    Option(
        "file_mode", "int", "int", 0o600,
        "Permission bits of the files the store creates (the process umask still applies).",
        unit="mode", minimum=0, maximum=0o777,
    ),
    Option(
        "dir_mode", "int", "int", 0o700,
        "Permission bits of the directories the store creates (the process umask still "
        "applies).",
        unit="mode", minimum=0, maximum=0o777,
    ),
    Option(
        "retention_hours", "positive", "float", 72,
        "Commit-log files last modified longer ago than this are deleted (oldest first, by the "
        "writer, checked every 10 s), and then the consume-queue files that point only into "
        "them.",
        "The store holds about the last retention_hours of writes, plus the file being written "
        "and the next one.",
        unit="h",
    ),
    Option(
        "max_mapped_files", "int", "int", 256,
        "Idle store files (commit-log and consume-queue files no reader or writer is using) "
        "kept mapped, the most recently used; the others are unmapped and mapped again when "
        "next read. 0 keeps none. A consumer that reads more queues in turn than this maps "
        "each queue's file again at every round: with 10,000 queues, 20,000 reads 1.3x faster "
        "(docs/benchmarks.md, Scale).",
        "Address space and page tables only: a mapping holds no file descriptor (the kernel's "
        "default limit is 65,530 mappings a process). Mapped in "
        "addition: each file being written and each file with bytes not yet flushed. The "
        "store's descriptors stay under 16 whatever its number of files and queues.",
    ),
    Option(
        "delay_levels", "text", "str", "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
        "The delay of each Message(delay_level=n), level 1 first, as RocketMQ's "
        "messageDelayLevel: up to 64 space-separated counts with a unit (s, m, h or d), each "
        "at most 40 days. A send with a level outside the table raises InvalidMessageError. A "
        "message keeps the delay it was sent with if a later open changes the table.",
        "One queue of SCHEDULE_TOPIC_XXXX per level used, and config/delayOffset.json.",
    ),
    Option(
        "timer_max_delay_hours", "positive", "float", 720,
        "The longest a Message(deliver_at=..., delay=...) or a message with RocketMQ 5's "
        "timer properties may wait: a later time raises InvalidMessageError and writes "
        "nothing. At most 100 years.",
        "Pending timers keep their commit-log files from retention until delivered.",
        unit="h",
    ),
    Option(
        "timer_catchup_rate", "int", "int", 10_000,
        "Timers and delayed messages already overdue when a process begins delivering (after "
        "the store was closed past their time) are delivered at most this many a second, "
        "together, so a restart does not flood consumers; 0 delivers them all at once. Those "
        "that fall due while the store is open are never held back.",
    ),
    Option(
        "disk_force_clean_ratio", "positive", "float", 0.85,
        "While the file system holding the store is used above this fraction (used over total "
        "bytes, as df counts them), the writer deletes the oldest commit-log files whatever "
        "their age, down to it, at its next retention pass (every 10 s), as RocketMQ's "
        "forced cleaning (diskSpaceCleanForciblyRatio) does. Their messages are lost to "
        "consumers that had not read them; never the file being written, one not yet indexed, "
        "or one holding a pending timer. In (0, 1]; 1 deletes by age only. Each deletion is "
        "logged (logger mqlite.retention).",
        "Bounds the store's share of a filling disk; below the ratio, retention_hours alone "
        "applies.",
    ),
    Option(
        "index_enabled", "bool", "bool", True,
        "Writers build the key index (RocketMQ's IndexFile) that Store.find_by_key and "
        "Store.get by unique id read. Off, nothing is indexed from then on and find_by_key "
        "raises IndexUnavailableError.",
        "index/: files of 40 + 84 x index_hash_slots bytes (sparse until written), one "
        "entry of 20 bytes per key of a message (its unique id and each KEYS piece); "
        "deleted with the commit-log files they index.",
    ),
    Option(
        "index_hash_slots", "int", "int", 100_000,
        "Hash slots of each new index file; a file holds 4 entries a slot and the store "
        "rolls to a new file when one is full. RocketMQ's 5,000,000 make 420 MB files, a "
        "broker's footprint; the default makes 8.4 MB files. Files already written keep "
        "their size.",
        "A lookup walks one chain per file: fewer, larger files answer faster.",
        minimum=64,
        maximum=5_000_000,
    ),
    Option(
        "clock", "clock", "ManualClock | None", None,
        "For tests: a mqlite.testing.ManualClock the store reads its time from (store "
        "timestamps, delivery times of delays, timers and retries, retention age) instead of "
        "the system's; after moving it, Store.deliver_due() delivers what became due. It "
        "belongs to this process: another process opening the store reads its own clock.",
        default_note="the system clock",
    ),
)

_BY_NAME: dict[str, Option] = {option.name: option for option in OPEN_OPTIONS}

PRODUCER_OPTIONS: dict[str, str] = {
    "group": "Producer group name, as in RocketMQ (at most 120 characters; InvalidGroupError "
    "otherwise).",
    "compress_over": "Compress the body of every single send of this many bytes or more (None: "
    "never). The compressed body is kept only when shorter; batches are never compressed.",
    "compression": 'Codec for compress_over: "zlib" (RocketMQ\'s default), "lz4" or "zstd".',
    "compression_level": "Codec level; None is 5, RocketMQ's default. LZ4 has no levels.",
}

PULL_CONSUMER_OPTIONS: dict[str, str] = {
    "message_model": "CLUSTERING: the group's members share a topic's queues, each queue owned "
    "by one member. BROADCASTING: every consumer reads every queue and keeps its own offsets.",
    "auto_commit": "Commit the polled offsets every auto_commit_interval seconds (on the "
    "consumer's offset-writer thread), on a revoke and on close.",
    "auto_commit_interval": "Seconds between automatic commits.",
    "consume_from": "Where a queue without a committed offset starts: the first or last offset, "
    "or the first message stored at or after a time (a datetime, or CONSUME_FROM_TIMESTAMP with "
    "consume_timestamp).",
    "consume_timestamp": "The time for CONSUME_FROM_TIMESTAMP: a datetime or epoch milliseconds "
    "(None: half an hour ago).",
    "max_poll_messages": "Most messages one poll() returns when it is not told (at most 65,536).",
    "max_poll_bytes": "Most bytes (whole stored records) one poll() returns, like Kafka's "
    "fetch.max.bytes; a single larger message is returned alone. 16 MiB: four messages of the "
    "largest default size, far above 32 messages of a few KiB.",
    "client_id": "This member's id in the group; a BROADCASTING consumer resumes from the "
    "offsets of the same client_id. None: a fresh id per consumer.",
    "allocate_strategy": "How a CLUSTERING group divides a topic's queues among its members "
    "(None: AllocateMessageQueueAveragely).",
    "rebalance_interval": "Seconds between the member's checks of the group's membership "
    "(also while poll() waits).",
    "max_reconsume_times": "send_back() of a message consumed this many times stores it in the "
    "dead-letter topic %DLQ%<group> instead of the retry topic. None: the group's retryMaxTimes "
    "in config/subscriptionGroup.json (16 without an entry).",
    "max_poll_interval": "CLUSTERING subscribe: a member that has not called poll() for this "
    "many seconds gives its queues up (WARNING on mqlite.consumer), so the group's other members "
    "take them, and rejoins at its next poll; the messages of its last poll count as not "
    "consumed. Kafka's max.poll.interval.ms. None: never.",
}

PUSH_CONSUMER_OPTIONS: dict[str, str] = {
    "orderly": "One thread per queue at a time, in queue order; a failed batch is re-delivered "
    "to the same queue after suspend_time.",
    "threads": "Listener threads.",
    "batch_size": "Most messages per listener call.",
    "message_model": PULL_CONSUMER_OPTIONS["message_model"],
    "consume_from": PULL_CONSUMER_OPTIONS["consume_from"],
    "consume_timestamp": PULL_CONSUMER_OPTIONS["consume_timestamp"],
    "client_id": PULL_CONSUMER_OPTIONS["client_id"],
    "allocate_strategy": PULL_CONSUMER_OPTIONS["allocate_strategy"],
    "pull_batch_size": "Most messages fetched from the store per poll.",
    "max_buffered_per_queue": "A queue with this many messages fetched and not yet "
    "acknowledged is paused until its backlog drains.",
    "max_buffered_bytes": "Most bytes (whole stored records) of the messages the consumer "
    "holds, over all its queues: fetched and not yet acknowledged (RocketMQ's "
    "pullThresholdSizeForQueue, for the whole consumer). Polls stop at the room left and wait "
    "for acknowledgements; a single larger message is still delivered, alone. "
    "buffered_bytes and peak_buffered_bytes report it.",
    "suspend_time": "Orderly mode: seconds before a failed batch is re-delivered.",
    "retry_delay": "Concurrent mode: seconds before a failed message that is not sent back "
    "(BROADCASTING, send_back=False, or a failed send-back) is re-delivered locally; doubles "
    "on each failure.",
    "max_retry_delay": "Upper bound of retry_delay's doubling, in seconds.",
    "max_reconsume_times": "CLUSTERING mode: a failed message consumed this many times goes to "
    "the dead-letter topic %DLQ%<group> instead of the retry topic; orderly, a message that "
    "failed more than this many times (counted durably) goes there and its queue moves on. "
    "None: the group's retryMaxTimes in config/subscriptionGroup.json (16 without an entry).",
    "send_back": "Concurrent CLUSTERING mode: failed messages are sent back to %RETRY%<group> "
    "with a growing delay level (True), or kept for local redelivery (False).",
    "commit_interval": "Seconds between offset commits (written on the consumer's offset-writer "
    "thread); also committed when a queue moves to another member and on shutdown.",
    "rebalance_interval": PULL_CONSUMER_OPTIONS["rebalance_interval"],
    "revoke_timeout": "Seconds a queue moving to another member waits for its running listener "
    "calls; messages still running then are re-delivered by the new owner.",
}


def _number(name: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidConfigError(f"{name} must be a number, not {type(value).__name__}", field=name)
    try:
        number = float(value)
    except OverflowError:  # an int beyond the float range
        number = math.inf
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        bound = "> 0" if positive else ">= 0"
        raise InvalidConfigError(f"{name} must be a finite number {bound}, got {value!r}", field=name)
    return number


def _check(option: Option, value: object) -> object:
    name = option.name
    if option.kind == "bool":
        if not isinstance(value, bool):
            raise InvalidConfigError(f"{name} must be a bool, not {type(value).__name__}", field=name)
        return value
    if option.kind == "int":
        low, high = option.minimum, option.maximum
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidConfigError(f"{name} must be an int, not {type(value).__name__}", field=name)
        if value < low or (high is not None and value > high):
            limit = f">= {low}" if high is None else f"in [{low}, {high:#o}]"
            raise InvalidConfigError(f"{name} must be {limit}, got {value!r}", field=name)
        return value
    if option.kind == "text":
        if not isinstance(value, str):
            raise InvalidConfigError(f"{name} must be a str, not {type(value).__name__}", field=name)
        return value
    if option.kind == "clock":
        if not isinstance(value, ManualClock):
            raise InvalidConfigError(
                f"{name} must be a mqlite.testing.ManualClock, not {type(value).__name__}", field=name
            )
        return value
    if option.kind == "flush":
        if value not in ("async", "sync"):
            raise InvalidConfigError(f"flush must be 'async' or 'sync', got {value!r}", field=name)
        return value
    return _number(name, value, positive=option.kind == "positive")


def store_options(options: Mapping[str, object]) -> dict[str, Any]:
    """Check each option's type and sign; drop the ``None`` ones (the core's default applies)."""
    out: dict[str, Any] = {}
    for name, value in options.items():
        if value is None:
            continue
        option = _BY_NAME.get(name)
        if option is None:
            raise InvalidConfigError(f"unknown option {name!r}", field=name)
        out[name] = _check(option, value)
    return out
