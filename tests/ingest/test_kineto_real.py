"""read_kineto on the real public traces of ../shared/data/kineto, checked against MANIFEST.tsv and HTA.

HTA's kernel breakdown drops the last ProfilerStep when there are two or more and counts a kernel in
the step of its launching call: restricted the same way, perfsight's per-kernel sums, minima and maxima
equal HTA's exactly on integer-microsecond traces. On ns-precision traces HTA rounds (ts up, end down),
so its sub-microsecond kernels get 0 or -1 us; perfsight keeps their exact positive durations.
"""
from __future__ import annotations

import csv
import gzip
import json
from collections import Counter
from decimal import Decimal
from functools import lru_cache

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from perfsight.core.tables import conform
from perfsight.ingest.kineto.reader import is_kineto_trace, read_kineto
from tests.conftest import SHARED_DATA

KINETO = SHARED_DATA / "kineto"
MANIFEST = KINETO / "MANIFEST.tsv"
NOT_A_TRACE = "hta/execution_trace/benchmark_simple_add_et.json.gz"

pytestmark = pytest.mark.skipif(not MANIFEST.is_file(), reason=f"the real traces are not at {KINETO}")


def manifest() -> list[dict]:
    if not MANIFEST.is_file():
        return []
    with MANIFEST.open() as file:
        return [row for row in csv.DictReader(file, delimiter="\t") if row["local_path"] != NOT_A_TRACE]


@lru_cache(maxsize=None)
def read(local_path: str):
    return read_kineto([KINETO / local_path])


def count(table, column: str) -> Counter:
    return Counter(table[column].to_pylist())


@pytest.mark.parametrize("row", manifest(), ids=lambda row: row["local_path"])
def test_manifest_trace(row):
    run = read(row["local_path"])
    for name, table in run.items():
        assert conform(name, table).equals(table), name
    task_types = count(run.slices, "task_type")
    assert task_types["KERNEL"] + task_types["COMM"] == int(row["gpu_kernels"])
    assert task_types["COMM"] == int(row["nccl_kernels"])
    steps = run.slices.filter(pc.equal(run.slices["kind"], "step"))["step"].to_pylist()
    assert sorted(steps) == ([] if row["profiler_steps"] == "-" else [int(s) for s in row["profiler_steps"].split(",")])
    facts = run.meta_dict()
    assert facts["rank"] == (None if row["rank"] == "-" else row["rank"])
    assert facts["world_size"] == (None if row["world_size"] == "-" else row["world_size"])
    assert is_kineto_trace(KINETO / row["local_path"])


@pytest.mark.parametrize("row", manifest(), ids=lambda row: row["local_path"])
def test_links_stay_inside_the_run(row):
    run = read(row["local_path"])
    ids = set(run.slices["id"].to_pylist())
    assert len(ids) == run.slices.num_rows
    assert set(run.slices["parent_id"].drop_null().to_pylist()) <= ids
    assert set(run.flows["src_id"].to_pylist()) | set(run.flows["dst_id"].to_pylist()) <= ids
    assert set(run.memory["op_slice_id"].drop_null().to_pylist()) <= ids
    tracks = set(run.tracks["track_id"].to_pylist())
    assert set(run.slices["track_id"].to_pylist()) | set(run.counters["track_id"].to_pylist()) <= tracks
    assert pc.min(run.slices["dur_ns"]).as_py() is None or pc.min(run.slices["dur_ns"]).as_py() >= 0


@pytest.mark.parametrize("dataset, local_path", [
    ("df_index_resolver", "hta/df_index_resolver/df_index_resolver.json.gz"),
    ("kineto_resnet50_w0", "kineto_tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"),
    ("negative_queue_length", "hta/negative_queue_length_values_check/rank0.json.gz"),
    ("trace_compare_base", "hta/trace_compare/base/base.json.gz"),
])
def test_kernel_sums_equal_hta_on_integer_microsecond_traces(dataset, local_path):
    run = read(local_path)
    steps = sorted(run.slices.filter(pc.equal(run.slices["kind"], "step"))["step"].to_pylist())
    kept_steps = pc.is_in(run.slices["step"], pa.array(steps[:-1]))
    device = run.slices.filter(pc.and_(pc.is_valid(run.slices["task_type"]), kept_steps))
    mine = {}
    for name, dur in zip(device["name"].to_pylist(), device["dur_ns"].to_pylist()):
        total, longest, shortest = mine.get(name, (0, 0, None))
        mine[name] = (total + dur, max(longest, dur), dur if shortest is None else min(shortest, dur))
    with (KINETO / "hta_reference" / dataset / "kernel_breakdown_all.csv").open() as file:
        hta = {row["name"]: tuple(int(float(row[key]) * 1000) for key in ("sum (us)", "max (us)", "min (us)"))
               for row in csv.DictReader(file)}
    assert mine == hta


def test_short_kernels_stay_positive_where_hta_rounds_them_away():
    run = read("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    kernels = run.slices.filter(pc.equal(run.slices["task_type"], "KERNEL"))
    starts, durations = kernels["start_ns"].to_pylist(), kernels["dur_ns"].to_pylist()
    assert min(durations) > 0
    hta_durations = [(start + dur) // 1000 - -(-start // 1000) for start, dur in zip(starts, durations)]
    assert min(hta_durations) <= 0  # HTA: floor(end) - ceil(start), in us
    with (KINETO / "hta_reference" / "ns_resolution" / "kernel_breakdown_all.csv").open() as file:
        assert min(float(row["min (us)"]) for row in csv.DictReader(file)) <= 0


@pytest.mark.parametrize("local_path", [
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/triton_example/triton_example.json.gz",
    "generated_torch213_cpu/cpu_mlp_plain.pt.trace.json.gz",
])
def test_float_timestamps_are_exact(local_path):
    with gzip.open(KINETO / local_path) as file:
        trace = json.load(file, parse_float=Decimal)
    events, base = trace["traceEvents"], trace.get("baseTimeNanoseconds", 0)
    expected = Counter((e["name"], base + int(e["ts"] * 1000), int(e.get("dur", 0) * 1000))
                       for e in events if e["ph"] == "X")
    run = read(local_path)
    assert Counter(zip(*(run.slices[c].to_pylist() for c in ("name", "start_ns", "dur_ns")))) == expected


def test_launch_flows_are_the_paired_ac2g_flows():
    local_path = "hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz"
    with gzip.open(KINETO / local_path) as file:
        events = json.load(file)["traceEvents"]
    ends = {ph: {e["id"] for e in events if e["ph"] == ph and e.get("cat") == "ac2g"} for ph in "sf"}
    device_correlations = {e["args"]["correlation"] for e in events
                           if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    run = read(local_path)
    correlation = dict(zip(run.slices["id"].to_pylist(), run.slices["correlation_id"].to_pylist()))
    task_type = dict(zip(run.slices["id"].to_pylist(), run.slices["task_type"].to_pylist()))
    launched = {correlation[row["src_id"]] for row in run.flows.to_pylist()
                if row["kind"] == "launch" and task_type[row["dst_id"]]}  # cuda_sync links are extra
    assert launched == ends["s"] & ends["f"] & device_correlations


def test_launch_flows_without_flow_events():
    run = read("hta/trace_filter/sampled_rank-0.json.gz")  # a filtered trace: no ac2g events left
    device = run.slices.filter(pc.is_valid(run.slices["task_type"]))
    host_correlations = set(run.slices.filter(pc.equal(run.slices["kind"], "runtime"))["correlation_id"].to_pylist())
    launched = sum(1 for c in device["correlation_id"].to_pylist() if c in host_correlations)
    assert launched > 1000 and count(run.flows, "kind") == {"launch": launched}


def test_2021_format_streams_and_memory():
    run = read("kineto_tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    streams = run.tracks.filter(pc.equal(run.tracks["kind"], "stream")).to_pylist()
    assert [(t["name"], t["device"], t["tid"]) for t in streams] == [("cuda:0 stream 7", "cuda:0", "stream 7")]
    kernels = run.slices.filter(pc.equal(run.slices["task_type"], "KERNEL"))
    assert kernels["external_id"].null_count == 0 and kernels["step"].null_count == 0
    assert set(count(run.memory, "device")) == {"cpu", "cuda:0"}
    assert count(run.slices, "kind")["dataloader"] == 6


def test_gpu_counters_of_the_tb_plugin_trace():
    run = read("kineto_tb_plugin/test/gpu_metrics_expected.json")
    counters = run.tracks.filter(pc.equal(run.tracks["kind"], "counter")).to_pylist()
    assert [(t["name"], t["device"]) for t in counters] == [("Est. SM Efficiency", "cuda:0"),
                                                            ("GPU Utilization", "cuda:0")]
    assert run.counters.num_rows == 78


def test_memory_events_belong_to_the_operator_running_them():
    run = read("generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz")
    kinds = dict(zip(run.slices["id"].to_pylist(), run.slices["kind"].to_pylist()))
    owners = run.memory["op_slice_id"].drop_null().to_pylist()
    assert len(owners) > run.memory.num_rows / 2
    assert {kinds[owner] for owner in owners} == {"cpu_op"}


def test_gzip_and_plain_files_read_the_same(tmp_path):
    local_path = "hta/nccl_parser_config/nccl_data.json.gz"
    plain = tmp_path / "nccl_data.json"
    plain.write_bytes(gzip.decompress((KINETO / local_path).read_bytes()))
    zipped, unzipped = read(local_path), read_kineto([plain])
    for name in ("slices", "tracks", "counters", "flows", "memory"):
        assert getattr(unzipped, name).equals(getattr(zipped, name)), name


def test_sniffing_tells_traces_from_other_json(tmp_path):
    assert not is_kineto_trace(KINETO / NOT_A_TRACE)
    other = tmp_path / "config.json"
    other.write_text('{"lr": 0.1}')
    assert not is_kineto_trace(other)
    assert not is_kineto_trace(KINETO / "MANIFEST.tsv")
    listed = tmp_path / "events.json"
    listed.write_text('[{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1, "tid": 1}]')
    assert is_kineto_trace(listed)
