"""Each operator's precision (dtypes, kernel names, TF32 only on kernel evidence) and the FLOPS utilisation
and MFU against each precision's peak: a planted GPU step of four matrix products in bf16, TF32, fp32 and
(without dtypes) bf16 by kernel name, each at a known share of its peak; the peak table's fallbacks and
its Ascend names."""
import json

import pytest

from perfsight.analysis import flops, peaks, precision

from .planted import BASE, MAIN, STREAM, TRACKS, tables_from_rows

A100 = {"device_properties": json.dumps([{"id": 0, "name": "NVIDIA A100-SXM4-40GB"}])}
BF16, FP32 = '["c10::BFloat16", "c10::BFloat16"]', '["float", "float"]'


def _op(id, name, start, dtypes, flops_, ext):
    return {"id": id, "kind": "cpu_op", "name": name, "op_type": name, "track_id": MAIN, "start_ns": BASE + start,
            "dur_ns": 50, "depth": 1, "parent_id": 1, "step": 1, "external_id": ext, "input_dtypes": dtypes,
            "flops": flops_}


def _kernel(id, name, start, ext):
    return {"id": id, "kind": "kernel", "name": name, "op_type": name, "track_id": STREAM, "start_ns": BASE + start,
            "dur_ns": 100, "depth": 0, "step": 1, "external_id": ext, "task_type": "KERNEL"}


def gpu_step(meta=A100):
    """One 10 us step; four operators, each with one 100 ns kernel (same External id):
    aten::mm bf16 (dtypes) 3.12 MFLOP: 10% of the A100's 312 TFLOP/s;
    aten::addmm fp32 dtypes on a TF32 kernel (s1688) 1.56 MFLOP: 10% of 156 TFLOP/s;
    aten::bmm fp32 (sgemm) 195 kFLOP: 10% of 19.5 TFLOP/s;
    aten::mm without dtypes on a bf16 kernel 312 kFLOP: 1% of 312 TFLOP/s."""
    slices = [
        {"id": 1, "kind": "step", "name": "ProfilerStep#1", "op_type": None, "track_id": MAIN, "start_ns": BASE,
         "dur_ns": 10_000, "depth": 0, "step": 1},
        _op(2, "aten::mm", 100, BF16, 3_120_000, 50), _kernel(12, "ampere_bf16_s16816gemm_bf16_128x64_nn", 5000, 50),
        _op(3, "aten::addmm", 200, '["float", "float", "float"]', 1_560_000, 51),
        _kernel(13, "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x4_nn_align1>", 5200, 51),
        _op(4, "aten::bmm", 300, FP32, 195_000, 52), _kernel(14, "ampere_sgemm_128x64_nn", 5400, 52),
        _op(5, "aten::mm", 400, None, 312_000, 53), _kernel(15, "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn", 5600, 53),
    ]
    return tables_from_rows(slices=slices, tracks=TRACKS, meta=meta)


@pytest.mark.parametrize("dtypes, expected", [
    (BF16, "bf16"), (FP32, "fp32"), ('["double", "Double"]', "fp64"), ('["Double", "Scalar"]', None),
    ('["c10::Half", "float"]', "fp16"), ('["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "c10::BFloat16"]', "fp8"),
    ('["signed char", "long int"]', "int8"), ('["FLOAT16", "INT64"]', "fp16"), ('["DT_BF16"]', "bf16"),
    ('["long int"]', None), (None, None), ("not json", None),
])
def test_precision_from_dtypes(dtypes, expected):
    assert precision.dtypes_precision(dtypes) == expected


def test_each_operators_precision_and_why():
    got = {r["id"]: (r["precision"], r["precision_source"]) for r in precision.op_precisions(gpu_step()).to_pylist()}
    assert got == {2: ("bf16", "dtypes"), 3: ("tf32", "dtypes+kernels"), 4: ("fp32", "dtypes"), 5: ("bf16", "kernels")}


@pytest.mark.parametrize("kernel, expected", [
    ("volta_h884gemm_64x64_ldg8_nn", "fp16"), ("turing_s1688gemm_fp16_128x128_nn", "fp16"),
    ("cutlass_80_tensorop_s1688gemm_64x64", "tf32"), ("ampere_sgemm_128x64_nn", "fp32"),
    ("volta_scudnn_128x64_relu_interior_nn_v1", "fp32"), ("ampere_dgemm_64x64", "fp64"),
    ("sm90_xmma_gemm_e4m3e4m3_bf16f32", "fp8"), ("ampere_i8816gemm_int8_128x128", "int8"),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32", "fp32"), ("Cijk_Ailk_Bljk_BBS_BH_MT128x128", "bf16"),
    ("Cijk_Ailk_Bljk_HHS_BH_MT128x128", "fp16"), ("void at::native::vectorized_elementwise_kernel<4>", None),
])
def test_precision_from_kernel_names(kernel, expected):
    from perfsight.core.tables import new_connection

    ((got,),) = new_connection().sql(f"SELECT {precision.kernel_precision_sql('$name')}",
                                     params={"name": kernel}).fetchall()
    assert got == expected


def test_op_utilisation_against_each_precisions_peak():
    rows = {(r["op_type"], r["precision"]): r for r in flops.op_flops(gpu_step()).to_pylist()}
    assert {key: (r["peak_flops"], pytest.approx(r["utilization_percent"])) for key, r in rows.items()} == {
        ("aten::mm", "bf16"): (312e12, 10.0 * (3_120_000 + 312_000) / 3_120_000 / 2),   # two ops, 200 ns
        ("aten::addmm", "tf32"): (156e12, 10.0), ("aten::bmm", "fp32"): (19.5e12, 10.0)}
    assert {r["time_source"] for r in rows.values()} == {"device"}
    assert rows[("aten::addmm", "tf32")]["peak_source"].startswith("table:NVIDIA A100-SXM4-40GB tf32 (NVIDIA A100")


def test_model_mfu_against_the_precision_mix():
    """Time at peak: 3.12e6 / 312e12 + 1.56e6 / 156e12 + 195e3 / 19.5e12 + 312e3 / 312e12 = 31 ns of the 10 us
    step: MFU 0.31%; the mix's peak is the 5.187 MFLOP over those 31 ns."""
    (step,) = flops.model_flops(gpu_step()).to_pylist()
    assert step["utilization_percent"] == pytest.approx(0.31)
    assert step["peak_flops"] == pytest.approx(5_187_000 / 31e-9)
    assert step["precision"] == "bf16+tf32+fp32" and step["peak_source"].startswith("mix: table:NVIDIA A100")
    (total,) = flops.model_flops_total(flops.model_flops(gpu_step())).to_pylist()
    assert total["utilization_percent"] == pytest.approx(0.31)
    assert total["peak_flops"] == pytest.approx(5_187_000 / 31e-9)
    (scope,) = flops.scope_flops(gpu_step()).to_pylist()          # no scopes: one row, the same mix
    assert scope["utilization_percent"] == pytest.approx(100 * 31e-9 / 400e-9)   # over the ops' 400 ns
    at_fp32 = flops.model_flops(gpu_step(), precision="fp32").to_pylist()[0]   # every op at the fp32 peak
    assert at_fp32["precision"] == "fp32" and at_fp32["utilization_percent"] == pytest.approx(
        100 * 5_187_000 / 19.5e12 / 10e-6)


def test_above_100_percent_is_kept_named_and_warned():
    """At a 1 TFLOP/s argument every op is far above: each row keeps its number and names itself. On a T4 (no
    bf16 or TF32 units: fp32's 8.1 TFLOP/s) the two bf16 mms (3.432 MFLOP in 200 ns: 17.16 TFLOP/s, 212%) and
    the TF32 addmm (15.6 TFLOP/s, 193%) cannot be real, nor their scope (all four operators: 640.4 ns of work at
    the peaks in 400 ns): the summary's warnings name them; the fp32 bmm (24%) and the model (5.187 MFLOP /
    8.1 TFLOP/s = 640.4 ns of the 10 us step) are within the peak."""
    rows = flops.op_flops(gpu_step(), peak_flops=1e12).to_pylist()
    assert all(r["utilization_percent"] > 100 for r in rows)
    assert [r["peak_note"] for r in rows] == [f"{r['op_type']} ({r['precision']}): {flops.OVER_PEAK_NOTE}"
                                              for r in rows]
    t4 = gpu_step({"device_properties": json.dumps([{"name": "Tesla T4"}])})
    utilisation = {r["op_type"]: r["utilization_percent"] for r in flops.op_flops(t4).to_pylist()}
    assert utilisation == {"aten::mm": pytest.approx(100 * 17.16 / 8.1), "aten::addmm": pytest.approx(100 * 15.6 / 8.1),
                           "aten::bmm": pytest.approx(100 * 1.95 / 8.1)}
    source = "table:Tesla T4 {} (NVIDIA T4 datasheet; no {} units: fp32's rate)"
    mix = f"mix: {source.format('bf16', 'bf16')} | table:Tesla T4 fp32 (NVIDIA T4 datasheet) | " \
          f"{source.format('tf32', 'tf32')}"                     # the sources in text order
    assert flops.over_peak_warnings(t4) == [         # the operators' 400 ns hold 640 ns of work at the peaks
        f"aten::mm (bf16): {flops.OVER_PEAK_NOTE} (peak {source.format('bf16', 'bf16')})",
        f"aten::addmm (tf32): {flops.OVER_PEAK_NOTE} (peak {source.format('tf32', 'tf32')})",
        f"scope (no scope): {flops.OVER_PEAK_NOTE} (peak {mix})"]
    (total,) = flops.model_flops_total(flops.model_flops(t4)).to_pylist()
    assert total["utilization_percent"] == pytest.approx(100 * 5_187_000 / 8.1e12 / 10e-6)


def test_a_precision_without_units_runs_at_fp32s_rate():
    v100 = {"device_properties": json.dumps([{"name": "Tesla V100-SXM2-16GB"}])}
    assert peaks.device_peak(v100, "bf16") == (15.7e12, "table:Tesla V100-SXM2-16GB bf16 (NVIDIA V100 datasheet "
                                                         "(SXM2); no bf16 units: fp32's rate)")
    assert peaks.device_peak(v100, "fp8") == (None, "unknown")
    assert peaks.device_peak(A100, "fp8") == (None, "unknown")          # an A100 has no fp8: no stand-in
    cpu = {"manifest": json.dumps({"device": {"device": "cpu", "physical_cores": 2, "max_freq_hz": 2e9,
                                              "cpu_flags": ["avx2", "fma"]}})}
    peak, source = peaks.device_peak(cpu, "bf16")                       # no AVX-512 BF16 or AMX: fp32's rate
    assert peak == 2 * 2e9 * 32 and source.endswith("; no bf16 units: fp32's rate")


@pytest.mark.parametrize("name, fp16, bandwidth", [
    ("Ascend910B", 320e12, 1.6e12), ("Ascend910B3", 320e12, 1.6e12), ("Ascend910A", 256e12, 1.2e12),
    ("Ascend910PremiumA", 256e12, 1.2e12), ("Ascend 310P3", 70e12, 204.8e9), ("Ascend NPU", None, None),
    ("NVIDIA H100 80GB HBM3", 989.4e12, 3.35e12), ("NVIDIA A100-SXM4-80GB", 312e12, 2.039e12),
    ("AMD Instinct MI300X", 1307.4e12, 5.3e12),
])
def test_table_names_and_bandwidths(name, fp16, bandwidth):
    meta = {"device_properties": json.dumps([{"name": name}])}
    assert peaks.gpu_peak(name, "fp16") == fp16 and peaks.device_bandwidth(meta)[0] == pytest.approx(bandwidth)


def test_every_table_entry_has_every_precision_and_a_source():
    for tokens, entry in peaks.DEVICE_PEAKS:
        assert set(entry.flops) == set(peaks.PRECISIONS) and entry.source and entry.bandwidth, tokens
        known = [entry.flops[p] for p in ("fp32", "tf32", "fp16", "fp8") if entry.flops[p]]
        assert known == sorted(known), f"{tokens}: a narrower precision has a lower peak"
