# shellcheck shell=bash
# Shared by scripts/test.sh and scripts/demo.sh (sourced, not run).
#
# Puts a virtual environment on PATH: the active one if VIRTUAL_ENV is set, otherwise
# $MQLITE_VENV (default: <repo>/.venv), created on first use. `maturin develop` installs
# into whatever VIRTUAL_ENV names, so it is always exported.
#
# Provides:
#   mq_step TITLE...          print a section header
#   mq_pip_ensure MOD=REQ...  pip install REQ unless `import MOD` already works
#   mq_build                  build the extension and install the package (editable)

MQ_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$MQ_ROOT"

mq_step() {
    printf '\n==> %s\n' "$*"
}

if [[ -z "${VIRTUAL_ENV:-}" ]]; then
    MQ_VENV="${MQLITE_VENV:-$MQ_ROOT/.venv}"
    if [[ ! -x "$MQ_VENV/bin/python" ]]; then
        mq_step "creating virtual environment $MQ_VENV"
        python3 -m venv "$MQ_VENV"
    fi
    export VIRTUAL_ENV="$MQ_VENV"
fi
export PATH="$VIRTUAL_ENV/bin:$PATH"
export PIP_DISABLE_PIP_VERSION_CHECK=1
MQ_PY="$VIRTUAL_ENV/bin/python"

mq_pip_ensure() {
    local missing=() spec mod
    for spec in "$@"; do
        mod="${spec%%=*}"
        if ! "$MQ_PY" -c "import $mod" >/dev/null 2>&1; then
            missing+=("${spec#*=}")
        fi
    done
    if ((${#missing[@]})); then
        mq_step "pip install ${missing[*]}"
        "$MQ_PY" -m pip install --progress-bar off "${missing[@]}"
    fi
}

# Cargo profile for the extension module. `release` is what users and benchmarks get;
# MQLITE_PROFILE=dev builds faster when only correctness matters.
MQ_PROFILE="${MQLITE_PROFILE:-release}"

mq_build() {
    mq_pip_ensure "maturin=maturin>=1.9.4,<2"
    mq_step "maturin develop --profile $MQ_PROFILE (into $VIRTUAL_ENV)"
    # Run from the repository root so maturin reads pyproject.toml (manifest-path,
    # python-source, module-name) instead of guessing from rust/py/Cargo.toml.
    local maturin=maturin
    [[ -x "$VIRTUAL_ENV/bin/maturin" ]] && maturin="$VIRTUAL_ENV/bin/maturin"
    "$maturin" develop --profile "$MQ_PROFILE"
    "$MQ_PY" -c 'import mqlite, mqlite._core as c; print("installed mqlite", c.__version__, "from", mqlite.__file__)'
}
