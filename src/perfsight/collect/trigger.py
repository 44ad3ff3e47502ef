"""The slow-step trigger of an armed job (option ``trigger`` = ``slow_step:K``): when a step is slow enough to
capture the steps after it.

A step fires the trigger when it took at least K times the median of the ``window`` steps before it. The first
``warmup`` steps (compilation, first allocations) neither fire it nor count in the median; the steps a capture
profiles do not count either (profiling slows them) and cannot fire; after a capture ends, ``cooldown`` steps
pass before it may fire again, and it fires ``most`` times at most in a run. Each firing says why: the step,
its time and the median it was judged against. Pure bookkeeping over the step times it is given: the armed
job (``collect/ondemand.py``) measures them.
"""
from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Firing:
    """A step that fired the trigger: its number, its time, the median of the recent steps and the factor."""

    step: int
    step_ns: int
    median_ns: int
    factor: float

    @property
    def reason(self) -> str:
        return (f"step {self.step} took {self.step_ns / 1e6:.1f} ms, {self.step_ns / self.median_ns:.1f} times the "
                f"median {self.median_ns / 1e6:.1f} ms of the recent steps (trigger slow_step:{self.factor:g})")

    def as_dict(self) -> dict:
        return {"trigger": "slow_step", "factor": self.factor, "step": self.step, "step_ns": self.step_ns,
                "median_ns": self.median_ns, "reason": self.reason}


class SlowStepTrigger:
    """Fires on a step K times the running median (module docstring)."""

    def __init__(self, factor: float, *, warmup: int, window: int, cooldown: int, most: int):
        self.factor, self.warmup, self.cooldown, self.most = factor, warmup, cooldown, most
        self.fired = 0
        self._recent: deque[int] = deque(maxlen=window)   # in arrival order
        self._sorted: list[int] = []                      # the same, sorted (the median in O(window))
        self._seen = 0
        self._quiet_until = -1                            # no firing on steps up to this one

    def observe(self, step: int, step_ns: int) -> Firing | None:
        """Judge a finished step (not one a capture profiled); the Firing when it fires the trigger."""
        self._seen += 1
        if self._seen <= self.warmup:
            return None
        firing = None
        if (self.fired < self.most and step > self._quiet_until and len(self._recent) == self._recent.maxlen
                and step_ns >= self.factor * (median := self._median())):
            firing = Firing(step, step_ns, median, self.factor)
            self.fired += 1
        self._add(step_ns)
        return firing

    def capture_ended(self, last_step: int) -> None:
        """A capture profiled steps up to ``last_step``: the cool-down runs from there."""
        self._quiet_until = last_step + self.cooldown

    def _add(self, step_ns: int) -> None:
        if len(self._recent) == self._recent.maxlen:
            self._sorted.pop(bisect.bisect_left(self._sorted, self._recent[0]))
        self._recent.append(step_ns)
        bisect.insort(self._sorted, step_ns)

    def _median(self) -> int:
        middle = len(self._sorted) // 2
        if len(self._sorted) % 2:
            return self._sorted[middle]
        return (self._sorted[middle - 1] + self._sorted[middle]) // 2
