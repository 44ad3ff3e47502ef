"""timeline_summary and run_start_ns on the planted training run (run_summary is exercised by the CLI tests)."""
from perfsight.analysis.summary import TIMELINE_SUMMARY, run_start_ns, timeline_summary
from perfsight.core.tables import RunTables

from .planted import BASE, CPU_COUNTER, tables_from_rows, training_run


def test_timeline_summary_streams_then_threads():
    rows = timeline_summary(training_run()).to_pylist()
    assert rows == [
        # the stream's tasks: gemm 500 + memcpy 100 + gemm 300
        {"rank": 0, "device": "cuda:0", "kind": "stream", "tracks": 1, "executions": 3, "names": 2, "busy_ns": 900,
         "start_ns": BASE + 2001, "end_ns": BASE + 12301},
        # 21 slices on the main and autograd threads; busy = the two steps + the autograd thread's outermost slice
        {"rank": 0, "device": "cpu", "kind": "thread", "tracks": 2, "executions": 21, "names": 17,
         "busy_ns": 10000 + 10000 + 2000, "start_ns": BASE, "end_ns": BASE + 20000},
    ]
    assert timeline_summary(RunTables()).schema == TIMELINE_SUMMARY


def test_run_start_is_the_first_slice_counter_or_memory_event():
    assert run_start_ns(training_run()) == BASE          # memory at +1650 and counters at +5000 come later
    tables = training_run()
    earlier = tables_from_rows(slices=tables.slices.to_pylist(), tracks=tables.tracks.to_pylist(),
                               counters=[{"track_id": CPU_COUNTER, "ts_ns": BASE - 500, "value": 1.0}])
    assert run_start_ns(earlier) == BASE - 500
    assert run_start_ns(RunTables()) == 0


def test_step_time_medians_are_one_exact_median():
    """The collector's step times (4 samples: the mean of the middle two) and the profiled steps' median
    (breakdown.median, rounded to the ns for its int column) come from the one median."""
    from perfsight.analysis.breakdown import median
    from perfsight.analysis.summary import run_summary
    from perfsight.core.tables import STEP_TIME_SERIES

    tables = training_run()
    tracks = tables.tracks.to_pylist() + [{"track_id": 99, "rank": 0, "pid": "1", "device": "cpu", "kind": "counter",
                                           "name": STEP_TIME_SERIES}]
    counters = [{"track_id": 99, "ts_ns": BASE + i, "value": v} for i, v in enumerate((4.0, 1.0, 3.0, None, 2.0))]
    summary = run_summary(tables_from_rows(slices=tables.slices.to_pylist(), tracks=tracks, counters=counters))
    assert (summary["steps"]["count"], summary["steps"]["median_ns"], summary["steps"]["mean_ns"]) == (5, 2.5, 2.5)
    assert median([10000, 10001]) == 10000.5 and median([]) is None
    assert summary["breakdown"].column("median_step_ns").to_pylist() == [round(median([10000, 10000]))]
