"""msprof PROF_ directories: the planted CANN 7+ export (mindstudio_profiler_output, seed-derived: there is no
real sample of it), the real older per-iteration PROF_ directories of ../shared/data, and a database-only
directory made from a real profiler database."""
from __future__ import annotations

import csv
import json
import shutil
import sqlite3
from decimal import Decimal
from pathlib import Path

import pyarrow.compute as pc
import pytest

from perfsight.analysis import breakdown, ops, steps
from perfsight.core.errors import InputError
from perfsight.ingest import find_runs
from perfsight.ingest.ascend.detect import is_msprof_dir
from perfsight.ingest.ascend.msprof_dir import msprof_sources, read_msprof_dir
from tests.ingest.ascend_planted import OUT, T0, assert_valid, rows, write_msprof_dir

LEGACY = "ascend/mindspore_legacy/profiler"
LEGACY_DIRS = ["PROF_000001_20230818142704322_COJGGGCANRMICFBC", "PROF_000001_20230818142704567_GQFAMHBKGODKJMLA"]
DB_RANK1 = "ascend/torch_npu/db/level1/rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_1.db"


def ns(offset_us: str) -> int:
    return int((Decimal(T0) + Decimal(offset_us)) * 1000)


@pytest.fixture
def planted(tmp_path) -> Path:
    return write_msprof_dir(tmp_path)


# --- the planted CANN 7+ export ---------------------------------------------------------------------------

def test_planted_export_reads_into_valid_tables_with_exact_times(planted):
    tables = read_msprof_dir(planted)
    assert_valid(tables)
    meta = tables.meta_dict()
    assert meta["source_format"] == "msprof" and json.loads(meta["rank"]) == 3   # info.json.0's rank_id
    assert set(tables.tracks["rank"].to_pylist()) == {3}
    device = {r["name"]: (r["start_ns"], r["dur_ns"]) for r in tables.slices.to_pylist()
              if r["kind"] in ("kernel", "comm", "sync")}
    assert device == {"MatMul_0": (ns("20.125"), 30500), "Add_1": (ns("100.001"), 4250),
                      "MatMul_2": (ns("200.999"), 20000), "EVENT_RECORD": (ns("250"), 20),
                      "hcom_allReduce__1_0_1": (ns("300.5"), 50000)}
    assert rows(tables.slices, name="Notify_Wait")[0]["kind"] == "other"      # an HCCL part, counted once
    warnings = json.loads(meta["parse_warnings"])
    assert any("Overlap Analysis" in w for w in warnings)


def test_op_summary_completes_the_timeline_tasks(planted):
    slices = read_msprof_dir(planted).slices
    matmul = rows(slices, name="MatMul_0")[0]
    assert (matmul["op_type"], matmul["task_type"], matmul["kind"]) == ("MatMul", "AI_CORE", "kernel")
    assert json.loads(matmul["input_shapes"]) == [[2, 3], [3, 4]]
    assert json.loads(matmul["input_dtypes"]) == ["FLOAT16", "FLOAT16"]
    args = json.loads(matmul["args"])
    assert args["block_dim"] == 8 and args["aicore_time(us)"] == 28.1 and args["Task Id"] == 5
    assert rows(slices, name="Add_1")[0]["task_type"] == "AI_VECTOR_CORE"


def test_op_statistic_of_the_tables_equals_msprofs_own(planted):
    tables = read_msprof_dir(planted)
    ours = {r["op_type"]: (r["count"], r["total_ns"])
            for r in ops.op_statistic(tables).to_pylist() if r["task_type"] not in ("HCCL", "EVENT_RECORD")}
    theirs = {r["op_type"]: (int(r["count"]), int(Decimal(r["Total Time(us)"]) * 1000))
              for r in json.loads(tables.meta_dict()["msprof_op_statistic"])}
    assert ours == theirs == {"MatMul": (2, 50500), "Add": (1, 4250)}
    assert {r["API Name"] for r in json.loads(tables.meta_dict()["msprof_api_statistic"])} == {"aclnnMatmul",
                                                                                                "aclnnAdd"}


def test_cann_calls_launch_their_tasks_and_steps_come_from_the_step_trace(planted):
    tables = read_msprof_dir(planted)
    slices = tables.slices
    by_id = {r["id"]: r for r in slices.to_pylist()}
    launched = sorted((by_id[f["src_id"]]["name"], by_id[f["dst_id"]]["name"]) for f in tables.flows.to_pylist())
    assert launched == [("AscendCL@aclnnAdd", "Add_1"), ("AscendCL@aclnnMatmul", "MatMul_0"),
                        ("AscendCL@aclnnMatmul", "MatMul_2"), ("Hccl@hcom_allReduce", "hcom_allReduce__1_0_1")]
    trace = steps.step_trace(tables).to_pylist()
    assert [(r["step"], r["start_ns"], r["iteration_ns"]) for r in trace] == [
        (1, ns("0"), 150_000), (2, ns("150"), 250_000)]
    assert {r["name"]: r["step"] for r in slices.to_pylist() if r["name"] in
            ("MatMul_0", "Add_1", "MatMul_2", "hcom_allReduce__1_0_1")} == {
        "MatMul_0": 1, "Add_1": 1, "MatMul_2": 2, "hcom_allReduce__1_0_1": 2}
    phases = rows(slices, name="FP_BP Time 1")[0]
    assert (phases["kind"], phases["start_ns"], phases["dur_ns"]) == ("annotation", ns("10"), 110_000)


def test_slices_are_read_in_slice_order_even_when_their_stamps_run_backwards(planted):
    tables = read_msprof_dir(planted)
    assert rows(tables.slices, kind="step") == [rows(tables.slices, name=f"Iteration {n}")[0] for n in (1, 2)]
    files = [Path(p).name for p in json.loads(tables.meta_dict()["source_files"])]
    timeline = [f for f in files if f.startswith("msprof_slice")]
    assert timeline == ["msprof_slice_0_20250109120010.json", "msprof_slice_1_20250109115959.json"]
    assert all(p.is_file() for p in msprof_sources(planted))


def test_memory_in_kb_becomes_bytes(planted):
    tables = read_msprof_dir(planted)
    series = {t["track_id"]: t["name"] for t in tables.tracks.to_pylist() if t["kind"] == "counter"}
    values = {}
    for sample in tables.counters.to_pylist():
        values.setdefault(series[sample["track_id"]], []).append(sample["value"])
    assert values["npu.mem.app.ddr_bytes"] == [1536.0, 2048.0]
    assert values["npu.mem.app.hbm_bytes"] == [1024.0 ** 2, 2 * 1024.0 ** 2]
    assert values["APP/DDR bytes"] == [2048.0]                         # the timeline's NPU MEM counter, KB


def test_task_time_stands_in_without_timeline_and_op_summary(planted):
    for path in (planted / OUT).glob("msprof_slice_*.json"):
        path.unlink()
    for path in (planted / OUT).glob("op_summary_*.csv"):
        path.unlink()
    tables = read_msprof_dir(planted)
    assert_valid(tables)
    tasks = {r["name"]: (r["kind"], r["task_type"], r["start_ns"], r["dur_ns"], r["step"])
             for r in tables.slices.to_pylist() if r["kind"] == "kernel"}
    assert tasks == {"MatMul_0": ("kernel", "AI_CORE", ns("20.125"), 30500, 1),
                     "Add_1": ("kernel", "AI_VECTOR_CORE", ns("100.001"), 4250, 1)}


def test_a_missing_required_column_names_the_file_and_the_column(planted):
    path = next((planted / OUT).glob("op_summary_slice_1_*.csv"))
    header, *lines = path.read_text().splitlines()
    path.write_text("\n".join([header.replace("Task Start Time(us)", "Start")] + lines) + "\n")
    with pytest.raises(InputError, match=r"op_summary_slice_1_20250109115959\.csv: missing required column "
                                         r"start_us \(as 'Start Time\(us\)' or 'Task Start Time\(us\)'"):
        read_msprof_dir(planted)


def test_an_unknown_column_is_kept_and_a_missing_optional_one_tolerated(planted):
    path = next((planted / OUT).glob("op_summary_slice_0_*.csv"))
    header, *lines = path.read_text().splitlines()
    header = header.replace("Input Data Types", "Brand New Metric")           # unknown; dtypes now absent
    path.write_text("\n".join([header] + lines) + "\n")
    matmul = rows(read_msprof_dir(planted).slices, name="MatMul_0")[0]
    assert json.loads(matmul["args"])["Brand New Metric"] == "FLOAT16;FLOAT16"
    assert matmul["input_dtypes"] is None and json.loads(matmul["input_shapes"]) == [[2, 3], [3, 4]]


def test_a_truncated_timeline_keeps_its_valid_part_with_a_warning(planted):
    path = next((planted / OUT).glob("msprof_slice_1_*.json"))
    text = path.read_text()
    path.write_text(text[:text.index('"MatMul_2"') + 30])                   # cut inside MatMul_2's event
    tables = read_msprof_dir(planted)
    assert_valid(tables)
    names = set(tables.slices["name"].to_pylist())
    assert {"MatMul_0", "Add_1", "AscendCL@aclnnMatmul"} <= names and "EVENT_RECORD" not in names
    warnings = json.loads(tables.meta_dict()["parse_warnings"])
    assert any(w.startswith("msprof_slice_1_") and ("truncated" in w or "kept the events before" in w)
               for w in warnings), warnings


def test_what_is_and_is_not_an_msprof_directory(planted, tmp_path, shared_data):
    assert is_msprof_dir(planted)
    assert all(is_msprof_dir(shared_data / LEGACY / d) for d in LEGACY_DIRS)
    ours = tmp_path / "PROF_20250101000000000_1_abcd"
    (ours / "device_0").mkdir(parents=True)
    (ours / "manifest.json").write_text("{}")
    assert not is_msprof_dir(ours)                                        # perfsight's own run
    assert not is_msprof_dir(shared_data / LEGACY) and not is_msprof_dir(tmp_path)
    empty = tmp_path / "PROF_000002_20250101000000000_EMPTYDIRECTORYAB"
    (empty / "device_0" / "data").mkdir(parents=True)
    with pytest.raises(InputError) as error:
        read_msprof_dir(empty)
    assert str(error.value) == (f"{empty}: an msprof PROF_ directory (holding device_0/) without exports: no "
                                "mindstudio_profiler_output/ (msprof --export=on), device_*/timeline or summary, nor "
                                "msprof_*.db")
    with pytest.raises(InputError, match="not an msprof PROF_ directory"):
        read_msprof_dir(ours)


def test_without_a_timeline_task_time_is_the_record_and_op_summary_completes_it(planted):
    """task_time is the scheduler's record of every task: its durations stand (MatMul_0 31.04 us where
    op_summary says 30.5) and its tasks op_summary does not list stay (an EVENT_RECORD); op_summary adds
    what it knows (op types, shapes)."""
    for path in (planted / OUT).glob("msprof_slice_*.json"):
        path.unlink()
    task_time = next((planted / OUT).glob("task_time_*.csv"))
    text = task_time.read_text().replace(',30.5,"', ',31.04,"')
    task_time.write_text(text + f'0,EVENT_RECORD,EVENT_RECORD,2,8,0.02,"{Decimal(T0) + 250}\t",'
                                f'"{Decimal(T0) + Decimal("250.02")}\t"\n')
    tables = read_msprof_dir(planted)
    assert_valid(tables)
    tasks = {r["name"]: (r["kind"], r["op_type"], r["dur_ns"], r["input_shapes"] is not None)
             for r in tables.slices.to_pylist() if r["kind"] not in ("step", "annotation")}
    assert tasks == {"MatMul_0": ("kernel", "MatMul", 31040, True), "Add_1": ("kernel", "Add", 4250, True),
                     "EVENT_RECORD": ("sync", None, 20, False)}
    # and the task_time perfsight exports lists what msprof's did, with its durations
    assert [(r["name"], r["dur_ns"]) for r in ops.task_time(tables).to_pylist()] == [
        ("MatMul_0", 31040), ("Add_1", 4250), ("EVENT_RECORD", 20)]


def test_the_runtimes_own_task_is_no_operator(planted):
    """TASK_TIMEOUT_SET, a task the runtime runs on a stream before the model, here 15 ms before the first
    operator: not an operator, not computation, so op_statistic and the device's span (from its first
    operator) are what they are without it."""
    without = read_msprof_dir(planted)
    before = (ops.op_statistic(without).to_pylist(), breakdown.temporal_breakdown(without).to_pylist())
    timeline = next((planted / OUT).glob("msprof_slice_1_*.json"))
    events = json.loads(timeline.read_text())
    events.append({"name": "TASK_TIMEOUT_SET", "pid": 200, "tid": 2, "ts": f"{Decimal(T0) - 15000}", "dur": 1.5,
                   "ph": "X", "args": {"Model Id": 4294967295, "Task Type": "TASK_TIMEOUT_SET", "Stream Id": 2,
                                       "Task Id": 1, "Batch Id": 0}})
    timeline.write_text(json.dumps(events))
    tables = read_msprof_dir(planted)
    [task] = tables.slices.filter(pc.equal(tables.slices["name"], "TASK_TIMEOUT_SET")).to_pylist()
    assert (task["kind"], task["task_type"]) == ("other", "TASK_TIMEOUT_SET")
    assert (ops.op_statistic(tables).to_pylist(), breakdown.temporal_breakdown(tables).to_pylist()) == before


def test_a_prof_directory_holding_only_its_text_export_is_read(planted, tmp_path):
    """As people share it: PROF_*/mindstudio_profiler_output/ alone (no device_N/, no host/) is an msprof
    directory with the same device tasks and steps; a PROF_GROUP_* folder of such directories is a job of them."""
    whole = read_msprof_dir(planted)
    group = tmp_path / "PROF_GROUP_0001"
    for n in range(2):
        shared = shutil.copytree(planted, group / f"{planted.name[:-1]}{n}")
        shutil.rmtree(shared / "device_0")
        shutil.rmtree(shared / "host")
    text_only = group / f"{planted.name[:-1]}0"
    assert is_msprof_dir(text_only) and not is_msprof_dir(group)
    alone = read_msprof_dir(text_only)
    assert_valid(alone)

    def tasks(tables):
        device = tables.slices.filter(pc.is_valid(tables.slices["task_type"])).sort_by("start_ns")
        return list(zip(*(device[c].to_pylist() for c in ("name", "start_ns", "dur_ns", "task_type"))))

    assert tasks(alone) == tasks(whole) and len(tasks(whole)) > 0
    assert steps.step_trace(alone).column("iteration_ns").to_pylist() == \
        steps.step_trace(whole).column("iteration_ns").to_pylist()
    assert [run.path for run in find_runs(group)] == sorted(group.iterdir())


#: op_summary's column sets: the task columns, then the PMU columns of each --aic-metrics setting (msprof's own
#: export headers, Device_id first); 21 columns without PMU metrics to 46 with PipeUtilization's
TASK_COLUMNS = ("Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,OP State,Task Type,Task Start Time(us),"
                "Task Duration(us),Task Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,Input Shapes,"
                "Input Data Types,Input Formats,Output Shapes,Output Data Types,Output Formats,Context ID")
PMU_COLUMNS = {
    "none": "",
    "ArithmeticUtilization": "aicore_time(us),aic_total_cycles,aic_mac_fp16_ratio,aic_mac_int8_ratio,aic_cube_fops,"
                             "aiv_time(us),aiv_total_cycles,aiv_vec_fp32_ratio,aiv_vec_fp16_ratio,aiv_vec_int32_ratio,"
                             "aiv_vec_misc_ratio,aiv_vector_fops",
    "L2Cache": "aicore_time(us),aic_total_cycles,aic_write_cache_hit,aic_write_cache_miss_allocate,"
               "aic_r0_read_cache_hit,aic_r0_read_cache_miss_allocate,aic_r1_read_cache_hit,"
               "aic_r1_read_cache_miss_allocate,aiv_time(us),aiv_total_cycles,aiv_write_cache_hit,"
               "aiv_write_cache_miss_allocate,aiv_r0_read_cache_hit,aiv_r0_read_cache_miss_allocate,"
               "aiv_r1_read_cache_hit,aiv_r1_read_cache_miss_allocate",
    "Memory": "aicore_time(us),aic_total_cycles,aic_l1_read_bw(GB/s),aic_l1_write_bw(GB/s),"
              "aic_main_mem_read_bw(GB/s),aic_main_mem_write_bw(GB/s),aic_l2_read_bw(GB/s),aic_l2_write_bw(GB/s),"
              "aiv_time(us),aiv_total_cycles,aiv_ub_read_bw(GB/s),aiv_ub_write_bw(GB/s),aiv_main_mem_read_bw(GB/s),"
              "aiv_main_mem_write_bw(GB/s),aiv_l2_read_bw(GB/s),aiv_l2_write_bw(GB/s)",
    "MemoryL0": "aicore_time(us),aic_total_cycles,aic_l0a_read_bw(GB/s),aic_l0a_write_bw(GB/s),aic_l0b_read_bw(GB/s),"
                "aic_l0b_write_bw(GB/s),aic_l0c_read_bw_cube(GB/s),aic_l0c_write_bw_cube(GB/s),aiv_time(us),"
                "aiv_total_cycles,aiv_l0c_read_bw(GB/s),aiv_l0c_write_bw(GB/s)",
    "MemoryUB": "aicore_time(us),aic_total_cycles,aic_ub_read_bw_scalar(GB/s),aic_ub_write_bw_scalar(GB/s),"
                "aiv_time(us),aiv_total_cycles,aiv_ub_read_bw_vector(GB/s),aiv_ub_write_bw_vector(GB/s),"
                "aiv_ub_read_bw_scalar(GB/s),aiv_ub_write_bw_scalar(GB/s)",
    "PipeUtilization": "aicore_time(us),aic_total_cycles,aic_mac_time(us),aic_mac_ratio,aic_scalar_time(us),"
                       "aic_scalar_ratio,aic_mte1_time(us),aic_mte1_ratio,aic_mte2_time(us),aic_mte2_ratio,"
                       "aic_fixpipe_time(us),aic_fixpipe_ratio,aic_icache_miss_rate,aiv_time(us),aiv_total_cycles,"
                       "aiv_vec_time(us),aiv_vec_ratio,aiv_scalar_time(us),aiv_scalar_ratio,aiv_mte2_time(us),"
                       "aiv_mte2_ratio,aiv_mte3_time(us),aiv_mte3_ratio,aiv_icache_miss_rate,cube_utilization(%)",
    "ResourceConflictRatio": "aicore_time(us),aic_total_cycles,aiv_time(us),aiv_total_cycles,"
                             "aiv_vec_bankgroup_cflt_ratio,aiv_vec_bank_cflt_ratio,aiv_vec_resc_cflt_ratio",
}
#: the older spellings: msprof's "not compatible" header (Model Name, Infer ID) and Block Num for Block Dim
OLDER_TASK_COLUMNS = TASK_COLUMNS.replace("Model ID,", "Model Name,Model ID,").replace(
    "Stream ID,", "Stream ID,Infer ID,").replace("Block Dim,Mix Block Dim", "Block Num,Mix Block Num")


@pytest.mark.parametrize("task_columns", [TASK_COLUMNS, OLDER_TASK_COLUMNS], ids=["current", "older"])
@pytest.mark.parametrize("metrics", sorted(PMU_COLUMNS))
def test_every_op_summary_column_set_completes_the_tasks(planted, metrics, task_columns):
    """Whatever --aic-metrics chose, op_summary's task columns complete the timeline's tasks and every PMU
    column reaches the task's args with its exact value."""
    header = [*task_columns.split(","), *filter(None, PMU_COLUMNS[metrics].split(","))]
    assert len(header) in range(21, 49)
    tasks = {"MatMul_0": ("MatMul", "AI_CORE", "20.125", "30.5"), "Add_1": ("Add", "AI_VECTOR_CORE", "100.001", "4.25"),
             "MatMul_2": ("MatMul", "AI_CORE", "200.999", "20.0")}
    pmu = {column: f"{n}.25" for n, column in enumerate(header[len(task_columns.split(",")):])}
    lines: list[list[str]] = []
    for name, (op_type, task_type, start, duration) in tasks.items():
        values = {"Device_id": "0", "Model Name": "graph", "Model ID": "4294967295", "Task ID": "5", "Stream ID": "2",
                  "Infer ID": "1", "Op Name": name, "OP Type": op_type, "OP State": "static", "Task Type": task_type,
                  "Task Start Time(us)": f"{Decimal(T0) + Decimal(start)}\t", "Task Duration(us)": duration,
                  "Task Wait Time(us)": "0", "Block Dim": "8", "Block Num": "8", "Mix Block Dim": "0",
                  "Mix Block Num": "0", "HF32 Eligible": "NO", "Input Shapes": '"2,3;3,4"',
                  "Input Data Types": "FLOAT16;FLOAT16", "Input Formats": "ND;ND", "Output Shapes": '"2,4"',
                  "Output Data Types": "FLOAT16", "Output Formats": "ND", "Context ID": "N/A", **pmu}
        lines.append([values[column] for column in header])
    for path in (planted / OUT).glob("op_summary_*.csv"):
        path.unlink()
    with open(planted / OUT / "op_summary_20250109120010.csv", "w", newline="") as file:
        csv.writer(file, lineterminator="\n").writerows([header, *lines])
    tables = read_msprof_dir(planted)
    assert_valid(tables)
    for name, (op_type, task_type, _, _) in tasks.items():
        (task,) = rows(tables.slices, name=name)
        args = json.loads(task["args"])
        assert (task["op_type"], task["task_type"], task["kind"], args["block_dim"]) == (
            op_type, task_type, "kernel", 8)
        assert json.loads(task["input_shapes"]) == [[2, 3], [3, 4]]
        assert {column: args[column] for column in pmu} == {column: float(value) for column, value in pmu.items()}


# --- the real older PROF_ directories (per-iteration timelines) -------------------------------------------

def _overlap_rows(path: Path) -> dict[str, Decimal]:
    """msprof's own Overlap Analysis totals of one per-iteration timeline (us)."""
    events = json.loads(path.read_text(), parse_float=Decimal)
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e["name"] == "thread_name"}
    totals: dict[str, Decimal] = {}
    for e in events:
        if e.get("ph") == "X" and processes.get(e["pid"]) == "Overlap Analysis":
            name = threads[(e["pid"], e["tid"])]
            totals[name] = totals.get(name, Decimal(0)) + Decimal(e["dur"])
    return totals


@pytest.mark.parametrize("name", LEGACY_DIRS)
def test_real_per_iteration_timelines_match_msprofs_own_figures(shared_data, name):
    prof = shared_data / LEGACY / name
    tables = read_msprof_dir(prof)
    assert_valid(tables)
    device = int(next(prof.glob("device_*")).name.split("_")[1])
    assert json.loads(tables.meta_dict()["rank"]) == device                  # info.json's rank_id
    timeline = next(prof.glob("device_*/timeline"))
    # step times: the step_trace JSON's Iteration Time(ns), each iteration
    step_file = json.loads(next(timeline.glob("step_trace_*_1.json")).read_text(), parse_float=Decimal)
    expected = {e["args"]["Iteration ID"]: int(e["args"]["Iteration Time(ns)"])
                for e in step_file if e.get("cat") == "Iteration Time"}
    trace = steps.step_trace(tables)
    assert dict(zip(trace["step"].to_pylist(), trace["iteration_ns"].to_pylist())) == expected
    # computation and communication per iteration: msprof's Overlap Analysis rows of that iteration's file
    overlap = {r["step"]: r for r in breakdown.overlap(tables).to_pylist() if r["step"] is not None}
    for step, row in overlap.items():
        theirs = _overlap_rows(next(timeline.glob(f"msprof_*_{step}.json")))
        assert row["computation_ns"] == int(theirs["Computing"] * 1000), step
        assert row["communication_ns"] == int(theirs["Communication"] * 1000), step
        assert row["pure_communication_ns"] == int(theirs["Communication(Not Overlapped)"] * 1000), step


def test_real_monotonic_timeline_is_shifted_to_the_epoch(shared_data):
    prof = shared_data / LEGACY / LEGACY_DIRS[0]
    tables = read_msprof_dir(prof)
    start = json.loads((prof / "device_0" / "start_info.0").read_text())
    offset = int(start["collectionTimeBegin"]) * 1000 - int(start["clockMonotonicRaw"])
    first = rows(tables.slices, name="Iteration 1")[0]
    assert first["kind"] == "step" and first["start_ns"] == 56635864652490 + offset   # ts 56635864652.490005 us
    assert tables.meta_dict()["base_time_ns"] == str(offset)
    assert 1692340024 < first["start_ns"] // 10 ** 9 < 1692340083                 # inside the collection


# --- a database-only directory ----------------------------------------------------------------------------

def test_database_only_directory_reads_through_the_profiler_database_reader(shared_data, tmp_path):
    prof = tmp_path / "PROF_000001_20250109120000000_DATABASEONLYDIR"
    (prof / "device_1" / "data").mkdir(parents=True)
    database = prof / "msprof_20250109120500.db"
    shutil.copy(shared_data / DB_RANK1, database)
    with sqlite3.connect(database) as con:                                 # msprof writes no PyTorch tables
        for table in ("PYTORCH_API", "PYTORCH_CALLCHAINS", "CONNECTION_IDS", "OP_MEMORY", "MEMORY_RECORD"):
            con.execute(f"DROP TABLE {table}")
        expected = dict(con.execute("""
            SELECT o.value, count(*) FROM COMPUTE_TASK_INFO c JOIN TASK t USING (globalTaskId)
            JOIN STRING_IDS o ON o.id = c.opType GROUP BY o.value""").fetchall())
        [(launches,)] = con.execute(_LAUNCHED_DEVICE_SLICES).fetchall()
    tables = read_msprof_dir(prof)
    assert_valid(tables)
    assert tables.meta_dict()["source_format"] == "msprof"
    kernels = tables.slices.filter(pc.equal(tables.slices["kind"], "kernel"))
    counted: dict[str, int] = {}
    for op_type in kernels["op_type"].drop_null().to_pylist():
        counted[op_type] = counted.get(op_type, 0) + 1
    assert {k: v for k, v in counted.items() if k in expected} == expected
    assert launches == 241
    assert tables.flows["kind"].to_pylist() == ["launch"] * launches              # no PyTorch tables: launches only
    by_id = {row["id"]: row for row in tables.slices.select(["id", "kind", "correlation_id"]).to_pylist()}
    for flow in tables.flows.to_pylist():
        source, target = by_id[flow["src_id"]], by_id[flow["dst_id"]]
        assert source["kind"] == "runtime" and target["kind"] in ("kernel", "comm", "memcpy", "sync", "other")
        assert source["correlation_id"] == target["correlation_id"]


#: The device slices a CANN_API call launched (same connectionId), counted straight from the database: the
#: computing tasks, the tasks without info other than FFTS+/HCCL launch containers, and the communication
#: operators; not the HCCL plane steps (their operator has the flow) (torch_npu_db_device's rules).
_LAUNCHED_DEVICE_SLICES = """
WITH launched AS (SELECT * FROM TASK WHERE connectionId IN (SELECT connectionId FROM CANN_API)),
info AS (SELECT globalTaskId FROM COMPUTE_TASK_INFO UNION SELECT globalTaskId FROM COMMUNICATION_TASK_INFO)
SELECT (SELECT count(*) FROM launched WHERE globalTaskId IN (SELECT globalTaskId FROM COMPUTE_TASK_INFO))
     + (SELECT count(*) FROM launched t WHERE globalTaskId NOT IN (SELECT globalTaskId FROM info)
        AND NOT (contextId = 4294967295 AND EXISTS (
            SELECT 1 FROM TASK u JOIN info i USING (globalTaskId) WHERE u.deviceId = t.deviceId
            AND u.streamId = t.streamId AND u.taskId = t.taskId AND u.connectionId = t.connectionId
            AND u.contextId <> 4294967295)))
     + (SELECT count(*) FROM COMMUNICATION_OP WHERE connectionId IN (SELECT connectionId FROM CANN_API))
"""
