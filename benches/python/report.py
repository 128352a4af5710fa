#!/usr/bin/env python3
"""mqlite's Python benchmark report: one command, one run, every baseline measured in it.

    python benches/python/report.py            # full run (~21 min on a 2-core VM)
    python benches/python/report.py --quick    # the same workloads, smaller (~2 min)
    python benches/python/report.py --smoke    # tiny, mqlite + raw baselines + SimpleQueue (CI)

Writes, under --out (default benches/results):
    results.json   raw numbers, medians, ratios, machine info and the exact command line
    tables.md      markdown tables rendered from results.json
    (and, when --out is benches/results, docs/benchmarks.md and its images: docs_page.py)
    chart.png      throughput chart (benches/python/chart.py; needs matplotlib)
    rss.png        RSS while consuming a big store (same)

What runs, at each body size (128 B and 1 KiB), --repeat times (median reported), the
repetitions interleaved so machine noise spreads over every workload:
  * bench.py      raw-file append/read baselines; mqlite send(Message), send_batch(bytes) and
                  send_batch(Message) x1000, Store.read, PullConsumer.poll(256) and poll(),
                  reopen after a clean close
  * bench.py      flush="sync": 1/4/8 threads x blocking send(); 8 threads x window of 256
                  send_async() futures (one shared Producer, and one Producer per thread);
                  baseline: write() + fdatasync per record to a plain file
  * peers.py      the same produce-then-consume loop over mqlite and the queues a Python user
                  might pick instead (Redis Streams on a private redis-server, persist-queue,
                  litequeue, diskcache, queuelib, SimpleQueue, raw mmap)
  * peers.py      end-to-end latency at a steady rate: send -> PushConsumer listener,
                  send -> PullConsumer.poll, SimpleQueue hand-off, Redis XADD -> blocking XREAD
                  (3 rounds per repetition in the full run: tail percentiles are noisier)
and once, in a subprocess: rss.py (produce ~2 GiB, reopen, consume it all, sample VmRSS).

Every ratio divides two figures measured in this run.  Stores live under --workdir (default:
a temporary directory inside bench-out/ at the repository root), removed at the end.
`--from-json results.json` re-renders tables.md and the charts without measuring.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import bench  # noqa: E402
import peers  # noqa: E402

SCHEMA = 1

# Throughput peers run through peers.py's produce-then-consume loop (the raw-file baseline comes
# from bench.py, measured in the same repetition).
FULL_PEERS = ["mqlite", "mqlite-send", "raw-mmap", "simplequeue", "redis-xadd-pipe100",
              "redis-xadd", "queuelib-fifo", "pq-file", "pq-sqlite", "litequeue",
              "diskcache-deque"]
SMOKE_PEERS = ["mqlite", "mqlite-send", "raw-mmap", "simplequeue"]
FULL_LATENCY = ["simplequeue", "mqlite-push", "mqlite", "redis-xadd"]
SMOKE_LATENCY = ["simplequeue", "mqlite-push", "mqlite"]

PROFILES: Dict[str, Dict[str, Any]] = {
    "full": dict(repeat=3, n=200_000, peer_n=100_000, peer_budget=4.0, lat_m=20_000,
                 lat_rounds=3, lat_warmup=500, lat_rate=2000.0, sync_seconds=2.0, rss_mib=2048,
                 rss_every=100, peers=FULL_PEERS, latency_peers=FULL_LATENCY),
    "quick": dict(repeat=1, n=50_000, peer_n=20_000, peer_budget=2.0, lat_m=4000,
                  lat_rounds=1, lat_warmup=200, lat_rate=2000.0, sync_seconds=1.0, rss_mib=256,
                  rss_every=32, peers=FULL_PEERS, latency_peers=FULL_LATENCY),
    "smoke": dict(repeat=1, n=2000, peer_n=2000, peer_budget=2.0, lat_m=300, lat_rounds=1,
                  lat_warmup=50, lat_rate=2000.0, sync_seconds=0.2, rss_mib=8, rss_every=2,
                  peers=SMOKE_PEERS, latency_peers=SMOKE_LATENCY),
}
SIZES = [128, 1024]
DEFAULT_OUT = os.path.join(ROOT, "benches", "results")


# ----------------------------------------------------------------------------------------------
# Machine
# ----------------------------------------------------------------------------------------------


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _mount_of(path: str) -> Dict[str, str]:
    best: Dict[str, str] = {}
    real = os.path.realpath(path)
    for line in _read("/proc/mounts").splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1]
        if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and \
                len(mnt) >= len(best.get("mount", "")):
            best = {"device": parts[0], "mount": mnt, "fstype": parts[2]}
    return best


def machine_info(workdir: str) -> Dict[str, Any]:
    cpu = ""
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kib = 0
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    osname = ""
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            osname = line.split("=", 1)[1].strip('"')
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    try:
        import mqlite

        mq_version: Optional[str] = mqlite.__version__
    except Exception as e:  # noqa: BLE001
        mq_version = f"not importable: {e}"

    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except Exception:  # noqa: BLE001
            return ""

    info = {
        "cpu_model": cpu,
        "cpus": os.cpu_count(),
        "cpus_usable": affinity,
        "mem_total_gib": round(mem_kib / 2**20, 1),
        "os": osname,
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "python_impl": platform.python_implementation(),
        "mqlite": mq_version,
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain", "--", "rust", "python", "Cargo.toml")),
        "git_modified": [line[3:] for line in git("status", "--porcelain", "--", "rust",
                                                   "python", "Cargo.toml").splitlines()],
        "workdir_fs": _mount_of(workdir),
        "loadavg_start": _read("/proc/loadavg").split()[:3],
    }
    info.update({k: v for k, v in peers.environment().items()
                 if k not in ("python", "platform", "cpus", "time")})
    return info


# ----------------------------------------------------------------------------------------------
# Measuring
# ----------------------------------------------------------------------------------------------


def _ns(**kw: Any) -> argparse.Namespace:
    return argparse.Namespace(**kw)


def measure(cfg: Dict[str, Any], work: str, log: Any = print) -> Dict[str, Any]:
    import mqlite

    sizes = cfg["sizes"]
    bodies = {s: bench.make_bodies(cfg["n"], s) for s in sizes}
    peer_bodies = {s: bodies[s][:cfg["peer_n"]] for s in sizes}
    bench_rows: List[dict] = []
    sync_rows: List[dict] = []
    peer_rows: List[dict] = []
    lat_rows: List[dict] = []
    peer_classes = [peers.PEERS[p] for p in cfg["peers"]]
    lat_classes = [peers.PEERS[p] for p in cfg["latency_peers"]]
    for rep in range(cfg["repeat"]):
        for size in sizes:
            log(f"== repetition {rep + 1}/{cfg['repeat']}, body {size} B")
            bargs = _ns(queues=4, batch=1000, read_batch=1024, size=size)
            bench_rows.extend(bench.one_repetition(bargs, bodies[size], mqlite, work, rep))
            if cfg["sync"]:
                sync_rows.extend(bench.run_sync(mqlite, work, size, cfg["sync_seconds"], rep))
            if cfg["do_peers"]:
                pargs = _ns(n=len(peer_bodies[size]), size=size, budget=cfg["peer_budget"])
                for cls in peer_classes:
                    r = peers.run_throughput_once(cls, peer_bodies[size], pargs, work)
                    r["run"] = rep
                    peer_rows.append(r)
                    log(f"  [run {rep}] peer {cls.name:<20} {_peer_line(r)}")
            if cfg["latency"] and size in cfg["latency_sizes"]:
                largs = _ns(m=cfg["lat_m"], warmup=cfg["lat_warmup"], rate=cfg["lat_rate"],
                            rate_map={}, size=size, budget=30.0)
                # Latency percentiles move more between runs than throughput does (the tail
                # is a few hundred messages): several rounds per repetition, peers interleaved.
                for rnd in range(cfg["lat_rounds"]):
                    for cls in lat_classes:
                        # Start each latency run from a quiet disk: the throughput workloads above
                        # leave gigabytes of dirty pages whose writeback would otherwise compete
                        # for the 2 CPUs during whichever peer runs next.
                        os.sync()
                        time.sleep(0.5)
                        r = peers.run_latency_once(cls, largs, work)
                        r["run"] = rep * cfg["lat_rounds"] + rnd
                        lat_rows.append(r)
                        log(f"  [run {r['run']}] latency {cls.name:<14} " + (
                            f"p50 {r['p50_us']:.1f} us, p99 {r['p99_us']:.1f} us, "
                            f"p99.9 {r['p999_us']:.1f} us"
                            if "p50_us" in r else str(r.get("skipped") or r.get("error")
                                                      or r.get("errors"))))
    return {"bench": bench_rows, "sync": sync_rows, "peers": peer_rows, "latency": lat_rows}


def _peer_line(r: dict) -> str:
    if "produce" not in r:
        return "skipped: " + r["skipped"] if "skipped" in r else f"error: {r.get('error')}"
    p, c = r["produce"], r.get("consume", {})
    s = f"produce {bench.fmt_rate(p['msgs_per_s']):>8}/s{' (partial)' if p['partial'] else ''}"
    if c:
        s += f", consume {bench.fmt_rate(c['msgs_per_s']):>8}/s" \
             f"{' (partial)' if c['partial'] else ''}"
    if r.get("error"):
        s += f"  ERROR {r['error']}"
    return s


def run_rss(cfg: Dict[str, Any], work: str, log: Any = print) -> Dict[str, Any]:
    """rss.py in a fresh interpreter (its RSS is not this process's)."""
    cmd = [sys.executable, os.path.join(HERE, "rss.py"), "--mib", str(cfg["rss_mib"]),
           "--every", str(cfg["rss_every"]), "--dir", work, "--json", "-"]
    log(f"== RSS: {shlex.join(cmd)}")
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    for line in done.stderr.splitlines():
        log("  " + line)
    if done.returncode != 0:
        return {"status": "error", "returncode": done.returncode,
                "stderr_tail": done.stderr[-2000:]}
    res = json.loads(done.stdout.strip().splitlines()[-1])
    res["status"] = "ok"
    res["wall_s"] = time.perf_counter() - t0
    res["command"] = shlex.join(["python", "benches/python/rss.py"] + cmd[2:-4]) \
        + " --dir <workdir> --json -"
    return res


# ----------------------------------------------------------------------------------------------
# Summaries: one row list per size, every ratio against this run's baseline
# ----------------------------------------------------------------------------------------------

BENCH_LABELS = {
    "raw_append": "raw file append, write() per 100 records (baseline)",
    "raw_read": "raw file read, 1 MiB read() calls (baseline)",
    "send": "mqlite Producer.send(Message)",
    "send_batch_bytes": "mqlite send_batch(bytes), 1000 per call",
    "send_batch_msg": "mqlite send_batch(Message), 1000 per call",
    "read": "mqlite Store.read, 1024 per call",
    "poll_256": "mqlite PullConsumer.poll(max_messages=256)",
    "poll_default": "mqlite PullConsumer.poll() (default 32)",
}
PEER_CONSUME_LABELS = {
    "mqlite": "mqlite Store.read after send_batch (peer loop)",
    "mqlite-send": "mqlite PullConsumer.poll() after send (peer loop)",
}
PEER_PRODUCE_LABELS = {
    "mqlite": "mqlite send_batch(bytes) x1000 (peer loop)",
    "mqlite-send": "mqlite Message() + send() (peer loop)",
}


def _is_mqlite(key: str) -> bool:
    return key.startswith("mqlite") or key in BENCH_LABELS and not key.startswith("raw")


def summarize(raw: Dict[str, Any], cfg: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"throughput": {}, "sync": {}, "latency": {}, "peer_goals": {}}
    bsum = bench.summarize(raw["bench"]) if raw["bench"] else []
    psum = peers.summarize(raw["peers"]) if raw["peers"] else []
    for size in cfg["sizes"]:
        rows: List[dict] = []
        base = {s["kind"]: s for s in bsum
                if s["size"] == size and s["key"] in ("raw_append", "raw_read")}
        reopen = next((s for s in bsum if s["size"] == size and s["key"] == "reopen"), None)
        for s in bsum:
            if s["size"] != size or s["kind"] == "reopen":
                continue
            rows.append({
                "key": s["key"], "source": "bench.py", "phase": s["kind"],
                "workload": BENCH_LABELS.get(s["key"], s["workload"]),
                "baseline": s["key"] in ("raw_append", "raw_read"),
                "mqlite": _is_mqlite(s["key"]),
                "durability": s["durability"], "process_crash": s["process_crash"],
                "machine_crash": s["machine_crash"], "status": "ok",
                "msgs_per_s": s["msgs_per_s"], "min": s["min"], "max": s["max"],
                "mb_per_s": s["mb_per_s"], "runs": s["runs"], "count": cfg["n"],
                "partial": False,
            })
        for s in psum:
            if s["size"] != size:
                continue
            for ph in ("produce", "consume"):
                row = {"key": f"{s['peer']}:{ph}", "peer": s["peer"], "source": "peers.py",
                       "phase": ph, "baseline": False, "mqlite": s["peer"].startswith("mqlite"),
                       "durability": s["durability"], "process_crash": s["process_crash"],
                       "machine_crash": s["machine_crash"], "consume_mode": s["consume_mode"],
                       "status": s["status"], "runs": s["runs"]}
                labels = PEER_PRODUCE_LABELS if ph == "produce" else PEER_CONSUME_LABELS
                row["workload"] = labels.get(s["peer"], s["label"])
                if s["status"] != "ok":
                    row["note"] = s.get("note", "")
                    rows.append(row)
                    continue
                if ph not in s:
                    continue
                d = s[ph]
                row.update({"msgs_per_s": d["msgs_per_s"], "min": d["min"], "max": d["max"],
                            "mb_per_s": d["mb_per_s"], "count": d["count"],
                            "partial": d["partial"], "secs": d["secs"],
                            "of": cfg["peer_n"] if ph == "produce" else s["produce"]["count"],
                            "mismatches": s.get("mismatches", 0), "errors": s.get("errors", [])})
                if ph == "produce":
                    row["disk_bytes"] = s.get("disk_bytes")
                rows.append(row)
        for r in rows:
            b = base.get(r["phase"])
            if b and r.get("msgs_per_s") is not None and b["msgs_per_s"]:
                r["ratio_to_baseline"] = r["msgs_per_s"] / b["msgs_per_s"]
        out["throughput"][str(size)] = {
            "n": cfg["n"], "peer_n": cfg["peer_n"], "peer_budget_s": cfg["peer_budget"],
            "baseline": {ph: {"workload": BENCH_LABELS[b["key"]], "msgs_per_s": b["msgs_per_s"]}
                         for ph, b in base.items()},
            "reopen_ms": reopen["median_ms"] if reopen else None,
            "send_message_build_s": next((s.get("message_build_s") for s in bsum
                                          if s["size"] == size and s["key"] == "send"), None),
            "rows": rows,
        }
        out["peer_goals"][str(size)] = _goals(rows)
    if raw["sync"]:
        for s in bench.summarize_sync(raw["sync"]):
            out["sync"].setdefault(str(s["size"]), []).append(s)
        for size, rows in out["sync"].items():
            one = next((r for r in rows if r["key"] == "sync_send_1"), None)
            for r in rows:
                if one and one["msgs_per_s"] and r["key"] != "sync_raw_fdatasync":
                    r["ratio_to_1_thread"] = r["msgs_per_s"] / one["msgs_per_s"]
    if raw["latency"]:
        for s in peers.summarize_latency(raw["latency"]):
            out["latency"].setdefault(str(s["size"]), {"rows": []})["rows"].append(s)
        for size, block in out["latency"].items():
            sq = next((r for r in block["rows"] if r["peer"] == "simplequeue"
                       and r["status"] == "ok"), None)
            ratios = {}
            for r in block["rows"]:
                if sq and r["status"] == "ok":
                    r["ratio_to_simplequeue"] = {k: r[k] / sq[k]
                                                 for k in ("p50_us", "p99_us", "p999_us")}
                    if r["peer"] != "simplequeue":
                        ratios[r["peer"]] = r["ratio_to_simplequeue"]
            block["ratios_to_simplequeue"] = ratios
    return out


def _goals(rows: List[dict]) -> Dict[str, Any]:
    """The peer goals: mqlite send_batch vs Redis pipelined, mqlite send vs persist-queue, each
    with both figures from the same produce-then-consume loop (peers.py)."""
    by = {r["key"]: r for r in rows}

    def ratio(a: str, b: str) -> Optional[dict]:
        ra, rb = by.get(a), by.get(b)
        if not ra or not rb or ra.get("msgs_per_s") is None or rb.get("msgs_per_s") is None:
            why = (rb or {}).get("note") or (ra or {}).get("note") or "not measured"
            return {"a": a, "b": b, "ratio": None, "note": why}
        return {"a": a, "b": b, "a_msgs_per_s": ra["msgs_per_s"],
                "b_msgs_per_s": rb["msgs_per_s"], "ratio": ra["msgs_per_s"] / rb["msgs_per_s"],
                "a_partial": ra.get("partial"), "b_partial": rb.get("partial")}

    return {
        "mqlite send_batch vs Redis pipelined (produce)":
            ratio("mqlite:produce", "redis-xadd-pipe100:produce"),
        "mqlite Store.read vs Redis XREADGROUP COUNT 100 (consume)":
            ratio("mqlite:consume", "redis-xadd-pipe100:consume"),
        "mqlite send vs persist-queue Queue.put (produce)":
            ratio("mqlite-send:produce", "pq-file:produce"),
        "mqlite send vs persist-queue SQLiteQueue.put (produce)":
            ratio("mqlite-send:produce", "pq-sqlite:produce"),
        "mqlite poll() vs persist-queue Queue.get+task_done (consume)":
            ratio("mqlite-send:consume", "pq-file:consume"),
        "mqlite poll() vs persist-queue SQLiteQueue.get (consume)":
            ratio("mqlite-send:consume", "pq-sqlite:consume"),
    }


# ----------------------------------------------------------------------------------------------
# Markdown
# ----------------------------------------------------------------------------------------------


def fmt_rate(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e4:
        return f"{x / 1e3:.0f} k"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k"
    return f"{x:.0f}"


def fmt_ratio(x: Optional[float]) -> str:
    if x is None:
        return ""
    if x >= 10:
        return f"{x:.1f}"
    if x >= 0.1:
        return f"{x:.2f}"
    return f"{x:.2g}"


def size_name(size: int) -> str:
    return f"{size // 1024} KiB" if size % 1024 == 0 else f"{size} B"


def crash_text(r: dict) -> str:
    if r["phase"] == "consume":
        return r.get("consume_mode") or r.get("process_crash", "")
    return f"{r['process_crash']} / {r['machine_crash']}"


def _rate_cell(r: dict, ranges: bool = False) -> str:
    if r.get("status") != "ok":
        return f"{r.get('status')}: {r.get('note', '')}"
    cell = fmt_rate(r["msgs_per_s"])
    if ranges and r.get("runs", 1) > 1:
        cell += f" ({fmt_rate(r['min'])}–{fmt_rate(r['max'])})"
    if r.get("partial"):
        cell += f" (partial: {int(r['count']):,} of {int(r['of']):,})"
    if r.get("mismatches"):
        cell += f" ({r['mismatches']} out of order)"
    return cell


def throughput_table(block: Dict[str, Any], bold_mqlite: bool = True,
                     ranges: bool = False) -> List[str]:
    lines = ["| workload | durability | msgs/s | ratio to baseline |", "|---|---|---:|---:|"]
    for phase, title in (("produce", "produce"), ("consume", "consume")):
        rows = [r for r in block["rows"] if r["phase"] == phase]
        rows.sort(key=lambda r: (not r["baseline"], r.get("status") != "ok",
                                 -(r.get("msgs_per_s") or 0)))
        lines.append(f"| ***{title}*** | | | |")
        for r in rows:
            name = r["workload"]
            if r["mqlite"] and bold_mqlite:
                name = f"**{name}**"
            lines.append(f"| {name} | {crash_text(r)} | {_rate_cell(r, ranges)} | "
                         f"{fmt_ratio(r.get('ratio_to_baseline'))} |")
    return lines


def prime_sentence(prime: Optional[Dict[str, Any]]) -> str:
    """The machine line's account of `bench.prime_page_cache` (empty for older results)."""
    if not prime:
        return ""
    return (f" Before measuring, {prime['mib']} MiB were written to a file and deleted twice "
            f"({prime['first_pass_gbps']} then {prime['second_pass_gbps']} GB/s; a slow first "
            "pass means page-cache pages new to the guest cost a host fault, which every "
            "workload is then spared: see `bench.prime_page_cache`).")


def machine_sentence(data: Dict[str, Any], commit: bool = True) -> str:
    """The machine a run measured, in one sentence (with the page-cache priming, if any);
    ``commit=False`` leaves out which commit was measured (the docs page gives the date)."""
    m = data["machine"]
    built = (f" (commit {(m.get('git_commit') or '?')[:10]}"
             f"{', tree modified' if m.get('git_dirty') else ''})") if commit else ""
    return (
        f"{m.get('cpu_model') or 'unknown CPU'}, {m.get('cpus')} CPUs, "
        f"{m.get('mem_total_gib')} GiB, {m.get('os')}, Linux {m.get('kernel')}, "
        f"Python {m.get('python')}, mqlite {m.get('mqlite')}{built}, "
        f"stores on {m.get('workdir_fs', {}).get('fstype', '?')}; load average at start "
        f"{' '.join(m.get('loadavg_start', []))}.{prime_sentence(m.get('page_cache_prime'))}")


def render_tables(data: Dict[str, Any]) -> str:
    cfg = data["config"]
    out = [
        "# mqlite Python benchmark report",
        "",
        f"Generated by `{data['command']}` on {data['date']} ({data['profile']} profile, "
        f"{data['elapsed_s'] / 60:.1f} min).",
        "",
        f"Machine: {machine_sentence(data)}",
        "",
        f"Median of {cfg['repeat']} repetition(s), interleaved. Every ratio divides two figures "
        "from this run. Durability is written *what a crash of the process / of the machine "
        "loses*; consume rows say how the consumer acknowledges.",
    ]
    out += result_sections(data)
    out += ["", "Raw per-run numbers, configuration and machine details: `results.json`.", ""]
    return "\n".join(out)


def result_sections(data: Dict[str, Any]) -> List[str]:
    """Every table of a run, each under a level-2 heading (tables.md and docs/benchmarks.md)."""
    out: List[str] = []
    out += throughput_sections(data)
    out += peer_goals_section(data)
    out += sync_section(data)
    out += latency_section(data)
    out += rss_section(data)
    return out


def throughput_sections(data: Dict[str, Any]) -> List[str]:
    cfg = data["config"]
    s = data["summary"]
    out: List[str] = []
    for size in cfg["sizes"]:
        block = s["throughput"].get(str(size))
        if not block:
            continue
        out += ["", f"## Throughput, {size_name(size)} bodies", "",
                f"mqlite API rows (bench.py): N = {block['n']:,} messages. Peer-loop rows "
                f"(peers.py: produce all, then consume all, in order): N = {block['peer_n']:,}, "
                f"each phase stopped after {block['peer_budget_s']:g} s (then marked partial; the "
                "rate is over the time it ran). Baselines: raw file append for produce, raw file "
                "read for consume. msgs/s: median (min–max).", ""]
        out += throughput_table(block, ranges=True)
        if block.get("reopen_ms") is not None:
            out += ["", f"Reopen of the send_batch store ({block['n']:,} messages) after a clean "
                    f"close: {block['reopen_ms']:.1f} ms (median)."]
        if block.get("send_message_build_s"):
            out += [f"`send(Message)`: the Message objects are built before the timed loop "
                    f"({block['send_message_build_s'] * 1e3:.0f} ms for {block['n']:,}); the "
                    "peer-loop row builds each one inside it."]
    return out


def peer_goals_section(data: Dict[str, Any]) -> List[str]:
    out: List[str] = []
    goals = data["summary"].get("peer_goals", {})
    if any(g.get("ratio") is not None for block in goals.values() for g in block.values()):
        out += ["", "## Peer goals (same produce-then-consume loop)", "",
                "| comparison | " + " | ".join(size_name(int(k)) for k in goals) + " |",
                "|---|" + "---:|" * len(goals)]
        names = list(next(iter(goals.values())).keys())
        for name in names:
            cells = []
            for k in goals:
                g = goals[k].get(name) or {}
                if g.get("ratio") is None:
                    cells.append(f"n/a ({g.get('note', '')})")
                else:
                    cells.append(f"{g['ratio']:.1f}x ({fmt_rate(g['a_msgs_per_s'])} vs "
                                 f"{fmt_rate(g['b_msgs_per_s'])})")
            out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out


def sync_section(data: Dict[str, Any]) -> List[str]:
    cfg = data["config"]
    s = data["summary"]
    out: List[str] = []
    if s.get("sync"):
        sizes = [k for k in map(str, cfg["sizes"]) if k in s["sync"]]
        out += ["", "## flush=\"sync\": acknowledged after the msync (group commit)", "",
                f"Each run lasts {cfg['sync_seconds']:g} s; a send counts once it returned (or "
                "its future resolved). Median (min–max) of the runs: fsync latency on a shared "
                "VM disk varies a lot.", "",
                "| workload | durability | " + " | ".join(
                    f"{size_name(int(k))} msgs/s | ratio to baseline" for k in sizes)
                + " |", "|---|---|" + "---:|---:|" * len(sizes)]
        keys = [r["key"] for r in s["sync"][sizes[0]]]
        for key in keys:
            cells = []
            label = dur = ""
            for k in sizes:
                r = next((x for x in s["sync"][k] if x["key"] == key), None)
                if r is None:
                    cells.append("- | ")
                    continue
                label = sync_label(r)
                dur = f"{r['process_crash']} / {r['machine_crash']}"
                c = fmt_rate(r["msgs_per_s"])
                if r.get("runs", 1) > 1:
                    c += f" ({fmt_rate(r['min'])}–{fmt_rate(r['max'])})"
                if r.get("not_send_ok"):
                    c += f" ({r['not_send_ok']} not SEND_OK)"
                if r.get("errors"):
                    c += f" (errors: {'; '.join(r['errors'])[:80]})"
                cells.append(f"{c} | {fmt_ratio(r.get('ratio_to_fdatasync'))}")
            out.append(f"| {label} | {dur} | " + " | ".join(cells) + " |")
    return out


def latency_section(data: Dict[str, Any]) -> List[str]:
    cfg = data["config"]
    s = data["summary"]
    out: List[str] = []
    if s.get("latency"):
        out += ["", "## End-to-end latency", "",
                f"A producer thread sends {cfg['lat_m']:,} messages at a steady "
                f"{cfg['lat_rate']:,.0f}/s after {cfg['lat_warmup']} warm-up ones, stamping "
                "`perf_counter_ns` into the body just before the send call; the receiving "
                "thread records the arrival. Each run (every peer alike) starts after an "
                "`os.sync()`, so no earlier workload's writeback is in flight. Median of the "
                f"percentiles of {cfg['repeat'] * cfg.get('lat_rounds', 1)} runs per path "
                f"({cfg.get('lat_rounds', 1)} per repetition, paths interleaved), in µs.", "",
                "| path | durability | body | p50 µs | p99 µs | p99.9 µs "
                "| p50 / p99 / p99.9 vs SimpleQueue |",
                "|---|---|---|---:|---:|---:|---|"]
        for size in cfg["sizes"]:
            block = s["latency"].get(str(size))
            if not block:
                continue
            for r in block["rows"]:
                label = LATENCY_LABELS.get(r["peer"], r["peer"])
                dur = f"{r.get('process_crash', '')} / {r.get('machine_crash', '')}"
                if r["status"] != "ok":
                    out.append(f"| {label} | {dur} | {size_name(size)} | {r['status']}: "
                               f"{r.get('note', '')} | | | |")
                    continue
                rr = r.get("ratio_to_simplequeue")
                rt = "" if not rr else (f"{rr['p50_us']:.2f}x / {rr['p99_us']:.2f}x / "
                                        f"{rr['p999_us']:.2f}x")
                err = f" ({len(r['errors'])} errors)" if r.get("errors") else ""
                out.append(f"| {label}{err} | {dur} | {size_name(size)} | {r['p50_us']:.1f} | "
                           f"{r['p99_us']:.1f} | {r['p999_us']:.1f} | {rt} |")
    return out


def rss_section(data: Dict[str, Any]) -> List[str]:
    out: List[str] = []
    rss = data.get("rss")
    if rss:
        out += ["", "## RSS while consuming a big store", ""]
        if rss.get("status") != "ok":
            out.append(f"RSS run failed: {rss.get('stderr_tail', '')[-300:]}")
        else:
            out.append(rss_sentence(rss))
            out += ["", "| consumed MiB | VmRSS MiB | RssAnon MiB | RssFile MiB |",
                    "|---:|---:|---:|---:|"]
            for p in rss["series"]:
                out.append(f"| {p['consumed_mib']:.0f} | {p.get('VmRSS', 0) / 1024:.0f} | "
                           f"{p.get('RssAnon', 0) / 1024:.0f} | {p.get('RssFile', 0) / 1024:.0f} |")
    return out


LATENCY_LABELS = {
    "mqlite-push": "mqlite send → PushConsumer listener (concurrent)",
    "mqlite": "mqlite send → PullConsumer.poll (consumer thread)",
    "simplequeue": "queue.SimpleQueue hand-off (floor)",
    "redis-xadd": "Redis Streams XADD → blocking XREAD",
}


def sync_label(r: dict) -> str:
    if r["key"] == "sync_raw_fdatasync":
        return "raw file, write() + fdatasync per record, 1 thread (baseline)"
    if r["key"] == "sync_async_8x256":
        return ("sync flush, acknowledged after fsync, 8 threads x window 256 "
                "(send_async, one shared Producer)")
    if r["key"] == "sync_async_8x256_own":
        return ("sync flush, acknowledged after fsync, 8 threads x window 256 "
                "(send_async, one Producer per thread)")
    t = r["threads"]
    return f"sync flush, blocking send(), {t} thread{'s' if t > 1 else ''}"


def rss_sentence(rss: Dict[str, Any]) -> str:
    mib = 1024
    return (f"Produce {rss['body_bytes'] / 2**30:.2f} GiB ({rss['messages']:,} x "
            f"{rss['size']} B bodies, send_batch), close, reopen, consume everything with one "
            f"PullConsumer (poll(max_messages=256)), touching every body: VmRSS "
            f"{rss['rss_start_kib'] // mib} MiB at the start, at most "
            f"{rss['rss_max_kib'] // mib} MiB, {rss['rss_end_kib'] // mib} MiB at the end "
            f"(sampled every {rss['every_mib']} MiB; RssFile, the mapped commit log, "
            f"{rss['series'][0].get('RssFile', 0) // mib} → "
            f"{rss['series'][-1].get('RssFile', 0) // mib} MiB). Consume took "
            f"{rss['consume_s']:.1f} s.")


# ----------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------


def write_outputs(data: Dict[str, Any], out_dir: str, chart: bool, log: Any = print) -> None:
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "results.json")
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=str)
        f.write("\n")
    log(f"wrote {path}")
    md = render_tables(data)
    path = os.path.join(out_dir, "tables.md")
    with open(path, "w") as f:
        f.write(md)
    log(f"wrote {path}")
    if chart:
        _write_charts(data, out_dir, log)
    if os.path.realpath(out_dir) == os.path.realpath(DEFAULT_OUT):
        # The committed results and docs/benchmarks.md change together (the docs test checks it).
        import docs_page

        for p in docs_page.write(out_dir):
            log(f"wrote {p}")


def _write_charts(data: Dict[str, Any], out_dir: str, log: Any) -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        log("matplotlib is not installed: no chart (pip install -r "
            "benches/python/requirements.txt)")
        return
    import chart as chart_mod

    for p in chart_mod.render(data, out_dir):
        log(f"wrote {p}")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    prof = ap.add_mutually_exclusive_group()
    prof.add_argument("--quick", action="store_true", help="smaller run (~2 min)")
    prof.add_argument("--smoke", action="store_true",
                      help="tiny run for CI: mqlite, raw baselines and SimpleQueue only")
    ap.add_argument("--out", default=DEFAULT_OUT,
                    help="output directory (default: benches/results)")
    ap.add_argument("--workdir", default="",
                    help="parent directory of the temporary stores (default: bench-out/ at the "
                         "repository root; keep it on a disk with ~3 GiB free)")
    ap.add_argument("--repeat", type=int, help="repetitions (median reported)")
    ap.add_argument("--sizes", default="", help="body sizes, comma separated (default 128,1024)")
    ap.add_argument("--latency-sizes", default="",
                    help="body sizes for the latency runs (default: all of --sizes)")
    ap.add_argument("--no-peers", action="store_true", help="skip the peer throughput loop")
    ap.add_argument("--no-latency", action="store_true", help="skip latency")
    ap.add_argument("--no-sync", action="store_true", help="skip the flush=sync workloads")
    ap.add_argument("--no-rss", action="store_true", help="skip the RSS run")
    ap.add_argument("--no-chart", action="store_true", help="do not draw the charts")
    ap.add_argument("--prime-mib", type=int, default=None,
                    help="MiB written and deleted twice before measuring (bench.prime_page_cache; "
                         f"default {bench.PRIME_MIB}, smoke profile 0)")
    ap.add_argument("--from-json", default="",
                    help="re-render tables.md and the charts from this results.json")
    args = ap.parse_args(argv)

    if args.from_json:
        with open(args.from_json) as f:
            data = json.load(f)
        write_outputs(data, args.out, not args.no_chart)
        return 0

    profile = "smoke" if args.smoke else "quick" if args.quick else "full"
    cfg = dict(PROFILES[profile])
    if args.repeat is not None:
        if args.repeat < 1:
            ap.error("--repeat must be >= 1")
        cfg["repeat"] = args.repeat
    cfg["sizes"] = [int(x) for x in args.sizes.split(",") if x.strip()] or list(SIZES)
    cfg["latency_sizes"] = ([int(x) for x in args.latency_sizes.split(",") if x.strip()]
                            or list(cfg["sizes"]))
    cfg["do_peers"] = not args.no_peers
    cfg["latency"] = not args.no_latency
    cfg["sync"] = not args.no_sync
    cfg["rss"] = not args.no_rss
    try:
        import mqlite  # noqa: F401
    except ImportError as e:
        print(f"error: mqlite is not importable ({e}); build it first (./scripts/demo.sh) and "
              "run this with .venv/bin/python", file=sys.stderr)
        return 2

    parent = args.workdir or os.path.join(ROOT, "bench-out")
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix="report-", dir=parent)
    started = time.time()
    command = shlex.join(["python", os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)
                          if argv is None else "benches/python/report.py",
                          *(sys.argv[1:] if argv is None else argv)])
    data: Dict[str, Any] = {
        "schema": SCHEMA,
        "command": command,
        "argv": sys.argv if argv is None else ["report.py", *argv],
        "python_executable": sys.executable,
        "cwd": os.getcwd(),
        "profile": profile,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine_info(parent),
        "config": cfg,
    }
    print(f"mqlite benchmark report ({profile}): {command}", flush=True)
    print("machine:", json.dumps(data["machine"]), flush=True)

    def log(msg: str) -> None:
        print(msg, flush=True)

    prime_mib = args.prime_mib if args.prime_mib is not None else (
        0 if profile == "smoke" else bench.PRIME_MIB)
    try:
        prime = bench.prime_page_cache(work, prime_mib)
        data["machine"]["page_cache_prime"] = prime
        if prime:
            log(f"page cache primed with {prime['mib']} MiB: first pass "
                f"{prime['first_pass_gbps']} GB/s, second {prime['second_pass_gbps']} GB/s")
        raw = measure(cfg, work, log)
        if cfg["rss"]:
            data["rss"] = run_rss(cfg, work, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    data["raw"] = raw
    data["summary"] = summarize(raw, cfg)
    data["elapsed_s"] = time.time() - started
    data["machine"]["loadavg_end"] = _read("/proc/loadavg").split()[:3]
    write_outputs(data, args.out, not args.no_chart, log)
    print()
    print(render_tables(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
