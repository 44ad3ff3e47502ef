"""The in-step proof of the stages' winners (tune/prove.py) with an injected clock: a step whose time is a
known function of the winners it runs under, with a deterministic jitter of +-1 us."""
from __future__ import annotations

import itertools
import json
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from perfsight.tune.measure import KEPT, REJECTED
from perfsight.tune.prove import Ablation, Proposal, prove

JITTER_NS = itertools.cycle([0, 1000, -1000, 500, -500])


def proposal(key: str, saved_us: float, calls: float = 1.0) -> Proposal:
    return Proposal("op", key, f"block/{key}", "threads_2", 100.0, 100.0 - saved_us, calls)


class Clock:
    """A step's time (ns) as a function of the winners it runs under: 1,000 us, minus what each saves alone,
    plus ``together`` for some pairs; the timer advances by that when ``step`` runs."""

    def __init__(self, alone: dict[str, int], together: dict[frozenset, int] | None = None):
        self.alone, self.together, self.now, self.config = alone, together or {}, 0, frozenset()
        self.steps = []

    def timer(self) -> int:
        return self.now

    def step(self) -> None:
        us = 1000 - sum(self.alone[k] for k in self.config) + sum(
            extra for pair, extra in self.together.items() if pair <= self.config)
        self.now += us * 1000 + next(JITTER_NS)
        self.steps.append(self.config)

    @contextmanager
    def under(self, config):
        self.config = config
        yield


def test_two_winners_that_win_alone_and_lose_together_keep_only_the_larger():
    """a saves 100 us alone, b 80 us alone; together they cost 250 us more (a thread switch between them,
    say): 1,070 us, slower than no winner. a is tried first (its expected gain is larger) and kept; b is
    tried beside a (900 -> 1,070 us) and rejected. Only a is written."""
    clock = Clock({"a": 100, "b": 80}, {frozenset("ab"): 250})
    ablation = prove(clock.step, [proposal("b", 80), proposal("a", 100)], clock.under, rounds=6, warmup=1,
                     timer=clock.timer)
    assert [p.key for p in ablation.kept] == ["a"]
    first, second = ablation.decisions
    assert (first.proposal.key, first.kept, round(first.without.median_us), round(first.with_.median_us)) \
        == ("a", True, 1000, 900)
    assert (second.proposal.key, second.kept, round(second.without.median_us), round(second.with_.median_us)) \
        == ("b", False, 900, 1070)
    assert set(ablation.rejected()) == {"b"} and ablation.end_to_end is None     # one kept: its trial is it
    assert second.as_dict()["decision"] == REJECTED and first.as_dict()["decision"] == KEPT
    # each trial: (1 warm-up + 6 timed) rounds of two steps; a's trial alternates {} and {a}
    assert len(clock.steps) == 2 * 2 * 7 and set(clock.steps[:14]) == {frozenset(), frozenset("a")}
    assert set(clock.steps[14:]) == {frozenset("a"), frozenset("ab")}


def test_winners_that_each_help_are_kept_and_checked_together_against_the_default():
    clock = Clock({"a": 100, "b": 80, "c": 0})
    ablation = prove(clock.step, [proposal(k, s) for k, s in (("a", 100), ("b", 80), ("c", 60))], clock.under,
                     rounds=6, timer=clock.timer)
    assert [p.key for p in ablation.kept] == ["a", "b"]        # c saves nothing in the step: rejected
    final = ablation.end_to_end
    assert final.kept and (round(final.without.median_us), round(final.with_.median_us)) == (1000, 820)
    verdict = ablation.verdict(threads=1, bank=Path("bank"))
    assert verdict.wins and verdict.speedup == pytest.approx(1000 / 820, rel=1e-3)


def test_a_set_that_loses_end_to_end_keeps_nothing():
    """a and b each win their trials (b beside a: 900 -> 880 us), but in the end-to-end trial the steps with
    both take 125 us more (1,005 us against the default's 1,000): together they do not win, so the bank gets
    no winner and both are recorded as rejected by that trial."""
    clock = Clock({"a": 100, "b": 20})
    ablation = Ablation([proposal("a", 100), proposal("b", 20)], rounds=6, warmup=1)
    while (config := ablation.next_config()) is not None:
        clock.config = config
        start = clock.timer()
        clock.step()
        ns = clock.timer() - start
        ablation.record(ns + (125_000 if ablation.end_to_end is None and len(ablation.decisions) == 2
                              and config == frozenset("ab") else 0))
    assert ablation.kept == [] and not ablation.end_to_end.kept
    assert set(ablation.rejected()) == {"a", "b"}
    assert ablation.verdict(threads=1, bank=Path("bank")) is None


def test_nothing_to_prove_asks_for_no_step():
    ablation = Ablation([])
    assert ablation.next_config() is None and ablation.kept == []
    with pytest.raises(RuntimeError, match="no step was asked for"):
        ablation.record(1)


def test_the_session_writes_only_the_winners_the_step_proves(tmp_path, monkeypatch):
    """The stage (tests/tune/test_opat.py's fake clock): each of the three linears' pretransposed weights wins
    alone, 100 -> 50 us a call. The step (the injected clock): 1,000 us, 100 us less per linear winner it runs
    under, but 300 us more when attn.qkv's and attn.proj's run together. Only one of those two is written; the
    other's entry keeps its candidate and the in-step figures that rejected it, and counts as unsatisfied."""
    import perfsight.tune
    from perfsight.tune.apply import TunedMode
    from perfsight.tune.capture import train_step

    from .models import example
    from .test_opat import fake_clock

    torch.set_num_threads(1)
    stage_clock, extra = fake_clock(monkeypatch), [0]
    model, x = example()
    train = train_step(model, x)

    from perfsight.tune.bank import Bank
    from perfsight.tune.capture import capture

    # the keys of attn.qkv's and attn.proj's linear signatures (the bank key of a signature is the same in any bank)
    keys = Bank(tmp_path / "keys", fingerprint="test")
    clash = {keys.key("op", r.signature) for r in capture(train, model=model, steps=2).tunable
             if r.signature["op"] == "linear" and r.module.startswith("attn.")}
    assert len(clash) == 2

    def step():
        train()
        mode = TunedMode.current()       # the proof's (capture runs the step under its own mode)
        under = {k for k, e in mode.bank.entries("op").items() if e.winner} if isinstance(mode, TunedMode) else set()
        extra[0] += (1000 - 100 * len(under) + (300 if clash <= under else 0)) * 1000

    def timer():
        return stage_clock() + extra[0]

    result = perfsight.tune.tune(model, step=step, mode="op", bank=tmp_path / "bank", result_dir=tmp_path / "out",
                                 timer=timer, warmup=1, repeats=3, proof_rounds=8, proof_warmup=1)
    written = {o.op_name: o.update_mode for o in result.opat.operators if "linear" in o.op_name}
    assert sorted(written.values()) == ["add", "add", "unsatisfied"]
    [loser] = [o for o in result.opat.operators if o.key in clash and o.update_mode == "unsatisfied"]
    assert loser.in_step["decision"] == "rejected"
    assert (loser.in_step["step_without_us"], loser.in_step["step_with_us"]) in ((900.0, 1100.0), (800.0, 1000.0))
    entry = Bank(tmp_path / "bank").get("op", loser.key)
    assert entry.winner is None and entry.rejected["winner"] == "pretransposed_weight"
    assert entry.rejected["in_step"]["decision"] == "rejected"
    assert result.repo_summary["repo_add_num"] == 2 and result.repo_summary["repo_unsatisfied_num"] >= 1
    assert loser.op_name not in result.winners and len([w for w in result.winners if "linear" in w]) == 2
    rows = {r["where"]: r for r in result.rows}     # the result's rows: the bank's winner, the trial beside it
    assert rows[loser.op_name]["winner"] is None and rows[loser.op_name]["best"] == "pretransposed_weight"
    assert all(rows[where]["winner"] == "pretransposed_weight" and rows[where]["in_step"]["decision"] == "kept"
               for where in result.winners if "linear" in where)
    [task] = json.loads(result.report.read_text()).values()
    proof = task[-1]["perfsight_in_step"]
    assert {s["decision"] for s in proof["signatures"]} == {"kept", "rejected"}
    assert proof["end_to_end"]["wins"] and proof["end_to_end"]["untuned_ms"]["median"] == 1.0
    assert loser.op_name not in {r["op_name"] for r in task[1]["OPAT"]["repo_modified_operators"]}

    # the CLI's table: per signature the default and best-alone times, the bank's winner, the trial's figures
    from rich.console import Console

    from perfsight.tune.autostart import proof_status
    from perfsight.views.terminal import print_tuning

    console = Console(record=True, width=100)
    print_tuning({"report": str(result.report), "bank": str(result.bank), "stages": {"op": {
        "repo_summary": result.repo_summary, "winners": result.winners, "rows": result.rows,
        "verdict": result.verdict}}, "proof": proof_status(result)}, console)
    shown = console.export_text()
    assert all(len(line) <= 100 for line in shown.splitlines() if line[:1] in "┏┃┡│└")
    trials = shown[shown.index("operator tuning (OPAT): 3 winner(s) tried in the training step"):].splitlines()
    cells = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]] + [
             c.strip() for c in next_line.split("│")[2:-1]]
             for line, next_line in zip(trials, trials[1:]) if line.startswith("│ ") and "/linear" in line}
    trial = loser.in_step
    assert cells[loser.op_name] == [
        "pretransposed_weight", f"{trial['step_without_us'] / 1e3:.2f} -> {trial['step_with_us'] / 1e3:.2f}",
        f"{trial['speedup']:.3f}x", str(trial["rounds"]), "rejected",
        "", "", f"[{trial['speedup_low']:.3f}-{trial['speedup_high']:.3f}]", "", ""]
    assert sorted(c[4] for c in cells.values()) == ["kept", "kept", "rejected"]
    shown = " ".join(shown.split())
    assert "perfsight: in the step: 2 winner(s) kept, 1 rejected; the tuning bank wins end to end" in shown

    # tuned again without REPEAT_TUNE: the rejected winner's record is its answer, it is not re-tuned
    again = perfsight.tune.tune(model, step=step, mode="op", bank=tmp_path / "bank", result_dir=tmp_path / "out",
                                timer=timer, warmup=1, repeats=3, proof_rounds=8, proof_warmup=1)
    [row] = [r for r in again.rows if r["where"] == loser.op_name]
    assert row["update_mode"] == "unsatisfied" and row["winner"] is None and row["best"] == "pretransposed_weight"
    assert row["why"].startswith("kept out: its winner pretransposed_weight lost in the training step (")
    # with REPEAT_TUNE the stage finds the same winner again: the step is not asked again, the record stands
    repeated = perfsight.tune.tune(model, step=step, mode="op", bank=tmp_path / "bank", repeat=True,
                                   result_dir=tmp_path / "out", timer=timer, warmup=1, repeats=3, proof_rounds=8,
                                   proof_warmup=1)
    [row] = [r for r in repeated.rows if r["where"] == loser.op_name]
    assert row["in_step"]["decision"] == "rejected before" and row["update_mode"] == "unsatisfied"
    assert loser.key not in {p.key for p in repeated.proof.proposals}
