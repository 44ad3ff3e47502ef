"""Winners proven in the training step before they are written: each candidate winner of the op and subgraph
stages is kept only if whole steps run faster with it, in the company of the winners kept before it.

A winner of a stage won alone, on its own inputs, timed call by call. In the step it runs beside the
others: thread switches, oneDNN on and off, layout conversions between neighbours and compile boundaries
cost there, and two winners that each win alone can lose together. So the stages' winners are
*proposals*, and ``Ablation`` decides which of them the bank gets, by greedy forward selection in the
step:

1. Proposals are tried one by one, the largest expected gain first (what its stage measured: the time it
   saved per call times its calls per step).
2. Each trial times whole steps with the winners kept so far (A) against the same plus the proposal (B),
   interleaved as ``verify.Rounds`` does (``warmup`` untimed rounds, then up to ``rounds`` rounds of one step
   of each, the first side alternating), and judges the paired speed-ups A / B by ``rule.judge`` at the
   looks planned for ``rounds`` (``rule.planned_looks``: a quarter, half and all of them): the proposal is
   kept once the lower bound of the median speed-up's interval is above 1.0, rejected once its upper bound
   is below ``1 + margin`` or when still undecided after the last look; the error rate is split over the
   looks, so stopping at a decided look keeps no more losers than the rule says. A proposal is thus judged
   where it will run: beside the winners already kept, switch costs and interactions included.
3. With two or more kept, a last trial times the default (no winner) against all of them together; if
   they do not win end to end, none is kept: the bank gets no winner for this model, and says why.

Forward rather than backward selection: it measures each proposal in the company it will have, needs one
trial per proposal (2 x (warmup + rounds) steps each) and never keeps a set it did not time. Every trial's
figures stay with its decision (``Decision``): the step's median without and with the proposal, and the
rule's judgement (the median paired speed-up, its interval, the look it was decided at, and why). The
end-to-end trial is the figure ``perfsight tune --verify`` reports: the same ``verify.Rounds`` and ``Verdict``.

``Ablation`` is a schedule driven from outside - ``next_config()`` names the winners the next step runs
under (a frozenset of proposal keys; None when done) and ``record(ns)`` takes that step's time - so that
both a step function (``prove``) and a script's own steps can drive it, and tests can drive it with an
injected clock.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from perfsight.tune import rule
from perfsight.tune.measure import KEPT, REJECTED, Timing, load_average
from perfsight.tune.verify import Rounds, Verdict

#: a trial's most timed rounds (its last look, ``rule.LOOKS``) and untimed warm-up rounds, unless the caller
#: says; a trial of a 40 ms step decided at its first look (20 rounds) takes ~1.7 s, at its last ~6.5 s
PROOF_ROUNDS, PROOF_WARMUP = rule.LOOKS[-1], 1


@dataclass(frozen=True)
class Proposal:
    """A stage's winner waiting for its proof: the bank ``kind`` and ``key`` of its signature, where it is
    (``name``: the operator or region), the ``winner`` candidate, its per-call times and ``expected_us``, the
    time its stage says it saves per step."""
    kind: str
    key: str
    name: str
    winner: str
    default_us: float
    winner_us: float
    calls_per_step: float

    @property
    def expected_us(self) -> float:
        return (self.default_us - self.winner_us) * self.calls_per_step


@dataclass
class Decision:
    """One trial: ``proposal`` (None for the end-to-end trial), its step times without (``without``) and with
    (``with_``) it, and the rule's ``judgement`` (kept or not, and why)."""
    proposal: Proposal | None
    without: Timing
    with_: Timing
    judgement: rule.Judgement
    load: tuple[float, float] = (float("nan"), float("nan"))   # 1-minute load average before and after

    @property
    def kept(self) -> bool:
        return self.judgement.verdict == rule.KEEP

    @property
    def ratios(self) -> list[float]:
        return [a / b for a, b in zip(self.without.samples_ns, self.with_.samples_ns) if b]

    @property
    def speedup(self) -> float:
        return self.without.median_us / self.with_.median_us if self.with_.median_us else float("nan")

    def as_dict(self) -> dict:
        """The decision's figures (step times in us) and the winner tried, for the bank's records and the
        result file."""
        judged = self.judgement.as_dict()
        return {**({"winner": self.proposal.winner} if self.proposal is not None else {}),
                "decision": KEPT if self.kept else REJECTED, "step_without_us": round(self.without.median_us, 3),
                "step_with_us": round(self.with_.median_us, 3), "speedup": round(self.speedup, 4),
                "speedup_low": judged["low"], "speedup_high": judged["high"], "rounds": len(self.ratios),
                "look": judged["look"], "looks": judged["looks"], "why": str(self.judgement), "rule": rule.RULE}


@dataclass
class _Trial:
    proposal: Proposal | None
    base: frozenset[str]
    rounds: Rounds
    index: int = 0

    def config(self) -> frozenset[str]:
        """The winners of the trial's current step: its base, plus the proposal on the B side."""
        with_it = self.rounds.order[self.index]
        if self.proposal is None:
            return self.base if with_it else frozenset()
        return self.base | {self.proposal.key} if with_it else self.base


@dataclass
class Ablation:
    """Greedy forward selection of ``proposals`` in the step (module docstring)."""
    proposals: list[Proposal]
    rounds: int = PROOF_ROUNDS
    warmup: int = PROOF_WARMUP
    margin: float = 0.0
    kept: list[Proposal] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    end_to_end: Decision | None = None
    seconds: float = 0.0   # the wall time of its trials (``prove``)

    def __post_init__(self):
        self._queue = sorted(self.proposals, key=lambda p: (-p.expected_us, p.kind, p.key))
        self._trial: _Trial | None = None
        self._final_done = False
        self._advance()

    def _advance(self) -> None:
        """Start the next trial: the next proposal's, then (two or more kept) the end-to-end one; else done."""
        base = frozenset(p.key for p in self.kept)
        if self._queue:
            self._trial = _Trial(self._queue.pop(0), base, Rounds(self.rounds, self.warmup))
        elif len(self.kept) >= 2 and not self._final_done:
            self._final_done = True
            self._trial = _Trial(None, base, Rounds(self.rounds, self.warmup))
        else:
            self._trial = None

    def next_config(self) -> frozenset[str] | None:
        """The proposal keys the next step runs under; None when every trial is done."""
        return None if self._trial is None else self._trial.config()

    def record(self, ns: int) -> None:
        """The time of the step just run under ``next_config()``; at a planned look, the trial is judged and
        ends once decided."""
        trial = self._trial
        if trial is None:
            raise RuntimeError("the ablation is over: no step was asked for")
        trial.rounds.record(trial.index, ns)
        trial.index += 1
        looks = rule.planned_looks(self.rounds)
        timed = len(trial.rounds.tuned.samples_ns)
        if trial.index % 2 or timed not in looks or len(trial.rounds.untuned.samples_ns) != timed:
            return
        ratios = [a / b for a, b in zip(trial.rounds.untuned.samples_ns, trial.rounds.tuned.samples_ns) if b]
        judgement = rule.judge(ratios, looks.index(timed) + 1, looks=looks, needed=1.0 + self.margin)
        if judgement.verdict == rule.UNDECIDED:
            return
        decision = Decision(trial.proposal, trial.rounds.untuned, trial.rounds.tuned, judgement,
                            (trial.rounds.load_before, load_average()))
        if trial.proposal is None:
            self.end_to_end = decision
            if not decision.kept:
                self.kept = []
        else:
            self.decisions.append(decision)
            if decision.kept:
                self.kept.append(trial.proposal)
        self._advance()

    def verdict(self, *, threads: int, bank: Path) -> Verdict | None:
        """The end-to-end figure: the default against the kept winners together (the last trial, or the one
        trial of a single kept proposal, run against no winner), as ``verify`` reports it; None when nothing
        was kept."""
        if not self.kept:
            return None
        # one kept: its own trial ran it against no winner (nothing was kept before it)
        final = self.end_to_end or next(d for d in self.decisions if d.proposal == self.kept[0])
        return Verdict(final.without, final.with_, final.ratios, final.judgement, threads, final.load, {}, bank)

    def rejected(self) -> dict[str, Decision]:
        """key -> the decision that rejected it: its own trial, or the end-to-end one that dropped it."""
        found = {d.proposal.key: d for d in self.decisions if d.proposal is not None and not d.kept}
        if self.end_to_end is not None and not self.end_to_end.kept:
            for d in self.decisions:
                if d.proposal is not None and d.kept:
                    found[d.proposal.key] = self.end_to_end
        return found


def prove(step: Callable[[], object], proposals: Iterable[Proposal],
          under: Callable[[frozenset[str]], AbstractContextManager], *, rounds: int = PROOF_ROUNDS,
          warmup: int = PROOF_WARMUP, margin: float = 0.0,
          timer: Callable[[], int] = time.perf_counter_ns) -> Ablation:
    """Run ``Ablation`` over ``proposals`` with ``step()`` (one whole training step), each step inside
    ``under(keys)`` (the winners of those proposal keys applied, the others not); return it, done."""
    ablation = Ablation(list(proposals), rounds, warmup, margin)
    began = time.perf_counter()
    while (config := ablation.next_config()) is not None:
        with under(config):
            start = timer()
            step()
            ablation.record(timer() - start)
    ablation.seconds = time.perf_counter() - began
    return ablation
