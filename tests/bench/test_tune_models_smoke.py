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
        "lite", "--recheck-after", "0", "--quiet"]


def _run(*args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(SCRIPT), *TINY, *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_markdown_section_has_both_models_and_is_appended(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# earlier\n")
    out = _run("--markdown", "--append", str(results), "--modes", "op,both", cwd=tmp_path)
    assert out.startswith("## Tuning two bundled models, winners proven in the training step (issues 6, 20, 33)\n")
    assert ("modes op, both (both: the step settings, then subgraph, then op); torch.compile modes tried per "
            "region: lite") in out
    table = out[out.index("| model | mode | tuning s"):].split("\n\n")[0].splitlines()
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in table[2:]]
    assert [row[:2] for row in rows] == [["cnn", "op"], ["transformer", "op"], ["cnn", "both"],
                                         ["transformer", "both"]]
    for row in rows:
        assert 0 <= float(row[3]) <= float(row[2])             # the in-step proof is part of the tuning time
        # tuned per stage, the step settings first (each model's one optimizer), then the subgraph stage; the
        # first stage always measures something, the operator stage of "both" may have nothing left when the
        # model itself won at another thread count (timing decides)
        stages = list(map(int, row[4].split(" + ")))
        assert len(stages) == (3 if row[1] == "both" else 1) and stages[0] > 0 and min(stages) >= 0
        assert row[1] != "both" or stages[:2] == [1, stages[1]] and stages[1] > 0
        assert float(row[5]) > 0 and float(row[7]) > 0         # untuned and tuned ms/step
        speedup = float(row[9].split("x")[0])
        low, high = ratio_bounds(float(row[5]), float(row[7]))  # untuned over tuned median, as printed
        assert low - 0.0005 <= speedup <= high + 0.0005
        assert row[10].startswith("does not win end to end") or speedup > 1
        assert row[10].endswith("(no winner: a control)") == (row[13] == "none")   # a bank applying nothing
        assert row[11].endswith("end to end") and float(row[11].split("x")[0]) > 0   # re-checked: the bank again
        assert row[12].endswith("]") and float(row[12].split("x")[0]) > 0   # the empty bank's speed-up
    trials = out[out.index("their trials in the training step"):].split("\n\n")[1]
    assert trials == "No stage proposed a winner." or trials.startswith("| model | mode | stage: where | winner |")
    tried = out[out.index("and its fate:"):].split("\n\n")[1].splitlines()
    assert tried[0] == "| model | mode | stage: where | candidate | default -> alone us/call | compile s | fate |"
    cells = [[cell.strip() for cell in line.split("|")[1:-1]] for line in tried[2:]]
    for model, optimizer in (("cnn", "SGD"), ("transformer", "AdamW")):   # mode both: the step, the whole model
        both = [c[2] for c in cells if c[:2] == [model, "both"]]
        assert both[0] == f"step: optimizer 0 ({optimizer})"
        assert next(where for where in both if where.startswith("subgraph: ")) == "subgraph: (the model)"
    fates = ("failed the check", "won alone", "does not repay", "beaten by", "not faster")
    assert all(c[6].startswith(fates) for c in cells)
    assert "PYTHONPATH=src python bench/tune_models.py --tiny --rounds 2" in out
    assert "Load average (1, 5, 15 min) before / after" in out
    assert results.read_text() == "# earlier\n\n" + out.rstrip("\n") + "\n"
    assert not list(tmp_path.glob("aoe_result_*")), "result files must go to a temp dir, not the cwd"
