"""`perfsight tune --mode op|subgraph` and `perfsight tune --verify` on an unmodified training script, and
`perfsight run` applying the bank."""
import json
import re
import shutil
import subprocess
import sys

import pytest

from tests.tune.rounding import ratio_bounds

from .conftest import perfsight, script

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def op_tuned(tmp_path_factory):
    """`perfsight tune --mode op` on train_tiny.py (4 steps, two recorded): its folder and its outcome."""
    where = tmp_path_factory.mktemp("opat")
    result = perfsight("tune", "--mode", "op", "--bank", where / "bank", "--steps", "2", "--", sys.executable,
                       script("train_tiny.py"), "4", cwd=where)
    return where, result


def test_tune_records_the_first_steps_and_fills_the_bank(op_tuned):
    tmp_path, result = op_tuned
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
    (["--steps", "1"], "at least 2 steps are needed"),
    (["--mode", "graph"], "invalid choice: 'graph'"),
    (["--mode", "op", "--compile-modes", "lite"], "--compile-modes lite is for subgraph tuning only"),
    (["--mode", "subgraph", "--compile-modes", "lite,fast"], "fast is not allowed; allowed (this PyTorch on this "
                                                             "device): default, max-autotune-no-cudagraphs, lite"),
    (["--order", "op,subgraph"], "--order op,subgraph goes with --mode both (given: --mode unset)"),
    (["--regions-only"], "--regions-only is for subgraph tuning only"),
    (["--verify", "--regions-only"], "--regions-only is not allowed with --verify"),
    (["--verify", "--mode", "op"], "--mode is not allowed with --verify, which does not tune"),
    (["--verify", "--steps", "5"], "--steps 5 is not allowed with --verify"),
    (["--verify"], "there is no tuning bank at "),
])
def test_bad_options_exit_2_before_the_script_starts(tmp_path, args, message):
    result = perfsight("tune", *args, "--bank", tmp_path / "bank", "--", sys.executable, script("train_tiny.py"),
                       "2", cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr and "step 0" not in result.stdout
    assert not (tmp_path / "bank").exists()


@pytest.mark.parametrize("aoe_mode, message", [
    ("1", "--compile-modes lite,fast: fast is not allowed"),         # subgraph tuning: its modes are checked
    ("2", "--compile-modes lite,fast is for subgraph tuning only"),  # operator tuning
])
def test_aoe_mode_chooses_the_stage_when_no_mode_is_given(tmp_path, aoe_mode, message):
    result = perfsight("tune", "--compile-modes", "lite,fast", "--bank", tmp_path / "bank", "--", sys.executable,
                       script("train_tiny.py"), "2", cwd=tmp_path, env={"AOE_MODE": aoe_mode})
    assert result.returncode == 2 and message in result.stderr and "step 0" not in result.stdout


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


def test_perfsight_run_applies_the_bank_of_tune_bank_path(op_tuned, tmp_path):
    tuned_in, tuned = op_tuned
    assert tuned.returncode == 0, tuned.stderr
    shutil.copytree(tuned_in / "bank", tmp_path / "bank")          # a bank of its own to edit
    [bank] = (tmp_path / "bank").iterdir()
    store = json.loads((bank / "opat.json").read_text())
    for entry in store["entries"].values():       # make a winner of an alternative that was checked correct
        entry["winner"] = next(c["name"] for c in entry["candidates"] if c.get("ok") and c["name"] != "default")
    (bank / "opat.json").write_text(json.dumps(store))
    result = perfsight("run", "-o", tmp_path / "prof", "--", sys.executable, script("train_tiny.py"), "3",
                       cwd=tmp_path, env={"TUNE_BANK_PATH": str(tmp_path / "bank")})
    assert result.returncode == 0, result.stderr
    assert f"applying the tuning bank {bank}" in result.stderr and "step 2" in result.stdout
    assert "checked against untuned steps of this run at its start and every 1000 optimizer steps" in result.stderr, \
        result.stderr
    applied = int(result.stderr.split("tuning bank applied to ")[1].split(" calls")[0])
    assert applied >= 2 * 2   # two tunable linear calls per forward; of three steps the check ran one untuned
    assert "0 check(s) in 3 optimizer steps" in result.stderr   # a check takes 23 steps: this run ended first
    plain = perfsight("run", "-o", tmp_path / "prof2", "--", sys.executable, script("train_tiny.py"), "1",
                      cwd=tmp_path)
    assert "tuning bank" not in plain.stderr    # without TUNE_BANK_PATH nothing is applied


@pytest.fixture(scope="module")
def subgraph_tuned(tmp_path_factory):
    """`perfsight tune --mode subgraph --regions-only` on train_tiny.py (4 steps, two recorded), one compile mode:
    its two linears are the regions tuned (the whole model first would leave them untuned when it won compiled,
    as timing decides)."""
    where = tmp_path_factory.mktemp("sgat")
    result = perfsight("tune", "--mode", "subgraph", "--regions-only", "--compile-modes", "lite", "--bank",
                       where / "bank", "--", sys.executable, script("train_tiny.py"), "4", cwd=where)
    return where, result


def test_subgraph_tuning_of_an_unmodified_script(subgraph_tuned, tmp_path):
    where, result = subgraph_tuned
    assert result.returncode == 0, result.stderr
    [report] = where.glob("aoe_result_opat_*_*.json")
    [bank] = (where / "bank").iterdir()
    assert f"tuning result in {report}" in result.stderr and f"tuning bank {bank}" in result.stderr
    assert re.search(r"subgraph tuning \(SGAT\): repo_add_num=\d, .*total_num=2; winners: ", result.stderr)
    assert "operator tuning" not in result.stderr and not (bank / "opat.json").exists()
    entries = json.loads((bank / "sgat.json").read_text())["entries"]
    # the two linears of the replayed training step, each timed eager and compiled in the one mode asked
    assert sorted(e["signature"]["inputs"][0]["shape"] for e in entries.values()) == [[8, 32], [8, 64]]
    for entry in entries.values():
        assert entry["signature"]["train"] and entry["signature"]["region"] == "torch.nn.modules.linear.Linear"
        [default, compiled] = entry["candidates"]
        assert default["samples"] == compiled["samples"] > 0 and compiled["name"] == "compile_lite"
        assert compiled["compile_s"] > 0 and compiled["ok"], compiled["reason"]
    [(name, task)] = json.loads(report.read_text()).items()
    assert name.startswith("report_") and task[0]["basic"]["tuning_name"] == "train_tiny.py"
    sgat = task[1]["SGAT"]
    assert sgat["repo_summary"]["total_num"] == 2 and sgat["model_baseline_performance(ms)"] > 0
    # the script went on to its end exactly as it trains without tuning: same weights, same parameters
    plain = subprocess.run([sys.executable, script("train_tiny.py"), "4"], capture_output=True, text=True,
                           cwd=tmp_path, timeout=120)
    assert "step 3" in result.stdout and result.stdout.splitlines()[-2:] == plain.stdout.splitlines()[-2:]
    assert result.stdout.splitlines()[-1] == "optimizer holds the model's parameters: True"


@pytest.fixture
def subgraph_winners(subgraph_tuned, tmp_path):
    """The tuned bank with a hand-written winner for each region: eager with channels_last inputs (a 2-D
    input is left as it is), so applying it compiles nothing."""
    where, tuned = subgraph_tuned
    assert tuned.returncode == 0, tuned.stderr
    shutil.copytree(where / "bank", tmp_path / "bank")
    [bank] = (tmp_path / "bank").iterdir()
    store = json.loads((bank / "sgat.json").read_text())
    for entry in store["entries"].values():
        entry["candidates"].append({"name": "eager+channels_last", "mode": "Format", "ok": True, "params": {
            "compile": None, "format": "channels_last", "freezing": False}})
        entry["winner"] = "eager+channels_last"
    (bank / "sgat.json").write_text(json.dumps(store))
    return bank


def test_perfsight_run_applies_the_subgraph_winners_of_tune_bank_path(subgraph_winners, tmp_path):
    result = perfsight("run", "-o", tmp_path / "prof", "--", sys.executable, script("train_tiny.py"), "3",
                       cwd=tmp_path, env={"TUNE_BANK_PATH": str(subgraph_winners.parent)})
    assert result.returncode == 0, result.stderr
    assert f"applying the tuning bank {subgraph_winners} (subgraph winners on 0, 2)" in result.stderr
    # both linears of two of the three forwards ran under their winner (the check ran the second untuned)
    assert "tuning bank applied to 4 calls ({'eager+channels_last': 4})" in result.stderr
    assert result.stdout.splitlines()[-1] == "optimizer holds the model's parameters: True"


def test_verify_times_the_scripts_steps_with_and_without_the_bank(subgraph_winners, tmp_path):
    result = perfsight("tune", "--verify", "--steps", "4", "--bank", subgraph_winners.parent, "--", sys.executable,
                       script("train_tiny.py"), "9", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "step 8" in result.stdout                            # the script ran on to its end
    found = re.search(r"perfsight: the tuning bank (wins|does not win) end to end: speed-up ([\d.]+)x \((.*)\); "
                      r"step ([\d.]+) ms .* untuned, ([\d.]+) ms .* tuned; "
                      r"2 rounds at \d+ thread\(s\), load .*; winners applied: eager\+channels_last x8\n",
                      result.stderr)
    assert found, result.stderr                                 # 4 steps under the bank (2 warm-up), 2 calls each
    # the rule (tune/rule.py), with its reason: 2 rounds give no interval, so no win is proven
    assert found.group(1) == "does not win" and "2 rounds are too few for its interval (at least 5)" in found.group(3)
    speedup, untuned, tuned = float(found.group(2)), float(found.group(4)), float(found.group(5))
    low, high = ratio_bounds(untuned, tuned)                   # untuned median over tuned (ms shown rounded)
    assert low - 0.0005 <= speedup <= high + 0.0005
    assert ("4 steps timed after 4 warm-up steps, in this order: untuned, tuned, tuned, untuned"
            in result.stderr)
    assert not list(tmp_path.glob("aoe_result_opat_*.json"))   # --verify does not tune


@pytest.mark.parametrize("steps, spoil, message", [
    ("6", None, "verification not done: the script made 6 optimizer steps; --verify needs 9: the first (not "
                "timed), 4 warm-up and 4 timed steps"),
    ("9", "winners", "the tuning bank holds no winners: no candidate beat the default for any signature of "),
    ("9", "versions", "was tuned under other library versions (torch: bank 0.0, running "),
])
def test_verify_says_why_it_could_not_verify(subgraph_winners, tmp_path, steps, spoil, message):
    """Too few steps show once the script ran; a bank without winners or a stale one before it starts."""
    if spoil == "winners":
        store = json.loads((subgraph_winners / "sgat.json").read_text())
        for entry in store["entries"].values():
            entry["winner"] = None
        (subgraph_winners / "sgat.json").write_text(json.dumps(store))
    elif spoil == "versions":
        meta = json.loads((subgraph_winners / "bank.json").read_text())
        meta["versions"]["torch"] = "0.0"
        (subgraph_winners / "bank.json").write_text(json.dumps(meta))
    result = perfsight("tune", "--verify", "--steps", "4", "--bank", subgraph_winners.parent, "--", sys.executable,
                       script("train_tiny.py"), steps, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    if spoil is None:
        assert f"step {int(steps) - 1}" in result.stdout        # the script ran on to its end regardless
    else:
        assert "step 0" not in result.stdout                    # refused before the script started


def test_step_settings_tuning_leaves_the_training_as_it_was_and_perfsight_run_applies_them(tmp_path):
    """`perfsight tune --mode step` on train_tiny.py's Adam: the for-loop against foreach and fused, each
    checked, then (a winner alone: fused, as a rule) proven on replays that step the script's optimizer - and
    the script still trains to the very weights of a run without perfsight. Then `perfsight run` with that bank
    (its fused winner planted) switches the script's optimizer as the guard's check alternates."""
    result = perfsight("tune", "--mode", "step", "--bank", tmp_path / "bank", "--", sys.executable,
                       script("train_tiny.py"), "4", "--adam", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    plain = subprocess.run([sys.executable, script("train_tiny.py"), "4", "--adam"], capture_output=True,
                           text=True, cwd=tmp_path, timeout=120)
    weights = [line for line in plain.stdout.splitlines() if line.startswith("weights ")]
    assert weights and weights[0] in result.stdout.splitlines(), (plain.stdout, result.stdout)
    assert "optimizer holds the model's parameters: True" in result.stdout
    # the batch of the second recorded step was drawn from the script's DataLoader between the two steps
    assert re.search(r"the recorded steps waited [\d.]+ ms of [\d.]+ ms \(\d+%\) for their batches \(TensorDataset, "
                     r"num_workers=0: 1 batches\); (not )?input-bound", result.stderr), result.stderr
    assert re.search(r"step-settings tuning \(optimizers, data loaders, TunableOp\): repo_add_num=\d, .*total_num=1",
                     result.stderr), result.stderr
    [bank] = (tmp_path / "bank").iterdir()
    store = json.loads((bank / "step.json").read_text())
    [entry] = store["entries"].values()
    assert entry["signature"]["optimizer"] == "torch.optim.adam.Adam"
    assert [(c["name"], c["ok"]) for c in entry["candidates"]] == [("default", True), ("foreach", True),
                                                                      ("fused", True)]
    entry["winner"], entry["rejected"] = "fused", None       # a winner of the candidate checked correct
    (bank / "step.json").write_text(json.dumps(store))
    run = perfsight("run", "-o", tmp_path / "prof", "--", sys.executable, script("train_tiny.py"), "3", "--adam",
                    cwd=tmp_path, env={"TUNE_BANK_PATH": str(tmp_path / "bank")})
    assert run.returncode == 0, run.stderr
    assert f"applying the tuning bank {bank} (step-settings winners)" in run.stderr, run.stderr
    # the step under way when the bank opened runs under it; the check's rounds then alternate
    assert re.search(r"tuning bank applied to [1-9]\d* calls \(\{'fused': [1-9]\d*\}\)", run.stderr), run.stderr
