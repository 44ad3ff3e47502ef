"""The critical path and what-if on planted steps whose paths are known by construction
(tests/analysis/planted_critical.py), and the invariants on every shared trace it is run on."""
from __future__ import annotations

import math

import pytest

from perfsight.analysis import critical_path as cp

from . import planted_critical as planted


def pieces(tables, **kwargs) -> list[tuple]:
    return [(r["edge"], r["category"], r["name"], r["start_ns"] - planted.BASE, r["dur_ns"])
            for r in cp.critical_path(tables, **kwargs).to_pylist()]


def saved(tables, changes: dict) -> tuple[int, int]:
    [row] = cp.what_if(tables, changes).to_pylist()
    return row["what_if_ns"], row["saved_ns"]


def test_device_bound_step_runs_through_its_kernels_and_the_sync_that_waits_for_them():
    assert pieces(planted.device_bound()) == [
        ("host", "idle", None, 0, 100),
        ("host", "host_ops", "aten::mm", 100, 100),
        ("launch", "launch", "gemm", 200, 100),                 # the stream was idle: gemm waited for its launch
        ("device", "compute", "gemm", 300, 5700),
        ("stream", "kernel_gap", "add_kernel", 6000, 0),        # queued behind gemm, launched long before
        ("device", "compute", "add_kernel", 6000, 2800),
        ("sync", "synchronisation", "cudaStreamSynchronize", 8800, 200),
        ("host", "host_ops", "aten::item", 9000, 800),
        ("host", "idle", None, 9800, 200),
    ]
    breakdown = {r["category"]: r["dur_ns"] for r in cp.critical_path_breakdown(planted.device_bound()).to_pylist()}
    assert breakdown == {"compute": 8500, "host_ops": 900, "launch": 100, "synchronisation": 200, "idle": 300}
    [compute] = [r for r in cp.critical_path_breakdown(planted.device_bound(), step=1).to_pylist()
                 if r["category"] == "compute"]
    assert (compute["path_ns"], compute["share_pct"]) == (10000, 85.0)


def test_what_if_replays_the_graph_with_the_changes():
    tables = planted.device_bound()
    # compute twice as fast: gemm [300, 3150), add_kernel [3150, 4550) (its launch, capped at the rank's launch
    # latency of 100, would allow 550), the sync returns 200 later, aten::item 800, idle 200
    assert saved(tables, {"compute": 2}) == (5750, 4250)
    # no waiting for the device: the sync returns at once, aten::item [700, 1500), idle 200
    assert saved(tables, {"synchronisation": math.inf}) == (1700, 8300)
    # gemm gone: add_kernel starts at its launch + 100 = 550, ends 3350, sync 3550, item 4350, idle 200
    assert saved(tables, {"gemm": math.inf}) == (4550, 5450)
    # aten::mm twice as fast: its own time, its launch call and the kernel it launched (not the launch latency)
    assert saved(tables, {"aten::mm": 2}) == (7100, 2900)
    # a glob over names; nothing on the path: nothing saved
    assert saved(tables, {"add_*": 1.25}) == (10000 - 560, 560)
    assert saved(tables, {"communication": math.inf}) == (10000, 0)


def test_the_autograd_thread_carries_the_path_while_the_main_thread_waits_in_backward():
    tables = planted.two_threads()
    assert pieces(tables) == [
        ("host", "idle", None, 0, 100),
        ("host", "host_ops", "forward", 100, 900),
        ("handoff", "idle", None, 1000, 100),
        ("host", "host_ops", "backward_a", 1100, 900),
        ("host", "idle", None, 2000, 100),
        ("host", "host_ops", "backward_b", 2100, 1800),
        ("handoff", "idle", None, 3900, 100),
        ("host", "host_ops", "optimizer", 4000, 800),
        ("host", "idle", None, 4800, 200),
    ]
    # the main thread resumes when backward_b ends (+ its 100 of hand-off), not at its observed 4000
    assert saved(tables, {"backward_b": 2}) == (4100, 900)
    assert saved(tables, {"host_ops": math.inf}) == (600, 4400)


def test_event_waits_across_streams_and_dependencies_running_backwards_in_time():
    tables = planted.two_streams()
    assert pieces(tables) == [
        ("host", "idle", None, 0, 100),
        ("launch", "launch", "producer", 100, 50),
        ("device", "compute", "producer", 150, 1850),
        ("event_wait", "kernel_gap", "consumer", 2000, 0),    # consumer launched at 200, held by the event wait
        ("device", "compute", "consumer", 2000, 1000),
        ("sync", "synchronisation", "cudaDeviceSynchronize", 3000, 100),
        ("host", "idle", None, 3100, 350),
        ("host", "runtime", "cudaLaunchKernel", 3450, 10),
        ("host", "idle", None, 3460, 40),
        ("host", "runtime", "cudaLaunchKernel", 3500, 100),
        ("host", "idle", None, 3600, 400),
    ]
    [row] = cp.what_if(tables, {"producer": 2}).to_pylist()
    assert row["dropped_edges"] == 1          # skewed's launch call began after skewed started
    assert (row["what_if_ns"], row["saved_ns"]) == (3075, 925)


def test_a_task_held_by_a_communication_kernel_of_another_stream_waited_for_it():
    """Without recorded stream waits, the consumer (launched at 200) seemed held by its launch for 2805 ns, so
    removing communication saved nothing; it starts 5 ns after the NCCL kernel of the other stream ended."""
    tables = planted.comm_wait()
    assert pieces(tables) == [
        ("host", "idle", None, 0, 100),
        ("launch", "launch", "ncclKernel_SendRecv", 100, 50),
        ("device", "communication", "ncclKernel_SendRecv", 150, 2850),
        ("comm_wait", "kernel_gap", "consumer", 3000, 5),
        ("device", "compute", "consumer", 3005, 995),
        ("sync", "synchronisation", "cudaDeviceSynchronize", 4000, 100),
        ("host", "idle", None, 4100, 900),
    ]
    # without communication the consumer starts after its launch (200 + the rank's launch latency 50): 995 ns of
    # it, the sync's return (100) and the host's 900 make 2245
    [row] = cp.what_if(tables, {"communication": math.inf}).to_pylist()
    assert (row["what_if_ns"], row["saved_ns"]) == (2245, 2755)


def test_a_rank_that_records_its_stream_waits_gets_none_inferred():
    """The same step on a rank whose trace records stream waits: the consumer did not wait for the NCCL kernel
    (the trace would say so), its launch binds."""
    path = pieces(planted.comm_wait(recorded=True))
    assert ("launch", "launch", "consumer", 200, 2805) in path
    assert "comm_wait" not in {edge for edge, *_ in path}


def test_the_replay_reproduces_every_observed_time():
    for tables in (planted.device_bound(), planted.two_threads(), planted.two_streams(), planted.comm_wait()):
        for window in cp.windows(tables):
            graph = cp.graph(tables, window)
            time, _ = cp._replay(graph)
            assert time == graph.node_ns.tolist()


def test_windows_steps_annotations_and_whole_traces():
    tables = planted.device_bound()
    [step] = cp.windows(tables)
    assert (step.step, step.label, step.end_ns - step.start_ns) == (1, "step 1", 10000)
    assert cp.windows(tables, step=2) == []
    [annotated] = cp.windows(tables, annotation="aten::item")
    assert (annotated.step, annotated.label, annotated.start_ns) == (None, "aten::item #0", planted.at(9000))
    assert cp.critical_path(tables, step=7).num_rows == 0


def test_bad_changes_are_named():
    tables = planted.device_bound()
    with pytest.raises(ValueError, match=r"'nothing\*' is neither a category \(compute, .*\) nor the name"):
        cp.what_if(tables, {"nothing*": 2})
    with pytest.raises(ValueError, match=r"'compute' must be made faster by a number > 0 .* got 0"):
        cp.what_if(tables, {"compute": 0})


def test_the_other_ranks_enter_a_rank_s_path_as_its_collective_waits(tmp_path):
    """tests/analysis/planted_nccl_job.py with each rank synchronising on its third all-reduce: rank 0 arrives
    300 us before rank 1 at every all-reduce, so 300 us of its kernel are waiting for rank 1, then 500 us of
    transfer; rank 1, the late one, waits for no one."""
    import perfsight

    from .planted_nccl_job import write_nccl_job

    run = perfsight.open(write_nccl_job(tmp_path / "job", synchronise=True))
    us = 1000
    rank0 = [(r["edge"], r["category"], r["dur_ns"] // us) for r in run.critical_path(rank=0).to_pylist()]
    assert rank0[5:9] == [("launch", "launch", 5), ("rank_wait", "rank_wait", 300),
                          ("device", "communication", 500), ("sync", "synchronisation", 90)]
    assert "rank_wait" not in {r["category"] for r in run.critical_path(rank=1).to_pylist()}
    saved = {r["rank"]: r["saved_ns"] // us for r in run.what_if({"rank_wait": math.inf}).to_pylist()}
    assert saved == {0: 300, 1: 0}
