"""Advisor rules on hand-built runs whose answer is known, and on real traces."""
import json

import pyarrow as pa
import pytest

from perfsight.analysis.advisor import ADVICE, HIGH_GAIN_PCT, MEDIUM_GAIN_PCT, advise, evidence_refs, rated_by_gain
from perfsight.core.tables import SLICES, RunTables, conform

HOST, STREAM = 0, 1


def run(slices: list[dict], tracks: list[dict] | None = None) -> RunTables:
    tracks = tracks or [{"track_id": HOST, "rank": 0, "kind": "thread", "name": "main", "device": "cpu"},
                        {"track_id": STREAM, "rank": 0, "kind": "stream", "name": "cuda:0 stream 7",
                         "device": "cuda:0"}]
    rows = [{"id": i, "depth": 0, **s} for i, s in enumerate(slices)]
    return RunTables(slices=pa.Table.from_pylist(rows, schema=SLICES),
                     tracks=conform("tracks", pa.Table.from_pylist(tracks)))


def step(n, start, dur, track=HOST):
    return {"kind": "step", "name": f"ProfilerStep#{n}", "track_id": track, "start_ns": start, "dur_ns": dur, "step": n}


def rules(tables):
    return {row["rule"]: row for row in advise(tables).to_pylist()}


def test_uneven_ranks_names_the_slowest_rank():
    """Back-to-back steps of 10 ms on rank 0 and 13 ms on rank 1: rank 1 takes 3 ms (30%) longer step by step;
    at 10.5 ms against 10 ms (5%) the ranks are not uneven enough to advise on."""
    ms = 1_000_000
    tracks = [{"track_id": 0, "rank": 0, "kind": "thread", "name": "r0", "device": "cpu"},
              {"track_id": 1, "rank": 1, "kind": "thread", "name": "r1", "device": "cpu"}]

    def steps(rank_ns: int, track: int) -> list[dict]:
        return [step(n, (n - 1) * rank_ns, rank_ns, track=track) for n in (1, 2, 3)]

    advice = rules(run(steps(10 * ms, 0) + steps(13 * ms, 1), tracks))["uneven_ranks"]
    # no collective to wait at: ranks arriving together saves nothing, so 30% slower is not rated on gain
    assert (advice["severity"], advice["what_if"], advice["gain_ns"]) == ("low", "ranks arriving together", 0)
    assert json.loads(advice["evidence"]) == {"straggler_rank": None, "straggler_wait_ns": None, "slowest_rank": 1,
                                              "gap_ns": 3 * ms, "median_step_ns": 10 * ms}
    even = run(steps(10 * ms, 0) + steps(10 * ms + ms // 2, 1), tracks)
    assert "uneven_ranks" not in rules(even)                                  # 5% < 10%


def test_synchronisation_share_over_the_threshold():
    sync = {"kind": "runtime", "name": "cudaStreamSynchronize", "track_id": HOST, "step": 1}
    tables = run([step(1, 0, 1000), {**sync, "start_ns": 100, "dur_ns": 40}, {**sync, "start_ns": 500, "dur_ns": 20}])
    advice = rules(tables)["excessive_synchronisation"]
    assert json.loads(advice["evidence"]) == {"outside_operators": {
        "count": 2, "total_ns": 60, "device_idle_after_ns": None}}       # no device task follows them
    assert "6%" in advice["finding"] and "most in (no operator) (2 calls: cudaStreamSynchronize" in advice["finding"]
    small = run([step(1, 0, 1000), {**sync, "start_ns": 100, "dur_ns": 40}])
    assert "excessive_synchronisation" not in rules(small)


def test_recompilations_from_compiled_region_names():
    region = {"kind": "annotation", "track_id": HOST, "dur_ns": 10}
    tables = run([{**region, "name": "Torch-Compiled Region: 0/0", "start_ns": 0},
                  {**region, "name": "Torch-Compiled Region: 0/1", "start_ns": 20},
                  {**region, "name": "Torch-Compiled Region: 1/0", "start_ns": 40}])
    advice = rules(tables)["recompilations"]
    assert json.loads(advice["evidence"]) == {"frames": {"0": {"recompiles": 1, "executions": 2}}}


def test_fp32_matmuls_on_a_gpu_suggest_autocast():
    op = {"kind": "cpu_op", "track_id": HOST, "input_shapes": "[[2, 2], [2, 2]]", "input_dtypes": '["float", "float"]'}
    kernel = {"kind": "kernel", "track_id": STREAM, "task_type": "KERNEL"}
    tables = run([{**op, "name": "aten::mm", "start_ns": 0, "dur_ns": 10, "external_id": 1},
                  {**kernel, "name": "gemm_kernel", "start_ns": 20, "dur_ns": 600, "external_id": 1},
                  {**op, "name": "aten::add", "start_ns": 30, "dur_ns": 10, "external_id": 2},
                  {**kernel, "name": "add_kernel", "start_ns": 700, "dur_ns": 400, "external_id": 2}])
    advice = rules(tables)["amp_unused"]
    assert "60%" in advice["finding"]
    assert json.loads(advice["evidence"]) == {"ops": {"aten::mm": {"kernels": 1, "kernel_ns": 600}},
                                              "top_kernels": {"gemm_kernel": 600}}
    half = run([{**op, "name": "aten::mm", "start_ns": 0, "dur_ns": 10, "external_id": 1,
                 "input_dtypes": '["c10::Half", "c10::Half"]'},
                {**kernel, "name": "hgemm", "start_ns": 20, "dur_ns": 600, "external_id": 1}])
    assert "amp_unused" not in rules(half)


def test_fp32_kernel_names_suggest_autocast_without_dtypes_unless_on_tensor_cores():
    kernel = {"kind": "kernel", "track_id": STREAM, "task_type": "KERNEL"}
    simt = [{**kernel, "name": "volta_sgemm_128x64_nn", "start_ns": 0, "dur_ns": 300},
            {**kernel, "name": "volta_scudnn_128x64_relu_interior_nn_v1", "start_ns": 300, "dur_ns": 100},
            {**kernel, "name": "elementwise_kernel", "start_ns": 400, "dur_ns": 600}]
    advice = rules(run(simt))["amp_unused"]
    assert "40%" in advice["finding"]
    assert json.loads(advice["evidence"])["top_kernels"] == {"volta_sgemm_128x64_nn": 300,
                                                             "volta_scudnn_128x64_relu_interior_nn_v1": 100}
    tf32 = [{**kernel, "name": "ampere_sgemm_s1688gemm_tf32_128x128", "start_ns": 0, "dur_ns": 400},
            {**kernel, "name": "elementwise_kernel", "start_ns": 400, "dur_ns": 600}]
    assert "amp_unused" not in rules(run(tf32))


def test_nchw_convolutions_suggest_channels_last_on_a_cpu():
    conv = {"kind": "cpu_op", "name": "aten::conv2d", "track_id": HOST,
            "input_shapes": "[[8, 3, 32, 32], [16, 3, 3, 3]]"}
    nchw = '{"Input Strides": [[3072, 1024, 32, 1], [27, 9, 3, 1]]}'
    nhwc = '{"Input Strides": [[3072, 1, 96, 3], [27, 1, 9, 3]]}'
    cpu_only = [{"track_id": HOST, "rank": 0, "kind": "thread", "name": "main", "device": "cpu"}]
    advice = rules(run([step(1, 0, 1000), {**conv, "start_ns": 10, "dur_ns": 300, "args": nchw, "depth": 1}], cpu_only))
    assert json.loads(advice["channels_last"]["evidence"]) == {"convolutions": 1, "conv_ns": 300}
    assert "channels_last" not in rules(run([step(1, 0, 1000), {**conv, "start_ns": 10, "dur_ns": 300,
                                                                 "args": nhwc, "depth": 1}], cpu_only))


def test_nchw_convolution_kernels_suggest_channels_last_on_a_gpu():
    op = {"kind": "cpu_op", "track_id": HOST, "name": "aten::cudnn_convolution", "dur_ns": 10}
    kernel = {"kind": "kernel", "track_id": STREAM, "task_type": "KERNEL"}
    slices = [{**op, "start_ns": 0, "external_id": 1},
              {**kernel, "name": "cudnn::nchwToNhwcKernel", "start_ns": 20, "dur_ns": 50, "external_id": 1},
              {**kernel, "name": "implicit_convolve_sgemm", "start_ns": 100, "dur_ns": 250, "external_id": 1},
              {**kernel, "name": "elementwise_kernel", "start_ns": 400, "dur_ns": 700}]
    advice = rules(run(slices))["channels_last"]
    assert json.loads(advice["evidence"]) == {
        "convolutions": 2, "conv_ns": 300, "nhwc_ns": 0, "layout_transpose_ns": 50,
        "top_kernels": {"implicit_convolve_sgemm": 250, "cudnn::nchwToNhwcKernel": 50}}
    assert "30% of device kernel time, 0% of it in NHWC kernels" in advice["finding"]
    native = [slices[0], {**slices[2], "name": "xmma_fprop_implicit_gemm_nhwckrsc_nhwc"}, slices[3]]
    assert "channels_last" not in rules(run(native))
    transposed = [*slices[:2], {**slices[2], "name": "volta_scudnn_128x32_relu_medium_nhwc_tn_v1"}, slices[3]]
    assert "channels_last" in rules(run(transposed))        # NHWC inside cuDNN, behind its own transposes


def test_real_gpu_trace_gets_amp_advice_with_evidence(shared_data):
    import perfsight

    run_ = perfsight.open(shared_data / "kineto/kineto_tb_plugin/samples/resnet50_num_workers_0")
    advice = rules(run_.tables)["amp_unused"]
    assert json.loads(advice["evidence"])["ops"]


@pytest.mark.parametrize("trace, expected, absent", [
    ("kineto/kineto_tb_plugin/samples/resnet50_num_workers_0",
     {"data_loader_bound", "launch_bound", "amp_unused", "channels_last"}, set()),
    ("kineto/kineto_tb_plugin/samples/resnet50_num_workers_4", set(), {"data_loader_bound"}),
    ("kineto/hta/df_index_resolver", {"communication_not_overlapped", "low_device_utilisation", "host_bound_gaps",
                                      "amp_unused"},
     {"data_loader_bound"}),
    ("kineto/generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz", set(),
     {"low_device_utilisation", "launch_bound", "amp_unused"}),
])
def test_rules_on_real_traces(shared_data, trace, expected, absent):
    import perfsight

    found = rules(perfsight.open(shared_data / trace).tables)
    assert expected <= set(found) and not (absent & set(found))
    for advice in found.values():
        assert advice["threshold"] and advice["suggestion"] and json.loads(advice["evidence"])


def test_memory_near_capacity_uses_the_device_memory_from_the_trace():
    from perfsight.core.tables import MEMORY, meta_table

    tables = run([step(1, 0, 1000)])
    tables.memory = pa.Table.from_pylist([
        {"ts_ns": 10, "bytes": 900, "total_allocated": 900, "total_reserved": 950, "device": "cuda:0", "track_id": 0},
        {"ts_ns": 20, "bytes": -900, "total_allocated": 0, "total_reserved": 950, "device": "cuda:0", "track_id": 0},
    ], schema=MEMORY)
    tables.meta = meta_table({"device_properties": [{"id": 0, "totalGlobalMem": 1000}]})
    advice = rules(tables)["memory_near_capacity"]
    assert "95%" in advice["finding"]
    tables.meta = meta_table({"device_properties": [{"id": 0, "totalGlobalMem": 2000}]})
    assert "memory_near_capacity" not in rules(tables)


def test_evidence_refs_name_the_ranks_steps_ops_and_devices():
    evidence = [
        ("memory_near_capacity", {"devices": {"cuda:0": {"step": 3, "op_type": "aten::mm", "peak_reserved_bytes": 9}}}),
        ("amp_unused", {"ops": {"aten::addmm": {"kernels": 2}, "aten::mm": {"kernels": 1}}}),
        ("uneven_ranks", {"mean_step_ns_by_rank": {"0": 10, "1": 20}, "slowest_rank": 1}),
        ("excessive_synchronisation", {"host_ops": {"aten::item": {"count": 3}}, "outside_operators": {"count": 1}}),
        ("channels_last", {"convolutions": 4, "conv_ns": 100}),
    ]
    advice = pa.Table.from_pylist([{"rule": rule, "evidence": json.dumps(e)} for rule, e in evidence], schema=ADVICE)
    assert [(r["rule"], r["kind"], r["value"]) for r in evidence_refs(advice).to_pylist()] == [
        ("memory_near_capacity", "device", "cuda:0"), ("memory_near_capacity", "step", "3"),
        ("memory_near_capacity", "host_op", "aten::mm"),
        ("amp_unused", "host_op", "aten::addmm"), ("amp_unused", "host_op", "aten::mm"),
        ("uneven_ranks", "rank", "1"), ("uneven_ranks", "rank", "0"),
        ("excessive_synchronisation", "host_op", "aten::item"),
    ]


def test_evidence_refs_of_real_advice(shared_data):
    import perfsight

    advice = advise(perfsight.open(shared_data / "kineto/kineto_tb_plugin/samples/resnet50_num_workers_0").tables)
    refs = {(r["rule"], r["kind"], r["value"]) for r in evidence_refs(advice).to_pylist()}
    assert {("data_loader_bound", "rank", "0"), ("amp_unused", "host_op", "aten::cudnn_convolution")} <= refs


def test_a_queue_only_data_verdict_has_no_wait_share_and_still_advises(monkeypatch):
    """A run with queue samples but no steps: the verdict comes from the queues, its wait share is null."""
    from perfsight.analysis import data
    from perfsight.analysis.advisor import Facts, _data_loader_bound
    from perfsight.analysis.data import DATA_VERDICT

    verdict = pa.Table.from_pylist([{
        "rank": 0, "verdict": "highly", "steps": 0, "data_wait_ns": None, "step_ns": None, "wait_percent": None,
        "max_step_wait_percent": None, "bottleneck_steps": 0, "data_queue_empty_percent": 80.0,
        "host_queue_empty_percent": None, "highly_threshold_percent": 30.0, "moderately_threshold_percent": 10.0,
        "reason": "the data queue was empty in 80.0% of its samples", "suggestions": "more workers"}],
        schema=DATA_VERDICT)
    monkeypatch.setattr(data, "data_verdict", lambda tables: verdict)
    advice = _data_loader_bound(Facts(RunTables()))
    assert advice.evidence == {"ranks": {"0": {"wait_percent": None, "steps": 0, "bottleneck_steps": 0}}}
    [row] = advise(RunTables()).to_pylist()
    # a "highly" verdict, but no steps to replay the wait's removal on: its gain is unknown, so it is rated low
    assert (row["rule"], row["severity"], row["gain_ns"]) == ("data_loader_bound", "low", None)


def test_a_run_replaying_cuda_graphs_is_not_told_to_use_them(shared_data):
    """HTA's trace_diff test trace replays 5,046 kernels through cudaGraphLaunch: the launch-bound rule counts
    the kernels launched one by one (a graph's share its one call) and, like the host-gap rule, suggests what
    is left instead of CUDA graphs; the same model's eager trace (control) is still told about them."""
    import perfsight

    graphs = rules(perfsight.open(shared_data / "kineto/hta/trace_diff/test").tables)
    launch = graphs["launch_bound"]
    assert "5449 of 9972 kernels launched one by one (5,046 more replayed by CUDA graphs)" in launch["finding"]
    assert json.loads(launch["evidence"])["ranks"]["1"] == {"launches": 9972, "graph_kernels": 5046,
                                                           "short_kernels": 5449}
    for rule in ("launch_bound", "host_bound_gaps"):
        assert "The run already replays CUDA graphs (5,046 kernels): capture what still runs outside them" in \
            graphs[rule]["suggestion"]
    eager = rules(perfsight.open(shared_data / "kineto/hta/trace_diff/control").tables)
    assert all("already replays" not in advice["suggestion"] for advice in eager.values())
    assert "CUDA graphs" in eager["launch_bound"]["suggestion"]


def test_estimated_gains_come_from_the_critical_path_what_if():
    from perfsight.analysis.critical_path import SCENARIOS, what_if

    from . import planted_critical
    from .planted_gpu import gpu_run

    tables = planted_critical.device_bound()
    [sync] = [row for row in advise(tables).to_pylist() if row["rule"] == "excessive_synchronisation"]
    changes, label = SCENARIOS["no_sync_waits"]
    [replayed] = what_if(tables, changes).to_pylist()
    # the step waits 8,300 ns in cudaStreamSynchronize for two kernels; without the wait aten::item runs at once
    assert (sync["what_if"], sync["gain_ns"], sync["gain_pct"]) == (label, replayed["saved_ns"], 83.0) \
        and replayed["saved_ns"] == 8300
    gains = {row["rule"]: (row["gain_ns"], row["gain_pct"]) for row in advise(gpu_run()).to_pylist()}
    # planted_gpu: the all-reduce runs beside nothing, but no host call waits for it: overlapping it saves nothing
    # of the step; the data loader's 1,000 ns are on the path; halving the host saves half of its 3,600 ns there
    assert gains == {"communication_not_overlapped": (0, 0.0), "data_loader_bound": (1000, 10.0),
                     "low_device_utilisation": (1800, 18.0), "host_bound_gaps": (1800, 18.0)}


def test_advice_with_a_what_if_is_rated_by_its_gain():
    """planted_gpu's advice: 18% and 10% of the step saved are high; overlapping the all-reduce saves 0 ns, so
    its advice is low (it was rated high whatever it saved, beside "estimated gain 0 ns"), and listed last."""
    from .planted_gpu import gpu_run

    rated = [(row["rule"], row["severity"], row["gain_pct"]) for row in advise(gpu_run()).to_pylist()]
    assert rated == [("data_loader_bound", "high", 10.0), ("low_device_utilisation", "high", 18.0),
                     ("host_bound_gaps", "high", 18.0), ("communication_not_overlapped", "low", 0.0)]


@pytest.mark.parametrize("gain_pct, severity", [
    (None, "low"), (0.0, "low"), (MEDIUM_GAIN_PCT - 0.01, "low"), (MEDIUM_GAIN_PCT, "medium"),
    (HIGH_GAIN_PCT - 0.01, "medium"), (HIGH_GAIN_PCT, "high"), (83.0, "high")])
def test_the_severity_by_gain_thresholds(gain_pct, severity):
    assert rated_by_gain(gain_pct) == severity


def test_advice_is_rated_by_its_gain_or_by_its_rule_never_both_or_neither():
    from perfsight.analysis.advisor import Advice, WhatIf

    change = WhatIf("a change", {"aten::mm": 2.0})
    assert Advice("r", "t", "f", {}, "th", "s", what_if=change).severity is None
    assert Advice("r", "t", "f", {}, "th", "s", severity="medium").what_if is None
    with pytest.raises(ValueError, match="not both"):
        Advice("r", "t", "f", {}, "th", "s", what_if=change, severity="high")
    with pytest.raises(ValueError, match="not neither"):
        Advice("r", "t", "f", {}, "th", "s")
