"""`perfsight tune --mode op -- python script.py` on an unmodified training script."""
import json
import sys

import pytest

from .conftest import perfsight, script

pytestmark = pytest.mark.e2e


def test_tune_records_the_first_steps_and_fills_the_bank(tmp_path):
    result = perfsight("tune", "--mode", "op", "--bank", tmp_path / "bank", "--steps", "2", "--", sys.executable,
                       script("train_tiny.py"), "4", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "step 3" in result.stdout                                   # the script ran on to its end
    [report] = tmp_path.glob("aoe_result_opat_*_*.json")
    [bank] = (tmp_path / "bank").iterdir()
    assert f"tuning result in {report}" in result.stderr and f"tuning bank {bank}" in result.stderr
    entries = json.loads((bank / "opat.json").read_text())["entries"]
    assert sorted(e["signature"]["tensors"]["input"]["shape"] for e in entries.values()) == [[8, 32], [8, 64]]
    [(name, task)] = json.loads(report.read_text()).items()
    assert name.startswith("report_") and task[0]["basic"]["tuning_name"] == "train_tiny.py"
    opat = task[1]["OPAT"]
    assert opat["opat_tuning_result"] == "tuning successful" and opat["repo_summary"]["total_num"] == 2
    assert set(opat) == {"opat_tuning_result", "repo_modified_operators", "repo_summary"}


@pytest.mark.parametrize("args, message", [
    (["--mode", "subgraph"], "subgraph tuning (SGAT: --mode subgraph, AOE_MODE=1) is not implemented yet"),
    (["--steps", "1"], "at least 2 steps are needed"),
    (["--mode", "graph"], "invalid choice: 'graph'"),
])
def test_bad_options_exit_2_before_the_script_starts(tmp_path, args, message):
    result = perfsight("tune", *args, "--bank", tmp_path / "bank", "--", sys.executable, script("train_tiny.py"),
                       "2", cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr and "step 0" not in result.stdout
    assert not (tmp_path / "bank").exists()


def test_tuning_needs_profiling_off(tmp_path):
    result = perfsight("tune", "--", sys.executable, script("train_tiny.py"), "2", cwd=tmp_path,
                       env={"PROFILING_OPTIONS": "{}"})
    assert result.returncode == 2 and "profiling is on (PROFILING_OPTIONS set)" in result.stderr
    assert "step 0" not in result.stdout


def test_dynamic_shapes_in_the_script_exit_2_after_it_ran(tmp_path):
    train = tmp_path / "dynamic.py"
    train.write_text("import torch\nm = torch.nn.Linear(4, 2)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
                     "for n in (3, 5, 7):\n    o.zero_grad(); m(torch.randn(n, 4)).sum().backward(); o.step()\n"
                     "print('done')\n")
    result = perfsight("tune", "--bank", tmp_path / "bank", "--", sys.executable, train, cwd=tmp_path)
    assert result.returncode == 2 and "done" in result.stdout
    assert "tuning not done: cannot tune: static shapes: FAILED" in result.stderr
    assert not list(tmp_path.glob("aoe_result_opat_*.json"))


def test_perfsight_run_applies_the_bank_of_tune_bank_path(tmp_path):
    tuned = perfsight("tune", "--mode", "op", "--bank", tmp_path / "bank", "--", sys.executable,
                      script("train_tiny.py"), "2", cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stderr
    [bank] = (tmp_path / "bank").iterdir()
    store = json.loads((bank / "opat.json").read_text())
    for entry in store["entries"].values():       # make a winner of an alternative that was checked correct
        entry["winner"] = next(c["name"] for c in entry["candidates"] if c.get("ok") and c["name"] != "default")
    (bank / "opat.json").write_text(json.dumps(store))
    result = perfsight("run", "-o", tmp_path / "prof", "--", sys.executable, script("train_tiny.py"), "3",
                       cwd=tmp_path, env={"TUNE_BANK_PATH": str(tmp_path / "bank")})
    assert result.returncode == 0, result.stderr
    assert f"applying the tuning bank {bank}" in result.stderr and "step 2" in result.stdout
    applied = int(result.stderr.split("tuning bank applied to ")[1].split(" calls")[0])
    assert applied >= 2 * 3                     # two tunable linear calls per forward, three steps at least
    plain = perfsight("run", "-o", tmp_path / "prof2", "--", sys.executable, script("train_tiny.py"), "1",
                      cwd=tmp_path)
    assert "tuning bank" not in plain.stderr    # without TUNE_BANK_PATH nothing is applied
