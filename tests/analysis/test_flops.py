"""op_flops / scope_flops / model_flops and the peak table on a planted run with modules, a kernel and
steps; the real CPU trace (which carries no flops: counted from its shapes) for sums and, with flops planted
on it, its scopes."""
import dataclasses
import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from perfsight.analysis import flops, peaks
from perfsight.core.tables import RunTables
from perfsight.ingest.kineto.reader import read_kineto

from .planted import BASE, MAIN, STREAM
from .planted_host import CPU_TRACE, host_only, raw_events

A100 = {"device_properties": [{"id": 0, "name": "NVIDIA A100-SXM4-40GB"}]}
A100_FP32 = "table:NVIDIA A100-SXM4-40GB fp32 (NVIDIA A100 Tensor Core GPU datasheet (2021), dense; 40GB)"
TOTAL = 2_000_000 + 1_000_000 + 1000 + 500 + 2_000_000


def _s(id, kind, name, start, end, depth, parent, step, **extra):
    return {"id": id, "kind": kind, "name": name, "op_type": name, "track_id": extra.pop("track", MAIN),
            "start_ns": BASE + start, "dur_ns": end - start, "depth": depth, "parent_id": parent, "step": step,
            **extra}


def planted(meta=None) -> RunTables:
    """step 1: Net_0 > Linear_0 > aten::linear > aten::addmm (2e6 flops, its kernel 500 ns on the stream);
    Net_0 > Linear_1 > aten::mm (1e6, 1000 ns on the host); record_function 'loss' > aten::mul (1000, 200 ns);
    aten::add outside any scope (500, 100 ns). step 2: aten::addmm outside scopes (2e6, 1000 ns)."""
    slices = [
        _s(1, "step", "ProfilerStep#1", 0, 10000, 0, None, 1),
        _s(2, "python", "nn.Module: Net_0", 100, 6000, 1, 1, 1),
        _s(3, "python", "nn.Module: Linear_0", 200, 3000, 2, 2, 1),
        _s(4, "cpu_op", "aten::linear", 300, 2900, 3, 3, 1, external_id=40),
        _s(5, "cpu_op", "aten::addmm", 400, 2800, 4, 4, 1, external_id=41, flops=2_000_000),
        _s(6, "kernel", "gemm", 3000, 3500, 0, None, 1, external_id=41, track=STREAM, task_type="KERNEL"),
        _s(7, "python", "nn.Module: Linear_1", 3000, 5000, 2, 2, 1),
        _s(8, "cpu_op", "aten::mm", 3100, 4100, 3, 7, 1, flops=1_000_000),
        _s(9, "annotation", "loss", 6000, 7000, 1, 1, 1),
        _s(10, "cpu_op", "aten::mul", 6100, 6300, 2, 9, 1, flops=1000),
        _s(11, "cpu_op", "aten::add", 8000, 8100, 1, 1, 1, flops=500),
        _s(21, "step", "ProfilerStep#2", 10000, 20000, 0, None, 2),
        _s(22, "cpu_op", "aten::addmm", 11000, 12000, 1, 21, 2, flops=2_000_000),
    ]
    return host_only(slices, meta=meta if meta is not None else A100)


def test_op_flops_with_device_time_and_a100_peak():
    rows = {r["op_type"]: r for r in flops.op_flops(planted()).to_pylist()}
    addmm = rows["aten::addmm"]
    assert (addmm["count"], addmm["flops"], addmm["op_ns"], addmm["time_source"]) == (2, 4_000_000, 1500, "mixed")
    assert addmm["flops_per_s"] == pytest.approx(4e6 * 1e9 / 1500)
    assert (rows["aten::mm"]["op_ns"], rows["aten::mm"]["time_source"]) == (1000, "host")
    assert addmm["peak_flops"] == 19.5e12 and addmm["peak_source"] == A100_FP32
    assert addmm["utilization_percent"] == pytest.approx(100 * (4e6 * 1e9 / 1500) / 19.5e12)
    assert sum(r["flops"] for r in rows.values()) == TOTAL
    assert list(rows) == ["aten::addmm", "aten::mm", "aten::mul", "aten::add"]


@pytest.mark.parametrize("level, expected", [
    (1, {"Net_0": (2, 3_000_000, 1500, 5900), "(no scope)": (2, 2_000_500, 1100, None), "loss": (1, 1000, 200, 1000)}),
    (2, {"Net_0/Linear_0": (1, 2_000_000, 500, 2800), "Net_0/Linear_1": (1, 1_000_000, 1000, 2000),
         "(no scope)": (2, 2_000_500, 1100, None), "loss": (1, 1000, 200, 1000)}),
])
def test_scope_levels_sum_to_the_model(level, expected):
    rows = flops.scope_flops(planted(), level=level).to_pylist()
    assert {r["scope"]: (r["op_count"], r["flops"], r["op_ns"], r["scope_ns"]) for r in rows} == expected
    assert sum(r["flops"] for r in rows) == TOTAL and {r["level"] for r in rows} == {level}
    # deeper than the tree: paths stay whole
    deepest = flops.scope_flops(planted(), level=9)["scope"].to_pylist()
    assert deepest == flops.scope_flops(planted(), level=2)["scope"].to_pylist()
    with pytest.raises(ValueError):
        flops.scope_flops(planted(), level=0)


def test_model_per_step_and_peak_sources():
    rows = flops.model_flops(planted(), precision="bf16").to_pylist()
    assert [(r["step"], r["op_count"], r["flops"], r["step_ns"]) for r in rows] == [
        (1, 4, 3_001_500, 10000), (2, 1, 2_000_000, 10000)]
    assert rows[0]["flops_per_s"] == pytest.approx(3_001_500 * 1e9 / 10000)
    assert rows[0]["peak_flops"] == 312e12 and rows[0]["peak_source"].startswith("table:NVIDIA A100-SXM4-40GB bf16 (")
    assert {r["precision"] for r in rows} == {"bf16"}                   # given: every operator at its peak
    assert rows[0]["utilization_percent"] == pytest.approx(100 * 3_001_500e9 / 10000 / 312e12)
    (given,) = flops.model_flops(planted(), peak_flops=1e12).to_pylist()[:1]
    assert (given["peak_flops"], given["peak_source"], given["utilization_percent"]) == (
        1e12, "argument", pytest.approx(100 * 3_001_500e9 / 10000 / 1e12))
    unknown = flops.model_flops(planted({"device_properties": [{"name": "Quadro RTX 8000"}]})).to_pylist()[0]
    assert (unknown["peak_flops"], unknown["peak_source"], unknown["utilization_percent"]) == (None, "unknown", None)
    cpu = {"manifest": {"device": {"device": "cpu", "physical_cores": 4, "max_freq_hz": 2.5e9,
                                   "cpu_flags": ["avx", "avx2", "fma", "sse2"]}}}
    estimated = flops.model_flops(planted(cpu)).to_pylist()[0]
    assert estimated["peak_flops"] == 4 * 2.5e9 * 32 and estimated["peak_source"] == (
        "estimate:cpu 4 cores x 2.5 GHz (max) x 32 FLOP/cycle (AVX2+FMA: 2 FMA units x 8 fp32 lanes x 2)")
    no_freq = {"manifest": {"device": {"device": "cpu", "logical_cores": 2}}}
    assert flops.model_flops(planted(no_freq))["peak_source"].to_pylist() == ["unknown", "unknown"]


@pytest.mark.parametrize("flags, precision, per_cycle, isa", [
    (["avx", "avx2", "avx512f", "fma", "sse2"], "fp32", 64, "AVX-512"),      # 2 units x 16 lanes x FMA
    (["avx", "avx2", "avx512f", "fma"], "fp64", 32, "AVX-512"),
    (["avx", "avx2", "fma"], "fp32", 32, "AVX2+FMA"),
    (["avx", "avx2"], "fp32", 16, "AVX"),                                    # AVX2 without FMA: no FMA
    ([], "fp32", 8, "SSE2"),                                                 # x86-64's baseline
    (["amx_bf16", "amx_tile", "avx512_bf16", "avx512f"], "bf16", 1024, "AMX"),
    (["avx512_bf16", "avx512f"], "bf16", 128, "AVX-512 BF16"),
    (["avx512f"], "bf16", None, None),                                        # no bf16 instructions
    (["amx_int8", "amx_tile", "avx512_vnni", "avx512f"], "int8", 2048, "AMX-INT8"),
    (["avx512_vnni", "avx512f"], "int8", 256, "AVX-512 VNNI"),                # vpdpbusd: 64 int8 lanes x 2
    (["avx2", "avx_vnni", "fma"], "int8", 128, "AVX-VNNI"),
    (["asimd"], "fp32", 16, "NEON"),
    (None, "fp32", 32, "AVX2+FMA"),                                          # not recorded: assumed, and said
])
def test_cpu_flops_per_cycle_from_the_instruction_sets(flags, precision, per_cycle, isa):
    found = peaks.cpu_flops_per_cycle(flags, precision)
    assert (found[0], found[1].split(":")[0]) == (per_cycle, isa) if per_cycle else found is None
    if flags is None:
        assert "assumed" in found[1]


def test_the_cpu_estimate_of_this_projects_machine_is_an_upper_bound():
    """The issue's run: 2 cores at 2.596 GHz (a VM's current clock) with AVX-512; aten::mm reached 103.8% of the
    AVX2 estimate (2 x 2.596 GHz x 32), so it ran at ~172 GFLOP/s: 51.9% of the AVX-512 estimate, and the source
    says the clock may boost beyond the figure."""
    device = {"device": "cpu", "physical_cores": 2, "freq_mhz": 2596.146, "cpu_flags": ["avx2", "avx512f", "fma"]}
    peak, source = peaks.device_peak({"manifest": json.dumps({"device": device})})
    achieved = 1.038 * 2 * 2596.146e6 * 32
    assert peak == 2 * 2596.146e6 * 64 and 100 * achieved / peak == pytest.approx(51.9)
    assert "current clock, may boost beyond" in source and "AVX-512: 2 FMA units x 16 fp32 lanes x 2" in source


def test_a_utilisation_above_100_percent_says_the_peak_is_wrong():
    rows = flops.model_flops(planted(), peak_flops=1e9).to_pylist()           # 300 GFLOP/s against 1 GFLOP/s
    assert rows[0]["utilization_percent"] > 100 and rows[0]["peak_note"] == f"rank 0 step 1: {flops.OVER_PEAK_NOTE}"
    (total,) = flops.model_flops_total(flops.model_flops(planted(), peak_flops=1e9)).to_pylist()
    assert total["peak_note"] == f"rank 0 model: {flops.OVER_PEAK_NOTE}"
    ops = {r["op_type"]: r["peak_note"] for r in flops.op_flops(planted(), peak_flops=1e9).to_pylist()}
    assert ops["aten::addmm"] == f"aten::addmm (fp32): {flops.OVER_PEAK_NOTE}"
    assert {r["peak_note"] for r in flops.op_flops(planted()).to_pylist()} == {None}   # within the A100's peak


def test_gpu_table_names():
    assert peaks.gpu_peak("NVIDIA H100 80GB HBM3", "bf16") == 989.4e12
    assert peaks.gpu_peak("NVIDIA H100 PCIe") == 51.2e12
    assert peaks.gpu_peak("NVIDIA A10") == 31.2e12 and peaks.gpu_peak("NVIDIA A100-PCIE-40GB", "tf32") == 156e12
    assert peaks.gpu_peak("Tesla V100-SXM2-16GB", "fp16") == 125e12 and peaks.gpu_peak("Tesla V100-PCIE-32GB") == 14e12
    assert peaks.gpu_peak("AMD Instinct MI250X", "bf16") == 191.5e12 and peaks.gpu_peak("NVIDIA L40S") == 91.6e12
    assert peaks.gpu_peak("NVIDIA L4") == 30.3e12 and peaks.gpu_peak("AMD Instinct MI250") == 45.3e12
    assert peaks.gpu_peak("Tesla T4", "bf16") is None and peaks.gpu_peak("NVIDIA L4", "fp16") == 121e12
    assert peaks.gpu_peak("NVIDIA GeForce RTX 3090") == 35.6e12
    assert peaks.gpu_peak("NVIDIA GeForce RTX 4090", "fp16") == 165.2e12
    assert peaks.device_peak({"device_properties": "[]"}) == (None, "unknown")


def test_a_generically_named_amd_gpu_is_known_by_its_compute_units():
    """ROCm 6.2 names the MI250's GCDs "AMD Radeon Graphics" (shared/data's amd_trace): gfx90a with 104 CUs."""
    gcd = {"name": "AMD Radeon Graphics", "computeMajor": 9, "computeMinor": 0, "numSms": 104}
    meta = {"device_properties": json.dumps([gcd])}
    assert peaks.device_peak(meta, "fp16") == (181e12, "table:AMD Instinct MI210 / MI250 (one GCD) fp16 (AMD "
                                               "Instinct MI250 datasheet, per GCD (half the OAM's figures; fp64/fp32: "
                                               "matrix))")
    other = json.dumps([{**gcd, "numSms": 60}])
    assert peaks.device_peak({"device_properties": other}) == (None, "unknown")


def test_model_total_over_the_steps():
    (row,) = flops.model_flops_total(flops.model_flops(planted())).to_pylist()   # the op outside steps: none here
    rate = (3_001_500 + 2_000_000) * 1e9 / 20000
    assert (row["rank"], row["steps"], row["op_count"], row["flops"], row["step_ns"]) == (0, 2, 5, 5_001_500, 20000)
    assert row["flops_per_s"] == pytest.approx(rate) and row["peak_flops"] == 19.5e12
    assert row["utilization_percent"] == pytest.approx(100 * rate / 19.5e12)
    assert row["peak_source"] == A100_FP32
    unknown = flops.model_flops(planted({"device_properties": [{"name": "Quadro RTX 8000"}]}))
    assert flops.model_flops_total(unknown)["utilization_percent"].to_pylist() == [None]


def test_empty_run():
    for fn in (flops.op_flops, flops.scope_flops, flops.model_flops):
        assert fn(RunTables()).num_rows == 0
    assert flops.model_flops_total(flops.model_flops(RunTables())).schema == flops.MODEL_FLOPS_TOTAL


def test_real_cpu_trace(shared_data):
    path = shared_data / CPU_TRACE
    tables = read_kineto([path])
    events = raw_events(path)
    assert not any("flops" in e.get("args", {}) for e in events)   # torch 2.13 writes none: counted from shapes
    products = [e["args"]["Input Dims"][1:3] if e["name"] == "aten::addmm" else e["args"]["Input Dims"][:2]
                for e in events if e.get("ph") == "X" and e["name"] in ("aten::mm", "aten::addmm")]
    by_shapes = sum(2 * m * k * n for (m, k), (_, n) in products)
    assert sum(flops.op_flops(tables)["flops"].to_pylist()) == by_shapes > 0
    # plant flops on every aten::addmm: the module scopes of the trace (with_modules) come out
    addmm = pc.equal(tables.slices["name"], "aten::addmm")
    planted_flops = pc.if_else(addmm, pa.scalar(1000, pa.int64()), pa.nulls(tables.slices.num_rows, pa.int64()))
    with_flops = dataclasses.replace(tables, slices=tables.slices.set_column(
        tables.slices.schema.get_field_index("flops"), "flops", planted_flops))
    n = pc.sum(addmm.cast("int64")).as_py()
    for level in (1, 2, 3):
        assert sum(flops.scope_flops(with_flops, level=level)["flops"].to_pylist()) == 1000 * n
    rows = {r["scope"]: r["op_count"] for r in flops.scope_flops(with_flops, level=3).to_pylist()}
    assert rows == {"## forward ##/Sequential_0/Linear_0": 3, "## forward ##/Sequential_0/Linear_1": 3}
    steps = flops.model_flops(with_flops).to_pylist()
    assert [(r["step"], r["flops"]) for r in steps] == [(2, 2000), (3, 2000), (4, 2000)]
    assert {r["peak_source"] for r in steps} == {"unknown"}


def test_model_total_gives_the_flops_per_step():
    """The terminal quotes this figure; it divided the FLOPs by the steps itself before."""
    (row,) = flops.model_flops_total(flops.model_flops(planted())).to_pylist()
    assert (row["flops"], row["steps"], row["flops_per_step"]) == (5_001_500, 2, 2_500_750.0)
