#!/usr/bin/env bash
# Run every test: Rust unit, integration and doc tests, the golden-fixture check, and pytest.
#
#   ./scripts/test.sh                 # everything
#   ./scripts/test.sh -k producer     # extra arguments go to pytest
#
# Uses the active virtual environment, or creates/reuses .venv. Builds the extension with
# `maturin develop` (profile: $MQLITE_PROFILE, default release) before running pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"

started=$SECONDS
mq_pip_ensure "pytest=pytest" "hypothesis=hypothesis" "pytest_timeout=pytest-timeout"
mq_build

# The binding crate (mqlite-py) has no Rust tests and links libpython, so it is excluded;
# pytest covers it.
if cargo nextest --version >/dev/null 2>&1; then
    mq_step "cargo nextest run --workspace --exclude mqlite-py"
    cargo nextest run --workspace --exclude mqlite-py --no-fail-fast
else
    mq_step "cargo test --workspace --exclude mqlite-py (cargo-nextest not installed)"
    cargo test --workspace --exclude mqlite-py --no-fail-fast
fi

mq_step "cargo test --features fault-injection --test flush_failure (failed flush poisons the store)"
cargo test --features fault-injection --test flush_failure

mq_step "cargo test --features fault-injection --test power_cut (power-cut images lose no acknowledged message)"
cargo test --features fault-injection --test power_cut

mq_step "cargo test --doc"
cargo test --doc

mq_step "golden fixtures match rust/FORMAT.md's generator"
"$MQ_PY" tests/fixtures/make_golden.py --check

mq_step "pytest tests/python"
rc=0
"$MQ_PY" -m pytest tests/python "$@" || rc=$?
if [[ $rc -eq 5 ]]; then
    echo "error: pytest collected no tests (exit code 5); that counts as a failure" >&2
    exit 1
elif [[ $rc -ne 0 ]]; then
    exit "$rc"
fi

mq_step "all tests passed in $((SECONDS - started)) s"
