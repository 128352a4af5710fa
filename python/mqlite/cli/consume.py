"""``mqlite consume`` and ``mqlite tail``: print a topic's messages from a kcat-style start
position, optionally following new ones (woken by the store) and, with ``-g``, committing the
offsets of what was printed as a consumer of that group.

Invariant: a group's committed offset of a queue is never past a message that was not printed
(it is one past the last printed one), so a consume cut short by ``-n``, Ctrl-C or a closed
pipe resumes exactly where the output stopped."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mqlite.cli._common import OK, open_store, print_json_line, require_topic
from mqlite.cli._format import DEFAULT_FORMAT, as_dict, compile_format, render
from mqlite.cli._interrupt import Held
from mqlite.cli._offsets import OffsetSpec, parse_offset, positive

if TYPE_CHECKING:
    from mqlite.message import MessageExt, MessageQueue
    from mqlite.pull import PullConsumer
    from mqlite.store import Store

# The longest one wait for new messages lasts before the loop waits again (Ctrl-C ends a wait at
# once; the bound only keeps the loop's own checks going).
_WAIT_S = 1.0
_CHUNK = 64


def _emitter(args: argparse.Namespace) -> Callable[[MessageExt], None]:
    import sys

    if args.json:
        return lambda m: print_json_line(as_dict(m))
    pieces = args.format

    def emit(m: MessageExt) -> None:
        sys.stdout.write(render(pieces, m))
        sys.stdout.flush()

    return emit


def _queues(store: Store, args: argparse.Namespace) -> list[MessageQueue]:
    from mqlite.errors import InvalidQueueError
    from mqlite.message import MessageQueue

    require_topic(store, args.topic)
    queues = store.queues(args.topic)
    if args.queue is None:
        return queues
    if not 0 <= args.queue < len(queues):
        raise InvalidQueueError(f"topic {args.topic!r} has queues 0..{len(queues) - 1}, not {args.queue}")
    return [MessageQueue(args.topic, args.queue)]


class _Reader:
    """Reads queues from per-queue positions, up to per-queue and total limits."""

    def __init__(self, store: Store, positions: dict[MessageQueue, int], tags: str | None,
                 per_queue: int | None, total: int | None, emit: Callable[[MessageExt], None],
                 commit: Callable[[dict[MessageQueue, int]], None] | None) -> None:
        self.store, self.positions, self.tags = store, positions, tags
        self.left: dict[MessageQueue, int | None] = {mq: per_queue for mq in positions}
        self.total, self.emit, self.commit = total, emit, commit
        self.saved = dict(positions)
        self.interrupts = Held()

    def done(self) -> bool:
        return self.total == 0 or all(n == 0 for n in self.left.values())

    def drain(self) -> None:
        """Prints everything stored from the positions on (within the limits)."""
        for mq in self.positions:
            while not self.done() and self.left[mq] != 0:
                want = min(x for x in (_CHUNK, self.left[mq], self.total) if x is not None)
                start = self.positions[mq]
                got = self.store.read_result(mq, start, want, tags=self.tags)
                for m in got.messages:
                    with self.interrupts.held():
                        self.emit(m)
                        self.positions[mq] = m.queue_offset + 1
                # Past the records the tag filter passed over too.
                self.positions[mq] = max(self.positions[mq], got.next_offset)
                self._count(mq, len(got.messages))
                self.save()
                if self.positions[mq] <= start or self.positions[mq] >= got.max_offset:
                    break

    def save(self) -> None:
        """Commits the positions that moved since the last save (with a group)."""
        if self.commit is None:
            return
        moved = {mq: o for mq, o in self.positions.items() if self.saved.get(mq) != o}
        if moved:
            self.commit(moved)
            self.saved.update(moved)

    def _count(self, mq: MessageQueue, printed: int) -> None:
        n = self.left[mq]
        if n is not None:
            self.left[mq] = n - printed
        if self.total is not None:
            self.total -= printed

    def follow(self) -> None:
        """Prints new messages as they are stored until the limits are met (or Ctrl-C)."""
        self.left = dict.fromkeys(self.positions)
        while not self.done():
            if self.store.wait_for(dict(self.positions), timeout=_WAIT_S):
                self.drain()


def _run(args: argparse.Namespace, default: OffsetSpec, per_queue: int | None, total: int | None,
         *, from_group: bool) -> int:
    emit = _emitter(args)
    with open_store(args.path, write=args.group is not None) as store:
        queues = _queues(store, args)
        consumer: PullConsumer | None = None
        if args.group is not None:
            consumer = store.pull_consumer(args.group, auto_commit=False)
            consumer.assign(queues)
        try:
            group = consumer if from_group else None
            positions = {mq: _start(store, group, mq, args.offset, default) for mq in queues}
            reader = _Reader(store, positions, args.tags, per_queue, total, emit,
                             None if consumer is None else consumer.commit)
            try:
                with reader.interrupts.installed():
                    reader.drain()
                    if args.follow:
                        reader.follow()
            finally:
                # Ctrl-C or a closed pipe included: the group resumes after the last printed.
                reader.save()
        finally:
            if consumer is not None:
                consumer.close()
    return OK


def _start(store: Store, consumer: PullConsumer | None, mq: MessageQueue,
           spec: OffsetSpec | None, default: OffsetSpec) -> int:
    if spec is not None:
        return spec.resolve(store, mq)
    if consumer is not None:
        committed = consumer.committed(mq)
        if committed is not None:
            low, high = store.offsets(mq)
            return min(max(committed, low), high)
    return default.resolve(store, mq)


def _consume(args: argparse.Namespace) -> int:
    return _run(args, OffsetSpec("beginning"), None, args.count, from_group=True)


def _tail(args: argparse.Namespace) -> int:
    return _run(args, OffsetSpec("back", args.count), args.count, None, from_group=False)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="store directory")
    p.add_argument("topic", help="an existing topic")
    p.add_argument("-q", "--queue", type=int, default=None, help="one queue id (default: all)")
    p.add_argument("-o", "--offset", type=parse_offset, default=None,
                   help="start: beginning, end, N, -N (N before the end) or @TIME (ISO 8601 or epoch ms)")
    p.add_argument("-g", "--group", default=None,
                   help="consume as this group: start at its committed offsets, commit what is printed")
    p.add_argument("--tags", default=None, help="only messages matching this tag expression (a || b)")
    p.add_argument("-f", "--format", type=compile_format, default=compile_format(DEFAULT_FORMAT),
                   metavar="FMT", help="output format (tokens in docs/cli.md; default " + repr(DEFAULT_FORMAT).replace("%", "%%") + ")")
    p.add_argument("--json", action="store_true", help="one JSON object per message")
    p.add_argument("--follow", action="store_true", help="keep waiting for new messages (Ctrl-C ends)")


def add(sub: Any, fmt: Any) -> None:
    consume = sub.add_parser("consume", formatter_class=fmt,
                             help="print messages from a start position (default: the beginning, "
                                  "or the group's offsets)")
    _common(consume)
    consume.add_argument("-n", "--count", type=positive, default=None,
                         help="stop after this many messages in all")
    consume.set_defaults(func=_consume)

    tail = sub.add_parser("tail", formatter_class=fmt,
                          help="print the last messages of each queue (read-only without -g)")
    _common(tail)
    tail.add_argument("-n", "--count", type=positive, default=10,
                      help="messages per queue already stored (default 10)")
    tail.set_defaults(func=_tail)
