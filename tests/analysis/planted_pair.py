"""A planted pair of Kineto traces, BASE and NEW, whose comparison is known exactly (``write_pair``).

Each trace: rank 0, ``STEPS`` ProfilerSteps back to back on the main thread (pid 1, tid 1) from ``T0``; step i
lasts ``STEP_US + JITTER_US[side][i]`` us (BASE 10,000 us, NEW 10,300 us on average). In every step, from
10 us after its start, the side's host operators (``cpu_op``) run back to back on the main thread, each
operator of ``HOST_OPS[side]`` ``calls`` times for ``us`` each; from 1,000 us after the step's start the
side's kernels (``KERNELS[side]``) run back to back on the device's stream 7, each launched by a 2 us
cudaLaunchKernel on the main thread, 5 us apart from 900 us after the step's start.

Known answers, per step (5 steps, 1 rank):

* steps: BASE mean 10,000 us (variance 1,000 us^2), NEW 10,300 us (variance 500 us^2): NEW is 3.0% slower;
  Welch's 95% interval 300 +- t(0.975, df 7.2) x sqrt(1000/5 + 500/5) = 300 +- 2.35137 x 17.3205 us, so
  +2.593% to +3.407%: ``slower``, and a gate at 2% fails, one at 3% does not;
* host operators: ``aten::mm`` 4 -> 4 calls, 400 -> 600 us (+200 us, 66.7% of the step difference);
  ``aten::relu`` 3 -> 6 calls, 60 -> 120 us (+60 us, 20%); ``aten::add`` 2 -> 2, 100 us, no difference;
  ``aten::dropout`` vanished (-30 us); ``aten::gelu`` new (+40 us);
* kernels: ``volta_sgemm_128x64_nn`` (BASE only) and ``ampere_sgemm_64x64_tn`` (NEW only) are one ``matmul``
  family row, 4 -> 4 calls, 320 -> 240 us (-80 us); ``elementwise_kernel`` 5 -> 5, 50 us, no difference.
"""
from __future__ import annotations

import json
from pathlib import Path

T0 = 1_000_000
STEPS = 5
STEP_US = {"base": 10_000, "new": 10_300}
JITTER_US = {"base": [0, 40, -40, 20, -20], "new": [0, -30, 30, 10, -10]}
#: side -> (operator, calls per step, us per call)
HOST_OPS = {
    "base": [("aten::mm", 4, 100), ("aten::add", 2, 50), ("aten::relu", 3, 20), ("aten::dropout", 1, 30)],
    "new": [("aten::mm", 4, 150), ("aten::add", 2, 50), ("aten::relu", 6, 20), ("aten::gelu", 1, 40)],
}
KERNELS = {
    "base": [("volta_sgemm_128x64_nn", 4, 80), ("elementwise_kernel", 5, 10)],
    "new": [("ampere_sgemm_64x64_tn", 4, 60), ("elementwise_kernel", 5, 10)],
}


def trace_events(side: str, steps: int = STEPS) -> list[dict]:
    """The Kineto events of one side (module docstring)."""
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
    ]
    start, correlation = T0, 0
    for step in range(steps):
        length = STEP_US[side] + JITTER_US[side][step]
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 1}", "pid": 1, "tid": 1,
                       "ts": start, "dur": length, "args": {}})
        at = start + 10
        for name, calls, us in HOST_OPS[side]:
            for _ in range(calls):
                events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": at, "dur": us,
                               "args": {}})
                at += us
        at, launch = start + 1000, start + 900
        for name, calls, us in KERNELS[side]:
            for _ in range(calls):
                correlation += 1
                events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                               "ts": launch, "dur": 2, "args": {"correlation": correlation}})
                events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": at, "dur": us,
                               "args": {"device": 0, "stream": 7, "correlation": correlation}})
                at, launch = at + us, launch + 5
        start += length
    return events


def write_trace(path: Path, side: str, steps: int = STEPS) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": trace_events(side, steps)}))
    return path


def write_pair(folder: Path, steps: int = STEPS) -> tuple[Path, Path]:
    """BASE's and NEW's traces in ``folder`` (made): ``base.pt.trace.json``, ``new.pt.trace.json``."""
    return (write_trace(folder / "base.pt.trace.json", "base", steps),
            write_trace(folder / "new.pt.trace.json", "new", steps))
