"""``mqlite demo``: the quickstart tour on a temporary store (``mqlite.demo``)."""

from __future__ import annotations

import argparse
from typing import Any

from mqlite.cli._common import OK, print_table


def _demo(args: argparse.Namespace) -> int:
    from mqlite.demo import run_demo

    print_table("mqlite demo", ["step", "result"], run_demo(args.dir))
    return OK


def add(sub: Any, fmt: Any) -> None:
    demo = sub.add_parser("demo", formatter_class=fmt, help="a tour on a temporary store")
    demo.add_argument("--dir", default=None, help="store directory to use instead")
    demo.set_defaults(func=_demo)
