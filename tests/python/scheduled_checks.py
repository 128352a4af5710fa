"""Waiting for scheduled messages in the kill loops (test_crash_loop.py,
test_shared_kill_loop.py): what a store delivered to a topic, and a wait, on the store's
wake-ups, until every acknowledged message is there."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import TypeVar

import mqlite
from helpers import read_all
from mqlite import MessageQueue

Ident = TypeVar("Ident", bound=Hashable)


def delivered(store: mqlite.Store, topic: str, parse: Callable[[bytes], Ident],
              damaged: Callable[[mqlite.MessageExt, ValueError], None]) -> list[tuple[Ident, mqlite.MessageExt]]:
    """Every message of queue 0 of ``topic`` (none if it is not made yet) with its identity
    (``parse`` of its body); a body ``parse`` refuses goes to ``damaged``."""
    if topic not in {t.name for t in store.topics()}:
        return []
    out = []
    for m in read_all(store, MessageQueue(topic, 0)):
        try:
            out.append((parse(m.body), m))
        except ValueError as exc:
            damaged(m, exc)
    return out


def wait_delivered(store: mqlite.Store, want: dict[str, set[Ident]], deadline: float,
                   scan: Callable[[], dict[str, set[Ident]]]) -> dict[str, set[Ident]]:
    """Runs ``scan`` (the identities found per topic) until every one of ``want`` is found or
    the monotonic ``deadline`` passed; between scans it waits for a new message in a topic
    still missing some. Returns what is missing."""
    while True:
        # Each topic's end before the scan: a message arriving after it ends the wait. (A
        # topic not made yet, as a retry topic before its first retry, ends at 0.)
        made = {t.name for t in store.topics()}
        ends = {t: store.offsets(MessageQueue(t, 0))[1] if t in made else 0 for t in want}
        found = scan()
        missing = {t: want[t] - found.get(t, set()) for t in want}
        if not any(missing.values()) or time.monotonic() > deadline:
            return missing
        store.wait_for({MessageQueue(t, 0): ends[t] for t, m in missing.items() if m},
                       timeout=max(0.0, deadline - time.monotonic()))
