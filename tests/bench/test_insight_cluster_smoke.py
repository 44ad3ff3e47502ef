"""Smoke test of bench/insight_cluster.py on 40 ranks (more than insight merges, so the job is mapped): it
produces the RESULTS.md section with every route answered and every view drawn, and its server child is gone
afterwards. No timing thresholds: the benchmark's numbers are for bench/RESULTS.md."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]


def test_forty_ranks():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "insight_cluster.py"), "--ranks", "40", "--warm", "1",
                           "--markdown"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "## insight: the Cluster page of 40 ranks (issue 17)"
    assert sum(line.startswith("| API `/cluster/") for line in lines) == 7
    assert sum(line.startswith("| view: ") for line in lines) == 8
