"""A tuning bank applied to an unmodified script: its operator, subgraph and step-settings winners, switched
together.

``ScriptBank(root, bank_path)`` is made at the script's first module forward (``root``, the module that
was forwarded first): by then the script has set its thread count, which is part of the CPU's device
fingerprint. It opens the bank of this device read-only and refuses, with a ``TuneBankError`` naming
the directory, a bank that is missing, stale (tuned under other library versions) or that holds no
winner usable here: no operator winners, no subgraph winner for a module of ``root`` and no step-settings
winner. It holds the operator winners (``apply.TunedMode``, entered and left), the subgraph winners
(``apply.apply_subgraphs(root)``), the optimizer winners (``apply.apply_optimizers``: the script's
optimizers whose signature has one) and a GPU's TunableOp winner (``apply.apply_tunableop``), these three
enabled and disabled, all off until ``switch(True)``. Its
data-loader winners (``apply.apply_loaders``) are on for the whole run, from each loader's next epoch: a
loader's workers are set when its epoch starts, so ``switch`` leaves them, and the checks that alternate
step by step time the other winners only; ``close()`` turns them off too; ``used``
counts the calls that ran under a winner. ``perfsight run`` with TUNE_BANK_PATH switches it on for good
(tune/autostart.py); ``perfsight tune --verify`` switches it on and off step by step
(tune/verify_script.py).
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch

from perfsight.core.errors import TuneBankError
from perfsight.tune.apply import TunedMode, apply_loaders, apply_optimizers, apply_subgraphs, apply_tunableop
from perfsight.tune.bank import Bank


class ScriptBank:
    def __init__(self, root: torch.nn.Module, bank_path: Path):
        self.bank = Bank(bank_path, read_only=True)
        if not self.bank.directory.is_dir():
            raise TuneBankError(f"there is no tuning bank for this device in {bank_path}: expected "
                                f"{self.bank.directory}; tune first (perfsight tune -- python train.py ...)")
        self.bank.check_fresh()
        self.operators = TunedMode(self.bank)
        self.subgraphs = apply_subgraphs(root, self.bank)
        self.subgraphs.disable()
        self.optimizers = apply_optimizers(self.bank)
        self.optimizers.disable()
        self.gemms = apply_tunableop(self.bank)
        self.gemms.disable()
        self.loaders = apply_loaders(self.bank)
        if not (self.operators.active or self.subgraphs.installed or self.optimizers.installed
                or self.gemms.installed or self.loaders.installed):
            raise TuneBankError(f"the tuning bank {self.bank.directory} holds no operator winners, no subgraph "
                                f"winners for the modules of {type(root).__name__} and no step-settings winners: "
                                "nothing to apply")
        self.on = False

    def switch(self, on: bool) -> None:
        """Run the script's next calls under the winners (True) or untuned (False)."""
        if on == self.on:
            return
        self.on = on
        if on:
            self.subgraphs.enable()
            self.optimizers.enable()
            self.gemms.enable()
            if self.operators.active:
                self.operators.__enter__()
        else:
            self.subgraphs.disable()
            self.optimizers.disable()
            self.gemms.disable()
            if self.operators.active:
                self.operators.__exit__(None, None, None)

    def close(self) -> None:
        """Every winner off for the rest of the run (the data loaders' from their next epoch), their hooks off."""
        self.switch(False)
        self.loaders.remove()

    @property
    def used(self) -> Counter:
        """Calls (optimizer steps, epochs for data loaders) run under each winner so far."""
        return self.operators.used + self.subgraphs.used + self.optimizers.used + self.gemms.used + self.loaders.used

    def describe(self) -> str:
        parts = ["operator winners" if self.operators.active else "",
                 f"subgraph winners on {', '.join(n or '(the model)' for n in self.subgraphs.installed)}"
                 if self.subgraphs.installed else "",
                 "step-settings winners" if self.optimizers.installed else "",
                 "TunableOp's GEMM results" if self.gemms.installed else "",
                 "data-loader winners (from each loader's next epoch)" if self.loaders.installed else ""]
        return f"the tuning bank {self.bank.directory} ({' and '.join(p for p in parts if p)})"
