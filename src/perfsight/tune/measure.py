"""Timing candidates against the default, checking them, and deciding a winner.

This module owns the measuring rules of the tuner:

- candidates are timed serially and interleaved (A,B,C,A,B,C, never concurrently), after a warm-up,
  with an injectable ``timer`` (nanoseconds) so tests use a deterministic fake clock;
- each is summarised by its median, its spread (p10-p90) and a noise estimate (half the interquartile
  range), with the thread count and the machine load recorded beside them;
- a candidate must reproduce the default's results (outputs, and gradients for training signatures)
  within the dtype's tolerance, else it is rejected with the reason. The default and each candidate are
  checked from one random-number state (``from_one_random_state``), so that calls with dropout draw the
  same masks and can be compared;
- ``decide``: the fastest valid candidate wins only if it beats the default by more than the noise plus
  a minimum margin (3% by default); otherwise there is no winner. The noise (``noise_between``) is half
  the interquartile range of the per-round differences, since the two were timed in the same rounds: a
  busy moment of a shared machine slows both sides of a round and cancels out, while independent jitter
  of either side still counts. ``measure`` decides sequentially: when after ``repeats`` rounds no
  candidate wins but the fastest is ahead of the default by the margin at the median (undecided: the
  noise hides what may be a real gain, as on a busy machine), it times ``repeats`` more rounds, up to
  ``UNDECIDED_ROUNDS`` times as many in all, and decides on all of them. Each further look is one more
  chance for a lucky pass: a winner here is only proposed, and the training step decides (tune/prove.py,
  by the rule of tune/rule.py, its looks planned in advance);
- the repay rule, for candidates with a one-off cost (a compile, timed as their first call by
  ``first_call`` and kept out of the samples): such a candidate may win only if what it saves over the
  calls it will serve (calls per step x expected steps) exceeds that cost::

      (default_us - candidate_us) * calls > compile_s

- ``entry``: a measurement as a bank entry (every candidate's record, the default's holding the timing
  conditions); ``Measurement.why`` says in words why a candidate won or none did, and ``outcome`` makes
  one signature's row of the tuning result (``perfsight tune``'s table).

A "runner" is a zero-argument callable returning the tensors to compare (outputs then gradients); the
same call is what gets timed, so a training runner times forward + backward.
"""
from __future__ import annotations

import os
import re
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from perfsight.tune.bank import Entry

# rtol per dtype; atol is rtol times the reference's largest magnitude (sums reorder across impls)
_RTOL = {torch.float64: 1e-7, torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-3}
EXPECTED_STEPS = 10_000  # the steps a one-off cost is repaid over unless the caller says
#: an undecided measurement is timed on, up to this many times its ``repeats`` rounds (``measure``)
UNDECIDED_ROUNDS = 3
#: the decisions on a winner tried in the training step (tune/prove.py)
KEPT, REJECTED = "kept", "rejected"
_RAISED = re.compile(r"[A-Za-z_]\w*: ")  # a rejection reason that is an exception (failure_reason), not a mismatch


@dataclass
class Timing:
    """One candidate's measured result (times in microseconds)."""

    name: str
    params: dict
    mode: str
    samples_ns: list[int] = field(default_factory=list)
    ok: bool = True
    reason: str = ""
    compile_s: float | None = None  # a one-off cost (its first call), for candidates that have one
    repays: bool | None = None      # whether it repays compile_s (the repay rule), for those candidates

    @property
    def median_us(self) -> float:
        return quantile(self.samples_ns, 0.5) / 1e3

    @property
    def spread_us(self) -> float:
        return (quantile(self.samples_ns, 0.9) - quantile(self.samples_ns, 0.1)) / 1e3

    @property
    def noise_us(self) -> float:
        return (quantile(self.samples_ns, 0.75) - quantile(self.samples_ns, 0.25)) / 2e3

    def as_dict(self) -> dict:
        """The bank's candidate record (compile_s and repays for a candidate with a one-off cost)."""
        timed = bool(self.samples_ns)
        record = {"name": self.name, "params": self.params, "mode": self.mode,
                  "median_us": round(self.median_us, 3) if timed else None,
                  "spread_us": round(self.spread_us, 3) if timed else None,
                  "samples": len(self.samples_ns), "ok": self.ok, "reason": self.reason}
        if self.compile_s is not None:
            record.update(compile_s=round(self.compile_s, 3), repays=self.repays)
        return record


@dataclass
class Measurement:
    """The default and every candidate of one op, the verdict, and the conditions it was timed in."""

    default: Timing
    candidates: list[Timing]
    winner: Timing | None
    threads: int
    load: tuple[float, float]  # 1-minute load average before and after
    margin: float              # the minimum margin it was decided with

    @property
    def best(self) -> Timing | None:
        """The fastest valid, timed candidate (the winner when there is one), None when none is valid."""
        valid = [t for t in self.candidates if t.ok and t.samples_ns]
        return min(valid, key=lambda t: t.median_us) if valid else None

    def why(self) -> str:
        """Why the winner won, or why no candidate did, in words: the decision and repay rules, and which
        candidates were rejected by the check."""
        def faster(t: Timing) -> float:
            return 1 - t.median_us / self.default.median_us if self.default.median_us else 0.0

        def beyond(t: Timing) -> str:
            return f"the noise ({noise_between(self.default, t):.1f} us) + {self.margin:.0%}"

        best, fastest = self.winner, self.best
        if best is not None:
            text = f"won: {faster(best):.1%} faster, beyond {beyond(best)}"
            text += f"; repays its {best.compile_s:.1f} s compile" if best.compile_s else ""
        elif fastest is None:
            text = "no candidate passed the check" if self.candidates else "no candidate to try"
        else:
            eligible = [t for t in self.candidates if t.ok and t.samples_ns and t.repays is not False]
            best = min(eligible, key=lambda t: t.median_us) if eligible else None
            if best is None and faster(fastest) <= 0:   # none repays: they are slower
                text = f"no candidate beat the default ({fastest.name} {abs(faster(fastest)):.1%} slower)"
            elif best is None:
                text = "no candidate beat the default"
            elif faster(best) <= 0:
                text = f"no candidate beat the default ({best.name} {abs(faster(best)):.1%} slower)"
            else:
                text = f"no candidate beat the default beyond {beyond(best)}: {best.name} {faster(best):.1%} faster"
            if fastest.repays is False and faster(fastest) > 0:  # only a candidate with a compile_s repays or not
                text += (f"; {fastest.name} {faster(fastest):.1%} faster but its {fastest.compile_s:.1f} s compile "
                         "is not repaid over the expected steps")
        rejected = {}
        for t in self.candidates:
            if not t.ok:
                problem = "cannot run" if _RAISED.match(t.reason) else "result differs"
                rejected.setdefault(problem, []).append(t.name)
        if rejected:
            text += "; rejected: " + ", ".join(f"{', '.join(names)} ({problem})" for problem, names in rejected.items())
        return text

    @property
    def improvement(self) -> float:
        """Time saved by the winner as a fraction of the default's (0 without a winner)."""
        if self.winner is None or not self.default.median_us:
            return 0.0
        return 1 - self.winner.median_us / self.default.median_us


def outcome(where: str, what: str, m: Measurement | None, update_mode: str, *, kept: Entry | None = None,
            error: str = "", in_step: dict | None = None) -> dict:
    """One tuned signature as a row of the tuning result (plain JSON): ``where`` it is called (op_name or
    region paths), ``what`` it is (op and shapes), the default's and the best candidate's median times
    (us), the best candidate, the winner the bank holds (or None), the update mode, why, and ``in_step``,
    its winner's trial in the training step (``prove.Decision.as_dict``; a winner it rejected is no
    winner). ``kept``: the bank entry a signature was not re-tuned over (REPEAT_TUNE off: its winner, or
    the winner the training step rejected); ``error``: why its tuning failed."""
    row = {"where": where, "what": what, "update_mode": update_mode, "default_us": None, "best_us": None,
           "best": None, "winner": None, "in_step": in_step}
    if error:
        return {**row, "why": f"tuning failed: {error}"}
    if m is not None:
        best = m.best
        winner = m.winner.name if m.winner and (in_step is None or in_step["decision"] == KEPT) else None
        return {**row, "default_us": round(m.default.median_us, 3), "winner": winner,
                "best_us": round(best.median_us, 3) if best else None, "best": best.name if best else None,
                "why": m.why()}
    if kept.rejected:
        trial = kept.rejected.get("in_step") or {}
        without, with_ = ((trial.get(k) or 0) / 1e3 for k in ("step_without_us", "step_with_us"))
        return {**row, "default_us": kept.default_us, "best_us": kept.rejected.get("winner_us"),
                "best": kept.rejected.get("winner"), "winner": None,
                "why": f"kept out: its winner {kept.rejected.get('winner')} lost in the training step "
                       f"({without:.3f} -> {with_:.3f} ms); re-tune with --repeat, REPEAT_TUNE"}
    return {**row, "default_us": kept.default_us, "best_us": kept.winner_us, "best": kept.winner,
            "winner": kept.winner, "why": "kept: the bank holds its winner (re-tune with --repeat, REPEAT_TUNE)"}


def reported_us(m: Measurement | None, kept: Entry | None) -> tuple[float, float]:
    """A signature's time before tuning and after (the winner's, or the default's when none won), for its
    result-file task: from ``m``, or from the bank entry ``kept`` when it was not re-tuned."""
    if m is not None:
        return m.default.median_us, (m.winner or m.default).median_us
    return (kept.default_us or 0.0, kept.winner_us or 0.0) if kept is not None else (0.0, 0.0)


def quantile(values: list[int] | list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear interpolation; 0.0 for none)."""
    return float(np.quantile(values, q)) if len(values) else 0.0


def _largest(tensor) -> float:
    return tensor.detach().abs().max().item() if tensor is not None and tensor.numel() and \
        tensor.is_floating_point() else 0.0


def tensors_in(value) -> list[torch.Tensor]:
    """The tensors among the leaves of ``value`` (nested tuples, lists and dicts), in order: a run's results."""
    return [t for t in torch.utils._pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def mismatch(reference, got, gradients: int = 0) -> str:
    """Why ``got`` does not reproduce ``reference`` within dtype tolerances ('' if it does). The absolute
    tolerance is the relative one times the reference's largest magnitude; the last ``gradients`` results are
    parameter and input gradients, judged on one scale, the largest of them: the scale the optimizer sees. A
    gradient near zero - a BatchNorm weight's ahead of another BatchNorm, whose true value cancels out - is
    all rounding on its own scale, so any reordered sum (channels_last, a compiled kernel) would fail on it,
    though its error is as small as every other gradient's."""
    if len(reference) != len(got):
        return f"{len(got)} results, expected {len(reference)}"
    shared = max((_largest(ref) for ref in reference[len(reference) - gradients:]), default=0.0) if gradients else 0.0
    for i, (ref, out) in enumerate(zip(reference, got)):
        if ref is None or out is None:
            if ref is not out:
                return f"result {i}: gradient missing on one side"
            continue
        rtol = _RTOL.get(ref.dtype, 0.0)
        scale = shared if i >= len(reference) - gradients else _largest(ref)
        try:
            torch.testing.assert_close(out.detach(), ref.detach(), rtol=rtol, atol=rtol * scale + 1e-12,
                                       check_stride=False)
        except AssertionError as exc:
            return f"result {i} differs: " + str(exc).strip().splitlines()[0]
    return ""


def from_one_random_state(runner: Callable):
    """``runner()`` started from the current random-number state (CPU, and CUDA once initialised), which is
    then restored: every call made this way draws the same random numbers (dropout masks)."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        return runner()


def failure_reason(exc: Exception, warned: list) -> str:
    """Why a candidate could not run: the error's first line, then what torch warned meanwhile (why its
    kernel was not used, say), without torch's "(Triggered internally at ...)" suffix."""
    def first_line(text: str) -> str:
        return text.strip().splitlines()[0].split(" (Triggered internally")[0] if text.strip() else ""

    notes = [n for n in dict.fromkeys(first_line(str(w.message)) for w in warned) if n]
    return f"{type(exc).__name__}: {first_line(str(exc))}" + (f" ({' '.join(notes)})" if notes else "")


def load_average() -> float:
    """The 1-minute load average (nan where the platform has none), recorded beside timings."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return float("nan")


def first_call(runner: Callable, timer: Callable[[], int] = time.perf_counter_ns) -> tuple[Callable, float]:
    """Call ``runner`` once (a compiled runner compiles then) and return it with that call's seconds; a
    runner that fails is returned as one raising the same error, for ``measure`` to reject."""
    start = timer()
    try:
        runner()
    except Exception as exc:  # a candidate that cannot run (or compile) is simply not valid
        error = exc

        def runner():
            raise error
    return runner, (timer() - start) / 1e9


def sample(runner: Callable, timer: Callable[[], int], repeats: int, warmup: int = 0,
           name: str = "default") -> Timing:
    """``runner`` called ``warmup`` times, then timed ``repeats`` times on its own."""
    timing = Timing(name, {}, name)
    for _ in range(warmup):
        runner()
    for _ in range(repeats):
        start = timer()
        runner()
        timing.samples_ns.append(timer() - start)
    return timing


def measure(default: Callable, candidates: list[tuple[str, str, dict, Callable]], *,
            timer: Callable[[], int] = time.perf_counter_ns, warmup: int = 3, repeats: int = 15,
            margin: float = 0.03, compile_s: dict[str, float] | None = None,
            calls: float = 1.0, gradients: int = 0, compared: Callable[[tuple], tuple] = tuple) -> Measurement:
    """Check then time ``default`` and each ``(name, mode, params, runner)`` interleaved; decide. The
    candidates named in ``compile_s`` (their one-off cost, seconds) must repay it over ``calls``; the last
    ``gradients`` results of a run are gradients (``mismatch``); ``compared(results)`` is what the check
    compares of a run's results (all of them unless the caller says)."""
    load_before = load_average()
    base = Timing("default", {}, "default")
    reference = compared(from_one_random_state(default))
    timings = []
    for name, mode, params, runner in candidates:
        t = Timing(name, params, mode, compile_s=(compile_s or {}).get(name))
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            try:
                t.reason = mismatch(reference, compared(from_one_random_state(runner)), gradients)
            except Exception as exc:  # a candidate that cannot run this signature is simply not valid
                t.reason = failure_reason(exc, warned)
        t.ok = not t.reason
        timings.append(t)
    rotation = [(base, default)] + [(t, c[3]) for t, c in zip(timings, candidates) if t.ok]
    for _ in range(warmup):
        for _t, runner in rotation:
            runner()
    for _ in range(UNDECIDED_ROUNDS):
        for _ in range(repeats):
            for t, runner in rotation:
                start = timer()
                runner()
                t.samples_ns.append(timer() - start)
        for t in timings:
            if t.compile_s is not None:
                t.repays = repays(base, t, calls)
        eligible = [t for t in timings if t.repays is not False]
        winner = decide(base, eligible, margin)
        if winner is not None or not _ahead(base, eligible, margin):
            break
    return Measurement(base, timings, winner, torch.get_num_threads(), (load_before, load_average()), margin)


def _ahead(default: Timing, candidates: list[Timing], margin: float) -> bool:
    """Whether the fastest valid candidate beats the default by ``margin`` at the median (noise aside)."""
    valid = [t.median_us for t in candidates if t.ok and t.samples_ns]
    return bool(valid and default.samples_ns) and min(valid) < (1 - margin) * default.median_us


def repays(default: Timing, candidate: Timing, calls: float) -> bool:
    """The repay rule: a valid, timed candidate whose saving over ``calls`` exceeds its ``compile_s``."""
    saved_ms = (default.median_us - candidate.median_us) / 1e3 * calls
    return candidate.ok and bool(candidate.samples_ns) and saved_ms > (candidate.compile_s or 0.0) * 1e3


def decide(default: Timing, candidates: list[Timing], margin: float = 0.03) -> Timing | None:
    """The fastest valid candidate if it beats the default by more than noise + margin, else None."""
    valid = [t for t in candidates if t.ok and t.samples_ns]
    if not valid or not default.samples_ns:
        return None
    best = min(valid, key=lambda t: t.median_us)
    gain = default.median_us - best.median_us
    needed = margin * default.median_us + noise_between(default, best)
    return best if gain > needed else None


def noise_between(default: Timing, t: Timing) -> float:
    """The noise a gain of ``t`` over ``default`` must beat (us): half the interquartile range of their
    per-round differences when they were timed in the same rounds (``measure``'s rotation, ``verify.Rounds``),
    else the larger of their own."""
    if default.samples_ns and len(default.samples_ns) == len(t.samples_ns):
        differences = [a - b for a, b in zip(default.samples_ns, t.samples_ns)]
        return (quantile(differences, 0.75) - quantile(differences, 0.25)) / 2e3
    return max(default.noise_us, t.noise_us)


def entry(key: str, kind: str, signature: dict, m: Measurement, **conditions) -> Entry:
    """``m`` as a bank entry: the default's record (its params: threads, load and ``conditions``), then
    every candidate's, the winner and both times."""
    default = m.default.as_dict()
    default["params"] = {"threads": m.threads, "load": [round(v, 2) for v in m.load], **conditions}
    return Entry(key=key, kind=kind, signature=signature, candidates=[default, *(t.as_dict() for t in m.candidates)],
                 winner=m.winner.name if m.winner else None, default_us=round(m.default.median_us, 3),
                 winner_us=round(m.winner.median_us, 3) if m.winner else None)
