"""A planted job of any number of ranks, built as tables (no trace is read), for the reports at 8, 64 and 1,024
ranks.

``many_ranks(n)``: rank r has two ProfilerSteps of ``step_ns(r, n)`` each on its main thread, back to back
from ``BASE``, and in each step one compute kernel on its stream, ``COMPUTE_NS`` long from 1 ms into the
step; the rest of the step is idle. ``step_ns(r, n)`` = 10 ms + 2 us x r, but the slow rank ``slow_rank(n)``
= n // 3 takes 20 ms. One allocation in its first step on its ``cuda:<r % 8>``: 1 GiB, the slow rank's 2 GiB
(reserved 4 GiB on every rank). Known answers: every rank's compute is 5 ms, its idle the step minus 5 ms;
across ranks the step's min is rank 0's 10 ms, its max the slow rank's 20 ms.
"""
from __future__ import annotations

import pyarrow as pa

from perfsight.core.tables import RunTables, conform

from .planted import BASE, tables_from_rows

COMPUTE_NS = 5_000_000
KERNEL_START_NS = 1_000_000


def slow_rank(n: int) -> int:
    return n // 3


def step_ns(rank: int, n: int) -> int:
    return 20_000_000 if rank == slow_rank(n) else 10_000_000 + 2_000 * rank


def many_ranks(n: int) -> RunTables:
    tracks, slices, memory = [], [], []
    for rank in range(n):
        thread, stream = 2 * rank + 1, 2 * rank + 2
        tracks += [{"track_id": thread, "rank": rank, "pid": str(rank), "tid": "1", "device": "cpu", "kind": "thread",
                    "name": f"rank {rank} thread", "sort_index": 0},
                   {"track_id": stream, "rank": rank, "pid": str(rank), "tid": "7", "device": f"cuda:{rank % 8}",
                    "kind": "stream", "name": f"rank {rank} stream 7", "sort_index": 7}]
        duration = step_ns(rank, n)
        for step in (1, 2):
            start = BASE + (step - 1) * duration
            slices += [{"id": len(slices) + 1, "kind": "step", "name": f"ProfilerStep#{step}",
                        "op_type": "ProfilerStep", "track_id": thread, "start_ns": start, "dur_ns": duration,
                        "step": step},
                       {"id": len(slices) + 2, "kind": "kernel", "name": "gemm", "op_type": "gemm", "track_id": stream,
                        "start_ns": start + KERNEL_START_NS, "dur_ns": COMPUTE_NS, "step": step,
                        "task_type": "KERNEL"}]
        memory.append({"ts_ns": BASE + 2 * KERNEL_START_NS, "addr": 0x1000, "total_reserved": 2**32,
                       "bytes": 2**31 if rank == slow_rank(n) else 2**30, "device": f"cuda:{rank % 8}",
                       "track_id": thread, "op_slice_id": None})
        memory[-1]["total_allocated"] = memory[-1]["bytes"]
    tables = tables_from_rows(slices=slices, tracks=tracks)
    tables.memory = conform("memory", pa.table({name: [row[name] for row in memory] for name in memory[0]}))
    return tables
