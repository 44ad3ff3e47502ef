"""analysis/timeline.py: track groups, counter and memory series on planted tables; and the msprof timeline
export and the web timeline's index, which both read it, drawing the same layers and series on real traces."""
from __future__ import annotations

import json
import shutil

import pytest

import perfsight
from perfsight.analysis.ops import DEVICE_TASK_KINDS
from perfsight.analysis.timeline import counter_series, memory_series, track_groups
from perfsight.analysis.timeline_index import TimelineIndex
from perfsight.views.export import export_timeline

from .planted import tables_from_rows
from .test_timeline_index import AUTOGRAD, BASE, COUNTER, NCCL, STREAM, THREAD, TRACKS, run


def test_track_groups():
    groups = {r["track_id"]: r["group"] for r in track_groups(run()).to_pylist()}
    assert groups == {THREAD: "host threads", AUTOGRAD: "host threads", STREAM: "device streams",
                      NCCL: "communication", COUNTER: "counters"}


def test_a_counter_track_without_finite_samples_is_not_drawn():
    counters = [{"track_id": COUNTER, "ts_ns": BASE, "value": float("nan")}]
    tables = tables_from_rows(slices=[], tracks=TRACKS, counters=counters)
    assert COUNTER not in track_groups(tables).column("track_id").to_pylist()
    tree = TimelineIndex(tables).tracks()                        # the index built before raised IndexError here
    assert COUNTER not in [t["id"] for g in tree["groups"] for t in g["tracks"]]


def test_counter_series_are_finite_samples_of_known_tracks_in_time_order():
    counters = [{"track_id": COUNTER, "ts_ns": BASE + t, "value": v}
                for t, v in ((9, 1.0), (5, float("inf")), (3, 2.0), (3, 4.0), (1, None))]
    counters.append({"track_id": 99, "ts_ns": BASE, "value": 7.0})           # no such track
    series = counter_series(tables_from_rows(slices=[], tracks=TRACKS, counters=counters)).to_pylist()
    assert [(s["track_id"], s["rank"], s["device"], s["series"], s["ts_ns"] - BASE, s["value"]) for s in series] == [
        (COUNTER, 0, "cpu", "host.cpu_percent.process", 3, 2.0),
        (COUNTER, 0, "cpu", "host.cpu_percent.process", 3, 4.0),
        (COUNTER, 0, "cpu", "host.cpu_percent.process", 9, 1.0)]


def test_memory_series_per_rank_device_and_total():
    tracks = TRACKS + [{"track_id": 9, "rank": 1, "pid": "2", "tid": "1", "device": "cpu", "kind": "thread",
                        "name": "rank 1 main", "sort_index": 0}]
    memory = [{"ts_ns": BASE + 30, "bytes": 8, "total_allocated": 8, "total_reserved": None, "device": "cuda:0",
               "track_id": THREAD},
              {"ts_ns": BASE + 10, "bytes": 4, "total_allocated": 4, "total_reserved": 64, "device": "cuda:0",
               "track_id": THREAD},
              {"ts_ns": BASE + 20, "bytes": 2, "total_allocated": 2, "total_reserved": None, "device": "cpu",
               "track_id": 9},
              {"ts_ns": BASE + 40, "bytes": 1, "total_allocated": 1, "total_reserved": None, "device": None,
               "track_id": None}]
    series = memory_series(tables_from_rows(slices=[], tracks=tracks, memory=memory)).to_pylist()
    assert [(s["rank"], s["device"], s["series"], s["ts_ns"] - BASE, s["value"]) for s in series] == [
        (0, "cuda:0", "Memory allocated", 10, 4.0), (0, "cuda:0", "Memory allocated", 30, 8.0),
        (0, "cuda:0", "Memory reserved", 10, 64.0), (0, None, "Memory allocated", 40, 1.0),
        (1, "cpu", "Memory allocated", 20, 2.0)]
    assert all(s["track_id"] is None for s in series)


REAL_TRACES = ["kineto/hta/df_index_resolver/df_index_resolver.json.gz",      # NCCL stream, cpu and cuda memory
               "kineto/kineto_tb_plugin/test/gpu_metrics_expected.json"]      # counters


@pytest.mark.parametrize("trace", REAL_TRACES)
def test_export_and_web_timelines_draw_the_same_layers(trace, shared_data, tmp_path):
    copy = tmp_path / trace.rsplit("/", 1)[1]
    shutil.copy(shared_data / trace, copy)
    tables = perfsight.open(copy).tables
    events = json.loads(export_timeline(tables, tmp_path / "out", stamp="20240101000000")[0].read_text())
    events = events["traceEvents"]
    layer = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    tree = TimelineIndex(tables).tracks()
    group = {t["id"]: g["name"] for g in tree["groups"] for t in g["tracks"]}

    drawn = {}                                    # track id -> the layers of its slices' events, one per task
    for e in events:
        if e["ph"] == "X":
            drawn.setdefault(e["tid"], []).append((layer[e["pid"]], e["cat"]))
    assert {track for track in drawn} <= set(group)
    for track, placed in drawn.items():
        tasks = [name for name, kind in placed if kind in DEVICE_TASK_KINDS]
        if group[track] in ("device streams", "communication"):
            assert {name.split(" cuda:")[0] for name, _ in placed} <= {"Device tasks", "Communication"}
            communication = 2 * tasks.count("Communication") > len(tasks)
            assert (group[track] == "communication") == communication, track
        else:
            assert group[track] == "host threads"
            assert {name for name, _ in placed} <= {"Framework (CPU ops, Python)", "Runtime API", "Communication"}
    assert "communication" in group.values() or "df_index" not in trace

    exported = {}                                 # (layer, series) -> values
    for e in events:
        if e["ph"] == "C":
            exported.setdefault((layer[e["pid"]], e["name"]), []).append(e["args"]["value"])
    shown = {}
    for g in tree["groups"]:
        for t in g["tracks"]:
            if g["name"] == "counters":
                device = t["device"]
                where = "Host counters" if device in (None, "cpu") else f"Device counters {device}"
                shown[(where, t["name"].removesuffix(f" ({device})"))] = (t["min"], t["max"])
    assert shown == {key: (min(values), max(values)) for key, values in exported.items()} and shown
