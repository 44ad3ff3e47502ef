"""The step-settings stage: an optimizer's implementation (for-loop, foreach, fused) as a signature, switched in
place, tuned on copies, proven in the step and applied (tune/optimizers.py, tune/optat.py, apply.AppliedOptimizers)."""
import copy
import json

import pytest
import torch
from rich.console import Console
from torch.optim.optimizer import register_optimizer_step_post_hook

import perfsight
from perfsight.core.errors import TuneBankError
from perfsight.tune import optimizers
from perfsight.tune.apply import apply_optimizers
from perfsight.tune.autostart import proof_status
from perfsight.tune.bank import Bank
from perfsight.tune.optat import copies_bytes, tune_optimizers
from perfsight.tune.scriptbank import ScriptBank
from perfsight.tune.verify import verify
from perfsight.views.terminal import print_tuning

#: what one optimizer step costs on the fake clock, per implementation (us), and the jitter added in turn
COST_US = {"for_loop": 300, "foreach": 280, "fused": 100}
JITTER_US = (0, 30, -20, 10)


class StepClock:
    """A nanosecond clock that every optimizer step advances by what its implementation costs (``COST_US``)
    plus a repeating jitter: what an implementation saves is the only thing that moves it."""

    def __init__(self, cost_us=COST_US):
        self.now, self.cost_us, self.steps = 0, cost_us, []
        self.handle = register_optimizer_step_post_hook(self._stepped)

    def __call__(self) -> int:
        return self.now

    def _stepped(self, optimizer, _args, _kwargs) -> None:
        name = optimizers.implementation(optimizer)
        self.now += (self.cost_us[name] + JITTER_US[len(self.steps) % len(JITTER_US)]) * 1000
        self.steps.append(name)


@pytest.fixture
def clock():
    made = StepClock()
    yield made
    made.handle.remove()


def model_and_batch(seed: int = 0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)), torch.randn(8, 16)


def train(model, optimizer, x, steps: int) -> None:
    for _ in range(steps):
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()


def trained(optimizer_class=torch.optim.Adam, steps: int = 2, **options):
    """A model, its optimizer after ``steps`` steps (its state holds moments and step counts) and its batch."""
    model, x = model_and_batch()
    optimizer = optimizer_class(model.parameters(), **options)
    train(model, optimizer, x, steps)
    return model, optimizer, x


def snapshot(model, optimizer):
    return [p.detach().clone() for p in model.parameters()], copy.deepcopy(optimizer.state_dict())


def assert_untouched(model, optimizer, saved):
    weights, state = saved
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), weights))
    now = optimizer.state_dict()
    assert now["param_groups"] == state["param_groups"]
    for index, values in state["state"].items():
        assert all(torch.equal(now["state"][index][k], v) for k, v in values.items())


def test_a_signature_leaves_out_the_learning_rate_and_the_implementation_and_keeps_the_rest(tmp_path):
    model, _ = model_and_batch()
    bank = Bank(tmp_path)

    def key(optimizer) -> str:
        return bank.key("step", optimizers.signature(optimizer))

    base = torch.optim.Adam(model.parameters(), lr=1e-3)
    assert key(torch.optim.Adam(model.parameters(), lr=5e-2, foreach=True)) == key(base)
    assert key(torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.8, 0.99))) != key(base)
    assert key(torch.optim.AdamW(model.parameters(), lr=1e-3)) != key(base)
    assert key(torch.optim.Adam(list(model.parameters())[:2], lr=1e-3)) != key(base)
    sig = optimizers.signature(base)
    assert (sig["optimizer"], sig["params"], sig["elements"], sig["dtypes"], sig["devices"]) == (
        "torch.optim.adam.Adam", 4, 16 * 32 + 32 + 32 * 4 + 4, ["float32"], ["cpu"])
    assert sig["groups"][0]["betas"] == [0.9, 0.999] and "lr" not in sig["groups"][0]
    assert optimizers.describe(sig) == "Adam over 4 parameters (676 elements, float32 on cpu)"


def test_the_implementations_a_class_takes_on_its_parameters():
    params = list(model_and_batch()[0].parameters())
    assert optimizers.implementations(torch.optim.SGD(params, lr=0.1)) == ["for_loop", "foreach", "fused"]
    assert optimizers.implementations(torch.optim.Adamax(params)) == ["for_loop", "foreach"]   # no fused kernel
    assert optimizers.implementations(torch.optim.LBFGS(params)) == []                        # one way only
    assert optimizers.implementations(torch.optim.SGD(params, lr=0.1, differentiable=True)) == []
    # what it runs now: its flags, or torch's default for them (on CPU, the loop: no foreach kernels there)
    assert optimizers.implementation(torch.optim.Adam(params)) == "for_loop"
    assert optimizers.implementation(torch.optim.Adam(params, foreach=True)) == "foreach"
    assert optimizers.implementation(torch.optim.Adam(params, fused=True)) == "fused"


def test_a_switched_optimizer_steps_as_one_built_that_way_and_switches_back_as_it_was_built():
    fused_model, built_fused, x = trained(fused=True)
    model, switched, _ = trained()
    as_built = optimizers.flags(switched)
    assert as_built == [{"foreach": None, "fused": None}]
    optimizers.switch(switched, "fused")
    assert switched.param_groups[0]["fused"] is True and switched.param_groups[0]["foreach"] is False
    for p in model.parameters():   # its step counts live where the fused kernel keeps them
        step = switched.state[p]["step"]
        assert (step.device, step.dtype, step.item()) == (p.device, torch.float32, 2.0)
    train(fused_model, built_fused, x, 3)
    train(model, switched, x, 3)
    for mine, theirs in zip(model.parameters(), fused_model.parameters()):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
    optimizers.switch(switched, as_built)
    assert optimizers.flags(switched) == as_built
    assert all(switched.state[p]["step"].device.type == "cpu" for p in model.parameters())
    with pytest.raises(ValueError, match="'turbo' is not one of for_loop, foreach, fused"):
        optimizers.switch(switched, "turbo")


def test_tuning_keeps_the_fastest_implementation_and_never_touches_the_users_optimizer(tmp_path, clock):
    model, optimizer, _ = trained()
    saved = snapshot(model, optimizer)
    bank = Bank(tmp_path)
    result = tune_optimizers([optimizer, optimizer], bank=bank, timer=clock, warmup=1, repeats=5)
    [done] = result.optimizers                                     # one signature, tuned once
    assert (done.op_name, done.update_mode, done.measurement.winner.name) == ("optimizer 0 (Adam)", "add", "fused")
    assert_untouched(model, optimizer, saved)
    assert optimizer.param_groups[0]["fused"] is None
    # every implementation was timed on its own copy: the default (the loop the optimizer runs) and both others
    assert set(clock.steps) == {"for_loop", "foreach", "fused"}
    stored = json.loads(next(tmp_path.glob("*/step.json")).read_text())
    assert stored["kind"] == "step"
    [entry] = stored["entries"].values()
    assert entry["winner"] == "fused" and entry["signature"] == done.signature
    assert [(c["name"], c["mode"], c["ok"], c["params"].get("implementation")) for c in entry["candidates"]] == [
        ("default", "default", True, None), ("foreach", "Impl", True, "foreach"), ("fused", "Impl", True, "fused")]
    row = done.row()
    assert (row["where"], row["what"], row["winner"], row["default_us"]) == (
        "optimizer 0 (Adam)", "Adam over 4 parameters (676 elements, float32 on cpu)", "fused", 300.0)
    again = tune_optimizers([optimizer], bank=bank, timer=clock)
    assert [o.update_mode for o in again.optimizers] == ["reserve"]   # not re-tuned without REPEAT_TUNE


def test_the_memory_the_stage_holds_is_counted_for_the_precondition():
    _, optimizer, _ = trained()
    params = 676 * 4                        # float32 elements of the model
    state = 2 * params + 4 * 4              # Adam's two moments, and a float32 step count per parameter
    # three implementations, each a copy of parameters, gradients and state; the start of the updates; and the
    # copy of parameters and state a proof on a script's replay restores
    assert copies_bytes([optimizer]) == 3 * (2 * params + state) + params + (params + state)
    assert copies_bytes([]) == 0


class WrongWhenFused(torch.optim.SGD):
    """An SGD whose fused implementation takes twice the learning rate: a planted wrong candidate."""

    def step(self, closure=None):
        fused = [group for group in self.param_groups if group["fused"]]
        for group in fused:
            group["lr"] *= 2
        try:
            return super().step(closure)
        finally:
            for group in fused:
                group["lr"] /= 2


def test_an_implementation_that_updates_otherwise_is_rejected_by_the_check(tmp_path, clock):
    _, optimizer, _ = trained(WrongWhenFused, lr=0.1, momentum=0.9)
    [done] = tune_optimizers([optimizer], bank=Bank(tmp_path), timer=clock, warmup=1, repeats=5).optimizers
    fused = next(t for t in done.measurement.candidates if t.name == "fused")
    assert not fused.ok and fused.reason.startswith("result 0 differs")
    assert done.measurement.winner is None or done.measurement.winner.name == "foreach"
    assert "rejected: fused (result differs)" in done.measurement.why()


def test_the_applied_winner_runs_on_the_optimizers_it_fits_and_they_are_put_back_as_built(tmp_path, clock):
    model, optimizer, x = trained()
    tune_optimizers([optimizer], bank=Bank(tmp_path), timer=clock, warmup=1, repeats=5)
    other = torch.optim.Adam(model.parameters(), betas=(0.8, 0.9))          # another signature: no winner
    applied = apply_optimizers(Bank(tmp_path, next(tmp_path.iterdir()).name, read_only=True))
    try:
        assert applied.installed
        for each in (optimizer, other):
            each.step()
        assert optimizers.implementation(optimizer) == "fused" and optimizers.implementation(other) == "for_loop"
        assert dict(applied.used) == {"fused": 1}
        applied.disable()
        assert optimizers.flags(optimizer) == [{"foreach": None, "fused": None}]
        optimizer.step()
        assert optimizers.implementation(optimizer) == "for_loop" and dict(applied.used) == {"fused": 1}
        applied.enable()
        applied.only = frozenset()                 # an in-step trial without this winner
        optimizer.step()
        assert optimizers.implementation(optimizer) == "for_loop"
        applied.only = None
        optimizer.step()
        assert optimizers.implementation(optimizer) == "fused" and dict(applied.used) == {"fused": 2}
    finally:
        applied.remove()
    assert optimizers.flags(optimizer) == [{"foreach": None, "fused": None}]
    optimizer.step()
    assert optimizers.implementation(optimizer) == "for_loop"    # the hook is gone


def test_a_step_winner_whose_params_are_not_allowed_is_refused_naming_the_entry(tmp_path, clock):
    _, optimizer, _ = trained()
    tune_optimizers([optimizer], bank=Bank(tmp_path), timer=clock, warmup=1, repeats=5)
    path = next(tmp_path.glob("*/step.json"))
    stored = json.loads(path.read_text())
    [(key, entry)] = stored["entries"].items()
    next(c for c in entry["candidates"] if c["name"] == "fused")["params"]["implementation"] = "turbo"
    path.write_text(json.dumps(stored))
    with pytest.raises(TuneBankError, match=rf"{path} is damaged: entry '{key}': its winner 'fused' has params "
                                            r'\{"implementation": "turbo"\}.*allowed: an object \{"implementation"'):
        apply_optimizers(Bank(tmp_path, path.parent.name, read_only=True))


def test_the_step_stage_is_proven_in_the_training_step_then_verify_applies_it(tmp_path, clock):
    model, x = model_and_batch()
    optimizer = torch.optim.Adam(model.parameters())

    def step():
        optimizer.zero_grad()
        model(x).pow(2).mean().backward()
        optimizer.step()

    result = perfsight.tune.tune(model, step=step, mode="step", bank=tmp_path / "bank", result_dir=tmp_path / "out",
                                 timer=clock, warmup=1, repeats=5)
    assert result.winners == {"optimizer 0 (Adam)": "fused"}
    [row] = result.rows
    assert row["winner"] == "fused" and row["in_step"]["decision"] == "kept"
    # the step is the optimizer's on this clock: 300 us against 100 us
    assert row["in_step"]["speedup"] == pytest.approx(3.0, rel=0.2) and row["in_step"]["speedup_low"] > 1.0
    assert result.proof.kept and optimizers.implementation(optimizer) == "for_loop"   # put back after the proof
    [(_, task)] = json.loads(result.report.read_text()).items()
    part = task[1]["perfsight_step_settings"]
    assert part["repo_summary"]["repo_add_num"] == 1
    assert part["repo_modified_operators"][0]["op_type"] == "Adam"
    assert set(part["repo_modified_operators"][0]["tune_performance"]) == {"Impl"}
    verdict = verify(step, bank=tmp_path / "bank", rounds=8, warmup=1, timer=clock)
    assert verdict.wins and verdict.applied == {"fused": 8 + 1}
    assert optimizers.implementation(optimizer) == "for_loop"
    # what perfsight tune prints of it
    status = {"report": str(result.report), "bank": str(result.bank), "proof": proof_status(result),
              "stages": {"step": {"repo_summary": result.repo_summary, "winners": result.winners,
                                  "rows": result.rows, "verdict": result.verdict}}}
    console = Console(record=True, width=100)
    print_tuning(status, console)
    shown = console.export_text()
    assert "step-settings tuning (optimizers, data loaders, TunableOp): 1 signatures" in shown
    assert "│ optimizer 0 (Adam) " in shown and "│ Adam over…nts, float32 on cpu) " in shown
    assert "perfsight: in the step: 1 winner(s) kept, 0 rejected" in shown


def test_a_script_bank_of_step_settings_alone_switches_the_scripts_optimizer_on_and_off(tmp_path, clock):
    model, optimizer, _ = trained()
    tune_optimizers([optimizer], bank=Bank(tmp_path), timer=clock, warmup=1, repeats=5)
    applied = ScriptBank(model, tmp_path)      # no operator or subgraph winner: the step winner is enough
    assert "step-settings winners" in applied.describe()
    applied.switch(True)
    optimizer.step()
    assert optimizers.implementation(optimizer) == "fused"
    applied.switch(False)
    assert optimizers.flags(optimizer) == [{"foreach": None, "fused": None}]
    optimizer.step()
    assert dict(applied.used) == {"fused": 1}
    applied.optimizers.remove()
