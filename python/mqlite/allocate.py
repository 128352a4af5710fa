"""Queue allocation strategies for clustering consumer groups (RocketMQ's AllocateMessageQueue*)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from mqlite.message import MessageQueue

__all__ = [
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueStrategy",
]


@runtime_checkable
class AllocateMessageQueueStrategy(Protocol):
    """Chooses this client's queues from the sorted queue list and the sorted live client ids.

    Every member runs the same strategy on the same inputs, so the results must be deterministic
    and must partition the queues.
    """

    def allocate(
        self, group: str, client_id: str, mqs: Sequence[MessageQueue], client_ids: Sequence[str]
    ) -> list[MessageQueue]:
        """The queues ``client_id`` should own."""
        ...


def _index(client_id: str, client_ids: Sequence[str]) -> int:
    try:
        return list(client_ids).index(client_id)
    except ValueError:
        return -1


class AllocateMessageQueueAveragely:
    """Contiguous blocks; the first ``len(mqs) % len(cids)`` clients get one extra (the default)."""

    def allocate(
        self, group: str, client_id: str, mqs: Sequence[MessageQueue], client_ids: Sequence[str]
    ) -> list[MessageQueue]:
        """The queues ``client_id`` should own."""
        idx = _index(client_id, client_ids)
        if idx < 0 or not mqs:
            return []
        n, c = len(mqs), len(client_ids)
        mod = n % c
        if n <= c:
            avg = 1
        elif mod > 0 and idx < mod:
            avg = n // c + 1
        else:
            avg = n // c
        start = idx * avg if mod > 0 and idx < mod else idx * avg + mod
        size = min(avg, n - start)
        return list(mqs[start : start + max(size, 0)])

    def __repr__(self) -> str:
        return "AllocateMessageQueueAveragely()"


class AllocateMessageQueueAveragelyByCircle:
    """Round robin: client ``i`` gets queues ``i, i + len(cids), ...``."""

    def allocate(
        self, group: str, client_id: str, mqs: Sequence[MessageQueue], client_ids: Sequence[str]
    ) -> list[MessageQueue]:
        """The queues ``client_id`` should own."""
        idx = _index(client_id, client_ids)
        if idx < 0:
            return []
        return list(mqs[idx :: len(client_ids)])

    def __repr__(self) -> str:
        return "AllocateMessageQueueAveragelyByCircle()"
