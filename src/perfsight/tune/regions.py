"""The regions subgraph tuning (SGAT) compiles: module subtrees with enough work, and their bank keys.

This module owns how a model is cut into regions:

- work: the FLOPs of one step per module subtree (``torch.utils.flop_counter``, children and every call
  included; backward FLOPs count too when the step runs one). Modules without FLOPs (activations, norms,
  reshapes) are never regions of their own; they are tuned inside a region that contains them;
- regions: from the root down, a module is split into its children when it is the root or holds more
  than ``max_share`` of the model's FLOPs and has children with FLOPs; otherwise it is a region when it
  holds at least ``min_share``. Regions never nest; the work outside them stays eager. With ``whole``,
  the model itself is a region too (``Region.whole``), around them: what a setting for all of the
  model's work - its thread count, its inputs' memory format - is tried on, switched once a call;
- ``region_signature(module, args, kwargs)``: the bank signature of one call, (module class, input
  signature, train/infer) plus the module's train/eval flag and a digest of its structure (``repr``:
  submodules and their hyperparameters), since one class - ``Sequential`` above all - can hold anything.
  Instances of one class called with the same
  inputs have one key and are tuned once (repeated blocks); ``Region.calls`` counts their calls per step.
  Tuning and ``apply`` both call this function, so a tuned key and a run-time key match.
"""
from __future__ import annotations

import hashlib
import json
import weakref
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from perfsight.tune.candidates import layout_of


@dataclass
class Region:
    """One distinct region signature: the instances (module paths) called with it, its calls per step,
    its share of the model's FLOPs, and the first instance with a copy of its first call's inputs;
    ``whole``: the model itself, around the other regions."""

    signature: dict
    names: list[str]
    calls: int
    share: float
    module: torch.nn.Module
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    whole: bool = False


def _describe(value):
    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."),
                "layout": layout_of(value), "device": value.device.type, "grad": bool(value.requires_grad)}
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _describe(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return type(value).__name__


_structures: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _structure(module: torch.nn.Module) -> str:
    if module not in _structures:
        _structures[module] = hashlib.sha256(repr(module).encode()).hexdigest()[:16]
    return _structures[module]


def region_signature(module: torch.nn.Module, args: tuple, kwargs: dict | None) -> dict:
    """The bank signature of ``module(*args, **kwargs)`` in the current grad mode."""
    cls = type(module)
    leaves = torch.utils._pytree.tree_leaves((args, kwargs or {}))
    needs_grad = any(isinstance(t, torch.Tensor) and t.requires_grad for t in leaves) or any(
        p.requires_grad for p in module.parameters())
    return {"region": f"{cls.__module__}.{cls.__qualname__}", "structure": _structure(module),
            "inputs": _describe(list(args)),
            "kwargs": _describe(kwargs or {}), "train": torch.is_grad_enabled() and needs_grad,
            "module_training": module.training}


def module_flops(model: torch.nn.Module, step: Callable[[], object]) -> dict[str, int]:
    """FLOPs of one ``step()`` per module path (``named_modules`` names; the root is '')."""
    with FlopCounterMode(display=False) as counter:
        step()
    root = type(model).__name__
    flops = {}
    for name, per_op in counter.get_flop_counts().items():
        if name == root or name.startswith(root + "."):
            flops[name[len(root) + 1:]] = sum(per_op.values())
    return flops


def choose(model: torch.nn.Module, flops: dict[str, int], *, min_share: float = 0.05,
           max_share: float = 0.5) -> list[str]:
    """The region module paths of ``model`` given its per-module FLOPs (see the module docstring)."""
    total = flops.get("", 0)
    if not total:
        return []

    def share(name: str) -> float:
        return flops.get(name, 0) / total

    def walk(name: str, module: torch.nn.Module) -> list[str]:
        children = [(f"{name}.{n}" if name else n, m) for n, m in module.named_children()]
        busy = [(n, m) for n, m in _called(children, flops) if flops.get(n, 0)]
        if busy and (not name or share(name) > max_share):
            return [found for n, m in busy for found in walk(n, m)]
        return [name] if share(name) >= min_share else []
    return walk("", model)


def _called(children, flops):
    """Children as called: a container without a forward (ModuleList, ModuleDict) stands for its own."""
    for name, module in children:
        if name in flops or not isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict)):
            yield name, module
        else:
            yield from _called([(f"{name}.{n}", m) for n, m in module.named_children()], flops)


def find_regions(model: torch.nn.Module, step: Callable[[], object], *, min_share: float = 0.05,
                 max_share: float = 0.5, whole: bool = False) -> list[Region]:
    """Run ``step`` twice (FLOPs, then the regions' calls) and return one Region per distinct signature;
    with ``whole``, the model's own too (unless it is the one region)."""
    flops = module_flops(model, step)
    names = choose(model, flops, min_share=min_share, max_share=max_share)
    whole = bool(whole and names and "" not in names)
    if whole:
        names.append("")
    modules = dict(model.named_modules())
    total = flops.get("", 0) or 1
    found: dict[str, Region] = {}

    def hook(name):
        def record(module, args, kwargs):
            sig = region_signature(module, args, kwargs)
            text = json.dumps(sig, sort_keys=True)
            region = found.get(text)
            if region is None:
                region = found[text] = Region(sig, [], 0, 0.0, module, *copied((args, kwargs)),
                                              whole=whole and not name)
            region.calls += 1
            if name not in region.names:
                region.names.append(name)
                region.share += flops.get(name, 0) / total
        return record
    handles = [modules[n].register_forward_pre_hook(hook(n), with_kwargs=True) for n in names]
    try:
        step()
    finally:
        for handle in handles:
            handle.remove()
    return list(found.values())


def copied(tree):
    """``tree`` with each tensor replaced by a detached copy (that requires grad when the tensor did)."""
    return torch.utils._pytree.tree_map_only(
        torch.Tensor, lambda t: t.detach().clone().requires_grad_(t.requires_grad), tree)
