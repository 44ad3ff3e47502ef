#!/usr/bin/env bash
# Fresh machine -> lint and type checks (ruff; mypy on the packages pyproject.toml names), then the whole test
# suite (unit, end-to-end training subprocesses, real traces, and the insight web UI in headless Chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check src tests bench
.venv/bin/mypy
bash scripts/install_chromium.sh
# One test process per core and one more (pytest-xdist; a file's tests stay in one process, so its module
# fixtures are made once): much of the suite waits on subprocesses, browsers and Ray, and the extra process keeps
# the cores busy meanwhile. Measured on 2 cores with one core kept busy by another program: 610 s with 3
# processes, 637 s with 4 (more processes only contend). The 15 slowest tests are named at the end.
.venv/bin/python -m pytest -q -n "$(( $(nproc) + 1 ))" --dist loadfile --durations=15 "$@"
