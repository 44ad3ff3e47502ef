"""The drivers of an unmodified script, in process: tuning its recorded steps (both stages, no compile),
the replayed step, and --verify's interleaved timing of its steps on a deterministic fake clock."""
import json

import pytest
import torch

from perfsight.tune import loaders, rule, settings
from perfsight.tune.apply import TunedMode
from perfsight.tune.autostart import TuningDriver, replay_step
from perfsight.tune.prove import PROOF_ROUNDS
from perfsight.tune.sgat import preserved
from perfsight.tune.verify import WINS
from perfsight.tune.verify_script import ScriptVerifier
from tests.tune.models import example
from tests.tune.test_apply import planted_bank
from tests.tune.test_verify import FakeClock


def train(model, x, optimizer, steps, *, each=lambda step: None):
    for step in range(steps):
        optimizer.zero_grad()
        model(x).mean().backward()
        each(step)
        optimizer.step()


def test_the_driver_tunes_the_regions_then_the_operators_of_the_recorded_steps(tmp_path):
    torch.set_num_threads(1)
    small, x = example()
    model = torch.nn.Sequential(small, torch.nn.Dropout(0.5))  # replaying it draws random numbers
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    params = list(model.parameters())
    config = {"mode": "both", "order": "subgraph,op", "bank": str(tmp_path / "bank"), "repeat": False, "steps": 2,
              "result_dir": str(tmp_path / "out"), "compile_modes": [], "status": str(tmp_path / "status.json")}
    driver = TuningDriver(config, "script.py")
    train(model, x, optimizer, 1)
    optimizer.zero_grad()
    model(x).mean().backward()
    grads, rng = [p.grad.clone() for p in params], torch.get_rng_state()
    stepped = [p.detach() - 0.1 * p.grad for p in params]   # what the script's SGD step makes of its weights
    optimizer.step()  # the last recorded step ends: tuning runs here
    assert driver.done and not driver.handles[0].hooks_dict_ref()
    status = json.loads((tmp_path / "status.json").read_text())
    assert "error" not in status, status
    assert list(status["stages"]) == ["step", "subgraph", "op"]
    # the step stage tuned the script's SGD: its for-loop against foreach and fused, each checked
    [step_entry] = json.loads(next((tmp_path / "bank").glob("*/step.json")).read_text())["entries"].values()
    assert step_entry["signature"]["optimizer"] == "torch.optim.sgd.SGD"
    assert [(c["name"], c["ok"]) for c in step_entry["candidates"]] == [("default", True), ("foreach", True),
                                                                          ("fused", True)]
    # the regions' replay saw the script's inputs; with no compile mode only channels_last was tried
    sgat = (tmp_path / "bank").glob("*/sgat.json")
    entries = json.loads(next(sgat).read_text())["entries"].values()
    regions = {e["signature"]["region"].rsplit(".", 1)[1] for e in entries}
    threads = settings.schedule_threads()
    # the model itself too, when it can be tried at another thread count
    assert regions == {"Conv2d", "Attention"} | ({"Sequential"} if threads else set())
    assert all(e["signature"]["train"] for e in entries)
    # and, at 1 thread on more cores, the model itself at every core (the regions inside it not): its forward
    # and backward reproduce eager's outputs and input and parameter gradients (the tuner's check)
    at_threads = {e["signature"]["region"].rsplit(".", 1)[1] for e in entries for c in e["candidates"]
                  if c["name"] == f"threads_{threads}" and c["ok"]}
    assert at_threads == ({"Sequential"} if threads else set()), [c for e in entries for c in e["candidates"]]
    assert {c["name"] for e in entries for c in e["candidates"]} <= {"default", "eager+channels_last",
                                                                      f"threads_{threads}"}
    assert status["stages"]["subgraph"]["repo_summary"]["total_num"] == len(entries)
    # nothing compiled: every operator tuned - unless the model itself won at another thread count in its
    # stage (kept or rejected in the step after), which leaves none to tune at the caller's count
    schedule_won = any((e.get("winner") or (e.get("rejected") or {}).get("winner")) == f"threads_{threads}"
                       for e in entries)
    assert status["stages"]["op"]["repo_summary"]["total_num"] == (0 if schedule_won else 6)
    tasks = list(json.loads(open(status["report"]).read()).values())
    assert [next(iter(t[1])) for t in tasks] == ["perfsight_step_settings", "SGAT", "OPAT"]
    # the stages' winners were tried on the replayed step before the bank got them: the bank holds exactly the
    # winners the step kept (whatever this machine's timings made of them), every tried row says how it went
    proof = status["proof"]
    stores = [json.loads(path.read_text())["entries"].values() for path in (tmp_path / "bank").glob("*/*.json")
              if path.name != "bank.json"]
    assert sum(1 for store in stores for e in store if e["winner"]) == proof["kept"]
    proposed = [r for stage in status["stages"].values() for r in stage["rows"] if r["in_step"]]
    assert proof["kept"] + proof["rejected"] == len(proposed)
    assert all(r["in_step"]["decision"] in ("kept", "rejected")
               and r["in_step"]["rounds"] in rule.planned_looks(PROOF_ROUNDS) for r in proposed)
    assert (proof["end_to_end"] is None) == (proof["kept"] == 0)
    # the script goes on as it would have: same parameters, gradients and random-number state
    assert all(p is q for p, q in zip(params, model.parameters()))
    assert all(p is q for p, q in zip(params, optimizer.param_groups[0]["params"]))
    assert all(torch.equal(p.grad, g) for p, g in zip(params, grads))
    # the weights are the script's own step's, though the proof's replays stepped the optimizer: the replay
    # of the step stage's winners runs it, and they are put back, the optimizer's state and flags too
    for p, expected in zip(params, stepped):
        torch.testing.assert_close(p.detach(), expected)
    assert optimizer.param_groups[0]["foreach"] is None and optimizer.param_groups[0]["fused"] is None
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(m._compiled_call_impl is None for m in model.modules())


def test_the_driver_says_when_the_script_made_too_few_steps(tmp_path):
    model, x = example()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    config = {"mode": "subgraph", "bank": str(tmp_path / "bank"), "repeat": False, "steps": 3,
              "result_dir": str(tmp_path), "status": str(tmp_path / "status.json")}
    driver = TuningDriver(config, "script.py")
    train(model, x, optimizer, 2)
    driver.finish()  # at exit
    assert json.loads((tmp_path / "status.json").read_text()) == {
        "error": "the script made 2 optimizer steps, fewer than the 3 to record: let it train longer or lower "
                 "--steps"}


def test_the_replayed_step_runs_backward_only_when_the_script_did():
    model, x = example()
    replay_step(model, (x,), {}, grad=True)()
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad(set_to_none=True)
    replay_step(model, (x,), {}, grad=False)()
    assert all(p.grad is None for p in model.parameters())


def test_a_replay_with_the_optimizers_steps_them_and_preserved_puts_weights_and_state_back():
    model, x = example()
    optimizer = torch.optim.Adam(model.parameters())
    train(model, x, optimizer, 2)
    weights = [p.detach().clone() for p in model.parameters()]
    state = {i: {k: v.clone() for k, v in s.items()} for i, s in optimizer.state_dict()["state"].items()}
    grads = [p.grad.clone() for p in model.parameters()]
    with preserved(model, [optimizer]):
        replay_step(model, (x,), {}, grad=True, optimizers=[optimizer])()
        assert all(p.grad is None for p in model.parameters())          # stepped, then zero_grad
        assert not all(torch.equal(p, w) for p, w in zip(model.parameters(), weights))
        assert optimizer.state_dict()["state"][0]["step"].item() == 3
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), weights))
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads))
    after = optimizer.state_dict()["state"]
    assert all(torch.equal(after[i][k], v) for i, values in state.items() for k, v in values.items())


@pytest.fixture
def this_device_bank(tmp_path):
    torch.set_num_threads(1)  # the thread count is part of the device fingerprint
    model, x = example()
    return model, x, planted_bank(tmp_path, model, x, fingerprint=None)


def verifier(tmp_path, bank, clock, rounds=5, warmup=1):
    config = {"verify": True, "bank": str(bank.directory.parent), "rounds": rounds, "warmup": warmup,
              "status": str(tmp_path / "status.json")}
    return ScriptVerifier(config, timer=clock)


def test_verify_alternates_the_bank_step_by_step_and_judges_the_timed_steps(tmp_path, this_device_bank):
    model, x, bank = this_device_bank
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    clock = FakeClock(untuned=10_000_000, tuned=8_000_000)
    check = verifier(tmp_path, bank, clock)
    train(model, x, optimizer, 13, each=lambda step: clock.step())
    assert check.done
    # the first step untimed, one warm-up round (A,B), then five timed rounds: B,A then A,B then B,A ...
    assert clock.steps == [False, False, True, True, False, False, True, True, False, False, True, True, False]
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["order"] == ["tuned", "untuned", "untuned", "tuned"] * 2 + ["tuned", "untuned"]
    assert status["warmup_steps"] == 2 and status["timed_steps"] == 10
    verdict = status["verdict"]
    assert verdict["verdict"] == WINS and verdict["wins"] and verdict["rounds"] == 5
    assert verdict["speedup"] == pytest.approx(1.25, rel=0.05)
    assert verdict["speedup_low"] <= round(verdict["speedup"], 4) <= verdict["speedup_high"]   # as rounded
    assert verdict["untuned_ms"]["median"] == pytest.approx(10.0, rel=0.05)
    assert verdict["tuned_ms"]["median"] == pytest.approx(8.0, rel=0.05)
    # six steps ran under the bank: each forward and backward calls 2 convs, 3 linears and 1 attention
    assert verdict["applied"] == {"channels_last+onednn": 12, "pretransposed_weight": 18, "sdpa_math": 6}
    assert verdict["bank"] == str(bank.directory) and verdict["threads"] == 1
    assert status["text"].startswith("the tuning bank wins end to end: speed-up 1.2")
    train(model, x, optimizer, 1, each=lambda step: clock.step())  # the script goes on untuned
    assert clock.steps[-1] is False


def test_verify_says_how_many_steps_it_needed(tmp_path, this_device_bank):
    model, x, bank = this_device_bank
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    clock = FakeClock(untuned=1_000, tuned=1_000)
    check = verifier(tmp_path, bank, clock, rounds=2, warmup=2)
    train(model, x, optimizer, 4, each=lambda step: clock.step())
    check.finish()  # at exit
    assert json.loads((tmp_path / "status.json").read_text()) == {
        "error": "the script made 4 optimizer steps; --verify needs 9: the first (not timed), 4 warm-up and 4 timed "
                 "steps: let it train longer or lower --steps"}
    assert TunedMode.current() is None  # the bank was switched off


def spoil_bank_json(bank):
    (bank.directory / "bank.json").unlink()


def spoil_store(bank):
    (bank.directory / "opat.json").write_text("[]")


def spoil_a_winner(bank):
    store = json.loads((bank.directory / "opat.json").read_text())
    for value in store["entries"].values():
        value["candidates"][0]["params"] = {"threads": "two"}  # the planted winner's record
    (bank.directory / "opat.json").write_text(json.dumps(store))


@pytest.mark.parametrize("spoil, message", [
    (spoil_bank_json, "has opat.json but no bank.json"),
    (spoil_store, "opat.json is damaged: Expected `object`, got `array`"),
    (spoil_a_winner, 'has params {"threads": "two"}: Expected `int | null`, got `str` - at `$.threads`'),
])
def test_a_damaged_bank_at_run_time_is_reported_and_the_training_goes_on_untuned(
        tmp_path, this_device_bank, monkeypatch, capsys, spoil, message):
    """TUNE_BANK_PATH under ``perfsight run``: the bank is checked at the script's first forward; a damaged
    one is not applied, the reason is logged, and the script trains on untuned."""
    from perfsight.tune import autostart

    model, x, bank = this_device_bank
    spoil(bank)
    monkeypatch.setattr(autostart, "_state", {})
    assert autostart.apply_bank_from_env({"TUNE_BANK_PATH": str(bank.directory.parent)})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    train(model, x, optimizer, 2)
    logged = capsys.readouterr().err
    assert f"perfsight: the tuning bank {bank.directory}" in logged or f"bank file {bank.directory}" in logged
    assert message in logged and logged.rstrip().endswith("; the tuning bank is not applied"), logged
    assert "Traceback" not in logged and TunedMode.current() is None


def test_the_driver_tunes_the_workers_of_the_loader_the_recorded_steps_waited_on(tmp_path, monkeypatch):
    from perfsight.tune import capture
    from tests.tune.test_loadat import SlowItems

    # whether a run is input-bound is the machine's speed to say (tests/tune/test_capture.py checks the line that
    # says it): here every wait counts, so that the loader is tuned whatever the machine's load
    monkeypatch.setattr(capture, "INPUT_BOUND_SHARE", 0.0)

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    config = {"mode": "step", "bank": str(tmp_path / "bank"), "repeat": False, "steps": 2,
              "result_dir": str(tmp_path / "out"), "status": str(tmp_path / "status.json")}
    driver = TuningDriver(config, "script.py")           # at torch's import: before the script makes its loader
    loader = torch.utils.data.DataLoader(SlowItems(), batch_size=8)   # 32 ms a batch at least
    for _, x in zip(range(3), loader):                     # its iterator is made before the first step
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()                                   # tuning runs at the end of the second
    assert driver.done
    status = json.loads((tmp_path / "status.json").read_text())
    assert "error" not in status, status
    # the batch of the second step, 8 items of at least 4 ms each, was waited for between the steps
    assert status["input"]["loaders"] == {"SlowItems, num_workers=0": 1} and status["input"]["wait_ms"] >= 32
    assert status["input"]["wait_ms"] <= status["input"]["span_ms"] and status["input"]["input_bound"]
    rows = {row["where"]: row for row in status["stages"]["step"]["rows"]}
    loaded = rows["data loader 0 (SlowItems)"]
    # every worker count was timed on the replayed steps (whether one won, and whether the rule then kept it, is
    # the machine's to say: tests/tune/test_loadat.py plants a loader whose answer is known); the bank and the
    # proof's account agree with what the stage decided
    assert loaded["best"].startswith("workers_") and loaded["default_us"] > 0
    kept = loaded["in_step"] is not None and loaded["in_step"]["decision"] == "kept"
    [entry] = [e for e in json.loads(next((tmp_path / "bank").glob("*/step.json")).read_text())["entries"].values()
               if "loader" in e["signature"]]
    assert (entry["winner"] is not None) == kept
    assert kept == status["proof"]["text"].startswith("the data loader's winner was kept")
    assert loaders.settings(loader)["num_workers"] == 0 and torch.utils.data.DataLoader.__iter__.__qualname__ == \
        "DataLoader.__iter__"                             # the script's loader untouched, torch's __iter__ back
