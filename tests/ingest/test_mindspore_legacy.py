"""MindSpore's flat profiler folder (MindInsight's input): the real samples of ../shared/data (MindInsight's
test files: each rank's files describe different networks, so they are checked file by file) and planted
folders whose files agree with each other."""
from __future__ import annotations

import csv
import json
import statistics
from decimal import Decimal
from pathlib import Path

import pytest

import perfsight
from perfsight.analysis import data, dynamic_shape, flops, ops, steps
from perfsight.core import layout
from perfsight.core.errors import InputError
from perfsight.ingest.ascend.detect import is_mindspore_legacy_dir, ranks_in
from perfsight.ingest.ascend.formats import MindSporeLegacyReader
from perfsight.ingest.ascend.mindspore_legacy import legacy_sources, read_mindspore_legacy
from perfsight.ingest.common.reader import RunSource
from tests.conftest import copy_shared
from tests.ingest.ascend_planted import assert_valid, rows

PROFILER = "ascend/mindspore_legacy/profiler"
RESOURCE = "ascend/mindspore_legacy/resource"


def csv_rows(path: Path) -> list[dict]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file, skipinitialspace=True))


def series(tables, name: str) -> list[tuple[int, float]]:
    track = next(t["track_id"] for t in tables.tracks.to_pylist() if t["name"] == name)
    return [(c["ts_ns"], c["value"]) for c in tables.counters.to_pylist() if c["track_id"] == track]


# --- the real samples ---------------------------------------------------------------------------------

def test_the_folder_holds_three_ranks_read_one_at_a_time(shared_data):
    folder = shared_data / PROFILER
    assert is_mindspore_legacy_dir(folder) and ranks_in(folder) == [0, 1, 10]
    assert ranks_in(shared_data / RESOURCE) == [0, 1, 2, 3]
    with pytest.raises(InputError, match=r"holds the files of ranks 0, 1, 10; read one at a time"):
        read_mindspore_legacy(folder)
    with pytest.raises(InputError, match="holds no files of rank 7"):
        read_mindspore_legacy(folder, rank=7)
    for rank in ranks_in(folder):
        tables = read_mindspore_legacy(folder, rank=rank)
        assert_valid(tables)
        assert json.loads(tables.meta_dict()["rank"]) == rank and json.loads(tables.meta_dict()["parse_warnings"]) == []
        assert set(tables.tracks["rank"].to_pylist()) == {rank}
        assert set(json.loads(tables.meta_dict()["source_files"])) <= {str(p) for p in legacy_sources(folder, rank)}


@pytest.mark.parametrize("rank", [0, 10])
def test_step_times_equal_step_trace_raw(shared_data, rank):
    path = shared_data / PROFILER / f"step_trace_raw_{rank}_detail_time.csv"
    expected = [r for r in csv_rows(path) if r["step_num"] != "-"]
    trace = steps.step_trace(read_mindspore_legacy(shared_data / PROFILER, rank=rank))
    assert trace["step"].to_pylist() == [int(r["step_num"]) for r in expected]
    assert trace["iteration_ns"].to_pylist() == [int(r["total"]) * 10 for r in expected]   # 10 ns ticks
    assert trace["start_ns"].to_pylist() == [int(r["start_point"]) * 10 for r in expected]
    phases = steps.step_trace(read_mindspore_legacy(shared_data / PROFILER, rank=rank),
                              fp_point="fp_and_bp", bp_point="fp_and_bp")
    assert phases["fp_bp_ns"].to_pylist() == [int(r["fp_and_bp"]) * 10 for r in expected]
    assert phases["tail_ns"].to_pylist() == [int(r["tail"]) * 10 for r in expected]
    waits = data.data_wait(read_mindspore_legacy(shared_data / PROFILER, rank=rank))
    assert waits["data_wait_ns"].to_pylist() == [int(r["iteration_interval"]) * 10 for r in expected]


def test_aicore_detail_becomes_each_ops_executions(shared_data):
    folder = shared_data / PROFILER
    tables = read_mindspore_legacy(folder, rank=1)
    meta = tables.meta_dict()
    assert json.loads(meta["synthetic_times"]) == ["npu:1 AI_CORE (no timestamps)"]
    by_name = {r["name"]: (r["count"], r["total_ns"]) for r in ops.op_statistic(tables, by="name").to_pylist()}
    expected = {r["full_kernel_time"]: (int(r["execution_frequency"]),
                                        int(Decimal(r["execution_time"]) * 1_000_000) * int(r["execution_frequency"]))
                for r in csv_rows(folder / "aicore_intermediate_1_detail.csv")}
    assert by_name == expected
    conv = rows(tables.slices, name="Default/network-WithLossCell/_backbone-LeNet5/conv1-Conv2d/Conv2D-op13")[0]
    assert (conv["op_type"], conv["task_type"], conv["kind"], conv["step"]) == ("Conv2D", "AI_CORE", "kernel", None)
    assert json.loads(conv["input_shapes"]) == [[32, 1, 32, 32, 16], [25, 1, 16, 16]]     # framework_raw op_info
    assert json.loads(conv["args"])["block_dim"] == "32"
    # the sample's type file is not its detail file's sum (the detail is cut short); kept verbatim in meta
    assert json.loads(meta["mindspore_op_type_statistic"])[-1] == {
        "kernel_type": "MatMul", "total_time": "1.085", "count": "9", "percent": "73.80"}


def test_flops_come_from_flops_txt_per_execution(shared_data):
    tables = read_mindspore_legacy(shared_data / PROFILER, rank=1)
    matmul = {r["op_type"]: r for r in flops.op_flops(tables).to_pylist()}["MatMul"]
    assert (matmul["count"], matmul["flops"]) == (1, (333 + 333) * 10 ** 6)            # cube + vector MFLOPs


def test_queues_and_cpu_utilisation_become_counters(shared_data):
    folder = shared_data / PROFILER
    tables = read_mindspore_legacy(folder, rank=0)
    pipeline = {r["op_id"]: r for r in csv_rows(folder / "minddata_pipeline_raw_0.csv")}
    shuffle = series(tables, "minddata host pipeline Shuffle#1 output_queue")
    assert [v for _, v in shuffle] == json.loads(pipeline["1"]["output_queue_size"])
    assert [t for t, _ in shuffle] == [0, 10_000_000, 20_000_000]                     # sample_interval 10 ms
    assert series(tables, "minddata host_queue size") == [(10_000_000, 0.0)]          # type 1 line
    assert series(tables, "minddata batch_time_ns") == [(10_000_000, 4_000_000.0)]
    queues = data.queue_sizes(tables)
    assert set(queues["queue"].to_pylist()) == {"host"}
    assert json.loads(tables.meta_dict()["mindspore_host_queue_capacity"]) == 64
    assert [v for _, v in series(tables, "minddata cpu device user_utilization")] == [10.0, 20.0, 30.0]
    resource = read_mindspore_legacy(shared_data / RESOURCE, rank=2)
    assert [v for _, v in series(resource, "minddata host pipeline Shuffle#1 output_queue")] == [60.0] * 4


def test_dynamic_shape_info_gives_steps_and_shapes(shared_data):
    path = shared_data / PROFILER / "dynamic_shape_info_0.json"
    tables = read_mindspore_legacy(shared_data / PROFILER, rank=0)
    expected: dict[tuple[int, str], int] = {}
    for entries in json.loads(path.read_text())["operator"].values():
        for e in entries:
            key = (e["step"], e["op_type"])
            expected[key] = expected.get(key, 0) + int(round(e["dur"] * 1000))
    by_step = dynamic_shape.op_time_by_step(tables, kinds=["kernel"])      # the file lists no communication
    assert {(r["step"], r["op_type"]): r["total_ns"] for r in by_step.to_pylist()} == expected
    shapes = {(r["op_type"], r["step"]): r["shapes"] for r in dynamic_shape.op_shapes_by_step(tables).to_pylist()}
    assert shapes[("Add", 1)] == ["[[32, 1], [32, 1]]"]
    # the sample timeline's three ops (other names than the dynamic shape file's) are read with their times
    get_next = rows(tables.slices, name="GetNext")[0]
    assert (get_next["task_type"], get_next["start_ns"], get_next["dur_ns"]) == ("AI_CPU", 6_042_139_000, 518_000)


# --- planted folders whose files agree --------------------------------------------------------------------

FRAMEWORK = ('task_id,stream_id,block_dim,full_kernel_name,op_name,kernel_name,kernel_type,subgraph,op_info\n'
             '1,5,32,Default/Conv2D-op1,Default/Conv2D-op1,Conv2D-op1,Conv2D,Default,"{""input_0"": {""format"": '
             '""NC1HWC0"", ""data_type"": ""NUMBER_TYPE_FLOAT16"", ""shape"": ""8,1,28,28,16""}}"\n'
             '2,5,8,Default/MatMul-op2,Default/MatMul-op2,MatMul-op2,MatMul,Default,\n'
             '3,5,8,Gradients/MatMul-op3,Gradients/MatMul-op3,MatMul-op3,MatMul,Gradients,\n')
DETAIL = ("full_kernel_name,execution_time,execution_frequency\n"
          "Default/Conv2D-op1,0.05,2\nDefault/MatMul-op2,0.12,2\nGradients/MatMul-op3,0.08,2\n")
TYPES = "kernel_type,total_time,execution_frequency,percent\nConv2D,0.1,2,20.0\nMatMul,0.4,4,80.0\n"
STEP_TRACE = ("step_num,start_point,end_point,total,fp_point,bp_point,iteration_interval,fp_and_bp,tail,"
              "stream_7_parallel_0_start_point,stream_7_parallel_0_end_point,stream_7_parallel_0\n"
              "1,1000,3000,2000,1000,2500,0,1500,500,2600,2900,300\n"
              "2,3000,5500,2500,3400,5000,400,1600,500,5100,5400,300\n"
              "3,5500,7500,2000,5500,7000,0,1500,500,0,0,0\n"
              "-,2000,4250,2250,2200,3750,200,1550,500,3850,4150,300\n")
FLOPS = ("full_kernel_name, MFLOPs(10^6 cube), GFLOPS(10^9 cube), FLOPS utilization(cube), MFLOPs(10^6 vector), "
         "GFLOPS(10^9 vector), FLOPS utilization(vec)\n"
         "Default/Conv2D-op1, 12.5, 250, 10, 0.5, 10, 1\n")


@pytest.fixture
def planted(tmp_path) -> Path:
    folder = tmp_path / "profiler"
    folder.mkdir()
    for name, text in (("framework_raw_3.csv", FRAMEWORK), ("aicore_intermediate_3_detail.csv", DETAIL),
                       ("aicore_intermediate_3_type.csv", TYPES), ("step_trace_raw_3_detail_time.csv", STEP_TRACE),
                       ("flops_3.txt", FLOPS), ("device_queue_profiling_3.txt", "1 64 1 3\n1 64 2 0\n0 1 2 7\n")):
        (folder / name).write_text(text)
    return folder


def test_planted_op_types_total_the_type_file(planted):
    tables = read_mindspore_legacy(planted)
    assert_valid(tables)
    ours = {r["op_type"]: (r["count"], r["total_ns"])        # the type file counts AI Core operators only
            for r in ops.op_statistic(tables, kinds=["kernel"]).to_pylist()}
    theirs = {r["kernel_type"]: (int(r["execution_frequency"]), int(Decimal(r["total_time"]) * 1_000_000))
              for r in csv_rows(planted / "aicore_intermediate_3_type.csv")}
    assert ours == theirs == {"Conv2D": (2, 100_000), "MatMul": (4, 400_000)}
    conv = rows(tables.slices, name="Default/Conv2D-op1")
    assert [c["flops"] for c in conv] == [13_000_000, 13_000_000]                        # 12.5 + 0.5 MFLOPs
    assert json.loads(conv[0]["input_dtypes"]) == ["NUMBER_TYPE_FLOAT16"]


def test_planted_step_trace_phases_and_reduces(planted):
    tables = read_mindspore_legacy(planted)
    trace = steps.step_trace(tables).to_pylist()            # the reader's meta names its phase slices
    assert trace == steps.step_trace(tables, fp_point="fp_and_bp", bp_point="fp_and_bp").to_pylist()
    assert [(r["step"], r["start_ns"], r["iteration_ns"], r["fp_bp_ns"], r["tail_ns"], r["gap_ns"])
            for r in trace] == [(1, 10_000, 20_000, 15_000, 5_000, 0), (2, 30_000, 25_000, 16_000, 5_000, 4_000),
                                (3, 55_000, 20_000, 15_000, 5_000, 0)]
    gap = rows(tables.slices, name="iteration_interval")
    assert [(g["kind"], g["start_ns"], g["dur_ns"], g["step"]) for g in gap] == [("dataloader", 30_000, 4_000, 2)]
    # the all-reduce spans are communication on the device (step 3 had none: MindInsight wrote 0s)
    reduces = rows(tables.slices, name="AllReduce stream_7_parallel_0")
    assert [(r["start_ns"], r["dur_ns"], r["step"], r["kind"], r["task_type"], r["op_type"]) for r in reduces] == [
        (26_000, 3_000, 1, "comm", "HCCL", "AllReduce"), (51_000, 3_000, 2, "comm", "HCCL", "AllReduce")]
    assert json.loads(reduces[0]["args"]) == {"Collective name": "allreduce"}
    lane = rows(tables.tracks, track_id=reduces[0]["track_id"])[0]
    assert (lane["name"], lane["kind"], lane["device"]) == ("npu:3 stream 7 (step trace all-reduce)", "stream",
                                                            "npu:3")
    assert series(tables, "minddata host_queue size") == [(1, 3.0), (2, 0.0)]          # no time: batch number
    assert series(tables, "minddata batch_time_ns") == [(2, 7_000_000.0)]


def test_a_run_without_a_rank_is_the_folders_one_rank_for_its_sources_and_cache(planted, shared_data):
    # read_mindspore_legacy reads the one rank of a folder when none is given; the reader's sources (the cache's
    # fingerprint) and cache folder must be that rank's too, not [] and "..._rankNone" (a cache never stale)
    reader = MindSporeLegacyReader()
    unranked, rank_3 = RunSource(reader, planted), RunSource(reader, planted, 3)
    assert unranked.sources() == rank_3.sources() == sorted(planted.iterdir())
    assert unranked.cache_dir == rank_3.cache_dir == planted / f"{layout.CACHE_DIR}_rank3"
    assert unranked.default_output_dir == rank_3.default_output_dir
    several = RunSource(reader, shared_data / PROFILER)
    for where in (several.sources, lambda: several.cache_dir):
        with pytest.raises(InputError, match=r"holds the files of ranks 0, 1, 10; read one at a time"):
            where()


def test_a_missing_required_column_names_the_file_and_the_column(planted):
    (planted / "step_trace_raw_3_detail_time.csv").write_text(STEP_TRACE.replace("fp_point", "fp"))
    with pytest.raises(InputError, match=r"step_trace_raw_3_detail_time\.csv: missing required column fp_point"):
        read_mindspore_legacy(planted)


def test_planted_timeline_joins_the_dynamic_shape_file(planted):
    timeline = [
        {"name": "process_name", "ph": "M", "pid": 3, "tid": 0, "args": {"name": "AI Core Op"}},
        {"name": "Add-op6", "ph": "X", "pid": 3, "tid": "5", "ts": 100.0, "dur": 2.5,
         "args": {"type": "Add", "fullname": "Default/Add-op6"}},
        {"name": "Add-op6", "ph": "X", "pid": 3, "tid": "5", "ts": 200.0, "dur": 3.0,
         "args": {"type": "Add", "fullname": "Default/Add-op6"}},
        {"name": "GetNext-op7", "ph": "X", "pid": 9000, "tid": "0", "ts": 90.0, "dur": 1.0,
         "args": {"type": "GetNext", "fullname": "Default/GetNext-op7"}},
        {"name": "Overlap", "ph": "X", "pid": 12000, "tid": "7999", "ts": 90.0, "dur": 1.0},
    ]
    dynamic = {"operator": {
        "1": [{"step": 1, "op_side": "aicore", "op_type": "Add", "op_name": "Add-op6", "dur": 2.5,
               "shape_info": ["[4, 1]", "[4, 1]"]}],
        "2": [{"step": 2, "op_side": "aicore", "op_type": "Add", "op_name": "Add-op6", "dur": 3.0,
               "shape_info": ["[8, 1]", "[8, 1]"]},
              {"step": 2, "op_side": "aicpu", "op_type": "Cast", "op_name": "Cast-op9", "dur": 1.5,
               "shape_info": ["[8]"]}]}}
    (planted / "ascend_timeline_display_3.json").write_text(json.dumps(timeline))
    (planted / "dynamic_shape_info_3.json").write_text(json.dumps(dynamic))
    tables = read_mindspore_legacy(planted)
    assert_valid(tables)
    adds = rows(tables.slices, name="Default/Add-op6")
    assert [(a["start_ns"], a["dur_ns"], a["step"], a["task_type"]) for a in adds] == [
        (100_000, 2_500, 1, "AI_CORE"), (200_000, 3_000, 2, "AI_CORE")]
    assert rows(tables.slices, name="Default/GetNext-op7")[0]["task_type"] == "AI_CPU"
    assert "Overlap" not in tables.slices["name"].to_pylist()
    cast = rows(tables.slices, name="Cast-op9")[0]                     # listed only in the dynamic shape file
    assert (cast["step"], cast["dur_ns"], cast["task_type"]) == (2, 1_500, "AI_CPU")
    assert json.loads(tables.meta_dict()["synthetic_times"]) == ["npu:3 AI_CPU (no timestamps)"]
    shapes = {(r["op_type"], r["step"]): (r["shapes"], r["dynamic"])
              for r in dynamic_shape.op_shapes_by_step(tables).to_pylist()}
    assert shapes[("Add", 1)] == (["[[4, 1], [4, 1]]"], True) and shapes[("Add", 2)] == (["[[8, 1], [8, 1]]"], True)


def test_the_step_trace_all_reduces_are_each_rank_s_communication(shared_data, tmp_path):
    """MindSpore 1.x's step trace is the only record of a legacy job's communication: read as annotations, it
    left 0% communication. Each step's communication is the union of its stream_S_parallel_P spans (spans of
    two streams overlap), computed here from the file's ticks (10 ns) alone."""
    folder = copy_shared(shared_data / PROFILER, tmp_path / "profiler")
    run = perfsight.open(folder)
    by_step = {(r["rank"], r["step"]): r["communication_ns"] for r in run.step_breakdown().to_pylist()}
    for rank in (0, 10):
        expected = {}
        for row in csv_rows(folder / f"step_trace_raw_{rank}_detail_time.csv"):
            if row["step_num"] == "-":
                continue
            spans = sorted((int(row[c]) * 10, int(row[c[:-len("start_point")] + "end_point"]) * 10)
                           for c in row if c.startswith("stream_") and c.endswith("_start_point") and int(row[c]))
            covered, reach = 0, 0
            for start, end in spans:
                covered += max(0, end - max(start, reach))
                reach = max(reach, end)
            expected[(rank, int(row["step_num"]))] = covered
        assert {key: by_step[key] for key in expected} == expected
        assert sum(expected.values()) > 0
    # the oracle, from the files' end_point ticks alone: each rank's median step from step end to step end over
    # the steps both ranks have (their 40 ms first steps have no previous end): they agree within 0.1 ms, so
    # the ranks are even, and the all-reduces, matched by order, name no straggler
    ends = {rank: {int(row["step_num"]): int(row["end_point"]) * 10
                   for row in csv_rows(folder / f"step_trace_raw_{rank}_detail_time.csv") if row["step_num"] != "-"}
            for rank in (0, 10)}
    common = sorted(set(ends[0]) & set(ends[10]))
    medians = {rank: statistics.median(ends[rank][step] - ends[rank][step - 1] for step in common[1:])
               for rank in ends}
    assert abs(medians[0] - medians[10]) < 100_000
    assert {r["rank"]: r["median_step_ns"] for r in run.rank_pace().to_pylist()} == medians
    [verdict] = run.slowest_rank().to_pylist()
    assert verdict["even"] and verdict["straggler_rank"] is None, verdict["reason"]
