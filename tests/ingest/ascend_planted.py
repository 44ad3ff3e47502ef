"""Helpers for the msprof and MindSpore reader tests: the canonical tables' invariants, and a planted msprof
PROF_ directory written from the file names and columns of the seeds and CANN's documentation.

The planted directory (seed 003's layout: ``PROF_XXX/{device_0, host}`` and ``mindstudio_profiler_output``;
seed 001's export names; ``_slice_N_`` splits whose stamps run backwards) holds one device (rank 3) and
three compute tasks, one event record and one HCCL operator, launched by four AscendCL calls:

=========  ======  ==============  ======================  ==========  =========================
task       stream  task type       start (us)              dur (us)    launched by (connection)
=========  ======  ==============  ======================  ==========  =========================
MatMul_0   2       AI_CORE         1736408883000020.125    30.5        aclnnMatmul (11)
Add_1      2       AI_VECTOR_CORE  1736408883000100.001    4.25        aclnnAdd (12)
MatMul_2   2       AI_CORE         1736408883000200.999    20.0        aclnnMatmul (13)
EVENT      2       EVENT_RECORD    1736408883000250.000    0.02        -
allReduce  HCCL    HCCL            1736408883000300.500    50.0        hcom (14)
=========  ======  ==============  ======================  ==========  =========================

Steps (step_trace CSV, one per slice): 1 = [1736408883000000, 1736408883000150) and 2 =
[1736408883000150, 1736408883000400) microseconds.
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.tables import FLOW_KINDS, SCHEMAS, SLICE_KINDS, TRACK_KINDS, RunTables

PROF = "PROF_000001_20250109120000123_PLANTEDMSPROFDIR"
OUT = "mindstudio_profiler_output"
T0 = 1736408883000000  # us


def assert_valid(tables: RunTables) -> None:
    """The canonical schemas, vocabularies and references hold."""
    for name, table in tables.items():
        assert table.schema == SCHEMAS[name], name
    slices, tracks = tables.slices, tables.tracks
    assert set(slices["kind"].to_pylist()) <= set(SLICE_KINDS)
    assert set(tracks["kind"].to_pylist()) <= set(TRACK_KINDS)
    assert set(tables.flows["kind"].to_pylist()) <= set(FLOW_KINDS)
    assert pc.count_distinct(slices["id"]).as_py() == slices.num_rows
    assert pc.count_distinct(tracks["track_id"]).as_py() == tracks.num_rows
    ids, track_ids = set(slices["id"].to_pylist()), set(tracks["track_id"].to_pylist())
    assert set(slices["parent_id"].drop_null().to_pylist()) <= ids
    assert set(tables.flows["src_id"].to_pylist()) | set(tables.flows["dst_id"].to_pylist()) <= ids
    assert set(slices["track_id"].to_pylist()) | set(tables.counters["track_id"].to_pylist()) <= track_ids
    assert pc.min(slices["dur_ns"]).as_py() is None or pc.min(slices["dur_ns"]).as_py() >= 0
    counter_tracks = tracks.filter(pc.is_in(tracks["track_id"], tables.counters["track_id"].unique()))
    assert set(counter_tracks["kind"].to_pylist()) <= {"counter"}


def rows(table: pa.Table, **where) -> list[dict]:
    return [r for r in table.to_pylist() if all(r[k] == v for k, v in where.items())]


def us(offset: str) -> str:
    """An Ascend microsecond text ``T0 + offset`` (``"1736408883000020.125"``)."""
    whole, _, fraction = offset.partition(".")
    return f"{T0 + int(whole)}.{fraction or '000'}"


def _meta(pid: int, name: str, threads: dict[int, str], label: str) -> list[dict]:
    events = [{"name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}, "ph": "M"},
              {"name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": label}, "ph": "M"}]
    return events + [{"name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}, "ph": "M"}
                     for tid, thread in threads.items()]


METADATA = (_meta(100, "CANN", {7: "Thread 7"}, "CPU") + _meta(200, "Ascend Hardware", {2: "Stream 2"}, "NPU")
            + _meta(300, "HCCL", {0: "Group 0 Communication", 1: "Plane 0"}, "NPU")
            + _meta(400, "Overlap Analysis", {0: "Computing"}, "NPU") + _meta(500, "NPU MEM", {}, "NPU"))


def _api(name: str, start: str, dur: float, connection: int, level: str = "acl") -> dict:
    return {"name": name, "pid": 100, "tid": 7, "ts": us(start), "dur": dur, "ph": "X",
            "args": {"level": level, "connection_id": connection}}


def _task(name: str, start: str, dur: float, task_type: str, task_id: int, connection: int | None) -> dict:
    args = {"Model Id": 4294967295, "Task Type": task_type, "Stream Id": 2, "Task Id": task_id, "Batch Id": 0}
    if connection is not None:
        args["connection_id"] = connection
    return {"name": name, "pid": 200, "tid": 2, "ts": us(start), "dur": dur, "args": args, "ph": "X"}


TIMELINE_PARTS = [
    METADATA + [
        _api("AscendCL@aclnnMatmul", "10", 8.0, 11),
        _task("MatMul_0", "20.125", 30.5, "AI_CORE", 5, 11),
        _api("AscendCL@aclnnAdd", "90", 5.0, 12),
        {"name": "Computing", "pid": 400, "tid": 0, "ts": us("20.125"), "dur": 30.5, "ph": "X"},
        {"name": "APP/DDR", "pid": 500, "tid": 0, "ts": us("5"), "args": {"KB": 2.0}, "ph": "C"},
    ],
    METADATA + [
        _task("Add_1", "100.001", 4.25, "AI_VECTOR_CORE", 6, 12),
        _api("AscendCL@aclnnMatmul", "190", 6.0, 13),
        _task("MatMul_2", "200.999", 20.0, "AI_CORE", 7, 13),
        _task("EVENT_RECORD", "250", 0.02, "EVENT_RECORD", 8, None),
        _api("Hccl@hcom_allReduce", "290", 3.0, 14, level="hccl"),
        {"name": "hcom_allReduce__1_0_1", "pid": 300, "tid": 0, "ts": us("300.5"), "dur": 50.0, "ph": "X",
         "args": {"connection_id": 14, "model id": 4294967295}},
        {"name": "Notify_Wait", "pid": 300, "tid": 1, "ts": us("300.5"), "dur": 10.0, "ph": "X",
         "args": {"task type": "Notify_Wait", "stream id": 3, "task id": 9}},
    ],
]

OP_SUMMARY_HEADER = ("Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,OP State,Task Type,Task Start Time(us),"
                     "Task Duration(us),Task Wait Time(us),Block Dim,Mix Block Dim,Input Shapes,Input Data Types,"
                     "Input Formats,Output Shapes,Output Data Types,Output Formats,Context ID,aicore_time(us)")
OP_SUMMARY_PARTS = [
    [f'0,4294967295,5,2,MatMul_0,MatMul,static,AI_CORE,"{us("20.125")}\t",30.5,0,8,0,"""2,3;3,4""",FLOAT16;FLOAT16,'
     f'ND;ND,"""2,4""",FLOAT16,ND,N/A,28.1',
     f'0,4294967295,7,2,MatMul_2,MatMul,static,AI_CORE,"{us("200.999")}\t",20.0,50.2,8,0,"""2,3;3,4""",'
     f'FLOAT16;FLOAT16,ND;ND,"""2,4""",FLOAT16,ND,N/A,18.0'],
    [f'0,4294967295,6,2,Add_1,Add,dynamic,AI_VECTOR_CORE,"{us("100.001")}\t",4.25,49.626,2,0,"""2,4;2,4""",'
     f'FLOAT;FLOAT,ND;ND,"""2,4""",FLOAT,ND,N/A,3.9'],
]
OP_STATISTIC = ("Device_id,Model Name,OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),"
                "Max Time(us),Ratio(%)\n"
                "0,graph,MatMul,AI_CORE,2,50.5,20.0,25.25,30.5,92.237\n"
                "0,graph,Add,AI_VECTOR_CORE,1,4.25,4.25,4.25,4.25,7.763\n")
API_STATISTIC = ("Device_id,Level,API Name,Time(us),Count,Avg(us),Min(us),Max(us),Variance\n"
                 "0,acl,aclnnMatmul,14.0,2,7.0,6.0,8.0,1.0\n0,acl,aclnnAdd,5.0,1,5.0,5.0,5.0,0\n")
STEP_TRACE_HEADER = ("Device_id,Iteration ID,FP Start(us),BP End(us),Iteration End(us),Iteration Time(us),"
                     "FP to BP Time(us),Iteration Refresh(us),Data Aug Bound(us),Model ID")
STEP_TRACE_PARTS = [f'0,1,"{us("10")}\t","{us("120")}\t","{us("150")}\t",150,110,30,0,4294967295',
                    f'0,2,"{us("190")}\t","{us("260")}\t","{us("400")}\t",250,70,140,40,4294967295']
NPU_MEM = ("Device_id,event,ddr(KB),hbm(KB),memory(KB),timestamp(us)\n"
           f'0,app,1.5,1024,1025.5,"{us("0")}\t"\n0,app,2,2048,2050,"{us("100")}\t"\n')
TASK_TIME = ("Device_id,kernel_name,kernel_type,stream_id,task_id,task_time(us),task_start(us),task_stop(us)\n"
             f'0,MatMul_0,AI_CORE,2,5,30.5,"{us("20.125")}\t","{us("50.625")}\t"\n'
             f'0,Add_1,AI_VECTOR_CORE,2,6,4.25,"{us("100.001")}\t","{us("104.251")}\t"\n')


def write_msprof_dir(base: Path, *, slices_reversed_stamps: bool = True) -> Path:
    """The planted PROF_ directory under ``base`` (module docstring); returns its path."""
    prof = base / PROF
    (prof / "device_0" / "data").mkdir(parents=True)
    (prof / "host" / "data").mkdir(parents=True)
    (prof / "device_0" / "info.json.0").write_text(json.dumps(
        {"rank_id": 3, "DeviceInfo": [{"id": 0, "ai_core_num": 24}]}))
    out = prof / OUT
    out.mkdir()
    stamps = ["20250109120010", "20250109115959"] if slices_reversed_stamps else ["20250109120000"] * 2
    for n, (events, stamp) in enumerate(zip(TIMELINE_PARTS, stamps)):
        (out / f"msprof_slice_{n}_{stamp}.json").write_text(json.dumps(events))
    for n, (lines, stamp) in enumerate(zip(OP_SUMMARY_PARTS, stamps)):
        (out / f"op_summary_slice_{n}_{stamp}.csv").write_text(OP_SUMMARY_HEADER + "\n" + "\n".join(lines) + "\n")
    for n, (line, stamp) in enumerate(zip(STEP_TRACE_PARTS, stamps)):
        (out / f"step_trace_slice_{n}_{stamp}.csv").write_text(STEP_TRACE_HEADER + "\n" + line + "\n")
    (out / "op_statistic_20250109120010.csv").write_text(OP_STATISTIC)
    (out / "api_statistic_20250109120010.csv").write_text(API_STATISTIC)
    (out / "npu_mem_20250109120010.csv").write_text(NPU_MEM)
    (out / "task_time_20250109120010.csv").write_text(TASK_TIME)
    (out / "README.txt").write_text("msprof export\n")
    return prof
