"""Summary files: CSV and JSON contents, msprof column names, microsecond conversion, empty categories."""
import csv
import json

import pyarrow.compute as pc
import pytest

from perfsight.errors import OptionError
from perfsight.export import export_summary
from perfsight.export.catalog import OP_SUMMARY
from perfsight.tables import RunTables

from analysis.planted import STREAM, training_run

STAMP = "20240102030405"


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def by_name(paths):
    return {p.name.rsplit("_", 1)[0]: p for p in paths}


def test_csv_files_written(tmp_path):
    written = export_summary(training_run(), tmp_path, stamp=STAMP)
    assert [p.name for p in written] == [f"{n}_{STAMP}.csv" for n in
                                         ("step_trace", "op_summary", "op_statistic", "api_statistic", "task_time")
                                         ] + ["prof_rule_0.json"]     # the fp32 gemm draws the amp advice


def test_op_summary_csv(tmp_path):
    header, *rows = read_csv(by_name(export_summary(training_run(), tmp_path, stamp=STAMP))["op_summary"])
    assert header == ["Rank", "Device", "Stream/Thread", "Op Name", "OP Type", "Task Type", "Task Start Time(us)",
                      "Task Duration(us)", "Task Wait Time(us)", "Input Shapes", "Input Data Types", "Step"]
    assert rows == [
        ["0", "cuda:0", "cuda:0 stream 7", "gemm_kernel", "gemm_kernel", "KERNEL", "1000002.002", "0.500", "0.000",
         "[[128], [32, 64], [64, 128]]", '["float", "float", "float"]', "1"],
        ["0", "cuda:0", "cuda:0 stream 7", "Memcpy DtoH", "Memcpy DtoH", "MEMCPY", "1000003.102", "0.100", "0.600",
         "", "", "1"],
        ["0", "cuda:0", "cuda:0 stream 7", "gemm_kernel", "gemm_kernel", "KERNEL", "1000012.002", "0.300", "8.800",
         "[[32, 64], [128, 64], [128]]", '["float", "float", "float"]', "2"],
    ]


def test_statistics_and_step_trace_csv(tmp_path):
    files = by_name(export_summary(training_run(), tmp_path, stamp=STAMP))
    assert read_csv(files["op_statistic"]) == [
        ["Rank", "Category", "OP Type", "Task Type", "Count", "Total Time(us)", "Self Time(us)", "Min Time(us)",
         "Avg Time(us)", "Max Time(us)", "Ratio(%)"],
        ["0", "device", "gemm_kernel", "KERNEL", "2", "0.800", "0.800", "0.300", "0.400", "0.500", "88.889"],
        ["0", "device", "Memcpy DtoH", "MEMCPY", "1", "0.100", "0.100", "0.100", "0.100", "0.100", "11.111"],
    ]
    assert read_csv(files["api_statistic"]) == [
        ["Rank", "Level", "API Name", "Count", "Total Time(us)", "Self Time(us)", "Min Time(us)", "Avg Time(us)",
         "Max Time(us)", "Ratio(%)"],
        ["0", "runtime", "cudaLaunchKernel", "2", "0.200", "0.200", "0.100", "0.100", "0.100", "80.000"],
        ["0", "runtime", "cudaMemcpyAsync", "1", "0.050", "0.050", "0.050", "0.050", "0.050", "20.000"],
    ]
    assert read_csv(files["step_trace"]) == [
        ["Rank", "Iteration ID", "Iteration Start(us)", "FP Start(us)", "BP End(us)", "Iteration End(us)",
         "Iteration Time(us)", "FP to BP Time(us)", "Iteration Refresh(us)", "Data Aug Bound(us)", "Data Wait(us)"],
        ["0", "1", "1000000.001", "1000001.501", "1000006.001", "1000010.001", "10.000", "4.500", "4.000", "1.500",
         "1.000"],
        ["0", "2", "1000010.001", "1000011.001", "1000016.001", "1000020.001", "10.000", "5.000", "4.000", "1.000",
         "0.500"],
    ]
    assert read_csv(files["task_time"])[0] == ["Rank", "Device", "Stream", "Task Name", "Task Type",
                                               "Task Start Time(us)", "Task Duration(us)", "Step", "Launch Op"]
    assert [row[-1] for row in read_csv(files["task_time"])[1:]] == ["aten::addmm", "", "aten::linear"]


def test_fp_bp_points_reach_the_step_trace(tmp_path):
    files = by_name(export_summary(training_run(), tmp_path, stamp=STAMP, fp_point="aten::relu", bp_point="aten::mm"))
    assert read_csv(files["step_trace"])[1][3:5] == ["1000003.201", "1000005.801"]


def test_json_format(tmp_path):
    written = export_summary(training_run(), tmp_path, stamp=STAMP, fmt="json")
    assert [p.name for p in written] == [f"{n}_{STAMP}.json" for n in
                                         ("step_trace_summary", "op_summary", "op_statistic", "api_statistic", "task_time")
                                         ] + ["prof_rule_0.json"]
    rows = json.loads(by_name(written)["op_summary"].read_text())
    assert list(rows[0]) == [c.header for c in OP_SUMMARY.columns]
    assert rows[0]["Task Start Time(us)"] == 1000002.002 and rows[0]["Input Shapes"] == [[128], [32, 64], [64, 128]]
    assert rows[1]["Input Shapes"] is None and rows[1]["Task Wait Time(us)"] == 0.6
    steps = json.loads(by_name(written)["step_trace_summary"].read_text())
    assert [s["Iteration ID"] for s in steps] == [1, 2] and steps[0]["FP to BP Time(us)"] == 4.5


def test_no_file_for_empty_categories(tmp_path):
    tables = training_run()
    host_only = RunTables(slices=tables.slices.filter(pc.and_(pc.not_equal(tables.slices["track_id"], STREAM),
                                                              pc.not_equal(tables.slices["kind"], "runtime"))),
                          tracks=tables.tracks)
    export_summary(tables, tmp_path, stamp="20240102030404")       # an earlier export, with advice
    assert json.loads((tmp_path / "prof_rule_0.json").read_text())
    written = export_summary(host_only, tmp_path, stamp=STAMP)
    assert [p.name for p in written] == [f"{n}_{STAMP}.csv" for n in ("step_trace", "op_summary", "op_statistic")
                                         ] + ["prof_rule_0.json"]
    assert read_csv(by_name(written)["op_statistic"])[1][1] == "cpu_op"
    assert json.loads((tmp_path / "prof_rule_0.json").read_text()) == []   # nothing crossed a threshold
    assert export_summary(RunTables(), tmp_path / "empty", stamp=STAMP) == []
    assert not (tmp_path / "empty").exists()


def test_unknown_format(tmp_path):
    with pytest.raises(OptionError, match="--format: 'xml' is not allowed; allowed: csv, json"):
        export_summary(training_run(), tmp_path, stamp=STAMP, fmt="xml")
