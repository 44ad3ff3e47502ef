"""Applying a tuning bank at run time, without rewriting the model.

This module owns ``tuned(bank)`` (a context manager) and ``apply_bank(model, bank)`` (hooks that run the
model's forward inside it) for operator winners, and ``apply_subgraphs(model, bank)`` for subgraph
winners. The first two push a ``TorchFunctionMode`` that intercepts the tunable torch functions
(``candidates.TUNABLE``): a call whose signature has a winner in the bank runs under that candidate
(``candidates.run``, the very function the tuner timed); every other call falls through to PyTorch.

Parameters are never replaced or re-registered: a pre-transposed or channels_last weight is a derived
tensor (cached per weight and version when no gradient is needed), so optimizers, checkpoints and DDP
stay valid. A bank tuned under other library versions is not applied (a warning names the differences).

``apply_subgraphs`` installs, on each module whose class and structure have a subgraph winner, what
``Module.compile`` installs (``_compiled_call_impl``), here a dispatcher: a call whose region signature
(``regions.region_signature``) has a winner runs ``sgat.variant_call`` of the module's ``_call_impl``
(what ``Module.compile`` compiles) under that winner, exactly as it was timed, compiled once per module
and signature through its own code object (``sgat.own_code``; ``_call_impl`` is one code object for
every module). Any other call (unknown shapes, training where only inference was tuned), any call traced
inside an outer compiled region, and a frozen winner's calls once a weight changed in place (frozen code
holds the weights it was compiled with) run the module eagerly. Parameters stay the same objects;
``remove()`` undoes it.
"""
from __future__ import annotations

import json
import warnings
from collections import Counter
from contextlib import contextmanager
from typing import Callable, Iterator

import torch
from torch.overrides import TorchFunctionMode

from perfsight.tune.bank import Bank
from perfsight.tune.candidates import TUNABLE, Candidate, run, signature
from perfsight.tune.regions import region_signature
from perfsight.tune.sgat import Variant, own_code, variant_call


def default_bank() -> Bank:
    """The bank of TUNE_BANK_PATH (or the default path) for this device, read-only."""
    from perfsight.tune.env import TuneSettings

    return Bank(TuneSettings.from_env().bank_path, read_only=True)


def _fresh(bank: Bank) -> bool:
    """Whether ``bank`` was tuned under the running library versions (else a warning says why not)."""
    stale = bank.stale()
    if stale:
        warnings.warn(f"perfsight: the tuning bank {bank.directory} is not applied: it was tuned under "
                      f"other library versions ({'; '.join(stale)})", stacklevel=4)
    return not stale


class TunedMode(TorchFunctionMode):
    """Runs each tunable call under its bank winner; ``used`` counts the calls per winner name. ``active``
    is False for a stale bank or one without operator winners: then nothing is intercepted at all (the
    interception alone costs ~10% of a small model's step, bench/RESULTS.md)."""

    def __init__(self, bank: Bank):
        super().__init__()
        self.bank = bank
        self.used: Counter = Counter()
        self._winners: dict[str, Candidate | None] = {}
        self.active = _fresh(bank) and any(entry.winner for entry in bank.entries("op").values())

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
    mode = TunedMode(bank if bank is not None else default_bank())
    if not mode.active:
        yield mode
        return
    with mode:
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
                         model.register_forward_hook(leave, always_call=True)] if mode.active else []

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def apply_bank(model: torch.nn.Module, bank: Bank | None = None) -> AppliedBank:
    """Run every forward of ``model`` under the bank's winners (its parameters stay the same objects)."""
    return AppliedBank(model, TunedMode(bank if bank is not None else default_bank()))


class AppliedSubgraphs:
    """What ``apply_subgraphs`` returns: ``installed`` (module paths), ``used`` (calls per winner name)
    and ``remove()`` to undo it."""

    def __init__(self, model: torch.nn.Module, bank: Bank, compiler: Callable):
        self.used: Counter = Counter()
        self.installed: list[str] = []
        self._modules: list[torch.nn.Module] = []
        winners: dict[tuple[str, str], dict[str, Variant]] = {}  # (class, structure) -> key -> winner
        for key, entry in bank.entries("subgraph").items() if _fresh(bank) else ():
            record = next((c for c in entry.candidates if c.get("name") == entry.winner), None)
            if record is not None:
                where = (entry.signature["region"], entry.signature["structure"])
                winners.setdefault(where, {})[key] = Variant(entry.winner, **record["params"])
        for name, module in model.named_modules():
            sig = region_signature(module, (), {})
            chosen = winners.get((sig["region"], sig["structure"]))
            if chosen and module._compiled_call_impl is None:
                module._compiled_call_impl = self._dispatcher(module, bank, chosen, compiler)
                self._modules.append(module)
                self.installed.append(name)

    def _dispatcher(self, module: torch.nn.Module, bank: Bank, chosen: dict, compiler: Callable) -> Callable:
        calls: dict[str, Callable] = {}
        keys: dict[tuple, str] = {}  # a cheap description of the call -> its bank key
        frozen: dict[str, tuple] = {}  # key -> the parameter versions its frozen code was compiled with

        def versions() -> tuple:
            return tuple(p._version for p in module.parameters())

        def dispatch(*args, **kwargs):
            if not torch.compiler.is_compiling():
                cheap = _call_key(module, args, kwargs)
                key = keys.get(cheap)
                if key is None:
                    key = keys[cheap] = bank.key("subgraph", region_signature(module, args, kwargs))
                variant = chosen.get(key)
                if variant is not None and frozen.get(key, ()) in ((), versions()):
                    if key not in calls:
                        calls[key] = compiler(own_code(module._call_impl), variant)
                        if variant.freezing:
                            frozen[key] = versions()
                    self.used[variant.name] += 1
                    return calls[key](*args, **kwargs)
            return module._call_impl(*args, **kwargs)
        return dispatch

    def remove(self) -> None:
        for module in self._modules:
            module._compiled_call_impl = None
        self._modules = []


def _call_key(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple:
    """What decides a call's region signature, cheap to build and hashable (parameters' requires_grad
    is taken as fixed once a module was called)."""
    leaves = torch.utils._pytree.tree_leaves((args, kwargs))
    return (torch.is_grad_enabled(), module.training, tuple(kwargs), tuple(
        (t.shape, t.stride(), t.dtype, t.device, t.requires_grad) if isinstance(t, torch.Tensor)
        else t if isinstance(t, (bool, int, float, str, type(None))) else type(t) for t in leaves))


def apply_subgraphs(model: torch.nn.Module, bank: Bank | None = None, *,
                    compiler: Callable | None = None) -> AppliedSubgraphs:
    """Run each region of ``model`` with a subgraph winner in the bank under it (see the module docstring);
    ``compiler(fn, variant)`` defaults to ``sgat.variant_call``."""
    return AppliedSubgraphs(model, bank if bank is not None else default_bank(), compiler or variant_call)
