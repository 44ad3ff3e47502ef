"""temporal_breakdown / step_breakdown / overlap: planted answers, interval arithmetic against brute force,
and agreement with Holistic Trace Analysis' reference outputs on real traces.

HTA comparisons run on ``hta_view`` (tests/analysis/hta_conventions.py): HTA's float64-microsecond
rounding and its dropping of the last ProfilerStep are replicated, so perfsight's functions see what HTA
saw. With that, every compared figure agrees to HTA's printed precision (the tolerance is 1%). Left out,
with the reason:
* event_sync's temporal breakdown is compared with ``sync_as_device_work``: HTA counts the cuda_sync
  "Stream Sync" on stream 7 as GPU (non-compute) work; perfsight does not count waiting as device work;
* triton: HTA counts the host cpu_op ``triton_poi_fused_add_cos_sin_0`` (95.8 us) as a GPU kernel because
  its args carry ``stream: 0``; perfsight counts the real 1.76 us kernel, so HTA's 95 us is wrong;
* CPU-only traces: HTA has no temporal breakdown (it crashes); perfsight returns no rows.
"""
import numpy as np
import pyarrow as pa
import pytest

from perfsight.analysis import breakdown, intervals

from . import hta_conventions as hta
from .planted import BASE, training_run
from .planted_gpu import cpu_only_run, gpu_run

# --- interval arithmetic --------------------------------------------------------------------------------


def _brute(starts, ends, horizon):
    line = np.zeros(horizon, dtype=bool)
    for a, b in zip(starts, ends):
        line[a:b] = True
    return line


def test_merge_covered_and_exact_cover_match_brute_force():
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(0, 40))
        sets = {}
        for name in ("a", "b", "c"):
            s = rng.integers(0, 500, n)
            sets[name] = (s, s + rng.integers(0, 60, n))
        lines = {k: _brute(*v, 600) for k, v in sets.items()}
        merged = intervals.merge(*sets["a"])
        assert intervals.length(merged) == lines["a"].sum()
        assert np.all(merged[0][1:] > merged[1][:-1])                    # disjoint, not touching
        t = rng.integers(0, 600, 20)
        assert intervals.covered(merged, t).tolist() == [int(lines["a"][:x].sum()) for x in t]
        a, b = np.sort(rng.integers(0, 600, (2, 10)), axis=0)
        assert intervals.within(merged, a, b).tolist() == [int(lines["a"][x:y].sum()) for x, y in zip(a, b)]
        cover = intervals.exact_cover(sets)
        masks = lines["a"] * 1 + lines["b"] * 2 + lines["c"] * 4
        assert cover == {m: int((masks == m).sum()) for m in range(1, 8) if (masks == m).sum()}


# --- planted answers ------------------------------------------------------------------------------------


def test_step_breakdown_planted_gpu_step_adds_up():
    [row] = breakdown.step_breakdown(gpu_run()).to_pylist()
    assert (row["rank"], row["step"], row["start_ns"], row["step_ns"]) == (0, 1, BASE, 10000)
    assert {c: row[f"{c}_ns"] for c in (*breakdown.CATEGORIES, "idle")} == {
        "compute": 1510,          # gemm + relu [2000, 3500) + tiny [7150, 7160)
        "communication": 1000,    # allreduce [2500, 4500) minus the compute under it
        "memory": 300,            # memset [4500, 4600) beyond the allreduce + memcpy [5200, 5400)
        "runtime": 300,           # launches at 1700, 5000, 7000 (the ones at 2000, 2200 run under kernels)
        "dataloader": 1000,
        "host_ops": 1790,         # linear [1500, 3000) - launch - gemm = 400; add_ 1500 - launch - tiny = 1390
        "python": 500,            # [6000, 6500), before add_ starts
        "idle": 3600,
    }


def test_step_breakdown_cpu_only():
    [row] = breakdown.step_breakdown(cpu_only_run()).to_pylist()
    assert {c: row[f"{c}_ns"] for c in (*breakdown.CATEGORIES, "idle")} == {
        "compute": 0, "communication": 0, "memory": 0, "runtime": 500, "dataloader": 1000,
        "host_ops": 2600, "python": 500, "idle": 5400}


def test_step_breakdown_average_adds_up():
    table = breakdown.step_breakdown(training_run())
    rows = table.to_pylist()
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert sum(r[f"{c}_ns"] for c in (*breakdown.CATEGORIES, "idle")) == r["step_ns"] == 10000
    assert rows[0]["compute_ns"] == 500 and rows[0]["memory_ns"] == 100      # gemm, Memcpy DtoH
    [avg] = breakdown.step_breakdown_average(table).to_pylist()
    assert avg["steps"] == 2 and avg["step_ns"] == 10000 and avg["compute_ns"] == 400
    assert sum(avg[f"{c}_ns"] for c in (*breakdown.CATEGORIES, "idle")) == avg["step_ns"]
    assert sum(avg[f"{c}_pct"] for c in (*breakdown.CATEGORIES, "idle")) == pytest.approx(100)


def test_step_breakdown_average_has_the_median_step():
    """An odd count: the middle step; an even one: the mean of the middle two, rounded to the ns."""
    for steps, median in (([10, 600, 30], 30), ([10, 600, 30, 41], 36)):
        columns = {f"{c}_ns": [0] * len(steps) for c in (*breakdown.CATEGORIES, "idle")}
        columns.update(rank=[0] * len(steps), step_ns=steps, idle_ns=steps)
        [avg] = breakdown.step_breakdown_average(pa.table(columns)).to_pylist()
        mean = round(sum(steps) / len(steps))
        assert (avg["steps"], avg["median_step_ns"], avg["step_ns"]) == (len(steps), median, mean)


def test_step_breakdown_average_apportions_whole_ns():
    """Means of 1.5 ns round up independently (2 + 2 > the mean step of 3): apportioned, none goes negative."""
    zero = [0, 0]
    columns = {f"{c}_ns": zero for c in (*breakdown.CATEGORIES, "idle")}
    columns.update(rank=[0, 0], step_ns=[3, 3], compute_ns=[1, 2], host_ops_ns=[2, 1])
    [avg] = breakdown.step_breakdown_average(pa.table(columns)).to_pylist()
    parts = {c: avg[f"{c}_ns"] for c in (*breakdown.CATEGORIES, "idle")}
    assert avg["step_ns"] == 3 and sum(parts.values()) == 3 and min(parts.values()) == 0
    assert sorted((parts["compute"], parts["host_ops"])) == [1, 2] and parts["idle"] == 0


def test_temporal_breakdown_planted():
    [row] = breakdown.temporal_breakdown(gpu_run()).to_pylist()
    assert (row["start_ns"], row["end_ns"], row["kernel_time_ns"]) == (BASE + 2000, BASE + 7160, 5160)
    assert (row["busy_ns"], row["idle_ns"], row["compute_ns"], row["non_compute_ns"]) == (2810, 2350, 1510, 1300)
    assert (row["communication_ns"], row["memory_ns"]) == (1000, 300)
    assert row["idle_pct"] + row["compute_pct"] + row["non_compute_pct"] == pytest.approx(100)
    assert breakdown.temporal_breakdown(cpu_only_run()).num_rows == 0


def test_overlap_planted():
    step, total = breakdown.overlap(gpu_run()).to_pylist()
    assert step["step"] == 1 and total["step"] is None
    assert (step["span_ns"], step["computation_ns"], step["communication_ns"], step["overlap_ns"],
            step["pure_communication_ns"], step["free_ns"]) == (10000, 1510, 2000, 1000, 1000, 7490)
    assert step["comm_comp_overlap_pct"] == 50.0
    assert (total["span_ns"], total["free_ns"], total["comm_comp_overlap_pct"]) == (5160, 2650, 50.0)
    # a CPU-only run's host is its device: its host operators are its computation (aten::linear [1500, 3000),
    # aten::add_ [6500, 8000)); its span runs from the first to the last of them
    cpu_step, cpu_total = breakdown.overlap(cpu_only_run()).to_pylist()
    assert (cpu_step["computation_ns"], cpu_step["communication_ns"], cpu_step["free_ns"],
            cpu_step["comm_comp_overlap_pct"]) == (3000, 0, 7000, None)
    assert (cpu_total["span_ns"], cpu_total["computation_ns"], cpu_total["free_ns"]) == (6500, 3000, 3500)


# --- real traces ------------------------------------------------------------------------------------------


def test_step_breakdown_adds_up_on_real_traces(shared_data):
    from perfsight.ingest.kineto.reader import read_kineto

    for path in ("hta/df_index_resolver/df_index_resolver.json.gz",
                 "generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz"):
        table = breakdown.step_breakdown(read_kineto([shared_data / "kineto" / path]))
        assert table.num_rows >= 3
        for r in table.to_pylist():
            parts = [r[f"{c}_ns"] for c in (*breakdown.CATEGORIES, "idle")]
            assert min(parts) >= 0 and sum(parts) == r["step_ns"]
    cpu = table.to_pylist()                                    # the CPU-only trace: no device categories
    assert all(r["compute_ns"] == r["communication_ns"] == r["memory_ns"] == 0 for r in cpu)
    assert all(r["host_ops_ns"] > 0 for r in cpu)


TEMPORAL_DATASETS = ["trace_compare_base", "cp_simple_add", "cp_alexnet", "event_sync", "amd_mi250",
                     "gpu_user_annotation", "trace_filter_2rank", "nccl_data", "ns_resolution",
                     "negative_queue_length", "trace_diff_control", "trace_diff_test", "df_index_resolver",
                     "kineto_resnet50_w0"]


def _close(ours, theirs, rel=0.01, abs_us=0.0):
    return ours == pytest.approx(theirs, rel=rel, abs=abs_us)


@pytest.mark.parametrize("dataset", TEMPORAL_DATASETS)
def test_temporal_breakdown_and_overlap_agree_with_hta(shared_data, dataset):
    tables = hta.view(shared_data, dataset, sync_as_device_work=True)
    ours = {r["rank"]: r for r in breakdown.temporal_breakdown(tables).to_pylist()}
    for ref in hta.reference(shared_data, dataset, "temporal_breakdown.csv"):
        row = ours[int(ref["rank"])]
        for mine, theirs in (("idle_ns", "idle_time(us)"), ("compute_ns", "compute_time(us)"),
                             ("non_compute_ns", "non_compute_time(us)"), ("kernel_time_ns", "kernel_time(us)")):
            assert _close(row[mine] / 1000, ref[theirs]), (dataset, mine, row[mine], ref[theirs])
    # the relabelled syncs do not change it
    totals = {r["rank"]: r for r in breakdown.overlap(tables).to_pylist() if r["step"] is None}
    for ref in hta.reference(shared_data, dataset, "comm_comp_overlap.csv"):
        pct = totals[int(ref["rank"])]["comm_comp_overlap_pct"]
        if ref["comp_comm_overlap_pctg"] is None:                # HTA: NaN without communication
            assert pct is None
        else:
            assert pct == pytest.approx(ref["comp_comm_overlap_pctg"], abs=0.01)


def test_the_interval_maths_of_the_largest_trace_stays_vectorised(shared_data):
    """Not a benchmark (a time limit is this machine's load as much as the code): a guard that the interval
    maths stays vectorised, whatever the speed. perfsight's own Python runs about a thousand lines for each of
    these on the largest trace's 123,379 slices; a loop over the slices in Python would run one or more each."""
    import sys
    from pathlib import Path

    import perfsight

    tables = hta.load(shared_data, "df_index_resolver")
    package = str(Path(perfsight.__file__).parent)
    for function in (breakdown.temporal_breakdown, breakdown.step_breakdown, breakdown.overlap):
        lines = [0]

        def trace(frame, event, arg):                # perfsight's frames: count their lines
            return line if frame.f_code.co_filename.startswith(package) else None

        def line(frame, event, arg):
            lines[0] += event == "line"
            return line
        before = sys.gettrace()
        sys.settrace(trace)
        try:
            function(tables)
        finally:
            sys.settrace(before)
        assert 0 < lines[0] < tables.slices.num_rows // 20, (function.__name__, lines[0])


def test_the_breakdown_analyses_of_a_run_run_each_query_once(monkeypatch):
    """They share the device tasks, the category sets and the steps through the memo (a job maps them per rank)."""
    from perfsight.analysis import kernels
    from perfsight.core.memo import computed
    from perfsight.core.tables import RunTables

    queries = []
    sql = RunTables.sql
    monkeypatch.setattr(RunTables, "sql",
                        lambda self, query, params=None: queries.append(query) or sql(self, query, params))
    tables = gpu_run()
    for analysis in (breakdown.step_breakdown, breakdown.temporal_breakdown, breakdown.overlap,
                     breakdown.overlap_intervals, kernels.kernel_type_breakdown):
        assert computed(analysis, tables).num_rows
    assert queries and len(queries) == len(set(queries))
