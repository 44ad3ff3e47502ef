"""The keep/reject rule of every tuning decision made on whole steps (a winner proven in the training step,
``tune/prove.py``; a bank verified end to end, ``tune/verify.py``), stated once and printed with each decision.

Each round times one step without a change (A) and one with it (B), in alternating order, so a busy moment of
a shared machine slows both; its ratio A / B is the round's speed-up. The rule judges the **median** paired
speed-up by its exact distribution-free confidence interval (the sign-test interval of a median): the k-th
smallest and the k-th largest of the n ratios, k the largest count with P(Binomial(n, 1/2) < k) <= the
look's alpha. The chance that the true median lies below the lower bound (or above the upper one) is then at
most that alpha, whatever the shape of the noise: a shared machine's bursts need no model, and no random
resampling makes two runs of the rule disagree.

The rounds are planned in advance as **looks** (``LOOKS``: after 20, 40 and 80 rounds), and ``ALPHA`` (5%,
one-sided) is split evenly across them (Bonferroni), so timing on while undecided cannot raise the error rate
(no optional stopping). At each look the change is:

- **kept** when the lower bound is above 1.0 (faster, at 95% over all the looks);
- **rejected** when the upper bound is below ``needed``: 1.0, or for a change with a one-off cost (a compile)
  the speed-up that repays it over the steps expected (``repaying_speedup``);
- **undecided** otherwise: timed on to the next look. Undecided at the last look, it is rejected as not
  proven: a change that cannot show it is faster is not kept.

So a change that is not faster is kept with probability at most ``ALPHA``. ``RULE`` says this in one
sentence; each ``Judgement`` prints its figures and why.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

#: the error rate of keeping a change that is not faster, one-sided, over all the looks
ALPHA = 0.05


def planned_looks(rounds: int) -> tuple[int, ...]:
    """The looks of a trial of at most ``rounds`` rounds: after a quarter, half and all of them."""
    return tuple(sorted({look for look in (rounds // 4, rounds // 2, rounds) if look > 0}))


#: the planned looks of a trial: the rounds after which the rule judges (each at ALPHA / len(LOOKS))
LOOKS = planned_looks(80)
KEEP, REJECT, UNDECIDED = "kept", "rejected", "undecided"
RULE = (f"kept when the {100 * (1 - ALPHA):g}% lower bound of the median paired speed-up (the sign-test interval, "
        f"alpha split evenly over looks at {', '.join(map(str, LOOKS))} rounds) is above 1.0; rejected when its "
        "upper bound is below the speed-up that repays the change's cost, or when still undecided at the last "
        "look")


@dataclass(frozen=True)
class Judgement:
    """The rule's verdict at one look: ``verdict`` (KEEP, REJECT, UNDECIDED), the median paired speed-up
    and its interval (``low``, ``high``), the rounds, which look of how many, each side's alpha, and the
    speed-up ``needed`` to repay the change."""

    verdict: str
    median: float
    low: float
    high: float
    rounds: int
    look: int
    looks: int
    alpha: float
    needed: float

    @property
    def why(self) -> str:
        if self.verdict == KEEP:
            return "its lower bound is above 1.0"
        if not math.isfinite(self.high) and self.low == 0.0:
            too_few = f"{self.rounds} rounds are too few for its interval (at least {fewest_rounds(self.alpha)})"
            return too_few + (f"; timed on to look {self.look + 1}" if self.verdict == UNDECIDED else "")
        if self.verdict == UNDECIDED:
            return f"1.0 lies within its interval; timed on to look {self.look + 1}"
        if self.high < self.needed:
            return (f"its upper bound is below {self.needed:.3f}, " + ("the speed-up that repays its cost"
                                                                      if self.needed > 1.0 else "so it is slower"))
        return "still undecided at the last look: not proven faster"

    def __str__(self) -> str:
        return (f"{self.verdict}: median paired speed-up {self.median:.3f}x, interval {_bound(self.low)}-"
                f"{_bound(self.high)} (each side at {100 * (1 - self.alpha):.1f}%) over {self.rounds} rounds, look "
                f"{self.look} of {self.looks}: {self.why}")

    def as_dict(self) -> dict:
        return {"verdict": self.verdict, "median": round(self.median, 4), "low": _rounded(self.low),
                "high": _rounded(self.high), "rounds": self.rounds, "look": self.look, "looks": self.looks,
                "alpha": self.alpha, "needed": round(self.needed, 4), "why": self.why, "rule": RULE}


def _bound(value: float) -> str:
    return f"{value:.3f}" if math.isfinite(value) else ("inf" if value > 0 else "0")


def _rounded(value: float) -> float | None:
    return round(value, 4) if math.isfinite(value) else None


def order_statistic_rank(n: int, alpha: float) -> int:
    """The largest k with P(Binomial(n, 1/2) < k) <= ``alpha`` (0 when even k = 1 is too likely: no interval
    of that confidence exists for n rounds)."""
    total, cumulative, k = 2 ** n, 0, 0
    while k < n and cumulative + math.comb(n, k) <= alpha * total:
        cumulative += math.comb(n, k)
        k += 1
    return k


def fewest_rounds(alpha: float) -> int:
    """The fewest rounds that give a median an interval with each side at ``alpha``."""
    return math.ceil(math.log2(1 / alpha))


def median_interval(ratios: list[float], alpha: float) -> tuple[float, float]:
    """The sign-test interval of the median of ``ratios``, each side at ``alpha``: (k-th smallest, k-th
    largest); (0, inf) when there are too few ratios for it."""
    ordered = sorted(ratios)
    k = order_statistic_rank(len(ordered), alpha)
    if k == 0:
        return 0.0, math.inf
    return ordered[k - 1], ordered[-k]


def repaying_speedup(step_ns: float, cost_ns: float, steps: int) -> float:
    """The speed-up at which a change whose one-off cost is ``cost_ns`` (a compile) saves as much as it costs
    over ``steps`` steps of ``step_ns`` (1.0 for a change that costs nothing)."""
    saved_per_step = cost_ns / steps if steps else math.inf
    return step_ns / (step_ns - saved_per_step) if saved_per_step < step_ns else math.inf


def judge(ratios: list[float], look: int, *, looks: tuple[int, ...] = LOOKS, alpha: float = ALPHA,
          needed: float = 1.0) -> Judgement:
    """The rule (module docstring) on the paired speed-ups ``ratios`` at look ``look`` (1-based) of the
    planned ``looks``."""
    each = alpha / len(looks)
    low, high = median_interval(ratios, each)
    median = statistics.median(ratios) if ratios else math.nan
    if low > 1.0:
        verdict = KEEP
    elif high < needed or look >= len(looks):
        verdict = REJECT
    else:
        verdict = UNDECIDED
    return Judgement(verdict, median, low, high, len(ratios), look, len(looks), each, needed)


