"""Fuzz targets of the Python package, their checks, and a stable time-bounded driver.

The Python twin of ``tests/fuzz_corpus_replay.rs``: each target is a ``check(data: bytes)``
that raises AssertionError when an invariant breaks. ``tests/python/test_fuzz_corpus.py``
replays every saved input under ``fuzz/corpus/<target>/`` (and ``fuzz/artifacts/<target>/``)
plus seeded mutations of each; ``.ci/run``'s fuzz smoke section runs this file::

    python tests/python/pyfuzz.py --seconds 30            # every target, 30 s each
    python tests/python/pyfuzz.py --seconds 5 selector_sql --seed 7

Targets and invariants:

- ``selector_sql``: the input is ``expression \\0 name=value \\0 name=value ...`` (UTF-8, bad
  bytes replaced). ``compile_sql`` and ``MessageSelector.by_sql`` either both compile or both
  raise ``FilterExpressionError`` (nothing else, whatever the text); a compiled filter's
  ``matches`` returns a bool for every property map and never raises; the bare compiled
  function agrees with it when it returns (it may raise only ValueError, for a number of more
  digits than CPython converts); an expression and its negation never both match.
- ``consumer_offsets_json`` and ``broadcast_offsets_json``: the input is the file
  ``config/consumerOffset.json`` (or a broadcasting client's ``config/broadcast/<group>/
  <client>.json``). ``load`` returns a well-typed table (queue ids in ``[0, 2**31)``, offsets
  in ``[0, 2**63)``, keys ``topic@group``) or raises ConfigFileError naming the file; the same
  bytes as the ``.bak`` behind an undecodable main file give the same table; ``update`` on a
  file that does not load raises ConfigFileError and leaves the file's bytes unchanged, and on
  one that loads keeps every other entry and adds the new one.

Not coverage-guided: stacked byte mutations (flips, interesting values, truncation,
extension), splices, and insertions from a per-target dictionary, over a bounded pool of recent
mutants. A failing input is saved under ``fuzz/artifacts/<target>/`` and the run fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from mqlite import ConfigFileError, FilterExpressionError, MessageSelector
from mqlite.offsets import OffsetFile, broadcast_offsets, group_offsets
from mqlite.selector import compile_sql

ROOT = Path(__file__).resolve().parents[2]
FUZZ = ROOT / "fuzz"

# ---------------------------------------------------------------------------------------------
# selector_sql


def split_selector_input(data: bytes) -> tuple[str, dict[str, str]]:
    """The expression and the property map an input encodes."""
    text = data.decode("utf-8", "replace")
    expr, *pairs = text.split("\0")
    props: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if sep:
            props[name] = value
    return expr, props


def check_selector(data: bytes) -> None:
    expr, props = split_selector_input(data)
    try:
        fn = compile_sql(expr)
    except FilterExpressionError:
        try:
            MessageSelector.by_sql(expr)
        except FilterExpressionError:
            return
        raise AssertionError(f"by_sql accepted what compile_sql rejects: {expr!r}") from None
    selector = MessageSelector.by_sql(expr)
    verdict = selector.matches(props)
    assert type(verdict) is bool, f"matches returned {verdict!r}"
    assert selector.matches(props) is verdict, "matches is not deterministic"
    try:
        direct = fn(props)
    except ValueError:
        direct = None  # a property of more digits than int() converts: matches says no
    if direct is not None:
        assert direct is verdict, f"compile_sql's function says {direct}, matches {verdict}"
    try:
        negated = MessageSelector.by_sql(f"NOT ({expr})")
    except FilterExpressionError:
        return  # one level deeper than MAX_NESTING
    assert not (verdict and negated.matches(props)), f"{expr!r} and its negation both match {props!r}"


# ---------------------------------------------------------------------------------------------
# consumer_offsets_json, broadcast_offsets_json

_MAX_QUEUE_ID = (1 << 31) - 1
_MAX_OFFSET = (1 << 63) - 1
_DAMAGED = b'{"offsetTable": ['


def _offsets_check(data: bytes, make: Callable[[Path], OffsetFile]) -> None:
    with tempfile.TemporaryDirectory(prefix="mqlite-pyfuzz-") as tmp:
        root = Path(tmp)
        (root / "config").mkdir()
        f = make(root)
        f.path.parent.mkdir(parents=True, exist_ok=True)
        bak = f.path.with_name(f.path.name + ".bak")
        f.path.write_bytes(data)
        try:
            table = f.load()
        except ConfigFileError as e:
            assert e.path == str(f.path), f"the error names {e.path}, not {f.path}"
            # An update never writes over a file that does not load: it is refused, or (a
            # consumer-offsets commit, which writes only its group's own file) leaves it as it
            # is, and the table keeps failing to load rather than hiding the damage.
            try:
                f.update("t@g", {0: 1})
            except ConfigFileError:
                pass
            else:
                try:
                    f.load()
                except ConfigFileError:
                    pass
                else:
                    raise AssertionError("an update made a damaged table load") from None
            assert f.path.read_bytes() == data, "update changed a file it could not read"
            assert not bak.exists(), "update rotated a file it could not read into the .bak"
            return
        for key, queues in table.items():
            assert isinstance(key, str) and "@" in key, key
            for q, o in queues.items():
                assert type(q) is int and 0 <= q <= _MAX_QUEUE_ID, q
                assert type(o) is int and 0 <= o <= _MAX_OFFSET, o
        if data.strip():
            # The same bytes behind a damaged main file stand in for it.
            f.path.write_bytes(_DAMAGED)
            bak.write_bytes(data)
            assert f.load() == table, "the .bak gave another table than the file itself"
            bak.unlink()
            f.path.write_bytes(data)
        # An update keeps every other entry and adds its own.
        f.update("fuzz-topic@fuzz-group", {3: 42})
        after = f.load()
        want = dict(table)
        want["fuzz-topic@fuzz-group"] = {**table.get("fuzz-topic@fuzz-group", {}), 3: 42}
        assert after == want, f"update lost entries: {table!r} -> {after!r}"
        # What the update wrote is strict JSON: the group's own file where offsets are kept per
        # group (consumer offsets), else the file itself.
        groups = getattr(f, "groups", None)
        written = groups / "fuzz-group.json" if groups is not None else f.path
        json.loads(written.read_bytes())


def check_consumer_offsets(data: bytes) -> None:
    _offsets_check(data, lambda root: group_offsets(root, durable=False))


def check_broadcast_offsets(data: bytes) -> None:
    _offsets_check(data, lambda root: broadcast_offsets(root, "fuzz-group", "fuzz-client", durable=False))


# ---------------------------------------------------------------------------------------------
# targets, inputs, mutations

Check = Callable[[bytes], None]

TARGETS: dict[str, Check] = {
    "selector_sql": check_selector,
    "consumer_offsets_json": check_consumer_offsets,
    "broadcast_offsets_json": check_broadcast_offsets,
}

_SQL_WORDS = [
    b" AND ", b" OR ", b" NOT ", b" BETWEEN ", b" IN ", b" IS ", b" NULL", b" TRUE", b" FALSE",
    b" CONTAINS ", b" STARTSWITH ", b" ENDSWITH ", b"(", b")", b",", b"'", b"''", b"=", b"<>",
    b"!=", b"<", b"<=", b">", b">=", b"-", b".", b"e", b"1e308", b"9" * 40, b"0.5", b"a", b"TAGS",
    b"\0a=1", b"\0a=x", b"\0b=2.5", b"\0a=true", b"\0a=" + b"9" * 5000, b"(" * 120, b"NOT " * 120,
]
_JSON_WORDS = [
    b"{", b"}", b"[", b"]", b'"', b":", b",", b"null", b"true", b"-1", b"0", b"1e400", b"1.5",
    str(1 << 63).encode(), str(1 << 31).encode(), b"9" * 5000, b'"offsetTable"', b'"t@g"',
    b'"0"', b"@", b"\\u0000", b"[" * 3000, b"\xff", b'"dataVersion": {"counter": -1}',
]
DICTIONARIES: dict[str, list[bytes]] = {
    "selector_sql": _SQL_WORDS,
    "consumer_offsets_json": _JSON_WORDS,
    "broadcast_offsets_json": _JSON_WORDS,
}


def inputs_of(target: str) -> list[tuple[Path, bytes]]:
    """Every saved input of ``target``: its corpus, then past failures."""
    out = []
    for kind in ("corpus", "regressions", "artifacts"):
        d = FUZZ / kind / target
        if d.is_dir():
            out += [(p, p.read_bytes()) for p in sorted(d.iterdir()) if p.is_file()]
    return out


# Mutants are cut to this length (libFuzzer's -max_len of the smoke run), so that stacked
# insertions do not grow inputs without bound.
MAX_LEN = 65536


def mutate(data: bytes, rng: random.Random, words: list[bytes]) -> bytes:
    """One to four byte-level or dictionary mutations of ``data``, at most MAX_LEN bytes."""
    d = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        if op == 0 and d:
            d[rng.randrange(len(d))] ^= 1 << rng.randrange(8)
        elif op == 1 and d:
            d[rng.randrange(len(d))] = rng.choice(b"\x00\xff\x7f\x80'\"(){}[]0")
        elif op == 2 and d:
            del d[rng.randrange(len(d) + 1):]
        elif op == 3 and d:
            at = rng.randrange(len(d))
            del d[at:at + rng.randint(1, 8)]
        elif op == 4:
            d += bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            at = rng.randrange(len(d) + 1)
            d[at:at] = rng.choice(words)
    return bytes(d[:MAX_LEN])


def run_check(target: str, data: bytes) -> str | None:
    """None when ``data`` passes ``target``'s check, else the failure's traceback."""
    try:
        TARGETS[target](data)
    except (MemoryError, KeyboardInterrupt):
        raise
    except BaseException:  # noqa: BLE001 - any escape is a finding
        return traceback.format_exc()
    return None


def save_artifact(target: str, data: bytes) -> Path:
    d = FUZZ / "artifacts" / target
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"crash-{hashlib.sha1(data).hexdigest()[:16]}"
    p.write_bytes(data)
    return p


def fuzz(target: str, seconds: float, seed: int, pool_size: int = 256) -> tuple[int, list[str]]:
    """Runs ``target`` for ``seconds``; returns (executions, failures)."""
    rng = random.Random(f"{seed}:{target}")
    seeds = [b for _, b in inputs_of(target)]
    assert seeds, f"fuzz/corpus/{target} has no inputs"
    pool = list(seeds)
    words = DICTIONARIES[target]
    execs, failures = 0, []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and len(failures) < 5:
        data = rng.choice(pool)
        if rng.randrange(8) == 0:
            other = rng.choice(pool)
            data = data[: rng.randint(0, len(data))] + other[rng.randint(0, len(other)):]
        data = mutate(data, rng, words)
        execs += 1
        failure = run_check(target, data)
        if failure is not None:
            failures.append(f"{save_artifact(target, data)}:\n{failure}")
            continue
        if len(pool) < len(seeds) + pool_size:
            pool.append(data)
        else:
            pool[len(seeds) + rng.randrange(pool_size)] = data
    return execs, failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*", help=f"default: all of {', '.join(TARGETS)}")
    ap.add_argument("--seconds", type=float, default=30.0, help="time per target")
    ap.add_argument("--seed", type=int, default=None, help="default: from the clock (printed)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else time.time_ns() % (1 << 32)
    names = args.targets or list(TARGETS)
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        ap.error(f"unknown targets {unknown}")
    # The warning a filter logs for each message it cannot evaluate is expected here.
    logging.getLogger("mqlite.consumer").setLevel(logging.ERROR)
    print(f"python fuzz smoke: {args.seconds:g} s per target, --seed {seed}")
    failed = 0
    for name in names:
        started = time.monotonic()
        execs, failures = fuzz(name, args.seconds, seed)
        took = time.monotonic() - started
        print(f"python fuzz smoke: {name:<24} {execs:>9} execs in {took:5.1f} s "
              f"({execs / took:.0f}/s), {len(failures)} failing")
        for f in failures:
            print(f, file=sys.stderr)
        failed += len(failures)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
