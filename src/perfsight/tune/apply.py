"""Applying a tuning bank at run time, without rewriting the model.

This module owns ``tuned(bank)`` (a context manager) and ``apply_bank(model, bank)`` (hooks that run the
model's forward inside it). Both push a ``TorchFunctionMode`` that intercepts the tunable torch functions
(``candidates.TUNABLE``): a call whose signature has a winner in the bank runs under that candidate
(``candidates.run``, the very function the tuner timed); every other call falls through to PyTorch.

Parameters are never replaced or re-registered: a pre-transposed or channels_last weight is a derived
tensor (cached per weight and version when no gradient is needed), so optimizers, checkpoints and DDP
stay valid. A bank tuned under other library versions is not applied (a warning names the differences).
"""
from __future__ import annotations

import json
import warnings
from collections import Counter
from contextlib import contextmanager
from typing import Iterator

import torch
from torch.overrides import TorchFunctionMode

from perfsight.tune.bank import Bank
from perfsight.tune.candidates import TUNABLE, Candidate, run, signature


def default_bank() -> Bank:
    """The bank of TUNE_BANK_PATH (or the default path) for this device, read-only."""
    from perfsight.tune.env import TuneSettings

    return Bank(TuneSettings.from_env().bank_path, read_only=True)


class TunedMode(TorchFunctionMode):
    """Runs each tunable call under its bank winner; ``used`` counts the calls per winner name."""

    def __init__(self, bank: Bank):
        super().__init__()
        self.bank = bank
        self.used: Counter = Counter()
        self._winners: dict[str, Candidate | None] = {}
        stale = bank.stale()
        self.active = not stale
        if stale:
            warnings.warn(f"perfsight: the tuning bank {bank.directory} is not applied: it was tuned under "
                          f"other library versions ({'; '.join(stale)})", stacklevel=3)

    def winner(self, sig: dict) -> Candidate | None:
        text = json.dumps(sig, sort_keys=True)
        if text not in self._winners:
            entry = self.bank.get("op", self.bank.key("op", sig))
            chosen = None
            if entry is not None and entry.winner is not None:
                record = next((c for c in entry.candidates if c.get("name") == entry.winner), None)
                if record is not None:
                    chosen = Candidate(entry.winner, record.get("mode", ""), record.get("params") or {})
            self._winners[text] = chosen
        return self._winners[text]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.active and func in TUNABLE:
            sig = signature(func, args, kwargs)
            chosen = None if sig is None else self.winner(sig)
            if chosen is not None:
                self.used[chosen.name] += 1
                return run(chosen, func, args, kwargs)
        return func(*args, **(kwargs or {}))


@contextmanager
def tuned(bank: Bank | None = None) -> Iterator[TunedMode]:
    """``with perfsight.tuned(): step()`` runs the tunable ops of the block under the bank's winners."""
    with TunedMode(bank if bank is not None else default_bank()) as mode:
        yield mode


class AppliedBank:
    """What ``apply_bank`` returns: ``mode`` (with its ``used`` counts) and ``remove()`` to undo it."""

    def __init__(self, model: torch.nn.Module, mode: TunedMode):
        self.mode = mode

        def enter(_module, _inputs):
            mode.__enter__()  # returns nothing: a pre-hook's return value would replace the inputs

        def leave(_module, _inputs, _output):
            mode.__exit__(None, None, None)
        self._handles = [model.register_forward_pre_hook(enter),
                         model.register_forward_hook(leave, always_call=True)]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def apply_bank(model: torch.nn.Module, bank: Bank | None = None) -> AppliedBank:
    """Run every forward of ``model`` under the bank's winners (its parameters stay the same objects)."""
    return AppliedBank(model, TunedMode(bank if bank is not None else default_bank()))
