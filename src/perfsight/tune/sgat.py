"""Subgraph auto-tuning (SGAT): regions -> eager vs torch.compile and thread-count variants -> measure -> repay
rule -> bank.

``tune_subgraphs(model, step_or_batch, bank=...)`` finds the regions (tune/regions.py) and, for each
distinct region signature, times on the region's real inputs (copied from one step). The model itself comes
first, as a region around the others (``regions.find_regions(whole=True)``; the seed's order: the whole
model, then its regions, then operators): it gets every variant below. When its winner is compiled, the
regions inside it are not tuned (its compiled code runs their work; the operator stage skips them too).
A variant is:

- eager at every usable core, when torch runs another number of threads (the Schedule mode for a whole
  region: one switch on entering it, forward and backward; variants.py). When the model itself is tried at
  that count, one switch serves all of its forward and backward (CPU), and the regions inside it are not
  tried at it (inside the model at it, theirs would change nothing);
- eager with channels_last inputs (regions with 4-D inputs);
- ``torch.compile`` in each mode this PyTorch has among default, max-autotune-no-cudagraphs and lite
  (reduce-overhead too on a GPU), with the inputs as given and, for 4-D inputs, channels_last;
- for inference regions (called without grad), the default mode with inductor freezing, set through
  ``torch._inductor.config.patch(freezing=True)`` around the first, compiling call (``options=`` ignores
  it in 2.13; patching every call would cost ~18 us each). Frozen code has the weights as constants: it
  is only tried and applied for calls without grad, and a later weight update is not seen by it.

Every compiled candidate compiles its own code object (instances of one class otherwise share compiled
code), with inductor's ``fallback_random`` (``compile_call``): its random numbers (dropout) are drawn as
eager draws them, so that from one random-number state it reproduces eager and passes the check (its own
RNG would give other masks, and training regions with dropout could never be compiled). Its first call
- the compile, forward and backward in training - is timed as its compile time. measure.py then times
eager and the candidates serially, interleaved, and checks each against eager (outputs, and input and
parameter gradients in training, the gradients on the scale of the largest: ``measure.mismatch``). Only
candidates that repay their compile time may win (measure.py's repay rule, which operator tuning shares),
and ``measure.decide`` picks among them:

    (eager_ms - candidate_ms) * calls_per_step * expected_steps > compile_ms

where calls_per_step counts the calls of that signature in one step (repeated blocks share compiled code).
Every candidate's timing, compile time and verdict go to the bank (kind "subgraph"); an ``SgatReport``
gets each region and the whole step timed before tuning and after, with the winners applied
(``apply.apply_subgraphs``). The model is left as it was found: buffers (BatchNorm statistics) and
gradients are restored and nothing stays compiled (a ``step`` that runs an optimizer still moves weights).
"""
from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import torch

from perfsight.tune.apply import apply_subgraphs
from perfsight.tune.bank import Bank, Entry, RepoSummary, kept_mode, settled
from perfsight.tune.capture import train_step
from perfsight.tune.measure import (
    EXPECTED_STEPS,
    Measurement,
    entry,
    first_call,
    measure,
    outcome,
    reported_us,
    sample,
    tensors_in,
)
from perfsight.tune.optimizers import parameters
from perfsight.tune.regions import Region, find_regions
from perfsight.tune.settings import schedule_threads
from perfsight.tune.variants import region_runner, tensor_specs, variant_call, variants


def _differentiated(region: Region) -> list[torch.Tensor]:
    """What a training call of the region is differentiated with respect to: its inputs needing a gradient,
    then its parameters."""
    return [t for t in tensors_in((region.args, region.kwargs)) if t.requires_grad] + [
        p for p in region.module.parameters() if p.requires_grad]


def _runner(call: Callable, region: Region, grad_outs: list | None) -> Callable[[], tuple]:
    """One call of the region: its outputs, then the input and parameter gradients when training."""
    args, kwargs = region.args, region.kwargs
    wrt = _differentiated(region)

    def go():
        if grad_outs is None:
            with torch.no_grad():
                return tuple(tensors_in(call(*args, **kwargs)))
        outs = tensors_in(call(*args, **kwargs))
        pairs = [(o, g) for o, g in zip(outs, grad_outs) if o.requires_grad]
        grads = torch.autograd.grad([o for o, _ in pairs], wrt, grad_outputs=[g for _, g in pairs],
                                    allow_unused=True)
        return (*outs, *grads)
    return go


@dataclass
class SubgraphResult:
    """One tuned region signature: bank key, instances, update mode, measurement and compile times (s)."""

    key: str
    names: list[str]
    signature: dict
    update_mode: str
    measurement: Measurement | None = None  # None when the bank already held a strategy (not re-tuned)
    compile_s: dict[str, float] = field(default_factory=dict)
    repays: dict[str, bool] = field(default_factory=dict)
    error: str = ""
    kept: Entry | None = None  # the bank entry that held that strategy
    in_step: dict | None = None  # its winner's in-step trial (prove.Decision.as_dict), when it had one

    @property
    def where(self) -> str:
        """Its regions' module paths, as the stage's ``winners`` name them."""
        return ",".join(self.names)

    def row(self) -> dict:
        """This region signature as a row of the tuning result (``measure.outcome``)."""
        sig = self.signature
        shapes = ("x".join(map(str, spec["shape"])) for spec in tensor_specs([sig["inputs"], sig["kwargs"]]))
        what = " ".join([sig["region"].rsplit(".", 1)[-1], *shapes]) + (" train" if sig["train"] else "")
        where = ",".join(name or "(the model)" for name in self.names)
        return outcome(where, what, self.measurement, self.update_mode, kept=self.kept, error=self.error,
                       in_step=self.in_step)


@dataclass
class SgatResult:
    subgraphs: list[SubgraphResult] = field(default_factory=list)
    summary: RepoSummary = field(default_factory=RepoSummary)
    baseline_ms: float = 0.0
    result_ms: float = 0.0


def tune_region(region: Region, *, expected_steps: int, modes: list[str] | None = None, schedule: bool = True,
                compiler: Callable = variant_call, timer: Callable[[], int] = time.perf_counter_ns,
                warmup: int = 3, repeats: int = 15, margin: float = 0.03) -> SubgraphResult:
    """Measure eager and every variant of one region; the winner must repay its compile time."""
    sig = region.signature
    eager = _runner(region.module, region, None)
    grad_outs = None
    if sig["train"]:
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            grad_outs = [torch.randn(o.shape, generator=generator).to(o) for o in eager()]
        eager = _runner(region.module, region, grad_outs)
    result = SubgraphResult("", region.names, sig, "")
    candidates = []
    for variant in variants(sig, modes, schedule):
        runner, seconds = first_call(_runner(region_runner(compiler, region.module, variant, region.module), region,
                                             grad_outs), timer)
        result.compile_s[variant.name] = seconds if variant.compile else 0.0
        candidates.append((variant.name, variant.mode, variant.params, runner))
    m = measure(eager, candidates, timer=timer, warmup=warmup, repeats=repeats, margin=margin,
                compile_s=result.compile_s, calls=region.calls * expected_steps,
                gradients=len(_differentiated(region)) if grad_outs is not None else 0)
    result.repays = {t.name: t.repays for t in m.candidates}
    result.measurement = m
    return result


def _compiled(entry: Entry | None) -> bool:
    """Whether a bank entry's winner is compiled."""
    return bool(entry.winner_params().get("compile")) if entry else False


def _step_ms(step: Callable[[], object], timer: Callable[[], int], warmup: int, repeats: int) -> float:
    return sample(step, timer, repeats, warmup, name="step").median_us / 1e3


@contextmanager
def preserved(model: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer] = ()):
    """The model's buffers and gradients restored on leaving (weights an optimizer in the step moved stay moved),
    and the parameters and state of ``optimizers`` too: a copy of each is held meanwhile."""
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    grads = [(p, None if p.grad is None else p.grad.detach().clone()) for p in model.parameters()]
    weights = [(p, p.detach().clone()) for optimizer in optimizers for p in parameters(optimizer)]
    states = [(optimizer, copy.deepcopy(optimizer.state_dict())) for optimizer in optimizers]
    try:
        yield
    finally:
        with torch.no_grad():
            for tensor, saved in buffers + weights:
                tensor.copy_(saved)
        for optimizer, state in states:
            optimizer.load_state_dict(state)
        for param, grad in grads:
            param.grad = grad


def as_step(model: torch.nn.Module, step_or_batch) -> Callable[[], object]:
    """``step_or_batch`` if it is a step function; else a step on that batch: a training step (forward,
    mean loss, backward) when the model is in training mode, a forward without grad otherwise."""
    if callable(step_or_batch) and not isinstance(step_or_batch, torch.Tensor):
        return step_or_batch
    if model.training:
        return train_step(model, step_or_batch)
    batch = step_or_batch if isinstance(step_or_batch, (tuple, list)) else (step_or_batch,)

    def infer():
        with torch.no_grad():
            return model(*batch)
    return infer


def tune_subgraphs(model: torch.nn.Module, step_or_batch, *, bank: Bank, report=None,
                   timer: Callable[[], int] | None = None, repeat: bool = False, expected_steps: int = EXPECTED_STEPS,
                   modes: list[str] | None = None, schedule: bool = True, whole: bool = True,
                   compiler: Callable = variant_call, min_share: float = 0.05, max_share: float = 0.5,
                   warmup: int = 3, repeats: int = 15, margin: float = 0.03) -> SgatResult:
    """Tune every region of ``model`` (see the module docstring); ``expected_steps`` is how many steps the
    compile time must be repaid over; ``modes`` limits the compile modes (default: all available);
    ``schedule`` whether regions may also be tried at another thread count (``variants.variants``);
    ``whole`` whether the model itself is tuned first, as a region around the others;
    ``compiler(fn, variant)`` builds a variant's call (``variant_call``; tests pass a fake)."""
    timer = timer or time.perf_counter_ns
    step = as_step(model, step_or_batch)
    result = SgatResult()
    measuring = {"timer": timer, "warmup": warmup, "repeats": repeats, "margin": margin}
    with preserved(model):
        result.baseline_ms = result.result_ms = _step_ms(step, timer, warmup, repeats)
        regions = sorted(find_regions(model, step, min_share=min_share, max_share=max_share, whole=whole),
                         key=lambda region: not region.whole)             # the model itself first
        whole_threads = schedule and schedule_threads() is not None and any(r.whole for r in regions)
        for region in regions:
            key = bank.key("subgraph", region.signature)
            before = bank.get("subgraph", key)
            kept_as = None if repeat else settled(before)
            if kept_as is not None:
                done = SubgraphResult(key, region.names, region.signature, kept_as, kept=before)
            else:
                try:
                    done = tune_region(region, expected_steps=expected_steps, modes=modes,
                                       schedule=schedule and (region.whole or not whole_threads), compiler=compiler,
                                       **measuring)
                except Exception as exc:  # one region failing to tune does not stop the others
                    mode = kept_mode(before)
                    result.subgraphs.append(SubgraphResult(key, region.names, region.signature, mode,
                                                           error=f"{type(exc).__name__}: {exc}"))
                    result.summary.record(mode)
                    if report is not None:
                        report.failed(mode)
                    continue
                done.key = key
                done.update_mode = bank.put(entry(key, "subgraph", region.signature, done.measurement,
                                                  expected_steps=expected_steps, calls_per_step=region.calls),
                                            repeat=repeat)
            result.subgraphs.append(done)
            result.summary.record(done.update_mode)
            if report is not None:
                before_us, after_us = reported_us(done.measurement, before)
                report.subgraph(key, before_ms=before_us / 1e3, after_ms=after_us / 1e3,
                                update_mode=done.update_mode)
            if region.whole and _compiled(bank.get("subgraph", key)):
                break                      # the model itself won compiled: its code runs every region's work
        applied = apply_subgraphs(model, bank, compiler=compiler)
        try:
            if applied.installed:
                result.result_ms = _step_ms(step, timer, max(warmup, 1), repeats)
        finally:
            applied.remove()
    if report is not None:
        report.model(result.baseline_ms, result.result_ms)
    return result
