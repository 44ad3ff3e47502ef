"""Ascend rank folders that hold only part of what the profiler writes, and damaged rows (issue 16): copies
of the real torch_npu level1 samples (../shared/data/ascend/torch_npu) with files deleted or cut.

* a rank with only profiler_info / profiler_metadata / step_trace_time.csv / communication.json /
  communication_matrix.json / analysis.db is read (its HCCL operators from communication.json, steps from
  step_trace_time.csv), alone and inside a job, whose warnings say per rank what it lacks;
* steps come from the best source present (ProfilerStep ranges, kernel_details.csv's Step Id,
  step_trace_time.csv), and a run without step ranges says what its folder lacks;
* a ragged CSV row, a damaged communication.json record or a .db value of the wrong type costs that row;
* a bare profiler database, or a folder holding only one, is a run."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pyarrow.compute as pc
import pytest

import perfsight
from perfsight.analysis import collectives
from perfsight.analysis.advisor import advise
from perfsight.analysis.steps import no_steps_reason, step_trace
from perfsight.core.errors import InputError
from perfsight.ingest import find_runs
from perfsight.ingest.ascend.ascend_csv import read_csv
from perfsight.ingest.ascend.detect import is_torch_npu_dir
from perfsight.ingest.ascend.formats import TorchNpuReader
from perfsight.ingest.ascend.torch_npu_db import read_torch_npu_db
from perfsight.ingest.ascend.torch_npu_text import read_torch_npu_text
from tests.conftest import SHARED_DATA, copy_shared

TORCH_NPU = SHARED_DATA / "ascend" / "torch_npu"
TEXT = TORCH_NPU / "text" / "level1"
DB = TORCH_NPU / "db" / "level1"
#: what msprof-analyze's cluster text mode needs of a rank, and all a "partial" rank keeps
CLUSTER_FILES = ("step_trace_time.csv", "communication.json", "communication_matrix.json", "analysis.db")
#: rank 1's four all-reduces in communication.json: Start Timestamp(us) and Elapse Time(ms) as exact ns
RANK1_OPERATORS = [("hcom_allReduce__586_0_1", 1736408883737849200, 73475168, 50),
                   ("hcom_allReduce__586_1_1", 1736408883811328800, 2280146, 50),
                   ("hcom_allReduce__586_2_1", 1736408883813612200, 2395388, 50),
                   ("hcom_allReduce__586_3_1", 1736408883816011200, 22224584, 50)]
PARTIAL_WARNING = ("no kernel_details.csv, no trace_view.json: no kernels or operators; steps from "
                   "step_trace_time.csv, communication from communication.json")

pytestmark = pytest.mark.skipif(not TEXT.is_dir(), reason=f"the Ascend samples are not at {TEXT}")


def rank_copy(target: Path, rank: int, *, as_rank: int | None = None, keep: tuple[str, ...] | None = None) -> Path:
    """A copy of text/level1's rank folder at ``target`` (its profiler_info saying ``as_rank``), keeping only
    the ``keep`` files of ASCEND_PROFILER_OUTPUT (analysis.db from the db export's same rank) when given."""
    copy_shared(TEXT / f"rank{rank}_ascend_pt", target)
    output = target / "ASCEND_PROFILER_OUTPUT"
    if keep is not None:
        for path in output.iterdir():
            if path.name not in keep:
                path.unlink()
        if "analysis.db" in keep:
            shutil.copy(DB / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "analysis.db", output)
    if as_rank is not None and as_rank != rank:
        info = target / f"profiler_info_{rank}.json"
        document = json.loads(info.read_text())
        info.unlink()
        (target / f"profiler_info_{as_rank}.json").write_text(json.dumps({**document, "rank_id": as_rank}))
    return target


def warnings_of(tables) -> list[str]:
    """The run's warnings but the one every rank of these samples gives alone (its HCCL group stays group-local:
    no parallel_group_info; tests/ingest/test_global_ranks.py tests it)."""
    return [w for w in json.loads(tables.meta_dict()["parse_warnings"]) if not w.startswith("communication groups ")]


def comm_slices(tables) -> list[tuple]:
    comm = tables.slices.filter(pc.equal(tables.slices["kind"], "comm")).sort_by("start_ns")
    return list(zip(*(comm[c].to_pylist() for c in ("name", "start_ns", "dur_ns", "step"))))


# --- a rank with only what msprof-analyze's cluster mode needs -------------------------------------------

def test_a_rank_without_kernels_or_trace_is_recognised_and_read_alone(tmp_path):
    folder = rank_copy(tmp_path / "rank1_ascend_pt", 1, keep=CLUSTER_FILES)
    assert is_torch_npu_dir(folder) and TorchNpuReader().runs_at(folder)
    tables = perfsight.open(folder, use_cache=False).tables
    meta = tables.meta_dict()
    assert comm_slices(tables) == RANK1_OPERATORS
    tracks = tables.tracks.to_pylist()
    assert [(t["kind"], t["name"], t["rank"]) for t in tracks] == [("stream", "npu:0 HCCL", 1)]
    assert warnings_of(tables) == [PARTIAL_WARNING]
    assert meta["step_source"] == "step_trace_time.csv"
    assert json.loads(meta["step_trace_time"]) == [{
        "Step": 50, "Computing": 8878.295000000006, "Communication(Not Overlapped)": 96359.047,
        "Overlapped": 4016.2390000000014, "Communication": 100375.28600000001, "Free": 26675.27399999998,
        "Stage": 131912.5, "Bubble": 0.0, "Communication(Not Overlapped and Exclude Receive)": 96359.047,
        "Preparing": 20433.25}]
    # the operators' communication time is the step trace's Communication (100375.286 us) to the ns
    assert sum(dur for _, _, dur, _ in comm_slices(tables)) == 100_375_286
    assert json.loads(meta["lacking_files"]) == ["trace_view.json", "kernel_details.csv", "memory_record.csv",
                                                 "operator_memory.csv", "npu_module_mem.csv"]


def test_the_partial_ranks_collectives_carry_what_the_cluster_analysis_reads(tmp_path):
    tables = read_torch_npu_text(rank_copy(tmp_path / "r1", 1, keep=CLUSTER_FILES))
    rows = collectives.collectives(tables).to_pylist()
    assert [(r["rank"], r["source"], r["collective"], r["dur_ns"], r["process_group"]) for r in rows] == [
        (1, "device", "allreduce", dur, "17522688603477080586") for _, _, dur, _ in RANK1_OPERATORS]
    args = json.loads(tables.slices["args"][0].as_py())
    recorded = json.loads((TEXT / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
    entry = recorded["step50"]["collective"]["hcom_allReduce__586_0_1@17522688603477080586"]
    assert args["Communication Time Info"] == entry["Communication Time Info"]
    assert args["Communication Bandwidth Info"] == entry["Communication Bandwidth Info"]
    assert args["Collective name"] == "allreduce" and args["Process Group Name"] == "17522688603477080586"


def test_a_job_of_four_ranks_two_of_them_partial_opens_as_four_ranks(tmp_path):
    job = tmp_path / "job"
    for rank in (0, 1):
        rank_copy(job / f"rank{rank}_ascend_pt", rank)
        rank_copy(job / f"rank{rank + 2}_ascend_pt", rank, as_rank=rank + 2, keep=CLUSTER_FILES)
    assert len(find_runs(job)) == 4
    tables = perfsight.open(job, use_cache=False).tables
    meta = tables.meta_dict()
    assert json.loads(meta["ranks"]) == [0, 1, 2, 3]
    warnings = json.loads(meta["parse_warnings"])
    assert [w for w in warnings if PARTIAL_WARNING in w] == [f"rank 2: {PARTIAL_WARNING}", f"rank 3: {PARTIAL_WARNING}"]
    assert any(w.startswith("rank 0: trace_view.json: 382 Overlap Analysis events") for w in warnings)
    by_rank = json.loads(meta["rank_meta"])
    assert [by_rank[str(r)]["step_source"] for r in range(4)] == ["trace", "trace", "step_trace_time.csv",
                                                                   "step_trace_time.csv"]
    operations = collectives.collectives(tables).to_pylist()
    assert [sum(1 for c in operations if c["rank"] == r) for r in range(4)] == [4, 4, 4, 4]
    assert [c["dur_ns"] for c in operations if c["rank"] == 3] == [dur for _, _, dur, _ in RANK1_OPERATORS]


def test_a_partial_rank_gives_its_step_breakdown_from_what_its_profiler_reported(tmp_path):
    """Rank 1 pruned to the cluster files keeps its step in the job's breakdown, from its step_trace_time.csv
    (Computing 8878.295000000006, Communication(Not Overlapped) 96359.047, Stage 131912.5, Bubble 0, Preparing
    20433.25 us), beside rank 0's computed from its trace; the Cluster page's comparison holds both ranks."""
    job = tmp_path / "job"
    rank_copy(job / "rank0_ascend_pt", 0)
    rank_copy(job / "rank1_ascend_pt", 1, keep=CLUSTER_FILES)
    run = perfsight.open(job, use_cache=False)
    rows = {row["rank"]: row for row in run.step_breakdown().to_pylist()}
    assert sorted(rows) == [0, 1] and rows[0]["source"] == "trace"
    assert {k: v for k, v in rows[1].items() if v} == {
        "rank": 1, "step": 50, "step_ns": 152_345_750, "compute_ns": 8_878_295, "communication_ns": 96_359_047,
        "idle_ns": 152_345_750 - 8_878_295 - 96_359_047, "source": "step_trace_time.csv"}
    assert [(r["rank"], r["steps"], r["step_ns"]) for r in run.mean_step_by_rank().to_pylist()] == [
        (0, 1, rows[0]["step_ns"]), (1, 1, 152_345_750)]
    assert [r["rank"] for r in run.rank_breakdown().to_pylist()] == [0, 1]
    # its computation was not recorded: unknown, not 0, so no overlap figures and no "100% exposed" advice
    assert sorted({r["rank"] for r in run.overlap().to_pylist()}) == [0]
    advice = advise(run.tables).to_pylist()
    exposed = [a for a in advice if a["rule"] == "communication_not_overlapped"]
    assert [a["finding"][:8] for a in exposed] == ["rank 0: "]
    # nor a device timeline: its device holds only the communication operators, so its compute (0%) and idle
    # time (the rest) would be made up; the advisor says nothing of them
    assert [r["rank"] for r in run.temporal_breakdown().to_pylist()] == [0]
    assert not [a for a in advice if a["rule"] == "low_device_utilisation" and "rank 1" in a["finding"]]


def test_a_torch_npu_folder_with_none_of_the_files_says_what_it_is_and_what_it_lacks(tmp_path):
    folder = tmp_path / "job" / "rank5_ascend_pt"
    (folder / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    shutil.copy(TEXT / "rank0_ascend_pt" / "profiler_info_0.json", folder)
    lacks = ("ASCEND_PROFILER_OUTPUT/ lacks trace_view.json, kernel_details.csv, step_trace_time.csv, "
             "communication.json, communication_matrix.json, memory_record.csv, operator_memory.csv, "
             "npu_module_mem.csv and a profiler database (ascend_pytorch_profiler_N.db, msprof_N.db)")
    with pytest.raises(InputError) as alone:
        find_runs(folder)
    assert str(alone.value) == (f"{folder}: a torch_npu profiler folder (holding ASCEND_PROFILER_OUTPUT/, "
                                f"profiler_info_0.json) without any file perfsight reads: {lacks}")
    with pytest.raises(InputError) as parent:
        find_runs(folder.parent)
    assert str(parent.value).startswith(f"{folder.parent}: holds no run perfsight can read: rank5_ascend_pt is a "
                                        "torch_npu profiler folder")
    with pytest.raises(InputError, match="without any file perfsight reads"):
        read_torch_npu_text(folder)


# --- steps from the best source ----------------------------------------------------------------------------

def test_without_the_trace_steps_come_from_the_kernels_step_id(tmp_path):
    folder = rank_copy(tmp_path / "r0", 0)
    (folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").unlink()
    tables = read_torch_npu_text(folder)
    assert tables.meta_dict()["step_source"] == "kernel_details Step Id"
    step = tables.slices.filter(pc.equal(tables.slices["kind"], "step")).to_pylist()
    # from the first task's start (1736408883704643212) less the Preparing torch_npu reports for the step
    # (17902.5 us) to the last task's end: Stage + Preparing, as every rank's steps are
    assert [(s["name"], s["start_ns"], s["dur_ns"], s["step"]) for s in step] == [
        ("Iteration 50", 1736408883704643212 - 17902500, 136581009 + 17902500, 50)]
    track = tables.tracks.filter(pc.equal(tables.tracks["track_id"], step[0]["track_id"])).to_pylist()[0]
    assert (track["kind"], track["name"], track["device"]) == ("thread", "Steps (kernel_details.csv Step Id)",
                                                                "npu:0")
    trace = step_trace(tables).to_pylist()
    # torch_npu's own step trace says Stage 136581.0 + Preparing 17902.5 us for step 50: the same span, to the us
    assert [(r["rank"], r["step"], r["iteration_ns"]) for r in trace] == [(0, 50, 136581009 + 17902500)]
    assert no_steps_reason(tables) is None
    assert warnings_of(tables)[-1] == ("no trace_view.json: no host operators, CANN calls, counters or launch "
                                       "flows; device tasks from kernel_details.csv; steps from kernel_details "
                                       "Step Id")


@pytest.mark.parametrize("rank", [0, 1])
def test_a_step_is_one_thing_whichever_file_gives_it(tmp_path, rank):
    """A rank's step from its ProfilerStep range (155.986 and 153.888 ms here) and the same rank's step from
    kernel_details.csv without the trace (Stage + Preparing: 154.484 and 152.346 ms) agree within 1.1%, where
    the task span alone (the Stage) was 12% short: every rank of a job is measured alike."""
    whole = step_trace(read_torch_npu_text(TEXT / f"rank{rank}_ascend_pt")).column("iteration_ns").to_pylist()
    folder = rank_copy(tmp_path / f"r{rank}", rank)
    (folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").unlink()
    from_kernels = step_trace(read_torch_npu_text(folder)).column("iteration_ns").to_pylist()
    assert len(whole) == len(from_kernels) == 1
    assert from_kernels[0] == pytest.approx(whole[0], rel=0.011)


def test_the_report_says_once_what_a_step_is(tmp_path):
    """A job of a rank with its trace and a rank with kernel_details.csv alone: one definition, said once."""
    from io import StringIO

    from rich.console import Console

    from perfsight.analysis.summary import run_summary
    from perfsight.ingest.ascend.torch_npu_steps import STEP_DEFINITION
    from perfsight.views.terminal import print_summary

    job = tmp_path / "job"
    rank_copy(job / "rank0_ascend_pt", 0)
    (rank_copy(job / "rank1_ascend_pt", 1) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").unlink()
    summary = run_summary(perfsight.open(job, use_cache=False).tables)
    assert summary["step_definitions"] == [STEP_DEFINITION]
    out = StringIO()
    print_summary("job", summary, Console(file=out, width=200))
    assert out.getvalue().count(f"steps: {STEP_DEFINITION}") == 1


def test_a_truncated_kernel_details_gives_way_to_the_reported_steps(tmp_path):
    """kernel_details.csv cut to its first 21 rows (and no communication.json, whose operators would span the
    step) spans a sliver of step 50, far from the Stage torch_npu reported (131.9125 ms on rank 1): the reported
    step stands, as the ranks kept whole have it (Stage + Preparing), and the warning names both figures; the
    tasks keep their Step Id."""
    folder = rank_copy(tmp_path / "r1", 1)
    output = folder / "ASCEND_PROFILER_OUTPUT"
    (output / "trace_view.json").unlink()
    (output / "communication.json").unlink()
    lines = (output / "kernel_details.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    (output / "kernel_details.csv").write_text("".join(lines[:22]), encoding="utf-8")
    tables = read_torch_npu_text(folder)
    assert tables.meta_dict()["step_source"] == "step_trace_time.csv"
    assert tables.slices.filter(pc.equal(tables.slices["kind"], "step")).num_rows == 0
    [said] = [w for w in warnings_of(tables) if w.startswith("kernel_details.csv and step_trace_time.csv disagree")]
    assert said == ("kernel_details.csv and step_trace_time.csv disagree beyond 10% on step 50: tasks 5.169 ms, "
                    "Stage 131.912 ms: the steps are step_trace_time.csv's (no times of day), the tasks keep their "
                    "Step Id")
    rows = perfsight.open(folder, use_cache=False).step_breakdown().to_pylist()
    assert [(r["step"], r["step_ns"], r["source"]) for r in rows] == [(50, 152_345_750, "step_trace_time.csv")]


def test_with_the_trace_its_profiler_steps_are_the_steps(tmp_path):
    tables = read_torch_npu_text(TEXT / "rank0_ascend_pt")
    meta = tables.meta_dict()
    assert meta["step_source"] == "trace" and meta["lacking_files"] is None
    assert json.loads(meta["step_trace_time"])[0]["Stage"] == 136581.0
    assert tables.tracks.filter(pc.equal(tables.tracks["name"], "Steps (kernel_details.csv Step Id)")).num_rows == 0


def test_no_steps_says_what_the_folder_lacks_not_the_schedule(tmp_path):
    tables = read_torch_npu_text(rank_copy(tmp_path / "r1", 1, keep=CLUSTER_FILES))
    reason = no_steps_reason(tables)
    assert reason == ("no steps: the profile lacks trace_view.json and kernel_details.csv, where step ranges come "
                      "from (ProfilerStep#N ranges, the device tasks' Step Id); step times, the step breakdown and "
                      "the data verdict need them; its per-step figures are torch_npu's own step_trace_time.csv "
                      "(meta step_trace_time); the figures cover the whole profile")
    assert "schedule" not in reason


# --- damage read around ------------------------------------------------------------------------------------

def _cut_last_field(path: Path, line: int) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[line - 1] = lines[line - 1].rsplit(b",", 1)[0]
    path.write_bytes(b"\n".join(lines))


def test_a_ragged_kernel_details_row_costs_that_row_only(tmp_path):
    folder = rank_copy(tmp_path / "r0", 0)
    _cut_last_field(folder / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", 57)
    tables = read_torch_npu_text(folder)
    assert warnings_of(tables)[0] == "kernel_details.csv: 1 row not read: line 57 has 45 fields (the header has 46)"
    complete = read_torch_npu_text(TEXT / "rank0_ascend_pt")
    assert tables.slices.num_rows == complete.slices.num_rows         # the task is the trace's; its details lost
    assert pc.sum(pc.is_valid(tables.slices["op_type"])).as_py() == \
        pc.sum(pc.is_valid(complete.slices["op_type"])).as_py() - 1


def test_a_job_holding_a_rank_with_a_ragged_row_opens(tmp_path):
    job = tmp_path / "job"
    for rank in (0, 1):
        rank_copy(job / f"rank{rank}_ascend_pt", rank)
    _cut_last_field(job / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", 10)
    meta = perfsight.open(job, use_cache=False).tables.meta_dict()
    assert json.loads(meta["ranks"]) == [0, 1]
    assert "rank 1: kernel_details.csv: 1 row not read: line 10 has 45 fields (the header has 46)" in \
        json.loads(meta["parse_warnings"])


def test_every_ascend_csv_reader_reads_around_ragged_rows(tmp_path):
    folder = rank_copy(tmp_path / "r0", 0)
    output = folder / "ASCEND_PROFILER_OUTPUT"
    _cut_last_field(output / "memory_record.csv", 3)        # APP,...,NPU:0 -> a row of 6 fields
    memory = output / "memory_record.csv"
    memory.write_bytes(memory.read_bytes() + b"PTA,1736408883999999.000\t,1,2,3,,NPU:0,extra\n")
    tables = read_torch_npu_text(folder)
    assert ("memory_record.csv: 2 rows not read: line 3 has 6 fields, line 1006 has 8 fields (the header has 7)"
            in warnings_of(tables))
    assert tables.memory.num_rows == read_torch_npu_text(TEXT / "rank0_ascend_pt").memory.num_rows


def test_ragged_rows_are_found_by_line_past_fields_spanning_lines(tmp_path):
    path = tmp_path / "operator_details.csv"
    path.write_text('Name,Call Stack,Count\naten::add,"a.py(1): f\nb.py(2): g",1\naten::mul,2\naten::mm,x,3\n')
    warnings: list[str] = []
    assert read_csv(path, warnings)["name"].to_pylist() == ["aten::add", "aten::mm"]
    assert warnings == ["operator_details.csv: 1 row not read: line 4 has 2 fields (the header has 3)"]
    with pytest.raises(InputError, match=r"operator_details.csv: 1 row not read: line 4 has 2 fields"):
        read_csv(path)                                      # without a warnings list: an error saying the same


def test_a_communication_record_that_is_not_an_object_costs_that_record(tmp_path):
    folder = rank_copy(tmp_path / "r1", 1, keep=CLUSTER_FILES)
    path = folder / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    document = json.loads(path.read_text())
    document["step50"]["collective"]["hcom_allReduce__586_1_1@17522688603477080586"] = [1, 2]
    del document["step50"]["collective"]["hcom_allReduce__586_2_1@17522688603477080586"][
        "Communication Time Info"]["Start Timestamp(us)"]
    path.write_text(json.dumps(document))
    tables = read_torch_npu_text(folder)
    assert comm_slices(tables) == [RANK1_OPERATORS[0], RANK1_OPERATORS[3]]
    assert warnings_of(tables)[:2] == [
        "communication.json: 1 record not read (1 x an operator record that is not an object)",
        "communication.json: 1 operator without a numeric Start Timestamp(us) and Elapse Time(ms): not on the "
        "timeline"]


def test_a_database_value_of_the_wrong_type_costs_that_row(tmp_path):
    path = tmp_path / "ascend_pytorch_profiler_0.db"
    shutil.copy(DB / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / path.name, path)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE TASK SET startNs = 'abc' WHERE rowid = (SELECT min(t.rowid) FROM TASK t "
                    "JOIN COMPUTE_TASK_INFO USING (globalTaskId))")
    tables = read_torch_npu_db(path)
    assert tables.slices.num_rows == 3709 - 1
    assert ("ascend_pytorch_profiler_0.db: table TASK: 1 row not read, holding a value not of its column's type "
            "(1 in startNs)") in warnings_of(tables)


# --- a bare profiler database ------------------------------------------------------------------------------

def test_a_bare_database_and_a_folder_holding_only_one_are_runs(tmp_path):
    source = DB / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    bare = tmp_path / "ascend_pytorch_profiler_0.db"
    shutil.copy(source, bare)
    (tmp_path / "only").mkdir()
    shutil.copy(source, tmp_path / "only" / "msprof_0.db")     # msprof --type=db: the same schema
    for path in (bare, tmp_path / "only", tmp_path / "only" / "msprof_0.db"):
        runs = find_runs(path)
        assert [run.reader.name for run in runs] == ["torch_npu"]
        tables = perfsight.open(path, use_cache=False).tables
        assert tables.slices.num_rows == 3709 and json.loads(tables.meta_dict()["rank"]) == 0
    # a bare database's cache and exports go beside it, as a trace file's
    run = find_runs(bare)[0]
    assert (run.cache_dir, run.default_output_dir) == (tmp_path / "ascend_pytorch_profiler_0.db.perfsight_cache",
                                                       tmp_path / "perfsight_output" / "ascend_pytorch_profiler_0")


def test_a_folder_of_several_databases_is_a_job_of_their_ranks(tmp_path):
    for rank in (0, 1):
        shutil.copy(DB / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / f"ascend_pytorch_profiler_{rank}.db",
                    tmp_path)
    assert [run.path.name for run in find_runs(tmp_path)] == ["ascend_pytorch_profiler_0.db",
                                                              "ascend_pytorch_profiler_1.db"]
    assert json.loads(perfsight.open(tmp_path, use_cache=False).tables.meta_dict()["ranks"]) == [0, 1]
