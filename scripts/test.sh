#!/usr/bin/env bash
# Install everything and run the checks CI runs: ruff, mypy, the whole pytest suite (unit + simulator + e2e).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
PY=${PYTHON:-python3}
"$PY" -m ruff check orchestrator tests
"$PY" -m mypy
"$PY" -m pytest -q -p no:cacheprovider "$@"
