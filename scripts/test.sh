#!/usr/bin/env bash
# Fresh machine -> lint and type checks (ruff; mypy on the packages pyproject.toml names), then the whole test
# suite (unit, end-to-end training subprocesses, real traces, and the insight web UI in headless Chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check src tests bench
.venv/bin/mypy
bash scripts/install_chromium.sh
.venv/bin/python -m pytest -q "$@"
