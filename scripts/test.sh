#!/usr/bin/env bash
# Fresh machine -> the whole test suite (unit, end-to-end training subprocesses, real traces).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m pytest -q "$@"
