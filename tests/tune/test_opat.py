"""OPAT end to end: bank update modes and report counters with a fake clock, and one small real run."""
import itertools
import json
import warnings

import pytest
import torch

from perfsight.tune import opat
from perfsight.tune.bank import Bank
from perfsight.tune.candidates import _COMPILED, DEFAULT, candidates_for
from perfsight.tune.capture import Capture, OpRecord, capture, train_step
from perfsight.tune.report import OpatReport
from tests.tune.models import example

COST_US = {"default": 100, "pretransposed_weight": 50, "channels_last+onednn": 99}


def fake_clock(monkeypatch, costs=COST_US, compile_s=1.0, others=100):
    """Every op call advances a fake clock by its candidate's cost (``others`` for a candidate not in
    ``costs``): linear's candidate wins, others don't. The compiled candidate runs the default, its first
    call per signature costing ``compile_s`` more."""
    clock = {"now": 0}
    compiled = set()
    real_run = opat.run

    def run(candidate, func, args, kwargs):
        clock["now"] += costs.get(candidate.name, others) * 1000
        if candidate.name == "compiled":
            if id(kwargs) not in compiled:
                compiled.add(id(kwargs))
                clock["now"] += int(compile_s * 1e9)
            candidate = DEFAULT
        return real_run(candidate, func, args, kwargs)
    monkeypatch.setattr(opat, "run", run)
    return lambda: clock["now"]


def test_update_modes_and_counters_with_a_fake_clock(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    timer = fake_clock(monkeypatch)
    model, x = example()
    bank = Bank(tmp_path / "bank", fingerprint="test")
    report = OpatReport(tmp_path / "results", "small")
    first = opat.tune_operators(train_step(model, x), bank=bank, model=model, report=report, timer=timer,
                                warmup=1, repeats=3)
    report.finish()
    modes = {o.op_name: o.update_mode for o in first.operators}
    assert modes == {"conv1/conv2d": "unsatisfied", "dw/conv2d": "unsatisfied", "attn/sdpa": "unsatisfied",
                     "attn.qkv/linear": "add", "attn.proj/linear": "add", "head/linear": "add"}
    head = next(o for o in first.operators if o.op_name == "head/linear")
    entry = bank.get("op", head.key)
    assert entry.winner == "pretransposed_weight" and entry.default_us == 100 and entry.winner_us == 50
    assert [c["name"] for c in entry.candidates][:2] == ["default", "pretransposed_weight"]  # all timings kept
    assert entry.candidates[0]["params"]["threads"] == 1
    conv = bank.get("op", next(o.key for o in first.operators if o.op_name == "conv1/conv2d"))
    assert conv.winner is None and {c["name"] for c in conv.candidates} >= {"contiguous+native",
                                                                           "channels_last+onednn"}
    second = opat.tune_operators(train_step(model, x), bank=bank, model=model, timer=timer, warmup=1, repeats=3)
    assert second.summary.as_dict() == {"repo_add_num": 0, "repo_hit_num": 3, "repo_reserved_num": 3,
                                        "repo_unsatisfied_num": 3, "repo_update_num": 0, "total_num": 6}
    assert [o.measurement is None for o in second.operators].count(True) == 3  # strategies not re-tuned
    written = json.loads(report.path.read_text())
    section = next(iter(written.values()))[1]["OPAT"]
    assert section["repo_summary"]["repo_add_num"] == 3 and section["repo_summary"]["total_num"] == 6
    assert section["opat_tuning_result"] == "tuning successful"
    names = {r["op_name"]: r["tune_performance"] for r in section["repo_modified_operators"]}
    assert names["head/linear"]["Impl"]["performance_improvement"] == "100.00%"


def test_a_small_real_run(tmp_path):
    torch.set_num_threads(1)
    model, x = example(batch=2, size=8)
    bank = Bank(tmp_path, fingerprint="real")
    # tuned for a 1-step run, where no compile can pay: the compiled candidate is not tried
    result = opat.tune_operators(train_step(model, x), bank=bank, model=model, warmup=1, repeats=5,
                                 expected_steps=1)
    assert result.static and result.summary.total == 6
    assert not any(o.error for o in result.operators)
    for o in result.operators:
        m = o.measurement
        assert m.default.median_us > 0 and len(m.default.samples_ns) in (5, 10, 15)  # more rounds when undecided
        assert o.update_mode == ("add" if m.winner else "unsatisfied")
        if m.winner:  # a winner is valid and beyond noise + margin
            assert m.winner.ok and m.winner.median_us < m.default.median_us * 0.97
        assert {t.name for t in m.candidates if not t.ok} <= {"sdpa_efficient"}  # no CPU kernel
        assert "compiled" not in {t.name for t in m.candidates}


def linear_signature(train: bool = True) -> dict:
    x, w = torch.randn(16, 32), torch.randn(8, 32, requires_grad=train)
    with torch.set_grad_enabled(train):
        return capture(lambda: torch.nn.functional.linear(x, w), steps=1).tunable[0].signature


@pytest.mark.parametrize("expected_steps, winner", [(5, "pretransposed_weight"), (1000, "pretransposed_weight"),
                                                    (1_000_000, "compiled")])
def test_a_compiled_op_wins_only_when_it_repays_its_compile(tmp_path, monkeypatch, expected_steps, winner):
    # default 100 us, compiled 40 us after a 1 s compile: 60 us x 3 calls x steps must exceed 1 s
    timer = fake_clock(monkeypatch, {**COST_US, "compiled": 40})
    captured = Capture(tunable=[OpRecord(linear_signature(), "fc", "forward", 6)], steps=2)
    bank = Bank(tmp_path, fingerprint="test")
    [result] = opat.tune_captured(captured, bank=bank, timer=timer, expected_steps=expected_steps, warmup=1,
                                  repeats=3).operators
    m = result.measurement
    assert m.winner.name == winner
    compiled = next((t for t in m.candidates if t.name == "compiled"), None)
    if expected_steps == 5:  # 100 us x 3 x 5 = 1.5 ms: no compile could pay, so it is not even tried
        assert compiled is None
        return
    assert compiled.compile_s == pytest.approx(1.0, rel=1e-3) and compiled.median_us == 40  # compile apart
    assert compiled.repays is (winner == "compiled")
    record = next(c for c in bank.get("op", result.key).candidates if c["name"] == "compiled")
    assert record["compile_s"] == pytest.approx(1.0) and record["repays"] is compiled.repays
    assert bank.get("op", result.key).candidates[0]["params"]["calls_per_step"] == 3


def test_the_compiled_op_for_real(monkeypatch):
    """The one real torch.compile of these tests: a tiny inference linear, compiled once per call key, in the
    first call of the compiled candidate (its compile time), never in a call timed after it."""
    from torch._dynamo.utils import counters

    torch.set_num_threads(1)
    monkeypatch.setattr("perfsight.tune.candidates.COMPILED_MIN_US", 0.0)
    compiling = []                         # per call of the compiled candidate: whether it compiled a graph
    real_run = opat.run

    def run(candidate, func, args, kwargs):
        graphs = counters["stats"]["unique_graphs"]
        try:
            return real_run(candidate, func, args, kwargs)
        finally:
            if candidate.name == "compiled":
                compiling.append(counters["stats"]["unique_graphs"] > graphs)
    monkeypatch.setattr(opat, "run", run)
    sig = linear_signature(train=False)
    assert "compiled" in {c.name for c in candidates_for(sig, default_us=1.0, calls=1e6)}
    before = len(_COMPILED)
    m = opat.tune_signature(sig, calls_per_step=1, expected_steps=10**6, warmup=1, repeats=3)
    compiled = next(t for t in m.candidates if t.name == "compiled")
    assert compiled.ok, compiled.reason
    assert compiled.compile_s > 0 and compiled.repays is not None
    assert compiling[0] and not any(compiling[1:]) and len(compiling) > len(compiled.samples_ns) >= 3
    assert len(_COMPILED) == before + 1  # one compiled callable for the signature, reused by every call


def test_an_operator_that_fails_is_unsatisfied_and_fails_the_task(tmp_path, monkeypatch):
    """The seed: a failed operator is listed under tuning_failed_operators and the task is "tuning failed";
    it was tuned but nothing was written for it, so repo_summary counts it as unsatisfied."""
    timer = fake_clock(monkeypatch)
    real = opat.tune_signature

    def failing_for_sdpa(sig, **kwargs):
        if sig["op"] == "sdpa":
            raise RuntimeError("no kernel")
        return real(sig, **kwargs)
    monkeypatch.setattr(opat, "tune_signature", failing_for_sdpa)
    model, x = example()
    report = OpatReport(tmp_path / "results", "small")
    result = opat.tune_operators(train_step(model, x), bank=Bank(tmp_path / "bank", fingerprint="test"), model=model,
                                 report=report, timer=timer, warmup=1, repeats=3)
    report.finish()
    [failed] = [o for o in result.operators if o.error]
    assert (failed.op_name, failed.error, failed.update_mode) == ("attn/sdpa", "RuntimeError: no kernel", "unsatisfied")
    section = next(iter(json.loads(report.path.read_text()).values()))[1]["OPAT"]
    assert section["opat_tuning_result"] == "tuning failed" and section["tuning_failed_operators"] == ["attn/sdpa"]
    assert section["repo_summary"] == result.summary.as_dict()
    assert section["repo_summary"]["total_num"] == 6 and section["repo_summary"]["repo_unsatisfied_num"] == 3


def test_attention_of_a_real_transformer_layer_in_training_is_captured_and_measured(tmp_path):
    """nn.TransformerEncoderLayer calls scaled_dot_product_attention through MultiheadAttention with its
    dropout (0.1 by default) while training: that call is captured, its candidates are checked from one
    random-number state (the math backend, which the default runs on a CPU with dropout, passes) and timed;
    a backend that cannot run says why in its reason, not as warnings on the user's terminal. The calls are
    real, their times a clock that every reading advances by 1 us: each call takes 1 us, so no candidate is
    ahead of the default and each is timed the 3 rounds asked (on real times, a candidate ahead by chance is
    timed on, and a slow default offers the thread-count candidate too)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True).train()
    x = torch.randn(2, 8, 16)
    bank = Bank(tmp_path, fingerprint="real")
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        result = opat.tune_operators(train_step(model, x), bank=bank, model=model, warmup=1, repeats=3,
                                     expected_steps=1, timer=itertools.count(0, 1000).__next__)
    assert not [w for w in warned if "kernel" in str(w.message)]
    [attention] = [o for o in result.operators if o.signature["op"] == "sdpa"]
    assert attention.op_name == "self_attn/sdpa" and not attention.error
    sig = attention.signature
    assert sig["attrs"] == {"dropout_p": 0.1, "is_causal": False} and sig["train"]
    assert sig["tensors"]["query"]["shape"] == [2, 2, 8, 8]  # batch, heads, tokens, head width
    checked = {t.name: (t.ok, len(t.samples_ns), t.reason) for t in attention.measurement.candidates}
    assert checked["sdpa_math"] == (True, 3, "") and len(attention.measurement.default.samples_ns) == 3
    assert checked["sdpa_flash"] == (False, 0, "RuntimeError: No available kernel.  Aborting execution. (Flash "
                                     "attention kernel not used because: Both fused kernels do not support "
                                     "non-zero dropout.)")
    assert bank.get("op", attention.key).signature == sig


def test_a_task_without_winners_says_so_and_shows_why_per_signature(tmp_path, monkeypatch):
    from rich.console import Console

    import perfsight.tune
    from perfsight.views.terminal import print_tuning

    torch.set_num_threads(1)
    timer = fake_clock(monkeypatch, {"default": 100}, others=120)  # every candidate slower than the default
    model, x = example()
    result = perfsight.tune.tune(model, x, mode="op", bank=tmp_path / "bank", result_dir=tmp_path / "out",
                                 timer=timer, warmup=1, repeats=3)
    assert result.verdict == ("tuning finished: no candidate beat the default for any of 6 signatures; the bank "
                              "holds no winners for this model")
    [task] = json.loads(result.report.read_text()).values()
    assert task[1]["OPAT"]["opat_tuning_result"] == "tuning successful"  # the seed's word; the verdict says more
    rows = {row["where"]: row for row in result.rows}
    assert rows["head/linear"] == {"where": "head/linear", "what": "linear 2x16 10x16 10 train",
                                   "update_mode": "unsatisfied", "default_us": 100.0, "best_us": 120.0,
                                   "best": "pretransposed_weight", "winner": None,
                                   "why": "no candidate beat the default (pretransposed_weight 20.0% slower)",
                                   "in_step": None}                  # no winner: nothing tried in the step
    assert rows["attn/sdpa"]["why"].endswith("; rejected: sdpa_efficient (cannot run)")
    status = {"report": str(result.report), "bank": str(result.bank), "stages": {"op": {
        "repo_summary": result.repo_summary, "winners": result.winners, "rows": result.rows,
        "verdict": result.verdict}}}
    console = Console(record=True, width=100)
    print_tuning(status, console)
    shown = console.export_text()
    table = [line for line in shown.splitlines() if line[:1] in "┏┃┡│└"]
    assert len(table) > 6 and all(len(line) <= 100 for line in table)
    assert "operator tuning (OPAT): 6 signatures" in shown and "│ head/linear " in shown
    assert "│ linear 2x16 10x16 10 train " in shown and "pretransposed_weight 20.0%" in shown
    assert ("perfsight: operator tuning (OPAT): tuning finished: no candidate beat the default for any of 6 "
            "signatures; the bank holds no winners for this model") in shown
    assert "perfsight: operator tuning (OPAT): repo_add_num=0, repo_hit_num=0, repo_reserved_num=0, " \
           "repo_unsatisfied_num=6, repo_update_num=0, total_num=6; winners: none" in shown
    assert "tuning successful" not in shown
