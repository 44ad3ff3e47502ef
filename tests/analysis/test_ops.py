"""op_instances / op_statistic / api_statistic / task_time on the planted training run."""
import pyarrow.compute as pc
import pytest

from perfsight.analysis import ops
from perfsight.core.tables import RunTables

from .planted import ADDMM_SHAPES, BASE, LINEAR_SHAPES, MAIN, STREAM, TRACKS, _slice, tables_from_rows, training_run


def test_instances_are_the_device_tasks_with_waits_and_launcher_shapes():
    rows = ops.op_instances(training_run()).to_pylist()
    assert [(r["id"], r["name"], r["task_type"], r["start_ns"], r["dur_ns"], r["wait_ns"], r["step"])
            for r in rows] == [
        (7, "gemm_kernel", "KERNEL", BASE + 2001, 500, 0, 1),
        (8, "Memcpy DtoH", "MEMCPY", BASE + 3101, 100, 600, 1),
        (27, "gemm_kernel", "KERNEL", BASE + 12001, 300, 8800, 2),
    ]
    assert [r["input_shapes"] for r in rows] == [ADDMM_SHAPES, None, LINEAR_SHAPES]
    assert {(r["category"], r["rank"], r["device"], r["track"]) for r in rows} == {
        ("device", 0, "cuda:0", "cuda:0 stream 7")}


def test_host_instances_wait_on_same_thread_and_depth():
    rows = {r["id"]: r for r in ops.op_instances(training_run(), kinds=("cpu_op",)).to_pylist()}
    assert rows[10]["wait_ns"] == 200          # aten::relu after aten::linear (depth 1) ended at 3000
    assert rows[4]["wait_ns"] == 0             # first depth-1 cpu_op on the main thread
    assert rows[12]["category"] == "cpu_op" and rows[12]["track"] == "thread 101 (autograd)"


def test_op_statistic_device_counts_totals_ratios():
    rows = ops.op_statistic(training_run()).to_pylist()
    assert [(r["op_type"], r["task_type"], r["count"], r["total_ns"], r["avg_ns"], r["min_ns"], r["max_ns"])
            for r in rows] == [("gemm_kernel", "KERNEL", 2, 800, 400, 300, 500),
                               ("Memcpy DtoH", "MEMCPY", 1, 100, 100, 100, 100)]
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


def test_launch_op_follows_the_launch_flow_up_to_the_enclosing_operator():
    """Kernels whose External id is not their operator's (as in df_index_resolver): the launch flow's runtime
    call is climbed, through a Python function, to the operator; a collective's kernel names its host
    comm op; a kernel without a flow falls back to the External id."""
    s = _slice
    slices = [
        s(1, "cpu_op", "aten::mm", MAIN, 0, 1000, 0, external_id=4, input_shapes="[[8, 8], [8, 8]]"),
        s(2, "python_function", "helper.py(3): launch", MAIN, 100, 900, 1, parent=1),
        s(3, "runtime", "cudaLaunchKernel", MAIN, 200, 300, 2, parent=2, correlation_id=70),
        s(4, "kernel", "gemm", STREAM, 1100, 1500, 0, correlation_id=70, external_id=70),
        s(5, "cpu_op", "c10d::allreduce_", MAIN, 2000, 3000, 0, external_id=9),
        s(6, "comm", "nccl:all_reduce", MAIN, 2100, 2900, 1, parent=5, external_id=9),
        s(7, "runtime", "cudaLaunchKernel", MAIN, 2200, 2300, 2, parent=6, correlation_id=71),
        s(8, "comm", "ncclKernel_AllReduce", STREAM, 3100, 3900, 0, correlation_id=71, external_id=71),
        s(9, "cpu_op", "aten::relu", MAIN, 4000, 4500, 0, external_id=12),
        s(10, "kernel", "relu_kernel", STREAM, 4600, 4700, 0, external_id=12),
    ]
    tables = tables_from_rows(slices=slices, tracks=TRACKS, flows=[{"src_id": 3, "dst_id": 4, "kind": "launch"},
                                                                   {"src_id": 7, "dst_id": 8, "kind": "launch"}])
    tasks = ops.op_instances(tables).to_pylist()
    assert [(t["name"], t["launch_op"], t["input_shapes"]) for t in tasks] == [
        ("gemm", "aten::mm", "[[8, 8], [8, 8]]"), ("ncclKernel_AllReduce", "nccl:all_reduce", None),
        ("relu_kernel", "aten::relu", None)]


def test_type_shares_top_types_then_the_rest_by_self_time():
    rows = ops.type_shares(ops.op_instances(training_run(), kinds=("cpu_op",)), top=2).to_pylist()
    # self times: AddmmBackward0 200 + 2000, aten::add_ 1800; the other 7 types 5000 (of 9000 in all)
    assert [(r["op_type"], r["types"], r["count"], r["self_ns"], r["total_ns"]) for r in rows] == [
        ("AddmmBackward0", 1, 2, 2200, 3800), ("aten::add_", 1, 1, 1800, 1800), (None, 7, 8, 5000, 8300)]
    assert [r["share_percent"] for r in rows] == pytest.approx([2200 / 90, 1800 / 90, 5000 / 90])
    assert {(r["rank"], r["category"]) for r in rows} == {(0, "cpu_op")}


def test_type_shares_without_a_rest():
    rows = ops.type_shares(ops.op_instances(training_run()), top=20).to_pylist()
    assert [(r["op_type"], r["self_ns"], r["share_percent"]) for r in rows] == [
        ("gemm_kernel", 800, pytest.approx(800 / 9)), ("Memcpy DtoH", 100, pytest.approx(100 / 9))]
    with pytest.raises(ValueError, match="top"):
        ops.type_shares(ops.op_instances(training_run()), top=0)


def _page(**kwargs):
    page, total = ops.instance_page(ops.op_instances(training_run(), kinds=("cpu_op",)), **kwargs)
    return page["id"].to_pylist(), total


def test_instance_page_sorts_pages_and_counts():
    # the 11 cpu_ops; 11 and 28 last 2000 ns, 12 and 15 1800 ns: ties are broken by id
    assert _page(sort="dur_ns", limit=3) == ([11, 28, 12], 11)
    assert _page(sort="start_ns", descending=False, offset=2, limit=2) == ([5, 10], 11)
    assert _page(sort="step", descending=False, limit=1) == ([3], 11)


def test_instance_page_fuzzy_search_terms_in_any_order_case_and_wildcards():
    assert _page(search="ADDMM", sort="id", descending=False) == ([5, 11, 12, 28], 4)
    assert _page(search="backward addmm", sort="id", descending=False) == ([11, 12, 28], 3)
    assert _page(search="add_", sort="id", descending=False) == ([15], 1)   # "_" is a character, not a wildcard
    assert _page(search="100%", limit=5) == ([], 0)


def test_instance_page_where():
    assert _page(where={"op_type": "aten::linear"}, sort="id", descending=False) == ([4, 25], 2)
    assert _page(where={"op_type": ["aten::mm", "aten::relu"], "step": 1}, sort="id", descending=False) == ([10, 13], 2)
    assert _page(where={"input_shapes": None, "step": 2}, sort="id", descending=False) == ([24, 28], 2)
    with pytest.raises(ValueError, match="no column 'nope'"):
        _page(sort="nope")


def test_call_stack_of_a_device_task_goes_through_its_launch():
    rows = ops.call_stack(training_run(), 7).to_pylist()
    assert [(r["level"], r["id"], r["name"]) for r in rows] == [
        (0, 1, "ProfilerStep#1"), (1, 4, "aten::linear"), (2, 5, "aten::addmm"), (3, 6, "cudaLaunchKernel"),
        (4, 7, "gemm_kernel")]
    assert rows[-1]["track"] == "cuda:0 stream 7" and rows[0]["start_ns"] == BASE


def test_call_stack_of_a_host_op_and_of_nothing():
    rows = ops.call_stack(training_run(), 13).to_pylist()
    assert [r["name"] for r in rows] == ["autograd::engine::evaluate_function: AddmmBackward0", "AddmmBackward0",
                                         "aten::mm"]
    assert ops.call_stack(training_run(), 12345).num_rows == 0



@pytest.mark.parametrize("kinds", [None, ("cpu_op",)])
def test_execution_totals_count_and_sum_what_op_instances_picks(kinds):
    """The planted training run's device tasks and host operators: per rank, name, type and step, the count,
    summed duration and summed self time op_statistic gives over the same executions."""
    tables = training_run()
    totals = ops.execution_totals(tables, kinds=kinds).to_pylist()
    statistic = ops.op_statistic(tables, by=["name", "op_type", "step"], kinds=kinds).to_pylist()
    keys = ("rank", "name", "op_type", "step", "count", "total_ns", "self_ns")
    assert totals and sorted(tuple(r[k] for k in keys) for r in totals) == sorted(
        tuple(r[k] for k in keys) for r in statistic)
    assert any(r["self_ns"] < r["total_ns"] for r in totals) == (kinds is not None)   # host operators nest
