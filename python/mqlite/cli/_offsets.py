"""kcat-style start positions (``-o``): ``beginning``, ``end``, ``N`` (a queue offset), ``-N``
(N before the end) and ``@time`` (ISO 8601 or epoch milliseconds), resolved per queue."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from mqlite.message import MessageQueue
    from mqlite.store import Store

Kind = Literal["beginning", "end", "offset", "back", "time"]


@dataclass(frozen=True)
class OffsetSpec:
    """A parsed ``-o`` value; ``value`` is the offset, the count back, or epoch ms."""

    kind: Kind
    value: int = 0

    def resolve(self, store: Store, mq: MessageQueue) -> int:
        """The first queue offset to read, always within the queue's ``[min, max]``."""
        low, high = store.offsets(mq)
        if self.kind == "beginning":
            return low
        if self.kind == "end":
            return high
        if self.kind == "back":
            return max(low, high - self.value)
        if self.kind == "time":
            return store.offset_for_timestamp(mq, self.value)
        return min(max(low, self.value), high)


def parse_time(text: str) -> int:
    """Epoch milliseconds from digits, or from an ISO 8601 time (naive ones are local time)."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"bad time {text!r}: expected ISO 8601 (2026-01-31T12:00:00) or epoch milliseconds"
        ) from None
    return int(moment.timestamp() * 1000)


def parse_offset(text: str) -> OffsetSpec:
    """An argparse type: the ``-o`` value, or a one-line usage error naming what is accepted."""
    if text in ("beginning", "end"):
        return OffsetSpec(text)  # type: ignore[arg-type]  # narrowed by the test above
    if text.startswith("@"):
        return OffsetSpec("time", parse_time(text[1:]))
    try:
        n = int(text)
    except ValueError:
        n = None
    if n is None or (text.startswith("-") and n == 0):
        raise argparse.ArgumentTypeError(
            f"bad offset {text!r}: expected beginning, end, N, -N or @time"
        )
    return OffsetSpec("back", -n) if n < 0 else OffsetSpec("offset", n)


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n
