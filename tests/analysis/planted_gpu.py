"""A hand-built GPU training step with planted answers for the breakdown and kernel analyses.

``gpu_run()``: rank 0, one ProfilerStep [0, 10000) (times are ``BASE`` + offsets, ns). Host main thread:
dataloader [100, 1100); aten::linear [1500, 3000) with cudaLaunchKernel [1700, 1800) (corr 1),
cudaLaunchKernel [2000, 2100) (corr 2), cudaLaunchKernel [2200, 2300) (corr 3); cudaMemcpyAsync
[5000, 5100) (corr 4); python frame [6000, 7000); aten::add_ [6500, 8000) with cudaLaunchKernel
[7000, 7100) (corr 5). Device, stream 7: gemm [2000, 3000) (1), relu [3000, 3500) (2), Memcpy HtoD
[5200, 5400) (4), tiny [7150, 7160) (5); stream 8: ncclKernel_AllReduce [2500, 4500) (3), Memset
[4400, 4600) (no launcher).

Planted answers (worked out by hand in the tests that use them):
  compute = [2000, 3500) + [7150, 7160) = 1510; communication not under compute = [3500, 4500) = 1000;
  memory not under those = [4500, 4600) + [5200, 5400) = 300; runtime while the device is idle = 300;
  dataloader 1000; host ops 1790; python 500; idle 3600 (sum 10000).
"""
from __future__ import annotations

from perfsight.core.tables import RunTables

from .planted import BASE, STREAM, tables_from_rows
from .planted import MAIN as PLANTED_MAIN
from .planted import TRACKS as PLANTED_TRACKS

MAIN, S7, S8 = PLANTED_MAIN, STREAM, 5

#: planted.py's main thread and stream 7, plus stream 8
TRACKS = [PLANTED_TRACKS[0], PLANTED_TRACKS[2],
          {**PLANTED_TRACKS[2], "track_id": S8, "tid": "8", "name": "cuda:0 stream 8", "sort_index": 8}]


def s(id, kind, name, track, start, end, *, corr=None, task_type=None, step=1):
    return {"id": id, "kind": kind, "name": name, "op_type": name, "track_id": track, "start_ns": BASE + start,
            "dur_ns": end - start, "step": step, "correlation_id": corr, "task_type": task_type}


def gpu_slices() -> list[dict]:
    return [
        s(1, "step", "ProfilerStep#1", MAIN, 0, 10000),
        s(2, "dataloader", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", MAIN, 100, 1100),
        s(3, "cpu_op", "aten::linear", MAIN, 1500, 3000),
        s(4, "runtime", "cudaLaunchKernel", MAIN, 1700, 1800, corr=1),
        s(5, "runtime", "cudaLaunchKernel", MAIN, 2000, 2100, corr=2),
        s(6, "runtime", "cudaLaunchKernel", MAIN, 2200, 2300, corr=3),
        s(7, "runtime", "cudaMemcpyAsync", MAIN, 5000, 5100, corr=4),
        s(8, "python", "train.py(42): step", MAIN, 6000, 7000),
        s(9, "cpu_op", "aten::add_", MAIN, 6500, 8000),
        s(10, "runtime", "cudaLaunchKernel", MAIN, 7000, 7100, corr=5),
        s(20, "kernel", "gemm", S7, 2000, 3000, corr=1, task_type="KERNEL"),
        s(21, "kernel", "relu", S7, 3000, 3500, corr=2, task_type="KERNEL"),
        s(22, "memcpy", "Memcpy HtoD (Pageable -> Device)", S7, 5200, 5400, corr=4, task_type="MEMCPY"),
        s(23, "kernel", "tiny", S7, 7150, 7160, corr=5, task_type="KERNEL"),
        s(24, "comm", "ncclKernel_AllReduce_RING_LL_Sum_float", S8, 2500, 4500, corr=3, task_type="COMM"),
        s(25, "memset", "Memset (Device)", S8, 4400, 4600, task_type="MEMSET"),
    ]


def gpu_run() -> RunTables:
    return tables_from_rows(slices=gpu_slices(), tracks=TRACKS)


def cpu_only_run() -> RunTables:
    """``gpu_run`` without its device tasks and stream tracks (a CPU-only trace of the same step)."""
    return tables_from_rows(slices=[r for r in gpu_slices() if r["track_id"] == MAIN], tracks=TRACKS[:1])
