"""Smoke test of bench/tune_models.py: tiny models, few rounds, a complete table and RESULTS.md section.
No timing thresholds: the benchmark's numbers are for bench/RESULTS.md, never for assertions."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tune.rounding import ratio_bounds

pytest.importorskip("torch")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "tune_models.py"
TINY = ["--tiny", "--rounds", "2", "--warmup", "1", "--tune-repeats", "2", "--tune-warmup", "1", "--compile-modes",
        "lite", "--quiet"]


def _run(*args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(SCRIPT), *TINY, *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_markdown_section_has_both_models_and_is_appended(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# earlier\n")
    out = _run("--markdown", "--append", str(results), cwd=tmp_path)
    assert out.startswith("## Tuning two bundled models (issue 6)\n")
    assert "mode both, subgraph first; torch.compile modes tried per region: lite" in out
    table = out[out.index("| model | tuning s"):].split("\n\n")[0].splitlines()
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in table[2:]]
    assert [row[0] for row in rows] == ["cnn", "transformer"]
    for row in rows:
        assert float(row[1]) >= 0                              # tuning time (tiny here: may print 0.0)
        subgraphs, operators = map(int, row[2].split(" + "))   # tuned per stage, subgraph stage first
        assert subgraphs >= 0 and operators > 0
        assert float(row[3]) > 0 and float(row[5]) > 0         # untuned and tuned ms/step
        speedup = float(row[7].split("x")[0])
        low, high = ratio_bounds(float(row[3]), float(row[5]))  # untuned over tuned median, as printed
        assert low - 0.0005 <= speedup <= high + 0.0005
        assert row[8] == "does not win end to end" or speedup > 1
        assert row[9].endswith("]") and float(row[9].split("x")[0]) > 0   # the empty bank's speed-up
    assert "PYTHONPATH=src python bench/tune_models.py --tiny --rounds 2" in out
    assert "Load average (1, 5, 15 min) before / after" in out
    assert results.read_text() == "# earlier\n\n" + out.rstrip("\n") + "\n"
    assert not list(tmp_path.glob("aoe_result_*")), "result files must go to a temp dir, not the cwd"
