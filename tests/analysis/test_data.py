"""data_wait / queue_sizes / queue_summary / data_verdict on planted runs, the tb_plugin ResNet-50
samples (num_workers=0 is input-bound, num_workers=4 is not) and a perfsight run's host series."""
import csv

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import perfsight
from perfsight.analysis import data
from perfsight.core import layout
from perfsight.core.tables import RunTables, conform
from perfsight.ingest.kineto.reader import read_kineto

from .planted import training_run
from .planted_host import counter_track, host_only, series

STEP_TIME, DATA_WAIT, DATA_Q, HOST_Q, STEP_NUMBER = 10, 11, 12, 13, 14
RESNET = "kineto/kineto_tb_plugin/samples/resnet50_num_workers_{}"


def with_host_series() -> RunTables:
    """The planted training run (steps 1, 2 with 1000 and 500 ns of dataloader slices in 10000 ns steps)
    plus perfsight's per-step series for steps 0..3 (0 and 3 outside the profiled window). As the collector
    records them, each step's host sample ends 100 ns before its ProfilerStep slice closes, so the first
    unprofiled step (3) begins inside the last profiled one."""
    tables = training_run()
    rows = tables.tracks.to_pylist() + [counter_track(STEP_TIME, "host.step_time_ns"),
                                        counter_track(DATA_WAIT, "host.data_wait_ns"),
                                        counter_track(STEP_NUMBER, "host.step_number")]
    ends = [-100, 9900, 19900, 29900]
    counters = (tables.counters.to_pylist()
                + series(STEP_NUMBER, zip(ends, range(4)))
                + series(STEP_TIME, zip(ends, [5000, 10000, 10000, 10000]))
                + series(DATA_WAIT, zip(ends, [4000, 900, 450, 6000])))
    tables.tracks = conform("tracks", pa.Table.from_pylist(rows))
    tables.counters = conform("counters", pa.Table.from_pylist(counters))
    return tables


def test_data_wait_from_dataloader_slices():
    rows = data.data_wait(training_run()).to_pylist()
    assert [(r["step"], r["step_ns"], r["dataloader_ns"], r["dataloader_count"], r["data_wait_ns"], r["source"])
            for r in rows] == [(1, 10000, 1000, 1, 1000, "dataloader"), (2, 10000, 500, 1, 500, "dataloader")]
    assert [r["wait_percent"] for r in rows] == pytest.approx([10.0, 5.0])


def test_host_series_cover_every_step_once_by_the_collectors_step_numbers():
    """Step 3's sample begins inside step 2's slice: it is still step 3's (matching samples to slices by
    overlap gave step 2 twice and lost step 3)."""
    rows = data.data_wait(with_host_series()).to_pylist()
    assert [(r["step"], r["source"], r["data_wait_ns"], r["step_ns"], r["host_data_wait_ns"]) for r in rows] == [
        (0, "host", 4000, 5000, 4000), (1, "dataloader", 1000, 10000, 900),
        (2, "dataloader", 500, 10000, 450), (3, "host", 6000, 10000, 6000)]
    assert rows[0]["wait_percent"] == pytest.approx(80.0)


def test_verdict_thresholds_and_bottleneck_steps():
    (row,) = data.data_verdict(training_run()).to_pylist()
    assert (row["verdict"], row["steps"], row["data_wait_ns"], row["step_ns"], row["bottleneck_steps"]) == (
        "not", 2, 1500, 20000, 1)
    assert row["wait_percent"] == pytest.approx(7.5)
    assert (row["highly_threshold_percent"], row["moderately_threshold_percent"]) == (30.0, 10.0)
    assert row["data_queue_empty_percent"] is None
    (row,) = data.data_verdict(with_host_series()).to_pylist()
    assert row["verdict"] == "highly" and row["wait_percent"] == pytest.approx(100 * 11500 / 35000)
    assert row["bottleneck_steps"] == 3 and "num_workers" in row["suggestions"]


def test_moderately_between_the_thresholds():
    tables = training_run()
    tables.slices = tables.slices.filter(pc.not_equal(tables.slices["id"], 22))    # step 2 loses its 500 ns
    (row,) = data.data_verdict(tables).to_pylist()
    assert row["wait_percent"] == pytest.approx(5.0) and row["verdict"] == "not"
    tables = training_run()
    tables.slices = tables.slices.set_column(
        tables.slices.schema.get_field_index("dur_ns"), "dur_ns",
        pc.if_else(pc.equal(tables.slices["id"], 22), 3000, tables.slices["dur_ns"]))  # 1000 + 3000 of 20000
    (row,) = data.data_verdict(tables).to_pylist()
    assert row["wait_percent"] == pytest.approx(20.0) and row["verdict"] == "moderately"


def queue_run(data_queue, host_queue=None) -> RunTables:
    tracks = [counter_track(DATA_Q, "device_data_queue_size")]
    counters = series(DATA_Q, enumerate(data_queue))
    if host_queue is not None:
        tracks.append(counter_track(HOST_Q, "host_queue_size"))
        counters += series(HOST_Q, enumerate(host_queue))
    return host_only([], tracks=tracks, counters=counters)


def test_queues_follow_the_seed_rules():
    tables = queue_run([0, 0, 3, 5, 0, 2, 4, 1, 6, 2], host_queue=[8, 8, 7, 8, 8, 8, 8, 8, 8, 8])
    summary = {r["queue"]: r for r in data.queue_summary(tables).to_pylist()}
    assert (summary["data"]["samples"], summary["data"]["empty_samples"], summary["data"]["max"]) == (10, 3, 6.0)
    assert summary["data"]["empty_percent"] == pytest.approx(30.0) and summary["host"]["empty_percent"] == 0.0
    assert data.queue_sizes(tables).num_rows == 20
    (row,) = data.data_verdict(tables).to_pylist()
    assert row["verdict"] == "highly" and row["steps"] == 0
    assert "sending data to the device" in row["reason"]
    (row,) = data.data_verdict(queue_run([1] * 9 + [0], host_queue=[0, 0, 1, 1, 1, 1, 1, 1, 1, 1])).to_pylist()
    assert row["verdict"] == "moderately" and "data processing is slow" in row["reason"]


def test_unknown_without_steps_or_queues():
    assert data.data_verdict(RunTables()).num_rows == 0
    assert data.data_wait(RunTables()).num_rows == 0


@pytest.mark.parametrize("workers, verdict", [(0, "highly"), (4, "not")])
def test_real_resnet50_loader_workers(shared_data, workers, verdict):
    (path,) = (shared_data / RESNET.format(workers)).glob("*.pt.trace.json.gz")
    tables = read_kineto([path])
    (row,) = data.data_verdict(tables).to_pylist()
    assert row["verdict"] == verdict and row["steps"] == 6
    waits = data.data_wait(tables)
    assert waits["step"].to_pylist() == [5, 6, 7, 8, 9, 10] and set(waits["source"].to_pylist()) == {"dataloader"}


def test_perfsight_run_host_series_match_steps_csv(perfsight_run):
    tables = perfsight.load(perfsight_run)
    with open(perfsight_run / layout.HOST_DATA / layout.STEPS) as f:   # (a walk could meet the cache being written)
        steps = {int(r["step"]): r for r in csv.DictReader(f)}
    rows = {r["step"]: r for r in data.data_wait(tables).to_pylist()}
    assert set(rows) == set(steps)
    for step, row in rows.items():
        assert row["host_data_wait_ns"] == int(steps[step]["data_wait_ns"])
        assert row["host_step_ns"] == int(steps[step]["end_ns"]) - int(steps[step]["start_ns"])
        assert row["source"] in ("dataloader", "host") and row["data_wait_ns"] > 0
    (verdict,) = data.data_verdict(tables).to_pylist()
    assert verdict["verdict"] in ("highly", "moderately", "not") and verdict["steps"] == len(steps)
