"""The ``Store`` handle: open, admin, reads, and the fork guard."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal

from mqlite import _core
from mqlite._context import ClientContext
from mqlite.config import existing_sizes, fit_max_message, store_options
from mqlite.errors import (
    ConsumerGroupActiveError,
    IllegalArgumentError,
    StoreNotADirectoryError,
)
from mqlite.group import check_group, live_members
from mqlite.message import MessageExt, MessageQueue
from mqlite.offsets import QueueProgress, group_offsets, offset_key
from mqlite.producer import Compression, Producer
from mqlite.pull import PullConsumer
from mqlite.push import PushConsumer
from mqlite.topic import TopicConfig, parse_tags

_MAX_OFFSET = (1 << 63) - 1  # queue offsets are Java longs

__all__ = ["Store", "open"]

def _queue(mq: object) -> MessageQueue:
    if not isinstance(mq, MessageQueue):
        raise TypeError(f"expected a MessageQueue, not {type(mq).__name__}")
    return mq


class Store:
    """An open store: a directory, or ``":memory:"``. Thread-safe; one writer per path."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        read_only: bool = False,
        wait: float | None = None,
        flush: Literal["async", "sync"] = "async",
        flush_interval_ms: int | None = None,
        sync_flush_timeout_ms: int | None = None,
        commit_log_file_size: int | None = None,
        consume_queue_file_units: int | None = None,
        max_message_size: int | None = None,
        auto_create_topics: bool = True,
        default_queues: int | None = None,
        file_mode: int | None = None,
        dir_mode: int | None = None,
        retention_hours: float | None = None,
    ) -> None:
        options = store_options(
            {
                "read_only": read_only,
                "wait": wait,
                "flush": flush,
                "flush_interval_ms": flush_interval_ms,
                "sync_flush_timeout_ms": sync_flush_timeout_ms,
                "commit_log_file_size": commit_log_file_size,
                "consume_queue_file_units": consume_queue_file_units,
                "max_message_size": max_message_size,
                "auto_create_topics": auto_create_topics,
                "default_queues": default_queues,
                "file_mode": file_mode,
                "dir_mode": dir_mode,
                "retention_hours": retention_hours,
            }
        )
        where = os.fsdecode(os.fspath(path))
        if where != ":memory:" and os.path.exists(where) and not os.path.isdir(where):
            # Said the same way for both modes (a read-only open would look for files inside),
            # with errno and filename as the core's OSError subclasses carry them.
            err = StoreNotADirectoryError(f"{where!r} is not a directory")
            err.errno, err.strerror, err.filename = errno.ENOTDIR, str(err), where
            raise err
        # An existing store keeps the file sizes it was created with.
        options.update(existing_sizes(where, options))
        fit_max_message(options)
        self._core = _core.Store(where, **options)
        self._path = self._core.path
        self._read_only = self._core.read_only
        # Everything the store's clients use of it (they see nothing else).
        self._client_context = ClientContext(
            self._core,
            sync=flush == "sync",
            auto_create=auto_create_topics,
            default_queues=4 if default_queues is None else default_queues,
        )
        # The native store, or the error saying why it may not be used (closed, forked): bound
        # once, as every call goes through it.
        self._live: Callable[[], _core.Store] = self._client_context.live

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush and close; idempotent. In a forked child this only forgets the handle.

        Sends stop being accepted first (a later send raises StoreClosedError); then the async
        sends accepted before complete (in a ``flush="sync"`` store, once the disk holds them)
        and their callbacks run; then the store closes. A steady stream of sends from other
        threads therefore cannot hold close() up."""
        self._client_context.close()

    @property
    def closed(self) -> bool:
        """True after ``close()``, or in a child process that inherited the handle."""
        ctx = self._client_context
        return not ctx.ok or ctx.pid != os.getpid()

    @property
    def path(self) -> str:
        """The store directory, or ``":memory:"``."""
        return self._path

    @property
    def read_only(self) -> bool:
        """Whether the store was opened with ``read_only=True``."""
        return self._read_only

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("read-only" if self._read_only else "open")
        return f"<mqlite.Store {self._path!r} {state}>"

    # -- producing ------------------------------------------------------------------------------

    def producer(
        self,
        group: str = "DEFAULT_PRODUCER",
        *,
        compress_over: int | None = None,
        compression: Compression = "zlib",
        compression_level: int | None = None,
    ) -> Producer:
        """A producer in ``group``; sends go round robin over a topic's write queues.

        ``compress_over=N`` compresses single sends of ``N`` body bytes or more (see
        ``Producer``)."""
        return Producer(
            self,
            group,
            compress_over=compress_over,
            compression=compression,
            compression_level=compression_level,
        )

    # -- admin ----------------------------------------------------------------------------------

    def create_topic(
        self, name: str, queues: int = 4, *, perm: int = 6, order: bool = False, exist_ok: bool = True
    ) -> None:
        """Create a topic with ``queues`` read and write queues, 1 to 1024 (``perm``: 4 read,
        2 write)."""
        for field, v in (("queues", queues), ("perm", perm)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{field} must be an int, not {type(v).__name__}")
        if perm < 0:  # the core checks the upper bound; a negative one would not convert
            raise IllegalArgumentError(f"invalid perm: {perm} is not a 3-bit permission")
        self._live().create_topic(name, queues, perm=perm, order=order, exist_ok=exist_ok)

    def topics(self) -> list[TopicConfig]:
        """All topics, sorted by name. A read-only store re-reads ``config/topics.json`` here
        and raises ConfigFileError if neither it nor its ``.bak`` decodes."""
        configs = [TopicConfig.from_dict(d) for d in self._live().topics()]
        return sorted(configs, key=lambda t: t.name)

    def queues(self, topic: str) -> list[MessageQueue]:
        """The topic's message queues."""
        return [MessageQueue(topic, i) for i in range(self._live().queue_count(topic))]

    def offsets(self, mq: MessageQueue) -> tuple[int, int]:
        """``(min, max)`` queue offsets; ``max`` is the offset the next message will get."""
        mq = _queue(mq)
        return self._live().offsets(mq.topic, mq.queue_id)

    def offset_for_timestamp(self, mq: MessageQueue, ts: datetime | int) -> int:
        """The first queue offset whose store time is at or after ``ts`` (datetime or epoch ms)."""
        mq = _queue(mq)
        if isinstance(ts, datetime):
            ms = int(ts.timestamp() * 1000)
        elif isinstance(ts, int) and not isinstance(ts, bool):
            ms = ts
        else:
            raise TypeError(f"ts must be a datetime or int milliseconds, not {type(ts).__name__}")
        return self._live().offset_for_timestamp(mq.topic, mq.queue_id, ms)

    def flush(self) -> None:
        """Write dirty pages to disk now (after the files being created in the background, such
        as a new topic's queue files, are complete)."""
        self._live().flush()

    def delete_expired_files(self) -> int:
        """Delete every commit-log file last modified more than ``retention_hours`` ago now
        (oldest first, up to the first that is not expired, never the file being written) and
        the consume-queue files that only point into them. The writer also does this every 10
        seconds. Returns the number of commit-log files deleted."""
        return self._live().delete_expired_files()

    def stats(self) -> dict[str, Any]:
        """Counters and sizes, as plain data."""
        return self._live().stats()

    # -- reading --------------------------------------------------------------------------------

    def read_result(
        self,
        mq: MessageQueue,
        offset: int,
        max_messages: int = 32,
        *,
        tags: str | Sequence[str] | None = None,
    ) -> _core.GetResult:
        """Read from ``offset``; the result carries the status and ``next_offset``."""
        mq = _queue(mq)
        if isinstance(offset, int) and offset > _MAX_OFFSET:
            raise IllegalArgumentError(f"offset must be <= {_MAX_OFFSET}, got {offset}")
        return self._live().read(mq.topic, mq.queue_id, offset, max_messages, parse_tags(tags))

    def read(
        self,
        mq: MessageQueue,
        offset: int,
        max_messages: int = 32,
        *,
        tags: str | Sequence[str] | None = None,
    ) -> list[MessageExt]:
        """Up to ``max_messages`` messages from ``offset``, filtered by a tag expression."""
        return self.read_result(mq, offset, max_messages, tags=tags).messages

    def get(self, msg_id: str) -> MessageExt:
        """The message with this offset message id (``SendResult.offset_msg_id``)."""
        return self._live().get(msg_id)

    def get_by_offset(self, commit_log_offset: int) -> MessageExt:
        """The message stored at this commit-log offset."""
        return self._live().get_by_offset(commit_log_offset)

    def wait_for(
        self,
        positions: Mapping[MessageQueue, int] | Iterable[tuple[MessageQueue, int]],
        timeout: float | None = None,
    ) -> bool:
        """Block until a message exists at or beyond the given offset of any queue.

        Returns True when one does, False on timeout (``None`` waits forever). Closing the
        store ends the wait too, with True: check ``closed`` before reading. On the main thread
        Ctrl-C ends it with KeyboardInterrupt (within 0.1 s).
        """
        items = positions.items() if isinstance(positions, Mapping) else positions
        queues = [(_queue(mq).topic, mq.queue_id, offset) for mq, offset in items]
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))):
            raise TypeError(f"timeout must be a number or None, not {type(timeout).__name__}")
        if timeout is not None and not 0 <= timeout < float("inf"):  # also NaN
            raise IllegalArgumentError(f"timeout must be a finite number >= 0 or None, got {timeout!r}")
        return self._live().wait_for(queues, timeout)


    # -- consumers ------------------------------------------------------------------------------

    def pull_consumer(self, group: str, **options: Any) -> PullConsumer:
        """A ``PullConsumer`` in ``group``; see ``PullConsumer`` for the options."""
        return PullConsumer(self, group, **options)

    def push_consumer(self, group: str, **options: Any) -> PushConsumer:
        """A ``PushConsumer`` in ``group``; see ``PushConsumer`` for the options."""
        return PushConsumer(self, group, **options)

    def consumer_groups(self) -> list[str]:
        """The clustering groups with committed offsets in this store, sorted (RocketMQ's
        ``consumerOffset.json`` keys are ``topic@group``; a broadcasting consumer keeps its
        offsets to itself and is not listed)."""
        self._live()
        table = group_offsets(self._client_context.client_root()).load()
        return sorted({key.rpartition("@")[2] for key in table if "@" in key})

    def consumer_progress(self, group: str) -> list[QueueProgress]:
        """The clustering group's committed offset, max offset and lag per queue."""
        check_group(group)
        core = self._live()
        suffix = "@" + group
        out: list[QueueProgress] = []
        for key, queues in group_offsets(self._client_context.client_root()).load().items():
            if not key.endswith(suffix):
                continue
            topic = key[: -len(suffix)]
            for qid, committed in queues.items():
                out.append(QueueProgress(topic, qid, committed, core.offsets(topic, qid)[1]))
        return sorted(out, key=lambda p: (p.topic, p.queue_id))

    def reset_offset(
        self,
        group: str,
        topic: str,
        *,
        to: int | Literal["earliest", "latest"] | datetime,
        force: bool = False,
    ) -> dict[MessageQueue, int]:
        """Set the clustering group's offsets of every queue of ``topic``.

        ``to`` is an offset (clamped to each queue's range), ``"earliest"``, ``"latest"`` or a
        time. Live consumers of the group would overwrite the reset with their own positions, so
        this raises ConsumerGroupActiveError while any is subscribed, unless ``force``.
        """
        check_group(group)
        core = self._live()
        root = self._client_context.client_root()
        alive = live_members(root, group, topic)
        if alive and not force:
            raise ConsumerGroupActiveError(
                f"group {group!r} has {len(alive)} live consumer(s) of {topic!r}: "
                f"{', '.join(alive)}; stop them or pass force=True"
            )
        result: dict[MessageQueue, int] = {}
        for mq in self.queues(topic):
            low, high = core.offsets(topic, mq.queue_id)
            if to == "earliest":
                offset = low
            elif to == "latest":
                offset = high
            elif isinstance(to, datetime):
                offset = self.offset_for_timestamp(mq, to)
            elif isinstance(to, int) and not isinstance(to, bool):
                offset = min(max(to, low), high)
            else:
                raise IllegalArgumentError(
                    f"to must be an int offset, 'earliest', 'latest' or a datetime, got {to!r}"
                )
            result[mq] = offset
        group_offsets(root, durable=self._client_context.durable).update(
            offset_key(topic, group), {mq.queue_id: o for mq, o in result.items()}, replace=True
        )
        return result


def open(path: str | os.PathLike[str], **config: Any) -> Store:  # noqa: A001 - mirrors sqlite3.connect
    """Open (or create) the store at ``path``; see ``Store`` for the options."""
    return Store(path, **config)
