"""Smoke test of bench/collect_overhead.py: a tiny run produces a complete table. No timing thresholds:
the benchmark's numbers are for bench/RESULTS.md, never for assertions."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "collect_overhead.py"
CONFIGS = ["off", "l0", "l1", "l1_full", "torch"]


def _run(*args, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    # five configurations, each a training process of its own: 113 s here with the 2 cores busy, so a deadline
    # against a hang, not a time the work must fit in
    done = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "1", "--steps", "4", "--quiet", *args],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _number(cell):
    return float(cell.strip().rstrip("%"))


def _tables(text):
    """The blank-line-separated blocks of the plain-text output that are tables, as lists of rows of cells."""
    blocks = [block.splitlines() for block in text.strip().split("\n\n")]
    return [[line.split("  ") for line in block] for block in blocks if len(block) > 1 and set(block[1]) <= {"-", " "}]


def _row_cells(row):
    return [cell.strip() for cell in row if cell.strip()]


def test_table_has_every_configuration_with_positive_times(tmp_path):
    raw = tmp_path / "raw.json"
    out = _run("--json", str(raw), tmp_path=tmp_path)
    steps, once, compare = _tables(out)
    header = _row_cells(steps[0])
    assert header[:2] == ["config", "wall ms/step"]
    cpu_column = header.index("CPU ms/step")
    rows = {cells[0]: cells for cells in map(_row_cells, steps[2:])}
    assert list(rows) == CONFIGS
    for config, cells in rows.items():
        median = _number(cells[1])
        low, high = map(float, cells[2].split("-"))
        assert 0 < low <= median <= high, (config, cells)
        cpu = _number(cells[cpu_column])
        assert cpu > 0, (config, cells)
    once_rows = {cells[0]: cells for cells in map(_row_cells, once[2:])}
    assert list(once_rows) == CONFIGS[1:]
    for config, cells in once_rows.items():
        assert all(_number(cell) >= 0 for cell in cells[1:]), (config, cells)
        assert _number(cells[2]) > 0, (config, cells)       # stop+export
    assert [_row_cells(row)[0] for row in compare[2:]] == ["l1 vs l0", "l1 vs torch", "l1_full vs l1"]
    assert "reproduce: PYTHONPATH=src python bench/collect_overhead.py" in out

    data = json.loads(raw.read_text())
    (round_,) = data["rounds"]
    assert sorted(round_) == sorted(CONFIGS)
    for config, result in round_.items():
        assert len(result["step_s"]) == len(result["step_cpu_s"]) == 3   # steps 1-3 profiled of 4
        assert all(t > 0 for t in result["step_s"])
        assert result["threads"] == 1
        if config != "off":
            assert result["export_s"] > 0 and result["trace_files"] == 1, (config, result)
    assert not list(tmp_path.glob("perfsight_data*")), "profiler output must go to a temp dir, not the cwd"


def test_markdown_section(tmp_path):
    out = _run("--markdown", "--configs", "off,l0", tmp_path=tmp_path)
    assert out.startswith("## Collection overhead (issue 2)\n")
    first_table = out[out.index("| config | wall ms/step"):].split("\n\n")[0].splitlines()
    rows = [line.split("|")[1:-1] for line in first_table[2:]]
    assert [row[0].strip() for row in rows] == ["off", "l0"]
    for row in rows:
        assert _number(row[1]) > 0 and _number(row[5]) > 0
    assert "PYTHONPATH=src python bench/collect_overhead.py --rounds 1 --steps 4" in out
