#!/usr/bin/env python3
"""What a store costs as it grows in topics and in commit-log files, and what spreading traffic
over many queues costs.

    python benches/python/scale.py            # full: 10 / 1,000 / 10,000 topics, 10 to 5,000 files
    python benches/python/scale.py --quick    # smoke: 10 / 200 topics, 10 / 100 files, 1,000 queues
    python benches/python/scale.py --quick --out /tmp/scale   # results elsewhere, docs untouched

Three tables:

- **Topics.** A store of N topics x 4 queues with one 128 B message in every queue (topics
  created with ``create_topics`` when the store has it, else ``create_topic``), closed cleanly.
  A fresh process then opens it and reads every queue once. Per N: the build's time, the open's
  time, the store's file descriptors (``/proc/self/fd``, over the count before the open) and
  mappings of store files (``/proc/self/maps``) after the open and at most while reading, VmRSS
  after the open and after the reads, and the store's disk (allocated blocks, as ``du``).
- **Commit-log files.** A store of N commit-log files of 64 KiB (the smallest; 8 KiB bodies, one
  topic of 4 queues), closed cleanly; the same figures, the reads going through every message.
- **Traffic over many queues.** ``Producer.send`` rate of 128 B messages spread round robin over
  10 topics x 1,000 queues (10,000 queues; 1,000 in --quick) against the same messages to 1
  topic x 4 queues, and
  the ``PullConsumer.poll(max_messages=256)`` rate reading them back (the subscription, which
  claims the queues, is outside the timed loop; so is a first message to every queue, which
  creates its file). Repetitions interleaved, medians. The issue's goal: within 2x.

Every store is built and measured in a child process of its own (its descriptors, mappings and
memory are the store's alone), under --workdir (default: a temporary directory on the file
system of the system's temp directory), and deleted afterwards. A step that fails (EMFILE, say,
on a build whose descriptors grow with the store) is recorded with its error, and the run goes
on. Writes ``scale.json`` (every figure) into --out; with the default --out
(benches/results) also the scale sections of ``manual.json`` and docs/benchmarks.md
(benches/python/docs_page.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RESULTS = os.path.join(ROOT, "benches", "results")
sys.path.insert(0, HERE)

QUEUES = 4
LOG_FILE_SIZE = 64 << 10
LOG_BODY = 8 << 10
BODY = 128
# Many queues as 10 topics of many queues each: one consumer subscribing to thousands of
# topics spends its time in the group's rebalance, not in the polls this measures.
SPREAD_TOPICS = 10
# Titles of the docs page's sections this script owns in manual.json.
TITLES = ("Scale: topics", "Scale: commit-log files", "Scale: traffic over many queues")

PROFILES: Dict[str, Dict[str, Any]] = {
    "full": {"topics": [10, 1_000, 10_000], "files": [10, 100, 1_000, 5_000],
             "messages": 200_000, "spread_queues": 1_000, "repeat": 3},
    "quick": {"topics": [10, 200], "files": [10, 100], "messages": 5_000, "spread_queues": 100,
              "repeat": 1},
}


# ---- in the child ------------------------------------------------------------------------------

def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _store_maps(root: str) -> int:
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
        return sum(1 for line in f if root in line)


def _rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _topic(i: int) -> str:
    return f"t{i:05d}"


def _create(store: Any, names: List[str], queues: int = QUEUES) -> None:
    """All topics in batches when the store has them; one by one otherwise."""
    batch = getattr(store, "create_topics", None)
    if batch is not None:
        for i in range(0, len(names), 1_000):
            batch(names[i:i + 1_000], queues)
    else:
        for name in names:
            store.create_topic(name, queues)


def build_topics(path: str, n: int) -> Dict[str, Any]:
    import mqlite

    t0 = time.perf_counter()
    with mqlite.open(path) as store:
        names = [_topic(i) for i in range(n)]
        _create(store, names)
        producer = store.producer()
        body = b"x" * BODY
        for name in names:
            for q in range(QUEUES):
                producer.send(mqlite.Message(name, body), queue_id=q)
    return {"build_s": time.perf_counter() - t0}


def build_logs(path: str, n: int) -> Dict[str, Any]:
    import mqlite

    t0 = time.perf_counter()
    log_dir = os.path.join(path, "commitlog")
    sent = 0
    with mqlite.open(path, commit_log_file_size=LOG_FILE_SIZE) as store:
        store.create_topic("log", QUEUES)
        producer = store.producer()
        body = b"y" * LOG_BODY
        while len(os.listdir(log_dir)) < n:
            for _ in range(64):
                producer.send(mqlite.Message("log", body), queue_id=sent % QUEUES)
                sent += 1
    return {"build_s": time.perf_counter() - t0, "messages": sent,
            "log_files": len(os.listdir(log_dir))}


def probe(path: str, kind: str) -> Dict[str, Any]:
    """Opens the store, then reads every queue from its start; the store's figures."""
    import mqlite

    base = _fds()
    t0 = time.perf_counter()
    store = mqlite.open(path)
    out: Dict[str, Any] = {"open_ms": (time.perf_counter() - t0) * 1000}
    out["fds_open"] = _fds() - base
    out["maps_open"] = _store_maps(path)
    out["rss_open_kib"] = _rss_kib()
    max_fds, max_maps, read = out["fds_open"], out["maps_open"], 0
    try:
        queues = [mq for t in store.topics() for mq in store.queues(t.name)]
        for i, mq in enumerate(queues):
            offset, end = store.offsets(mq)
            while offset < end:
                result = store.read_result(mq, offset, 256)
                read += len(result.messages)
                offset = result.next_offset
                if kind == "logs" or i % 100 == 0:
                    max_fds = max(max_fds, _fds() - base)
                    max_maps = max(max_maps, _store_maps(path))
        out.update(read=read, fds_max=max_fds, maps_max=max_maps, rss_read_kib=_rss_kib())
    finally:
        store.close()
    return out


def rate(path: str, spread_queues: int, messages: int) -> Dict[str, Any]:
    import mqlite

    spread = spread_queues > 0
    topics = [_topic(i) for i in range(SPREAD_TOPICS)] if spread else ["one"]
    queues = spread_queues if spread else QUEUES
    body = b"z" * BODY
    with mqlite.open(path) as store:
        _create(store, topics, queues)
        producer = store.producer()
        # A first message to every queue creates its file: not what the rate measures.
        for name in topics:
            for q in range(queues):
                producer.send(mqlite.Message(name, body), queue_id=q)
        first = len(topics) * queues
        msgs = [mqlite.Message(topics[i % len(topics)], body) for i in range(messages)]
        t0 = time.perf_counter()
        for m in msgs:
            producer.send(m)
        send_s = time.perf_counter() - t0
        total = first + messages
        consumer = store.pull_consumer(
            "scale_bench", consume_from=mqlite.ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            auto_commit=False, max_poll_messages=256)
        t0 = time.perf_counter()
        for name in topics:
            consumer.subscribe(name)
        subscribe_s = time.perf_counter() - t0
        got = polls = 0
        t0 = time.perf_counter()
        while got < total:
            batch = consumer.poll(timeout=1.0)
            if not batch:
                break
            got += len(batch)
            polls += 1
        poll_s = time.perf_counter() - t0
        consumer.close()
    return {"queues": len(topics) * queues, "messages": messages, "send_per_s": messages / send_s,
            "polled": got, "expected": total, "poll_per_s": got / poll_s if poll_s else 0.0,
            "polls": polls, "subscribe_s": subscribe_s}


CHILD_TASKS: Dict[str, Callable[..., Dict[str, Any]]] = {
    "build_topics": build_topics, "build_logs": build_logs, "probe": probe, "rate": rate,
}


def child_main(task: str, args: List[str]) -> int:
    parsed: List[Any] = [json.loads(a) for a in args]
    try:
        out = CHILD_TASKS[task](*parsed)
    except Exception as exc:  # noqa: BLE001 - recorded as the row's figure
        out = {"error": f"{type(exc).__name__}: {exc}"[:300],
               "errno": getattr(exc, "errno", None)}
    print(json.dumps(out))
    return 0


# ---- in the parent -----------------------------------------------------------------------------

def run_child(task: str, *args: Any, timeout: float = 3600) -> Dict[str, Any]:
    env = dict(os.environ)
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", task,
         *(json.dumps(a) for a in args)],
        capture_output=True, text=True, timeout=timeout, env=env, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": f"child exited {done.returncode}: {done.stderr.strip()[-300:]}"}
    result: Dict[str, Any] = json.loads(lines[-1])
    return result


def disk_kib(path: str) -> Dict[str, int]:
    """Allocated KiB (as ``du -s``) and apparent bytes of every file under ``path``."""
    blocks = apparent = files = 0
    for top, _, names in os.walk(path):
        for name in names:
            st = os.lstat(os.path.join(top, name))
            blocks += st.st_blocks
            apparent += st.st_size
            files += 1
    return {"disk_kib": blocks // 2, "apparent_bytes": apparent, "files": files}


def measure_store(workdir: str, builder: str, n: int, kind: str,
                  log: Callable[[str], None]) -> Dict[str, Any]:
    where = tempfile.mkdtemp(prefix="mqlite-scale-", dir=workdir)
    path = os.path.join(where, "store")
    try:
        row: Dict[str, Any] = {"n": n}
        row.update(run_child(builder, path, n))
        if "error" not in row:
            row.update(disk_kib(path))
            got = run_child("probe", path, kind)
            if "error" in got:
                row["error"] = "probe: " + got["error"]
            else:
                row.update(got)
        log(f"  {kind} n={n}: {json.dumps(row)}")
        return row
    finally:
        shutil.rmtree(where, ignore_errors=True)


def measure_rates(workdir: str, messages: int, spread_queues: int, repeat: int,
                  log: Callable[[str], None]) -> Dict[str, Any]:
    """``"4"``: one topic of 4 queues; ``"many"``: SPREAD_TOPICS x spread_queues queues."""
    runs: Dict[str, List[Dict[str, Any]]] = {"4": [], "many": []}
    for r in range(repeat):
        for key, spread in (("4", 0), ("many", spread_queues)):
            where = tempfile.mkdtemp(prefix="mqlite-scale-", dir=workdir)
            try:
                got = run_child("rate", os.path.join(where, "store"), spread, messages)
            finally:
                shutil.rmtree(where, ignore_errors=True)
            log(f"  rate {key} queues, run {r + 1}: {json.dumps(got)}")
            runs[key].append(got)
    summary: Dict[str, Any] = {"runs": runs}
    for key, results in runs.items():
        ok = [x for x in results if "error" not in x]
        summary[key] = {
            "send_per_s": [x["send_per_s"] for x in ok],
            "poll_per_s": [x["poll_per_s"] for x in ok],
            "complete": all(x["polled"] == x["expected"] for x in ok) and len(ok) == repeat,
            "errors": [x["error"] for x in results if "error" in x],
        }
    return summary


# ---- the docs page's sections ------------------------------------------------------------------

def _n(x: float) -> str:
    return f"{x:,.0f}"


def _mib(kib: float) -> str:
    return f"{kib / 1024:,.1f}"


def _rate(values: List[float]) -> str:
    if not values:
        return "failed"
    med = statistics.median(values)
    text = f"{med / 1000:,.0f} k" if med < 1e6 else f"{med / 1e6:.2f} M"
    if len(values) > 1:
        text += f" ({min(values) / 1000:,.0f} k–{max(values) / 1000:,.0f} k)"
    return text


def _store_rows(rows: List[Dict[str, Any]]) -> List[List[str]]:
    out = []
    for r in rows:
        if "error" in r or "open_ms" not in r:
            out.append([_n(r["n"]), "failed: " + str(r.get("error", "?")).replace("|", "/")]
                       + [""] * 8)
            continue
        out.append([
            _n(r["n"]), f"{r['build_s']:.1f}", f"{r['open_ms']:.1f}",
            f"{r['fds_open']} / {r['fds_max']}", f"{r['maps_open']} / {r['maps_max']}",
            _mib(r["rss_open_kib"]), _mib(r["rss_read_kib"]), _mib(r["disk_kib"]),
            _n(r["files"]), _n(r["read"]),
        ])
    return out


STORE_COLUMNS = ["{what}", "build s", "open ms", "store fds: open / max reading",
                 "store mappings: open / max reading", "RSS MiB after open",
                 "RSS MiB after reading", "disk MiB", "files", "messages read"]


def sections(data: Dict[str, Any]) -> List[Dict[str, Any]]:
    date = data["date"]
    command = data["command"]
    load = " ".join(data["machine"].get("loadavg_start", []))
    machine = (f"the same {data['machine'].get('cpus')}-vCPU VM type, stores on "
               f"{data['machine'].get('workdir_fs', {}).get('fstype', '?')}, shared with other "
               f"work (load average at start {load})")
    cols = lambda what: [c.format(what=what) for c in STORE_COLUMNS]  # noqa: E731
    spread = data["rates"]
    four, many = spread["4"], spread["many"]
    ratio_rows = []
    for label, key in (("`Producer.send`", "send_per_s"),
                       ("`PullConsumer.poll(max_messages=256)`", "poll_per_s")):
        a, b = four[key], many[key]
        ratio = (f"{statistics.median(b) / statistics.median(a):.2f}" if a and b else "")
        ratio_rows.append([label, _rate(a), _rate(b), ratio])
    many_queues = SPREAD_TOPICS * data["config"]["spread_queues"]
    per_poll = {k: [x["polled"] / x["polls"] for x in spread["runs"][k]
                    if "error" not in x and x.get("polls")] for k in ("4", "many")}
    notes = []
    if per_poll["4"] and per_poll["many"]:
        notes.append(
            f"Messages per poll (median): {statistics.median(per_poll['4']):.0f} from 4 queues, "
            f"{statistics.median(per_poll['many']):.1f} from {_n(many_queues)}. Subscribing the "
            f"{_n(many_queues)} queues took "
            f"{statistics.median(x['subscribe_s'] for x in spread['runs']['many'] if 'error' not in x):.1f} s "
            "(median).")
    if not (four["complete"] and many["complete"]):
        notes.append("Not every message was polled back in some run: "
                     f"{four['errors'] + many['errors']}.")
    return [
        {"title": TITLES[0], "date": date, "command": command, "machine": machine,
         "setup": "A store of N topics x 4 queues, one 128 B message in every queue, closed "
                  "cleanly; a fresh process opens it and reads every queue once. Store "
                  "descriptors are those over the process's count before the open; mappings "
                  "are lines of /proc/self/maps naming a store file; disk is allocated blocks "
                  "(`du`). Build: topics created, then one send per queue.",
         "columns": cols("topics"), "rows": _store_rows(data["topics"]),
         "notes": []},
        {"title": TITLES[1], "date": date, "command": command, "machine": machine,
         "setup": "A store of N commit-log files of 64 KiB (the smallest size; 8 KiB bodies, one "
                  "topic of 4 queues), closed cleanly; a fresh process opens it and reads every "
                  "message from the start. Figures as in the topics table.",
         "columns": cols("commit-log files"), "rows": _store_rows(data["files"]),
         "notes": []},
        {"title": TITLES[2], "date": date, "command": command, "machine": machine,
         "setup": f"{_n(data['config']['messages'])} messages of 128 B sent with "
                  f"`Producer.send(Message)` round robin over {SPREAD_TOPICS} topics x "
                  f"{_n(data['config']['spread_queues'])} queues, against "
                  "the same messages to one topic of 4 queues, then read back by one "
                  "`PullConsumer` from the first offset. A first message to every queue (which "
                  "creates its file) and the subscription are outside the timed loops. msgs/s: "
                  f"median (min–max) of {data['config']['repeat']} interleaved runs. Goal: the "
                  f"{_n(many_queues)}-queue rates within 2x of the 4-queue ones (ratio at least "
                  "0.5).",
         "columns": ["rate", "4 queues msgs/s", f"{_n(many_queues)} queues msgs/s",
                     f"{_n(many_queues)} / 4"],
         "rows": ratio_rows, "notes": notes},
    ]


def update_docs(data: Dict[str, Any], results_dir: str) -> None:
    import docs_page

    path = os.path.join(results_dir, "manual.json")
    with open(path, encoding="utf-8") as f:
        manual = json.load(f)
    kept = [s for s in manual["sections"] if s["title"] not in TITLES]
    manual["sections"] = kept + sections(data)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manual, f, indent=2, ensure_ascii=False)
        f.write("\n")
    docs_page.write(results_dir)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes: a smoke run")
    ap.add_argument("--out", default=RESULTS, help="where scale.json goes (default: %(default)s)")
    ap.add_argument("--workdir", default=None, help="where the stores are built")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args.child[0], args.child[1:])
    import report

    profile = "quick" if args.quick else "full"
    cfg = PROFILES[profile]
    workdir = args.workdir or tempfile.gettempdir()
    os.makedirs(workdir, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    started = time.monotonic()
    machine = report.machine_info(workdir)
    shown = ["python", "benches/python/scale.py"] + (["--quick"] if args.quick else [])
    data: Dict[str, Any] = {
        "schema": 1, "profile": profile, "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(shown), "machine": machine, "config": cfg,
        "topics": [], "files": [],
    }
    log("topics:")
    for n in cfg["topics"]:
        data["topics"].append(measure_store(workdir, "build_topics", n, "topics", log))
    log("commit-log files:")
    for n in cfg["files"]:
        data["files"].append(measure_store(workdir, "build_logs", n, "logs", log))
    log("rates:")
    data["rates"] = measure_rates(workdir, cfg["messages"], cfg["spread_queues"], cfg["repeat"],
                                  log)
    data["elapsed_s"] = time.monotonic() - started
    with open(os.path.join(args.out, "scale.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    if os.path.abspath(args.out) == os.path.abspath(RESULTS):
        update_docs(data, args.out)
    log(f"done in {data['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
