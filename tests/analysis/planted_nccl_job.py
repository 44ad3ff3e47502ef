"""A planted two-rank NCCL job as Kineto writes it (two ``*.pt.trace.json`` files with ``distributedInfo``),
whose cluster figures are known exactly; the Cluster page, ``perfsight analyse`` and its JSON are tested on it.

Times below are on rank 0's clock, in us from ``T0``; rank 1's clock reads ``SHIFT_US`` more (its events are
written that much later). Each rank: ProfilerStep#1 [0, 5000) on its main thread, which launches each kernel
(cudaLaunchKernel [start - 5, start - 3)); on its device stream,
three all-reduces of 1,000,000 floats in group ``pg0`` (ranks [0, 1], "dp"): rank 0 [10 + 1000 i,
810 + 1000 i), rank 1 arriving 300 us later [310 + 1000 i, 810 + 1000 i); rank 0 sends 1000 floats to rank 1
in group ``pg1`` ("pp") [3500, 3600), rank 1 receives them [3550, 3600).

Known answers: rank 1's clock offset 7,000,123 ns (3 all-reduces, spread 0); rank 0 waits 300 us at each
all-reduce (transit 500 us: 4 MB / 500 us = 8 GB/s, bus factor 2 (2 - 1) / 2 = 1) and 50 us at its send;
rank 1 waits 0 and is the slow rank of pg0 (the others wait 300 us on average for it); pg1's 50 us gap is
under the 0.1 ms threshold; no slow link."""
from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

T0 = Decimal("1000000")  # small enough for float64 JSON numbers to keep their ns
SHIFT_US = Decimal("7000.123")
SHIFT_NS = 7_000_123
FLOATS, P2P_FLOATS = 1_000_000, 1000

_ALLREDUCE = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": FLOATS, "Out msg nelems": FLOATS,
              "Group size": 2, "Process Group Name": "pg0", "Process Group Desc": "dp", "Process Group Ranks": "[0, 1]"}
_P2P = {"dtype": "Float", "In msg nelems": P2P_FLOATS, "Out msg nelems": P2P_FLOATS, "Group size": 2,
        "Process Group Name": "pg1", "Process Group Desc": "pp", "Process Group Ranks": "[0, 1]"}


def _events(rank: int, synchronise: bool = False) -> list[dict]:
    shift = SHIFT_US if rank else Decimal(0)
    pid, correlation = 100 + rank, iter(range(1, 100))

    def x(cat, name, start, end, process, thread, args):
        return {"ph": "X", "cat": cat, "name": name, "pid": process, "tid": thread,
                "ts": float(T0 + shift + Decimal(start)), "dur": float(Decimal(end) - Decimal(start)), "args": args}

    def kernel(name, start, end, args):
        number = next(correlation)
        events.append(x("cuda_runtime", "cudaLaunchKernel", start - 5, start - 3, pid, 1, {"correlation": number}))
        return x("kernel", name, start, end, rank, 7, {**args, "device": rank, "stream": 7, "correlation": number})

    events: list[dict] = [x("user_annotation", "ProfilerStep#1", 0, 5000, pid, 1, {}),
                          {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
                          {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"GPU {rank}"}}]
    for i in range(3):
        start = 10 + 1000 * i + (300 if rank else 0)
        events.append(kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", start, 810 + 1000 * i, _ALLREDUCE))
    events.append(kernel("ncclDevKernel_SendRecv", 3500, 3600, {**_P2P, "Collective name": "send", "Dst Rank": 1})
                  if rank == 0 else
                  kernel("ncclDevKernel_SendRecv", 3550, 3600, {**_P2P, "Collective name": "recv", "Src Rank": 0}))
    if synchronise:
        events.append(x("cuda_runtime", "cudaStreamSynchronize", 2400, 2900, pid, 1, {"correlation": 99}))
    return events


def write_nccl_job(folder: Path, *, synchronise: bool = False) -> Path:
    """The two ranks' traces in ``folder`` (made); returns it. ``synchronise``: each rank's main thread also
    calls cudaStreamSynchronize [2400, 2900), which waits for the third all-reduce (ending at 2810)."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in (0, 1):
        trace = {"traceEvents": _events(rank, synchronise),
                 "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
                 "deviceProperties": [{"id": rank, "name": "NVIDIA A100-SXM4-40GB"}]}
        (folder / f"rank{rank}.pt.trace.json").write_text(json.dumps(trace))
    return folder
