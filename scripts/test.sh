#!/usr/bin/env bash
# Fresh machine -> the whole test suite (unit, end-to-end training subprocesses, real traces, and the
# insight web UI in headless Chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/install_chromium.sh
.venv/bin/python -m pytest -q "$@"
