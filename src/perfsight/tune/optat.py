"""Optimizer tuning, the step-settings stage: the optimizers a training step ran -> their implementations ->
measure -> bank.

``tune_optimizers(optimizers, bank=...)`` tunes each distinct optimizer signature (``optimizers.signature``)
once. It copies the optimizer once per implementation its class takes (``optimizers.implementations``): the
same class, groups and state over copies of its parameters and gradients, so the user's optimizer, weights
and state are never touched (synthetic gradients, seeded, when no parameter holds one). The copy running
what the optimizer runs now is the default, each other implementation a candidate (mode ``Impl``, params
``{"implementation": name}``). Each copy's first step, from the same state, is the check (``measure``'s):
the parameters' updates must agree within the dtype's tolerance - the updates, since the parameters dwarf
one step's change of them. Then their steps are timed interleaved and decided by ``measure``'s rules; an
implementation has no one-off cost to repay. The outcome goes into the bank as kind ``step``, one step per
training step; a signature whose entry holds a strategy is not re-tuned unless ``repeat`` (REPEAT_TUNE).
With a ``StepReport``, each optimizer is reported as it is done; the caller finishes the report.

Copies take memory: ``copies_bytes`` is the most the stage holds at once, for the free-memory precondition
(tune/session.py).
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Callable, ClassVar

import torch
from torch.optim.optimizer import Optimizer

from perfsight.tune import optimizers as impl
from perfsight.tune.bank import Bank, RepoSummary
from perfsight.tune.measure import EXPECTED_STEPS, Measurement, measure, outcome
from perfsight.tune.opat import OperatorResult, tune_one

#: the candidates' mode, as the seed names the kinds of operator candidates (Format, Impl, Schedule)
MODE = "Impl"


@dataclass
class SettingResult(OperatorResult):
    """One tuned step setting, kept as an operator's (``op_name`` names the optimizer or loader); ``describe``
    says in words what its signature is."""

    describe: ClassVar[Callable[[dict], str]]

    def row(self) -> dict:
        """This setting as a row of the tuning result (``measure.outcome``)."""
        return outcome(self.op_name, self.describe(self.signature), self.measurement, self.update_mode,
                       kept=self.kept, error=self.error, in_step=self.in_step)


@dataclass
class OptimizerResult(SettingResult):
    """One tuned optimizer signature."""

    describe = staticmethod(impl.describe)


@dataclass
class OptatResult:
    """The step-settings stage's outcome: each optimizer's, each data loader's (tune/loadat.py) and this GPU's
    TunableOp setting (tune/tunableop.py)."""

    optimizers: list[OptimizerResult] = field(default_factory=list)
    loaders: list[SettingResult] = field(default_factory=list)
    gemms: list[SettingResult] = field(default_factory=list)
    summary: RepoSummary = field(default_factory=RepoSummary)

    @property
    def settings(self) -> list[SettingResult]:
        """Every step setting tuned: the optimizers, the loaders, then TunableOp."""
        return [*self.optimizers, *self.loaders, *self.gemms]


def _tensors_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def _held_bytes(optimizer: Optimizer) -> tuple[int, int]:
    """The bytes of ``optimizer``'s parameters, and of its state."""
    params = impl.parameters(optimizer)
    return _tensors_bytes(params), _tensors_bytes(v for p in params for v in optimizer.state.get(p, {}).values())


def copies_bytes(optimizers: list[Optimizer]) -> int:
    """What the step stage holds at most: tuning one optimizer holds a copy of its parameters, gradients and
    state per implementation, and its parameters once more (the start the updates are taken from); a proof on
    a script's replay holds a copy of every optimizer's parameters and state (``sgat.preserved``)."""
    held = [(_held_bytes(o), len(impl.implementations(o))) for o in optimizers]
    tuning = max(((2 * params + state) * n + params for (params, state), n in held), default=0)
    return tuning + sum(params + state for (params, state), _ in held)


def _gradient(param: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return (torch.randn(param.shape, generator=generator) * 1e-3).to(param.device, param.dtype)


def _copy(optimizer: Optimizer, runs: str | list[dict], synthetic: bool) -> Optimizer:
    """``optimizer`` over copies of its parameters and gradients, with a copy of its state, running ``runs``."""
    generator = torch.Generator().manual_seed(1)
    copies = {}
    for param in impl.parameters(optimizer):
        clone = param.detach().clone()
        grad = _gradient(param, generator) if synthetic else param.grad
        clone.grad = None if grad is None else grad.detach().clone()
        copies[param] = clone
    groups = [{**{k: v for k, v in group.items() if k != "params"}, "params": [copies[p] for p in group["params"]]}
              for group in optimizer.param_groups]
    made = type(optimizer)(groups)
    made.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    impl.switch(made, runs)
    return made


def _runner(optimizer: Optimizer) -> Callable[[], tuple]:
    params = tuple(impl.parameters(optimizer))

    def go() -> tuple:
        optimizer.step()
        return params
    return go


def tune_optimizer(optimizer: Optimizer, *, timer: Callable[[], int] | None = None, warmup: int = 3,
                   repeats: int = 15, margin: float = 0.03) -> Measurement | None:
    """Measure the implementation ``optimizer`` runs now against the others its class takes (None when it
    takes no other)."""
    default = impl.implementation(optimizer)
    others = [name for name in impl.implementations(optimizer) if name != default]
    if not others:
        return None
    params = impl.parameters(optimizer)
    synthetic = all(p.grad is None for p in params)
    start = [p.detach().clone() for p in params]

    def updates(result: tuple) -> tuple:
        return tuple(after - before for after, before in zip(result, start))

    base = _runner(_copy(optimizer, impl.flags(optimizer), synthetic))
    candidates = [(name, MODE, {"implementation": name}, _runner(_copy(optimizer, name, synthetic)))
                  for name in others]
    return measure(base, candidates, timer=timer or time.perf_counter_ns, warmup=warmup, repeats=repeats,
                   margin=margin, compared=updates)


def tune_optimizers(optimizers: list[Optimizer], *, bank: Bank, report=None, timer: Callable[[], int] | None = None,
                    repeat: bool = False, expected_steps: int = EXPECTED_STEPS, warmup: int = 3, repeats: int = 15,
                    margin: float = 0.03) -> OptatResult:
    """Tune the implementation of each of ``optimizers`` (module docstring) into ``bank``."""
    result = OptatResult()
    seen = set()
    for index, optimizer in enumerate(optimizers):
        sig = impl.signature(optimizer)
        key = bank.key("step", sig)
        if key in seen:
            continue
        seen.add(key)
        done = tune_one("step", key, f"optimizer {index} ({type(optimizer).__name__})", sig, type(optimizer).__name__,
                        lambda: tune_optimizer(optimizer, timer=timer, warmup=warmup, repeats=repeats, margin=margin),
                        bank=bank, report=report, repeat=repeat, made=OptimizerResult, expected_steps=expected_steps,
                        calls_per_step=1.0)
        if done is not None:      # None: its class runs one implementation, nothing to tune
            result.optimizers.append(done)
            result.summary.record(done.update_mode)
    return result
