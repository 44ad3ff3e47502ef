"""verify: the verdict from a deterministic fake clock (a win, no win), and a real bank on a real step."""
import pytest
import torch

from perfsight.tune.apply import TunedMode
from perfsight.tune.bank import Bank
from perfsight.tune.verify import NO_WIN, WINS, verify
from tests.tune.models import example
from tests.tune.test_apply import planted_bank


class FakeClock:
    """A clock that a fake step advances: ``untuned`` ns per untuned step, ``tuned`` ns per tuned one,
    plus a repeating jitter, so each verdict is deterministic."""

    def __init__(self, untuned: int, tuned: int, jitter=(0, 300_000, -200_000, 100_000)):
        self.now = 0
        self.durations = {False: untuned, True: tuned}
        self.jitter = jitter
        self.steps = []

    def __call__(self) -> int:
        return self.now

    def step(self):
        under_bank = TunedMode.current() is not None
        self.now += self.durations[under_bank] + self.jitter[len(self.steps) % len(self.jitter)]
        self.steps.append(under_bank)


@pytest.fixture
def bank(tmp_path) -> Bank:
    """A bank with operator winners (one without any is not applied at all, so the fake clock would not see it)."""
    return planted_bank(tmp_path, *example())


def test_a_clear_speed_up_wins(bank):
    clock = FakeClock(untuned=10_000_000, tuned=8_000_000)
    verdict = verify(clock.step, bank=bank, rounds=8, warmup=1, timer=clock)
    assert verdict.wins and verdict.verdict == WINS
    assert clock.steps[:4] == [False, True, True, False]  # interleaved, the first side alternating
    assert len(verdict.untuned.samples_ns) == len(verdict.tuned.samples_ns) == len(verdict.ratios) == 8
    assert verdict.speedup == pytest.approx(1.25, rel=0.05)
    assert verdict.judgement.low <= verdict.speedup <= verdict.judgement.high
    assert str(verdict).startswith("the tuning bank wins end to end: speed-up 1.2")
    assert "its lower bound is above 1.0" in str(verdict)


def test_too_few_rounds_cannot_win_and_say_so(bank):
    clock = FakeClock(untuned=10_000_000, tuned=8_000_000)
    verdict = verify(clock.step, bank=bank, rounds=4, warmup=0, timer=clock)
    assert not verdict.wins and "4 rounds are too few for its interval (at least 5)" in str(verdict)


def test_a_gain_within_the_noise_does_not_win(bank):
    clock = FakeClock(untuned=10_000_000, tuned=9_900_000, jitter=(0, 1_000_000, -1_000_000, 500_000))
    verdict = verify(clock.step, bank=bank, rounds=8, warmup=0, timer=clock)
    assert not verdict.wins and verdict.verdict == NO_WIN
    assert "does not win end to end" in str(verdict)
    slower = FakeClock(untuned=10_000_000, tuned=12_000_000)
    assert not verify(slower.step, bank=bank, rounds=4, timer=slower).wins


def test_a_real_step_under_a_planted_bank_restores_the_threads(tmp_path):
    model, x = example()
    bank = planted_bank(tmp_path, model, x)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        optimizer.zero_grad()
        model(x).mean().backward()
        optimizer.step()
    threads = torch.get_num_threads()
    verdict = verify(step, bank=bank, rounds=2, warmup=1, threads=1)
    assert verdict.threads == 1 and torch.get_num_threads() == threads
    assert verdict.applied == {"channels_last+onednn": 6, "pretransposed_weight": 9, "sdpa_math": 3}
    assert verdict.bank == bank.directory
    assert len(verdict.untuned.samples_ns) == len(verdict.tuned.samples_ns) == len(verdict.ratios) == 2
    with pytest.raises(ValueError, match="at least 2 rounds"):
        verify(step, bank=bank, rounds=1)
