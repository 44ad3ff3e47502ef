"""``perfsight tune --verify -- python train.py``: whole steps of an unmodified script timed with and
without the tuning bank, interleaved within the same run.

PERFSIGHT_TUNE with ``"verify": true`` makes tune/autostart.py start a ``ScriptVerifier``. At the
script's first module forward the bank is opened for that (root) module (``scriptbank.ScriptBank``: its
operator, subgraph and step-settings winners, off); a missing or stale bank, or one with no winner for this model,
ends the verification there. A step runs from one optimizer step to the next and is timed between them
(``time.perf_counter_ns``, read after the bank was switched on or off for that step). The first step,
which ends at the first optimizer step, is not timed; the next ones follow ``verify.Rounds``: ``warmup``
untimed rounds (the winners compile there) then ``rounds`` timed rounds, each one step without the bank
and one with it, the side going first alternating (A,B then B,A). Then the bank is switched off, every
hook removed and the script continues untuned; the ``verify.Verdict`` goes to the ``status`` file:
``{"verdict": Verdict.as_dict(), "text": str(verdict), "warmup_steps", "timed_steps", "order"}``, or
``{"error"}`` - for example when the script made too few steps. A failure never stops the script.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import torch
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook

from perfsight.tune.scriptbank import ScriptBank
from perfsight.tune.status import failure, write_status
from perfsight.tune.verify import Rounds, Verdict


class ScriptRounds:
    """``verify.Rounds`` over a script's own steps: a step runs from one optimizer step to the next. The first
    (begun before the rounds, or ended where they start) is not timed; before each later one the bank is
    switched to that step's side. ``stepped(end)`` takes the time an optimizer step ended and returns True
    once every round is done (the bank left as the last step had it)."""

    def __init__(self, bank: ScriptBank, rounds: int, warmup: int, timer: Callable[[], int]):
        self.bank, self.timer = bank, timer
        self.rounds = Rounds(rounds, warmup)
        self.needed = self.steps_needed(rounds, warmup)
        self.steps = 0  # optimizer steps seen
        self.start = 0

    @staticmethod
    def steps_needed(rounds: int, warmup: int) -> int:
        """The optimizer steps the rounds take: the untimed first one, then one a side a round."""
        return 1 + 2 * (warmup + rounds)

    def stepped(self, end: int) -> bool:
        if self.steps:
            self.rounds.record(self.steps - 1, end - self.start)
        self.steps += 1
        if self.steps == self.needed:
            return True
        self.bank.switch(self.rounds.order[self.steps - 1])
        self.start = self.timer()
        return False

    def verdict(self) -> Verdict:
        return self.rounds.verdict(threads=torch.get_num_threads(), applied=self.bank.used,
                                   bank=self.bank.bank.directory)


class ScriptVerifier:
    def __init__(self, config: dict, timer: Callable[[], int] = time.perf_counter_ns):
        self.config = config
        self.timer = timer
        self.check: ScriptRounds | None = None
        self.done = False
        self.handles = [register_module_forward_pre_hook(self._first_forward),
                        register_optimizer_step_post_hook(self._stepped)]

    def _first_forward(self, module, _args) -> None:
        self.handles[0].remove()
        try:
            self.check = ScriptRounds(ScriptBank(module, Path(self.config["bank"])), self.config["rounds"],
                                      self.config["warmup"], self.timer)
        except Exception as exc:  # verifying never takes the training down
            self.finish(failure(exc))

    def _stepped(self, _optimizer, _args, _kwargs) -> None:
        end = self.timer()
        if self.done or self.check is None:
            return
        try:
            if self.check.stepped(end):
                self.finish()
        except Exception as exc:
            self.finish(failure(exc))

    def finish(self, error: str = "") -> None:
        """Switch the bank off, remove the hooks and write the verdict (at the last step or at exit)."""
        if self.done:
            return
        self.done = True
        for handle in self.handles:
            handle.remove()
        check = self.check
        if check is not None:
            check.bank.close()
        steps = check.steps if check is not None else 0
        needed = ScriptRounds.steps_needed(self.config["rounds"], self.config["warmup"])
        if not error and steps < needed:
            warmup = 2 * self.config["warmup"]
            error = (f"the script made {steps} optimizer steps; --verify needs {needed}: the first (not timed), "
                     f"{warmup} warm-up and {needed - 1 - warmup} timed steps: let it train longer or lower --steps")
        write_status(self.config, {"error": error} if error else self._verdict(check))

    @staticmethod
    def _verdict(check: ScriptRounds) -> dict:
        verdict = check.verdict()
        timed = check.rounds.order[2 * check.rounds.warmup:]
        return {"verdict": verdict.as_dict(), "text": str(verdict), "warmup_steps": 2 * check.rounds.warmup,
                "timed_steps": len(timed), "order": ["tuned" if on else "untuned" for on in timed]}
