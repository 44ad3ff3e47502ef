"""A tuning bank applied to a script's run and checked in that run: it stays on only while it does not make the
training slower.

Tuning proves its winners in the training step (tune/prove.py), but the run that later applies the bank can
differ: another machine load (a thread-count winner needs the cores it was tuned with to be free), other
inputs, a longer job. So under ``perfsight run`` with TUNE_BANK_PATH (tune/autostart.py) the bank is applied
through a ``BankGuard``, which checks it against the untuned steps of the run itself: at the start and again
every ``every`` optimizer steps, ``rounds`` interleaved rounds of one step with the bank and one without
(``verify_script.ScriptRounds``, after ``warmup`` untimed rounds, the side going first alternating), judged
as ``perfsight tune --verify`` judges them (``verify.Verdict``). A bank whose steps are slower at the median
(speed-up below 1) is switched off until the next check; otherwise it is on. The first check's verdict, and
every later one that turns the bank on or off, is printed. A check runs half its steps untuned: with the
defaults, 11 of every 1,000 steps, about 1% of what the bank saves. A check that fails switches the bank
off for good and says why; it never stops the training.
"""
from __future__ import annotations

import sys
import time
from typing import Callable

from torch.optim.optimizer import register_optimizer_step_post_hook

from perfsight.tune.scriptbank import ScriptBank
from perfsight.tune.status import failure
from perfsight.tune.verify_script import ScriptRounds

#: a check's timed and warm-up rounds, and the optimizer steps from the end of one check to the next
CHECK_ROUNDS, CHECK_WARMUP, CHECK_EVERY = 10, 1, 1000


def _say(text: str) -> None:
    print(f"perfsight: {text}", file=sys.stderr)


class BankGuard:
    """``bank`` applied to the script's steps and checked as the module docstring says; ``on`` says whether the
    bank is on between checks, ``checks`` how many were judged, ``steps`` the optimizer steps seen."""

    def __init__(self, bank: ScriptBank, *, rounds: int = CHECK_ROUNDS, warmup: int = CHECK_WARMUP,
                 every: int = CHECK_EVERY, timer: Callable[[], int] = time.perf_counter_ns,
                 say: Callable[[str], None] = _say):
        self.bank, self.rounds, self.warmup, self.every, self.timer, self.say = bank, rounds, warmup, every, timer, say
        self.on = True
        self.checks = self.steps = 0
        bank.switch(True)
        # the first check starts now: the step under way (the bank opened in it) is its untimed first one
        self.check: ScriptRounds | None = ScriptRounds(bank, rounds, warmup, timer)
        self.since = 0   # optimizer steps since the last check ended
        self.failed = ""
        self.handle = register_optimizer_step_post_hook(self._stepped)

    def _stepped(self, _optimizer, _args, _kwargs) -> None:
        end = self.timer()
        if self.failed:
            return
        self.steps += 1
        try:
            if self.check is None:
                self.since += 1
                if self.since < self.every:
                    return
                self.check = ScriptRounds(self.bank, self.rounds, self.warmup, self.timer)
            if self.check.stepped(end):
                self._judge(self.check)
        except Exception as exc:  # checking never takes the training down
            self.stop(f"the tuning bank's check failed: {failure(exc)}")

    def _judge(self, check: ScriptRounds) -> None:
        verdict = check.verdict()
        on = verdict.speedup >= 1.0
        if not self.checks or on != self.on:
            then = ("it stays on" if on else "it is switched off") + f" until the next check, in {self.every} steps"
            self.say(f"checked the tuning bank at optimizer step {self.steps}: {verdict}; {then}")
        self.on, self.check, self.since = on, None, 0
        self.checks += 1
        self.bank.switch(on)

    def stop(self, why: str) -> None:
        """Switch the bank off for good and stop checking (``why`` is printed). The hook stays, idle: this may
        run inside it, while the optimizer goes through its hooks."""
        self.bank.close()
        self.on, self.check, self.failed = False, None, why
        self.say(f"{why}; the bank is switched off, the training goes on untuned")

    def remove(self) -> None:
        """Switch the bank off and remove the hook (not from inside an optimizer step)."""
        self.handle.remove()
        self.bank.close()

    def describe(self) -> str:
        """What the checks did, for the line printed at exit."""
        state = f"stopped ({self.failed})" if self.failed else "on" if self.on else "off"
        return f"{self.checks} check(s) in {self.steps} optimizer steps, the bank {state} at the end"
