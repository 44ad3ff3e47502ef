"""The msprof timeline and the step-trace timeline: layers, exact times, flows, counters."""
import json
import re

from analysis.planted import STREAM, training_run

from perfsight.core.tables import RunTables
from perfsight.views.export import export_timeline

STAMP = "20240102030405"


def load(path):
    return json.loads(path.read_text())


def test_files_written(tmp_path):
    written = export_timeline(training_run(), tmp_path, stamp=STAMP)
    assert [p.name for p in written] == [f"msprof_{STAMP}.json", f"task_time_{STAMP}.json", "msprof_tx.json",
                                         f"step_trace_{STAMP}.json"]


def test_device_tasks_and_user_marks_timelines(tmp_path):
    """task_time_*.json holds the device's slices alone, msprof_tx.json the user's marks alone; no counters."""
    tables = training_run()
    files = {p.name: p for p in export_timeline(tables, tmp_path, stamp=STAMP)}
    slices = tables.slices.to_pylist()
    for name, expected in ((f"task_time_{STAMP}.json", {s["id"] for s in slices if s["track_id"] == STREAM}),
                           ("msprof_tx.json", {s["id"] for s in slices if s["kind"] == "annotation"})):
        events = load(files[name])["traceEvents"]
        assert {e["args"]["id"] for e in events if e["ph"] == "X"} == expected and expected
        assert not [e for e in events if e["ph"] == "C"]
    marks = [e for e in load(files["msprof_tx.json"])["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["ts"], e["dur"]) for e in marks] == [("Optimizer.step#SGD.step", 1000007.001, 2.0),
                                                               ("Optimizer.zero_grad#SGD.zero_grad", 1000010.701, 0.2)]


def test_layers_threads_and_slices(tmp_path):
    trace = load(export_timeline(training_run(), tmp_path, stamp=STAMP)[0])
    assert trace["displayTimeUnit"] == "ns" and trace["otherData"] == {"source_format": "planted"}
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(processes.values()) == sorted(["Framework (CPU ops, Python)", "Runtime API", "Device tasks cuda:0",
                                                 "Communication", "Device counters cuda:0", "Host counters"])
    pid = {name: p for p, name in processes.items()}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert threads[(pid["Device tasks cuda:0"], 3)] == "cuda:0 stream 7"
    assert threads[(pid["Framework (CPU ops, Python)"], 2)] == "thread 101 (autograd)"

    slices = {e["args"]["id"]: e for e in events if e["ph"] == "X"}
    assert len(slices) == training_run().slices.num_rows
    gemm = slices[7]
    assert (gemm["pid"], gemm["tid"], gemm["cat"]) == (pid["Device tasks cuda:0"], 3, "kernel")
    assert gemm["args"]["task_type"] == "KERNEL" and gemm["args"]["correlation_id"] == 11
    assert slices[6]["pid"] == pid["Runtime API"] and slices[29]["pid"] == pid["Communication"]
    assert slices[4]["args"]["input_shapes"] == [[32, 64], [128, 64], [128]]


def test_times_are_exact_decimal_text(tmp_path):
    text = export_timeline(training_run(), tmp_path, stamp=STAMP)[0].read_text()
    # ProfilerStep#1 starts at 1_000_000_001 ns and lasts 10_000 ns; gemm_kernel at 1_000_002_002 ns
    assert '"name":"ProfilerStep#1","cat":"step","pid":1,"tid":1,"ts":1000000.001,"dur":10.000,' in text
    assert re.search(r'"name":"gemm_kernel"[^\n]*"ts":1000002\.002,"dur":0\.500,', text)


def test_flows_link_launch_to_kernel(tmp_path):
    events = load(export_timeline(training_run(), tmp_path, stamp=STAMP)[0])["traceEvents"]
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == finishes.keys() and len(starts) == 4
    launches = sorted((starts[i]["ts"], finishes[i]["ts"]) for i in starts if starts[i]["cat"] == "launch")
    assert launches == [(1000001.701, 1000002.002), (1000003.001, 1000003.102), (1000011.101, 1000012.002)]
    assert all(f["bp"] == "e" for f in finishes.values())


def test_counters_and_memory(tmp_path):
    events = load(export_timeline(training_run(), tmp_path, stamp=STAMP)[0])["traceEvents"]
    counters = sorted((e["name"], e["ts"], e["args"]["value"]) for e in events if e["ph"] == "C")
    assert counters == [("Memory allocated", 1000001.651, 1024), ("Memory reserved", 1000001.651, 2097152),
                        ("host.cpu_percent.process", 1000005.001, 50.0),
                        ("host.cpu_percent.process", 1000015.001, 75.5)]


def test_escaping(tmp_path):
    tables = training_run()
    names = tables.slices["name"].to_pylist()
    names[0] = 'weird "name"\n\\ é'
    tables.slices = tables.slices.set_column(2, "name", [names])
    events = load(export_timeline(tables, tmp_path, stamp=STAMP)[0])["traceEvents"]
    assert any(e["name"] == 'weird "name"\n\\ é' for e in events)


def test_step_trace_timeline(tmp_path):
    events = load(export_timeline(training_run(), tmp_path, stamp=STAMP)[-1])["traceEvents"]
    phases = [(e["name"], e["ts"], e["dur"]) for e in events if e["ph"] == "X"]
    assert phases == [
        ("Iteration 1", 1000000.001, 10.0), ("Iteration Gap", 1000000.001, 1.5), ("FP_BP", 1000001.501, 4.5),
        ("Tail", 1000006.001, 4.0),
        ("Iteration 2", 1000010.001, 10.0), ("Iteration Gap", 1000010.001, 1.0), ("FP_BP", 1000011.001, 5.0),
        ("Tail", 1000016.001, 4.0),
    ]


def test_nothing_written_for_an_empty_run(tmp_path):
    assert export_timeline(RunTables(), tmp_path / "out", stamp=STAMP) == []
    assert not (tmp_path / "out").exists()
