"""op_instances / op_statistic / api_statistic / task_time on the planted training run."""
import pyarrow.compute as pc
import pytest

from perfsight.analysis import ops
from perfsight.tables import RunTables

from .planted import ADDMM_SHAPES, BASE, LINEAR_SHAPES, STREAM, training_run


def test_instances_are_the_device_tasks_with_waits_and_launcher_shapes():
    rows = ops.op_instances(training_run()).to_pylist()
    assert [(r["id"], r["name"], r["task_type"], r["start_ns"], r["dur_ns"], r["wait_ns"], r["step"]) for r in rows] == [
        (7, "gemm_kernel", "KERNEL", BASE + 2001, 500, 0, 1),
        (8, "Memcpy DtoH", "MEMCPY", BASE + 3101, 100, 600, 1),
        (27, "gemm_kernel", "KERNEL", BASE + 12001, 300, 8800, 2),
    ]
    assert [r["input_shapes"] for r in rows] == [ADDMM_SHAPES, None, LINEAR_SHAPES]
    assert {(r["category"], r["rank"], r["device"], r["track"]) for r in rows} == {("device", 0, "cuda:0", "cuda:0 stream 7")}


def test_host_instances_wait_on_same_thread_and_depth():
    rows = {r["id"]: r for r in ops.op_instances(training_run(), kinds=("cpu_op",)).to_pylist()}
    assert rows[10]["wait_ns"] == 200          # aten::relu after aten::linear (depth 1) ended at 3000
    assert rows[4]["wait_ns"] == 0             # first depth-1 cpu_op on the main thread
    assert rows[12]["category"] == "cpu_op" and rows[12]["track"] == "thread 101 (autograd)"


def test_op_statistic_device_counts_totals_ratios():
    rows = ops.op_statistic(training_run()).to_pylist()
    assert [(r["op_type"], r["task_type"], r["count"], r["total_ns"], r["avg_ns"], r["min_ns"], r["max_ns"])
            for r in rows] == [("gemm_kernel", "KERNEL", 2, 800, 400, 300, 500), ("Memcpy DtoH", "MEMCPY", 1, 100, 100, 100, 100)]
    assert [r["ratio"] for r in rows] == pytest.approx([800 / 9, 100 / 9])
    assert [r["self_ns"] for r in rows] == [800, 100]                   # device tasks do not nest
    assert {r["category"] for r in rows} == {"device"}


def test_op_statistic_host_when_asked():
    rows = {r["op_type"]: r for r in ops.op_statistic(training_run(), kinds=("cpu_op",)).to_pylist()}
    assert (rows["aten::linear"]["count"], rows["aten::linear"]["total_ns"]) == (2, 2500)
    assert rows["aten::linear"]["self_ns"] == (1500 - 1300) + (1000 - 100)   # minus nested addmm / launch
    assert rows["aten::linear"]["category"] == "cpu_op"
    assert sum(r["ratio"] for r in rows.values()) == pytest.approx(100)


def test_cpu_only_run_falls_back_to_cpu_ops():
    tables = training_run()
    host_only = RunTables(slices=tables.slices.filter(pc.not_equal(tables.slices["track_id"], STREAM)),
                          tracks=tables.tracks)
    assert not ops.has_device_tasks(host_only)
    assert set(ops.op_instances(host_only)["category"].to_pylist()) == {"cpu_op"}
    assert ops.task_time(host_only).num_rows == 0


def test_api_statistic():
    rows = ops.api_statistic(training_run()).to_pylist()
    assert [(r["category"], r["name"], r["count"], r["total_ns"], r["ratio"]) for r in rows] == [
        ("runtime", "cudaLaunchKernel", 2, 200, 80.0), ("runtime", "cudaMemcpyAsync", 1, 50, 20.0)]


def test_task_time():
    table = ops.task_time(training_run())
    assert table.column_names == ["id", "name", "task_type", "rank", "device", "track", "start_ns", "dur_ns", "step",
                                  "launch_op"]
    assert table["id"].to_pylist() == [7, 8, 27] and table["dur_ns"].to_pylist() == [500, 100, 300]


def test_empty_run_gives_empty_tables():
    empty = RunTables()
    for table in (ops.op_instances(empty), ops.op_statistic(empty), ops.api_statistic(empty), ops.task_time(empty)):
        assert table.num_rows == 0


def test_op_statistic_search_top_and_group_by_shape():
    tables = training_run()
    linear = ops.op_statistic(tables, kinds=("cpu_op",), search="LINEAR").to_pylist()
    assert [r["op_type"] for r in linear] == ["aten::linear"]
    by_shape = ops.op_statistic(tables, kinds=("cpu_op",), by=["op_type", "input_shapes"], search="linear")
    assert sorted(by_shape["input_shapes"].to_pylist()) == sorted(
        {r["input_shapes"] for r in ops.op_instances(tables, kinds=("cpu_op",)).to_pylist()
         if r["op_type"] == "aten::linear"})
    assert ops.op_statistic(tables, kinds=("cpu_op",), top=1).num_rows == 1
    everything = ops.op_statistic(tables, kinds=("cpu_op",))
    assert ops.op_statistic(tables, kinds=("cpu_op",), top=2).to_pylist() == everything.slice(0, 2).to_pylist()


def test_device_tasks_name_their_launching_op():
    tasks = ops.task_time(training_run()).to_pylist()
    assert [t["launch_op"] for t in tasks if t["name"] == "gemm_kernel"] == ["aten::addmm", "aten::linear"]
