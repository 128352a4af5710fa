#!/usr/bin/env python3
"""Start time of the ``mqlite`` command line.

Runs each command --runs times in a fresh interpreter (``python -m mqlite ...``) and reports the
median and best wall time in milliseconds, beside the floors: an empty interpreter
(``python -c pass``), ``import mqlite`` (the package, its native extension included) and
``import rich_argparse``. ``mqlite --help`` pays the interpreter, ``import mqlite`` (the command
line is a subpackage of it) and rich-argparse's help formatting; a command's parsing alone does
not import rich.

    python benches/python/cli_startup.py --runs 20 [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

CASES = {
    "python -c pass": ["-c", "pass"],
    "import rich_argparse": ["-c", "import rich_argparse"],
    "import mqlite": ["-c", "import mqlite"],
    "import mqlite.cli": ["-c", "import mqlite.cli"],
    "mqlite --help": ["-m", "mqlite", "--help"],
    "mqlite consume --help": ["-m", "mqlite", "consume", "--help"],
}


def measure(args: list[str], runs: int) -> dict[str, float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, *args], stdout=subprocess.DEVNULL, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return {"median_ms": round(statistics.median(times), 1), "best_ms": round(min(times), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {name: measure(argv, args.runs) for name, argv in CASES.items()}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, r in results.items():
        print(f"{name:24} median {r['median_ms']:7.1f} ms   best {r['best_ms']:7.1f} ms")


if __name__ == "__main__":
    main()
