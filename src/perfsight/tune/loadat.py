"""Data-loader tuning, in the step-settings stage: an input-bound loader -> its worker settings -> blocks of
training steps -> the rule of whole steps -> bank.

``tune_loaders(waited, step, bank=...)`` runs only when the recorded steps waited for their batches for at
least ``capture.INPUT_BOUND_SHARE`` of their time (``waited``: ``capture.InputWait``), on each map-style loader
they drew from (``loaders.tunable``). The loader's own settings are the default, each of
``loaders.candidates`` a candidate (mode ``Schedule``), each run by a copy of the loader
(``loaders.copied``: the user's is not touched). A copy's first batch is its check - the structure of the
default's first batch (shapes and dtypes), and its values too when the loader is deterministic: a sequential
sampler, and a dataset that gives the same first batch twice (one that draws random numbers - augmentation
- gives other ones in a worker, by design) - and its time, worker start-up included, is its one-off cost, to
be repaid over the expected steps (``measure.repays``).

They are timed in steps as the training runs them: draw a batch, run ``step()`` (the replayed or given
training step; a loader's workers load ahead while it runs, which is where they win). Workers also load
ahead while the other copies run, so each copy is timed in blocks: ``drain`` untimed steps use up what it
loaded meanwhile, then ``block`` timed steps; the copies take turns, a block each per round, the first
rotating. A sample is a block's mean step. The fastest valid candidate beyond the noise and margin
(``measure.decide``) is then judged on its paired per-round speed-ups against the default by the rule of whole
steps (tune/rule.py, one look): these are training steps, so that is its proof in the step - the proof the
other stages' winners get from tune/prove.py, which switches winners step by step and so cannot switch a
loader (its workers are set when an epoch starts). The outcome goes into the bank as kind ``step``; a winner
the rule rejected is recorded as such by the caller (``in_step``). Every copy's workers are shut down at the
end.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from perfsight.tune import loaders, rule
from perfsight.tune.bank import Bank
from perfsight.tune.capture import InputWait
from perfsight.tune.measure import (
    EXPECTED_STEPS,
    Measurement,
    Timing,
    decide,
    load_average,
    mismatch,
    repays,
    tensors_in,
)
from perfsight.tune.opat import tune_one
from perfsight.tune.optat import SettingResult
from perfsight.tune.prove import Decision

#: the candidates' mode: how the loading is scheduled, as the seed names such candidates
MODE = "Schedule"
#: timed rounds, steps timed per block, and untimed steps before each block beyond the copy's prefetch depth
ROUNDS, BLOCK, DRAIN = 12, 4, 1


@dataclass
class LoaderResult(SettingResult):
    """One tuned data-loader signature."""

    describe = staticmethod(loaders.describe)


@dataclass
class _Copy:
    """A copy of the loader under one configuration, its batches drawn for ever (epochs restart)."""

    timing: Timing
    loader: torch.utils.data.DataLoader
    iterator: object = None

    def batch(self):
        if self.iterator is None:
            self.iterator = iter(self.loader)
        try:
            return next(self.iterator)
        except StopIteration:
            self.iterator = iter(self.loader)
            return next(self.iterator)

    @property
    def ahead(self) -> int:
        """How many batches its workers may have loaded while others ran."""
        return (self.loader.prefetch_factor or 0) * self.loader.num_workers

    def close(self) -> None:
        shutdown = getattr(self.iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


def _structure(batch) -> list:
    return [(tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else type(t).__name__
            for t in torch.utils._pytree.tree_leaves(batch)]


def _differs(reference, batch, *, values: bool) -> str:
    """Why ``batch`` is not ``reference`` ('' if it is): its structure, then, with ``values``, its tensors'."""
    if _structure(batch) != _structure(reference):
        return f"its batches differ in structure: {_structure(batch)} against {_structure(reference)}"
    return mismatch(tensors_in(reference), tensors_in(batch)) if values else ""


def _deterministic(loader: torch.utils.data.DataLoader, reference) -> bool:
    """Whether ``loader``'s first batch is ``reference`` every time: a sequential sampler, and a dataset that
    draws no random numbers (its first batch loaded again is the same)."""
    index = loader._index_sampler
    if not isinstance(getattr(index, "sampler", index), torch.utils.data.SequentialSampler):
        return False
    again = next(iter(loaders.copied(loader, {**loaders.settings(loader), "num_workers": 0,
                                              "persistent_workers": False, "prefetch_factor": None})))
    return not _differs(reference, again, values=True)


@dataclass
class LoaderTrial:
    """The measurement of one loader and its in-step judgement (``Decision.as_dict``, None without a winner
    alone)."""

    measurement: Measurement
    in_step: dict | None = None


def tune_loader(loader: torch.utils.data.DataLoader, step: Callable[[], object], *, expected_steps: int,
                timer: Callable[[], int] | None = None, rounds: int = ROUNDS, block: int = BLOCK, drain: int = DRAIN,
                margin: float = 0.03) -> LoaderTrial:
    """Time ``loader``'s own settings against each candidate in blocks of ``step()`` runs (module docstring)."""
    timer = timer or time.perf_counter_ns
    load_before = load_average()
    base = _Copy(Timing("default", {}, "default"), loaders.copied(loader, loaders.settings(loader)))
    copies = [_Copy(Timing(name, chosen, MODE), loaders.copied(loader, chosen))
              for name, chosen in loaders.candidates(loader)]
    try:
        reference = base.batch()
        deterministic = _deterministic(loader, reference)
        for copy in copies:
            start = timer()
            try:
                first = copy.batch()
            except Exception as exc:  # a setting this loader cannot run under is simply not valid
                copy.timing.reason = f"{type(exc).__name__}: {exc}"
            else:
                copy.timing.compile_s = (timer() - start) / 1e9
                copy.timing.reason = _differs(reference, first, values=deterministic)
            copy.timing.ok = not copy.timing.reason
        valid = [base] + [c for c in copies if c.timing.ok]
        for index in range(rounds):
            for copy in valid[index % len(valid):] + valid[:index % len(valid)]:
                for _ in range(copy.ahead + drain):
                    copy.batch()
                    step()
                start = timer()
                for _ in range(block):
                    copy.batch()
                    step()
                copy.timing.samples_ns.append((timer() - start) // block)
    finally:
        for copy in [base, *copies]:
            copy.close()
    for copy in copies:
        if copy.timing.compile_s is not None:
            copy.timing.repays = repays(base.timing, copy.timing, expected_steps)
    timings = [copy.timing for copy in copies]
    alone = decide(base.timing, [t for t in timings if t.repays is not False], margin)
    in_step = None
    if alone is not None:
        ratios = [a / b for a, b in zip(base.timing.samples_ns, alone.samples_ns) if b]
        judgement = rule.judge(ratios, 1, looks=(len(ratios),))
        in_step = {**Decision(None, base.timing, alone, judgement).as_dict(), "winner": alone.name}
    measurement = Measurement(base.timing, timings, alone, torch.get_num_threads(), (load_before, load_average()),
                              margin)
    return LoaderTrial(measurement, in_step)


def tune_loaders(waited: InputWait, step: Callable[[], object], *, bank: Bank, report=None,
                 timer: Callable[[], int] | None = None, repeat: bool = False, expected_steps: int = EXPECTED_STEPS,
                 rounds: int = ROUNDS, block: int = BLOCK, margin: float = 0.03) -> list[LoaderResult]:
    """Tune the loaders the recorded steps waited on, when they waited enough (module docstring)."""
    if not waited.as_dict()["input_bound"]:
        return []
    results, seen = [], set()
    for index, loader in enumerate(waited.sources.values()):
        if not loaders.tunable(loader):
            continue
        sig = loaders.signature(loader)
        key = bank.key("step", sig)
        if key in seen:
            continue
        seen.add(key)
        trials: list[LoaderTrial] = []

        def measured(loader=loader) -> Measurement:
            trials.append(tune_loader(loader, step, expected_steps=expected_steps, timer=timer, rounds=rounds,
                                      block=block, margin=margin))
            return trials[-1].measurement
        done = tune_one("step", key, f"data loader {index} ({type(loader.dataset).__name__})", sig, "DataLoader",
                        measured, bank=bank, report=report, repeat=repeat, made=LoaderResult,
                        expected_steps=expected_steps, calls_per_step=1.0)
        if done is not None:
            done.in_step = trials[0].in_step if trials else None
            results.append(done)
    return results
