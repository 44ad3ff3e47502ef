"""A bank applied to a script's run and checked against that run's untuned steps (tune/guard.py), on a fake
clock: a bank slower in the run is switched off, a faster one stays on, a later check follows the run when it
changes, and a check that fails switches the bank off without stopping the training."""
import pytest
import torch

from perfsight.tune import verify_script
from perfsight.tune.guard import BankGuard
from perfsight.tune.scriptbank import ScriptBank
from tests.tune.test_autostart import this_device_bank, train  # noqa: F401, F811 (a fixture)
from tests.tune.test_verify import FakeClock

# 3 timed rounds after 1 warm-up round: a check takes 1 + 2 x (1 + 3) = 9 optimizer steps
ROUNDS, WARMUP, EVERY, CHECK_STEPS = 3, 1, 5, 9


@pytest.fixture
def guarded(this_device_bank):  # noqa: F811 (the fixture imported above)
    """(model, x, optimizer, a guard maker); every guard made is removed after the test."""
    model, x, bank = this_device_bank
    made = []

    def make(clock):
        said = []
        made.append(BankGuard(ScriptBank(model, bank.directory.parent), rounds=ROUNDS, warmup=WARMUP, every=EVERY,
                              timer=clock, say=said.append))
        return made[-1], said
    yield model, x, torch.optim.SGD(model.parameters(), lr=0.01), make
    for guard in made:
        guard.remove()


def test_a_bank_slower_in_this_run_is_switched_off_and_checked_again_later(guarded):
    model, x, optimizer, make = guarded
    clock = FakeClock(untuned=8_000_000, tuned=10_000_000)
    guard, said = make(clock)
    train(model, x, optimizer, CHECK_STEPS, each=lambda step: clock.step())
    # the step under way when the bank opened ran under it, then the rounds alternated
    assert clock.steps == [True, False, True, True, False, False, True, True, False]
    assert guard.checks == 1 and not guard.on
    [line] = said
    assert line.startswith("checked the tuning bank at optimizer step 9: the tuning bank does not win end to end: "
                           "speed-up 0.79")
    assert line.endswith("; it is switched off until the next check, in 5 steps")
    train(model, x, optimizer, EVERY + CHECK_STEPS - 1, each=lambda step: clock.step())
    assert clock.steps[CHECK_STEPS:CHECK_STEPS + EVERY] == [False] * EVERY   # off until the next check
    assert guard.checks == 2 and not guard.on and len(said) == 1   # still slower: nothing new to say
    assert guard.describe() == "2 check(s) in 22 optimizer steps, the bank off at the end"


def test_a_bank_faster_stays_on_and_the_checks_follow_the_run(guarded):
    model, x, optimizer, make = guarded
    clock = FakeClock(untuned=10_000_000, tuned=8_000_000)
    guard, said = make(clock)
    train(model, x, optimizer, CHECK_STEPS + EVERY - 1, each=lambda step: clock.step())
    assert guard.on and clock.steps[CHECK_STEPS:] == [True] * (EVERY - 1)
    assert "speed-up 1.2" in said[0]     # faster: on (3 rounds prove no win, tune/rule.py; the guard keeps what is not
    #                                       slower)
    assert said[0].endswith("; it stays on until the next check, in 5 steps")
    clock.durations = {False: 8_000_000, True: 10_000_000}   # the machine changes: the bank now costs
    train(model, x, optimizer, CHECK_STEPS, each=lambda step: clock.step())
    assert not guard.on and "it is switched off" in said[1]
    clock.durations = {False: 10_000_000, True: 8_000_000}   # and back
    train(model, x, optimizer, EVERY + CHECK_STEPS - 1, each=lambda step: clock.step())
    assert guard.on and guard.checks == 3 and "it stays on" in said[2]


def test_a_check_that_fails_switches_the_bank_off_and_the_training_goes_on(guarded, monkeypatch):
    model, x, optimizer, make = guarded
    clock = FakeClock(untuned=10_000_000, tuned=8_000_000)
    monkeypatch.setattr(verify_script.ScriptRounds, "verdict", lambda self: 1 / 0)
    guard, said = make(clock)
    train(model, x, optimizer, CHECK_STEPS + 3, each=lambda step: clock.step())
    assert said == ["the tuning bank's check failed: ZeroDivisionError: division by zero; the bank is switched "
                    "off, the training goes on untuned"]
    assert clock.steps[CHECK_STEPS:] == [False] * 3
    assert guard.describe() == ("0 check(s) in 9 optimizer steps, the bank stopped (the tuning bank's check failed: "
                                "ZeroDivisionError: division by zero) at the end")


@pytest.mark.parametrize("steps", [0, 4])
def test_a_run_shorter_than_a_check_keeps_the_bank_on_between_its_untuned_steps(guarded, steps):
    model, x, optimizer, make = guarded
    clock = FakeClock(untuned=10_000_000, tuned=8_000_000)
    guard, _ = make(clock)
    train(model, x, optimizer, steps, each=lambda step: clock.step())
    assert guard.checks == 0 and clock.steps == [True, False, True, True][:steps]
