"""Replay of the Python fuzz targets' saved inputs (``fuzz/corpus/<target>/``, past failures in
``fuzz/artifacts/<target>/``) and of seeded mutations of each: the checks live in
``pyfuzz.py``, which ``.ci/run`` also runs as a timed smoke."""

from __future__ import annotations

import random

import pytest

from pyfuzz import DICTIONARIES, TARGETS, inputs_of, mutate, run_check

MUTATIONS = {"selector_sql": 150, "consumer_offsets_json": 40, "broadcast_offsets_json": 40}


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_saved_inputs_pass(target: str) -> None:
    inputs = inputs_of(target)
    assert inputs, f"fuzz/corpus/{target} has no inputs"
    failed = [f"{p}:\n{err}" for p, data in inputs if (err := run_check(target, data))]
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_seeded_mutations_pass(target: str) -> None:
    rng = random.Random(f"replay:{target}")
    failed = []
    for path, data in inputs_of(target):
        for k in range(MUTATIONS[target]):
            m = mutate(data, rng, DICTIONARIES[target])
            if err := run_check(target, m):
                failed.append(f"mutation {k} of {path}: {m!r}\n{err}")
    assert not failed, "\n".join(failed[:5])
