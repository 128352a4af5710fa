"""The ``Producer``: a thin, fast wrapper over the Rust producer."""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING

from mqlite import _core
from mqlite.errors import MQError, StoreClosedError
from mqlite.message import Message, SendBatchResult, SendResult

if TYPE_CHECKING:
    from mqlite.store import Store

__all__ = ["Producer"]


class Producer:
    """Sends messages to a store; get one from ``Store.producer()``."""

    __slots__ = ("_ok", "_p", "_store", "__weakref__")

    def __init__(self, store: Store, core: _core.Producer) -> None:
        self._store = store
        self._p = core
        self._ok = True

    @property
    def group(self) -> str:
        """The producer group name."""
        return self._p.group

    @property
    def closed(self) -> bool:
        """True after ``close()`` or once the store is closed."""
        return not self._ok

    def _dead(self) -> MQError:
        if not self._store._ok:
            return self._store._dead()
        return StoreClosedError(f"producer {self._p.group!r} is closed")

    def send(self, msg: Message, *, queue_id: int | None = None) -> SendResult:
        """Append one message; round robin over the topic's write queues unless ``queue_id``."""
        if not self._ok:
            raise self._dead()
        return self._p.send(msg, queue_id)

    def send_batch(
        self,
        msgs: Iterable[Message | bytes],
        *,
        topic: str | None = None,
        queue_id: int | None = None,
    ) -> SendBatchResult:
        """Append messages to one queue in one call, all or nothing.

        Items are ``Message`` objects of one topic, or bodies (``bytes``) sent to ``topic``.
        """
        if not self._ok:
            raise self._dead()
        items = msgs if isinstance(msgs, (list, tuple)) else list(msgs)
        return self._p.send_batch(items, topic, queue_id)

    def close(self) -> None:
        """Stop using this producer; the store stays open. Idempotent."""
        self._ok = False

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<mqlite.Producer group={self._p.group!r} {state}>"
