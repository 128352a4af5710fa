#!/usr/bin/env bash
# Fuzz smoke: every fuzz target for a fixed time, Rust targets first, then the Python ones.
#
#   ./scripts/fuzz-smoke.sh              # 30 s per target (MQLITE_FUZZ_SECONDS)
#   ./scripts/fuzz-smoke.sh 120          # a longer run; executions per target are printed
#   MQLITE_FUZZ_ENGINE=stable ./scripts/fuzz-smoke.sh   # the stable driver even with nightly
#
# Rust targets (fuzz/fuzz_targets/*.rs) run under cargo-fuzz (libFuzzer, coverage-guided,
# AddressSanitizer) when a nightly toolchain is installed, installing cargo-fuzz from crates.io
# if it is missing. Without nightly they run under the stable driver (`fuzz_smoke` in
# tests/fuzz_checks/smoke.rs): the same checks on seeded mutants, not coverage-guided. libFuzzer
# grows its corpus in a temporary directory (the committed corpus is only read). Any crashing
# input lands in fuzz/artifacts/<target>/, which the corpus replays run from then on, and fails
# the script. Python targets: tests/python/pyfuzz.py.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"

PER_TARGET="${1:-${MQLITE_FUZZ_SECONDS:-30}}"
ENGINE="${MQLITE_FUZZ_ENGINE:-auto}"
if [[ "$ENGINE" == auto ]]; then
    if rustup run nightly rustc --version >/dev/null 2>&1; then ENGINE=libfuzzer; else ENGINE=stable; fi
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
SUMMARY="$WORK/summary"

case "$ENGINE" in
libfuzzer)
    if ! cargo fuzz --version >/dev/null 2>&1; then
        mq_step "installing cargo-fuzz from crates.io"
        cargo install --locked cargo-fuzz
    fi
    mq_step "cargo +nightly fuzz build (libFuzzer, AddressSanitizer)"
    cargo +nightly fuzz build
    for target in $(cargo +nightly fuzz list); do
        mq_step "cargo fuzz run $target (${PER_TARGET} s)"
        mkdir -p "$WORK/corpus/$target"
        seeds=("fuzz/corpus/$target")
        [[ -d "fuzz/regressions/$target" ]] && seeds+=("fuzz/regressions/$target")
        # Limits: inputs of at most 64 KiB (the largest seed is 4 KiB), none slower than 10 s, no
        # allocation over 64 MiB (a corrupted length must not allocate gigabytes).
        if ! cargo +nightly fuzz run "$target" "$WORK/corpus/$target" "${seeds[@]}" -- \
            -max_total_time="$PER_TARGET" -max_len=65536 -timeout=10 -rss_limit_mb=1024 \
            -malloc_limit_mb=64 -print_final_stats=1 >"$WORK/$target.log" 2>&1; then
            grep -m1 -A4 "panicked at" "$WORK/$target.log" || true
            tail -n 40 "$WORK/$target.log"
            echo "error: fuzz target $target failed; the input is under fuzz/artifacts/$target/" >&2
            exit 1
        fi
        execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$WORK/$target.log")"
        edges="$(grep -o 'cov: [0-9]*' "$WORK/$target.log" | tail -n1 | cut -d' ' -f2)"
        printf '%-28s libFuzzer  %12s execs in %s s, %s coverage edges, corpus %s -> %s\n' \
            "$target" "$execs" "$PER_TARGET" "${edges:-?}" \
            "$(find "fuzz/corpus/$target" -type f | wc -l)" \
            "$(($(find "$WORK/corpus/$target" -type f | wc -l) + $(find "fuzz/corpus/$target" -type f | wc -l)))" |
            tee -a "$SUMMARY"
    done
    ;;
stable)
    mq_step "fuzz_smoke: the stable driver, ${PER_TARGET} s per Rust target (no nightly toolchain)"
    # The test profile the other tiers already built (debug: overflow checks on, no extra
    # compile); MQLITE_FUZZ_RELEASE=1 for more executions per second.
    profile=()
    [[ "${MQLITE_FUZZ_RELEASE:-0}" == 1 ]] && profile=(--release)
    MQLITE_FUZZ_SECONDS="$PER_TARGET" cargo test "${profile[@]}" --test fuzz_corpus_replay fuzz_smoke \
        -- --ignored --nocapture | tee "$WORK/stable.log"
    grep '^fuzz smoke: .* execs' "$WORK/stable.log" >>"$SUMMARY"
    ;;
*)
    echo "MQLITE_FUZZ_ENGINE must be auto, libfuzzer or stable, not $ENGINE" >&2
    exit 2
    ;;
esac

mq_step "python fuzz targets, ${PER_TARGET} s each"
"$MQ_PY" -c "import mqlite._core" 2>/dev/null || mq_build
py_seed=()
[[ -n "${MQLITE_FUZZ_SEED:-}" ]] && py_seed=(--seed "$MQLITE_FUZZ_SEED")
"$MQ_PY" tests/python/pyfuzz.py --seconds "$PER_TARGET" "${py_seed[@]}" | tee "$WORK/python.log"
grep 'execs' "$WORK/python.log" >>"$SUMMARY"

mq_step "fuzz smoke summary (${PER_TARGET} s per target)"
cat "$SUMMARY"
