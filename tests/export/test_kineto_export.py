"""Export real torch.profiler traces end to end (Kineto reader -> select -> export files)."""
import csv
import json

from perfsight.export import STEP_MODEL_ID, Selection, catalog, export_summary, export_timeline, select, write_readme
from perfsight.ingest import kineto

CPU_TRACE = "kineto/generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz"
GPU_TRACE = "kineto/hta/trace_filter/sampled_rank-0.json.gz"
STAMP = "20240102030405"


def export_all(tables, out_dir):
    written = export_timeline(tables, out_dir, stamp=STAMP) + export_summary(tables, out_dir, stamp=STAMP)
    write_readme(out_dir, written)
    return {p.name.rsplit("_", 1)[0] + p.suffix: p for p in written}


def header(path):
    with open(path, newline="") as f:
        return next(csv.reader(f))


def check_headers(files):
    kinds = {"step_trace.csv": catalog.STEP_TRACE_SUMMARY, "op_summary.csv": catalog.OP_SUMMARY,
             "op_statistic.csv": catalog.OP_STATISTIC, "api_statistic.csv": catalog.API_STATISTIC,
             "task_time.csv": catalog.TASK_TIME}
    for key, kind in kinds.items():
        if key in files:
            assert header(files[key]) == [c.header for c in kind.columns]


def test_cpu_trace(tmp_path, shared_data):
    files = export_all(kineto.read_kineto([shared_data / CPU_TRACE]), tmp_path)
    # a CPU-only trace: no runtime API calls and no device tasks, so no api_statistic / task_time
    assert sorted(files) == ["msprof.json", "op_statistic.csv", "op_summary.csv", "prof_rule.json", "step_trace.csv",
                             "step_trace.json"]
    check_headers(files)
    with open(files["step_trace.csv"], newline="") as f:
        steps = list(csv.DictReader(f))
    assert [s["Iteration ID"] for s in steps] == ["2", "3", "4"]
    assert all(s["FP Start(us)"] and s["BP End(us)"] for s in steps)
    assert all(float(s["FP to BP Time(us)"]) > 0 for s in steps)
    trace = json.loads(files["msprof.json"].read_text())
    layers = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert "Framework (CPU ops, Python)" in layers
    assert {row.split(",")[1] for row in files["op_statistic.csv"].read_text().splitlines()[1:]} == {"cpu_op"}
    readme = (tmp_path / "README.txt").read_text()
    assert all(f"File: {p.name}" in readme for p in files.values())


def test_gpu_trace_and_step_selection(tmp_path, shared_data):
    tables = kineto.read_kineto([shared_data / GPU_TRACE])
    files = export_all(tables, tmp_path / "all")
    assert sorted(files) == ["api_statistic.csv", "msprof.json", "op_statistic.csv", "op_summary.csv",
                             "prof_rule.json", "step_trace.csv", "step_trace.json", "task_time.csv"]
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
