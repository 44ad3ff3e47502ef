"""A planted Kineto trace for the trace health checks: a clean one, and one damage of each kind planted on it.

Times in us from ``T0`` (rank 0, pid 100 thread 1, device 0 stream 7). Clean: Kineto's window marks
(``Iteration Start: PyTorch Profiler`` and the ``PyTorch Profiler (0)`` span at 0, ``Record Window End`` at
10000: the window [0, 10000)); ProfilerStep#1 [100, 9000); cudaLaunchKernel [200, 210) (correlation 10) ->
kernel ``k1`` [300, 400); cudaLaunchKernel [500, 510) (20) -> ``k2`` [600, 700). It has no finding.

The plantings (``PLANTINGS``), each alone on the clean trace, and the answer each gives (count, affected ns):

* ``overlap``: cudaLaunchKernel [550, 560) (12) -> ``k_overlap`` [650, 750) on stream 7, starting before
  ``k2`` ends: stream_overlap 1, 100 us;
* ``outside``: ``aten::early`` [-50, 50) (before the window) and ``aten::late`` [9950, 10100) (past its end):
  outside_window 2, 250 us;
* ``early_launch``: ``k_early`` [50, 80) with correlation 5, below every call's (10, 20) and no call:
  launch_outside_trace 1, 30 us;
* ``lost_launch``: ``k_lost`` [800, 850) with correlation 15, inside the calls' range but no call of it:
  task_without_launch 1, 50 us;
* ``taskless``: cudaLaunchKernel [900, 910) (16) with no kernel: launch_without_task 1, 10 us;
* ``overflow``: ``aten::negative`` with dur -5 (the reader sets 0) and ``aten::forever`` lasting 2^51 ns
  (the reader skips it): duration_overflow 2, 0 ns (neither is kept with its time);
* ``dropped``: Kineto's log says ``Dropped 42 activity records`` (WARNING) and ``CUPTI stopped early? = 1``
  (INFO): dropped_events 43, 0 ns.
"""
from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

T0 = Decimal("1000000")
PID, TID, DEVICE, STREAM = 100, 1, 0, 7

#: planting -> (check, count, affected_ns)
PLANTINGS = {
    "overlap": ("stream_overlap", 1, 100_000),
    "outside": ("outside_window", 2, 250_000),
    "early_launch": ("launch_outside_trace", 1, 30_000),
    "lost_launch": ("task_without_launch", 1, 50_000),
    "taskless": ("launch_without_task", 1, 10_000),
    "overflow": ("duration_overflow", 2, 0),
    "dropped": ("dropped_events", 43, 0),
}


def _x(cat, name, start, dur, pid=PID, tid=TID, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": float(T0 + Decimal(start)),
            "dur": float(Decimal(dur)), "args": args}


def _launch(start, correlation) -> dict:
    return _x("cuda_runtime", "cudaLaunchKernel", start, 10, correlation=correlation)


def _kernel(name, start, end, correlation) -> dict:
    return _x("kernel", name, start, end - start, DEVICE, STREAM, device=DEVICE, stream=STREAM,
              correlation=correlation)


def health_trace(path: Path, planting: str | None = None) -> Path:
    """Write the clean trace, with ``planting`` (a key of ``PLANTINGS``) if given, to ``path``."""
    events = [
        {"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces",
         "tid": "Trace PyTorch Profiler", "ts": float(T0)},
        _x("Trace", "PyTorch Profiler (0)", 0, 9990, "Spans", "PyTorch Profiler"),
        _x("user_annotation", "ProfilerStep#1", 100, 8900),
        _launch(200, 10), _kernel("k1", 300, 400, 10),
        _launch(500, 20), _kernel("k2", 600, 700, 20),
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": float(T0 + 10000)},
    ]
    trace: dict = {"schemaVersion": 1, "distributedInfo": {"rank": 0}}
    if planting == "overlap":
        events += [_launch(550, 12), _kernel("k_overlap", 650, 750, 12)]
    elif planting == "outside":
        events += [_x("cpu_op", "aten::early", -50, 100), _x("cpu_op", "aten::late", 9950, 150)]
    elif planting == "early_launch":
        events.append(_kernel("k_early", 50, 80, 5))
    elif planting == "lost_launch":
        events.append(_kernel("k_lost", 800, 850, 15))
    elif planting == "taskless":
        events.append(_launch(900, 16))
    elif planting == "overflow":
        events += [_x("cpu_op", "aten::negative", 1000, -5),
                   _x("cpu_op", "aten::forever", 1100, Decimal(2 ** 51) / 1000)]
    elif planting == "dropped":
        trace["WARNING"] = ["WARNING:2024-01-01 00:00:00 1:1 CuptiActivityApi.cpp:300] Dropped 42 activity records"]
        trace["INFO"] = ["INFO:2024-01-01 00:00:00 1:1 CuptiActivityProfiler.cpp:333] Record counts: Out-of-range = 7, "
                         "Blocklisted runtime = 0, Invalid ext correlations = 0, CPU GPU out-of-order = 0, "
                         "Unexpected CUDA events = 0, CUPTI stopped early? = 1"]
    elif planting is not None:
        raise ValueError(f"unknown planting {planting!r}; expected one of {sorted(PLANTINGS)}")
    path.write_text(json.dumps({**trace, "traceEvents": events}))
    return path
