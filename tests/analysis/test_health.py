"""Trace health (analysis/health.py): every check on a planted trace with its exact answer, a clean trace with no
finding, the real traces' findings pinned (each with why), and the report, JSON and Run method showing them."""
import json
from io import StringIO

import pytest
from rich.console import Console

import perfsight
from perfsight.analysis.health import CHECKS, CLOCK_SKEW_THRESHOLD_NS, health_by_check, trace_health
from perfsight.analysis.summary import run_summary
from perfsight.views.jsonable import dumps
from perfsight.views.terminal import print_summary

from .planted_gpu import gpu_run
from .planted_health import PLANTINGS, health_trace
from .planted_nccl_job import SHIFT_NS, write_nccl_job


def _findings(tables) -> dict:
    """(rank, check) -> (count, affected_ns, example) of the rows with findings."""
    return {(r["rank"], r["check"]): (r["count"], r["affected_ns"], r["example"])
            for r in trace_health(tables).to_pylist() if r["count"]}


def test_a_clean_trace_has_every_check_and_no_finding(tmp_path):
    run = perfsight.open(health_trace(tmp_path / "clean.pt.trace.json"))
    health = run.trace_health()
    assert health.column("check").to_pylist() == list(CHECKS)          # one row per rank and check
    assert health.column("count").to_pylist() == [0] * len(CHECKS)
    assert health.column("detail").to_pylist() == [None] * len(CHECKS)  # the window was recorded: checked
    assert json.loads(run.meta["profiling_windows"]) == [[1_000_000_000, 1_010_000_000]]
    assert run_summary(run.tables)["health"].num_rows == 0


@pytest.mark.parametrize("planting", sorted(PLANTINGS))
def test_each_planted_damage_is_found_exactly_and_nothing_else(tmp_path, planting):
    check, count, affected_ns = PLANTINGS[planting]
    run = perfsight.open(health_trace(tmp_path / f"{planting}.pt.trace.json", planting))
    found = _findings(run.tables)
    assert {key: value[:2] for key, value in found.items()} == {(0, check): (count, affected_ns)}


def test_examples_name_the_first_affected_event(tmp_path):
    def example(planting):
        run = perfsight.open(health_trace(tmp_path / f"{planting}.pt.trace.json", planting))
        return _findings(run.tables)[(0, PLANTINGS[planting][0])][2]

    assert example("overlap").startswith("k_overlap (slice ")
    assert example("outside").startswith("aten::early (slice ")     # by time: it starts first
    assert example("taskless").startswith("cudaLaunchKernel (slice ")
    assert example("dropped").endswith("CUPTI stopped early? = 1")   # INFO's lines come first


def test_details_say_what_the_readers_dropped(tmp_path):
    run = perfsight.open(health_trace(tmp_path / "overflow.pt.trace.json", "overflow"))
    row = next(r for r in run.trace_health().to_pylist() if r["check"] == "duration_overflow")
    assert row["detail"] == ("1 complete events lasting more than 2^50 ns (13 days) (skipped); "
                             "1 complete events with a negative dur (set to 0)")


def test_a_trace_without_window_marks_is_not_checked_for_it(tmp_path):
    path = health_trace(tmp_path / "t.pt.trace.json", "outside")
    trace = json.loads(path.read_text())
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("ph") != "i"]
    path.write_text(json.dumps(trace))
    row = next(r for r in perfsight.open(path).trace_health().to_pylist() if r["check"] == "outside_window")
    assert (row["count"], row["detail"]) == (0, "not checked: the source records no profiling window")


def test_planted_table_run_overlap_and_unlaunched_memset():
    # planted_gpu: on stream 8 the all-reduce runs [2500, 4500) and the memset (no correlation id) starts at
    # 4400, before it ended: one overlap of the memset's 200 ns, and a task without its launch call
    assert _findings(gpu_run()) == {(0, "stream_overlap"): (1, 200, "Memset (Device) (slice 25)"),
                                    (0, "task_without_launch"): (1, 200, "Memset (Device) (slice 25)")}
    by_check = health_by_check(trace_health(gpu_run())).to_pylist()
    assert [(r["check"], r["ranks"], r["first_rank"], r["count"], r["affected_ns"]) for r in by_check] == [
        ("stream_overlap", 1, 0, 1, 200), ("task_without_launch", 1, 0, 1, 200)]
    assert "temporal_breakdown" in by_check[0]["affects"] and "memory_peak" not in by_check[0]["affects"]


def test_clock_skew_of_a_job(tmp_path):
    # planted_nccl_job: rank 1's clock reads 7,000,123 ns more (its three all-reduces say so)
    run = perfsight.open(write_nccl_job(tmp_path / "job"))
    assert SHIFT_NS >= CLOCK_SKEW_THRESHOLD_NS
    assert _findings(run.tables) == {(1, "clock_skew"): (1, SHIFT_NS, None)}
    row = next(r for r in run.trace_health().to_pylist() if r["check"] == "clock_skew" and r["rank"] == 1)
    assert row["detail"].startswith("7000123 ns from rank 0's clock")


def test_report_json_and_terminal_show_the_findings(tmp_path):
    run = perfsight.open(health_trace(tmp_path / "t.pt.trace.json", "overlap"))
    summary = run_summary(run.tables)
    [row] = json.loads(dumps(summary))["health"]
    assert (row["check"], row["count"], row["affected_ns"]) == ("stream_overlap", 1, 100_000)
    out = StringIO()
    print_summary("t", summary, Console(file=out, width=100))
    text = out.getvalue()
    assert "rank 0: 1 device tasks overlapping an earlier task of their stream, 0.100 ms (stream_overlap)" in text
    assert "affects: temporal_breakdown, kernel_type_breakdown" in text
    clean = StringIO()
    print_summary("c", run_summary(perfsight.open(health_trace(tmp_path / "c.pt.trace.json")).tables),
                  Console(file=clean, width=100))
    assert "trace health: no problems found" in clean.getvalue()


#: the real traces' findings, (rank, check) -> (count, affected_ns), with why they are there
REAL_FINDINGS = {
    # HTA's trace for negative queue lengths: 872 tasks queued before the trace began (their correlation ids
    # are below every call's: their launches are not in it, which is why HTA's queue length went negative),
    # and a pageable copy whose recorded start precedes the end of the task before it on its stream
    "hta/negative_queue_length_values_check/rank0.json.gz": {
        (0, "stream_overlap"): (1, 7_000), (0, "launch_outside_trace"): (872, 59_526_000)},
    # 31 kernels on stream 7 start 1-10 us before the previous one ended (integer-us timestamps rounded
    # apart), and 614 tasks were launched before the trace
    "hta/trace_diff/test/test.json.gz": {(1, "stream_overlap"): (31, 1_527_000),
                                         (1, "launch_outside_trace"): (614, 56_517_000)},
    # a ProfilerStep#1 of another pid that starts 1.8 ms before the window's end and lasts 13.3 s
    "hta/triton_example/triton_example.json.gz": {(0, "outside_window"): (1, 13_336_315_805)},
    # cudaMemsetAsync calls in mid-trace with no memset task (cudaMemsetAsync launches one elsewhere)
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz": {
        (0, "launch_without_task"): (2, 1_000)},
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": {
        (0, "launch_without_task"): (235, 76_919)},
    # HTA's trimmed comparison trace: its first tasks' launches were cut away (6 below the calls' ids), 10
    # tasks' calls were cut from the middle, and one cudaLaunchKernel lost its kernel
    "hta/trace_compare/test/test.json.gz": {(1, "launch_outside_trace"): (6, 37_000),
                                            (1, "task_without_launch"): (10, 1_649_000),
                                            (1, "launch_without_task"): (1, 4_000)},
    # clean, the window recorded: the CPU-only trace and a full GPU trace with its profiler spans (the
    # __cupti_profiler__ span ends 4.4 ms after Record Window End: the window reaches the spans' ends)
    "generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz": {},
    "hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz": {},
    "hta/df_index_resolver/df_index_resolver.json.gz": {},
}


@pytest.mark.parametrize("trace", sorted(REAL_FINDINGS))
def test_real_traces_findings(shared_data, trace):
    found = _findings(perfsight.open(shared_data / "kineto" / trace).tables)
    assert {key: value[:2] for key, value in found.items()} == REAL_FINDINGS[trace]


def test_real_ascend_job(shared_data):
    # torch_npu level1, two ranks: 25 aclopCompileAndExecute calls per rank have no device task of their
    # connection id although others of that name launch one (single-operator calls that ran on the host);
    # rank 1's clock is 8,136 ns from rank 0's: under the skew threshold. No window is recorded.
    health = perfsight.open(shared_data / "ascend" / "torch_npu" / "text" / "level1").trace_health().to_pylist()
    assert {(r["rank"], r["check"]): r["count"] for r in health if r["count"]} == {
        (0, "launch_without_task"): 25, (1, "launch_without_task"): 25}
    assert {r["detail"] for r in health if r["check"] == "outside_window"} == {
        "not checked: the source records no profiling window"}


def test_a_report_of_many_ranks_shows_one_line_per_check():
    """17 ranks each with the planted_gpu overlap: the terminal prints the check once, over every rank."""
    import pyarrow as pa
    from rich.console import Console

    from perfsight.views.terminal import print_health

    one = trace_health(gpu_run()).to_pylist()
    health = pa.Table.from_pylist([{**row, "rank": rank} for rank in range(17) for row in one if row["count"]],
                                  schema=trace_health(gpu_run()).schema)
    console = Console(record=True, width=100)
    print_health({"health": health, "health_by_check": health_by_check(health)}, console)
    shown = console.export_text()
    assert "rank 17 ranks, first 0: 17 device tasks overlapping an earlier task of their stream, 0.003 ms" in shown
    assert shown.count("(stream_overlap)") == 1
