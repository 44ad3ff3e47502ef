"""operator_details: each framework operator's host time, the device time of what it launched, its call stack;
the per-thread API statistics and their variance."""
from analysis.planted import BASE, MAIN, STREAM, TRACKS, _slice, tables_from_rows, training_run
from perfsight.analysis.operator_details import operator_details
from perfsight.analysis.ops import api_statistic


def stacked_run():
    """train.py > model.py forward > aten::linear [200, 3000) > aten::addmm [300, 2000) > launch -> gemm
    [600, 1600); aten::linear > its own launch [2100, 2400) -> bias [2500, 2700); aten::relu [3100, 3300), no
    device work."""
    s = _slice
    slices = [
        s(1, "python", "train.py(20): <module>", MAIN, 0, 5000, 0),
        s(2, "python", "model.py(8): forward", MAIN, 100, 4000, 1, parent=1),
        s(3, "cpu_op", "aten::linear", MAIN, 200, 3000, 2, parent=2),
        s(4, "cpu_op", "aten::addmm", MAIN, 300, 2000, 3, parent=3),
        s(5, "runtime", "cudaLaunchKernel", MAIN, 400, 500, 4, parent=4, correlation_id=1),
        s(6, "kernel", "gemm", STREAM, 600, 1600, 0, correlation_id=1, task_type="KERNEL"),
        s(7, "runtime", "cudaLaunchKernel", MAIN, 2100, 2400, 3, parent=3, correlation_id=2),
        s(8, "kernel", "bias_add", STREAM, 2500, 2700, 0, correlation_id=2, task_type="KERNEL"),
        s(9, "cpu_op", "aten::relu", MAIN, 3100, 3300, 2, parent=2),
    ]
    flows = [{"src_id": 5, "dst_id": 6, "kind": "launch"}, {"src_id": 7, "dst_id": 8, "kind": "launch"}]
    return tables_from_rows(slices=slices, tracks=TRACKS, flows=flows)


def test_host_and_device_time_and_call_stack():
    rows = operator_details(stacked_run()).to_pylist()
    stack = "model.py(8): forward;\ntrain.py(20): <module>"
    assert [(r["name"], r["host_self_ns"], r["host_total_ns"], r["device_self_ns"], r["device_total_ns"],
             r["call_stack"], r["start_ns"] - BASE) for r in rows] == [
        ("aten::linear", 800, 2800, 200, 1200, stack, 200),      # self: minus addmm and its own launch call
        ("aten::addmm", 1600, 1700, 1000, 1000, stack, 300),
        ("aten::relu", 200, 200, 0, 0, stack, 3100),
    ]


def test_without_stacks_and_with_nested_launches():
    rows = {(r["name"], r["start_ns"] - BASE): r for r in operator_details(training_run()).to_pylist()}
    assert all(r["call_stack"] is None for r in rows.values())
    linear, addmm = rows[("aten::linear", 1500)], rows[("aten::addmm", 1600)]
    assert (linear["device_self_ns"], linear["device_total_ns"]) == (0, 500)   # the gemm, launched by addmm
    assert (addmm["device_self_ns"], addmm["device_total_ns"]) == (500, 500)
    assert (rows[("aten::linear", 11000)]["device_self_ns"], rows[("aten::linear", 11000)]["step"]) == (300, 2)
    assert not any(name.startswith("ProfilerStep") for name, _ in rows)


def test_api_statistic_per_thread_with_variance():
    rows = api_statistic(stacked_run(), by=("name", "pid", "tid")).to_pylist()
    assert [(r["name"], r["pid"], r["tid"], r["count"], r["total_ns"], r["variance_ns2"]) for r in rows] == [
        ("cudaLaunchKernel", "100", "100", 2, 400, 10000.0)]      # calls of 100 and 300 ns: mean 200
