"""``mqlite bench produce|consume``: a quick throughput and latency figure for a store on this
machine (a temporary store unless a path is given), with a progress bar and a result table."""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from mqlite.cli._common import OK, open_store, print_json, print_table, require_topic
from mqlite.cli._offsets import positive

if TYPE_CHECKING:
    from rich.progress import Progress


def _percentiles(latencies: list[float]) -> dict[str, float]:
    """p50, p99, p99.9 and max in microseconds (nearest rank)."""
    if not latencies:
        return {}
    ordered = sorted(latencies)
    last = len(ordered) - 1
    out = {f"p{q}_us": ordered[min(last, int(q / 100 * len(ordered)))] * 1e6 for q in (50, 99, 99.9)}
    out["max_us"] = ordered[-1] * 1e6
    return {k: round(v, 1) for k, v in out.items()}


@contextmanager
def _progress(total: int, label: str, quiet: bool) -> Iterator[Progress | None]:
    if quiet:
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        bar.add_task(label, total=total)
        yield bar


def _report(args: argparse.Namespace, kind: str, n: int, size: int, seconds: float,
            latencies: list[float]) -> None:
    result: dict[str, Any] = {
        "benchmark": kind, "messages": n, "body_bytes": size, "seconds": round(seconds, 3),
        "msg_per_s": round(n / seconds) if seconds > 0 else None,
        "mb_per_s": round(n * size / seconds / 1e6, 2) if seconds > 0 else None,
    }
    result.update(_percentiles(latencies))
    if args.json:
        print_json(result)
    else:
        print_table(f"bench {kind}", ["metric", "value"], list(result.items()))


@contextmanager
def _store_path(path: str | None) -> Iterator[str]:
    if path is not None:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="mqlite-bench-") as tmp:
        yield f"{tmp}/store"


def _produce(args: argparse.Namespace) -> int:
    from mqlite.message import Message

    body = b"x" * args.size
    latencies: list[float] = []
    with _store_path(args.path) as path, open_store(path, write=True, create=True) as store:
        store.create_topic(args.topic, args.queues)
        with store.producer() as producer, _progress(args.messages, "produce", args.json) as bar:
            step = max(1, args.messages // 100)
            start = time.perf_counter()
            for i in range(args.messages):
                t = time.perf_counter()
                producer.send(Message(args.topic, body))
                latencies.append(time.perf_counter() - t)
                if bar is not None and i % step == 0:
                    bar.update(bar.task_ids[0], completed=i)
            seconds = time.perf_counter() - start
    _report(args, "produce", args.messages, args.size, seconds, latencies)
    return OK


def _consume(args: argparse.Namespace) -> int:
    latencies: list[float] = []
    n = size = 0
    with open_store(args.path) as store:
        require_topic(store, args.topic)
        queues = store.queues(args.topic)
        total = sum(high - low for low, high in (store.offsets(mq) for mq in queues))
        with _progress(total, "consume", args.json) as bar:
            start = time.perf_counter()
            for mq in queues:
                offset, high = store.offsets(mq)
                while offset < high:
                    t = time.perf_counter()
                    got = store.read_result(mq, offset, 32)
                    latencies.append(time.perf_counter() - t)
                    for m in got.messages:
                        size += len(m.raw_body)
                    n += len(got.messages)
                    if got.next_offset <= offset:
                        break
                    offset = got.next_offset
                    if bar is not None:
                        bar.update(bar.task_ids[0], completed=n)
            seconds = time.perf_counter() - start
    _report(args, "consume (per read of up to 32)", n, size // n if n else 0, seconds, latencies)
    return OK


def add(sub: Any, fmt: Any) -> None:
    bench = sub.add_parser("bench", formatter_class=fmt, help="quick throughput and latency figures")
    verbs = bench.add_subparsers(dest="verb", required=True, prog="mqlite bench")
    produce = verbs.add_parser("produce", formatter_class=fmt,
                               help="send N messages one by one (a temporary store by default)")
    produce.add_argument("path", nargs="?", default=None, help="store directory (default: temporary)")
    produce.add_argument("--topic", default="bench", help="topic (created if missing; default bench)")
    produce.add_argument("-n", "--messages", type=positive, default=100_000, help="default 100000")
    produce.add_argument("-s", "--size", type=positive, default=128, help="body bytes (default 128)")
    produce.add_argument("-q", "--queues", type=positive, default=4, help="queues of a new topic")
    produce.add_argument("--json", action="store_true", help="print JSON (no progress bar)")
    produce.set_defaults(func=_produce)
    consume = verbs.add_parser("consume", formatter_class=fmt,
                               help="read every message of a topic from the beginning")
    consume.add_argument("path", help="store directory")
    consume.add_argument("--topic", default="bench", help="topic (default bench)")
    consume.add_argument("--json", action="store_true", help="print JSON (no progress bar)")
    consume.set_defaults(func=_consume)
