"""Smoke test of bench/memo_compare.py on a small GPU trace: one round gives both tables, and the counts say
what the memo changed (after it, no analysis computed twice with the same arguments). No timing thresholds:
the benchmark's numbers are for bench/RESULTS.md, never for assertions."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "memo_compare.py"


def _counted(cell: str) -> tuple[int, int]:
    """(computations, distinct arguments) of a count cell ("9 (5)"; "-": none)."""
    return (0, 0) if cell == "-" else tuple(int(n) for n in re.fullmatch(r"(\d+) \((\d+)\)", cell).groups())


def test_one_round_reports_times_and_counts(shared_data):
    trace = shared_data / "kineto/hta/trace_filter/sampled_rank-0.json.gz"
    done = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "1", "--trace", str(trace), "--markdown"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in done.stdout.splitlines() if line.startswith("| ")}
    assert {"`perfsight export summary`", "`perfsight analyse`", "insight: every page once"} <= set(rows)
    counts = {name: [_counted(c) for c in cells] for name, cells in rows.items() if re.fullmatch(r"`\w+\.\w+`", name)}
    assert counts["`ops.op_instances`"][:2] == [(9, 5), (5, 5)]        # export summary before, after
    assert all(calls == distinct for cells in counts.values() for calls, distinct in cells[1::2])   # after
    assert any(calls > distinct for cells in counts.values() for calls, distinct in cells[4:5])   # insight before
