"""The generated documentation pages are what their generators make of the committed sources.

docs/configuration.md comes from mqlite.config (scripts/gen_config_docs.py), docs/benchmarks.md
and its images from benches/results (benches/python/docs_page.py). A page edited by hand, an
option added to a signature without its row, or results committed without their page fail here.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import stat
import sys
from pathlib import Path
from types import ModuleType

import pytest

import mqlite
from mqlite.config import (
    OPEN_OPTIONS,
    PRODUCER_OPTIONS,
    PULL_CONSUMER_OPTIONS,
    PUSH_CONSUMER_OPTIONS,
    store_options,
)
from mqlite.errors import InvalidConfigError

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def config_page() -> ModuleType:
    return _load(ROOT / "scripts" / "gen_config_docs.py", "gen_config_docs")


@pytest.fixture(scope="module")
def bench_page() -> ModuleType:
    sys.path.insert(0, str(ROOT / "benches" / "python"))
    try:
        return _load(ROOT / "benches" / "python" / "docs_page.py", "docs_page")
    finally:
        sys.path.remove(str(ROOT / "benches" / "python"))


def test_configuration_page_is_generated(config_page: ModuleType) -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert page == config_page.render(), "run: python scripts/gen_config_docs.py"


def test_benchmarks_page_and_images_are_generated(bench_page: ModuleType) -> None:
    assert bench_page.stale() == [], "run: python benches/python/docs_page.py"


def test_benchmarks_page_has_every_table(bench_page: ModuleType) -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    for heading in ("## Throughput, 128 B bodies", "## Throughput, 1 KiB bodies",
                    '## flush="sync"', "## End-to-end latency", "## RSS while consuming",
                    "## Compression", "## Rust engine: appends (criterion)",
                    "## Rust engine: reads", "## Method", "## Reproduce"):
        assert heading in page
    data, _ = bench_page.load()
    assert data["date"].split()[0] in page
    for _, image in bench_page.IMAGES:
        assert f"]({image})" in page


def test_every_open_option_has_a_row_in_its_order() -> None:
    params = inspect.signature(mqlite.Store.__init__).parameters.values()
    keyword = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert keyword == [o.name for o in OPEN_OPTIONS]


@pytest.mark.parametrize(
    ("func", "meanings", "skip"),
    [
        (mqlite.Producer.__new__, PRODUCER_OPTIONS, {"cls", "store"}),
        (mqlite.PullConsumer.__init__, PULL_CONSUMER_OPTIONS, {"self", "store", "group"}),
        (mqlite.PushConsumer.__init__, PUSH_CONSUMER_OPTIONS, {"self", "store", "group"}),
    ],
    ids=["producer", "pull_consumer", "push_consumer"],
)
def test_every_client_option_has_a_meaning(func: object, meanings: dict[str, str],
                                           skip: set[str]) -> None:
    params = [n for n in inspect.signature(func).parameters if n not in skip]  # type: ignore[arg-type]
    assert sorted(params) == sorted(meanings)


def test_documented_defaults_are_the_cores(tmp_path: Path) -> None:
    """What an open with no options gets is what the table says it gets."""
    defaults = {o.name: o.default for o in OPEN_OPTIONS}
    umask = os.umask(0)
    os.umask(umask)
    with mqlite.open(tmp_path / "s") as store:
        stats = store.stats()
        for name in ("commit_log_file_size", "consume_queue_file_units", "max_message_size"):
            assert stats[name] == defaults[name], name
        assert stats["flush_mode"] == defaults["flush"]
        assert store.read_only is defaults["read_only"]
        core = store._core
        assert core.default_queues == defaults["default_queues"]
        assert core.auto_create_topics is defaults["auto_create_topics"]
        store.producer().send(mqlite.Message("t", b"x"))
        assert core.queue_count("t") == defaults["default_queues"]
    log = tmp_path / "s" / "commitlog"
    assert stat.S_IMODE(log.stat().st_mode) == defaults["dir_mode"] & ~umask
    first = next(log.iterdir())
    assert stat.S_IMODE(first.stat().st_mode) == defaults["file_mode"] & ~umask


@pytest.mark.parametrize("option", OPEN_OPTIONS, ids=lambda o: o.name)
def test_open_checks_each_option_by_its_row(option: object) -> None:
    """store_options takes its checks from the table: a wrong type is refused, naming the field."""
    name = option.name  # type: ignore[attr-defined]
    with pytest.raises(InvalidConfigError) as err:
        store_options({name: object()})
    assert err.value.field == name
    assert store_options({name: None}) == {}
    if option.default is not None:  # type: ignore[attr-defined]
        assert store_options({name: option.default}) == {name: option.default}  # type: ignore[attr-defined]


def test_unknown_option_is_refused() -> None:
    with pytest.raises(InvalidConfigError) as err:
        store_options({"flush_interval": 5})
    assert err.value.field == "flush_interval"
