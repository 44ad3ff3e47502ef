"""Small hand-built runs with planted answers, shared by the analysis and export tests.

``training_run()``: two ProfilerSteps of a training loop on rank 0 (times are ``BASE`` + the offsets
below, in ns):

    step 1  [0, 10000)      dataloader [100, 1100) (aten::stack inside), aten::linear [1500, 3000) >
                            aten::addmm [1600, 2900) > cudaLaunchKernel [1700, 1800) -> gemm_kernel on
                            stream 7 [2001, 2501); cudaMemcpyAsync [3000, 3050) -> Memcpy DtoH [3101, 3201);
                            aten::relu [3200, 3500); backward on the autograd thread [4000, 6000);
                            Optimizer.step#SGD.step [7000, 9000) > aten::add_
    step 2  [10000, 20000)  dataloader [10100, 10600); Optimizer.zero_grad [10700, 10900) > aten::zero_;
                            aten::linear [11000, 12000) > cudaLaunchKernel -> gemm_kernel [12001, 12301);
                            AddmmBackward0 on the main thread [14000, 16000); nccl:all_reduce [16500, 17500)

``compiled_run()``: torch.compile regions: frame 0 runs twice (0/0 and its recompile 0/1), frame 1 once.
"""
from __future__ import annotations

import pyarrow as pa

from perfsight.core.tables import RunTables, conform, empty, meta_table

BASE = 1_000_000_001
MAIN, AUTOGRAD, STREAM, CPU_COUNTER = 1, 2, 3, 4


def tables_from_rows(*, slices, tracks, counters=(), flows=(), memory=(), meta=None) -> RunTables:
    """RunTables from lists of row dicts (missing nullable columns become null)."""
    def table(name, rows):
        if not rows:
            return empty(name)
        columns = {key for row in rows for key in row}
        return conform(name, pa.table({c: [row.get(c) for row in rows] for c in columns}))

    return RunTables(slices=table("slices", slices), tracks=table("tracks", tracks),
                     counters=table("counters", counters), flows=table("flows", flows),
                     memory=table("memory", memory), meta=meta_table(meta or {"source_format": "planted"}))


def _slice(id, kind, name, track, start, end, depth, *, parent=None, step=None, **extra):
    return {"id": id, "kind": kind, "name": name, "op_type": extra.pop("op_type", name), "track_id": track,
            "start_ns": BASE + start, "dur_ns": end - start, "depth": depth, "parent_id": parent, "step": step,
            **extra}


TRACKS = [
    {"track_id": MAIN, "rank": 0, "pid": "100", "tid": "100", "device": "cpu", "kind": "thread",
     "name": "python 100 thread 100", "sort_index": 0},
    {"track_id": AUTOGRAD, "rank": 0, "pid": "100", "tid": "101", "device": "cpu", "kind": "thread",
     "name": "thread 101 (autograd)", "sort_index": 1},
    {"track_id": STREAM, "rank": 0, "pid": "0", "tid": "7", "device": "cuda:0", "kind": "stream",
     "name": "cuda:0 stream 7", "sort_index": 7},
    {"track_id": CPU_COUNTER, "rank": 0, "pid": "100", "tid": None, "device": "cpu", "kind": "counter",
     "name": "host.cpu_percent.process", "sort_index": None},
]

LINEAR_SHAPES, LINEAR_DTYPES = "[[32, 64], [128, 64], [128]]", '["float", "float", "float"]'
ADDMM_SHAPES, ADDMM_DTYPES = "[[128], [32, 64], [64, 128]]", '["float", "float", "float"]'
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def training_run() -> RunTables:
    s = _slice
    slices = [
        s(1, "step", "ProfilerStep#1", MAIN, 0, 10000, 0, step=1),
        s(2, "dataloader", LOADER, MAIN, 100, 1100, 1, parent=1, step=1),
        s(3, "cpu_op", "aten::stack", MAIN, 200, 700, 2, parent=2, step=1),
        s(4, "cpu_op", "aten::linear", MAIN, 1500, 3000, 1, parent=1, step=1, external_id=40,
          input_shapes=LINEAR_SHAPES, input_dtypes=LINEAR_DTYPES),
        s(5, "cpu_op", "aten::addmm", MAIN, 1600, 2900, 2, parent=4, step=1, external_id=41,
          input_shapes=ADDMM_SHAPES, input_dtypes=ADDMM_DTYPES),
        s(6, "runtime", "cudaLaunchKernel", MAIN, 1700, 1800, 3, parent=5, step=1, correlation_id=11,
          external_id=41),
        s(7, "kernel", "gemm_kernel", STREAM, 2001, 2501, 0, step=1, correlation_id=11, external_id=41,
          task_type="KERNEL"),
        s(9, "runtime", "cudaMemcpyAsync", MAIN, 3000, 3050, 1, parent=1, step=1, correlation_id=12),
        s(8, "memcpy", "Memcpy DtoH", STREAM, 3101, 3201, 0, step=1, correlation_id=12, task_type="MEMCPY",
          bytes=4096),
        s(10, "cpu_op", "aten::relu", MAIN, 3200, 3500, 1, parent=1, step=1),
        s(11, "cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", AUTOGRAD, 4000, 6000, 0, step=1),
        s(12, "cpu_op", "AddmmBackward0", AUTOGRAD, 4100, 5900, 1, parent=11, step=1),
        s(13, "cpu_op", "aten::mm", AUTOGRAD, 4200, 5800, 2, parent=12, step=1),
        s(14, "annotation", "Optimizer.step#SGD.step", MAIN, 7000, 9000, 1, parent=1, step=1),
        s(15, "cpu_op", "aten::add_", MAIN, 7100, 8900, 2, parent=14, step=1),
        s(21, "step", "ProfilerStep#2", MAIN, 10000, 20000, 0, step=2),
        s(22, "dataloader", LOADER, MAIN, 10100, 10600, 1, parent=21, step=2),
        s(23, "annotation", "Optimizer.zero_grad#SGD.zero_grad", MAIN, 10700, 10900, 1, parent=21, step=2),
        s(24, "cpu_op", "aten::zero_", MAIN, 10750, 10850, 2, parent=23, step=2),
        s(25, "cpu_op", "aten::linear", MAIN, 11000, 12000, 1, parent=21, step=2, external_id=50,
          input_shapes=LINEAR_SHAPES, input_dtypes=LINEAR_DTYPES),
        s(26, "runtime", "cudaLaunchKernel", MAIN, 11100, 11200, 2, parent=25, step=2, correlation_id=13,
          external_id=50),
        s(27, "kernel", "gemm_kernel", STREAM, 12001, 12301, 0, step=2, correlation_id=13, external_id=50,
          task_type="KERNEL"),
        s(28, "cpu_op", "AddmmBackward0", MAIN, 14000, 16000, 1, parent=21, step=2),
        s(29, "comm", "nccl:all_reduce", MAIN, 16500, 17500, 1, parent=21, step=2),
    ]
    return tables_from_rows(
        slices=slices, tracks=TRACKS,
        counters=[{"track_id": CPU_COUNTER, "ts_ns": BASE + 5000, "value": 50.0},
                  {"track_id": CPU_COUNTER, "ts_ns": BASE + 15000, "value": 75.5}],
        flows=[{"src_id": 6, "dst_id": 7, "kind": "launch"}, {"src_id": 9, "dst_id": 8, "kind": "launch"},
               {"src_id": 26, "dst_id": 27, "kind": "launch"}, {"src_id": 5, "dst_id": 12, "kind": "fwdbwd"}],
        memory=[{"ts_ns": BASE + 1650, "addr": 4096, "bytes": 1024, "total_allocated": 1024,
                 "total_reserved": 2097152, "device": "cuda:0", "track_id": MAIN, "op_slice_id": 5}],
    )


def compiled_run() -> RunTables:
    s = _slice
    slices = [
        s(1, "annotation", "Torch-Compiled Region: 0/0", MAIN, 0, 1000, 0),
        s(2, "cpu_op", "aten::mm", MAIN, 100, 500, 1, parent=1),
        s(3, "runtime", "cudaLaunchKernel", MAIN, 200, 300, 2, parent=2, correlation_id=1),
        s(4, "kernel", "triton_mm", STREAM, 1200, 1500, 0, correlation_id=1, task_type="KERNEL"),
        s(5, "annotation", "Torch-Compiled Region: 1/0", MAIN, 2000, 2500, 0),
        s(6, "cpu_op", "aten::add", MAIN, 2100, 2200, 1, parent=5),
        s(7, "annotation", "Torch-Compiled Region: 0/1", MAIN, 3000, 4000, 0),
        s(8, "cpu_op", "aten::mm", MAIN, 3100, 3500, 1, parent=7),
        s(9, "runtime", "cudaLaunchKernel", MAIN, 3200, 3300, 2, parent=8, correlation_id=2),
        s(10, "kernel", "triton_mm", STREAM, 4100, 4400, 0, correlation_id=2, task_type="KERNEL"),
        s(11, "cpu_op", "aten::sum", MAIN, 5000, 5100, 0),
    ]
    return tables_from_rows(
        slices=slices, tracks=TRACKS,
        counters=[{"track_id": CPU_COUNTER, "ts_ns": BASE + t, "value": float(t)} for t in (500, 3500, 4200, 6000)],
        flows=[{"src_id": 3, "dst_id": 4, "kind": "launch"}, {"src_id": 9, "dst_id": 10, "kind": "launch"}],
    )
