"""The ``mqlite`` command line (docs/cli.md is its reference).

One module per command group; each has ``add(subparsers, formatter)``. Help is formatted by
rich-argparse, and rich is imported only when something is printed through it, so that
``mqlite --help`` and the argument parsing stay cheap. Exit codes are in ``_common``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from mqlite.cli import bench, consume, demo, group, msg, send, store, top, topic, txn
from mqlite.cli._common import ERROR, INTERRUPTED, CLIError

__all__ = ["main"]


def _formatter(prog: str) -> argparse.HelpFormatter:
    """rich-argparse's help formatter, imported when help or usage is first formatted."""
    from rich_argparse import RichHelpFormatter

    formatter: argparse.HelpFormatter = RichHelpFormatter(prog)
    return formatter


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mqlite", formatter_class=_formatter,
        description="Inspect, feed and administer mqlite stores. Exit codes: 0 ok, 1 error, "
                    "2 usage, 3 not found (store, topic, group, message, transaction), 4 damage found, "
                    "130 interrupted.",
    )
    sub = p.add_subparsers(dest="command", required=True, prog="mqlite", metavar="COMMAND")
    for module in (topic, send, consume, msg, group, store, txn, bench, top, demo):
        module.add(sub, _formatter)
    return p


def _fail(message: str, status: int) -> int:
    print(f"mqlite: error: {message}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (docs/cli.md, "Exit codes")."""
    from mqlite.errors import MQError

    try:
        args = _parser().parse_args(argv)
        status: int = args.func(args)
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, without a second error at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return ERROR
    except CLIError as exc:
        return _fail(str(exc), exc.status)
    except MQError as exc:
        return _fail(f"{exc} [{exc.code}]", _status(exc))
    except OSError as exc:
        # A file the command was asked to write or read (``dlq export -o``), not the store.
        return _fail(str(exc), ERROR)
    return status


def _status(exc: Any) -> int:
    from mqlite.cli._common import NOT_FOUND
    from mqlite.errors import (
        ConsumerGroupNotFoundError,
        MessageNotFoundError,
        StoreNotFoundError,
        TopicNotFoundError,
        TransactionNotFoundError,
    )

    found = (ConsumerGroupNotFoundError, MessageNotFoundError, StoreNotFoundError, TopicNotFoundError,
             TransactionNotFoundError)
    return NOT_FOUND if isinstance(exc, found) else ERROR
