"""Summary files: CSV and JSON contents, msprof column names, microsecond conversion, empty categories."""
import csv
import json
from pathlib import Path

import pyarrow.compute as pc
import pytest
from analysis.planted import STREAM, training_run

from perfsight.core.errors import OptionError
from perfsight.core.tables import RunTables
from perfsight.views.export import export_summary
from perfsight.views.export.catalog import OP_SUMMARY

STAMP = "20240102030405"
#: a GPU trace with steps, device tasks, runtime calls and NCCL kernels
GPU_TRACE = "kineto/hta/trace_filter/sampled_rank-0.json.gz"


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def by_name(paths):
    return {p.name.rsplit("_", 1)[0]: p for p in paths}


SUMMARY_FILES = ("step_trace", "op_summary", "op_statistic", "api_statistic", "runtime_api", "acl_statistic",
                 "task_time")


def test_csv_files_written(tmp_path):
    written = export_summary(training_run(), tmp_path, stamp=STAMP)
    assert [p.name for p in written] == [f"{n}_{STAMP}.csv" for n in SUMMARY_FILES] + [
        "msprof_tx.csv", "pytorch_operator_view.csv", "prof_rule_0.json"]   # the fp32 gemm draws the amp advice


def test_op_summary_csv(tmp_path):
    header, *rows = read_csv(by_name(export_summary(training_run(), tmp_path, stamp=STAMP))["op_summary"])
    assert header == ["Device_id", "Model ID", "Task ID", "Stream ID", "Op Name", "OP Type", "OP State", "Task Type",
                      "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "HF32 Eligible",
                      "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types",
                      "Output Formats",
                      "Rank", "Device", "Stream/Thread", "Self Time(us)", "Step", "Launch Op"]
    na = ["N/A"] * 4                    # formats and outputs: no meaning off Ascend / not recorded by torch
    assert rows == [
        ["0", "N/A", "11", "7", "gemm_kernel", "gemm_kernel", "N/A", "KERNEL", "1000002.002", "0.500", "0.000", "",
         "N/A", "128;32,64;64,128", "float;float;float", *na, "0", "cuda:0", "cuda:0 stream 7", "0.500", "1",
         "aten::addmm"],
        ["0", "N/A", "12", "7", "Memcpy DtoH", "Memcpy DtoH", "N/A", "MEMCPY", "1000003.102", "0.100", "0.600", "",
         "N/A", "", "", *na, "0", "cuda:0", "cuda:0 stream 7", "0.100", "1", ""],
        ["0", "N/A", "13", "7", "gemm_kernel", "gemm_kernel", "N/A", "KERNEL", "1000012.002", "0.300", "8.800", "",
         "N/A", "32,64;128,64;128", "float;float;float", *na, "0", "cuda:0", "cuda:0 stream 7", "0.300", "2",
         "aten::linear"],
    ]


def test_statistics_and_step_trace_csv(tmp_path):
    files = by_name(export_summary(training_run(), tmp_path, stamp=STAMP))
    assert read_csv(files["op_statistic"]) == [
        ["Device_id", "OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)",
         "Max Time(us)", "Ratio(%)", "Rank", "Category", "Self Time(us)"],
        ["0", "gemm_kernel", "KERNEL", "2", "0.800", "0.300", "0.400", "0.500", "88.889", "0", "device", "0.800"],
        ["0", "Memcpy DtoH", "MEMCPY", "1", "0.100", "0.100", "0.100", "0.100", "11.111", "0", "device", "0.100"],
    ]
    assert read_csv(files["api_statistic"]) == [
        ["Device_id", "Level", "API Name", "Time(us)", "Count", "Avg(us)", "Min(us)", "Max(us)", "Variance", "Rank",
         "Ratio(%)"],
        ["host", "runtime", "cudaLaunchKernel", "0.200", "2", "0.100", "0.100", "0.100", "0.000", "0", "80.000"],
        ["host", "runtime", "cudaMemcpyAsync", "0.050", "1", "0.050", "0.050", "0.050", "0.000", "0", "20.000"],
    ]
    assert read_csv(files["runtime_api"]) == [
        ["Name", "Stream ID", "Time(%)", "Time(ns)", "Calls", "Avg(ns)", "Min(ns)", "Max(ns)", "Process ID",
         "Thread ID", "Rank", "Level"],
        ["cudaLaunchKernel", "N/A", "80.000", "200", "2", "100", "100", "100", "100", "100", "0", "runtime"],
        ["cudaMemcpyAsync", "N/A", "20.000", "50", "1", "50", "50", "50", "100", "100", "0", "runtime"],
    ]
    assert read_csv(files["acl_statistic"]) == [
        ["Name", "Type", "Time(%)", "Time(us)", "Count", "Avg(us)", "Min(us)", "Max(us)", "Process ID", "Thread ID",
         "Rank"],
        ["cudaLaunchKernel", "runtime", "80.000", "0.200", "2", "0.100", "0.100", "0.100", "100", "100", "0"],
        ["cudaMemcpyAsync", "runtime", "20.000", "0.050", "1", "0.050", "0.050", "0.050", "100", "100", "0"],
    ]
    assert read_csv(files["step_trace"]) == [
        ["Device_id", "Iteration ID", "FP Start(us)", "BP End(us)", "Iteration End(us)", "Iteration Time(us)",
         "FP to BP Time(us)", "Iteration Refresh(us)", "Data Aug Bound(us)", "Model ID", "Rank",
         "Iteration Start(us)", "Data Wait(us)"],
        ["host", "1", "1000001.501", "1000006.001", "1000010.001", "10.000", "4.500", "4.000", "1.500", "4294967295",
         "0", "1000000.001", "1.000"],
        ["host", "2", "1000011.001", "1000016.001", "1000020.001", "10.000", "5.000", "4.000", "1.000", "4294967295",
         "0", "1000010.001", "0.500"],
    ]
    assert read_csv(files["task_time"]) == [
        ["Device_id", "kernel_name", "kernel_type", "stream_id", "task_id", "task_time(us)", "task_start(us)",
         "task_stop(us)", "Rank", "Device", "Stream", "Step", "Launch Op"],
        ["0", "gemm_kernel", "KERNEL", "7", "11", "0.500", "1000002.002", "1000002.502", "0", "cuda:0",
         "cuda:0 stream 7", "1", "aten::addmm"],
        ["0", "Memcpy DtoH", "MEMCPY", "7", "12", "0.100", "1000003.102", "1000003.202", "0", "cuda:0",
         "cuda:0 stream 7", "1", ""],
        ["0", "gemm_kernel", "KERNEL", "7", "13", "0.300", "1000012.002", "1000012.302", "0", "cuda:0",
         "cuda:0 stream 7", "2", "aten::linear"],
    ]


def test_user_marks_and_operator_view_csv(tmp_path):
    files = {p.name: p for p in export_summary(training_run(), tmp_path, stamp=STAMP)}
    assert read_csv(files["msprof_tx.csv"]) == [
        ["Device_id", "pid", "tid", "category", "event_type", "payload_type", "payload_value", "Start_time(us)",
         "End_time(us)", "message_type", "message", "domain", "mark_id", "Rank", "Duration(us)", "Thread", "Step"],
        ["host", "100", "100", "N/A", "push/pop", "N/A", "N/A", "1000007.001", "1000009.001", "N/A",
         "Optimizer.step#SGD.step", "default", "14", "0", "2.000", "python 100 thread 100", "1"],
        ["host", "100", "100", "N/A", "push/pop", "N/A", "N/A", "1000010.701", "1000010.901", "N/A",
         "Optimizer.zero_grad#SGD.zero_grad", "default", "23", "0", "0.200", "python 100 thread 100", "2"],
    ]
    header, *rows = read_csv(files["pytorch_operator_view.csv"])
    assert header == ["Name", "Input Shapes", "Call Stack", "Host Self Duration(us)", "Host Total Duration(us)",
                      "Device Self Duration(us)", "Device Total Duration(us)",
                      "Device Self Duration With AICore(us)", "Device Total Duration With AICore(us)",
                      "Rank", "Input Data Types", "Start Time(us)", "Thread", "Step"]
    linear, addmm = rows[1], rows[2]    # aten::linear > aten::addmm > cudaLaunchKernel -> the 0.5 us gemm
    assert linear[:9] == ["aten::linear", "32,64;128,64;128", "", "0.200", "1.500", "0.000", "0.500", "N/A", "N/A"]
    assert addmm[:9] == ["aten::addmm", "128;32,64;64,128", "", "1.200", "1.300", "0.500", "0.500", "N/A", "N/A"]
    assert [row[0] for row in rows].count("aten::linear") == 2 and len(rows) == 11      # every cpu op, no steps


def test_fp_bp_points_reach_the_step_trace(tmp_path):
    files = by_name(export_summary(training_run(), tmp_path, stamp=STAMP, fp_point="aten::relu", bp_point="aten::mm"))
    assert read_csv(files["step_trace"])[1][2:4] == ["1000003.201", "1000005.801"]


def test_json_format(tmp_path):
    written = export_summary(training_run(), tmp_path, stamp=STAMP, fmt="json")
    assert [p.name for p in written] == [f"{n}_{STAMP}.json" for n in ("step_trace_summary",) + SUMMARY_FILES[1:-1] + (
        "task_time_summary",)] + ["msprof_tx_summary.json", "pytorch_operator_view.json", "prof_rule_0.json"]
    rows = json.loads(by_name(written)["op_summary"].read_text())
    assert list(rows[0]) == [c.header for c in OP_SUMMARY.columns]
    assert rows[0]["Task Start Time(us)"] == 1000002.002 and rows[0]["Input Shapes"] == "128;32,64;64,128"
    assert rows[0]["Device_id"] == "0" and rows[0]["Model ID"] == "N/A" and rows[0]["Step"] == 1
    assert rows[1]["Input Shapes"] is None and rows[1]["Task Wait Time(us)"] == 0.6
    steps = json.loads(by_name(written)["step_trace_summary"].read_text())
    assert [s["Iteration ID"] for s in steps] == [1, 2] and steps[0]["FP to BP Time(us)"] == 4.5
    assert steps[0]["Model ID"] == 4294967295 and steps[0]["Device_id"] == "host"


def test_no_file_for_empty_categories(tmp_path):
    tables = training_run()
    host_only = RunTables(slices=tables.slices.filter(pc.and_(pc.not_equal(tables.slices["track_id"], STREAM),
                                                              pc.not_equal(tables.slices["kind"], "runtime"))),
                          tracks=tables.tracks)
    export_summary(tables, tmp_path, stamp="20240102030404")       # an earlier export, with advice
    assert json.loads((tmp_path / "prof_rule_0.json").read_text())
    written = export_summary(host_only, tmp_path, stamp=STAMP)
    assert [p.name for p in written] == [f"{n}_{STAMP}.csv" for n in ("step_trace", "op_summary", "op_statistic")
                                         ] + ["msprof_tx.csv", "pytorch_operator_view.csv", "prof_rule_0.json"]
    assert read_csv(by_name(written)["op_statistic"])[1][10] == "cpu_op"
    assert json.loads((tmp_path / "prof_rule_0.json").read_text()) == []   # nothing crossed a threshold
    assert export_summary(RunTables(), tmp_path / "empty", stamp=STAMP) == []
    assert not (tmp_path / "empty").exists()


def test_unknown_format(tmp_path):
    with pytest.raises(OptionError, match="--format: 'xml' is not allowed; allowed: csv, json"):
        export_summary(training_run(), tmp_path, stamp=STAMP, fmt="xml")


def test_the_python_api_checks_the_format_as_the_export_does(tmp_path):
    """One check, one error type: ``perfsight.export`` raised an InputError of its own before reading anything."""
    import perfsight

    with pytest.raises(OptionError, match="--format: 'xml' is not allowed; allowed: csv, json"):
        perfsight.export(tmp_path, fmt="xml")


def test_variance_and_call_stacks_are_written(tmp_path):
    from analysis.test_operator_details import stacked_run

    files = {p.name.split("_2024")[0]: p for p in export_summary(stacked_run(), tmp_path, stamp=STAMP)}
    api = dict(zip(*read_csv(files["api_statistic"])))
    assert (api["API Name"], api["Count"], api["Variance"]) == ("cudaLaunchKernel", "2", "0.010")   # 0.01 us²
    operators = read_csv(files["pytorch_operator_view.csv"])
    assert operators[1][:3] == ["aten::linear", "", "model.py(8): forward;\ntrain.py(20): <module>"]


def test_export_summary_computes_each_analysis_once(shared_data, tmp_path, monkeypatch):
    """The summary files and the advice share the analyses (op_instances(), step_trace(), ...) through the
    run's memo: none is computed twice with the same arguments."""
    import shutil

    from perfsight.cli import main
    from tests.analysis_counts import count_analyses, repeated

    trace = Path(shutil.copy(shared_data / GPU_TRACE, tmp_path / "rank0.json.gz"))
    calls = count_analyses(monkeypatch)
    assert main(["export", "summary", "-dir", str(trace), "--output", str(tmp_path / "out")]) == 0
    assert repeated(calls) == {}
    assert calls["ops.op_instances"].count((("kinds", None),)) == 1 and len(calls["steps.step_trace"]) == 1
    assert len(calls["advisor.advise"]) == 1 and len(calls["ops.op_statistic"]) == 1
