"""export --model-id F --iteration-id N picks the N-th execution of torch.compile region F."""
import csv
import subprocess
import sys

import pytest

from .conftest import perfsight, run_dirs, script

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_graph_mode_selects_one_execution_of_a_compiled_region(tmp_path):
    result = subprocess.run([sys.executable, script("compiled_steps.py"), str(tmp_path)], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    [run] = run_dirs(tmp_path)
    result = perfsight("export", "summary", "-dir", run, "--model-id", "0", "--iteration-id", "2")
    assert result.returncode == 0, result.stderr
    [summary] = (run / "perfsight_output").glob("op_summary_*.csv")
    with open(summary) as f:
        rows = list(csv.DictReader(f))
    regions = [r for r in rows if r["Op Name"].startswith("Torch-Compiled Region: 0/")]
    assert len(regions) == 1 and regions[0]["Step"] == "1"       # 2nd execution, in ProfilerStep#1
    assert any(r["Op Name"] == "aten::addmm" for r in rows)
    assert {r["Step"] for r in rows} == {"1"}
    result = perfsight("export", "summary", "-dir", run, "--model-id", "5", "--iteration-id", "1")
    assert result.returncode == 2 and "graphs present: model 0: iterations 1..3" in result.stderr
