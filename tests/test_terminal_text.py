"""The terminal report prints a trace's own texts as they are (brackets in them are not rich markup) and cuts
long kernel names to their function names."""
import json
from io import StringIO

import pytest
from rich.console import Console

import perfsight
from perfsight.analysis.summary import run_summary
from perfsight.views.terminal import NAME_WIDTH, _short, print_summary

HOSTILE = ["[/red]", "op[bold]x", "[link=http://x]y", "aten::mm[/]"]


def _trace(path):
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0,
               "dur": 100}]
    events += [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 10 + 20 * i, "dur": 10 + i,
                "args": {"External id": i + 1}} for i, name in enumerate(HOSTILE)]
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 90, "dur": 5,
                   "args": {"Input Dims": [[4, 5], [5, 7]]}})
    events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 12,
                   "s": "t", "args": {"Addr": 1, "Bytes": 64, "Total Allocated": 64, "Total Reserved": 0,
                                      "Device Type": 0, "Device Id": -1}})
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_brackets_in_names_and_paths_are_printed_verbatim(tmp_path):
    trace = _trace(tmp_path / "[x] run.pt.trace.json")
    out = StringIO()
    print_summary(str(trace), run_summary(perfsight.open(trace).tables), Console(file=out, width=80))
    text = out.getvalue()
    assert f"perfsight run {trace}" in text
    for name in HOSTILE:
        assert f"│ {name} " in text
    assert "memory peak cpu (rank 0): 64 B allocated, 0 B reserved, in step 1 during [/red]" in text
    assert ("FLOPs (rank 0): 280 FLOP per step, 2.800 MFLOP/s achieved, utilisation unknown: no known peak for "
            "this device") in " ".join(text.split())   # 2 x 4 x 5 x 7 FLOP in a 100 us step
    assert ("data preparation (rank 0): not input-bound; data wait is 0.0% of step time over 1 steps (0 steps >= "
            "10%) (thresholds: highly >= 30%, moderately >= 10% of step time)") in " ".join(text.split())
    assert max(len(line) for line in text.splitlines()[1:]) <= 80  # the path on the first line is kept whole


@pytest.mark.parametrize("name, shown", [
    ("void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*, long, long, "
     "int, int, int, int, int, int, int, int, int, int, float*, long*)", "native::max_pool_forward_nchw<…>"),
    ("cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>("
     "cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)", "cudnn::ops::nchwToNhwcKernel<…>"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> "
     ">(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)", "vectorized_elementwise_kernel<…>"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(cutlass_80_tensorop_s1688gemm_"
     "128x128_32x3_nn_align4::Params)", "cutlass_80_…128x128_32x3_nn_align4"),
    ("void some::ns::Kernel2<128>(int, int, float*, float*, float*, float*, float*)", "some::ns::Kernel2<…>"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "ncclKernel_…duce_RING_LL_Sum_float"),
    ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
    ("aten::_log_softmax_backward_data", "aten::_log_softmax_backward_data"),
])
def test_long_kernel_names_are_cut_to_their_function_name(name, shown):
    assert _short(name) == shown and len(shown) <= NAME_WIDTH


@pytest.mark.parametrize("events, said", [
    ([{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}}], "no timed events in this run"),
    ([{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 5}],
     "no steps (no ProfilerStep#N ranges)"),
])
def test_a_run_without_events_or_steps_says_so(tmp_path, events, said):
    trace = tmp_path / "t.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = StringIO()
    print_summary(str(trace), run_summary(perfsight.open(trace).tables), Console(file=out, width=80))
    assert said in " ".join(out.getvalue().split())


def test_a_memory_peak_outside_steps_and_operators_says_so():
    from perfsight.views.terminal import _where

    assert _where(None, None) == "outside steps, in no operator"
    assert _where(3, "aten::mm[x]") == "in step 3 during aten::mm\\[x]"


def test_the_profiled_steps_table_adds_up(shared_data, tmp_path):
    """Each row: iteration = gap + fwd+bwd + tail, to the printed microsecond (the gap column was missing)."""
    import shutil

    from tests.analysis.planted_host import CPU_TRACE

    trace = shutil.copy(shared_data / CPU_TRACE, tmp_path)
    out = StringIO()
    print_summary(str(trace), run_summary(perfsight.open(trace).tables), Console(file=out, width=80))
    lines = out.getvalue().splitlines()
    header = next(i for i, line in enumerate(lines) if "┃ step ┃ iteration ┃" in line)
    assert [c.strip() for c in lines[header].split("┃")[1:-1]] == ["step", "iteration", "gap", "fwd+bwd", "tail",
                                                                   "data wait"]
    rows = [[float(c.replace(",", "")) for c in line.split("│")[1:-1]] for line in lines[header + 2:header + 5]]
    assert [row[0] for row in rows] == [2, 3, 4]
    for _step, iteration, gap, fp_bp, tail, _wait in rows:
        assert abs(gap + fp_bp + tail - iteration) <= 0.0015


def test_the_headline_is_the_median_of_the_profiled_steps(tmp_path):
    """Steps of 100, 200 and 900 us: the median (0.200 ms) is the headline, with how many steps and the mean."""
    events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": ts,
               "dur": dur} for n, ts, dur in ((1, 0, 100), (2, 100, 200), (3, 300, 900))]
    trace = tmp_path / "steps.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    out = StringIO()
    print_summary(str(trace), run_summary(perfsight.open(trace).tables), Console(file=out, width=120))
    assert "median step 0.200 ms (median of 3 profiled steps; mean 0.400 ms)" in out.getvalue()
    assert "the collector timed" not in out.getvalue()      # a plain trace has no step-time series


def test_the_demo_report_computes_each_analysis_once(shared_data, tmp_path, monkeypatch):
    import shutil
    from pathlib import Path

    from perfsight.views.terminal import print_run_summary
    from tests.analysis_counts import count_analyses, repeated

    trace = Path(shutil.copy(shared_data / "kineto/hta/trace_filter/sampled_rank-0.json.gz", tmp_path))
    calls = count_analyses(monkeypatch)
    out = StringIO()
    from perfsight.analysis import summary as summary_module  # its run_summary is the counting one
    from perfsight.core.memo import computed

    summary = computed(summary_module.run_summary, perfsight.open(trace).tables)      # as cmd_demo gets it
    print_run_summary(trace, summary, [], Console(file=out, width=100))
    assert "Profiled steps" in out.getvalue() and repeated(calls) == {}
    assert len(calls["summary.run_summary"]) == 1 and len(calls["steps.step_points"]) == 1


def test_the_breakdown_table_shows_every_category_of_the_analysis():
    """The terminal prints breakdown.CATEGORIES (and idle), not a list of its own that could miss one."""
    import pyarrow as pa

    from perfsight.analysis.breakdown import CATEGORIES, STEP_BREAKDOWN_AVERAGE
    from perfsight.views.terminal import _print_breakdown

    parts = (*CATEGORIES, "idle")
    row = {"rank": 0, "steps": 1, "step_ns": 1_000_000 * len(parts), "median_step_ns": 1_000_000 * len(parts),
           **{f"{c}_ns": 1_000_000 for c in parts}, **{f"{c}_pct": 100 / len(parts) for c in parts}}
    out = StringIO()
    _print_breakdown(pa.Table.from_pylist([row], schema=STEP_BREAKDOWN_AVERAGE), Console(file=out, width=80))
    shown = [line.split("│")[1].strip() for line in out.getvalue().splitlines() if line.count("│") > 2]
    assert shown == [c.replace("_", " ") for c in parts] + ["step"]
