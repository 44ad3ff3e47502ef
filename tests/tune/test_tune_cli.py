"""`perfsight tune` and `perfsight run` on unmodified scripts, as a user meets them: the per-signature
table (attention of a real transformer layer among them), and damaged or winnerless banks refused before
the script starts, or - applied at run time - reported while the training goes on."""
import json
import os
import sys
from pathlib import Path

import pytest

from perfsight.tune.bank import Bank, Entry
from perfsight.tune.device import device_facts, device_fingerprint
from tests.e2e.conftest import perfsight, script

pytestmark = pytest.mark.e2e

TRANSFORMER = """import sys
import torch
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
model = torch.nn.Sequential(layer, torch.nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4, 16, 32)
for step in range(int(sys.argv[1])):
    optimizer.zero_grad()
    model(x).mean().backward()
    optimizer.step()
    print("step", step, flush=True)
"""


def test_tuning_a_transformer_shows_each_signature_attention_included(tmp_path):
    """nn.TransformerEncoderLayer (dropout 0.1) calls scaled_dot_product_attention with dropout while it
    trains: the call is tuned, and the table says, per signature, the times, the winner and why."""
    train = tmp_path / "transformer.py"
    train.write_text(TRANSFORMER)
    result = perfsight("tune", "--mode", "op", "--bank", tmp_path / "bank", "--", sys.executable, train, "3",
                       cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "step 2" in result.stdout
    [bank] = (tmp_path / "bank").iterdir()
    entries = json.loads((bank / "opat.json").read_text())["entries"].values()
    [attention] = [e for e in entries if e["signature"]["op"] == "sdpa"]
    assert attention["signature"]["attrs"]["dropout_p"] == 0.1
    timed = {c["name"]: c for c in attention["candidates"]}
    assert timed["default"]["samples"] > 0 and timed["sdpa_math"]["ok"] and timed["sdpa_math"]["samples"] > 0
    lines = result.stderr.splitlines()
    assert "operator tuning (OPAT): 6 signatures" in result.stderr
    row = next(i for i, line in enumerate(lines) if line.startswith("│ 0.self_attn/sdpa "))
    cells = [cell.strip() for cell in lines[row].split("│")[1:-1]]
    assert float(cells[1].replace(",", "")) == pytest.approx(timed["default"]["median_us"], abs=0.06)
    assert lines[row + 1].startswith("│ sdpa 4x4x") and "train" in lines[row + 1]
    winners = sum(1 for e in entries if e["winner"])
    verdict = next(line for line in lines if line.startswith("perfsight: operator tuning (OPAT): tuning "))
    assert (verdict == "perfsight: operator tuning (OPAT): tuning finished: no candidate beat the default for any "
                       "of 6 signatures; the bank holds no winners for this model") == (winners == 0), verdict
    assert "tuning successful" not in verdict or winners > 0


def winnerless_bank(root) -> Bank:
    """A bank of this device at 1 thread (scripts run with OMP_NUM_THREADS=1) whose one entry has no winner."""
    bank = Bank(root, device_fingerprint({**device_facts(), "threads": 1}))
    sig = {"op": "linear", "tensors": {}, "attrs": {}, "train": True}
    bank.put(Entry(key=bank.key("op", sig), kind="op", signature=sig, winner=None, default_us=5.0,
                   candidates=[{"name": "default", "params": {}}]), repeat=False)
    return bank


def test_verify_with_a_bank_without_winners_refuses_before_the_script_runs(tmp_path):
    bank = winnerless_bank(tmp_path / "bank")
    result = perfsight("tune", "--verify", "--bank", tmp_path / "bank", "--", sys.executable, script("train_tiny.py"),
                       "9", cwd=tmp_path)
    assert result.returncode == 2 and "step 0" not in result.stdout
    assert (f"perfsight: error: the tuning bank holds no winners: no candidate beat the default for any signature "
            f"of {bank.directory} (1 operator, 0 subgraph and 0 step-settings signatures tuned); nothing to "
            "verify") in result.stderr


@pytest.mark.parametrize("command", [["tune", "--verify"], ["tune", "--mode", "op"]])
def test_a_damaged_bank_is_refused_before_the_script_runs(tmp_path, command):
    bank = winnerless_bank(tmp_path / "bank")
    (bank.directory / "opat.json").write_text("[]")
    result = perfsight(*command, "--bank", tmp_path / "bank", "--", sys.executable, script("train_tiny.py"), "9",
                       cwd=tmp_path)
    assert result.returncode == 2 and "step 0" not in result.stdout and "Traceback" not in result.stderr
    assert (f"perfsight: error: the tuning bank file {bank.directory / 'opat.json'} is damaged: Expected `object`, "
            "got `array`; allowed: ") in result.stderr
    assert (bank.directory / "opat.json").read_text() == "[]"


def test_a_damaged_bank_at_run_time_is_reported_and_the_script_trains_on(tmp_path):
    bank = winnerless_bank(tmp_path / "bank")
    (bank.directory / "bank.json").unlink()
    result = perfsight("run", "-o", tmp_path / "prof", "--", sys.executable, script("train_tiny.py"), "3",
                       cwd=tmp_path, env={"TUNE_BANK_PATH": str(tmp_path / "bank"), "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert "step 2" in result.stdout and "Traceback" not in result.stderr
    assert (f"perfsight: the tuning bank {bank.directory} has opat.json but no bank.json, which records the library "
            "versions it was tuned under") in result.stderr
    assert "; the tuning bank is not applied" in result.stderr


SOURCE = {"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}   # this checkout's perfsight


@pytest.mark.parametrize("file", ["bank.json", "opat.json"])
def test_a_fifo_in_the_bank_is_refused_before_verify_and_reported_at_run_time(tmp_path, file):
    """A FIFO where a bank file should be is never waited on: ``tune --verify`` refuses before the script runs,
    and ``perfsight run`` under TUNE_BANK_PATH says so at the first forward while the training goes on."""
    bank = winnerless_bank(tmp_path / "bank")
    fifo = bank.directory / file
    fifo.unlink()
    os.mkfifo(fifo)
    refused = (f"the tuning bank file {fifo} cannot be read (a FIFO (named pipe), not a regular file; perfsight "
               "reads only regular files): move it away and tune again")
    verified = perfsight("tune", "--verify", "--bank", tmp_path / "bank", "--", sys.executable,
                         script("train_tiny.py"), "9", cwd=tmp_path, env=SOURCE, timeout=120)
    assert verified.returncode == 2 and "step 0" not in verified.stdout and "Traceback" not in verified.stderr
    assert f"perfsight: error: {refused}" in verified.stderr
    ran = perfsight("run", "-o", tmp_path / "prof", "--", sys.executable, script("train_tiny.py"), "3", cwd=tmp_path,
                    env={**SOURCE, "TUNE_BANK_PATH": str(tmp_path / "bank"), "OMP_NUM_THREADS": "1"}, timeout=120)
    assert ran.returncode == 0 and "step 2" in ran.stdout and "Traceback" not in ran.stderr, ran.stderr
    assert f"perfsight: {refused}; the tuning bank is not applied" in ran.stderr
