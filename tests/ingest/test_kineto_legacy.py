"""Traces of PyTorch's older profilers open as runs: the legacy autograd profiler's export_chrome_trace (a bare
list of events without "cat", ``"pid": "CPU functions"``, float microseconds: its events are the host's
framework operators), and a bare list whose first event puts its args before its ``ph``. The legacy export
below is the shape torch's ``profiler_legacy.profile().export_chrome_trace`` writes (recorded here with torch
2.13: the format is unchanged since 1.x), cut to two iterations of a matmul-relu-sum."""
from __future__ import annotations

import json

import perfsight
from perfsight.ingest import find_runs
from perfsight.ingest.kineto.reader import is_kineto_trace


def op(name, ts, dur, tid=1):
    return {"name": name, "ph": "X", "ts": ts, "dur": dur, "tid": tid, "pid": "CPU functions", "args": {}}


LEGACY = [op("aten::matmul", 117.902, 320.5), op("aten::mm", 150.888, 280.25), op("aten::relu", 450.0, 20.0),
          op("aten::sum", 480.0, 15.5), op("aten::matmul", 600.0, 300.0), op("aten::mm", 610.0, 250.0),
          op("aten::relu", 920.0, 22.0), op("aten::sum", 950.0, 16.0)]


def test_the_legacy_autograd_export_is_read_as_host_operators(tmp_path):
    path = tmp_path / "autograd_legacy.json"
    path.write_text(json.dumps(LEGACY))
    assert [run.path for run in find_runs(tmp_path)] == [path]
    run = perfsight.open(path, use_cache=False)
    assert set(run.tables.slices["kind"].to_pylist()) == {"cpu_op"}
    totals = {r["op_type"]: (r["count"], r["total_ns"]) for r in run.op_statistic().to_pylist()}
    assert totals == {"aten::matmul": (2, 620_500), "aten::mm": (2, 530_250), "aten::relu": (2, 42_000),
                      "aten::sum": (2, 31_500)}


def test_a_bare_event_list_whose_args_come_first_is_a_trace(tmp_path):
    path = tmp_path / "trace.json"
    events = [{"args": {"External id": 1, "Input Dims": [[2, 2]]}, "ph": "X", "cat": "Operator", "name": "aten::add",
               "pid": 7, "tid": "7", "ts": 10, "dur": 5}]
    path.write_text(json.dumps(events))
    assert is_kineto_trace(path)
    assert perfsight.open(path, use_cache=False).tables.slices["kind"].to_pylist() == ["cpu_op"]
    (tmp_path / "numbers.json").write_text(json.dumps([{"value": 1}, {"value": 2}]))
    assert not is_kineto_trace(tmp_path / "numbers.json")
