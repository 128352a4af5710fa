"""The benchmark report runs end to end (tiny sizes) and writes what the README relies on, so
the bench code cannot rot: ``benches/python/report.py --smoke`` in a fresh interpreter."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import mqlite

# Runs the benchmark report and checks its timing: the perf tier.
pytestmark = pytest.mark.perf

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "benches" / "python" / "report.py"

BENCH_KEYS = {"raw_append", "raw_read", "send", "send_batch_bytes", "send_batch_msg", "read",
              "poll_256", "poll_default"}
PEER_KEYS = {f"{p}:{ph}" for p in ("mqlite", "mqlite-send", "raw-mmap", "simplequeue")
             for ph in ("produce", "consume")}
SYNC_KEYS = {"sync_raw_fdatasync", "sync_send_1", "sync_send_4", "sync_send_8", "sync_async_8x256",
             "sync_async_8x256_own"}
LATENCY_PEERS = {"simplequeue", "mqlite", "mqlite-push"}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any], float]:
    base = tmp_path_factory.mktemp("bench-smoke")
    out, work = base / "out", base / "work"
    env = dict(os.environ)
    here = str(Path(mqlite.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(REPORT), "--smoke", "--out", str(out), "--workdir", str(work)],
        capture_output=True, text=True, timeout=110, env=env, check=False,
    )
    elapsed = time.monotonic() - t0
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    return out, work, data, elapsed


def _positive(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


def _bench(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Runs ``benches/python/<script>`` with ``args`` in a fresh interpreter that imports this
    checkout's mqlite, and fails the test unless it exits 0 (its output's tails then say why)."""
    env = dict(os.environ)
    here = str(Path(mqlite.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, str(ROOT / "benches" / "python" / script), *args],
        capture_output=True, text=True, timeout=timeout, env=env, check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_smoke_is_fast(smoke: tuple[Path, Path, dict[str, Any], float]) -> None:
    assert smoke[3] < 30, f"report.py --smoke took {smoke[3]:.1f} s"


def test_run_metadata(smoke: tuple[Path, Path, dict[str, Any], float]) -> None:
    _, _, data, _ = smoke
    assert data["schema"] == 1 and data["profile"] == "smoke"
    assert data["command"].startswith("python benches/python/report.py --smoke")
    assert "--smoke" in data["argv"]
    m = data["machine"]
    assert _positive(m["cpus"]) and m["python"] and m["mqlite"] == mqlite.__version__
    assert data["config"]["sizes"] == [128, 1024]
    assert _positive(data["elapsed_s"])
    assert m["page_cache_prime"] == {}, "the smoke profile primes nothing"


def test_prime_page_cache_times_two_passes_and_leaves_nothing(tmp_path: Path) -> None:
    path = ROOT / "benches" / "python" / "bench.py"
    spec = importlib.util.spec_from_file_location("mq_bench", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    got = bench.prime_page_cache(str(tmp_path), 4)
    assert got["mib"] == 4
    assert _positive(got["first_pass_gbps"]) and _positive(got["second_pass_gbps"])
    assert list(tmp_path.iterdir()) == []
    assert bench.prime_page_cache(str(tmp_path), 0) == {}


def test_throughput_rows(smoke: tuple[Path, Path, dict[str, Any], float]) -> None:
    _, _, data, _ = smoke
    for size in ("128", "1024"):
        block = data["summary"]["throughput"][size]
        rows = {r["key"]: r for r in block["rows"]}
        assert BENCH_KEYS | PEER_KEYS <= set(rows), sorted(rows)
        for key in BENCH_KEYS | PEER_KEYS:
            r = rows[key]
            assert r["status"] == "ok", r
            assert _positive(r["msgs_per_s"]) and _positive(r["ratio_to_baseline"]), r
            assert r["process_crash"] and r["machine_crash"] and r["phase"] in ("produce",
                                                                                 "consume")
            assert not r.get("mismatches"), r
        assert rows["raw_append"]["baseline"] and rows["raw_read"]["baseline"]
        assert rows["raw_append"]["ratio_to_baseline"] == 1.0
        assert rows["send"]["mqlite"] and not rows["simplequeue:produce"]["mqlite"]
        assert _positive(block["reopen_ms"])


def test_sync_rows(smoke: tuple[Path, Path, dict[str, Any], float]) -> None:
    _, _, data, _ = smoke
    for size in ("128", "1024"):
        rows = {r["key"]: r for r in data["summary"]["sync"][size]}
        assert set(rows) == SYNC_KEYS
        for r in rows.values():
            assert _positive(r["msgs_per_s"]) and not r["errors"], r
            assert _positive(r["ratio_to_fdatasync"]), r
        assert rows["sync_send_8"]["machine_crash"] == "nothing acknowledged"
        assert rows["sync_async_8x256"]["window"] == 256
        assert rows["sync_async_8x256"]["threads"] == 8


def test_latency_rows(smoke: tuple[Path, Path, dict[str, Any], float]) -> None:
    _, _, data, _ = smoke
    m = data["config"]["lat_m"]
    for size in ("128", "1024"):
        block = data["summary"]["latency"][size]
        rows = {r["peer"]: r for r in block["rows"]}
        assert set(rows) == LATENCY_PEERS
        for r in rows.values():
            assert r["status"] == "ok" and not r["errors"], r
            assert r["samples"] == m
            assert 0 < r["p50_us"] <= r["p99_us"] <= r["p999_us"]
        assert set(block["ratios_to_simplequeue"]) == {"mqlite", "mqlite-push"}
        assert all(_positive(v) for v in block["ratios_to_simplequeue"]["mqlite"].values())


def test_rss(smoke: tuple[Path, Path, dict[str, Any], float]) -> None:
    _, _, data, _ = smoke
    rss = data["rss"]
    assert rss["status"] == "ok", rss
    assert rss["consumed_messages"] == rss["messages"] > 0
    assert 0 < rss["rss_start_kib"] <= rss["rss_max_kib"]
    assert len(rss["series"]) >= 2 and _positive(rss["rss_end_kib"])


def test_outputs(smoke: tuple[Path, Path, dict[str, Any], float]) -> None:
    out, work, _, _ = smoke
    tables = (out / "tables.md").read_text()
    for heading in ("## Throughput, 128 B bodies", "## Throughput, 1 KiB bodies",
                    "## End-to-end latency", "## RSS while consuming a big store",
                    "| workload | durability | msgs/s | ratio to baseline |"):
        assert heading in tables
    if importlib.util.find_spec("matplotlib") is not None:
        assert (out / "chart.png").stat().st_size > 0
        assert (out / "rss.png").stat().st_size > 0
    assert list(work.iterdir()) == [], "report.py left stores behind"


def test_scale_benchmark_quick_run_measures_every_row(tmp_path: Path) -> None:
    """``benches/python/scale.py --quick``: every store built, opened and read back, every
    figure the docs page shows present, the traffic read back whole, nothing left behind."""
    out, work = tmp_path / "out", tmp_path / "work"
    env = dict(os.environ)
    here = str(Path(mqlite.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    script = ROOT / "benches" / "python" / "scale.py"
    done = subprocess.run(
        [sys.executable, str(script), "--quick", "--out", str(out), "--workdir", str(work)],
        capture_output=True, text=True, timeout=600, env=env, check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads((out / "scale.json").read_text())
    assert data["profile"] == "quick" and data["command"] == "python benches/python/scale.py --quick"
    for key in ("topics", "files"):
        assert [r["n"] for r in data[key]] == data["config"][key]
        for row in data[key]:
            assert "error" not in row, row
            for figure in ("build_s", "open_ms", "rss_open_kib", "rss_read_kib", "disk_kib"):
                assert _positive(row[figure]), (figure, row)
            assert 0 <= row["fds_open"] <= row["fds_max"] and row["maps_max"] > 0, row
    assert [r["read"] for r in data["topics"]] == [4 * n for n in data["config"]["topics"]]
    for key in ("4", "many"):
        assert data["rates"][key]["complete"], data["rates"]
        assert all(_positive(x) for x in data["rates"][key]["send_per_s"])
    assert list(work.iterdir()) == [], "scale.py left stores behind"
    spec = importlib.util.spec_from_file_location("mq_scale", script)
    assert spec is not None and spec.loader is not None
    scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale)
    for section in scale.sections(data):
        assert all(len(row) == len(section["columns"]) for row in section["rows"]), section


def test_writers_benchmark_smoke_measures_every_row(tmp_path: Path) -> None:
    """``benches/python/writers.py --smoke``: every row (exclusive and shared, 1/2/4 producer
    processes, 4 with sync) measured with a rate and send latencies, nothing left behind."""
    out, work = tmp_path / "writers.json", tmp_path / "work"
    work.mkdir()
    done = _bench("writers.py", "--smoke", "--json", str(out), "--workdir", str(work))
    rows = json.loads(out.read_text())["rows"]
    assert sorted(rows) == sorted(["exclusive x1", "shared x1", "shared x2", "shared x4", "shared x4 sync"])
    for name, row in rows.items():
        for figure in ("rate", "ratio", "p50_us", "p99_us"):
            assert _positive(row[figure]), (name, figure, row)
    assert "| shared x4 |" in done.stdout
    assert list(work.iterdir()) == [], "writers.py left stores behind"


def test_timers_benchmark_quick_measures_every_workload_and_the_dlq_check_passes(tmp_path: Path) -> None:
    """``benches/python/timers.py --quick``: lateness (none early), the burst, the scheduling
    rates, pending memory and reopen, and the dead-letter check ("ok"), nothing left behind."""
    out, work = tmp_path / "timers.json", tmp_path / "work"
    work.mkdir()
    done = _bench("timers.py", "--quick", "--json", str(out), "--workdir", str(work))
    data = json.loads(out.read_text())
    [late], [burst], [rate] = data["runs"]["lateness"], data["runs"]["burst"], data["runs"]["schedule_rate"]
    assert late["received"] == late["n"] and late["early"] == 0 and burst["early"] == 0
    assert late["store_p99_ms"] >= 0 and burst["n"] > 0 and _positive(burst["rate"])
    assert all(_positive(rate[f"{k}_rate"]) for k in ("plain", "timer", "delay_level"))
    assert _positive(data["pending"]["reopen_s"]) and data["pending"]["delivered_at_reopen"] == 0
    assert data["dlq"]["check"] == "ok", data["dlq"]
    assert "each delivered max + 1 times, then in the DLQ | ok" in done.stdout
    assert list(work.iterdir()) == [], "timers.py left stores behind"


@pytest.mark.spark
def test_spark_source_benchmark_smoke_measures_both_paths(tmp_path: Path) -> None:
    """``benches/python/spark_source.py --smoke``: the Arrow path and the row path each read
    every message and report a rate."""
    pytest.importorskip("pyspark", reason="pyspark is not installed: pip install 'mqlite[spark]'")
    out = tmp_path / "spark.json"
    done = _bench("spark_source.py", "--smoke", "--json", str(out))
    data = json.loads(out.read_text())
    assert data["command"] == "python benches/python/spark_source.py --smoke" and data["n"] == 20_000
    for path in ("arrow", "rows"):
        assert _positive(data["results"][path]["rows_per_s"]), data


@pytest.mark.spark
def test_spark_sink_benchmark_smoke_measures_sink_and_pipeline(tmp_path: Path) -> None:
    """``benches/python/spark_sink.py --smoke``: the sink writes every row and reports a rate
    beside its two baselines (Spark's noop write, a Python writer that only iterates), and the
    example pipeline runs end to end."""
    pytest.importorskip("pyspark", reason="pyspark is not installed: pip install 'mqlite[spark]'")
    out = tmp_path / "sink.json"
    done = _bench("spark_sink.py", "--smoke", "--json", str(out))
    data = json.loads(out.read_text())
    assert data["command"] == "python benches/python/spark_sink.py --smoke" and data["n"] == 5_000
    assert all(_positive(data["results"][k]["rows_per_s"]) for k in ("sink", "noop", "iterate")), data
    assert _positive(data["results"]["pipeline"]["seconds"]) and data["results"]["pipeline"]["events"] == 2_000


def test_transactions_benchmark_quick_measures_every_workload(tmp_path: Path) -> None:
    """``benches/python/transactions.py --quick``: plain sends and transactions of 1 and 10
    messages, each with a rate, nothing left behind."""
    out, work = tmp_path / "txn.json", tmp_path / "work"
    work.mkdir()
    done = _bench("transactions.py", "--quick", "--json", str(out), "--workdir", str(work))
    med = json.loads(out.read_text())["median"]
    assert sorted(med) == ["plain", "txn x1", "txn x10"]
    assert all(_positive(med[k]["msg_rate"]) for k in med)
    assert "| txn x10 |" in done.stdout
    assert list(work.iterdir()) == [], "transactions.py left stores behind"


def test_index_benchmark_quick_measures_every_workload(tmp_path: Path) -> None:
    """``benches/python/index.py --quick``: key and unique-id lookups, a crowded hash chain and
    the index's cost on send and send_batch, nothing left behind."""
    out, work = tmp_path / "index.json", tmp_path / "work"
    work.mkdir()
    done = _bench("index.py", "--quick", "--json", str(out), "--workdir", str(work))
    data = json.loads(out.read_text())
    [lookup], [slot], [cost] = data["runs"]["lookup"], data["runs"]["slot"], data["runs"]["send_cost"]
    assert all(_positive(lookup[k]) for k in ("key_p50_us", "key_p99_us", "id_p50_us", "id_p99_us"))
    assert _positive(slot["p50_us"]) and slot["n"] == 100
    assert all(_positive(cost[f"{k}_ratio"]) for k in ("send", "send_batch"))
    assert "| find_by_key, 100 keys sharing one hash |" in done.stdout
    assert list(work.iterdir()) == [], "index.py left stores behind"
