#!/usr/bin/env bash
# Fresh-machine demo: create/reuse .venv, build and install mqlite into it, and run
# examples/quickstart.py, which works on a temporary store and prints what it does.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"

mq_build
mq_step "python examples/quickstart.py"
"$MQ_PY" examples/quickstart.py "$@"
