"""The key index: lookup latency with many indexed keys and with a crowded hash slot, and what
the index costs a producer.

    python benches/python/index.py [--repeat 3] [--json out.json]
    python benches/python/index.py --quick      # small sizes, one repetition: checks that it runs

Workloads (each in a fresh store under --workdir, the default open, flush="async"):

- ``lookup``: ``--keys`` messages (1,000,000), each with a key of its own, sent with
  ``send_batch`` and indexed; then ``--lookups`` (10,000) ``Store.find_by_key`` of random keys
  (one hit each) and as many ``Store.get`` by unique id: latency p50 / p99 in microseconds.
- ``slot``: ``--slot-n`` messages (100) whose keys are distinct but share one Java hash (keys
  made of "Aa" / "BB" blocks), so they share one hash chain; ``find_by_key`` of each of them
  (one hit, found among the others on the chain and re-checked): p50 / p99 in microseconds.
- ``send cost``: ``Producer.send`` and ``Producer.send_batch`` (``--batch`` messages of two keys
  each) into a store with the index on and one with it off, ``--send-n`` (100,000) messages each,
  in chunks of 1,000 interleaved between the two stores: msg/s each and the ratio on / off.

Reported: the median over ``--repeat`` runs. Latency depends on the machine being quiet.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

import mqlite
from mqlite import Message

TOPIC = "Bench"
CHUNK = 1_000


def percentiles(samples_ns: list[int]) -> tuple[float, float]:
    s = sorted(samples_ns)
    return s[len(s) // 2] / 1000, s[min(len(s) - 1, (len(s) * 99) // 100)] / 1000


def indexed(store: mqlite.Store) -> None:
    while store.index_status()["lag"] != 0:
        time.sleep(0.01)  # the index thread publishes its progress; nothing else to wait on


def lookup(work: str, n: int, lookups: int, seed: int) -> dict[str, Any]:
    path = tempfile.mkdtemp(dir=work)
    try:
        with mqlite.open(path) as store:
            p = store.producer()
            ids: list[str] = []
            for start in range(0, n, CHUNK):
                msgs = [Message(TOPIC, b"x" * 64, keys=f"key-{i}") for i in range(start, min(n, start + CHUNK))]
                ids.extend(r.msg_id for r in p.send_batch(msgs, queue_id=0))
            t0 = time.perf_counter()
            indexed(store)
            catch_up = time.perf_counter() - t0
            rng = random.Random(seed)
            by_key, by_id = [], []
            for _ in range(lookups):
                i = rng.randrange(n)
                t = time.perf_counter_ns()
                found = store.find_by_key(TOPIC, f"key-{i}")
                by_key.append(time.perf_counter_ns() - t)
                assert len(found) == 1
                t = time.perf_counter_ns()
                store.get(ids[i])
                by_id.append(time.perf_counter_ns() - t)
            files = store.index_status()["files"]
        (k50, k99), (i50, i99) = percentiles(by_key), percentiles(by_id)
        return {"n": n, "files": files, "key_p50_us": k50, "key_p99_us": k99, "id_p50_us": i50,
                "id_p99_us": i99, "catch_up_s": catch_up}
    finally:
        shutil.rmtree(path, ignore_errors=True)


def colliding_keys(count: int) -> list[str]:
    """``count`` distinct keys with one Java hash: every string of "Aa" / "BB" blocks of one
    length hashes alike (Java's hash of "Aa" equals that of "BB")."""
    blocks = max(1, (count - 1).bit_length())
    return ["".join(p) for p in itertools.islice(itertools.product(("Aa", "BB"), repeat=blocks), count)]


def slot(work: str, n: int, rounds: int) -> dict[str, Any]:
    path = tempfile.mkdtemp(dir=work)
    try:
        with mqlite.open(path) as store:
            keys = colliding_keys(n)
            p = store.producer()
            for k in keys:
                p.send(Message(TOPIC, k.encode(), keys=k))
            indexed(store)
            samples = []
            for _ in range(rounds):
                for k in keys:
                    t = time.perf_counter_ns()
                    found = store.find_by_key(TOPIC, k)
                    samples.append(time.perf_counter_ns() - t)
                    assert [m.body for m in found] == [k.encode()]
        p50, p99 = percentiles(samples)
        return {"n": n, "p50_us": p50, "p99_us": p99}
    finally:
        shutil.rmtree(path, ignore_errors=True)


def send_cost(work: str, n: int, batch: int) -> dict[str, Any]:
    paths = {on: tempfile.mkdtemp(dir=work) for on in (True, False)}
    try:
        stores = {on: mqlite.open(paths[on], index_enabled=on) for on in (True, False)}
        try:
            producers = {on: s.producer() for on, s in stores.items()}
            spent = {(on, kind): 0.0 for on in (True, False) for kind in ("send", "send_batch")}
            for start in range(0, n, CHUNK):
                for on in (True, False):
                    p = producers[on]
                    t = time.perf_counter()
                    for i in range(start, start + CHUNK):
                        p.send(Message(TOPIC, b"x" * 128, keys=[f"a{i}", f"b{i}"]))
                    spent[on, "send"] += time.perf_counter() - t
                    msgs = [Message(TOPIC, b"x" * 128, keys=[f"c{i}", f"d{i}"]) for i in range(start, start + CHUNK)]
                    t = time.perf_counter()
                    for j in range(0, CHUNK, batch):
                        p.send_batch(msgs[j:j + batch], queue_id=0)
                    spent[on, "send_batch"] += time.perf_counter() - t
            indexed(stores[True])
        finally:
            for s in stores.values():
                s.close()
        sent = (n + CHUNK - 1) // CHUNK * CHUNK
        out: dict[str, Any] = {"n": sent}
        for kind in ("send", "send_batch"):
            on, off = sent / spent[True, kind], sent / spent[False, kind]
            out[f"{kind}_on"], out[f"{kind}_off"], out[f"{kind}_ratio"] = on, off, on / off
        return out
    finally:
        for p in paths.values():
            shutil.rmtree(p, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--lookups", type=int, default=10_000)
    ap.add_argument("--slot-n", type=int, default=100)
    ap.add_argument("--slot-rounds", type=int, default=20)
    ap.add_argument("--send-n", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument("--quick", action="store_true", help="small sizes, one repetition")
    args = ap.parse_args(argv)
    if args.quick:
        args.keys, args.lookups, args.slot_rounds, args.send_n, args.repeat = 2_000, 200, 2, 2_000, 1
    seed = random.randrange(1 << 30) if args.seed is None else args.seed
    print(f"seed {seed}", file=sys.stderr)
    work = tempfile.mkdtemp(prefix="mqlite-index-", dir=args.workdir)
    runs: dict[str, list[dict[str, Any]]] = {"lookup": [], "slot": [], "send_cost": []}
    try:
        for rep in range(args.repeat):
            runs["lookup"].append(lookup(work, args.keys, args.lookups, seed + rep))
            runs["slot"].append(slot(work, args.slot_n, args.slot_rounds))
            runs["send_cost"].append(send_cost(work, args.send_n, args.batch))
            print(f"[{rep + 1}/{args.repeat}] key p50 {runs['lookup'][-1]['key_p50_us']:.0f} us; "
                  f"send on/off {runs['send_cost'][-1]['send_ratio']:.2f}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(name: str, key: str) -> float:
        return statistics.median(float(r[key]) for r in runs[name])

    print(f"\nKey index, median of {args.repeat}:")
    print("| workload | p50 | p99 |\n|---|---:|---:|")
    print(f"| find_by_key, {args.keys:,} keys indexed ({runs['lookup'][0]['files']} files) | "
          f"{med('lookup', 'key_p50_us'):.0f} us | {med('lookup', 'key_p99_us'):.0f} us |")
    print(f"| get(unique id), the same store | {med('lookup', 'id_p50_us'):.0f} us | "
          f"{med('lookup', 'id_p99_us'):.0f} us |")
    print(f"| find_by_key, {args.slot_n} keys sharing one hash | {med('slot', 'p50_us'):.0f} us | "
          f"{med('slot', 'p99_us'):.0f} us |")
    print("\n| producer call | index on | index off | on / off |\n|---|---:|---:|---:|")
    for kind in ("send", "send_batch"):
        print(f"| {kind} | {med('send_cost', f'{kind}_on'):,.0f} msg/s | {med('send_cost', f'{kind}_off'):,.0f} msg/s "
              f"| {med('send_cost', f'{kind}_ratio'):.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "seed": seed, "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
