"""Ctrl-C held back over a short critical section: a consumer prints a message and records its
position as one step, so the offsets it commits on the way out always match its output."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Held:
    """While ``held()`` is active a SIGINT is remembered and raised as KeyboardInterrupt when
    the section ends; elsewhere it is raised at once. Installed only on the main thread and only
    over Python's own handler (an ignored SIGINT, as in a background job, stays ignored)."""

    def __init__(self) -> None:
        self._depth = 0
        self._pending = False

    def _handler(self, _signum: int, _frame: FrameType | None) -> None:
        if self._depth:
            self._pending = True
        else:
            raise KeyboardInterrupt

    @contextmanager
    def installed(self) -> Iterator[Held]:
        own = (threading.current_thread() is threading.main_thread()
               and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        if own:
            signal.signal(signal.SIGINT, self._handler)
        try:
            yield self
        finally:
            if own:
                signal.signal(signal.SIGINT, signal.default_int_handler)

    @contextmanager
    def held(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth and self._pending:
                self._pending = False
                raise KeyboardInterrupt
