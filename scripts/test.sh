#!/usr/bin/env bash
# Run the tests of one tier (CONTRIBUTING.md, "Test tiers").
#
#   ./scripts/test.sh                 # what CI runs: fast + reliability + scale
#   ./scripts/test.sh fast            # unit and integration tests (a few minutes)
#   ./scripts/test.sh reliability     # crash loop, power loss, state machines, fault injection
#   ./scripts/test.sh soak            # the reliability suites at soak size (long)
#   ./scripts/test.sh scale           # 10,000 topics, thousands of files and queues, ulimit -n 256
#   ./scripts/test.sh perf            # timing, RSS, scheduler and benchmark-smoke checks
#   ./scripts/test.sh all             # every tier
#   ./scripts/test.sh fast -k producer   # arguments after the tier go to pytest
#
# Uses the active virtual environment, or creates/reuses .venv. Builds the extension with
# `maturin develop` (profile: $MQLITE_PROFILE, default release) before running pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"

tier=ci
case "${1:-}" in
    ci | fast | reliability | scale | soak | perf | all) tier="$1"; shift ;;
esac
case "$tier" in
    ci) tiers=(fast reliability scale) ;;
    all) tiers=(fast reliability scale perf soak) ;;
    *) tiers=("$tier") ;;
esac

started=$SECONDS
# pyspark and pyarrow: the Spark source's tests (marker spark, fast tier; they need Java 17).
mq_pip_ensure "pytest=pytest" "hypothesis=hypothesis" "pytest_timeout=pytest-timeout" \
    "pyspark=pyspark>=4.2" "pyarrow=pyarrow>=18"
mq_build

have_nextest=0
cargo nextest --version >/dev/null 2>&1 && have_nextest=1

# Rust tests of a nextest profile (.config/nextest.toml). The binding crate (mqlite-py) has no
# Rust tests and links libpython, so it is excluded; pytest covers it. Without nextest,
# `cargo test` runs every Rust test for the fast tier and none for the others.
rust_tests() {
    local profile="$1"
    if ((have_nextest)); then
        mq_step "cargo nextest run --profile $profile --workspace --exclude mqlite-py"
        cargo nextest run --profile "$profile" --workspace --exclude mqlite-py --no-fail-fast
    elif [[ "$profile" == fast ]]; then
        mq_step "cargo test --workspace --exclude mqlite-py (cargo-nextest not installed: every tier's Rust tests)"
        cargo test --workspace --exclude mqlite-py --no-fail-fast
    fi
}

# The integration tests that need the fault-injection build: Cargo.toml's [[test]] entries
# whose required-features name it.
fault_injection_tests() {
    awk '
        /^\[\[test\]\]/ { name = ""; intest = 1; next }
        /^\[/ { intest = 0 }
        intest && /^name *=/ { gsub(/.*= *"|".*/, ""); name = $0 }
        intest && /^required-features *=/ && /fault-injection/ && name != "" { print name }
    ' Cargo.toml
}

# pytest over tests/python with a marker expression; exit code 5 (nothing collected) fails.
py_tests() {
    local expr="$1"
    shift
    mq_step "pytest tests/python -m \"$expr\""
    local rc=0
    "$MQ_PY" -m pytest tests/python -m "$expr" "$@" || rc=$?
    if [[ $rc -eq 5 ]]; then
        echo "error: pytest collected no tests (exit code 5); that counts as a failure" >&2
        exit 1
    elif [[ $rc -ne 0 ]]; then
        exit "$rc"
    fi
}

# The extension built with the core's kill points, for the armed producers of the shared
# writers' kill loop (tests/python/test_shared_kill_loop.py finds it through MQLITE_FI_CORE).
# Its own target directory: the feature changes the core crate's build.
fi_extension() {
    mq_step "cargo build -p mqlite-py --features fault-injection (target/fi)"
    PYO3_PYTHON="$MQ_PY" CARGO_TARGET_DIR="$PWD/target/fi" cargo build -p mqlite-py --features fault-injection
    export MQLITE_FI_CORE="$PWD/target/fi/debug/lib_core.so"
}

for t in "${tiers[@]}"; do
    mq_step "tier: $t"
    case "$t" in
        fast)
            rust_tests fast
            mq_step "cargo test --doc"
            cargo test --doc
            mq_step "golden fixtures match rust/FORMAT.md's generator"
            "$MQ_PY" tests/fixtures/make_golden.py --check
            py_tests "not reliability and not scale and not soak and not perf" "$@"
            ;;
        reliability)
            rust_tests reliability
            fi_tests=()
            while read -r name; do fi_tests+=(--test "$name"); done < <(fault_injection_tests)
            if ((${#fi_tests[@]})); then
                mq_step "cargo test --features fault-injection ${fi_tests[*]}"
                cargo test --features fault-injection "${fi_tests[@]}"
            fi
            fi_extension
            py_tests "reliability and not soak and not perf" "$@"
            # Every fuzz target for MQLITE_FUZZ_SECONDS (30 s) each. The stable driver unless
            # MQLITE_FUZZ_ENGINE says otherwise: libFuzzer's sanitizer build of the fuzz crate
            # costs more than the runs themselves (scripts/fuzz-smoke.sh runs it by hand).
            mq_step "fuzz smoke (scripts/fuzz-smoke.sh)"
            # A fixed seed (MQLITE_FUZZ_SEED overrides it): the same mutants every run, so a
            # red run is a change's doing; the soak tier and hand runs explore other seeds.
            MQLITE_FUZZ_ENGINE="${MQLITE_FUZZ_ENGINE:-stable}" MQLITE_FUZZ_SEED="${MQLITE_FUZZ_SEED:-20261126}" \
                ./scripts/fuzz-smoke.sh "${MQLITE_FUZZ_SECONDS:-30}"
            # The lock-free protocols model-checked (docs/reliability.md#model-checking).
            # `--cfg loom` changes the build of every crate: its own target directory, and a
            # release build without LTO (the models need optimised code; LTO only costs time).
            mq_step "loom models (RUSTFLAGS=--cfg loom cargo test --release --lib loom_)"
            RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="$PWD/target/loom" \
                CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
                CARGO_PROFILE_RELEASE_DEBUG=0 cargo test --release --lib loom_
            ;;
        soak)
            export MQLITE_SOAK=1
            rust_tests reliability
            fi_extension
            py_tests "soak or reliability" "$@"
            mq_step "fuzz smoke, 120 s per target, a seed from the clock (printed)"
            MQLITE_FUZZ_ENGINE="${MQLITE_FUZZ_ENGINE:-stable}" ./scripts/fuzz-smoke.sh 120
            ;;
        scale)
            rust_tests scale
            py_tests "scale" "$@"
            ;;
        perf)
            py_tests "perf" "$@"
            ;;
    esac
done

mq_step "tiers ${tiers[*]}: all tests passed in $((SECONDS - started)) s"
