"""Capturing the operators of one or two real training (or inference) steps.

This module owns what the tuner knows about a model before tuning it:

- every ATen op call, forward and backward, seen by a ``TorchDispatchMode``: op name, input shapes,
  dtypes, strides, layouts and scalar attributes, train or inference, the phase (forward or backward)
  and the module path from forward pre-hooks (``layer1.0.conv1``), deduplicated with counts;
- every call of a tunable torch function, seen where ``apply`` sees it (the patched call points of
  tune/intercept.py, which catch nn.MultiheadAttention's inner calls too, unlike a TorchFunctionMode:
  F.multi_head_attention_forward re-dispatches to the mode, which runs it with the mode off), keyed by
  ``candidates.signature`` - the same function ``apply`` uses, so bank keys match at run time;
- the static-shape check (the seed's precondition): forward ops whose shapes change between steps;
- the optimizers that stepped in the recorded steps (a global step pre-hook), for the step-settings stage;
- how long the recorded steps waited for their batches (``InputWait``: every DataLoader iterator's
  ``__next__`` timed while recording, which catches a script's iterator made before the recording began).

``train_step(model, inputs, loss_fn)`` builds a step from a model and an example batch.
"""
from __future__ import annotations

import json
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter

from perfsight.core.patched import Patched
from perfsight.tune import intercept
from perfsight.tune.candidates import CALLED_THROUGH, signature


@dataclass
class OpRecord:
    """A distinct (signature, module, phase) and how many times the captured steps called it."""

    signature: dict
    module: str
    phase: str
    count: int


#: the share of the recorded steps' time spent waiting for batches from which a run is said to be input-bound
INPUT_BOUND_SHARE = 0.1


@dataclass
class InputWait:
    """How long the recorded steps waited for their batches: ``wait_ns`` in DataLoader iterators' ``__next__``
    over ``span_ns``, the recording from its first step's start to its end (a script draws a step's batch
    between optimizer steps, so the span holds those gaps too); ``loaders``: each loader drawn from (its
    dataset's class and worker count) -> the batches it gave."""

    wait_ns: int = 0
    span_ns: int = 0
    batches: int = 0
    loaders: dict[str, int] = field(default_factory=dict)
    #: the DataLoaders behind those names, where their iterators were made while a ``LoaderWatch`` was on
    sources: dict[str, DataLoader] = field(default_factory=dict, repr=False)

    @property
    def share(self) -> float:
        return self.wait_ns / self.span_ns if self.span_ns else 0.0

    def as_dict(self) -> dict:
        """For the status file and the tuning output: the times in ms, the share and whether it makes the run
        input-bound (``INPUT_BOUND_SHARE``)."""
        return {"wait_ms": round(self.wait_ns / 1e6, 3), "span_ms": round(self.span_ns / 1e6, 3),
                "share": round(self.share, 4), "input_bound": self.share >= INPUT_BOUND_SHARE,
                "batches": self.batches, "loaders": dict(self.loaders)}


_LOADER_OF: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # DataLoader iterator -> its loader


class LoaderWatch(Patched):
    """Until ``remove()``, every DataLoader iterator made is mapped to its loader, so that the loader a step
    waited on can be tuned: a script makes its epoch's iterator before its first step."""

    def __init__(self):
        def wrap(original):
            def iterate(loader):
                iterator = original(loader)
                if self.active:
                    _LOADER_OF[iterator] = loader
                return iterator
            return iterate
        super().__init__(DataLoader, "__iter__", wrap)


class _TimedBatches(Patched):
    """Every DataLoader iterator's ``__next__`` timed into ``waits`` while ``counting()``, until ``remove()``."""

    def __init__(self, waits: InputWait, counting: Callable[[], bool]):
        super().__init__(_BaseDataLoaderIter, "__next__", lambda original: self._timed(original, waits, counting))

    def _timed(self, original: Callable, waits: InputWait, counting: Callable[[], bool]) -> Callable:
        def timed(iterator):
            if not (self.active and counting()):
                return original(iterator)
            start = time.perf_counter_ns()
            batch = original(iterator)     # the end of an epoch (StopIteration) is not a batch
            waits.wait_ns += time.perf_counter_ns() - start
            waits.batches += 1
            name = f"{type(iterator._dataset).__name__}, num_workers={iterator._num_workers}"
            waits.loaders[name] = waits.loaders.get(name, 0) + 1
            loader = _LOADER_OF.get(iterator)
            if loader is not None:
                waits.sources.setdefault(name, loader)
            return batch
        return timed


@dataclass
class Capture:
    """What ``capture`` saw: ``aten`` ops, ``tunable`` function calls, shape changes between steps, the
    optimizers that stepped (in the order they first did), and the wait for batches."""

    aten: list[OpRecord] = field(default_factory=list)
    tunable: list[OpRecord] = field(default_factory=list)
    dynamic: list[dict] = field(default_factory=list)  # {module, op, index, shapes: one per step}
    steps: int = 0
    optimizers: list[torch.optim.Optimizer] = field(default_factory=list)
    input_wait: InputWait = field(default_factory=InputWait)

    @property
    def static(self) -> bool:
        return not self.dynamic


def _describe(value):
    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."),
                "stride": list(value.stride()) if value.layout == torch.strided else None}
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _aten_signature(func, args, kwargs) -> dict:
    tensors = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
    train = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    return {"op": str(func.overloadpacket.__name__) + "." + func._overloadname,
            "args": _describe(list(args)), "kwargs": {k: _describe(v) for k, v in (kwargs or {}).items()},
            "train": train}


class _Recorder:
    """Counts records; with ``shapes`` given, keeps each step's shape sequence for the static-shape check."""

    def __init__(self, modules: list[str]):
        self.modules = modules
        self.counts: Counter = Counter()
        self.signatures: dict[str, dict] = {}
        self.shapes: list[dict] = []  # per step: (module, phase, op, ordinal) -> shapes
        self.ordinals: list[Counter] = []

    def next_step(self) -> None:
        self.shapes.append({})
        self.ordinals.append(Counter())

    def add(self, sig: dict, phase: str, shapes=None) -> None:
        module = self.modules[-1] if self.modules else ""
        text = json.dumps(sig, sort_keys=True, default=str)
        self.signatures[text] = sig
        self.counts[(text, module, phase)] += 1
        if shapes is not None:
            where = (module, phase, sig["op"])
            self.shapes[-1][(*where, self.ordinals[-1][where])] = shapes
            self.ordinals[-1][where] += 1

    def records(self) -> list[OpRecord]:
        return [OpRecord(self.signatures[text], module, phase, n)
                for (text, module, phase), n in self.counts.items()]


class _AtenMode(TorchDispatchMode):
    def __init__(self, recorder: _Recorder):
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        sig = _aten_signature(func, args, kwargs)
        phase = "backward" if torch._C._current_autograd_node() is not None else "forward"
        shapes = [a["shape"] for a in sig["args"] if isinstance(a, dict)]
        self.recorder.add(sig, phase, shapes)
        return func(*args, **(kwargs or {}))


class _TunableMode:
    """Records every tunable call (an intercept mode that never chooses a winner)."""

    ops = frozenset(CALLED_THROUGH)

    def __init__(self, recorder: _Recorder):
        self.recorder = recorder

    def choose(self, func, args, kwargs) -> None:
        sig = signature(func, args, kwargs)
        if sig is not None:
            self.recorder.add(sig, "forward")

    def __enter__(self) -> None:
        intercept.enter(self)

    def __exit__(self, *_exc) -> None:
        intercept.leave(self)


def _hooks(model: torch.nn.Module | None, stack: list[str]):
    if model is None:
        return []
    handles = []
    for name, module in model.named_modules():
        def push(_m, _inputs, name=name or type(model).__name__):
            stack.append(name)

        def pop(_m, _inputs, _output):
            if stack:
                stack.pop()
        handles.append(module.register_forward_pre_hook(push))
        handles.append(module.register_forward_hook(pop, always_call=True))
    return handles


class Recording:
    """Recording over steps the caller delimits: ``begin_step()`` ... ``end_step()``, then ``finish()``.

    ``capture`` wraps a step function in it; ``perfsight tune -- python train.py`` (tune/autostart.py)
    delimits a script's own steps with it. ``name_modules(model)`` names the calls by module path."""

    def __init__(self, model: torch.nn.Module | None = None):
        self.modules: list[str] = []
        self.aten, self.tunable = _Recorder(self.modules), _Recorder(self.modules)
        self._handles = _hooks(model, self.modules)
        self._modes: tuple | None = None
        self.steps = 0
        self.optimizers: list[torch.optim.Optimizer] = []
        self.input_wait = InputWait()
        self._began: int | None = None   # perf_counter_ns at the first step's start
        self._handles += [register_optimizer_step_pre_hook(self._stepping), LoaderWatch(),
                          _TimedBatches(self.input_wait, lambda: self._began is not None)]

    def _stepping(self, optimizer: torch.optim.Optimizer, _args, _kwargs) -> None:
        if self._modes is not None and not any(optimizer is seen for seen in self.optimizers):
            self.optimizers.append(optimizer)

    def name_modules(self, model: torch.nn.Module) -> None:
        self._handles += _hooks(model, self.modules)

    def begin_step(self) -> None:
        if self._began is None:
            self._began = time.perf_counter_ns()
        self.aten.next_step()
        self._modes = (_TunableMode(self.tunable), _AtenMode(self.aten))
        for mode in self._modes:
            mode.__enter__()

    def end_step(self) -> None:
        self._leave()
        self.steps += 1

    def _leave(self) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(None, None, None)
        self._modes = None

    def finish(self) -> Capture:
        """Remove the module hooks and return the finished steps' records (an unfinished step is dropped
        from the shape check, though its calls stay counted)."""
        if self._modes is not None:
            self._leave()
        if self._began is not None:
            self.input_wait.span_ns = time.perf_counter_ns() - self._began
        for handle in self._handles:
            handle.remove()
        self._handles = []
        return Capture(self.aten.records(), self.tunable.records(), self._dynamic(), self.steps, self.optimizers,
                       self.input_wait)

    def _dynamic(self) -> list[dict]:
        """Forward ops present in every step whose shapes change (the backward follows the forward; the
        first step's gradient copies and later steps' accumulations are not shape changes). When modules
        are named, only ops inside the model's forward count: the optimizer's first step creates its state
        (momentum, Adam moments) outside the model, which is not a shape change of the model."""
        every = self.aten.shapes[:self.steps]
        if len(every) < 2:
            return []
        common = set.intersection(*(set(s) for s in every))
        inside = any(module for module, *_ in common)
        dynamic = []
        for key in sorted(common, key=str):
            shapes = [s[key] for s in every]
            if inside and not key[0]:
                continue
            if key[1] == "forward" and any(other != shapes[0] for other in shapes[1:]):
                module, phase, op, index = key
                dynamic.append({"module": module, "phase": phase, "op": op, "index": index, "shapes": shapes})
        return dynamic


def capture(step: Callable[[], object], *, model: torch.nn.Module | None = None, steps: int = 2) -> Capture:
    """Run ``step`` ``steps`` times (at least 1; 2 or more check static shapes), recording every ATen op
    and every tunable call."""
    if steps < 1:
        raise ValueError("capture runs at least 1 step")
    recording = Recording(model)
    try:
        for _ in range(steps):
            recording.begin_step()
            try:
                step()
            finally:
                recording.end_step()
    finally:
        captured = recording.finish()
    return captured


def train_step(model: torch.nn.Module, inputs, loss_fn: Callable | None = None) -> Callable[[], None]:
    """A step: forward ``model(*inputs)``, a loss (``loss_fn(output)`` or the output's mean), backward."""
    batch = inputs if isinstance(inputs, (tuple, list)) else (inputs,)

    def step():
        output = model(*batch)
        loss = loss_fn(output) if loss_fn is not None else output.float().mean()
        loss.backward()
    return step
