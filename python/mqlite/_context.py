"""What a store's clients (producers, consumers, the asyncio wrappers) need of it.

A ``ClientContext`` is made by ``Store`` and handed to every client it makes; a client built
directly (``PullConsumer(store, ...)``) takes it with ``context_of(store)``. It holds the native
handle and the store's liveness (closed, used after fork), the client root (where offsets and
group locks live), the completion thread of async sends and the topic policy (auto-creation).
Clients use nothing else of the store, so this module imports no client and no ``Store``: the
store imports its clients, never the reverse.

Fork safety: a fork marks every open context dead in the child (``os.register_at_fork``), and
the native handles it inherited are kept alive there so that their destructors never run in a
process that does not own them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Protocol

from mqlite import _core
from mqlite._completion import Completer
from mqlite._files import store_io
from mqlite.errors import MQError, StoreClosedError, StoreUsedAfterForkError, TopicNotFoundError

__all__ = ["ClientContext", "HasClientContext", "context_of"]

_OPEN: weakref.WeakSet[ClientContext] = weakref.WeakSet()
# Native handles inherited by a forked child: kept alive so their destructors never run there.
_INHERITED: list[_core.Store] = []


def _after_fork_in_child() -> None:
    for ctx in list(_OPEN):
        ctx._mark_forked()
        if ctx._completer is not None:
            ctx._completer.after_fork(str(ctx.dead()))
    _OPEN.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class ClientContext:
    """The part of an open store its clients use. Thread-safe."""

    __slots__ = (
        "core", "path", "pid", "durable", "auto_create", "default_queues",
        "_ok", "_forked", "_sync", "_completer", "_lock", "_scratch", "_producers",
        "__weakref__",
    )

    def __init__(self, core: _core.Store, *, sync: bool, auto_create: bool, default_queues: int) -> None:
        self.core = core
        """The native store. Clients go through ``live()``, which checks that it is usable."""
        self.path: str = core.path
        self.pid = os.getpid()
        self.durable = self.path != ":memory:"
        """Whether client files (offsets, group locks) are made durable with fsync."""
        self.auto_create = auto_create
        self.default_queues = default_queues
        self._ok = True
        self._forked = False
        # Async sends of a sync-flush store wait for the disk on the completion thread.
        self._sync = sync
        self._completer: Completer | None = None
        self._lock = threading.Lock()  # guards the lazily made completer and scratch directory
        self._scratch: Path | None = None
        # Producers are native objects: they are told when the store dies (``_mark_closed``).
        self._producers: weakref.WeakSet[_core.Producer] = weakref.WeakSet()
        _OPEN.add(self)

    # -- liveness -------------------------------------------------------------------------------

    @property
    def ok(self) -> bool:
        """False once the store is closed, or in a forked child."""
        return self._ok

    def live(self) -> _core.Store:
        """The native store; the error of ``dead()`` once it may not be used."""
        # A fork marks every open context dead in the child (register_at_fork), so no getpid().
        if self._ok:
            return self.core
        raise self.dead()

    def dead(self) -> MQError:
        """Why the store may not be used: closed, or opened in another process."""
        if self.pid != os.getpid() and not self._forked:
            self._mark_forked()
        if self._forked:
            return StoreUsedAfterForkError(
                f"store {self.path!r} was opened in process {self.pid}; "
                "open it again in the child (use the 'spawn' start method)"
            )
        return StoreClosedError(f"store {self.path!r} is closed")

    def add_producer(self, producer: _core.Producer) -> None:
        """Registers a producer to be closed when the store dies."""
        self._producers.add(producer)

    def _set_dead(self) -> None:
        self._ok = False
        for producer in list(self._producers):
            # Their sends then raise what ``dead()`` says (the producer builds the same error).
            producer._mark_closed("fork" if self._forked else "store")

    def _mark_forked(self) -> None:
        _INHERITED.append(self.core)
        self._forked = True
        self._set_dead()

    def close(self) -> None:
        """Refuses new calls, completes the async sends accepted before, closes the native store.
        Idempotent; in a forked child it only forgets the handle."""
        if not self._ok:
            return
        self._set_dead()
        _OPEN.discard(self)
        if self.pid != os.getpid():
            self._mark_forked()
            return
        if self._completer is not None:
            self._completer.stop()  # completes every send queued before it, then ends the thread
        self.core.close()

    # -- shared services ------------------------------------------------------------------------

    def completer(self) -> Completer:
        """The thread completing this store's async sends (started by the first one)."""
        completer = self._completer
        if completer is None:
            with self._lock:
                if self._completer is None:
                    ref = weakref.ref(self)
                    self._completer = Completer(
                        lambda: None if (c := ref()) is None else c.core, self._sync
                    )
                    # A store dropped without close() still ends the thread.
                    weakref.finalize(self, self._completer.stop, False)
                completer = self._completer
        return completer

    @property
    def started_completer(self) -> Completer | None:
        """The completion thread if an async send started it, else None."""
        return self._completer

    def client_root(self) -> Path:
        """Where consumer offsets and group locks live: the store directory, or for
        ``":memory:"`` a private temporary directory removed with the store and its clients."""
        if self.durable:
            return Path(self.path)
        with self._lock:
            if self._scratch is None:
                with store_io("create_dir", tempfile.gettempdir()):
                    self._scratch = Path(tempfile.mkdtemp(prefix="mqlite-memory-"))
                weakref.finalize(self, shutil.rmtree, self._scratch, True)
            return self._scratch

    def writable_queue_count(self, topic: str) -> int:
        """The topic's write queue count; an unknown topic is created with ``default_queues``
        when the store auto-creates topics (as the native send does), else TopicNotFoundError."""
        core = self.live()
        try:
            return core.queue_count(topic)
        except TopicNotFoundError:
            if not self.auto_create:
                raise
        core.create_topic(topic, self.default_queues, exist_ok=True)
        return core.queue_count(topic)


class HasClientContext(Protocol):
    """What clients are made from: a ``mqlite.Store``."""

    @property
    def _client_context(self) -> ClientContext: ...


def context_of(store: HasClientContext) -> ClientContext:
    """The context of ``store``; TypeError for anything that is not a store."""
    ctx = getattr(store, "_client_context", None)
    if not isinstance(ctx, ClientContext):
        raise TypeError(f"expected a mqlite.Store, not {type(store).__name__}")
    return ctx
