"""read_torch_npu_text on the real torch_npu samples (../shared/data/ascend/torch_npu/text, level0-2, two
ranks of one job) and on damaged or incomplete copies of them: what each file becomes in the canonical
tables, exact times, links, communication groups, memory, and clear errors."""
from __future__ import annotations

import csv
import json
import os
import shutil
from collections import Counter
from decimal import Decimal
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from perfsight.analysis import collectives, ops
from perfsight.analysis.job_summaries import job_of
from perfsight.core.errors import InputError
from perfsight.core.tables import SCHEMAS
from perfsight.ingest.ascend.ascend_kinds import api_kind, collective_name, process_role, task_kind, torch_dtype
from perfsight.ingest.ascend.detect import is_torch_npu_dir
from perfsight.ingest.ascend.torch_npu_text import read_torch_npu_text
from perfsight.ingest.common.chrome_json import TraceStream
from perfsight.ingest.jobs import merge
from tests.conftest import SHARED_DATA, copy_shared

TEXT = SHARED_DATA / "ascend" / "torch_npu" / "text"
FIXTURE_TRACE = TEXT.parents[1] / "msprof_analyze_fixtures" / "ut" / "advisor" / "timeline_advice" / "trace_view.json"
RUNS = [f"{level}/rank{rank}_ascend_pt" for level in ("level0", "level1", "level2") for rank in (0, 1)]
LEVEL1 = "level1/rank0_ascend_pt"

pytestmark = pytest.mark.skipif(not TEXT.is_dir(), reason=f"the Ascend samples are not at {TEXT}")


@lru_cache(maxsize=None)
def read(run: str):
    return read_torch_npu_text(TEXT / run)


def rows(table, **where) -> list[dict]:
    return [r for r in table.to_pylist() if all(r[k] == v for k, v in where.items())]


def output_csv(run: str, name: str) -> list[dict]:
    with open(TEXT / run / "ASCEND_PROFILER_OUTPUT" / name, newline="", encoding="utf-8") as file:
        return list(csv.DictReader(file))


def copy_run(tmp_path: Path, run: str = LEVEL1, keep: tuple[str, ...] | None = None) -> Path:
    """A writable copy of a sample (only the ``keep`` files of its ASCEND_PROFILER_OUTPUT when given)."""
    target = tmp_path / "copy_ascend_pt"
    copy_shared(TEXT / run, target)
    if keep is not None:
        for path in (target / "ASCEND_PROFILER_OUTPUT").iterdir():
            if path.name not in keep:
                path.unlink()
    return target


# --- every sample reads into valid tables ---------------------------------------------------------------

@pytest.mark.parametrize("run", RUNS)
def test_every_level_and_rank_reads_into_the_canonical_tables(run):
    tables = read(run)
    for name, table in tables.items():
        assert table.schema == SCHEMAS[name], name
    slices, meta = tables.slices, tables.meta_dict()
    rank = int(run[-len("_ascend_pt") - 1])
    assert meta["source_format"] == "torch_npu" and json.loads(meta["rank"]) == rank
    assert set(tables.tracks["rank"].to_pylist()) == {rank}
    assert pc.count_distinct(slices["id"]).as_py() == slices.num_rows
    assert set(slices["parent_id"].drop_null().to_pylist()) <= set(slices["id"].to_pylist())
    kinds = set(slices["kind"].to_pylist())
    assert {"cpu_op", "python", "step", "kernel", "comm", "memcpy"} <= kinds
    assert ("runtime" in kinds) == (not run.startswith("level0"))       # level0 records no CANN calls
    streams = tables.tracks.filter(pc.equal(tables.tracks["kind"], "stream"))
    assert set(streams["device"].to_pylist()) == {f"npu:{rank}"}     # memory_record.csv's NPU:N
    assert rows(slices, kind="step")[0]["name"] == "ProfilerStep#50"
    assert set(slices.filter(pc.is_in(slices["kind"], pa.array(["kernel", "comm"])))["step"].to_pylist()) == {50}
    warnings = json.loads(meta["parse_warnings"])
    assert all("Overlap Analysis" in w or "made siblings" in w or "group-local ranks" in w for w in warnings), warnings


def test_times_are_exact_nanoseconds_from_the_microsecond_strings():
    slices = read(LEVEL1).slices
    step = rows(slices, name="ProfilerStep#50")[0]
    assert (step["start_ns"], step["dur_ns"]) == (1736408883686740710, 155985800)   # "...686740.710", 155985.8
    task = rows(slices, name="trans_TransData_0")[0]
    assert (task["start_ns"], task["dur_ns"]) == (1736408883704643212, 53741)         # dur 53.7410625 us
    hccl = rows(slices, name="hcom_allReduce__586_0_1")[0]
    assert (hccl["start_ns"], hccl["dur_ns"]) == (1736408883732241564, 79089520)     # 79089.52021875 us


# --- what each source becomes --------------------------------------------------------------------------

def test_kernel_details_complete_the_device_tasks():
    tables = read(LEVEL1)
    details = output_csv(LEVEL1, "kernel_details.csv")
    tasks = tables.slices.filter(pc.is_valid(tables.slices["op_type"]))
    assert tasks.num_rows == len(details)                  # every row joined to its task
    task = rows(tasks, name="trans_TransData_0")[0]
    assert (task["op_type"], task["task_type"], task["step"]) == ("TransData", "AI_VECTOR_CORE", 50)  # trace: AI_CORE
    assert task["input_shapes"] == "[[32, 3, 224, 224]]" and task["input_dtypes"] == '["FLOAT"]'
    args = json.loads(task["args"])
    assert args["block_dim"] == 32 and args["Task Type"] == "AI_CORE" and args["output_shapes"] == "32,1,224,224,8"
    conv = rows(tasks, name="Conv2D1")[0]
    assert json.loads(conv["input_shapes"]) == [[32, 1, 224, 224, 8], [121, 4, 16, 8], [64]]


def test_host_operators_carry_shapes_and_link_to_their_device_tasks():
    tables = read(LEVEL1)
    op = next(r for r in rows(tables.slices, kind="cpu_op") if r["name"] == "aten::_convolution"
              and r["input_shapes"].startswith("[[32, 3, 224, 224]"))
    assert json.loads(op["input_shapes"])[:3] == [[32, 3, 224, 224], [64, 3, 11, 11], [64]]
    assert json.loads(op["input_dtypes"])[:3] == ["float", "float", "float"]
    instances = ops.op_instances(tables)
    launched = [r for r in instances.to_pylist() if r["task_type"] != "HCCL"]
    assert sum(r["launch_op"] is not None for r in launched) >= 0.95 * len(launched)   # torch_to_npu flows


def test_cann_calls_launch_the_device_tasks():
    tables = read(LEVEL1)
    by_id = {r["id"]: r for r in tables.slices.to_pylist()}
    launches = rows(tables.flows, kind="launch")
    sources = {by_id[f["src_id"]]["name"].split("@")[0] for f in launches}
    assert {"Node", "AscendCL"} <= sources
    node = next(f for f in launches if by_id[f["dst_id"]]["name"] == "trans_TransData_0")
    assert by_id[node["src_id"]]["name"] == "Node@launch"
    assert by_id[node["src_id"]]["correlation_id"] == by_id[node["dst_id"]]["correlation_id"] == 953
    assert len(rows(tables.flows, kind="fwdbwd")) == 27
    stack = [r["name"] for r in ops.call_stack(tables, node["dst_id"]).to_pylist()]
    assert stack[-2:] == ["Node@launch", "trans_TransData_0"] and stack[0].startswith("AscendCL@")


def test_hccl_operators_are_communication_their_parts_are_not_counted_twice():
    slices = read(LEVEL1).slices
    comm = rows(slices, kind="comm", task_type="HCCL")
    assert [r["name"] for r in comm] == [f"hcom_allReduce__586_{i}_1" for i in range(4)]
    parts = slices.filter(pc.is_in(slices["task_type"], pa.array(["Notify_Wait", "SDMA", "Notify Wait", "Write Value",
                                                                 "Memcpy"])))
    assert set(parts["kind"].to_pylist()) == {"other"}


def test_communication_operators_carry_what_the_cluster_analysis_reads():
    found = collectives.collectives(read(LEVEL1)).to_pylist()
    assert [r["collective"] for r in found] == ["allreduce"] * 4
    first = found[0]
    assert first["source"] == "device" and first["dtype"] == "float32" and first["in_nelems"] == 4097000
    assert first["in_bytes"] == 4 * 4097000 and first["process_group"] == "17522688603477080586"
    assert first["group_ranks"] == list(range(8)) and first["group_size"] == 8      # the matrix's local ranks
    comm = rows(read(LEVEL1).slices, name="hcom_allReduce__586_0_1")[0]
    info = json.loads(comm["args"])["Communication Time Info"]
    assert info["Elapse Time(ms)"] == pytest.approx(79.08952021875)


def test_two_ranks_merge_into_one_job_with_a_communication_matrix():
    job = merge([(run, read(run)) for run in ("level1/rank0_ascend_pt", "level1/rank1_ascend_pt")])
    matrix = collectives.communication_pairs(job_of(job)).to_pylist()
    # the 8-rank group has no parallel_group_info: ranks 0 and 1 are placed in it (their self-links), its
    # six other members are group-local positions only, whose traffic goes to an unknown peer (null)
    assert {(r["src_rank"], r["dst_rank"]) for r in matrix} == {(r, p) for r in (0, 1) for p in (0, 1, None)}
    cell = next(r for r in matrix if (r["src_rank"], r["dst_rank"]) == (1, 0))
    # rank 1's communication_matrix.json, allreduce-total "1-0", as reported (MB x 1e6, ms x 1e6)
    path = TEXT / "level1" / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json"
    link = json.loads(path.read_text())["step50"]["collective"]["allreduce-total@17522688603477080586"]["1-0"]
    assert (cell["transport"], cell["transit_bytes"], cell["transit_ns"]) == (
        "HCCS", round(link["Transit Size(MB)"] * 1e6), round(link["Transit Time(ms)"] * 1e6))
    assert cell["bandwidth_gbps"] == pytest.approx(link["Bandwidth(GB/s)"], rel=1e-4)
    assert json.loads(job.meta_dict()["world_size"]) == 8


def test_parallel_group_info_maps_group_local_ranks_to_global_ranks(tmp_path):
    run = copy_run(tmp_path)
    group = {"group_name": "dp", "group_rank": 0, "global_ranks": [0, 8, 16, 24, 32, 40, 48, 56]}
    metadata = json.loads((run / "profiler_metadata.json").read_text())
    (run / "profiler_metadata.json").write_text(json.dumps({**metadata, "parallel_group_info": {
        "17522688603477080586": group}}))
    found = collectives.collectives(read_torch_npu_text(run)).to_pylist()
    assert found[0]["group_ranks"] == group["global_ranks"]
    peers = {r["dst_rank"] for r in collectives.communication_pairs(job_of(read_torch_npu_text(run))).to_pylist()
             if r["dst_rank"] != r["src_rank"]}
    assert peers == {8, 16, 24, 32, 40, 48, 56}
    # a group of another communicator, though the only one of its size holding the rank, is not this group
    (run / "profiler_metadata.json").write_text(json.dumps({"parallel_group_info": {
        "10.0.0.1%eth0_60000_0_1736410538306028": group, "other": {"group_name": "tp", "global_ranks": [0, 1]}}}))
    tables = read_torch_npu_text(run)
    assert collectives.collectives(tables).to_pylist()[0]["group_ranks"] == list(range(8))
    groups = json.loads(tables.meta_dict()["communication_groups"])
    assert groups["17522688603477080586"]["name"] is None and groups["17522688603477080586"]["local"]


def test_memory_records_become_allocator_events_with_their_operators():
    tables = read(LEVEL1)
    records = [r for r in output_csv(LEVEL1, "memory_record.csv") if r["Component"] == "PTA"]
    memory = tables.memory.to_pylist()
    assert len(memory) == len(records) and {m["device"] for m in memory} == {"npu:0"}
    assert memory[4]["ts_ns"] == 1736408883694624810 and memory[4]["bytes"] == 19268096   # +18816.5 KB
    assert memory[4]["total_allocated"] == round(954.3701171875 * 2 ** 20)
    by_id = {r["id"]: r["name"] for r in tables.slices.to_pylist()}
    named = {int(Decimal(r["Allocation Time(us)"].strip()) * 1000): r["Name"]
             for r in output_csv(LEVEL1, "operator_memory.csv")}
    attributed = [(by_id.get(m["op_slice_id"]), named.get(m["ts_ns"])) for m in memory]
    checked = [(got, want) for got, want in attributed if want is not None]
    assert len(checked) > 100 and all(got == want for got, want in checked)
    series = set(tables.tracks.filter(pc.equal(tables.tracks["kind"], "counter"))["name"].to_pylist())
    assert {"npu.memory.APP.reserved_bytes", "npu.memory.GE.allocated_bytes", "npu.module_memory.SLOG.reserved_bytes",
            "AI Core Freq MHz", "APP/DDR bytes"} <= series


def test_meta_says_rank_world_size_device_and_configuration():
    meta = read(LEVEL1).meta_dict()
    assert json.loads(meta["world_size"]) == 8
    assert json.loads(meta["device_properties"])[0]["type"] == "npu"
    assert json.loads(meta["profiler_config"])["experimental_config"]["_profiler_level"] == "Level1"
    assert any(path.endswith("kernel_details.csv") for path in json.loads(meta["source_files"]))


# --- other dialects, missing and damaged files ------------------------------------------------------------

@pytest.mark.skipif(not FIXTURE_TRACE.is_file(), reason="msprof-analyze's fixtures are not there")
def test_a_plain_list_trace_of_an_older_torch_npu_reads(tmp_path):
    output = tmp_path / "old_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    output.mkdir(parents=True)
    shutil.copy(FIXTURE_TRACE, output / "trace_view.json")
    events = json.loads(FIXTURE_TRACE.read_text())
    assert isinstance(events, list) and len(events) == 3670
    tables = read_torch_npu_text(output.parent)
    overlap_pid = next(e["pid"] for e in events if e.get("args", {}).get("name") == "Overlap Analysis")
    complete = [e for e in events if e["ph"] == "X" and e["pid"] != overlap_pid]
    assert tables.slices.num_rows == len(complete)
    kinds = Counter(tables.slices["kind"].to_pylist())
    assert kinds["kernel"] == 274 and kinds["memcpy"] == 2         # Task Type "Other": compute by default
    assert len(rows(tables.flows, kind="launch")) == 274
    (output / "trace_view.json").write_text(json.dumps({"traceEvents": events}))     # the object form
    again = read_torch_npu_text(output.parent)
    assert again.slices["start_ns"].to_pylist() == tables.slices["start_ns"].to_pylist()


def test_only_kernel_details_gives_the_device_tasks(tmp_path):
    tables = read_torch_npu_text(copy_run(tmp_path, keep=("kernel_details.csv",)))
    tasks = tables.slices.filter(pc.not_equal(tables.slices["kind"], "step"))     # + the Step Id's step
    assert tasks.num_rows == len(output_csv(LEVEL1, "kernel_details.csv"))
    assert set(tasks["kind"].to_pylist()) == {"kernel", "comm"}
    assert set(tables.tracks["name"].to_pylist()) == {"npu:0 stream 2", "npu:0 stream 3", "npu:0 HCCL",
                                                      "Steps (kernel_details.csv Step Id)"}


def test_missing_optional_files_are_tolerated(tmp_path):
    tables = read_torch_npu_text(copy_run(tmp_path, keep=("trace_view.json",)))
    assert tables.slices.num_rows == read(LEVEL1).slices.num_rows and tables.memory.num_rows == 0
    assert collectives.collectives(tables).to_pylist()[0]["group_ranks"] is None       # no matrix: peers unknown


def test_a_missing_required_column_names_the_file_and_the_column(tmp_path):
    run = copy_run(tmp_path, keep=("kernel_details.csv", "trace_view.json"))
    path = run / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0].replace("Start Time(us)", "Begin")] + lines[1:]) + "\n")
    with pytest.raises(InputError, match=r"kernel_details.csv: missing required column start_us .*Start Time\(us\)"):
        read_torch_npu_text(run)


def test_a_truncated_trace_keeps_what_is_valid_and_warns(tmp_path):
    run = copy_run(tmp_path, keep=("trace_view.json",))
    path = run / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    text = path.read_bytes()
    path.write_bytes(text[:len(text) // 2])
    tables = read_torch_npu_text(run)
    assert 0 < tables.slices.num_rows < read(LEVEL1).slices.num_rows
    assert any("truncated" in w for w in json.loads(tables.meta_dict()["parse_warnings"]))


def test_events_whose_args_are_followed_by_more_keys_decode_across_batches(tmp_path):
    """Ascend writes ``"args": {...}, "ph": "X"}``: a batch cut after the args object is inside an event."""
    events = [{"name": f"op{i}", "pid": 1, "tid": 2, "ts": f"{1736408883704643 + i}.212", "dur": 1.5,
               "args": {"Task Type": "AI_CORE", "connection_id": i}, "ph": "X"} for i in range(400)]
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(events))
    stream = TraceStream(path, batch_bytes=997, piece_bytes=211)
    decoded = [event for batch in stream.batches() for event in batch]
    assert len(decoded) == 400 and stream.warnings == []
    assert decoded[-1].ts == "1736408883705042.212"


def test_directories_are_recognised_by_their_content(tmp_path):
    assert is_torch_npu_dir(TEXT / LEVEL1)
    assert not is_torch_npu_dir(TEXT / "level1")
    db = TEXT.parent / "db" / "level1" / "rank0_ascend_pt"
    assert not db.is_dir() or not is_torch_npu_dir(db)                    # the .db export is another reader's
    with pytest.raises(InputError, match="not a torch_npu profile"):
        read_torch_npu_text(tmp_path)


# --- ascend_kinds ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("task_type, name, kind", [
    ("AI_CORE", "Conv2D1", "kernel"), ("AI_VECTOR_CORE", "x", "kernel"), ("MIX_AIV", "x", "kernel"),
    ("AI_CPU", "x", "kernel"), ("DSA_SQE", "x", "kernel"), ("HCCL", "hcom_allReduce_", "comm"),
    ("PCIE_DMA_SQE", "MEMCPY_ASYNC", "memcpy"), ("SDMA_SQE", "MEMCPY_ASYNC", "memcpy"),
    ("EVENT_WAIT_SQE", "EVENT_WAIT", "sync"), ("Notify Wait", "Notify Wait", "other"), ("SDMA", "SDMA", "other"),
    ("Write Value", "x", "other"), ("PLACE_HOLDER_SQE", "PROFILING_ENABLE", "other"),
    ("Other", "aclnnInplaceZero_ZerosLikeAiCore_ZerosLike", "kernel"), ("Other", "MEMCPY_ASYNC", "memcpy"),
    (None, "x", "kernel")])
def test_task_types_map_to_kinds(task_type, name, kind):
    assert task_kind(task_type, name) == kind


def test_names_of_processes_apis_collectives_and_dtypes():
    assert [process_role(n) for n in ("Python", "CANN", "Ascend Hardware", "HCCL", "Overlap Analysis", "HBM")] == \
        ["host", "runtime", "device", "communication", "overlap", None]
    assert api_kind("acl", "AscendCL@aclrtSynchronizeStream") == "sync"
    assert (api_kind("runtime", "KernelLaunch"), api_kind("node", "Node@launch")) == ("driver", "runtime")
    assert [collective_name(n) for n in ("hcom_allReduce__586_0_1", "hcom_reduceScatter_", "hcom_receive_")] == \
        ["allreduce", "reduce_scatter", "recv"]
    assert (torch_dtype("FP32"), torch_dtype("BFP16"), torch_dtype("INT8"), torch_dtype("??")) == \
        ("float32", "bfloat16", "int8", None)


def test_trace_args_that_are_not_objects_are_skipped_and_counted(tmp_path):
    """An event whose args is not a JSON object does not fail the read: its args are ignored and counted."""
    from perfsight.ingest.ascend.torch_npu_trace import read_trace
    from perfsight.ingest.common.build import RunBuilder

    events = [{"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "Ascend Hardware"}},
              {"ph": "X", "name": "MatMul", "pid": 7, "tid": 3, "ts": "1.000", "dur": 2,
               "args": {"Task Type": "AI_CORE", "connection_id": 11}},
              {"ph": "X", "name": "Add", "pid": 7, "tid": 3, "ts": "5.000", "dur": 1, "args": [1, 2]}]
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(events))
    builder = RunBuilder()
    trace = read_trace(path, builder, rank=0, device=0)
    assert trace.slices["name"].to_pylist() == ["MatMul", "Add"]
    assert trace.slices["task_type"].to_pylist() == ["AI_CORE", None]
    assert trace.slices["correlation_id"].to_pylist() == [11, None]
    assert [w for w in builder.warnings if "args are not an object" in w] == [
        "trace_view.json: 1 events whose args are not an object of the expected types (args ignored)"]


def test_a_step_drawn_on_several_rows_spans_all_of_them():
    """Slices without a step get the step whose span holds their start; one step number drawn as several
    step slices (e.g. on two threads) spans from the earliest start to the latest end."""
    from perfsight.ingest.common.build import RunBuilder

    builder = RunBuilder()
    main, other = (builder.track("thread", "cpu", name, rank=0, pid="1", tid=name) for name in ("1", "2"))
    builder.add_slices({"track": [main, other, main], "kind": ["step"] * 3, "name": ["ProfilerStep#5"] * 2 + ["#6"],
                        "start_ns": [150, 100, 400], "dur_ns": [50, 200, 100], "step": [5, 5, 6]})
    builder.add_slices({"track": [main] * 4, "kind": ["cpu_op"] * 4, "name": ["a", "b", "c", "d"],
                        "start_ns": [120, 250, 350, 450], "dur_ns": [1] * 4})
    slices = builder.finish({}).slices
    steps = dict(zip(slices["name"].to_pylist(), slices["step"].to_pylist()))
    assert (steps["a"], steps["b"], steps["c"], steps["d"]) == (5, 5, None, 6)


@pytest.mark.timeout(60, method="thread")                      # a read that opens the FIFO never returns
@pytest.mark.parametrize("use_cache", [False, True])
def test_a_fifo_in_place_of_a_side_file_is_warned_about_not_waited_on(tmp_path, use_cache):
    from perfsight import ingest

    run_dir = copy_run(tmp_path, "level0/rank0_ascend_pt")
    info = run_dir / "profiler_info_0.json"
    info.unlink()
    os.mkfifo(info)
    [run] = ingest.find_runs(run_dir)
    tables = ingest.load(run, use_cache=use_cache)
    assert tables.slices.num_rows == read("level0/rank0_ascend_pt").slices.num_rows
    assert (f"profiler_info_0.json: not readable JSON ({info}: a FIFO (named pipe), not a regular file; perfsight "
            "reads only regular files); its facts are unknown") in json.loads(tables.meta_dict()["parse_warnings"])
