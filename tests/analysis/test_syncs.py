"""analysis/syncs.synchronisations on a planted Kineto trace and a real one: synchronise calls and blocking copies
(a synchronous copy call, an asynchronous copy to pageable memory) are found, a copy between pinned memory and
the device is not; each names its enclosing framework operator and the device's idle time after it; and the
advisor's synchronisation rule reads them (HTA's trace_diff test trace: .item() blocking in cudaMemcpyAsync
to pageable memory, which the rule did not see when it read synchronise calls alone)."""
from __future__ import annotations

import json

import perfsight
from perfsight.analysis.advisor import advise
from perfsight.analysis.syncs import synchronisations
from perfsight.ingest.kineto.reader import read_kineto

MAIN, GPU = 100, 0


def x(cat, name, ts, dur, *, pid=MAIN, tid=MAIN, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def kernel(cat, name, ts, dur, correlation):
    return x(cat, name, ts, dur, pid=GPU, tid=7, device=0, stream=7, correlation=correlation)


def test_the_planted_synchronisations(tmp_path):
    """Times in us. aten::item [100, 200) > aten::_local_scalar_dense [105, 195) > cudaMemcpyAsync [110, 180)
    (its copy to pageable memory runs [150, 170)) and cudaStreamSynchronize [181, 190); aten::to [300, 400) >
    cudaMemcpy [310, 390) (synchronous; its copy [320, 380)); aten::copy_ [500, 520) > cudaMemcpyAsync [505,
    510) to pinned memory (not blocking; its copy [600, 610)); cudaDeviceSynchronize [700, 750) outside any
    operator. Device tasks start at 150, 320, 450, 600, 800."""
    events = [x("cpu_op", "aten::item", 100, 100), x("cpu_op", "aten::_local_scalar_dense", 105, 90),
              x("cuda_runtime", "cudaMemcpyAsync", 110, 70, correlation=1),
              x("cuda_runtime", "cudaStreamSynchronize", 181, 9, correlation=2),
              x("cpu_op", "aten::to", 300, 100), x("cuda_runtime", "cudaMemcpy", 310, 80, correlation=3),
              x("cuda_runtime", "cudaLaunchKernel", 440, 5, correlation=4),
              x("cpu_op", "aten::copy_", 500, 20), x("cuda_runtime", "cudaMemcpyAsync", 505, 5, correlation=5),
              x("cuda_runtime", "cudaDeviceSynchronize", 700, 50, correlation=6),
              x("cuda_runtime", "cudaLaunchKernel", 760, 5, correlation=7),
              kernel("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 150, 20, 1),
              kernel("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 320, 60, 3),
              kernel("kernel", "gemm", 450, 40, 4), kernel("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 600, 10, 5),
              kernel("kernel", "relu", 800, 10, 7)]
    path = tmp_path / "syncs.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    rows = [(r["sync_kind"], r["call"], r["host_op"], r["dur_ns"], r["device_idle_after_ns"])
            for r in synchronisations(read_kineto([path])).to_pylist()]
    assert rows == [
        ("blocking copy", "cudaMemcpyAsync", "aten::_local_scalar_dense", 70_000, 140_000),   # next task: 320
        ("synchronize", "cudaStreamSynchronize", "aten::_local_scalar_dense", 9_000, 130_000),
        ("blocking copy", "cudaMemcpy", "aten::to", 80_000, 60_000),                           # next task: 450
        ("synchronize", "cudaDeviceSynchronize", None, 50_000, 50_000),                        # next task: 800
    ]
    # the synchronising calls are runtime API calls in api_statistic too (they were left out)
    calls = {r["name"]: (r["category"], r["count"], r["total_ns"])
             for r in perfsight.open(path, use_cache=False).api_statistic().to_pylist()}
    assert calls == {"cudaMemcpyAsync": ("runtime", 2, 75_000), "cudaMemcpy": ("runtime", 1, 80_000),
                     "cudaLaunchKernel": ("runtime", 2, 10_000), "cudaStreamSynchronize": ("runtime", 1, 9_000),
                     "cudaDeviceSynchronize": ("runtime", 1, 50_000)}


def test_the_advisor_sees_item_blocking_in_a_copy_to_pageable_memory(shared_data):
    tables = perfsight.open(shared_data / "kineto/hta/trace_diff/test").tables
    found = synchronisations(tables).to_pylist()
    by_op = {}
    for row in found:
        by_op[row["host_op"]] = by_op.get(row["host_op"], 0) + row["dur_ns"]
    assert by_op["aten::_local_scalar_dense"] == 207_246_000           # .item(): a copy and its stream sync
    [advice] = [a for a in advise(tables).to_pylist() if a["rule"] == "excessive_synchronisation"]
    assert "most in aten::_local_scalar_dense (48 calls: cudaMemcpyAsync, cudaStreamSynchronize; 207.246 ms" in \
        advice["finding"]
    assert json.loads(advice["evidence"])["host_ops"]["aten::copy_"]["count"] == 72
