"""Damage in the Ascend, msprof and MindSpore readers' files read around (issue 16, deliverable 6), planted in
copies of the real samples (../shared/data/ascend; the msprof CSV exports: tests/ingest/ascend_planted.py, as
there is no real sample of them): a value that is not a number in a CSV time or numeric column costs that
row only (``ascend_csv.number_rows``), named by line, header and value; bytes that are not UTF-8 are read as
U+FFFD and an empty CSV as no rows, each said; a JSON file nested too deeply (``core/json_depth``) or a FIFO
costs what it holds, said with the keys that lead to the damage."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import perfsight
from perfsight.core.errors import InputError
from perfsight.ingest import find_runs
from perfsight.ingest.ascend.mindspore_legacy import read_mindspore_legacy
from perfsight.ingest.ascend.msprof_dir import read_msprof_dir
from perfsight.ingest.ascend.torch_npu_db import read_torch_npu_db
from perfsight.ingest.ascend.torch_npu_text import read_torch_npu_text
from tests.conftest import SHARED_DATA, copy_shared
from tests.ingest.ascend_planted import OUT, write_msprof_dir

TEXT = SHARED_DATA / "ascend" / "torch_npu" / "text" / "level1"
MINDSPORE = SHARED_DATA / "ascend" / "mindspore_legacy" / "profiler"

pytestmark = pytest.mark.skipif(not TEXT.is_dir(), reason=f"the Ascend samples are not at {TEXT}")


def replace(path: Path, line: int, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` on line ``line`` (1-based) of ``path``."""
    lines = path.read_bytes().split(b"\n")
    assert old.encode() in lines[line - 1], (path.name, line, lines[line - 1][:200])
    lines[line - 1] = lines[line - 1].replace(old.encode(), new.encode(), 1)
    path.write_bytes(b"\n".join(lines))


def warnings_of(tables) -> list[str]:
    """The run's warnings but the group-local one every torch_npu sample rank gives alone (test_global_ranks)."""
    return [w for w in json.loads(tables.meta_dict()["parse_warnings"]) if not w.startswith("communication groups ")]


@pytest.fixture
def rank0(tmp_path) -> Path:
    return copy_shared(TEXT / "rank0_ascend_pt", tmp_path / "rank0_ascend_pt")


def output(folder: Path) -> Path:
    return folder / "ASCEND_PROFILER_OUTPUT"


# --- CSV values that are not numbers -----------------------------------------------------------------------

def test_a_kernel_details_time_that_is_not_a_number_costs_that_row(rank0):
    replace(output(rank0) / "kernel_details.csv", 57, "1736408883724708.453\t", "abc")
    replace(output(rank0) / "kernel_details.csv", 90, "50,4294967295", "5O,4294967295")   # Step Id
    tables = read_torch_npu_text(rank0)
    complete = read_torch_npu_text(TEXT / "rank0_ascend_pt")
    assert warnings_of(tables)[0] == ("kernel_details.csv: 2 rows not read: line 57: Start Time(us) 'abc' is not "
                                      "a number, line 90: Step Id '5O' is not a number")
    assert tables.slices.num_rows == complete.slices.num_rows         # the tasks are the trace's; two lose details
    assert pc.sum(pc.is_valid(tables.slices["op_type"])).as_py() == \
        pc.sum(pc.is_valid(complete.slices["op_type"])).as_py() - 2


def test_without_the_trace_a_bad_duration_costs_that_task(rank0):
    (output(rank0) / "trace_view.json").unlink()
    complete = read_torch_npu_text(rank0)
    replace(output(rank0) / "kernel_details.csv", 3, ",6.54,", ",6.5.4,")
    tables = read_torch_npu_text(rank0)
    assert "kernel_details.csv: 1 row not read: line 3: Duration(us) '6.5.4' is not a number" in warnings_of(tables)
    devices = ("kernel", "comm", "memcpy", "sync", "other")
    count = [pc.sum(pc.is_in(t.slices["kind"], pa.array(devices))).as_py() for t in (complete, tables)]
    assert count == [191, 190]                 # kernel_details.csv's 191 rows, one not read


def test_memory_csv_values_that_are_not_numbers_cost_their_rows(rank0):
    memory = output(rank0) / "memory_record.csv"
    lines = memory.read_bytes().split(b"\n")
    pta = [n for n, line in enumerate(lines, start=1) if line.startswith(b"PTA,")]
    replace(memory, pta[0], lines[pta[0] - 1].split(b",")[1].decode(), "1736408883x")      # Timestamp(us)
    replace(memory, pta[1], "," + lines[pta[1] - 1].split(b",")[2].decode() + ",", ",lots,")  # Total Allocated(MB)
    operator = output(rank0) / "operator_memory.csv"
    replace(operator, 2, "1736408883694624.810\t", "soon")
    replace(output(rank0) / "npu_module_mem.csv", 2, ",0.0,", ",none,")
    tables = read_torch_npu_text(rank0)
    complete = read_torch_npu_text(TEXT / "rank0_ascend_pt")
    warnings = warnings_of(tables)
    assert [w for w in warnings if "not a number" in w] == [
        f"memory_record.csv: 2 rows not read: line {pta[0]}: Timestamp(us) '1736408883x' is not a number, "
        f"line {pta[1]}: Total Allocated(MB) 'lots' is not a number",
        "npu_module_mem.csv: 1 row not read: line 2: Total Reserved(MB) 'none' is not a number",
        "operator_memory.csv: 1 row not read: line 2: Allocation Time(us) 'soon' is not a number"]
    assert tables.memory.num_rows == complete.memory.num_rows - 2
    assert tables.counters.num_rows == complete.counters.num_rows - 1


def test_msprof_csv_values_that_are_not_numbers_cost_their_rows(tmp_path):
    prof = write_msprof_dir(tmp_path)
    out = prof / OUT
    summary = next(out.glob("op_summary_slice_0_*.csv"))
    replace(summary, 3, ",20.0,", ",twenty,")                              # MatMul_2's Task Duration(us)
    step = next(out.glob("step_trace_slice_1_*.csv"))
    replace(step, 2, ",250,", ",2 50,")                                    # step 2's Iteration Time(us)
    replace(out / "npu_mem_20250109120010.csv", 3, ",2048,", ",2k,")
    for timeline in out.glob("msprof_slice_*.json"):                       # the steps then come from step_trace
        timeline.unlink()
    tables = read_msprof_dir(prof)
    warnings = [w for w in json.loads(tables.meta_dict()["parse_warnings"]) if "not a number" in w]
    assert warnings == [
        f"{summary.name}: 1 row not read: line 3: Task Duration(us) 'twenty' is not a number",
        f"{step.name}: 1 row not read: line 2: Iteration Time(us) '2 50' is not a number",
        "npu_mem_20250109120010.csv: 1 row not read: line 3: hbm(KB) '2k' is not a number"]
    kernels = tables.slices.filter(pc.equal(tables.slices["kind"], "kernel"))
    assert sorted(kernels["name"].to_pylist()) == ["Add_1", "MatMul_0"]
    steps = tables.slices.filter(pc.equal(tables.slices["kind"], "step"))
    assert steps["step"].to_pylist() == [1]
    assert sorted(set(tables.tracks.filter(pc.equal(tables.tracks["kind"], "counter"))["name"].to_pylist())) == [
        "npu.mem.app.ddr_bytes", "npu.mem.app.hbm_bytes", "npu.mem.app.memory_bytes"]
    assert tables.counters.num_rows == 3                                    # 2 samples x 3 series, one row lost


def test_mindspore_csv_values_that_are_not_numbers_cost_their_rows(tmp_path):
    folder = copy_shared(MINDSPORE, tmp_path / "profiler", "PROF_*")
    detail = folder / "aicore_intermediate_1_detail.csv"
    replace(detail, 2, ",0.00133,", ",0.0O133,")                           # AtomicAddrClean-op104: 1.33 us
    flops = folder / "flops_1.txt"
    replace(flops, 3, ", 333, 333, 33, 333,", ", 333, 333, 33, many,")      # AtomicAddrClean-op105
    trace = folder / "step_trace_raw_0_detail_time.csv"
    replace(trace, 3, trace.read_text().splitlines()[2].split(",")[2], "later")     # step 2's end_point
    complete = {rank: read_mindspore_legacy(MINDSPORE, rank=rank) for rank in (0, 1)}
    damaged = {rank: read_mindspore_legacy(folder, rank=rank) for rank in (0, 1)}
    said = {rank: [w for w in json.loads(t.meta_dict()["parse_warnings"]) if "not a number" in w]
            for rank, t in damaged.items()}
    assert said == {0: ["step_trace_raw_0_detail_time.csv: 1 row not read: line 3: end_point 'later' is not a number"],
                    1: ["flops_1.txt: 1 row not read: line 3: MFLOPs(10^6 vector) 'many' is not a number",
                        "aicore_intermediate_1_detail.csv: 1 row not read: line 2: execution_time '0.0O133' is not "
                        "a number"]}
    step_counts = [pc.sum(pc.equal(t[0].slices["kind"], "step")).as_py() for t in (complete, damaged)]
    assert step_counts[1] == step_counts[0] - 1
    rank1 = [(t[1].slices.num_rows, pc.sum(pc.is_valid(t[1].slices["flops"])).as_py(),
              pc.sum(t[1].slices["dur_ns"]).as_py()) for t in (complete, damaged)]
    assert rank1 == [(10, 10, 455_873), (9, 8, 455_873 - 1_330)]         # op104's execution, op105's FLOPs lost


# --- folders without data beside a job's runs ----------------------------------------------------------------

TORCH_NPU_LACKS = ("without any file perfsight reads: ASCEND_PROFILER_OUTPUT/ lacks trace_view.json, "
                   "kernel_details.csv, step_trace_time.csv, communication.json, communication_matrix.json, "
                   "memory_record.csv, operator_memory.csv, npu_module_mem.csv and a profiler database "
                   "(ascend_pytorch_profiler_N.db, msprof_N.db)")


def test_data_less_rank_folders_beside_a_jobs_ranks_are_named_in_its_warnings(tmp_path):
    job = tmp_path / "job"
    for rank in (0, 1):
        copy_shared(TEXT / f"rank{rank}_ascend_pt", job / f"rank{rank}_ascend_pt")
    (job / "rank2_ascend_pt" / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    shutil.copy(TEXT / "rank0_ascend_pt" / "profiler_info_0.json", job / "rank2_ascend_pt" / "profiler_info_2.json")
    (job / "rank3_ascend_pt").mkdir()
    (job / "notes").mkdir()                                                # not a profiler folder: not named
    tables = perfsight.open(job, use_cache=False).tables
    meta = tables.meta_dict()
    assert json.loads(meta["ranks"]) == [0, 1]
    assert json.loads(meta["parse_warnings"])[-2:] == [
        f"rank2_ascend_pt not read: a torch_npu profiler folder (holding ASCEND_PROFILER_OUTPUT/, "
        f"profiler_info_2.json) {TORCH_NPU_LACKS}",
        f"rank3_ascend_pt not read: a torch_npu profiler folder (by its name) {TORCH_NPU_LACKS}"]
    shutil.rmtree(job / "rank1_ascend_pt")                                 # one run left: said all the same
    alone = json.loads(perfsight.open(job, use_cache=False).tables.meta_dict()["parse_warnings"])
    assert [w for w in alone if " not read: a torch_npu profiler folder" in w] == [
        w for w in json.loads(meta["parse_warnings"]) if " not read: a torch_npu profiler folder" in w]


def test_an_msprof_directory_without_exports_beside_others_is_named_not_fatal(tmp_path):
    job = tmp_path / "job"
    prof = write_msprof_dir(job)
    empty = job / "PROF_000002_20250109120000456_NOEXPORTSDIRECTO"
    (empty / "device_1" / "data").mkdir(parents=True)
    (empty / "host").mkdir()
    assert [run.path for run in find_runs(job)] == [prof]
    tables = perfsight.open(job, use_cache=False).tables
    assert json.loads(tables.meta_dict()["parse_warnings"])[-1] == (
        f"{empty.name} not read: an msprof PROF_ directory (holding device_1/, host/) without exports: no "
        "mindstudio_profiler_output/ (msprof --export=on), device_*/timeline or summary, nor msprof_*.db")
    with pytest.raises(InputError) as alone:
        find_runs(empty)
    assert str(alone.value).startswith(f"{empty}: an msprof PROF_ directory (holding device_1/, host/) without")


# --- where the steps come from (meta step_source) -------------------------------------------------------------

def test_msprof_step_source_is_the_timeline_else_the_step_trace_csv(tmp_path):
    legacy = sorted(MINDSPORE.glob("PROF_*"))
    assert [read_msprof_dir(prof).meta_dict()["step_source"] for prof in legacy] == ["timeline", "timeline"]
    prof = write_msprof_dir(tmp_path)                  # its timeline has no Iteration rows
    assert read_msprof_dir(prof).meta_dict()["step_source"] == "step_trace CSV"
    for steps in (prof / OUT).glob("step_trace_*.csv"):
        steps.unlink()
    assert read_msprof_dir(prof).meta_dict()["step_source"] == "none"


def test_mindspore_step_source_is_the_best_file_present(tmp_path):
    folder = copy_shared(MINDSPORE, tmp_path / "profiler", "PROF_*")
    assert [read_mindspore_legacy(folder, rank=r).meta_dict()["step_source"] for r in (0, 1, 10)] == [
        "step_trace_raw_detail_time.csv", "none", "step_trace_raw_detail_time.csv"]
    (folder / "step_trace_raw_0_detail_time.csv").unlink()
    assert read_mindspore_legacy(folder, rank=0).meta_dict()["step_source"] == "dynamic_shape_info step"
    timeline = folder / "ascend_timeline_display_0.json"
    events = json.loads(timeline.read_text())
    events.append({"name": "7", "ph": "X", "tid": "100000", "ts": 6042000.0, "dur": 900.5, "pid": 1})  # Steps row
    timeline.write_text(json.dumps(events))
    tables = read_mindspore_legacy(folder, rank=0)
    assert tables.meta_dict()["step_source"] == "ascend_timeline_display Steps"
    steps = tables.slices.filter(pc.equal(tables.slices["kind"], "step")).to_pylist()
    assert [(s["step"], s["start_ns"], s["dur_ns"]) for s in steps] == [(7, 6_042_000_000, 900_500)]


def test_a_torch_npu_rank_without_better_steps_takes_its_msprof_step_files(tmp_path):
    rank = copy_shared(TEXT / "rank1_ascend_pt", tmp_path / "rank1_ascend_pt")
    for path in output(rank).iterdir():
        if path.name not in ("step_trace_time.csv", "communication.json", "communication_matrix.json"):
            path.unlink()
    assert read_torch_npu_text(rank).meta_dict()["step_source"] == "step_trace_time.csv"
    prof = write_msprof_dir(rank)                       # torch_npu writes msprof's PROF_ directory in the rank folder
    for path in (prof / OUT).iterdir():
        if not path.name.startswith("step_trace_"):
            path.unlink()
    tables = read_torch_npu_text(rank)
    assert tables.meta_dict()["step_source"] == "msprof step_trace CSV"
    steps = tables.slices.filter(pc.equal(tables.slices["kind"], "step")).to_pylist()
    t0 = 1736408883000000_000                           # ascend_planted.T0 in ns: steps [0, 150) and [150, 400) us
    assert [(s["name"], s["step"], s["start_ns"], s["dur_ns"]) for s in steps] == [
        ("Iteration 1", 1, t0, 150_000), ("Iteration 2", 2, t0 + 150_000, 250_000)]
    assert json.loads(tables.meta_dict()["step_trace_time"])[0]["Step"] == 50        # torch_npu's rows kept


# --- JSON fields of the wrong type (found by mutating every field of the samples' JSON files in turn) ----------

def ms_copy(tmp_path) -> Path:
    return copy_shared(MINDSPORE, tmp_path / "profiler", "PROF_*")


def edit_json(path: Path, change) -> None:
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))


def ms_warnings(folder: Path, rank: int = 0) -> tuple[object, list[str]]:
    tables = read_mindspore_legacy(folder, rank=rank)
    return tables, json.loads(tables.meta_dict()["parse_warnings"])


def test_mindspore_operator_names_that_are_not_texts_cost_their_records(tmp_path):
    folder = ms_copy(tmp_path)
    complete, _ = ms_warnings(MINDSPORE)
    first_op = next(i for i, e in enumerate(json.loads((folder / "ascend_timeline_display_0.json").read_text()))
                    if "fullname" in e.get("args", {}))
    edit_json(folder / "ascend_timeline_display_0.json",
              lambda events: events[first_op]["args"].update(fullname=["not", "a", "name"]))
    edit_json(folder / "dynamic_shape_info_0.json",
              lambda doc: next(iter(doc["operator"].values()))[0].update(op_name={"a": 1}))
    tables, warnings = ms_warnings(folder)
    assert "ascend_timeline_display_0.json: 1 operator event not read (args fullname or type not a text)" in warnings
    assert ("dynamic_shape_info_0.json: 1 execution not read (not an object with op_name and op_type texts, a "
            "numeric dur and step, and shape_info a list of JSON texts)") in warnings
    # AssignAdd-op142's timeline event, and InitDataSetQueue-op0's execution (the timeline lacks it: added from the
    # dynamic shape file, back to back)
    assert (complete.slices.num_rows, tables.slices.num_rows) == (181, 179)


def test_a_dynamic_shape_file_without_its_operators_is_skipped_not_fatal(tmp_path):
    folder = ms_copy(tmp_path)
    (folder / "step_trace_raw_0_detail_time.csv").unlink()
    edit_json(folder / "dynamic_shape_info_0.json", lambda doc: doc.pop("operator"))
    tables, warnings = ms_warnings(folder)
    assert ("dynamic_shape_info_0.json: not a MindSpore dynamic shape file ('operator'); expected {\"operator\": "
            "{\"<step>\": [{\"step\", \"op_type\", \"op_name\", \"op_side\", \"dur\", \"shape_info\"}]}}; not read (no "
            "steps or shapes from it)") in warnings
    assert tables.meta_dict()["step_source"] == "none" and tables.slices.num_rows > 0


def test_minddata_values_that_are_not_numbers_cost_their_series(tmp_path):
    folder = ms_copy(tmp_path)
    complete, _ = ms_warnings(MINDSPORE)
    cpu = folder / "minddata_cpu_utilization_0.json"
    document = json.loads(cpu.read_text())
    edit_json(cpu, lambda doc: (doc["device_info"]["user_utilization"].__setitem__(0, "x"),
                                doc.update(process_info="busy")))
    pipeline = folder / "minddata_pipeline_raw_0.csv"
    lines = pipeline.read_text().splitlines()
    queue_line = next(n for n, line in enumerate(lines) if '"[' in line)
    original = lines[queue_line]
    lines[queue_line] = original[:original.index('"[')] + '"[1, ""a""]"' + original[original.index(']"') + 2:]
    pipeline.write_text("\n".join(lines) + "\n")
    tables, warnings = ms_warnings(folder)
    lost = 1 + len(document["process_info"])
    assert [w for w in warnings if w.startswith("minddata_cpu_utilization_0.json")] == [
        f"minddata_cpu_utilization_0.json: 2 metrics not read (not a list of {len(document['time_stamp'])} "
        "numbers, one per time_stamp, or not an object of them): process, device user_utilization"]
    said = [w for w in warnings if w.startswith("minddata_pipeline_raw_0.csv")]
    assert len(said) == 1 and said[0].startswith("minddata_pipeline_raw_0.csv: 1 output_queue_size not a list of "
                                                 "numbers, not read: ") and said[0].endswith("'[1, \"a\"]'")
    series = [len(set(t.tracks.filter(pc.equal(t.tracks["kind"], "counter"))["name"].to_pylist()))
              for t in (complete, tables)]
    assert series[1] == series[0] - 1 - lost
    edit_json(cpu, lambda doc: doc.update(time_stamp=["noon"]))
    _, warnings = ms_warnings(folder)
    assert ("minddata_cpu_utilization_0.json: not a MindData CPU utilisation file (invalid literal for int() with "
            "base 10: 'noon'); expected JSON with time_stamp (a list of integer ms), device_info, process_info, "
            "op_info; not read") in warnings


def test_an_msprof_info_json_of_the_wrong_shape_costs_its_entries(tmp_path):
    source = sorted(MINDSPORE.glob("PROF_*"))[1]
    prof = copy_shared(source, tmp_path / source.name)
    info = next(prof.glob("device_*/info.json.*"))
    edit_json(info, lambda doc: doc.update(DeviceInfo=[None, *doc["DeviceInfo"]]))
    tables = read_msprof_dir(prof)
    assert "info.json: 1 DeviceInfo entry not read (not an object)" in json.loads(tables.meta_dict()["parse_warnings"])
    assert json.loads(tables.meta_dict()["device_info"]) == json.loads((source / info.relative_to(prof)).read_text())[
        "DeviceInfo"]
    info.write_text("[1, 2]")                                      # not an object at all: no rank, no device facts
    assert json.loads(read_msprof_dir(prof).meta_dict()["device_info"]) == []


# --- bytes that are not UTF-8 and empty files in the CSVs (issue "Nothing lost, nothing crashes", item 8) -------

def set_line(path: Path, line: int, old: bytes, new: bytes) -> None:
    """Replace ``old`` by the bytes ``new`` on line ``line`` (1-based) of ``path``."""
    lines = path.read_bytes().split(b"\n")
    assert old in lines[line - 1], (path.name, line, lines[line - 1][:200])
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    path.write_bytes(b"\n".join(lines))


def test_bytes_that_are_not_utf8_in_a_csv_are_read_around_and_said(rank0, capfd):
    kernels = output(rank0) / "kernel_details.csv"
    set_line(kernels, 6, b"aclnnInplaceRelu", b"aclnnInplace\xffRelu")                # in a name
    set_line(kernels, 7, b"aclnnMaxPool2d", b"aclnn\xe9,MaxPool2d")                     # in a ragged row
    kernels.write_bytes(kernels.read_bytes() + b"\xff\xfe\x00garbage\x80\r\n")          # a trailing garbage row
    tables = read_torch_npu_text(rank0)
    complete = read_torch_npu_text(TEXT / "rank0_ascend_pt")
    assert [w for w in warnings_of(tables) if w.startswith("kernel_details.csv")] == [
        "kernel_details.csv: 3 lines with bytes that are not UTF-8, read with each replaced by U+FFFD: line 6, "
        "line 7, line 193",
        "kernel_details.csv: 2 rows not read: line 7 has 47 fields, line 193 has 1 fields (the header has 46)",
        "kernel_details.csv: 1 rows match no device task of the trace (same name, start within 1000 ns); not read"]
    assert "UnicodeDecodeError" not in capfd.readouterr().err                  # pyarrow never met the bytes
    assert tables.slices.num_rows == complete.slices.num_rows                 # the tasks are the trace's
    assert pc.sum(pc.is_valid(tables.slices["op_type"])).as_py() == \
        pc.sum(pc.is_valid(complete.slices["op_type"])).as_py() - 2           # two rows lose their details
    (output(rank0) / "trace_view.json").unlink()                              # the rows are then the tasks
    slices = read_torch_npu_text(rank0).slices
    tasks = slices.filter(pc.is_in(slices["kind"], pa.array(["kernel", "comm", "memcpy", "sync", "other"])))
    assert tasks.num_rows == 191 - 1 and "aclnnInplace\ufffdRelu_Relu_Relu" in tasks["name"].to_pylist()


def test_an_empty_kernel_details_csv_costs_its_details_not_the_rank(rank0):
    (output(rank0) / "kernel_details.csv").write_bytes(b"")
    tables = read_torch_npu_text(rank0)
    complete = read_torch_npu_text(TEXT / "rank0_ascend_pt")
    assert "kernel_details.csv: empty (no header, no rows): nothing read from it" in warnings_of(tables)
    assert tables.slices.num_rows == complete.slices.num_rows
    assert pc.sum(pc.is_valid(tables.slices["op_type"])).as_py() == 0         # the details were only there
    assert tables.meta_dict()["rank"] == "0"


# --- JSON nested too deeply (item 5): the file is read around, said with the keys leading to it -----------------

DEEP = "[" * 1000 + "]" * 1000


def nest_deeply(path: Path, key: str = "deep") -> None:
    """``path``'s JSON object with ``key`` holding arrays 1,000 deep."""
    document = json.loads(path.read_text())
    path.write_text(json.dumps({**document, key: "DEEP"}).replace('"DEEP"', DEEP))


@pytest.mark.parametrize(("name", "consequence"), [
    ("profiler_info_0.json", "its facts are unknown"),
    ("profiler_metadata.json", "its facts are unknown"),
    ("ASCEND_PROFILER_OUTPUT/communication.json", "communication operators, groups and times unknown"),
    ("ASCEND_PROFILER_OUTPUT/communication_matrix.json", "its links and groups are unknown"),
])
def test_a_torch_npu_json_file_nested_too_deeply_is_read_around(rank0, name, consequence):
    nest_deeply(rank0 / name)
    tables = read_torch_npu_text(rank0)
    complete = read_torch_npu_text(TEXT / "rank0_ascend_pt")
    assert (f"{Path(name).name}: JSON nested 1001 levels deep (arrays and objects within each other) at "
            f"`$.deep[...][...][...]...`; perfsight reads at most 64; {consequence}") in warnings_of(tables)
    assert tables.slices.num_rows == complete.slices.num_rows and tables.meta_dict()["rank"] == "0"
    lost = {"profiler_info_0.json": "profiler_info", "profiler_metadata.json": "environment",
            "communication_matrix.json": "communication_matrix"}.get(Path(name).name)
    if lost:
        assert complete.meta_dict().get(lost) and not tables.meta_dict().get(lost)
    else:                       # communication.json: its records are what the operators' args say it reported
        assert [a for a in complete.slices["args"].to_pylist() if a and "communication.json" in a]
        assert not [a for a in tables.slices["args"].to_pylist() if a and "communication.json" in a]


def test_torch_npu_db_json_nested_too_deeply_is_read_around(tmp_path, shared_data):
    rank = copy_shared(shared_data / "ascend/torch_npu/db/level1/rank0_ascend_pt", tmp_path / "rank0")
    nest_deeply(rank / "profiler_info_0.json")
    with sqlite3.connect(rank / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db") as con:
        con.execute("UPDATE META_DATA SET value = ? WHERE name = 'ENV_VARIABLES'", ('{"A": ' + DEEP + "}",))
        con.execute("INSERT INTO META_DATA VALUES ('parallel_group_info', ?)", ('{"g": {"x": ' + DEEP + "}}",))
    tables = read_torch_npu_db(rank)
    warnings = json.loads(tables.meta_dict()["parse_warnings"])
    too_deep = "levels deep (arrays and objects within each other) at "
    assert (f"ascend_pytorch_profiler_0.db META_DATA: parallel_group_info: JSON nested 1002 {too_deep}`$.g.x[...]"
            "[...]...`; perfsight reads at most 64; groups keep their group-local ranks") in warnings
    assert (f"META_DATA ENV_VARIABLES: JSON nested 1001 {too_deep}`$.A[...][...][...]...`; perfsight reads at "
            "most 64; ignored") in warnings
    assert (f"profiler_info_0.json: JSON nested 1001 {too_deep}`$.deep[...][...][...]...`; perfsight reads at most "
            "64; its facts are unknown") in warnings
    complete = read_torch_npu_db(shared_data / "ascend/torch_npu/db/level1/rank0_ascend_pt")
    assert tables.slices.num_rows == complete.slices.num_rows
    assert complete.meta_dict().get("profiler_info") and not tables.meta_dict().get("profiler_info")


def test_mindspore_json_nested_too_deeply_is_read_around(tmp_path):
    folder = ms_copy(tmp_path)
    nest_deeply(folder / "dynamic_shape_info_0.json")
    nest_deeply(folder / "flops_summary_0.json")
    tables, warnings = ms_warnings(folder)
    assert ("dynamic_shape_info_0.json: not a MindSpore dynamic shape file (dynamic_shape_info_0.json: JSON nested "
            "1001 levels deep (arrays and objects within each other) at `$.deep[...][...][...]...`; perfsight reads "
            "at most 64); expected") in " ".join(warnings)
    assert ("flops_summary_0.json: JSON nested 1001 levels deep (arrays and objects within each other) at "
            "`$.deep[...][...][...]...`; perfsight reads at most 64; not read") in warnings
    assert tables.meta_dict()["step_source"] == "step_trace_raw_detail_time.csv" and tables.slices.num_rows > 0


def test_a_fifo_as_the_torch_npu_db_profiler_info_is_read_around(tmp_path, shared_data):
    rank = copy_shared(shared_data / "ascend/torch_npu/db/level1/rank0_ascend_pt", tmp_path / "rank0")
    info = rank / "profiler_info_0.json"
    info.unlink()
    os.mkfifo(info)
    tables = read_torch_npu_db(rank)
    assert (f"profiler_info_0.json: not readable JSON ({info}: a FIFO (named pipe), not a regular file; perfsight "
            "reads only regular files); its facts are unknown") in json.loads(tables.meta_dict()["parse_warnings"])
    assert tables.meta_dict()["rank"] == "0" and tables.slices.num_rows > 0
