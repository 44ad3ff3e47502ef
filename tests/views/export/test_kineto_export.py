"""Export real torch.profiler traces end to end (Kineto reader -> select -> export files)."""
import csv
import json
import re

from perfsight.ingest.kineto import reader as kineto
from perfsight.views.export import (
    STEP_MODEL_ID,
    Selection,
    catalog,
    export_summary,
    export_timeline,
    select,
    write_readme,
)

CPU_TRACE = "kineto/generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz"
GPU_TRACE = "kineto/hta/trace_filter/sampled_rank-0.json.gz"
STAMP = "20240102030405"


def export_all(tables, out_dir):
    written = export_timeline(tables, out_dir, stamp=STAMP) + export_summary(tables, out_dir, stamp=STAMP)
    write_readme(out_dir, written)
    return {re.sub(r"_\d{14}(?=\.)", "", p.name): p for p in written}


def header(path):
    with open(path, newline="") as f:
        return next(csv.reader(f))


def check_headers(files):
    for key, path in files.items():
        kind = catalog.describe(path.name)
        if key.endswith(".csv"):
            assert header(path) == [c.header for c in kind.columns]


def test_cpu_trace(tmp_path, shared_data):
    files = export_all(kineto.read_kineto([shared_data / CPU_TRACE]), tmp_path)
    # a CPU-only trace: no runtime API calls and no device tasks, so no api_statistic, runtime_api,
    # acl_statistic, task_time (csv and json)
    assert sorted(files) == ["msprof.json", "msprof_tx.csv", "msprof_tx.json", "op_statistic.csv", "op_summary.csv",
                             "prof_rule_0.json", "pytorch_operator_view.csv", "step_trace.csv", "step_trace.json"]
    check_headers(files)
    with open(files["step_trace.csv"], newline="") as f:
        steps = list(csv.DictReader(f))
    assert [s["Iteration ID"] for s in steps] == ["2", "3", "4"]
    assert all(s["FP Start(us)"] and s["BP End(us)"] for s in steps)
    assert all(float(s["FP to BP Time(us)"]) > 0 for s in steps)
    trace = json.loads(files["msprof.json"].read_text())
    layers = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert "Framework (CPU ops, Python)" in layers
    with open(files["op_statistic.csv"], newline="") as f:
        assert {row["Category"] for row in csv.DictReader(f)} == {"cpu_op"}
    readme = (tmp_path / "README.txt").read_text()
    assert all(f"File: {p.name}" in readme for p in files.values())


def test_gpu_trace_and_step_selection(tmp_path, shared_data):
    tables = kineto.read_kineto([shared_data / GPU_TRACE])
    files = export_all(tables, tmp_path / "all")
    assert sorted(files) == ["acl_statistic.csv", "api_statistic.csv", "msprof.json", "msprof_tx.csv",
                             "msprof_tx.json", "op_statistic.csv", "op_summary.csv", "prof_rule_0.json",
                             "pytorch_operator_view.csv", "runtime_api.csv", "step_trace.csv", "step_trace.json",
                             "task_time.csv", "task_time.json"]
    check_headers(files)
    trace = json.loads(files["msprof.json"].read_text())
    layers = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert {"Framework (CPU ops, Python)", "Runtime API"} <= layers
    assert any(name.startswith("Device tasks cuda:") for name in layers)
    assert any(e["ph"] == "f" for e in trace["traceEvents"])

    one_step = select(tables, Selection(iteration_id=552, model_id=STEP_MODEL_ID))
    picked = export_all(one_step, tmp_path / "552")
    with open(picked["step_trace.csv"], newline="") as f:
        assert [row["Iteration ID"] for row in csv.DictReader(f)] == ["552"]
    with open(picked["task_time.csv"], newline="") as f:
        assert {row["Step"] for row in csv.DictReader(f)} == {"552"}


def test_advice_is_written_as_prof_rule_0_json_and_described(shared_data, tmp_path):
    tables = kineto.read_kineto([shared_data / "kineto/kineto_tb_plugin/samples/resnet50_num_workers_0"
                                 / "worker0.1623143089861.pt.trace.json.gz"])
    written = export_summary(tables, tmp_path, stamp=STAMP)
    assert tmp_path / "prof_rule_0.json" in written
    advice = json.loads((tmp_path / "prof_rule_0.json").read_text())
    amp = next(a for a in advice if a["Rule"] == "amp_unused")
    assert amp["Evidence"]["ops"] and amp["Threshold"] and amp["Suggestion"]
    readme = write_readme(tmp_path, written).read_text()
    assert "File: prof_rule_0.json" in readme and "Evidence:" in readme
