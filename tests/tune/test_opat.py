"""OPAT end to end: bank update modes and report counters with a fake clock, and one small real run."""
import json

import torch

from perfsight.tune import opat
from perfsight.tune.bank import Bank
from perfsight.tune.capture import train_step
from perfsight.tune.report import OpatReport
from tests.tune.models import example

COST_US = {"default": 100, "pretransposed_weight": 50, "channels_last+onednn": 99}


def fake_clock(monkeypatch):
    """Every op call advances a fake clock by its candidate's cost: linear's candidate wins, others don't."""
    clock = {"now": 0}
    real_run = opat.run

    def run(candidate, func, args, kwargs):
        clock["now"] += COST_US.get(candidate.name, 100) * 1000
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
    result = opat.tune_operators(train_step(model, x), bank=bank, model=model, warmup=1, repeats=5)
    assert result.static and result.summary.total == 6
    assert not any(o.error for o in result.operators)
    for o in result.operators:
        m = o.measurement
        assert m.default.median_us > 0 and len(m.default.samples_ns) == 5
        assert o.update_mode == ("add" if m.winner else "unsatisfied")
        if m.winner:  # a winner is valid and beyond noise + margin
            assert m.winner.ok and m.winner.median_us < m.default.median_us * 0.97
        assert {t.name for t in m.candidates if not t.ok} <= {"sdpa_efficient"}  # no CPU kernel
