"""Shared fixtures: stores on disk and in memory, and a runner for child Python processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from typing import Any
from pathlib import Path

import pytest
from hypothesis import settings

import mqlite

# Seeds: a Hypothesis failure prints its falsifying example and a @reproduce_failure blob that
# replays it exactly (every other random source in the tests is seeded, and prints its seed).
settings.register_profile("mqlite", print_blob=True)
settings.load_profile("mqlite")

@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One Spark session for every test of the run (its start-up costs seconds): local[2]
    with up to 3 attempts per task (local[2,3]), so a task that fails once is retried as on a
    cluster. Tests that use it skip themselves when pyspark is not installed."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("mqlite-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "512m")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(store_path: Path) -> Iterator[mqlite.Store]:
    s = mqlite.open(store_path)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def mem_store() -> Iterator[mqlite.Store]:
    s = mqlite.open(":memory:")
    try:
        yield s
    finally:
        s.close()


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    here = str(Path(mqlite.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture
def run_py() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run a Python script in a fresh interpreter (never fork); returns the completed process."""

    def run(script: str, *args: object, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
            capture_output=True, text=True, timeout=timeout, env=_child_env(), check=False,
        )

    return run


@pytest.fixture
def spawn_py() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start a Python script in a fresh interpreter with line-buffered pipes; killed at teardown."""
    procs: list[subprocess.Popen[str]] = []

    def spawn(script: str, *args: object) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-u", "-c", textwrap.dedent(script), *map(str, args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, bufsize=1, env=_child_env(),
        )
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


# Markers of tiers that run only on demand, with the variable that turns each on.
_ON_DEMAND = {"soak": "MQLITE_SOAK", "perf": "MQLITE_PERF"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Soak and perf tests run only with ``MQLITE_SOAK=1`` / ``MQLITE_PERF=1`` or when their
    marker is named in ``-m`` (``-m "not soak"`` names it too, and deselects them anyway)."""
    selected = config.getoption("-m") or ""
    for marker, variable in _ON_DEMAND.items():
        if os.environ.get(variable) == "1" or marker in selected:
            continue
        skip = pytest.mark.skip(reason=f"{marker} test: set {variable}=1 or use -m {marker}")
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)
