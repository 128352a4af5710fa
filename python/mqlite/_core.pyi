# Hand-written stub of the private extension module `mqlite._core` (checked by mypy.stubtest).
# The public API lives in the `mqlite` package; this module is thin: it converts, releases the
# GIL, calls the Rust core and maps errors to the classes of `mqlite.errors`.
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar, Literal, final

from typing_extensions import Self, disjoint_base

__version__: str
RESERVED_PROPERTIES: frozenset[str]
"""The property names a message's ``properties`` may not use (the store's and RocketMQ's)."""
__all__ = [
    "__version__",
    "RESERVED_PROPERTIES",
    "Message",
    "MessageQueue",
    "SendResult",
    "SendBatchResult",
    "MessageExt",
    "GetResult",
    "QueueCursor",
    "Producer",
    "Store",
    "ManualClock",
    "PollToken",
    "check_topic",
    "check_group",
    "ofd_try_lock",
    "ofd_unlock",
    "_queue_loads",
    "read_columns",
    "_verify_store",
    "_repair_store",
]

def check_topic(topic: str) -> None:
    """InvalidTopicError unless ``topic`` is a valid topic name (the rule a send applies)."""

def check_group(group: str) -> None:
    """InvalidGroupError unless ``group`` is a valid producer or consumer group name."""

def ofd_try_lock(fd: int, start: int, len: int) -> bool:
    """Take an exclusive open-file-description lock on bytes ``start..start+len`` of ``fd``'s
    file without waiting; False when another open file description holds part of it."""

def ofd_unlock(fd: int, start: int, len: int) -> None:
    """Release ``fd``'s open file description's locks on bytes ``start..start+len``."""

def _queue_loads() -> int:
    """Test hook: how many consume queues this process has loaded from their files."""

def read_columns(
    store: Store,
    topic: str,
    queue_id: int,
    offset: int,
    end: int,
    max_messages: int,
    tags: Sequence[str] | None = None,
    properties: bool = False,
) -> tuple[str, int, int, int, int, dict[str, bytes]]:
    """The matching messages of queue offsets ``[offset, end)``, at most ``max_messages``, as
    Arrow column buffers: ``(status, next_offset, min_offset, max_offset, rows, columns)``.
    ``columns`` maps ``"<column>[.<buffer>]"`` (``value.offsets``, ``value.data``, ``offset``,
    ``timestamp`` and ``bornTimestamp`` in microseconds, ``reconsumeTimes``, ``tags.offsets``,
    ``tags.data``, ``tags.validity``, ``keys.offsets``, ``keys.item.offsets``,
    ``keys.item.data``, ``msgId.offsets``, ``msgId.data``, and with ``properties`` the
    ``properties.*`` buffers of a ``map<string, string>``) to bytes in the machine's byte
    order, offsets as ``int32``. ``status`` is ``"OFFSET_TOO_SMALL"`` when retention removed ``offset``
    (``next_offset`` is then the queue's first)."""

def _verify_store(path: str, progress: Callable[[int, int], object] | None = None) -> str:
    """Verify the store at ``path`` reading only; the report as JSON (mqlite.maintenance)."""

def _repair_store(path: str, mode: str, dry_run: bool) -> str:
    """Repair the store at ``path`` (``mode``: ``"cut"`` or ``"skip"``); the report as JSON."""

@disjoint_base
class Message:
    """A message to send (a native class that behaves as a dataclass).

    ``delay_level`` (RocketMQ's delay level; 0, the default, is none) keeps the message out of
    its topic until the delay of its level in the store's table (``delay_levels``) has passed;
    ``deliver_at`` (a ``datetime`` or epoch milliseconds) or ``delay`` (a ``timedelta`` or
    seconds) keeps it out until that time (at most one of the three)."""
    topic: str
    body: bytes
    tags: str | None
    keys: Sequence[str] | str
    properties: Mapping[str, str]
    flag: int
    delay_level: int
    deliver_at: datetime | int | None
    delay: timedelta | float | None
    __dataclass_fields__: ClassVar[dict[str, Any]]
    __match_args__: ClassVar[tuple[str, ...]]
    __hash__: ClassVar[None]  # type: ignore[assignment]
    def __new__(
        cls,
        topic: str,
        body: bytes,
        tags: str | None = None,
        keys: Sequence[str] | str | None = None,
        properties: Mapping[str, str] | None = None,
        flag: int | None = None,
        delay_level: int | None = None,
        deliver_at: datetime | int | None = None,
        delay: timedelta | float | None = None,
    ) -> Self: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]: ...

@final
class MessageQueue:
    """A (topic, queue id) pair; hashable, usable as a dict key."""
    def __new__(cls, topic: str, queue_id: int) -> MessageQueue: ...
    @property
    def topic(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...
    def __lt__(self, value: MessageQueue, /) -> bool: ...
    def __le__(self, value: MessageQueue, /) -> bool: ...
    def __gt__(self, value: MessageQueue, /) -> bool: ...
    def __ge__(self, value: MessageQueue, /) -> bool: ...
    def __getnewargs__(self) -> tuple[str, int]: ...

@final
class SendResult:
    """Outcome of one send."""
    @property
    def send_status(self) -> Any: ...  # mqlite.SendStatus
    @property
    def msg_id(self) -> str: ...
    @property
    def offset_msg_id(self) -> str: ...
    @property
    def message_queue(self) -> MessageQueue:
        """The topic and queue the message was sent to (for a delayed message too)."""
    @property
    def queue_offset(self) -> int:
        """The message's offset in the queue it was stored in: its ``message_queue``, or for a
        ``scheduled`` message its level's queue of ``SCHEDULE_TOPIC_XXXX`` (it gets an offset in
        ``message_queue`` when it is delivered)."""
    @property
    def scheduled(self) -> bool:
        """True when the message was stored for later delivery (a delay level)."""
    @property
    def commit_log_offset(self) -> int: ...
    def _end(self) -> int: ...
    def _timed_out(self) -> SendResult: ...

@final
class SendBatchResult:
    """Results of one `send_batch`, materialised lazily (a read-only sequence of SendResult)."""
    @property
    def message_queue(self) -> MessageQueue: ...
    @property
    def first_queue_offset(self) -> int: ...
    @property
    def scheduled(self) -> bool:
        """True when the batch was stored for later delivery (a delay level)."""
    @property
    def send_status(self) -> Any: ...
    def __len__(self) -> int: ...
    def __getitem__(self, key: int, /) -> SendResult: ...
    def __iter__(self) -> Iterator[SendResult]: ...

@final
class MessageExt:
    """A stored message; fields decode lazily from the record bytes."""
    @property
    def topic(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def queue_offset(self) -> int: ...
    @property
    def commit_log_offset(self) -> int: ...
    @property
    def msg_id(self) -> str: ...
    @property
    def offset_msg_id(self) -> str: ...
    @property
    def body(self) -> bytes:
        """The body as sent: decompressed (on each access) when the record is compressed."""
    @property
    def raw_body(self) -> bytes:
        """The body bytes as stored (compressed for a compressed record)."""
    @property
    def tags(self) -> str | None: ...
    @property
    def keys(self) -> tuple[str, ...]: ...
    @property
    def properties(self) -> dict[str, str]: ...
    @property
    def flag(self) -> int: ...
    @property
    def sysflag(self) -> int: ...
    @property
    def born_timestamp(self) -> int: ...
    @property
    def store_timestamp(self) -> int: ...
    @property
    def reconsume_times(self) -> int: ...
    @property
    def store_size(self) -> int: ...
    @property
    def message_queue(self) -> MessageQueue: ...
    def get_property(self, name: str) -> str | None: ...

@final
class GetResult:
    """One read: RocketMQ status name, the messages and the next offset to read."""
    @property
    def status(self) -> str: ...
    @property
    def next_offset(self) -> int: ...
    @property
    def min_offset(self) -> int: ...
    @property
    def max_offset(self) -> int: ...
    @property
    def messages(self) -> list[MessageExt]: ...

@final
class QueueCursor:
    """A pull consumer's state in one queue; ``Store.poll_cursors`` reads and advances it."""
    def __new__(
        cls,
        mq: MessageQueue,
        topic: str,
        queue_id: int,
        position: int,
        tags: Sequence[str] | None = None,
        sql: Any | None = None,
    ) -> Self: ...
    @property
    def mq(self) -> MessageQueue: ...
    @property
    def topic(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    position: int
    committed: int | None
    live: bool
    @property
    def error(self) -> BaseException | None: ...
    @property
    def tags(self) -> Any | None: ...
    @property
    def sql(self) -> Any | None: ...

@disjoint_base
class Producer:
    """Sends messages; queue selection is round robin over the topic's write queues unless a
    queue id, sharding key or selector decides."""
    def __new__(
        cls,
        store: Store,
        group: str = ...,
        *,
        compress_over: int | None = None,
        compression: str = ...,
        compression_level: int | None = None,
    ) -> Self: ...
    @property
    def group(self) -> str: ...
    @property
    def compression(self) -> tuple[str, int, int] | None:
        """``(codec, compress_over, level)`` when single sends are compressed, else None."""
    @property
    def closed(self) -> bool: ...
    def _mark_closed(self, reason: Literal["producer", "store", "fork"] = "producer") -> None:
        """Refuses every later send, with the error ``reason`` names (a graver reason wins)."""
    def _check_open(self) -> None:
        """Raises the error a send would raise once the producer or its store is closed."""
    def send(
        self,
        msg: Any,
        queue_id: int | None = None,
        *,
        sharding_key: str | bytes | None = None,
        selector: Callable[..., Any] | None = None,
        arg: Any = None,
    ) -> SendResult: ...
    def _send_pipelined(
        self, msg: Any, queue_id: int | None = None, *, sharding_key: str | bytes | None = None
    ) -> SendResult: ...
    def _send_half(self, msg: Any, txn_id: str, queue_id: int | None = None) -> SendResult: ...
    def _send_halves(self, msgs: list[Any], txn_id: str, queues: list[int | None] | None = None) -> int: ...
    def send_batch(
        self, msgs: Sequence[Any], topic: str | None = None, queue_id: int | None = None
    ) -> SendBatchResult: ...

@final
class ManualClock:
    """A clock that moves only when told to (mqlite.testing)."""
    def __new__(cls, start_ms: int) -> ManualClock: ...
    @property
    def now_ms(self) -> int: ...
    def set_ms(self, ms: int) -> None: ...
    def advance_ms(self, ms: int) -> None: ...

@final
class Store:
    """An open store (a directory, or ":memory:")."""
    def __new__(
        cls,
        path: str,
        *,
        read_only: bool = False,
        exclusive: bool = False,
        wait: float | None = None,
        flush: str | None = None,
        flush_interval_ms: int | None = None,
        sync_flush_timeout_ms: int | None = None,
        commit_log_file_size: int | None = None,
        consume_queue_file_units: int | None = None,
        max_message_size: int | None = None,
        auto_create_topics: bool | None = None,
        default_queues: int | None = None,
        file_mode: int | None = None,
        dir_mode: int | None = None,
        retention_hours: float | None = None,
        max_mapped_files: int | None = None,
        delay_levels: str | None = None,
        timer_max_delay_hours: float | None = None,
        timer_catchup_rate: int | None = None,
        disk_force_clean_ratio: float | None = None,
        index_enabled: bool | None = None,
        index_hash_slots: int | None = None,
        clock: ManualClock | None = None,
    ) -> Store: ...
    @property
    def path(self) -> str: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def default_queues(self) -> int: ...
    @property
    def auto_create_topics(self) -> bool: ...
    @property
    def flush_mode(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def producer(self, group: str = ...) -> Producer: ...
    def create_topic(
        self, topic: str, queues: int = ..., *, perm: int = ..., order: bool = False, exist_ok: bool = True
    ) -> None: ...
    def create_topics(
        self,
        topics: Sequence[str],
        queues: int = ...,
        *,
        perm: int = ...,
        order: bool = False,
        exist_ok: bool = True,
    ) -> list[str]: ...
    def update_topic(
        self,
        topic: str,
        queues: int | None = None,
        *,
        read_queues: int | None = None,
        write_queues: int | None = None,
        perm: int | None = None,
        order: bool | None = None,
    ) -> dict[str, Any]: ...
    def delete_topic(self, topic: str) -> None: ...
    def topics(self) -> list[dict[str, Any]]: ...
    def queue_count(self, topic: str) -> int: ...
    def consumer_queue_count(self, topic: str) -> int: ...
    def offsets(self, topic: str, queue_id: int) -> tuple[int, int]: ...
    def read(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int = ...,
        tags: Sequence[str] | None = None,
    ) -> GetResult: ...
    def get(self, msg_id: str) -> MessageExt: ...
    def find_by_key(
        self, topic: str, key: str, begin_ms: int, end_ms: int, limit: int
    ) -> tuple[list[MessageExt], bool, dict[str, Any]]: ...
    def index_status(self) -> dict[str, Any]: ...
    def get_by_offset(self, commit_log_offset: int) -> MessageExt: ...
    def send_back(
        self,
        group: str,
        commit_log_offset: int,
        delay_level: int,
        max_reconsume_times: int,
        error_type: str | None = None,
        error: str | None = None,
    ) -> tuple[str, bool, int, int]: ...
    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...
    def wait_for(self, queues: Sequence[tuple[str, int, int]], timeout: float | None) -> bool: ...
    def poll_cursors(
        self,
        cursors: list[QueueCursor],
        max_messages: int,
        timeout: float | None,
        lock: Any,
        on_error: Callable[[QueueCursor], object] | None = None,
        on_skip: Callable[[QueueCursor, int, int], object] | None = None,
        *,
        max_bytes: int | None = None,
        oversized_first: bool = True,
        on_full: Callable[[QueueCursor], object] | None = None,
        start: int = 0,
    ) -> list[MessageExt]: ...
    def deliver_due(self) -> int: ...
    def delete_expired_files(self) -> int: ...
    def _take_deleted_files(self) -> tuple[list[tuple[str, int, int, int, str]], int]: ...
    def pending_timers(self) -> int: ...
    def _txn_end(
        self, ids: list[str], commit: bool, progress: tuple[str, str] | None = None
    ) -> bool: ...
    def _txn_claim(
        self, group: str, timeout_ms: int, interval_ms: int, max_checks: int, limit: int
    ) -> list[tuple[str, int]]: ...
    def _txn_list(
        self, group: str | None = None, all: bool = False
    ) -> list[tuple[str, str, str, list[int], int, int, int]]: ...
    def _txn_progress(self, key: str) -> str | None: ...
    def _change_timers(
        self,
        msg_id: str | None,
        key: str | None,
        topic: str | None,
        due_ms: int | None = None,
        delay_ms: int | None = None,
    ) -> list[tuple[str | None, str, tuple[str, str, int, list[str], str | None, str | None, int, str] | None]]:
        """(id, outcome, (id, topic, queue_id, keys, unique_id, tags, due_ms, offset_msg_id))
        per timer matched."""
    def _list_timers(
        self,
        topic: str | None,
        key: str | None,
        due_from: int | None,
        due_to: int | None,
        limit: int,
    ) -> list[tuple[str, str, int, list[str], str | None, str | None, int, str]]: ...
    def wait_durable(self, end: int) -> bool: ...
    def flush(self) -> None: ...
    def stats(self) -> dict[str, Any]: ...

@final
class PollToken:
    """Which of a push consumer's threads polls, with take-over of a holder stalled for
    ``stall`` seconds in a listener call (the stall watch runs without the GIL)."""
    def __new__(cls, stall: float) -> Self: ...
    def acquire(self, keep_waiting: Callable[[], object]) -> bool: ...
    def wake_all(self) -> None: ...
    def busy(self) -> None: ...
    def idle(self) -> bool: ...
    def release(self) -> None: ...
    def held(self) -> bool: ...
    def waiters(self) -> int: ...
    def watch_looks(self) -> int: ...
