"""The consumer examples run standalone and pass their own checks (quickstart.py is run by
test_cli.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

CASES = {
    "ordered.py": "every one in order: True",
    "consumer_group.py": "600 distinct jobs consumed",
    "broadcast.py": "cache-node-3 received 6 messages",
    "asyncio_app.py": "consumed 50 events",
    "sql_filter.py": "SQL amount > 30 AND region = 'eu'",
    "retry_and_dlq.py": "all 5 consumed: True; 4 went through the retry topic",
    "delayed.py": "auto-cancelled 2 unpaid orders: o2, o4",
    "transactions.py": "check-back committed order o3 and o2 was never published: True",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_runs(name: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), str(tmp_path / "store")],
        capture_output=True, text=True, timeout=90, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert CASES[name] in done.stdout


def test_every_example_is_covered() -> None:
    # spark_pipeline.py needs pyspark and a JVM: test_spark_sink.py runs it on its session.
    assert {p.name for p in EXAMPLES.glob("*.py")} == set(CASES) | {"quickstart.py", "spark_pipeline.py"}
