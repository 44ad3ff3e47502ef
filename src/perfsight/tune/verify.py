"""Verifying a tuning bank end to end: whole training steps timed with and without it.

``verify(step, bank=...)`` runs ``step`` (a function doing one whole training step: forward, loss,
backward, optimizer step) untuned and under the bank (its operator winners, and its subgraph winners for
``model``; tune/apply.py), interleaved: each
round runs one step of each, the first side alternating from round to round (A,B then B,A) so neither
always follows the other. Before the timed rounds, ``warmup`` rounds are run and not timed. torch runs at a
recorded thread count (``threads``, default the current one) and the 1-minute load average is recorded
before and after. ``Rounds`` owns that schedule, the samples and the verdict; ``perfsight tune --verify``
(tune/verify_script.py) uses it for the steps of an unmodified script.

The verdict is the rule of every decision on whole steps (``tune/rule.py``), with all the rounds as its one
look: the bank wins end to end only when the lower bound of the median paired speed-up's interval is above
1.0 (its upper bound below ``1 + margin`` is a plain loss); otherwise the verdict says plainly that it does not
win end to end, and why. The speed-up is the untuned median over the tuned median; beside it, the rule's
interval.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from perfsight.tune import rule
from perfsight.tune.apply import TunedMode, apply_optimizers, apply_subgraphs, apply_tunableop, default_bank
from perfsight.tune.bank import Bank
from perfsight.tune.measure import Timing, load_average, quantile

WINS = "wins end to end"
NO_WIN = "does not win end to end"


@dataclass
class Verdict:
    """The two sides' step times (``Timing``, samples in ns), the speed-up and the rule's judgement (whether
    the bank wins)."""

    untuned: Timing
    tuned: Timing
    ratios: list[float]   # per round: untuned step / tuned step
    judgement: rule.Judgement
    threads: int
    load: tuple[float, float]  # 1-minute load average before and after
    applied: dict[str, int]    # winner name -> calls run under it, over every tuned step (warm-up too)
    bank: Path

    @property
    def speedup(self) -> float:
        return self.untuned.median_us / self.tuned.median_us if self.tuned.median_us else float("nan")

    @property
    def wins(self) -> bool:
        return self.judgement.verdict == rule.KEEP

    @property
    def verdict(self) -> str:
        return WINS if self.wins else NO_WIN

    def __str__(self) -> str:
        applied = ", ".join(f"{name} x{count}" for name, count in sorted(self.applied.items())) or "none"
        return (f"the tuning bank {self.verdict}: speed-up {self.speedup:.3f}x ({self.judgement}); step "
                f"{_step_times(self.untuned)} untuned, {_step_times(self.tuned)} tuned; {len(self.ratios)} rounds at "
                f"{self.threads} thread(s), load {self.load[0]:.2f} -> {self.load[1]:.2f}; winners applied: {applied}")

    def as_dict(self) -> dict:
        """The verdict as plain JSON: speed-up, the rule's interval and judgement, each side's median, p10 and p90
        in ms."""
        judged = self.judgement.as_dict()
        return {"verdict": self.verdict, "wins": self.wins, "speedup": self.speedup, "speedup_low": judged["low"],
                "speedup_high": judged["high"], "why": str(self.judgement), "rule": rule.RULE,
                "rounds": len(self.ratios), "threads": self.threads, "load": list(self.load),
                "applied": self.applied, "bank": str(self.bank),
                **{f"{t.name}_ms": dict(zip(("median", "p10", "p90"), milliseconds(t)))
                   for t in (self.untuned, self.tuned)}}


def milliseconds(t: Timing) -> tuple[float, float, float]:
    """A side's median, p10 and p90 step time in milliseconds."""
    return t.median_us / 1e3, quantile(t.samples_ns, 0.1) / 1e6, quantile(t.samples_ns, 0.9) / 1e6


def _step_times(t: Timing) -> str:
    return "{:.2f} ms (p10-p90 {:.2f}-{:.2f})".format(*milliseconds(t))


class Rounds:
    """The schedule of one verification and its samples: ``order`` says, step by step, whether the step runs
    under the bank - ``warmup`` untimed rounds then ``rounds`` timed ones, each one step of either side, the
    first side alternating (untuned first in even rounds). ``record(index, ns)`` keeps a step's time once
    the warm-up is over; ``verdict`` judges them."""

    def __init__(self, rounds: int, warmup: int):
        if rounds < 2:
            raise ValueError(f"rounds={rounds}: at least 2 rounds are needed to estimate the noise")
        self.warmup = warmup
        pairs = ((False, True), (True, False))
        self.order = [side for i in range(warmup + rounds) for side in pairs[i % 2]]
        self.untuned, self.tuned = Timing("untuned", {}, "default"), Timing("tuned", {}, "bank")
        self.load_before = load_average()

    def record(self, index: int, ns: int) -> None:
        if index >= 2 * self.warmup:
            (self.tuned if self.order[index] else self.untuned).samples_ns.append(ns)

    def verdict(self, *, threads: int, applied: dict[str, int], bank: Path, margin: float = 0.0) -> Verdict:
        """The rule (``rule.judge``) on the paired rounds, all of them one look (module docstring)."""
        ratios = [a / b for a, b in zip(self.untuned.samples_ns, self.tuned.samples_ns) if b]
        judgement = rule.judge(ratios, 1, looks=(len(ratios),), needed=1.0 + margin)
        return Verdict(self.untuned, self.tuned, ratios, judgement, threads, (self.load_before, load_average()),
                       dict(applied), bank)


def verify(step: Callable[[], object], *, bank: Bank | str | Path | None = None, model: torch.nn.Module | None = None,
           rounds: int = 20, warmup: int = 3, threads: int | None = None, margin: float = 0.0,
           timer: Callable[[], int] = time.perf_counter_ns) -> Verdict:
    """Time ``step`` with and without ``bank`` (a Bank, a bank root directory, or None for the default
    bank), interleaved for ``rounds`` rounds after ``warmup`` untimed ones; return the Verdict. The bank's
    operator, optimizer and TunableOp winners apply to every step under it (optimizers: those the step runs);
    its subgraph winners too when ``model`` (the model the step runs) is given. Data-loader winners are not:
    they take effect at an epoch's start, not step by step."""
    schedule = Rounds(rounds, warmup)
    if not isinstance(bank, Bank):
        bank = default_bank() if bank is None else Bank(Path(bank).expanduser(), read_only=True)
    operators = TunedMode(bank)
    subgraphs = apply_subgraphs(model, bank) if model is not None else None
    settings, gemms = apply_optimizers(bank), apply_tunableop(bank)
    before_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)

    def run(under_bank: bool) -> int:
        for applied in (subgraphs, settings, gemms):
            if applied is not None:
                (applied.enable if under_bank else applied.disable)()
        start = timer()
        if not under_bank:
            step()
        else:
            with operators:
                step()
        return timer() - start

    try:
        for index, under_bank in enumerate(schedule.order):
            schedule.record(index, run(under_bank))
        used_threads = torch.get_num_threads()
    finally:
        torch.set_num_threads(before_threads)
        for applied in (subgraphs, settings, gemms):
            if applied is not None:
                applied.remove()
    applied = operators.used + settings.used + gemms.used + (subgraphs.used if subgraphs is not None else Counter())
    return schedule.verdict(threads=used_threads, applied=applied, bank=bank.directory, margin=margin)
