"""op_time_by_step / op_instance_time_by_step / op_shapes_by_step on a planted two-step run whose
aten::addmm changes shapes, and on the real (static) CPU MLP trace."""
from perfsight.analysis import dynamic_shape
from perfsight.core.tables import RunTables
from perfsight.ingest.kineto.reader import read_kineto

from .planted import BASE, MAIN
from .planted_host import CPU_TRACE, host_only

S1, S2, S3, R = "[[32, 64], [64, 8]]", "[[32, 8], [8, 8]]", "[[16, 64], [64, 8]]", "[[32, 8]]"


def _op(id, name, start, end, step, shapes, parent):
    return {"id": id, "kind": "cpu_op", "name": name, "op_type": name, "track_id": MAIN, "start_ns": BASE + start,
            "dur_ns": end - start, "depth": 1, "parent_id": parent, "step": step, "input_shapes": shapes}


def planted() -> RunTables:
    slices = [
        {"id": 1, "kind": "step", "name": "ProfilerStep#1", "track_id": MAIN, "start_ns": BASE, "dur_ns": 10000,
         "depth": 0, "step": 1},
        _op(2, "aten::addmm", 100, 600, 1, S1, 1), _op(3, "aten::addmm", 700, 1000, 1, S2, 1),
        _op(4, "aten::relu", 1100, 1200, 1, R, 1),
        {"id": 11, "kind": "step", "name": "ProfilerStep#2", "track_id": MAIN, "start_ns": BASE + 10000,
         "dur_ns": 10000, "depth": 0, "step": 2},
        _op(12, "aten::addmm", 10100, 10900, 2, S3, 11), _op(13, "aten::addmm", 11000, 11200, 2, S2, 11),
        _op(14, "aten::relu", 11300, 11500, 2, R, 11),
        _op(20, "aten::relu", 30000, 30100, None, "[[1]]", None),      # outside steps: not counted
    ]
    return host_only(slices)


def test_time_by_type_per_step():
    rows = [(r["op_type"], r["step"], r["count"], r["total_ns"], r["avg_ns"], r["min_ns"], r["max_ns"])
            for r in dynamic_shape.op_time_by_step(planted()).to_pylist()]
    assert rows == [("aten::addmm", 1, 2, 800, 400, 300, 500), ("aten::addmm", 2, 2, 1000, 500, 200, 800),
                    ("aten::relu", 1, 1, 100, 100, 100, 100), ("aten::relu", 2, 1, 200, 200, 200, 200)]


def test_time_by_instance_per_step():
    rows = [(r["instance_name"], r["step"], r["dur_ns"], r["input_shapes"], r["id"])
            for r in dynamic_shape.op_instance_time_by_step(planted()).to_pylist()]
    assert rows == [("aten::addmm#0", 1, 500, S1, 2), ("aten::addmm#0", 2, 800, S3, 12),
                    ("aten::addmm#1", 1, 300, S2, 3), ("aten::addmm#1", 2, 200, S2, 13),
                    ("aten::relu#0", 1, 100, R, 4), ("aten::relu#0", 2, 200, R, 14)]


def test_shapes_per_step_flag_dynamic_ops():
    rows = [(r["op_type"], r["step"], r["shapes"], r["shape_count"], r["dynamic"])
            for r in dynamic_shape.op_shapes_by_step(planted()).to_pylist()]
    assert rows == [("aten::addmm", 1, sorted([S1, S2]), 2, True), ("aten::addmm", 2, sorted([S2, S3]), 2, True),
                    ("aten::relu", 1, [R], 1, False), ("aten::relu", 2, [R], 1, False)]


def test_empty_run():
    for fn in (dynamic_shape.op_time_by_step, dynamic_shape.op_instance_time_by_step,
               dynamic_shape.op_shapes_by_step):
        assert fn(RunTables()).num_rows == 0


def test_real_static_mlp_has_no_dynamic_op(shared_data):
    tables = read_kineto([shared_data / CPU_TRACE])
    by_step = dynamic_shape.op_time_by_step(tables)
    assert sorted(set(by_step["step"].to_pylist())) == [2, 3, 4]
    assert sum(by_step["count"].to_pylist()) == 324            # every cpu_op of the three steps
    shapes = dynamic_shape.op_shapes_by_step(tables)
    assert shapes.num_rows > 0 and not any(shapes["dynamic"].to_pylist())
    instances = dynamic_shape.op_instance_time_by_step(tables).to_pylist()
    addmm = [r for r in instances if r["op_type"] == "aten::addmm"]
    assert {r["instance_name"] for r in addmm} == {"aten::addmm#0", "aten::addmm#1"} and len(addmm) == 6
