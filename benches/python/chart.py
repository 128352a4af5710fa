#!/usr/bin/env python3
"""Charts for the benchmark report, drawn from results.json (written by report.py).

    python benches/python/chart.py benches/results/results.json [--out benches/results]

chart.png: horizontal bars of msgs/s (log scale), one column per body size, produce on top and
consume below; mqlite's bars are highlighted, each produce label says what a machine crash loses.
rss.png: VmRSS (and its mapped-file part) while one consumer reads a big store.
Needs matplotlib (benches/python/requirements.txt).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

MQLITE = "#e8710a"
BASELINE = "#3b3b3b"
PEER = "#5b7fa6"
MEMORY = "#b8b8b8"


def _fmt(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e4:
        return f"{x / 1e3:.0f} k"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k"
    return f"{x:.0f}"


def _size_name(size: int) -> str:
    return f"{size // 1024} KiB" if size % 1024 == 0 else f"{size} B"


def _color(r: Dict[str, Any]) -> str:
    if r["mqlite"]:
        return MQLITE
    if r["baseline"]:
        return BASELINE
    if r.get("process_crash") == "everything":
        return MEMORY
    return PEER


def _label(r: Dict[str, Any]) -> str:
    if r["phase"] == "produce":
        return f"{r['workload']}  [OS crash loses: {r['machine_crash']}]"
    return r["workload"]


def throughput_chart(data: Dict[str, Any], path: str) -> str:
    sizes = [s for s in data["config"]["sizes"] if str(s) in data["summary"]["throughput"]]
    phases = ["produce", "consume"]
    blocks = data["summary"]["throughput"]
    # one workload order per phase (by the first size's rate) so the columns share labels
    orders: Dict[str, List[str]] = {}
    counts = {}
    for ph in phases:
        first = [r for r in blocks[str(sizes[0])]["rows"]
                 if r["phase"] == ph and r.get("msgs_per_s")]
        first.sort(key=lambda r: r["msgs_per_s"])
        keys = [r["key"] for r in first]
        for s in sizes[1:]:
            for r in blocks[str(s)]["rows"]:
                if r["phase"] == ph and r.get("msgs_per_s") and r["key"] not in keys:
                    keys.insert(0, r["key"])
        orders[ph] = keys
        counts[ph] = max(1, len(keys))
    height = 1.6 + 0.27 * sum(counts.values())
    fig, axes = plt.subplots(
        len(phases), len(sizes), figsize=(7.2 + 4.6 * len(sizes), height), squeeze=False,
        gridspec_kw={"height_ratios": [counts[p] for p in phases]})
    xmin = min((r["msgs_per_s"] for s in sizes for r in blocks[str(s)]["rows"]
                if r.get("msgs_per_s")), default=1)
    xmax = max((r["msgs_per_s"] for s in sizes for r in blocks[str(s)]["rows"]
                if r.get("msgs_per_s")), default=10)
    for i, ph in enumerate(phases):
        for j, size in enumerate(sizes):
            ax = axes[i][j]
            rows = {r["key"]: r for r in blocks[str(size)]["rows"] if r["phase"] == ph}
            keys = orders[ph]
            vals = [rows[k]["msgs_per_s"] if k in rows and rows[k].get("msgs_per_s") else 0
                    for k in keys]
            colors = [_color(rows[k]) if k in rows else PEER for k in keys]
            bars = ax.barh(range(len(keys)), vals, color=colors, height=0.72)
            for k, bar, v in zip(keys, bars, vals):
                if not v:
                    continue
                r = rows[k]
                txt = _fmt(v) + (" (partial)" if r.get("partial") else "")
                ax.text(v * 1.06, bar.get_y() + bar.get_height() / 2, txt, va="center",
                        fontsize=7.5, fontweight="bold" if r["mqlite"] else "normal")
                if r["mqlite"]:
                    bar.set_edgecolor("black")
                    bar.set_linewidth(0.8)
            ax.set_xscale("log")
            ax.set_xlim(xmin / 2.5, xmax * 6)
            ax.set_yticks(range(len(keys)))
            if j == 0:
                labels = [_label(rows[k]) if k in rows else k for k in keys]
                ax.set_yticklabels(labels, fontsize=7.5)
                for tick, k in zip(ax.get_yticklabels(), keys):
                    if k in rows and rows[k]["mqlite"]:
                        tick.set_fontweight("bold")
            else:
                ax.set_yticklabels([])
            ax.set_ylim(-0.6, len(keys) - 0.4)
            ax.tick_params(axis="x", labelsize=7.5)
            ax.grid(axis="x", which="major", color="#dddddd", linewidth=0.6)
            ax.set_axisbelow(True)
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
            ax.set_title(f"{ph}, {_size_name(size)} bodies — msgs/s (log scale, higher is better)",
                         fontsize=9, loc="left")
    m = data.get("machine", {})
    fig.suptitle(
        f"mqlite and the queues a Python user might use instead — "
        f"{m.get('cpus')} CPUs, Python {m.get('python')}, {data.get('date', '')}, "
        f"median of {data['config']['repeat']}", fontsize=10.5, x=0.01, ha="left")
    fig.legend(handles=[
        Patch(color=MQLITE, label="mqlite (flush=async: a process crash loses nothing)"),
        Patch(color=BASELINE, label="raw file baseline"),
        Patch(color=PEER, label="on-disk peer"),
        Patch(color=MEMORY, label="in memory (a process crash loses everything)"),
    ], loc="lower right", ncol=4, fontsize=7.5, frameon=False)
    fig.tight_layout(rect=(0, 0.025, 1, 0.97))
    fig.savefig(path, dpi=110, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
    return path


def rss_chart(data: Dict[str, Any], path: str) -> str:
    rss = data["rss"]
    series = rss["series"]
    x = [p["consumed_mib"] for p in series]
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    ax.plot(x, [p.get("VmRSS", 0) / 1024 for p in series], color=MQLITE, marker="o",
            markersize=3, label="VmRSS")
    ax.plot(x, [p.get("RssFile", 0) / 1024 for p in series], color=PEER, linestyle="--",
            label="RssFile (mapped files)")
    ax.plot(x, [p.get("RssAnon", 0) / 1024 for p in series], color=BASELINE, linestyle=":",
            label="RssAnon (heap)")
    ax.set_xlabel("MiB of bodies consumed", fontsize=8)
    ax.set_ylabel("MiB resident", fontsize=8)
    ax.tick_params(labelsize=7.5)
    ax.grid(color="#dddddd", linewidth=0.6)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"RSS while one PullConsumer reads a {rss['body_bytes'] / 2**30:.2f} GiB store "
                 f"({rss['size']} B bodies)", fontsize=9, loc="left")
    ax.legend(fontsize=7.5, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def render(data: Dict[str, Any], out_dir: str) -> List[str]:
    """Draw every chart the data allows; returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    if data.get("summary", {}).get("throughput"):
        paths.append(throughput_chart(data, os.path.join(out_dir, "chart.png")))
    if data.get("rss", {}).get("status") == "ok" and data["rss"].get("series"):
        paths.append(rss_chart(data, os.path.join(out_dir, "rss.png")))
    return paths


def main(argv: List[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="results.json written by report.py")
    ap.add_argument("--out", default="", help="output directory (default: beside the JSON)")
    args = ap.parse_args(argv)
    with open(args.results) as f:
        data = json.load(f)
    for p in render(data, args.out or os.path.dirname(os.path.abspath(args.results))):
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
