"""The roofline: each family's FLOPs and bytes against hand counts on planted shapes, and the roofline of a
planted A100 step (bf16 matmul, fp32 layer norm, a host-side add, a collective) with known intensities, bounds
and shares of the roof."""
import json

import pytest

from perfsight.analysis import roofline as rl

from .planted import BASE, MAIN, STREAM, TRACKS, tables_from_rows

BW = 1.555e12                                   # the A100 40GB's bandwidth
A100 = {"device_properties": json.dumps([{"id": 0, "name": "NVIDIA A100-SXM4-40GB"}])}
CONV_ARGS = '{"Concrete Inputs": ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]}'
CONV_T_ARGS = '{"Concrete Inputs": ["", "", "", "[2, 2]", "[0, 0]", "[1, 1]", "True", "[0, 0]", "1"]}'
BWD_ARGS = ('{"Concrete Inputs": ["", "", "", "[4]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", '
            '"[True, True, False]"]}')


@pytest.mark.parametrize("name, shapes, dtypes, args, flops, bytes_", [
    # A [64, 128] x B [128, 256] bf16: 2*64*128*256; (A + B + out [64, 256]) x 2 bytes
    ("aten::mm", [[64, 128], [128, 256]], ["c10::BFloat16"] * 2, None, 4_194_304, (8192 + 32768 + 16384) * 2),
    # addmm: the bias [256] read too
    ("aten::addmm", [[256], [64, 128], [128, 256]], ["float"] * 3, None, 4_194_304,
     (256 + 8192 + 32768 + 16384) * 4),
    # X [2, 3, 8, 8], W [4, 3, 3, 3], bias [4], padding 1: Y [2, 4, 8, 8]; 2 x 2 x 64 positions x 108
    ("aten::convolution", [[2, 3, 8, 8], [4, 3, 3, 3], [4], [], [], [], [], [], []], ["float"] * 3, CONV_ARGS,
     27_648, (384 + 108 + 4 + 512) * 4),
    # transposed, stride 2: X [1, 4, 5, 5], W [4, 2, 2, 2]: Y [1, 2, 10, 10] (= (5 - 1) * 2 + 1 + 1)
    ("aten::convolution", [[1, 4, 5, 5], [4, 2, 2, 2], [], [], [], [], [], [], []], ["float"] * 2, CONV_T_ARGS,
     2 * 1 * 25 * 32, (100 + 32 + 200) * 4),
    # both gradients: twice (dY 512 + X 384 + W 108) x 4
    ("aten::convolution_backward", [[2, 4, 8, 8], [2, 3, 8, 8], [4, 3, 3, 3]], ["float"] * 3, BWD_ARGS,
     2 * 27_648, 2 * (512 + 384 + 108) * 4),
    # Q [2, 4, 8, 16], K and V [2, 4, 10, 16] bf16: O [2, 4, 8, 16]
    ("aten::_scaled_dot_product_flash_attention", [[2, 4, 8, 16], [2, 4, 10, 16], [2, 4, 10, 16]],
     ["c10::BFloat16"] * 3, None, 2 * 64 * 10 * 32, (1024 + 1280 + 1280 + 1024) * 2),
    ("aten::_scaled_dot_product_flash_attention_backward",
     [[2, 4, 8, 16], [2, 4, 8, 16], [2, 4, 10, 16], [2, 4, 10, 16], [2, 4, 8, 16]], ["c10::BFloat16"] * 5, None,
     2 * 2 * 64 * 10 * 32, 2 * (1024 + 1280 + 1280 + 1024) * 2),
    # X [8, 1024], weight and bias [1024]: 5 FLOPs per element of X; inputs + an output like X
    ("aten::native_layer_norm", [[8, 1024], [], [1024], [1024], []], ["float", "", "float", "float", "Double"],
     None, 5 * 8192, (8192 + 1024 + 1024) * 4 + 8192 * 4),
    # broadcast add: the output is like the larger input
    ("aten::add", [[1024, 1024], [1024], []], ["float", "float", "Scalar"], None, 1_048_576,
     (1_048_576 + 1024) * 4 + 1_048_576 * 4),
    ("aten::sum", [[256, 512], [], [], []], ["float"], None, 131_072, 131_072 * 4),
    # W [1000, 64] fp32, indices [32, 16] int64: the indices + the 512 rows read + the output written
    ("aten::embedding", [[1000, 64], [32, 16], [], [], []], ["float", "long int"], None, 0,
     512 * 8 + 2 * 512 * 64 * 4),
    ("aten::copy_", [[1024], [1024], []], ["float", "float", "Bool"], None, 0, 2 * 1024 * 4),
    ("aten::zero_", [[1024]], ["float"], None, 0, 1024 * 4),
    ("aten::clone", [[1024], []], ["c10::Half"], None, 0, 2 * 1024 * 2),
    # a collective's tensors (a list), without dtypes: the precision's size (fp32)
    ("c10d::allreduce_", [[[256, 4], [128]], [], []], [], None, 0, (1024 + 128) * 4),
])
def test_each_familys_flops_and_bytes_by_hand(name, shapes, dtypes, args, flops, bytes_):
    assert rl.work_of(name, json.dumps(shapes), json.dumps(dtypes), args) == (flops, bytes_)


def test_shapes_that_do_not_fit_and_unmodelled_ops_are_nan():
    import math

    for name, shapes in (("aten::mm", [[4, 5], [6, 7]]), ("aten::relu_unknown", [[4]]), ("aten::mm", "oops")):
        assert all(math.isnan(x) for x in rl.work_of(name, json.dumps(shapes), None, None))


def _s(id, kind, name, start, dur, *, track=MAIN, depth=1, parent=1, **extra):
    return {"id": id, "kind": kind, "name": name, "op_type": name, "track_id": track, "start_ns": BASE + start,
            "dur_ns": dur, "depth": depth, "parent_id": parent, "step": 1, **extra}


def planted_step(meta=A100):
    """bf16 mm [64, 128] x [128, 256] with a 1000 ns kernel; an fp32 layer norm [8, 1024] (its 100 ns kernel
    launched by the aten::native_layer_norm nested in aten::layer_norm: the outer op counts, once); an add with no
    kernel (it ran on the host); an all-reduce of 1 MiB whose NCCL kernel takes 10 us; a relu wrapping a
    clamp_min (the relu counts)."""
    ln = '[[8, 1024], [], [1024], [1024], []]'
    slices = [
        _s(1, "step", "ProfilerStep#1", 0, 50_000, depth=0, parent=None),
        _s(2, "cpu_op", "aten::mm", 100, 50, external_id=50, input_shapes="[[64, 128], [128, 256]]",
           input_dtypes='["c10::BFloat16", "c10::BFloat16"]'),
        _s(3, "kernel", "ampere_bf16_s16816gemm_bf16", 5000, 1000, track=STREAM, depth=0, parent=None,
           external_id=50),
        _s(4, "cpu_op", "aten::layer_norm", 200, 50, external_id=51, input_shapes=ln,
           input_dtypes='["float", "", "float", "float", "Double"]'),
        _s(5, "cpu_op", "aten::native_layer_norm", 210, 30, depth=2, parent=4, external_id=52, input_shapes=ln,
           input_dtypes='["float", "", "float", "float", "Double"]'),
        _s(6, "kernel", "vectorized_layer_norm_kernel<float>", 7000, 100, track=STREAM, depth=0, parent=None,
           external_id=52),
        _s(7, "cpu_op", "aten::add", 300, 500, input_shapes="[[1024], [1024], []]",
           input_dtypes='["float", "float", "Scalar"]'),
        _s(8, "cpu_op", "c10d::allreduce_", 900, 50, external_id=53, input_shapes="[[[262144]], [], []]",
           input_dtypes='["GenericList", "", ""]'),
        _s(9, "comm", "ncclKernel_AllReduce_RING_LL_Sum_float", 9000, 10_000, track=STREAM, depth=0, parent=None,
           external_id=53),
        _s(10, "cpu_op", "aten::relu", 1000, 40, input_shapes="[[4096]]", input_dtypes='["float"]'),
        _s(11, "cpu_op", "aten::clamp_min", 1005, 30, depth=2, parent=10, input_shapes="[[4096], []]",
           input_dtypes='["float", "Scalar"]'),
    ]
    return tables_from_rows(slices=slices, tracks=TRACKS, meta=meta)


def test_roofline_of_a_planted_step():
    rows = {r["op_type"]: r for r in rl.roofline(planted_step()).to_pylist()}
    assert set(rows) == {"aten::mm", "aten::layer_norm", "aten::add", "c10d::allreduce_", "aten::relu"}
    mm = rows["aten::mm"]
    mm_bytes = (8192 + 32768 + 16384) * 2
    assert (mm["family"], mm["precision"], mm["flops"], mm["bytes"], mm["op_ns"]) == (
        "matmul", "bf16", 4_194_304, mm_bytes, 1000)
    assert mm["intensity"] == pytest.approx(4_194_304 / mm_bytes)            # 36.6 FLOP/byte
    assert mm["ridge"] == pytest.approx(312e12 / BW) and mm["bound"] == "memory"   # below 200.6
    assert mm["attainable_flops_per_s"] == pytest.approx(4_194_304 / mm_bytes * BW)
    assert mm["roof_ns"] == round(mm_bytes / BW * 1e9) == 74                 # 73.75 ns at the bandwidth
    assert mm["roof_percent"] == pytest.approx(100 * 74 / 1000) and mm["below_roof_ns"] == 1000 - 74
    ln = rows["aten::layer_norm"]
    ln_bytes = (8192 + 2048) * 4 + 8192 * 4
    assert (ln["family"], ln["flops"], ln["bytes"], ln["op_ns"], ln["time_source"]) == (
        "normalisation", 40_960, ln_bytes, 100, "device")
    assert ln["bound"] == "memory" and ln["roof_ns"] == round(ln_bytes / BW * 1e9) == 47
    add = rows["aten::add"]                  # no kernel in a run with device tasks: ran on the host, no roof
    assert (add["time_source"], add["op_ns"], add["roof_ns"], add["roof_percent"]) == ("host", 500, None, None)
    comm = rows["c10d::allreduce_"]
    assert (comm["bound"], comm["bytes"], comm["op_ns"], comm["roof_ns"], comm["attainable_flops_per_s"]) == (
        "communication", 262144 * 4, 10_000, None, None)
    assert rows["aten::relu"]["count"] == 1                                  # its clamp_min is not counted again
    ordered = [r["op_type"] for r in rl.roofline(planted_step()).to_pylist()]
    assert ordered[:2] == ["aten::mm", "aten::layer_norm"]                   # furthest below the roof first


def test_unknown_peak_or_bandwidth_leaves_the_roof_null_and_arguments_fill_it():
    unknown = rl.roofline(planted_step({"device_properties": json.dumps([{"name": "Quadro RTX 8000"}])}))
    assert {r["bound"] for r in unknown.to_pylist() if r["family"] != "collective"} == {None}
    assert set(unknown["roof_ns"].to_pylist()) == {None}
    given = {r["op_type"]: r for r in rl.roofline(planted_step({}), peak_flops=1e12, peak_bandwidth=1e11).to_pylist()}
    mm = given["aten::mm"]
    assert (mm["peak_source"], mm["bandwidth_source"], mm["ridge"]) == ("argument", "argument", 10.0)
    assert mm["bound"] == "compute" and mm["roof_ns"] == round(4_194_304 / 1e12 * 1e9)   # 36.6 > 10: compute


def test_above_the_roof_keeps_its_number_and_names_the_op():
    rows = {r["op_type"]: r for r in rl.roofline(planted_step(), peak_bandwidth=1e9).to_pylist()}
    mm = rows["aten::mm"]                                  # 114,688 bytes in 1 us: 115 GB/s against 1 GB/s
    assert mm["roof_percent"] > 100 and mm["peak_note"] == f"aten::mm (bf16): {rl.OVER_ROOF_NOTE}"
    assert rl.roofline(planted_step())["peak_note"].null_count == len(rows)


def test_the_advisor_names_the_operators_furthest_below_their_roof():
    """The mm's kernel takes 20 us for 74 ns at its roof (0.37%), the layer norm 100 ns for 47 ns (47%): both
    under 50%, 19,926 + 53 ns beyond their roof, 40% of the 50 us step; the mm first (rated by its gain)."""
    from perfsight.analysis.advisor import Facts, _below_roof

    tables = planted_step()
    slices = tables.slices.to_pylist()
    next(s for s in slices if s["id"] == 3)["dur_ns"] = 20_000
    slow = tables_from_rows(slices=slices, tracks=TRACKS, meta=A100)
    advice = _below_roof(Facts(slow))
    assert (advice.rule, advice.severity) == ("below_roofline", None)      # rated by its gain in advise
    assert list(advice.evidence["ops"]) == ["aten::mm", "aten::layer_norm"]
    assert advice.evidence["ops"]["aten::mm"] == {"precision": "bf16", "bound": "memory", "op_ns": 20_000,
                                                  "roof_ns": 74, "below_roof_ns": 19_926, "roof_percent": 0.37}
    assert "aten::mm (bf16, memory-bound, 0% of its roof)" in advice.finding
    assert _below_roof(Facts(planted_step())) is None          # 979 ns beyond the roof: 2% of the step


def test_the_below_roofline_advice_s_gain_replays_the_operators_at_their_roof():
    """The same slow step: aten::mm made 20,000 / 74 times faster and aten::layer_norm 100 / 47 times; the
    advice's gain is that what-if's, whatever it is (the replay is tested on planted steps of its own)."""
    from perfsight.analysis.advisor import advise, rated_by_gain
    from perfsight.analysis.critical_path import what_if

    slices = planted_step().slices.to_pylist()
    next(s for s in slices if s["id"] == 3)["dur_ns"] = 20_000
    slow = tables_from_rows(slices=slices, tracks=TRACKS, meta=A100)
    [row] = [r for r in advise(slow).to_pylist() if r["rule"] == "below_roofline"]
    [replayed] = what_if(slow, {"aten::mm": 20_000 / 74, "aten::layer_norm": 100 / 47}).to_pylist()
    assert row["what_if"] == "the named operators at their roofline"
    assert row["gain_ns"] == replayed["saved_ns"] > 0
    assert row["severity"] == rated_by_gain(row["gain_pct"])
