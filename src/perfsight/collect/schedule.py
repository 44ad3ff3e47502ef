"""Which torch.profiler action each step gets: skip warm-up steps, profile a step range, flush windows.

Steps are counted from 0 by the collector. With a range ``(first, last)``: steps before
``first - warmup_steps`` are not profiled, the ``warmup_steps`` before ``first`` warm the profiler up
(their data is discarded), ``first..last`` are recorded, and the trace is saved after ``last``
(and every ``flush_every`` steps inside the range, so a killed run keeps its finished windows).
Without a range every step is recorded and the trace is saved when profiling stops (and every
``flush_every`` steps).
"""
from __future__ import annotations

from torch.profiler import ProfilerAction


def make_schedule(step_range: tuple[int, int] | None, warmup_steps: int = 0, flush_every: int = 0):
    first, last = step_range if step_range else (0, None)

    def action(step: int) -> ProfilerAction:
        if step < first - warmup_steps:
            return ProfilerAction.NONE
        if step < first:
            return ProfilerAction.WARMUP
        if last is not None and step > last:
            return ProfilerAction.NONE
        if last is not None and step == last:
            return ProfilerAction.RECORD_AND_SAVE
        if flush_every and (step - first + 1) % flush_every == 0:
            return ProfilerAction.RECORD_AND_SAVE
        return ProfilerAction.RECORD

    return action
