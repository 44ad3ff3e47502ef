"""The keep/reject rule (tune/rule.py) on planted step times: its interval's ranks against the binomial
distribution, and its error rates over many seeded trials with noise as large as this machine's: a planted
1.2x win kept, a planted 0.95x loss and a change that does nothing kept at most at the stated rate."""
from __future__ import annotations

import math
import random

import pytest
from scipy.stats import binom

from perfsight.tune import rule

TRIALS = 400


@pytest.mark.parametrize("n", [5, 8, 20, 40, 80, 160])
def test_the_interval_rank_is_the_binomial_quantile(n):
    alpha = rule.ALPHA / len(rule.LOOKS)
    k = rule.order_statistic_rank(n, alpha)
    assert binom.cdf(k - 1, n, 0.5) <= alpha if k else binom.cdf(0, n, 0.5) > alpha
    assert binom.cdf(k, n, 0.5) > alpha                       # the largest such k


def test_too_few_rounds_give_no_interval():
    assert rule.median_interval([1.5, 1.6, 1.7], 0.05 / 3) == (0.0, math.inf)


def step_times(rng: random.Random, speedup: float, rounds: int) -> list[float]:
    """Paired ratios A / B of a step of 10 ms (A) against the same step ``speedup`` times faster (B): each
    step's time lognormal (sigma 0.123) and one step in ten hit by a burst of 1.2-2x, as on this shared
    2-core machine."""
    def one(base: float) -> float:
        burst = rng.uniform(1.2, 2.0) if rng.random() < 0.1 else 1.0
        return base * math.exp(rng.gauss(0.0, 0.123)) * burst

    return [one(10.0) / one(10.0 / speedup) for _ in range(rounds)]


def test_the_noise_model_is_this_machines():
    """The same step timed against itself here gives a p10 of the paired ratios of 0.73-0.94 (issue 33)."""
    ratios = sorted(step_times(random.Random(7), 1.0, 10_000))
    assert 0.73 <= ratios[len(ratios) // 10] <= 0.94


def sequential(rng: random.Random, speedup: float, needed: float = 1.0) -> rule.Judgement:
    """The rule as the tuner applies it: ratios gathered round by round, judged at each planned look."""
    ratios = step_times(rng, speedup, rule.LOOKS[-1])
    for look, rounds in enumerate(rule.LOOKS, start=1):
        judgement = rule.judge(ratios[:rounds], look, needed=needed)
        if judgement.verdict != rule.UNDECIDED:
            return judgement
    raise AssertionError("the last look always decides")


def kept_share(speedup: float, seed: int, needed: float = 1.0) -> float:
    rng = random.Random(seed)
    return sum(sequential(rng, speedup, needed).verdict == rule.KEEP for _ in range(TRIALS)) / TRIALS


def test_a_planted_win_of_1_2x_is_kept():
    assert kept_share(1.2, seed=1) >= 0.95


def test_a_planted_loss_of_0_95x_is_never_kept():
    assert kept_share(0.95, seed=2) <= rule.ALPHA
    decided = [sequential(random.Random(seed), 0.95) for seed in range(50)]
    assert {j.verdict for j in decided} == {rule.REJECT}


def test_a_change_that_does_nothing_is_kept_at_most_at_the_stated_rate():
    assert kept_share(1.0, seed=3) <= rule.ALPHA


def test_a_win_that_does_not_repay_its_cost_is_rejected_early():
    """A 1.05x win whose compile needs 1.25x over the steps expected: the upper bound falls below 1.25."""
    needed = rule.repaying_speedup(step_ns=10e6, cost_ns=2e9, steps=1000)
    assert needed == pytest.approx(1.25)
    judgement = sequential(random.Random(4), 1.05, needed)
    assert judgement.verdict == rule.REJECT and judgement.look < len(rule.LOOKS)
    assert "the speed-up that repays its cost" in str(judgement)


def test_each_judgement_says_its_figures_and_why():
    ratios = [1.2] * 16 + [0.9] * 4             # the 5th smallest of 20 is the 98.3% lower bound
    judgement = rule.judge(ratios, 1)
    assert judgement.verdict == rule.KEEP and judgement.low == 1.2
    assert str(judgement) == ("kept: median paired speed-up 1.200x, interval 1.200-1.200 (each side at 98.3%) over 20 "
                              "rounds, look 1 of 3: its lower bound is above 1.0")
    assert rule.judge([1.0, 1.1] * 10, 1).verdict == rule.UNDECIDED
    last = rule.judge([1.0, 1.1] * 40, 3)
    assert last.verdict == rule.REJECT and last.why == "still undecided at the last look: not proven faster"
    assert last.as_dict()["rule"] == rule.RULE
