"""read_kineto on small hand-written traces whose every answer is known (exact ns, nesting, steps, links)."""
from __future__ import annotations

import json
from decimal import Decimal

import pytest
from conftest import number

from perfsight.core.tables import conform
from perfsight.ingest.kineto.reader import read_kineto

T0 = Decimal("1736413971558972")  # microseconds: 1e15 magnitude, where float64 has no ns digits left
HOST, MAIN, BACKWARD, GPU, STREAM = 100, 100, 101, 0, 7


def at(offset: str) -> str:
    return number(str(T0 + Decimal(offset)))


def ns(offset: str) -> int:
    return int((T0 + Decimal(offset)) * 1000)


def shifted(event: dict, micros: int) -> dict:
    """``event`` moved ``micros`` later (its ts is a ``number`` placeholder)."""
    return event | {"ts": number(str(Decimal(event["ts"].removeprefix(number(""))) + micros))}


def op(cat, name, ts, dur, pid=HOST, tid=MAIN, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": at(ts), "dur": number(dur),
            "args": args}


def meta(event, pid, tid, **args):
    return {"ph": "M", "name": event, "pid": pid, "tid": tid, "ts": at("0"), "args": args}


def memory(ts, device_type, device_id, size, address):
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": HOST, "tid": MAIN,
            "ts": at(ts), "args": {"Addr": address, "Bytes": size, "Total Allocated": 4096 + size,
                                   "Total Reserved": 8192, "Device Type": device_type, "Device Id": device_id}}


def flow(ph, cat, flow_id, ts, pid=HOST, tid=MAIN):
    event = {"ph": ph, "cat": cat, "name": cat, "id": flow_id, "pid": pid, "tid": tid, "ts": at(ts)}
    return event | ({"bp": "e"} if ph == "f" else {})


PLANTED = [
    meta("process_name", HOST, 0, name="python"),
    meta("thread_name", HOST, MAIN, name="main thread"),
    meta("thread_sort_index", HOST, BACKWARD, sort_index=5),
    meta("process_labels", GPU, 0, labels="GPU 0"),
    op("user_annotation", "ProfilerStep#7", "0", "100", **{"External id": 1}),
    op("cpu_op", "aten::linear", "10.001", "50.002", **{
        "External id": 11, "Input Dims": [[2, 3], [4, 3]], "Input type": ["float", "float"], "flops": 1200}),
    op("cpu_op", "aten::addmm", "12.5", "20", **{"External id": 12}),
    op("cuda_runtime", "cudaLaunchKernel", "13", "5", correlation=501, **{"External id": 12}),
    op("cpu_op", "aten::mul", "60.003", "1", **{"External id": 13}),  # starts exactly when linear ends
    op("kernel", "gemm_kernel", "150", "0.456", GPU, STREAM, correlation=501, stream=STREAM),  # after step 7 ends
    op("user_annotation", "ProfilerStep#8", "100", "100", **{"External id": 20}),
    op("cpu_op", "aten::copy_", "100", "10", **{"External id": 21}),  # starts exactly at step 8's start
    op("cuda_runtime", "cudaMemcpyAsync", "101", "2", correlation=502),
    op("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", "151", "1.5", GPU, STREAM, correlation=502, bytes=4096),
    op("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "111", "5"),
    op("cpu_op", "c10d::allreduce_", "120", "10", **{"External id": 22}),
    op("cuda_driver", "cuLaunchKernel", "121", "1", correlation=503),
    op("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float", "160", "30", GPU, STREAM, correlation=503),
    op("gpu_user_annotation", "ProfilerStep#8", "150.9", "40", GPU, STREAM, **{"External id": 20}),
    op("cpu_op", "LinearBackward0", "140", "3", tid=BACKWARD),
    op("python_function", "train.py(10): step", "200.5", "1"),
    op("Trace", "PyTorch Profiler (0)", "0", "300", "Spans", "PyTorch Profiler"),
    flow("s", "fwdbwd", 1, "10.001"),
    flow("f", "fwdbwd", 1, "140", tid=BACKWARD),
    flow("s", "ac2g", 501, "13"),
    flow("f", "ac2g", 501, "150", GPU, STREAM),
    flow("f", "ac2g", 999, "101"),  # Kineto writes such partnerless halves for calls that launch nothing
    memory("15", 1, 0, 512, 1000),  # inside aten::addmm (and inside cudaLaunchKernel, which is no cpu_op)
    memory("5", 0, -1, -512, 1000),  # inside the step only
    {"ph": "C", "name": "GPU 0 Utilization", "pid": GPU, "ts": at("150"), "args": {"GPU Utilization": 0.5}},
]


@pytest.fixture
def run(write_trace):
    path = write_trace(PLANTED, distributedInfo={"backend": "nccl", "rank": 3, "world_size": 8},
                       deviceProperties=[{"id": 0, "name": "Fake GPU"}])
    return read_kineto([path])


@pytest.fixture
def slices(run):
    return {row["name"] if row["kind"] != "gpu_annotation" else "gpu " + row["name"]: row
            for row in run.slices.to_pylist()}


def test_every_table_has_the_canonical_schema(run):
    for name, table in run.items():
        assert conform(name, table).equals(table), name


def test_times_are_exact_integer_nanoseconds(slices):
    assert slices["aten::linear"]["start_ns"] == ns("10.001")
    assert slices["aten::linear"]["dur_ns"] == 50_002
    assert slices["gemm_kernel"]["start_ns"] == ns("150")
    assert slices["gemm_kernel"]["dur_ns"] == 456  # sub-microsecond kernels stay positive
    assert slices["gpu ProfilerStep#8"]["start_ns"] == ns("150.9")


def test_kinds_and_task_types(slices):
    kinds = {name: (row["kind"], row["task_type"]) for name, row in slices.items()}
    assert kinds == {
        "ProfilerStep#7": ("step", None), "ProfilerStep#8": ("step", None),
        "aten::linear": ("cpu_op", None), "aten::addmm": ("cpu_op", None), "aten::mul": ("cpu_op", None),
        "aten::copy_": ("cpu_op", None), "LinearBackward0": ("cpu_op", None),
        "cudaLaunchKernel": ("runtime", None), "cudaMemcpyAsync": ("runtime", None), "cuLaunchKernel": ("driver", None),
        "gemm_kernel": ("kernel", "KERNEL"), "Memcpy HtoD (Pageable -> Device)": ("memcpy", "MEMCPY"),
        "ncclKernel_AllReduce_RING_LL_Sum_float": ("comm", "COMM"), "c10d::allreduce_": ("comm", None),
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__": ("dataloader", None),
        "gpu ProfilerStep#8": ("gpu_annotation", None), "train.py(10): step": ("python", None),
        "PyTorch Profiler (0)": ("other", None),
    }


def test_nesting_depth_and_parent(slices):
    def parent(name):
        parent_id = slices[name]["parent_id"]
        return next((n for n, row in slices.items() if row["id"] == parent_id), None)

    assert [slices[name]["depth"] for name in ("ProfilerStep#7", "aten::linear", "aten::addmm")] == [0, 1, 2]
    assert parent("aten::linear") == "ProfilerStep#7"
    assert parent("aten::addmm") == "aten::linear"
    assert slices["cudaLaunchKernel"]["depth"] == 3
    assert parent("aten::mul") == "ProfilerStep#7"  # linear ends exactly when mul starts: not its parent
    assert parent("aten::copy_") == "ProfilerStep#8"
    assert parent("Memcpy HtoD (Pageable -> Device)") == "gpu ProfilerStep#8"
    assert parent("gemm_kernel") is None and parent("ProfilerStep#7") is None


def test_steps(slices):
    steps = {name: row["step"] for name, row in slices.items()}
    assert steps["aten::addmm"] == 7 and steps["aten::mul"] == 7
    assert steps["aten::copy_"] == 8  # starts where step 7 ends and step 8 starts
    assert steps["gemm_kernel"] == 7  # runs after step 7 ended: its step is its launcher's
    assert steps["Memcpy HtoD (Pageable -> Device)"] == 8
    assert steps["ncclKernel_AllReduce_RING_LL_Sum_float"] == 8
    assert steps["gpu ProfilerStep#8"] == 8  # no correlation: by External id
    assert steps["LinearBackward0"] == 8  # another thread of the same process
    assert steps["train.py(10): step"] is None and steps["PyTorch Profiler (0)"] is None


def test_args_columns(slices):
    linear = slices["aten::linear"]
    assert linear["input_shapes"] == "[[2, 3], [4, 3]]"
    assert linear["input_dtypes"] == '["float", "float"]'
    assert linear["flops"] == 1200 and linear["external_id"] == 11
    assert slices["Memcpy HtoD (Pageable -> Device)"]["bytes"] == 4096
    assert slices["gemm_kernel"]["correlation_id"] == 501
    assert slices["gemm_kernel"]["args"] == '{"correlation": 501, "stream": 7}'
    assert slices["aten::mul"]["bytes"] is None


def test_flows(run, slices):
    by_id = {row["id"]: name for name, row in slices.items()}
    flows = {(by_id[row["src_id"]], by_id[row["dst_id"]], row["kind"]) for row in run.flows.to_pylist()}
    assert flows == {
        ("cudaLaunchKernel", "gemm_kernel", "launch"),
        ("cudaMemcpyAsync", "Memcpy HtoD (Pageable -> Device)", "launch"),
        ("cuLaunchKernel", "ncclKernel_AllReduce_RING_LL_Sum_float", "launch"),
        ("aten::linear", "LinearBackward0", "fwdbwd"),
    }
    assert run.flows.num_rows == 4


def test_memory(run, slices):
    rows = run.memory.to_pylist()
    tracks = {row["track_id"]: row["name"] for row in run.tracks.to_pylist()}
    assert [row["ts_ns"] for row in rows] == [ns("15"), ns("5")]
    assert [row["op_slice_id"] for row in rows] == [slices["aten::addmm"]["id"], None]
    assert [row["device"] for row in rows] == ["cuda:0", "cpu"]
    assert [row["bytes"] for row in rows] == [512, -512]
    assert rows[0]["addr"] == 1000 and rows[0]["total_allocated"] == 4608 and rows[0]["total_reserved"] == 8192
    assert {tracks[row["track_id"]] for row in rows} == {"main thread"}


def test_tracks(run, slices):
    tracks = run.tracks.to_pylist()
    shown = [(t["kind"], t["device"], t["name"], t["pid"], t["tid"], t["sort_index"], t["rank"]) for t in tracks]
    assert shown == [  # within a process: threads with a sort index first
        ("thread", "cpu", "thread 101 (python)", "100", "101", 5, 3),
        ("thread", "cpu", "main thread", "100", "100", None, 3),
        ("thread", "cpu", "Spans: PyTorch Profiler", "Spans", "PyTorch Profiler", None, 3),
        ("stream", "cuda:0", "cuda:0 stream 7", "0", "7", 7, 3),
        ("counter", "cuda:0", "GPU Utilization", "0", None, None, 3),
    ]
    assert [t["track_id"] for t in tracks] == list(range(5))
    assert slices["gemm_kernel"]["track_id"] == tracks[3]["track_id"]
    assert slices["LinearBackward0"]["track_id"] == tracks[0]["track_id"]


def test_counters(run):
    assert run.counters.to_pylist() == [{"track_id": 4, "ts_ns": ns("150"), "value": 0.5}]


def test_meta(run):
    facts = run.meta_dict()
    assert facts["source_format"] == "kineto"
    assert facts["rank"] == "3" and facts["world_size"] == "8"
    assert facts["base_time_ns"] == ""
    assert facts["device_properties"] == '[{"id": 0, "name": "Fake GPU"}]'
    assert facts["parse_warnings"] == "[]"


def test_ids_and_track_ids_are_offset_for_merging_ranks(write_trace):
    path = write_trace(PLANTED)
    first = read_kineto([path])
    second = read_kineto([path], rank=1, id_offset=first.slices.num_rows, track_offset=first.tracks.num_rows)
    assert second.slices["id"].to_pylist() == [i + first.slices.num_rows for i in first.slices["id"].to_pylist()]
    assert min(second.tracks["track_id"].to_pylist()) == first.tracks.num_rows
    assert set(second.slices["track_id"].to_pylist()) <= set(second.tracks["track_id"].to_pylist())
    assert set(second.tracks["rank"].to_pylist()) == {1} and second.meta_dict()["rank"] == "1"
    flow_ids = set(second.flows["src_id"].to_pylist()) | set(second.flows["dst_id"].to_pylist())
    assert flow_ids <= set(second.slices["id"].to_pylist())
    assert set(second.memory["op_slice_id"].drop_null().to_pylist()) <= set(second.slices["id"].to_pylist())


def test_successive_windows_share_tracks_and_keep_ids_unique(write_trace):
    window = [e for e in PLANTED if e["ph"] in ("X", "M")]
    later = [shifted(e, 1000) for e in window]
    paths = [write_trace(window, name="w1.pt.trace.json"), write_trace(later, name="w2.pt.trace.json.gz")]
    run = read_kineto(paths)
    single = read_kineto(paths[:1])
    assert run.slices.num_rows == 2 * single.slices.num_rows
    assert len(set(run.slices["id"].to_pylist())) == run.slices.num_rows
    assert run.tracks.num_rows == single.tracks.num_rows
    launches = run.flows.filter(run.flows["kind"].to_numpy(zero_copy_only=False) == "launch")
    assert launches.num_rows == 6  # correlation ids repeat across the windows; links stay within each
    starts = dict(zip(run.slices["id"].to_pylist(), run.slices["start_ns"].to_pylist()))
    for src, dst in zip(launches["src_id"].to_pylist(), launches["dst_id"].to_pylist()):
        assert abs(starts[dst] - starts[src]) < 500_000


def test_base_time_makes_epoch_nanoseconds(write_trace):
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
             "ts": number("4441817884623.376"), "dur": number("0.511")}
    run = read_kineto([write_trace([event], baseTimeNanoseconds=1790857026000000000)])
    assert run.slices["start_ns"].to_pylist() == [1790857026000000000 + 4441817884623376]
    assert run.slices["dur_ns"].to_pylist() == [511]
    assert run.meta_dict()["base_time_ns"] == "1790857026000000000"


@pytest.mark.parametrize("ts, dur, start_ns, dur_ns", [
    ("1736413971558972.912", "0.088", 1736413971558972912, 88),  # Ascend: JSON strings of decimal us
    (number("1669783687464181"), number("45"), 1669783687464181000, 45000),  # 2021-era integers
    (number("1.0005"), number("1.0015"), 1000, 1002),  # beyond ns: rounded half to even
    (number("1.5e3"), number("2E-3"), 1500000, 2),
])
def test_timestamp_spellings(write_trace, ts, dur, start_ns, dur_ns):
    event = {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": ts, "dur": dur}
    run = read_kineto([write_trace([event])])
    assert run.slices.select(["start_ns", "dur_ns"]).to_pylist() == [{"start_ns": start_ns, "dur_ns": dur_ns}]


def test_a_top_level_list_of_events_is_a_trace(tmp_path):
    from conftest import trace_text

    path = tmp_path / "events.json"
    path.write_text(trace_text([e for e in PLANTED if e["ph"] == "X"]))
    assert read_kineto([path]).slices.num_rows == sum(1 for e in PLANTED if e["ph"] == "X")


def test_distributed_info_is_kept_whole_for_the_groups(write_trace):
    """distributedInfo (rank, world size, backend, pg_count, pg_config: every process group's name,
    description, size and global ranks) is kept verbatim in meta ``distributed_info``."""
    info = {"backend": "nccl", "rank": 1, "world_size": 4, "pg_count": 2, "nccl_version": "2.21.5",
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 4,
                           "ranks": [0, 1, 2, 3]},
                          {"pg_name": "1", "pg_desc": "pp", "backend_config": "cuda:nccl", "pg_size": 2,
                           "ranks": [1, 3]}]}
    meta = read_kineto([write_trace(PLANTED, distributedInfo=info)]).meta_dict()
    assert json.loads(meta["distributed_info"]) == info
    assert (meta["rank"], meta["world_size"]) == ("1", "4")
