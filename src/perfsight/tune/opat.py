"""Operator auto-tuning (OPAT): capture -> candidates -> measure -> bank -> report.

``tune_operators(step, bank=...)`` captures the tunable calls of two real steps (``tune_captured`` takes a
capture made elsewhere, e.g. of a script's own steps), and for each distinct signature times the default
on synthetic inputs of that signature (forward, plus backward for training signatures), then the
candidates that can pay at that time (``candidates.candidates_for``: Format, Impl, Schedule), checks each
against the default, and stores the outcome with all candidates' timings in the bank (``Bank.put``
decides the update mode). The compiled candidate's first call (its compile) is timed apart and recorded;
it may win only if it repays that over the signature's calls per step (from the capture) times
``expected_steps`` (measure.py's repay rule, shared with sgat.py). A signature whose bank entry already
holds a strategy is not re-tuned unless ``repeat`` (the seed's REPEAT_TUNE). With an ``OpatReport``, each
operator is reported as it is done; the caller finishes the report.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import torch

from perfsight.tune.bank import Bank, Entry, RepoSummary, kept_mode, settled
from perfsight.tune.candidates import DEFAULT, Candidate, candidates_for, run, synthetic_call
from perfsight.tune.capture import Capture, capture
from perfsight.tune.measure import EXPECTED_STEPS, Measurement, entry, first_call, measure, outcome, reported_us, sample


@dataclass
class OperatorResult:
    """One tuned signature: its bank key, where the model calls it, the measurement and the update mode."""

    key: str
    op_name: str
    signature: dict
    update_mode: str
    measurement: Measurement | None = None  # None when the bank already held a strategy (not re-tuned)
    error: str = ""
    kept: Entry | None = None  # the bank entry that held that strategy
    in_step: dict | None = None  # its winner's in-step trial (prove.Decision.as_dict), when it had one

    @property
    def where(self) -> str:
        """Where the model calls it, as the stage's ``winners`` name it."""
        return self.op_name

    def row(self) -> dict:
        """This signature as a row of the tuning result (``measure.outcome``)."""
        tensors = self.signature["tensors"].values()
        what = " ".join([self.signature["op"], *("x".join(map(str, t["shape"])) for t in tensors)])
        return outcome(self.op_name, what + (" train" if self.signature["train"] else ""), self.measurement,
                       self.update_mode, kept=self.kept, error=self.error, in_step=self.in_step)


@dataclass
class OpatResult:
    operators: list[OperatorResult] = field(default_factory=list)
    summary: RepoSummary = field(default_factory=RepoSummary)
    static: bool = True
    dynamic: list[dict] = field(default_factory=list)


def _runner(sig: dict, candidate: Candidate, call, grad_out) -> Callable[[], tuple]:
    """A zero-argument call of the op under ``candidate``: outputs, then input gradients when training."""
    func, args, kwargs = call
    needs_grad = [v for v in kwargs.values() if isinstance(v, torch.Tensor) and v.requires_grad]

    def go():
        if not sig["train"]:
            with torch.no_grad():
                return (run(candidate, func, args, kwargs),)
        out = run(candidate, func, args, kwargs)
        return (out, *torch.autograd.grad(out, needs_grad, grad_outputs=grad_out, allow_unused=True))
    return go


def tune_signature(sig: dict, *, calls_per_step: float = 1.0, expected_steps: int = EXPECTED_STEPS,
                   timer: Callable[[], int] | None = None, warmup: int = 3, repeats: int = 15,
                   margin: float = 0.03) -> Measurement | None:
    """Measure the default and the candidates of one signature (None if it has no candidates)."""
    timer = timer or time.perf_counter_ns
    call = synthetic_call(sig)
    with torch.no_grad():
        shape = run(DEFAULT, *call).shape
    grad_out = torch.randn(shape, generator=torch.Generator().manual_seed(1)) if sig["train"] else None
    default = _runner(sig, DEFAULT, call, grad_out)
    calls = calls_per_step * expected_steps
    default_us = sample(default, timer, repeats=3, warmup=max(warmup, 1)).median_us
    runners, compile_s = [], {}
    for c in candidates_for(sig, default_us=default_us, calls=calls):
        runner = _runner(sig, c, call, grad_out)
        if c.params.get("compiled"):
            runner, compile_s[c.name] = first_call(runner, timer)
        runners.append((c.name, c.mode, c.params, runner))
    if not runners:
        return None
    return measure(default, runners, timer=timer, warmup=warmup, repeats=repeats, margin=margin,
                   compile_s=compile_s, calls=calls)


def tune_operators(step: Callable[[], object], *, model: torch.nn.Module | None = None, **tuning) -> OpatResult:
    """Tune every tunable operator signature of two steps of ``step`` (``model`` names them by module path);
    ``tuning`` is ``tune_captured``'s keywords."""
    return tune_captured(capture(step, model=model, steps=2), **tuning)


def tune_one(kind: str, key: str, op_name: str, sig: dict, op_type: str, measured: Callable[[], Measurement | None],
             *, bank: Bank, report, repeat: bool, made: type[OperatorResult] = OperatorResult,
             **conditions) -> OperatorResult | None:
    """One signature of the op (or step) stage, as ``made``: kept from the bank when it holds a strategy
    (unless ``repeat``), else ``measured()`` and stored with the timing ``conditions`` - a failure to tune is
    the bank's kept mode (``kept_mode``) - then reported as ``op_name`` of ``op_type``; None when it had no
    candidate to time."""
    before = bank.get(kind, key)
    kept_as = None if repeat else settled(before)
    if kept_as is not None:
        done = made(key, op_name, sig, kept_as, kept=before)
    else:
        try:
            m = measured()
        except Exception as exc:  # one signature failing to tune does not stop the others
            mode = kept_mode(before)
            if report is not None:
                report.failed(op_name, mode)
            return made(key, op_name, sig, mode, error=f"{type(exc).__name__}: {exc}")
        if m is None:
            return None
        done = made(key, op_name, sig, bank.put(entry(key, kind, sig, m, **conditions), repeat=repeat), m)
    if report is not None:
        m = done.measurement
        # the mode of what runs now: the measured winner's (or the default's), else the kept winner's
        mode = (m.winner or m.default).mode if m is not None else (before.winner_record() or {}).get("mode", "")
        before_us, after_us = reported_us(m, before)
        report.operator(op_name, op_type, mode, before_us=before_us, after_us=after_us, update_mode=done.update_mode)
    return done


def tune_captured(captured: Capture, *, bank: Bank, report=None, timer: Callable[[], int] | None = None,
                  repeat: bool = False, expected_steps: int = EXPECTED_STEPS, warmup: int = 3, repeats: int = 15,
                  margin: float = 0.03) -> OpatResult:
    """Tune every tunable operator signature of ``captured``; ``expected_steps`` is how many steps a
    compiled candidate's compile time must be repaid over."""
    result = OpatResult(static=captured.static, dynamic=captured.dynamic)
    where: dict[str, list[str]] = {}
    signatures: dict[str, dict] = {}
    calls: Counter = Counter()
    for record in captured.tunable:
        key = bank.key("op", record.signature)
        signatures[key] = record.signature
        where.setdefault(key, []).append(record.module or "?")
        calls[key] += record.count / max(captured.steps, 1)
    for key, sig in signatures.items():
        op_name = ",".join(dict.fromkeys(where[key])) + "/" + sig["op"]
        done = tune_one("op", key, op_name, sig, sig["op"], lambda: tune_signature(
            sig, calls_per_step=calls[key], expected_steps=expected_steps, timer=timer, warmup=warmup,
            repeats=repeats, margin=margin), bank=bank, report=report, repeat=repeat,
            expected_steps=expected_steps, calls_per_step=calls[key])
        if done is not None:
            result.operators.append(done)
            result.summary.record(done.update_mode)
    return result
