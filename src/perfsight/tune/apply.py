"""Applying a tuning bank at run time, without rewriting the model.

This module owns ``tuned(bank)`` (a context manager) and ``apply_bank(model, bank)`` (hooks that run the
model's forward inside it) for operator winners, and ``apply_subgraphs(model, bank)`` for subgraph
winners. The first two enter a ``TunedMode``, which patches only the functions its bank has winners for,
where torch code calls them (tune/intercept.py; nothing else is intercepted): a call whose signature has
a winner runs under that candidate (``candidates.run``, the very function the tuner timed, forward and
backward); every other call falls through to PyTorch.

Parameters are never replaced or re-registered: a pre-transposed or channels_last weight is a derived
tensor (cached per weight and version when no gradient is needed), so optimizers, checkpoints and DDP
stay valid. A bank tuned under other library versions is not applied (a warning names the differences);
a damaged one - a file not of its shape (tune/bank.py), stores without bank.json, a winner whose params
are not allowed (``candidates.Params``, ``variants.Variant``, an optimizer implementation, a loader's settings,
a TunableOp results file) - raises TuneBankError naming the file and the entry before anything runs under it
(``operator_winners``, ``subgraph_winners``, ``optimizer_winners``, ``loader_winners``, ``tunableop_winners``).

``apply_subgraphs`` installs, on each module whose class and structure have a subgraph winner, what
``Module.compile`` installs (``_compiled_call_impl``), here a dispatcher: a call whose region signature
(``regions.region_signature``) has a winner runs ``variants.variant_call`` of the module's ``_call_impl``
(what ``Module.compile`` compiles) under that winner, exactly as it was timed, compiled once per module
and signature through its own code object (``variants.own_code``; ``_call_impl`` is one code object for
every module). Any other call (unknown shapes, training where only inference was tuned), any call traced
inside an outer compiled region, and a frozen winner's calls once a weight changed in place (frozen code
holds the weights it was compiled with) run the module eagerly. Parameters stay the same objects;
``disable()`` and ``enable()`` switch the dispatchers off and on (``perfsight tune --verify`` alternates
them step by step), ``remove()`` undoes it.

``apply_optimizers(bank)`` applies the step-settings winners (``AppliedOptimizers``): every optimizer of the
process whose signature has one runs that implementation (for_loop, foreach or fused; tune/optimizers.py),
switched in place before its steps and put back as it was built when disabled; its state stays valid for
either. ``apply_loaders(bank)`` applies the data-loader winners (``AppliedLoaders``): a loader whose
signature has one runs under its worker settings from its next epoch on (tune/loaders.py).
``apply_tunableop(bank)`` turns TunableOp on with the results the bank holds for this GPU
(``AppliedTunableOp``, tune/tunableop.py).
"""
from __future__ import annotations

import warnings
import weakref
from collections import Counter
from contextlib import contextmanager
from typing import Annotated, Callable, Iterator, Literal

import msgspec
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils.data import DataLoader

from perfsight.core.patched import Patched
from perfsight.tune import intercept, loaders, optimizers, tunableop
from perfsight.tune.bank import Bank
from perfsight.tune.candidates import Candidate, Params, call_key, signature
from perfsight.tune.regions import region_signature
from perfsight.tune.variants import Variant, region_runner, variant_call


def default_bank() -> Bank:
    """The bank of TUNE_BANK_PATH (or the default path) for this device, read-only."""
    from perfsight.tune.env import TuneSettings

    return Bank(TuneSettings.from_env().bank_path, read_only=True)


def operator_winners(bank: Bank) -> dict[str, tuple[str, Candidate]]:
    """The bank's operator winners: key -> (op, winning candidate), each checked against
    ``candidates.Params`` (a TuneBankError names a winner whose params are not allowed)."""
    found = {}
    for key, entry in bank.entries("op").items():
        if entry.winner is not None:
            params = msgspec.to_builtins(bank.winner_as(entry, Params))
            found[key] = (entry.signature.get("op"), Candidate(entry.winner, entry.winner_record().get("mode", ""),
                                                                params))
    return found


def subgraph_winners(bank: Bank) -> dict[tuple[str, str], dict[str, Variant]]:
    """The bank's subgraph winners: (region class, structure) -> key -> winning variant, each checked
    against ``variants.Variant`` (a TuneBankError names a winner whose params are not allowed)."""
    found: dict[tuple[str, str], dict[str, Variant]] = {}
    for key, entry in bank.entries("subgraph").items():
        if entry.winner is not None:
            where = (entry.signature.get("region"), entry.signature.get("structure"))
            found.setdefault(where, {})[key] = bank.winner_as(entry, Variant, name=entry.winner)
    return found


class _Implementation(msgspec.Struct):
    """An optimizer winner's params: the implementation it runs."""
    implementation: Literal["for_loop", "foreach", "fused"]


class _LoaderSettings(msgspec.Struct):
    """A data loader's winner's params: its worker settings (``loaders.SETTINGS``)."""
    num_workers: Annotated[int, msgspec.Meta(ge=0)]
    persistent_workers: bool
    prefetch_factor: Annotated[int, msgspec.Meta(ge=0)] | None
    pin_memory: bool


class _TunableResults(msgspec.Struct):
    """A TunableOp winner's params: its results file, in the bank directory."""
    results: Literal["tunableop_results.csv"]


def _step_winners(bank: Bank, setting: str, shape: type) -> dict[str, tuple[str, msgspec.Struct]]:
    """key -> (winner, its params as ``shape``) of the bank's step-settings entries of ``setting`` (optimizer,
    loader, tunableop: the key their signatures have)."""
    return {key: (entry.winner, bank.winner_as(entry, shape)) for key, entry in bank.entries("step").items()
            if entry.winner is not None and setting in entry.signature}


def optimizer_winners(bank: Bank) -> dict[str, str]:
    """The bank's optimizer winners (step settings): key -> the implementation (``optimizers.IMPLEMENTATIONS``;
    a TuneBankError names a winner whose params are not allowed)."""
    return {key: params.implementation
            for key, (_, params) in _step_winners(bank, "optimizer", _Implementation).items()}


def tunableop_winners(bank: Bank) -> dict[str, str]:
    """The bank's TunableOp winners (step settings, one per GPU and torch version): key -> the results file
    (a TuneBankError names a winner whose params are not allowed)."""
    return {key: params.results for key, (_, params) in _step_winners(bank, "tunableop", _TunableResults).items()}


def loader_winners(bank: Bank) -> dict[str, tuple[str, dict]]:
    """The bank's data-loader winners (step settings): key -> (winner, its settings: ``loaders.SETTINGS``; a
    TuneBankError names a winner whose params are not allowed)."""
    return {key: (name, msgspec.to_builtins(params))
            for key, (name, params) in _step_winners(bank, "loader", _LoaderSettings).items()}


def _fresh(bank: Bank) -> bool:
    """Whether ``bank`` was tuned under the running library versions (else a warning says why not)."""
    stale = bank.stale()
    if stale:
        warnings.warn(f"perfsight: the tuning bank {bank.directory} is not applied: it was tuned under "
                      f"other library versions ({'; '.join(stale)})", stacklevel=4)
    return not stale


class TunedMode:
    """Runs each tunable call under its bank winner; ``used`` counts the calls per winner name, ``ops`` are
    the ops with winners. A context manager, re-entrant; entering patches the call points of ``ops``
    (tune/intercept.py), leaving - on an exception too - restores them. ``active`` is False for a stale
    bank or one without operator winners: then entering does nothing at all. ``TunedMode.current()`` is
    the innermost mode entered on this thread (None outside any)."""

    def __init__(self, bank: Bank):
        self.bank = bank
        self.used: Counter = Counter()
        self._winners = operator_winners(bank) if _fresh(bank) else {}
        self._calls: dict[tuple, Candidate | None] = {}  # call_key -> winner
        self.ops = frozenset(op for op, _ in self._winners.values())
        self.active = bool(self.ops)

    def winner(self, sig: dict) -> Candidate | None:
        """The bank's winner for a signature, None if it has none."""
        found = self._winners.get(self.bank.key("op", sig))
        return None if found is None else found[1]

    def choose(self, func, args, kwargs) -> Candidate | None:
        """The winner to run ``func(*args, **kwargs)`` under (counted in ``used``), None to fall through."""
        key = call_key(func, args, kwargs)
        if key is None:
            return None
        if key not in self._calls:
            sig = signature(func, args, kwargs)
            self._calls[key] = None if sig is None else self.winner(sig)
        chosen = self._calls[key]
        if chosen is not None:
            self.used[chosen.name] += 1
        return chosen

    def __enter__(self) -> TunedMode:
        if self.active:
            intercept.enter(self)
        return self

    def __exit__(self, *_exc) -> None:
        if self.active:
            intercept.leave(self)

    @staticmethod
    def current() -> TunedMode | None:
        return intercept.current()


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
                         model.register_forward_hook(leave, always_call=True)] if mode.active else []

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def apply_bank(model: torch.nn.Module, bank: Bank | None = None) -> AppliedBank:
    """Run every forward of ``model`` under the bank's winners (its parameters stay the same objects)."""
    return AppliedBank(model, TunedMode(bank if bank is not None else default_bank()))


class AppliedSubgraphs:
    """What ``apply_subgraphs`` returns: ``installed`` (module paths), ``used`` (calls per winner name),
    ``disable()`` / ``enable()`` to run the modules eagerly for a while (the dispatchers and what they
    compiled are kept), ``only`` (the bank keys whose winners run, the others' calls eager; None: all; an
    in-step trial's subsets, tune/prove.py) and ``remove()`` to undo it."""

    def __init__(self, model: torch.nn.Module, bank: Bank, compiler: Callable):
        self.used: Counter = Counter()
        self.installed: list[str] = []
        self.only: frozenset[str] | None = None   # the bank keys whose winners run (None: every one)
        self._dispatchers: list[tuple[torch.nn.Module, Callable]] = []
        winners = subgraph_winners(bank) if _fresh(bank) else {}
        for name, module in model.named_modules():
            sig = region_signature(module, (), {})
            chosen = winners.get((sig["region"], sig["structure"]))
            if chosen and module._compiled_call_impl is None:
                self._dispatchers.append((module, self._dispatcher(module, bank, chosen, compiler)))
                self.installed.append(name)
        self.enable()

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
                variant = chosen.get(key) if self.only is None or key in self.only else None
                compiled_with = frozen.get(key)  # parameter versions are walked only for frozen code
                if variant is not None and (compiled_with is None or compiled_with == versions()):
                    if key not in calls:
                        calls[key] = region_runner(compiler, module._call_impl, variant, module)
                        if variant.freezing:
                            frozen[key] = versions()
                    self.used[variant.name] += 1
                    return calls[key](*args, **kwargs)
            return module._call_impl(*args, **kwargs)
        return dispatch

    def enable(self) -> None:
        for module, dispatch in self._dispatchers:
            module._compiled_call_impl = dispatch

    def disable(self) -> None:
        for module, _ in self._dispatchers:
            module._compiled_call_impl = None

    def remove(self) -> None:
        self.disable()
        self._dispatchers = []


def _call_key(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple:
    """What decides a call's region signature, cheap to build and hashable (parameters' requires_grad
    is taken as fixed once a module was called)."""
    leaves = torch.utils._pytree.tree_leaves((args, kwargs))
    return (torch.is_grad_enabled(), module.training, tuple(kwargs), tuple(
        (t.shape, t.stride(), t.dtype, t.device, t.requires_grad) if isinstance(t, torch.Tensor)
        else t if isinstance(t, (bool, int, float, str, type(None))) else type(t) for t in leaves))


class AppliedOptimizers:
    """The bank's optimizer winners on every optimizer of the process: before each optimizer step (a
    global step pre-hook), an optimizer whose signature (``optimizers.signature``, worked out at its first
    step and again when its parameter count changes) has a winner runs that implementation
    (``optimizers.switch``); any other runs as it was built. ``installed`` is whether the bank holds such
    winners (which optimizers have one is known at their steps); ``used`` counts the steps run under each
    winner; ``only`` (the bank keys whose winners run; None: all) as for ``AppliedSubgraphs``;
    ``disable()`` puts every switched optimizer back as it was built, ``enable()`` switches them again from
    their next step on, ``remove()`` undoes it all."""

    def __init__(self, bank: Bank):
        self.used: Counter = Counter()
        self.only: frozenset[str] | None = None
        self.enabled = True
        self._winners = optimizer_winners(bank) if _fresh(bank) else {}
        self.installed = bool(self._winners)
        self._bank = bank
        self._keys: dict[int, tuple[int, str]] = {}   # id(optimizer) -> (its parameter count, its bank key)
        self._switched: dict[int, tuple[weakref.ref, list[dict]]] = {}  # id -> (it, its flags as built)
        self._handle = register_optimizer_step_pre_hook(self._before) if self.installed else None

    def _key(self, optimizer: torch.optim.Optimizer) -> str:
        count = sum(len(group["params"]) for group in optimizer.param_groups)
        known = self._keys.get(id(optimizer))
        if known is None or known[0] != count:
            known = self._keys[id(optimizer)] = (count, self._bank.key("step", optimizers.signature(optimizer)))
            weakref.finalize(optimizer, self._forget, id(optimizer))
        return known[1]

    def _forget(self, ident: int) -> None:
        self._keys.pop(ident, None)
        self._switched.pop(ident, None)

    def _before(self, optimizer: torch.optim.Optimizer, _args, _kwargs) -> None:
        if not self.enabled:
            return
        key = self._key(optimizer)
        winner = self._winners.get(key) if self.only is None or key in self.only else None
        if winner is None:
            self._put_back(id(optimizer))
            return
        if id(optimizer) not in self._switched:
            self._switched[id(optimizer)] = (weakref.ref(optimizer), optimizers.flags(optimizer))
            optimizers.switch(optimizer, winner)
        self.used[winner] += 1

    def _put_back(self, ident: int) -> None:
        ref, built = self._switched.pop(ident, (None, None))
        optimizer = ref() if ref is not None else None
        if optimizer is not None:
            optimizers.switch(optimizer, built)

    def enable(self) -> None:
        self.enabled = True

    def disable(self) -> None:
        self.enabled = False
        for ident in list(self._switched):
            self._put_back(ident)

    def remove(self) -> None:
        self.disable()
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


class AppliedLoaders:
    """The bank's data-loader winners on every DataLoader of the process: while enabled, a loader whose
    signature (``loaders.signature``) has a winner gets its settings (``loaders.put``) when an iterator - an
    epoch - is made from it; ``disable()`` puts every such loader's own settings back for its next epoch,
    ``enable()`` applies them again from the next, ``remove()`` undoes it all. ``installed`` is whether the
    bank holds such winners, ``used`` counts the epochs begun under each."""

    def __init__(self, bank: Bank):
        self.used: Counter = Counter()
        self.enabled = True
        self._winners = loader_winners(bank) if _fresh(bank) else {}
        self.installed = bool(self._winners)
        self._bank = bank
        self._own: dict[int, tuple[weakref.ref, dict]] = {}   # id(loader) -> (it, its own settings)
        self._patch = Patched(DataLoader, "__iter__", self._iterating) if self.installed else None

    def _iterating(self, original: Callable) -> Callable:
        def iterate(loader):
            self._before(loader)
            return original(loader)
        return iterate

    def _before(self, loader: DataLoader) -> None:
        if not self.enabled or not loaders.tunable(loader):
            return
        winner = self._winners.get(self._bank.key("step", loaders.signature(loader)))
        if winner is None:
            return
        name, chosen = winner
        self._own.setdefault(id(loader), (weakref.ref(loader), loaders.settings(loader)))
        loaders.put(loader, chosen)
        self.used[name] += 1

    def enable(self) -> None:
        self.enabled = True

    def disable(self) -> None:
        self.enabled = False
        for ref, own in self._own.values():
            loader = ref()
            if loader is not None:
                loaders.put(loader, own)
        self._own = {}

    def remove(self) -> None:
        self.disable()
        if self._patch is not None:
            self._patch.remove()


def apply_loaders(bank: Bank | None = None) -> AppliedLoaders:
    """Run every DataLoader of the process whose signature has a winner in the bank under its settings, from
    its next epoch on (``AppliedLoaders``)."""
    return AppliedLoaders(bank if bank is not None else default_bank())


class AppliedTunableOp:
    """The bank's TunableOp winner for this GPU and torch (``tunableop.signature``): while enabled, TunableOp is on
    with the results the bank holds and tuning off; while disabled, off. ``only`` (the bank keys whose winners
    run; None: all) is applied at once, as the steps of an in-step trial need. ``installed`` is whether the bank
    holds such a winner - one whose results were tuned under another torch version is not applied, a warning
    says why (TunableOp itself would drop them without a word); ``used`` counts the times it was switched on
    after it was made."""

    def __init__(self, bank: Bank):
        self.used: Counter = Counter()
        self.enabled, self._only = True, None
        winners = tunableop_winners(bank) if tunableop.available() and _fresh(bank) else {}
        self._key = bank.key("step", tunableop.signature()) if winners else None
        self._switch = None
        if self._key in winners:
            path = bank.directory / winners[self._key]
            stale = tunableop.stale(tunableop.read_results(path)[0])
            if stale:
                warnings.warn(f"perfsight: the TunableOp results {path} are not applied: {'; '.join(stale)}",
                              stacklevel=2)
            else:
                self._switch = tunableop.Switch(path)
        self.installed = self._switch is not None
        if self._switch is not None:
            self._switch.on()    # on from now, as the other appliers are; ``used`` counts the switches that follow

    @property
    def only(self) -> frozenset[str] | None:
        return self._only

    @only.setter
    def only(self, keys: frozenset[str] | None) -> None:
        self._only = keys
        self._apply()

    def _apply(self) -> None:
        if self._switch is None:
            return
        if self.enabled and (self._only is None or self._key in self._only):
            self._switch.on()
            self.used[tunableop.NAME] += 1
        else:
            self._switch.off()

    def enable(self) -> None:
        self.enabled = True
        self._apply()

    def disable(self) -> None:
        self.enabled = False
        self._apply()

    def remove(self) -> None:
        self.disable()


def apply_tunableop(bank: Bank | None = None) -> AppliedTunableOp:
    """Run the GEMMs under the bank's TunableOp results for this GPU (``AppliedTunableOp``)."""
    return AppliedTunableOp(bank if bank is not None else default_bank())


def apply_optimizers(bank: Bank | None = None) -> AppliedOptimizers:
    """Run every optimizer of the process whose signature has a step-settings winner in the bank under it
    (``AppliedOptimizers``)."""
    return AppliedOptimizers(bank if bank is not None else default_bank())


def apply_subgraphs(model: torch.nn.Module, bank: Bank | None = None, *,
                    compiler: Callable | None = None) -> AppliedSubgraphs:
    """Run each region of ``model`` with a subgraph winner in the bank under it (see the module docstring);
    ``compiler(fn, variant)`` defaults to ``variants.variant_call``."""
    return AppliedSubgraphs(model, bank if bank is not None else default_bank(), compiler or variant_call)
