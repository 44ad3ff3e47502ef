"""host_usage / host_usage_summary on planted series and on a perfsight run's host_usage.csv."""
import csv

import numpy as np
import pytest

import perfsight
from perfsight.analysis import resources
from perfsight.core import layout
from perfsight.core.tables import RunTables

from .planted import BASE
from .planted_host import counter_track, host_only, series

PROC, SYS, RSS, GPU_UTIL, STEP_TIME = 10, 11, 12, 13, 14
CPU = [10, 20, 30, 40, 100]


def planted() -> RunTables:
    tracks = [counter_track(PROC, "host.cpu_percent.process"), counter_track(SYS, "host.cpu_percent.system"),
              counter_track(RSS, "host.memory_rss_bytes.process"), counter_track(GPU_UTIL, "GPU Utilization"),
              counter_track(STEP_TIME, "host.step_time_ns")]
    counters = (series(PROC, zip(range(0, 5000, 1000), CPU)) + series(SYS, [(0, 50), (2000, 70)])
                + series(RSS, [(0, 1 << 30), (1000, 3 << 29)]) + series(GPU_UTIL, [(0, 0.5)])
                + series(STEP_TIME, [(0, 1000)]))
    return host_only([], tracks=tracks, counters=counters)


def test_host_usage_is_tidy_and_only_the_usage_series():
    table = resources.host_usage(planted())
    assert table.column_names == ["rank", "series", "ts_ns", "value"]
    assert set(table["series"].to_pylist()) == {"host.cpu_percent.process", "host.cpu_percent.system",
                                                "host.memory_rss_bytes.process"}
    assert table.num_rows == 5 + 2 + 2
    picked = resources.host_usage(planted(), series=["GPU Utilization"])
    assert picked["value"].to_pylist() == [0.5]


def test_summary_mean_max_p95_units():
    rows = {r["series"]: r for r in resources.host_usage_summary(planted()).to_pylist()}
    proc = rows["host.cpu_percent.process"]
    assert (proc["unit"], proc["samples"], proc["mean"], proc["min"], proc["max"]) == ("percent", 5, 40.0, 10.0, 100.0)
    assert proc["p95"] == pytest.approx(np.percentile(CPU, 95)) == pytest.approx(88.0)
    assert proc["last_ts_ns"] - proc["first_ts_ns"] == 4000
    assert rows["host.memory_rss_bytes.process"]["unit"] == "bytes"
    assert rows["host.memory_rss_bytes.process"]["max"] == 3 << 29
    assert resources.host_usage_summary(RunTables()).num_rows == 0


def test_perfsight_run_matches_its_host_usage_csv(perfsight_run):
    with open(perfsight_run / layout.HOST_DATA / layout.HOST_USAGE) as f:   # (a walk could meet the cache)
        samples = list(csv.DictReader(f))
    rows = {r["series"]: r for r in resources.host_usage_summary(perfsight.load(perfsight_run)).to_pylist()}
    assert set(rows) == set(resources.HOST_USAGE_SERIES)
    for name, row in rows.items():
        values = [float(s[name]) for s in samples if s[name] != ""]
        assert row["samples"] == len(values) > 0
        assert row["max"] == max(values) and row["mean"] == pytest.approx(np.mean(values))
        assert row["p95"] == pytest.approx(np.percentile(values, 95))


def test_the_run_start_of_a_counters_only_run_is_its_first_sample():
    from perfsight.analysis.summary import run_start_ns

    assert run_start_ns(planted()) == BASE
