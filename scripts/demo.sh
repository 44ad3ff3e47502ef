#!/usr/bin/env bash
# Fresh machine -> a real profiling run of the bundled training script, exported and summarised.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/perfsight demo "$@"
