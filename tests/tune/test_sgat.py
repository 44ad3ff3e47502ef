"""Subgraph tuning: the repay rule on a deterministic fake clock and fake compiles, apply, the session,
and one tiny real torch.compile run."""
import json

import pytest
import torch

import perfsight.tune
from perfsight.core.errors import OptionError
from perfsight.tune import settings
from perfsight.tune.apply import apply_subgraphs
from perfsight.tune.bank import Bank
from perfsight.tune.report import SgatReport
from perfsight.tune.session import plan
from perfsight.tune.sgat import tune_subgraphs
from perfsight.tune.variants import Variant, variants

EAGER_US = 100
COST_US = {"compile_default": 50, "compile_lite": 80, "compile_default+freezing": 40, "threads_2": 70}
COMPILE_S = {"compile_default": 10.0, "compile_lite": 0.001, "compile_default+freezing": 1000.0}


class Clock:
    """A fake nanosecond clock: each reading advances it by 1 us; runs advance it by their cost."""

    def __init__(self):
        self.now = 0

    def __call__(self) -> int:
        self.now += 1_000
        return self.now


def mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8)))
    return model.eval(), torch.randn(4, 8)


def faked(model, clock):
    """Eager calls of the region cost EAGER_US; the fake compiler's calls cost COST_US (and COMPILE_S once)."""
    model[0].register_forward_pre_hook(lambda _m, _a: setattr(clock, "now", clock.now + EAGER_US * 1000))

    def compiler(fn, variant):
        first = [True]

        def call(*args, **kwargs):
            clock.now += (COST_US[variant.name] - EAGER_US) * 1000
            if first[0] and variant.compile:
                clock.now += int(COMPILE_S[variant.name] * 1e9)
                first[0] = False
            return fn(*args, **kwargs)
        return call
    return compiler


@pytest.mark.parametrize("expected_steps, winner", [(10, None), (1000, "compile_lite"),
                                                    (1_000_000, "compile_default")])
def test_a_compiled_variant_wins_only_when_it_repays_its_compile_time(tmp_path, expected_steps, winner):
    model, x = mlp()
    clock = Clock()
    bank = Bank(tmp_path / "bank", fingerprint="test")
    report = SgatReport(tmp_path / "out", "mlp")
    params = list(model.parameters())
    result = tune_subgraphs(model, x, whole=False, bank=bank, report=report, timer=clock, expected_steps=expected_steps,
                            modes=["default", "lite"], schedule=False, compiler=faked(model, clock), max_share=1.0,
                            warmup=1, repeats=3)
    [sub] = result.subgraphs
    assert sub.names == ["0"] and not sub.signature["train"]
    assert sub.compile_s == pytest.approx({n: s + 1e-6 * (COST_US[n] + 1) for n, s in COMPILE_S.items()})
    # (eager - candidate) * calls_per_step * expected_steps > compile time
    assert sub.repays == {n: (EAGER_US - COST_US[n]) * 1e-6 * expected_steps > sub.compile_s[n] for n in COMPILE_S}
    m = sub.measurement
    assert m.default.median_us == EAGER_US + 1 and (m.winner.name if m.winner else None) == winner
    entry = bank.get("subgraph", sub.key)
    assert entry.winner == winner and {c["name"]: c.get("repays") for c in entry.candidates} == {
        "default": None, **sub.repays}
    assert sub.update_mode == ("add" if winner else "unsatisfied")
    sgat = json.loads(report.path.read_text())[report.name][1]["SGAT"]
    assert sgat["model_baseline_performance(ms)"] == pytest.approx((EAGER_US + 1) / 1e3)
    after = COST_US[winner] + 1 if winner else EAGER_US + 1
    assert sgat["model_result_performance(ms)"] == pytest.approx(after / 1e3)
    assert len(sgat["repo_modified_subgraphs"]["add_repo_subgraphs"]) == (1 if winner else 0)
    assert all(p is q for p, q in zip(params, model.parameters()))
    assert model[0]._compiled_call_impl is None  # nothing stays applied


def test_variants_per_signature():
    sig = {"inputs": [{"shape": [2, 3, 8, 8], "device": "cpu"}], "kwargs": {}, "train": True}
    names = [v.name for v in variants(sig, ["default"], schedule=False)]
    assert names == ["eager+channels_last", "compile_default", "compile_default+channels_last"]
    sig["train"] = False
    assert "compile_default+freezing+channels_last" in [v.name for v in variants(sig, ["default"])]
    assert [v.compile for v in variants(sig)].count("reduce-overhead") == 0  # CUDA graphs: GPU only
    assert Variant("x", "lite").params == {"compile": "lite", "format": "as_given", "freezing": False}


def test_a_region_at_another_thread_count_wins_with_no_compile_to_repay_and_runs_there(tmp_path, monkeypatch):
    """The Schedule variant of a region: offered at 1 thread on 2 cores for the model itself (one switch for
    all its work; the regions inside it are not tried at that count), it repays at once (no compile) and beats
    the model compiled, so the region inside is tuned too; applied, the model's operators run at 2 threads
    while the rest of the step stays at 1."""
    monkeypatch.setattr(settings, "usable_cores", lambda: 2)
    torch.set_num_threads(1)
    model, x = mlp()
    clock = Clock()
    bank = Bank(tmp_path / "bank", fingerprint="test")
    result = tune_subgraphs(model, x, bank=bank, timer=clock, expected_steps=10, modes=["lite"],
                            compiler=faked(model, clock), max_share=1.0, warmup=1, repeats=3)
    whole, region = result.subgraphs   # the model itself first, then the region
    assert (region.names, whole.names) == (["0"], [""])
    assert [t.name for t in whole.measurement.candidates] == ["compile_lite", "threads_2"]
    assert [t.name for t in region.measurement.candidates] == ["compile_lite"]  # inside: not at 2 threads
    assert whole.measurement.winner.name == "threads_2" and whole.measurement.winner.mode == "Schedule"
    assert bank.get("subgraph", whole.key).winner_record()["params"]["threads"] == 2
    seen = []
    model[0][0].register_forward_hook(lambda *_: seen.append(torch.get_num_threads()))
    applied = apply_subgraphs(model, bank)
    assert applied.installed == [""]
    with torch.no_grad():  # as tuned: an eval model, inference
        model(x)
        applied.remove()
        model(x)
    assert seen == [2, 1] and torch.get_num_threads() == 1


def test_the_model_itself_is_tuned_first_and_its_compiled_winner_leaves_its_regions_untuned(tmp_path):
    """The seed's order, whole model first: the model compiled wins (80 us against eager's 100, its compile
    repaid), so the region inside it is not tuned (compiled code runs its work) and applying the bank compiles
    the model only; without ``whole`` the region is what is tuned."""
    model, x = mlp()
    clock = Clock()
    bank = Bank(tmp_path / "bank", fingerprint="test")
    report = SgatReport(tmp_path / "out", "mlp")
    result = tune_subgraphs(model, x, bank=bank, report=report, timer=clock, expected_steps=1000, modes=["lite"],
                            schedule=False, compiler=faked(model, clock), max_share=1.0, warmup=1, repeats=3)
    [whole] = result.subgraphs
    assert whole.names == [""] and whole.measurement.winner.name == "compile_lite"
    assert list(bank.entries("subgraph")) == [whole.key]
    sgat = json.loads(report.path.read_text())[report.name][1]["SGAT"]          # the result file says so too
    assert len(sgat["repo_modified_subgraphs"]["add_repo_subgraphs"]) == 1 and sgat["repo_summary"]["total_num"] == 1
    applied = apply_subgraphs(model, bank, compiler=faked(model, clock))
    assert applied.installed == [""]
    applied.remove()
    alone = tune_subgraphs(model, x, bank=Bank(tmp_path / "bank2", fingerprint="test"), whole=False, timer=clock,
                           expected_steps=1000, modes=["lite"], schedule=False, compiler=faked(model, clock),
                           max_share=1.0, warmup=1, repeats=3)
    assert [sub.names for sub in alone.subgraphs] == [["0"]]


def tuned_mlp(tmp_path):
    """The mlp, its input, a bank where its region's lite compile (faked) won, and the fake compiler."""
    model, x = mlp()
    clock = Clock()
    bank = Bank(tmp_path / "bank", fingerprint="test")
    compiler = faked(model, clock)
    tune_subgraphs(model, x, whole=False, bank=bank, timer=clock, expected_steps=1000, modes=["lite"],
                   compiler=compiler,
                   max_share=1.0, warmup=1, repeats=3)
    return model, x, bank, compiler


def test_apply_runs_known_signatures_and_falls_through(tmp_path):
    model, x, bank, compiler = tuned_mlp(tmp_path)
    applied = apply_subgraphs(model, bank, compiler=compiler)
    assert applied.installed == ["0"]
    with torch.no_grad():
        expected = model[0]._call_impl(x)
        torch.testing.assert_close(model(x), expected)
        model(torch.randn(5, 8))  # untuned shape: eager
    model(x)  # with grad: only inference was tuned
    assert dict(applied.used) == {"compile_lite": 1}
    applied.remove()


def test_disabled_winners_run_eagerly_and_keep_what_they_compiled(tmp_path):
    model, x = mlp()
    clock = Clock()
    bank = Bank(tmp_path / "bank", fingerprint="test")
    compiled = []
    fake = faked(model, clock)

    def compiler(fn, variant):
        compiled.append(variant.name)
        return fake(fn, variant)
    tune_subgraphs(model, x, whole=False, bank=bank, timer=clock, expected_steps=1000, modes=["lite"], compiler=fake,
                   max_share=1.0, warmup=1, repeats=3)
    applied = apply_subgraphs(model, bank, compiler=compiler)
    with torch.no_grad():
        model(x)
        applied.disable()
        assert model[0]._compiled_call_impl is None
        model(x)
        applied.enable()
        model(x)
    assert dict(applied.used) == {"compile_lite": 2} and compiled == ["compile_lite"]  # compiled once
    applied.remove()
    applied.enable()  # removed for good
    assert model[0]._compiled_call_impl is None


def test_a_frozen_winner_is_left_once_a_weight_changes(tmp_path):
    model, x = mlp()
    clock = Clock()
    bank = Bank(tmp_path / "bank", fingerprint="test")
    compiler = faked(model, clock)
    result = tune_subgraphs(model, x, whole=False, bank=bank, timer=clock, expected_steps=10**9, modes=["default"],
                            compiler=compiler, max_share=1.0, warmup=1, repeats=3)
    assert result.subgraphs[0].measurement.winner.name == "compile_default+freezing"
    applied = apply_subgraphs(model, bank, compiler=compiler)
    with torch.no_grad():
        model(x)
        model[0][0].weight.mul_(2)  # an optimizer step
        torch.testing.assert_close(model(x), model[0]._call_impl(x))
    assert dict(applied.used) == {"compile_default+freezing": 1}
    applied.remove()
    assert model[0]._compiled_call_impl is None


def test_session_modes_and_orders(tmp_path):
    assert plan("subgraph", tmp_path).stages == ("subgraph",)
    assert plan("both", tmp_path).stages == ("step", "subgraph", "op")     # the step settings first
    assert plan("both", tmp_path, order="op,subgraph").stages == ("step", "op", "subgraph")
    assert plan("both", tmp_path, order="op,subgraph").order == "op,subgraph"
    assert plan("step", tmp_path).stages == ("step",) and plan("step", tmp_path).order is None
    assert plan(None, tmp_path, environ={"AOE_MODE": "1"}).stages == ("subgraph",)
    with pytest.raises(OptionError, match="tuning order 'op' is not allowed"):
        plan("both", tmp_path, order="op")
    model, x = mlp()
    clock = Clock()
    result = perfsight.tune.tune(model, x, whole=False, mode="subgraph", bank=tmp_path / "bank",
                                 result_dir=tmp_path / "out",
                                 timer=clock, expected_steps=1000, modes=["lite"], compiler=faked(model, clock),
                                 max_share=1.0, warmup=1, repeats=3)
    assert result.winners == {"0": "compile_lite"} and result.repo_summary["repo_add_num"] == 1
    [(_, task)] = json.loads(result.report.read_text()).items()
    assert task[1]["SGAT"]["repo_summary"]["total_num"] == 1
    assert all(c.ok for c in result.preconditions)


@pytest.mark.slow
def test_one_real_compile_of_a_small_mlp_in_inference(tmp_path):
    from torch._dynamo.utils import counters

    from perfsight.tune.variants import variant_call

    torch.set_num_threads(1)
    model, x = mlp()
    bank = Bank(tmp_path / "bank", fingerprint="test")
    compiled = []                                       # per call made: its variant, the calls of it that compiled

    def compiler(fn, variant):                          # the real one, its compiles seen by dynamo's counter
        call, calls, compiling = variant_call(fn, variant), [0], []
        compiled.append((variant.name, compiling))

        def counted(*args, **kwargs):
            graphs = counters["stats"]["unique_graphs"]
            try:
                return call(*args, **kwargs)
            finally:
                if counters["stats"]["unique_graphs"] > graphs:
                    compiling.append(calls[0])
                calls[0] += 1
        return counted
    result = tune_subgraphs(model, x, whole=False, bank=bank, modes=["default"], schedule=False, max_share=1.0,
                            expected_steps=1000, warmup=2, repeats=10, compiler=compiler)
    [sub] = result.subgraphs
    m = sub.measurement
    assert [t.name for t in m.candidates] == ["compile_default", "compile_default+freezing"]
    assert all(t.ok for t in m.candidates), [t.reason for t in m.candidates]
    # each compiles in its first call, timed apart as its compile time, and never in the timed calls after it
    # (a variant the bank got compiles once more where the step is timed with the winners applied)
    assert [name for name, _ in compiled][:2] == ["compile_default", "compile_default+freezing"]
    assert all(compiling == [0] for _, compiling in compiled), compiled
    assert all(sub.compile_s[t.name] > 0 and len(t.samples_ns) >= 10 for t in m.candidates), sub.compile_s
    assert m.winner is None or sub.repays[m.winner.name]       # only a variant that repays its compile wins


@pytest.mark.parametrize("order, op_tuned", [("subgraph,op", 0), ("op,subgraph", 2)])
def test_both_stages_in_either_order(tmp_path, order, op_tuned):
    torch.set_num_threads(1)
    model, x = mlp()
    clock = Clock()
    result = perfsight.tune.tune(model, x, whole=False, mode="both", order=order, bank=tmp_path / "bank",
                                 result_dir=tmp_path / "out", timer=clock, expected_steps=1000, modes=["lite"],
                                 schedule=False, compiler=faked(model, clock), max_share=1.0, warmup=1, repeats=3)
    # subgraph first: the linears inside the compiled region are not operator-tuned
    assert len(result.opat.operators) == op_tuned and result.winners["0"] == "compile_lite"
    tasks = json.loads(result.report.read_text()).values()
    assert [next(iter(t[1])) if len(t) > 1 else None for t in tasks][-2:] == (
        ["SGAT", None] if order == "subgraph,op" else ["OPAT", "SGAT"])


def two_regions():
    """Two regions of distinct signatures (57% and 43% of the FLOPs)."""
    torch.manual_seed(0)
    block = lambda width: torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.ReLU(),  # noqa: E731
                                              torch.nn.Linear(width, 8))
    return torch.nn.Sequential(block(64), torch.nn.Tanh(), block(48)).eval()


@pytest.mark.parametrize("failing, status_present", [({"0"}, True), ({"0", "2"}, False)])
def test_a_region_that_fails_counts_as_unsatisfied_and_all_failing_fails_the_task(
        tmp_path, monkeypatch, failing, status_present):
    """The seed: total_num counts every subgraph tuned, unsatisfied those neither in the bank before nor
    after; the SGAT part is absent when subgraph tuning failed (here: every region failed)."""
    from perfsight.tune import sgat

    real = sgat.tune_region

    def sometimes_failing(region, **kwargs):
        if region.names[0] in failing:
            raise RuntimeError(f"cannot tune {region.names[0]}")
        return real(region, **kwargs)

    monkeypatch.setattr(sgat, "tune_region", sometimes_failing)
    model, x = two_regions(), torch.randn(4, 8)
    bank = Bank(tmp_path / "bank", fingerprint="test")
    report = SgatReport(tmp_path / "out", "two")
    result = tune_subgraphs(model, x, whole=False, bank=bank, report=report, timer=Clock(), modes=["lite"],
                            compiler=lambda fn, variant: fn, max_share=0.6, warmup=1, repeats=3)
    report.finish()
    assert sorted(s.names[0] for s in result.subgraphs) == ["0", "2"]
    assert {s.names[0]: s.error for s in result.subgraphs if s.error} == {r: f"RuntimeError: cannot tune {r}"
                                                                          for r in failing}
    assert {s.names[0]: s.update_mode for s in result.subgraphs if s.error} == {r: "unsatisfied" for r in failing}
    assert result.summary.as_dict()["repo_unsatisfied_num"] == 2 and result.summary.total == 2
    parts = json.loads(report.path.read_text())[report.name]
    if status_present:
        assert parts[1]["SGAT"]["repo_summary"]["total_num"] == 2
        assert parts[1]["SGAT"]["repo_summary"]["repo_unsatisfied_num"] == 2
    else:
        assert [list(p) for p in parts] == [["basic"]]


def test_verify_with_the_model_switches_its_subgraph_winners_step_by_step(tmp_path, monkeypatch):
    from perfsight.tune import verify as verify_module

    model, x, bank, compiler = tuned_mlp(tmp_path)
    monkeypatch.setattr(verify_module, "apply_subgraphs", lambda m, b: apply_subgraphs(m, b, compiler=compiler))
    seen = []

    def step():
        with torch.no_grad():
            model(x)
        seen.append(model[0]._compiled_call_impl is not None)
    verdict = verify_module.verify(step, bank=bank, model=model, rounds=4, warmup=1)
    assert seen == [False, True, True, False, False, True, True, False, False, True]  # warm-up round, then 4
    assert dict(verdict.applied) == {"compile_lite": 5}
    assert model[0]._compiled_call_impl is None                                   # nothing stays applied


def test_te_parallel_compiler_sets_the_compile_workers_while_subgraphs_are_tuned(tmp_path, monkeypatch):
    import torch._inductor.config as inductor_config

    monkeypatch.setenv("TE_PARALLEL_COMPILER", "1")
    model, x = mlp()
    clock = Clock()
    seen, fake = [], faked(model, clock)

    def compiler(fn, variant):
        seen.append(inductor_config.compile_threads)
        return fake(fn, variant)
    before = inductor_config.compile_threads
    perfsight.tune.tune(model, x, whole=False, mode="subgraph", bank=tmp_path / "bank", result_dir=tmp_path / "out",
                        timer=clock,
                        modes=["lite"], compiler=compiler, max_share=1.0, warmup=1, repeats=3)
    assert seen and set(seen) == {1} and inductor_config.compile_threads == before


def with_dropout():
    """A region with dropout in training mode: its every call draws new random numbers."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                                                    torch.nn.Linear(32, 8)))
    return model.train(), torch.randn(4, 8)


def test_candidates_of_a_region_with_dropout_are_checked_from_one_random_state(tmp_path):
    """Eager and each candidate run from the same random-number state: a candidate that runs the region
    as eager does passes the check (each call drew other dropout masks: "result 0 differs")."""
    model, x = with_dropout()
    bank = Bank(tmp_path / "bank", fingerprint="test")
    result = tune_subgraphs(model, x, whole=False, bank=bank, timer=Clock(), modes=["default", "lite"], schedule=False,
                            compiler=lambda fn, v: fn, max_share=1.0, warmup=1, repeats=3)
    [sub] = result.subgraphs
    assert sub.signature["train"] and sub.signature["module_training"]
    assert [(t.name, t.ok, t.reason) for t in sub.measurement.candidates] == [
        ("compile_default", True, ""), ("compile_lite", True, "")]


@pytest.mark.slow
def test_real_compiles_of_a_region_with_dropout_in_training_pass_the_check(tmp_path):
    """Compiled dropout draws its random numbers as eager does (inductor's fallback_random), so a compiled
    candidate of a training region with dropout reproduces eager from the same random-number state."""
    torch.set_num_threads(1)
    model, x = with_dropout()
    bank = Bank(tmp_path / "bank", fingerprint="test")
    result = tune_subgraphs(model, x, whole=False, bank=bank, modes=["default"], schedule=False, max_share=1.0,
                            warmup=1,
                            repeats=3)
    [sub] = result.subgraphs
    assert [(t.name, t.ok, t.reason) for t in sub.measurement.candidates] == [("compile_default", True, "")]
    entry = bank.get("subgraph", sub.key)
    assert [c["ok"] for c in entry.candidates] == [True, True]
