"""Timing candidates against the default, checking them, and deciding a winner.

This module owns the measuring rules of the tuner:

- candidates are timed serially and interleaved (A,B,C,A,B,C, never concurrently), after a warm-up,
  with an injectable ``timer`` (nanoseconds) so tests use a deterministic fake clock;
- each is summarised by its median, its spread (p10-p90) and a noise estimate (half the interquartile
  range), with the thread count and the machine load recorded beside them;
- a candidate must reproduce the default's results (outputs, and gradients for training signatures)
  within the dtype's tolerance, else it is rejected with the reason;
- ``decide``: the fastest valid candidate wins only if it beats the default by more than the noise of
  both plus a minimum margin (3% by default); otherwise there is no winner.

A "runner" is a zero-argument callable returning the tensors to compare (outputs then gradients); the
same call is what gets timed, so a training runner times forward + backward.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

# rtol per dtype; atol is rtol times the reference's largest magnitude (sums reorder across impls)
_RTOL = {torch.float64: 1e-7, torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-3}


@dataclass
class Timing:
    """One candidate's measured result (times in microseconds)."""

    name: str
    params: dict
    mode: str
    samples_ns: list[int] = field(default_factory=list)
    ok: bool = True
    reason: str = ""

    @property
    def median_us(self) -> float:
        return _quantile(self.samples_ns, 0.5) / 1e3

    @property
    def spread_us(self) -> float:
        return (_quantile(self.samples_ns, 0.9) - _quantile(self.samples_ns, 0.1)) / 1e3

    @property
    def noise_us(self) -> float:
        return (_quantile(self.samples_ns, 0.75) - _quantile(self.samples_ns, 0.25)) / 2e3

    def as_dict(self) -> dict:
        """The bank's candidate record."""
        timed = bool(self.samples_ns)
        return {"name": self.name, "params": self.params, "mode": self.mode,
                "median_us": round(self.median_us, 3) if timed else None,
                "spread_us": round(self.spread_us, 3) if timed else None,
                "samples": len(self.samples_ns), "ok": self.ok, "reason": self.reason}


@dataclass
class Measurement:
    """The default and every candidate of one op, the verdict, and the conditions it was timed in."""

    default: Timing
    candidates: list[Timing]
    winner: Timing | None
    threads: int
    load: tuple[float, float]  # 1-minute load average before and after

    @property
    def improvement(self) -> float:
        """Time saved by the winner as a fraction of the default's (0 without a winner)."""
        if self.winner is None or not self.default.median_us:
            return 0.0
        return 1 - self.winner.median_us / self.default.median_us


def _quantile(values: list[int], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def mismatch(reference, got) -> str:
    """Why ``got`` does not reproduce ``reference`` within dtype tolerances ('' if it does)."""
    if len(reference) != len(got):
        return f"{len(got)} results, expected {len(reference)}"
    for i, (ref, out) in enumerate(zip(reference, got)):
        if ref is None or out is None:
            if ref is not out:
                return f"result {i}: gradient missing on one side"
            continue
        rtol = _RTOL.get(ref.dtype, 0.0)
        scale = ref.detach().abs().max().item() if ref.numel() and ref.is_floating_point() else 0.0
        try:
            torch.testing.assert_close(out.detach(), ref.detach(), rtol=rtol, atol=rtol * scale + 1e-12,
                                       check_stride=False)
        except AssertionError as exc:
            return f"result {i} differs: " + str(exc).strip().splitlines()[0]
    return ""


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return float("nan")


def measure(default: Callable, candidates: list[tuple[str, str, dict, Callable]], *,
            timer: Callable[[], int] = time.perf_counter_ns, warmup: int = 3, repeats: int = 15,
            margin: float = 0.03) -> Measurement:
    """Check then time ``default`` and each ``(name, mode, params, runner)`` interleaved; decide."""
    load_before = _load()
    base = Timing("default", {}, "default")
    reference = default()
    timings = []
    for name, mode, params, runner in candidates:
        t = Timing(name, params, mode)
        try:
            t.reason = mismatch(reference, runner())
        except Exception as exc:  # a candidate that cannot run this signature is simply not valid
            t.reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        t.ok = not t.reason
        timings.append(t)
    rotation = [(base, default)] + [(t, c[3]) for t, c in zip(timings, candidates) if t.ok]
    for _ in range(warmup):
        for _t, runner in rotation:
            runner()
    for _ in range(repeats):
        for t, runner in rotation:
            start = timer()
            runner()
            t.samples_ns.append(timer() - start)
    return Measurement(base, timings, decide(base, timings, margin), torch.get_num_threads(),
                       (load_before, _load()))


def decide(default: Timing, candidates: list[Timing], margin: float = 0.03) -> Timing | None:
    """The fastest valid candidate if it beats the default by more than noise + margin, else None."""
    valid = [t for t in candidates if t.ok and t.samples_ns]
    if not valid or not default.samples_ns:
        return None
    best = min(valid, key=lambda t: t.median_us)
    gain = default.median_us - best.median_us
    needed = margin * default.median_us + max(default.noise_us, best.noise_us)
    return best if gain > needed else None
