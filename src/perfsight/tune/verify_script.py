"""``perfsight tune --verify -- python train.py``: whole steps of an unmodified script timed with and
without the tuning bank, interleaved within the same run.

PERFSIGHT_TUNE with ``"verify": true`` makes tune/autostart.py start a ``ScriptVerifier``. At the
script's first module forward the bank is opened for that (root) module (``scriptbank.ScriptBank``: its
operator and subgraph winners, off); a missing or stale bank, or one with no winner for this model,
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
from perfsight.tune.verify import Rounds


class ScriptVerifier:
    def __init__(self, config: dict, timer: Callable[[], int] = time.perf_counter_ns):
        self.config = config
        self.timer = timer
        self.rounds = Rounds(config["rounds"], config["warmup"])
        self.needed = 1 + len(self.rounds.order)  # optimizer steps: the untimed first one, then the rounds
        self.bank: ScriptBank | None = None
        self.steps = 0  # optimizer steps seen since the bank was opened
        self.start = 0
        self.done = False
        self.handles = [register_module_forward_pre_hook(self._first_forward),
                        register_optimizer_step_post_hook(self._stepped)]

    def _first_forward(self, module, _args) -> None:
        self.handles[0].remove()
        try:
            self.bank = ScriptBank(module, Path(self.config["bank"]))
        except Exception as exc:  # verifying never takes the training down
            self.finish(failure(exc))

    def _stepped(self, _optimizer, _args, _kwargs) -> None:
        end = self.timer()
        if self.done or self.bank is None:
            return
        try:
            if self.steps:
                self.rounds.record(self.steps - 1, end - self.start)
            self.steps += 1
            if self.steps == self.needed:
                self.finish()
                return
            self.bank.switch(self.rounds.order[self.steps - 1])
        except Exception as exc:
            self.finish(failure(exc))
        self.start = self.timer()

    def finish(self, error: str = "") -> None:
        """Switch the bank off, remove the hooks and write the verdict (at the last step or at exit)."""
        if self.done:
            return
        self.done = True
        for handle in self.handles:
            handle.remove()
        if self.bank is not None:
            self.bank.switch(False)
        warmup = 2 * self.rounds.warmup
        if not error and self.steps < self.needed:
            error = (f"the script made {self.steps} optimizer steps; --verify needs {self.needed}: the first "
                     f"(not timed), {warmup} warm-up and {self.needed - 1 - warmup} timed steps: let it train "
                     "longer or lower --steps")
        status = {"error": error} if error else self._verdict(warmup)
        write_status(self.config, status)

    def _verdict(self, warmup: int) -> dict:
        verdict = self.rounds.verdict(threads=torch.get_num_threads(), applied=self.bank.used,
                                      bank=self.bank.bank.directory)
        timed = self.rounds.order[warmup:]
        return {"verdict": verdict.as_dict(), "text": str(verdict), "warmup_steps": warmup,
                "timed_steps": len(timed), "order": ["tuned" if on else "untuned" for on in timed]}
