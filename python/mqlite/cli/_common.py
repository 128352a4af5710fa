"""What every command shares: exit codes, the typed command-line error, opening a store by path,
and printing (JSON, or rich tables imported only when a table is printed)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mqlite.store import Store

# Exit codes scripts can rely on (docs/cli.md, "Exit codes").
OK = 0
ERROR = 1
USAGE = 2  # argparse's own code for a bad command line
NOT_FOUND = 3  # an unknown topic, group, message, transaction or store
DAMAGED = 4  # `store verify` found damage (reserved for verify)
INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it


class CLIError(Exception):
    """A failure the command line reports on one line and exits with ``status`` for."""

    def __init__(self, message: str, status: int = ERROR) -> None:
        super().__init__(message)
        self.status = status


class NotFound(CLIError):
    """A named thing (topic, group, message) that the store does not have."""

    def __init__(self, message: str) -> None:
        super().__init__(message, NOT_FOUND)


def open_store(path: str, *, write: bool = False, create: bool = False) -> Store:
    """The store at ``path``: read-only unless the command writes. A missing path or a
    directory holding no store is a NotFound unless ``create`` (only commands that make a
    store, such as ``topic create``, pass it)."""
    from mqlite.store import Store

    if not create:
        if not os.path.exists(path):
            raise NotFound(f"no store at {path!r}")
        if os.path.isdir(path) and not any(
            os.path.isdir(os.path.join(path, d)) for d in ("commitlog", "config", "consumequeue")
        ):
            raise NotFound(f"{path!r} holds no mqlite store")
    return Store(path, read_only=not write)


def require_topic(store: Store, topic: str) -> None:
    """Raise NotFound unless ``topic`` exists (its name is checked first: a bad name is an
    InvalidTopicError)."""
    from mqlite.topic import check_topic

    check_topic(topic)
    if topic not in {t.name for t in store.topics()}:
        raise NotFound(f"unknown topic {topic!r} in {store.path}")


def require_group(store: Store, group: str) -> None:
    """Raise NotFound unless ``group`` has committed offsets or a consumer of it ever joined
    (its name is checked first: a bad name is an InvalidGroupError)."""
    from mqlite.group import check_group

    check_group(group)
    root = store._client_context.client_root()
    known = store.consumer_groups()
    if group not in known and not (root / "consumer_groups" / group).is_dir():
        raise NotFound(f"unknown group {group!r}: it has no committed offsets and no consumer "
                       f"ever joined it (known: {', '.join(known) or 'none'})")


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def print_json_line(data: Any) -> None:
    sys.stdout.write(json.dumps(data, default=str) + "\n")
    sys.stdout.flush()


def print_table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*("" if cell is None else str(cell) for cell in row))
    Console().print(table)


def print_records(
    as_json: bool, title: str | None, columns: Sequence[str], rows: Sequence[dict[str, Any]]
) -> None:
    """``rows`` as a JSON array or as a table of ``columns``."""
    if as_json:
        print_json(list(rows))
    else:
        print_table(title, columns, [[r.get(c) for c in columns] for r in rows])
