"""Smoke test of bench/insight_serve.py on a small real trace: one round produces the RESULTS.md section
and raw figures, every page's routes answer without a server error, and the server child and its temp
dir are gone afterwards. No timing thresholds: the benchmark's numbers are for bench/RESULTS.md."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "insight_serve.py"
TRACE = "kineto/generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz"
PREFIX = "perfsight-bench-insight-"


def _ours() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob(PREFIX + "*")}


def test_one_round(shared_data, tmp_path):
    before = _ours()
    raw = tmp_path / "raw.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "1", "--warm", "2", "--trace",
                           str(shared_data / TRACE), "--markdown", "--json", str(raw)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert out.startswith("## insight: serving the largest real trace (issue 5)\n")
    assert "PYTHONPATH=src python bench/insight_serve.py --rounds 1 --warm 2 --markdown" in out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines()
            if line.startswith("| ") and "---" not in line}
    for label in ("first parse (server's `parse_seconds`: read, tables, Parquet cache)",
                  "Overview load, cold (first after the parse)", "Overview load, warm", "server RSS at idle (no run)",
                  "peak RSS while serving all pages"):
        assert label in rows, label
    assert "Server errors" not in out

    data = json.loads(raw.read_text())
    (round_,) = data["rounds"]
    assert "/overview" in data["overview_routes"] and "/memory/alive" in data["page_routes"]
    assert round_["parse_s"] > 0 and round_["slices"] > 0 and len(round_["warm"]) == 2
    assert round_["cold"]["total_s"] > 0 and all(w["total_s"] > 0 for w in round_["warm"])
    assert 0 < round_["idle_rss_mib"] <= round_["serving_all_pages_peak_rss_mib"]
    assert all(code < 500 for code in round_["all_pages_statuses"].values()), round_["all_pages_statuses"]
    assert _ours() == before, "the temp summary-base-dir must be removed"
    assert not [p for p in psutil.process_iter(["cmdline"]) if any(PREFIX in a for a in p.info["cmdline"] or [])]
