"""The mqlite exception tree.

The Rust extension raises these classes by name (``pyo3::import_exception!``), so the names are a
contract. This module must not import ``mqlite._core``.

``MQError``, ``MQClientError`` and ``StoreError`` are categories to catch; every other class is
raised by some call (``tests/python/test_errors_raised.py`` provokes each one).
"""

from __future__ import annotations

import warnings

__all__ = [
    "MQError",
    "MQClientError",
    "IllegalArgumentError",
    "InvalidTopicError",
    "InvalidQueueError",
    "InvalidMessageError",
    "MessageTooLargeError",
    "PropertiesTooLargeError",
    "InvalidBatchError",
    "InvalidConfigError",
    "InvalidGroupError",
    "FilterExpressionError",
    "IllegalStateError",
    "StoreClosedError",
    "StoreReadOnlyError",
    "IndexUnavailableError",
    "StoreUsedAfterForkError",
    "ClientClosedError",
    "ClientIdInUseError",
    "QueueNotAssignedError",
    "ConsumerGroupActiveError",
    "ConsumerGroupNotFoundError",
    "TopicNotFoundError",
    "TopicNotReadableError",
    "TopicNotWritableError",
    "MessageNotFoundError",
    "StoreError",
    "StoreLockedError",
    "StoreFullError",
    "StorePoisonedError",
    "CorruptedLogError",
    "ConfigFileError",
    "CompressionError",
    "StoreIOError",
    "StoreNotADirectoryError",
    "StoreNotFoundError",
    "OffsetOutOfRangeError",
    "TransactionError",
    "TransactionNotFoundError",
    "TransactionStateError",
]


class MQError(Exception):
    """Root of every mqlite error; ``code`` is a stable identifier, ``retriable`` a hint."""

    default_code: str = "MQ_ERROR"
    retriable: bool = False
    code: str

    def __init__(self, message: str = "", code: str | None = None) -> None:
        super().__init__(message)
        self.code = self.default_code if code is None else code

    @property
    def message(self) -> str:
        """The human-readable message."""
        return str(self.args[0]) if self.args else ""


class MQClientError(MQError):
    """The call was wrong: bad argument, wrong state, unknown name."""

    default_code = "CLIENT_ERROR"


class IllegalArgumentError(MQClientError, ValueError):
    """An argument has an invalid value."""

    default_code = "ILLEGAL_ARGUMENT"


class InvalidTopicError(IllegalArgumentError):
    """Topic name empty, too long, reserved or outside ``[A-Za-z0-9_-]``."""

    default_code = "INVALID_TOPIC"


class InvalidQueueError(IllegalArgumentError):
    """Queue id out of the topic's range."""

    default_code = "INVALID_QUEUE"


class InvalidMessageError(IllegalArgumentError):
    """Message body, tags, keys or properties are invalid."""

    default_code = "INVALID_MESSAGE"


class MessageTooLargeError(InvalidMessageError):
    """Body larger than ``max_message_size``."""

    default_code = "MESSAGE_TOO_LARGE"


class PropertiesTooLargeError(InvalidMessageError):
    """Encoded properties larger than 32,767 bytes."""

    default_code = "PROPERTIES_TOO_LARGE"


class InvalidBatchError(IllegalArgumentError):
    """Batch empty, mixing topics or too large."""

    default_code = "INVALID_BATCH"


class InvalidConfigError(IllegalArgumentError):
    """A store option has a wrong type or value. ``field`` names the option when one is to blame
    (empty otherwise). A file size given explicitly that differs from the one the store was
    created with also sets ``stored`` (the store's value) and ``given``; both are ``None``
    otherwise. Leave such an option unset: an existing store's file sizes are its own."""

    default_code = "INVALID_CONFIG"

    def __init__(
        self,
        message: str = "",
        code: str | None = None,
        *,
        field: str = "",
        stored: int | None = None,
        given: int | None = None,
    ) -> None:
        super().__init__(message, code)
        self.field = field
        self.stored = stored
        self.given = given


class InvalidGroupError(IllegalArgumentError):
    """Group name empty, longer than 120 characters or outside ``[%|A-Za-z0-9_-]``."""

    default_code = "INVALID_GROUP"


class FilterExpressionError(IllegalArgumentError):
    """A tag or SQL92 filter expression does not parse."""

    default_code = "FILTER_EXPRESSION"


class IllegalStateError(MQClientError, RuntimeError):
    """The object cannot do this now."""

    default_code = "ILLEGAL_STATE"


class StoreClosedError(IllegalStateError):
    """The store (or producer) was closed."""

    default_code = "STORE_CLOSED"


class StoreReadOnlyError(IllegalStateError):
    """A write on a store opened with ``read_only=True``."""

    default_code = "STORE_READ_ONLY"


class IndexUnavailableError(IllegalStateError):
    """A lookup by key (``Store.find_by_key``) on a store whose key index is off
    (``index_enabled=False``)."""

    default_code = "INDEX_UNAVAILABLE"


class StoreUsedAfterForkError(IllegalStateError):
    """A store opened in a parent process was used in a forked child."""

    default_code = "STORE_USED_AFTER_FORK"


class ClientClosedError(IllegalStateError):
    """A consumer or producer was used after ``close()`` / ``shutdown()``."""

    default_code = "CLIENT_CLOSED"


class ClientIdInUseError(IllegalStateError):
    """Another live consumer of the group already uses this ``client_id``."""

    default_code = "CLIENT_ID_IN_USE"


class QueueNotAssignedError(IllegalStateError, LookupError):
    """The queue is not (or no longer) assigned to this consumer: seek, commit, pause."""

    default_code = "QUEUE_NOT_ASSIGNED"


class ConsumerGroupActiveError(IllegalStateError):
    """An offset reset while live consumers of the group hold the topic's queues."""

    default_code = "CONSUMER_GROUP_ACTIVE"


class ConsumerGroupNotFoundError(MQClientError, LookupError):
    """A consumer group with no committed offsets and no consumer ever subscribed: most often a
    misspelled name (``reset_offset`` creates one only when asked)."""

    default_code = "SUBSCRIPTION_GROUP_NOT_EXIST"


class TopicNotFoundError(MQClientError, LookupError):
    """Unknown topic (and auto-creation is off)."""

    default_code = "TOPIC_NOT_FOUND"


class TopicNotWritableError(MQClientError):
    """The topic's permission forbids writes."""

    default_code = "TOPIC_NOT_WRITABLE"


class TopicNotReadableError(MQClientError):
    """The topic's permission forbids reads: a consumer group gets none of its queues."""

    default_code = "TOPIC_NOT_READABLE"


class MessageNotFoundError(MQClientError, LookupError):
    """No message with this id or commit-log offset."""

    default_code = "MESSAGE_NOT_FOUND"


class StoreError(MQError):
    """The store itself failed: I/O, lock, corruption."""

    default_code = "STORE_ERROR"


class StoreLockedError(StoreError):
    """Another writer holds the store's lock."""

    default_code = "STORE_LOCKED"
    retriable = True


class StoreFullError(StoreError, OSError):
    """No space left for a write; reads still work."""

    default_code = "STORE_FULL"


class StorePoisonedError(StoreError):
    """A flush failed earlier, or a background thread of the store panicked; reopen the store
    to write again. ``__cause__`` is the error of that flush (a ``StoreIOError`` with its
    ``errno`` and ``filename``), or an ``MQError`` with code ``SERVICE_FAILED`` naming the
    thread."""

    default_code = "STORE_POISONED"


class CorruptedLogError(StoreError):
    """A record failed its checks, or store files disagree with each other. ``path`` is the
    damaged file and ``offset`` the position in it (its name's start offset, in a commit-log
    file; -1 when unknown); ``decode_error`` is the record decoder's verdict (``"body CRC
    mismatch ..."``) when a record failed to decode, else None."""

    default_code = "CORRUPTED_LOG"

    def __init__(
        self,
        message: str = "",
        code: str | None = None,
        *,
        path: str = "",
        offset: int = -1,
        decode_error: str | None = None,
    ) -> None:
        super().__init__(message, code)
        self.path = path
        self.offset = offset
        self.decode_error = decode_error


class ConfigFileError(StoreError):
    """A metadata file under ``<store>/config`` (``topics.json``, ``consumerOffset.json``) does
    not decode, or a value in it has the wrong type or is out of range, and its ``.bak`` copy is
    no better. ``path`` is the file; ``field`` the JSON path of the bad value (empty when the
    file as a whole does not parse). Nothing is written over such a file: repair or remove the
    entry it names."""

    default_code = "CONFIG_FILE"

    def __init__(self, message: str = "", code: str | None = None, *, path: str = "", field: str = "") -> None:
        super().__init__(message, code)
        self.path = path
        self.field = field


class CompressionError(MQError):
    """A body could not be compressed, or a stored body flagged compressed does not decompress
    (damaged, an unknown codec, or more than 128 MiB once decompressed). The record itself is
    intact: ``MessageExt.raw_body`` still returns its stored bytes."""

    default_code = "COMPRESSION"


class StoreIOError(StoreError, OSError):
    """An operating-system I/O error; ``errno`` and ``filename`` are set when known."""

    default_code = "STORE_IO_ERROR"


class StoreNotFoundError(StoreIOError, FileNotFoundError):
    """A path the store needs does not exist (e.g. a read-only open of a missing store)."""

    default_code = "STORE_NOT_FOUND"


class StoreNotADirectoryError(StoreIOError, NotADirectoryError):
    """The store path (or a parent) is not a directory."""

    default_code = "STORE_NOT_A_DIRECTORY"


class OffsetOutOfRangeError(MQError, LookupError):
    """An offset outside the queue's ``[min, max]`` range."""

    default_code = "OFFSET_OUT_OF_RANGE"


class _MQTimeoutError(MQError, TimeoutError):
    """Deprecated: raised by nothing (a timeout is a status or a return value in mqlite)."""

    default_code = "TIMEOUT"


class _FlushDiskTimeoutError(_MQTimeoutError):
    """Deprecated: raised by nothing (an unconfirmed sync flush is ``SendStatus.FLUSH_DISK_TIMEOUT``)."""

    default_code = "FLUSH_DISK_TIMEOUT"


class TransactionError(MQClientError):
    """A transaction cannot be decided as asked (a category: see its subclasses)."""

    default_code = "TRANSACTION_ERROR"


class TransactionNotFoundError(TransactionError, LookupError):
    """No transaction of this id was ever prepared in the store."""

    default_code = "TRANSACTION_NOT_FOUND"


class TransactionStateError(TransactionError):
    """The transaction is already decided the other way (committed, rolled back, or discarded
    after its maximum checks); nothing was written."""

    default_code = "TRANSACTION_STATE"


# Names that nothing raises, kept importable (with a DeprecationWarning) so that code catching
# them still runs; they are not part of the tree any more.
_DEPRECATED: dict[str, type[MQError]] = {
    "MQTimeoutError": _MQTimeoutError,
    "FlushDiskTimeoutError": _FlushDiskTimeoutError,
}


def _deprecated(module: str, name: str) -> type[MQError]:
    """The deprecated class ``name`` (a DeprecationWarning naming ``module``), else AttributeError."""
    cls = _DEPRECATED.get(name)
    if cls is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(
        f"{module}.{name} is raised by nothing and will be removed; stop catching it",
        DeprecationWarning,
        stacklevel=3,
    )
    return cls


def __getattr__(name: str) -> type[MQError]:
    return _deprecated(__name__, name)
