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


def _run(*args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    # five configurations, each a training process of its own: 113 s here with the 2 cores busy, so a deadline
    # against a hang, not a time the work must fit in
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One smoke run of every configuration (each a training process): its folder, printed tables and
    --json file, shared by the tests of its output."""
    folder = tmp_path_factory.mktemp("collect_overhead")
    out = _run("--rounds", "1", "--steps", "4", "--quiet", "--json", "raw.json", cwd=folder)
    return folder, out, folder / "raw.json"


def _number(cell):
    return float(cell.strip().rstrip("%"))


def _tables(text):
    """The blank-line-separated blocks of the plain-text output that are tables, as lists of rows of cells."""
    blocks = [block.splitlines() for block in text.strip().split("\n\n")]
    return [[line.split("  ") for line in block] for block in blocks if len(block) > 1 and set(block[1]) <= {"-", " "}]


def _row_cells(row):
    return [cell.strip() for cell in row if cell.strip()]


def test_table_has_every_configuration_with_positive_times(smoke_run):
    folder, out, raw = smoke_run
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
    assert sorted(path.name for path in folder.iterdir()) == ["raw.json"], \
        "profiler output must go to a temp dir, not the cwd"


def test_a_saved_run_prints_its_tables_again_and_its_markdown_section(smoke_run, tmp_path):
    folder, out, raw = smoke_run
    assert _run("--from-json", str(raw), cwd=tmp_path) == out
    markdown = _run("--from-json", str(raw), "--markdown", cwd=tmp_path)
    assert markdown.startswith("## Collection overhead (issue 2)\n")
    first_table = markdown[markdown.index("| config | wall ms/step"):].split("\n\n")[0].splitlines()
    rows = [line.split("|")[1:-1] for line in first_table[2:]]
    assert [row[0].strip() for row in rows] == CONFIGS
    for row in rows:
        assert _number(row[1]) > 0 and _number(row[5]) > 0
    reproduce = "PYTHONPATH=src python bench/collect_overhead.py --rounds 1 --steps 4 --first 1 --last 3 --markdown"
    assert reproduce in markdown


def test_a_file_that_is_not_a_saved_run_is_refused_naming_it(tmp_path):
    (tmp_path / "other.json").write_text('{"rounds": []}')
    done = subprocess.run([sys.executable, str(SCRIPT), "--from-json", "other.json"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "--from-json other.json: not the --json output of this benchmark" in done.stderr
