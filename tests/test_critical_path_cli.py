"""``perfsight analyse --critical-path`` on HTA's cuda_event_sync trace (one ProfilerStep, a spin kernel the host
waits for): the report within 80 columns, ``--json`` with the same figures, and ``--step`` / ``--rank``."""
from __future__ import annotations

import json

import pytest

from perfsight.cli import main


@pytest.fixture
def trace(shared_data):
    return str(shared_data / "kineto" / "hta" / "critical_path" / "cuda_event_sync")


def test_the_report_shows_the_path_by_category_what_it_is_made_of_and_the_what_ifs(trace, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["analyse", trace, "--critical-path"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()[1:]) <= 80
    assert "Critical path of step 100 (rank 0): 3.154 ms in " in out
    assert "What if (rank 0, the mean window of 3.154 ms)" in out
    spin = next(line for line in out.splitlines() if "spin_kernel" in line)
    assert spin.split()[-3:] == ["1", "0.036", "1.1"]        # one piece, 36 us, 1.1% of the step
    no_waits = next(line for line in out.splitlines() if "no host waits for the device" in line)
    # the replay's figure on this trace (tests/analysis/test_critical_path.py proves the replay on planted steps)
    assert no_waits.split()[-3:] == ["3.091", "0.063", "2.0"]


def test_json_has_the_breakdown_the_path_and_the_what_ifs(trace, capsys):
    assert main(["analyse", trace, "--critical-path", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["critical_path"]
    assert report["window"] == {"rank": 0, "step": 100, "label": "step 100", "dur_ns": 3_154_000,
                                "pieces": report["window"]["pieces"], "median_of": 1}
    assert sum(row["dur_ns"] for row in report["breakdown"]) == 3_154_000
    assert {row["category"]: row["dur_ns"] for row in report["breakdown"]}["compute"] == 36_000
    assert [row["scenario"] for row in report["what_if"]][:3] == [
        "overlap_communication", "no_launch_overhead", "no_sync_waits"]


def test_a_step_the_run_lacks_says_so(trace, capsys):
    assert main(["analyse", trace, "--critical-path", "--step", "7"]) == 0
    assert "no step (nor any slice) to find a critical path in" in capsys.readouterr().out
