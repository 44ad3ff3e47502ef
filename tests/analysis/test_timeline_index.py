"""TimelineIndex: the track tree, window level of detail (against brute force), counters, flows, search
order and wrap, slice details, area sums with exact clipping, and a real trace."""
from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.planted import tables_from_rows
from perfsight.analysis.timeline_index import MAX_FLOWS, TimelineIndex, counter_unit

BASE = 1_700_000_000_000_000_000          # ns since the epoch: beyond a double's exact integers
THREAD, AUTOGRAD, STREAM, NCCL, COUNTER = 1, 2, 3, 4, 5

TRACKS = [
    {"track_id": THREAD, "rank": 0, "pid": "1", "tid": "1", "device": "cpu", "kind": "thread", "name": "main",
     "sort_index": 0},
    {"track_id": AUTOGRAD, "rank": 0, "pid": "1", "tid": "2", "device": "cpu", "kind": "thread", "name": "autograd",
     "sort_index": 1},
    {"track_id": STREAM, "rank": 0, "pid": "0", "tid": "7", "device": "cuda:0", "kind": "stream",
     "name": "cuda:0 stream 7", "sort_index": 7},
    {"track_id": NCCL, "rank": 0, "pid": "0", "tid": "9", "device": "cuda:0", "kind": "stream",
     "name": "cuda:0 stream 9", "sort_index": 9},
    {"track_id": COUNTER, "rank": 0, "pid": "1", "tid": None, "device": "cpu", "kind": "counter",
     "name": "host.cpu_percent.process", "sort_index": None},
]


def s(id, name, track, start, dur, depth=0, *, kind="cpu_op", parent=None, **extra):
    return {"id": id, "kind": kind, "name": name, "track_id": track, "start_ns": BASE + start, "dur_ns": dur,
            "depth": depth, "parent_id": parent, **extra}


def run(extra=()):
    """Main thread: a step [0, 40000) over 100 small ops (i * 100, 10 + i % 10 ns long, names n0/n1/n2) and
    a long op [20000, 30000) with a launch inside; autograd: backward [32000, 36000); stream 7: the kernel
    [31000, 33000); stream 9: two NCCL kernels and a memset; a counter with 4 samples; memory events.
    ``extra``: more slice rows."""
    rows = [s(1000, "ProfilerStep#1", THREAD, 0, 40000, kind="step")]
    rows += [s(i, f"n{i % 3}", THREAD, i * 100, 10 + i % 10, 1, parent=1000) for i in range(100)]
    rows += [s(200, "aten::LINEAR", THREAD, 20000, 10000, 1, parent=1000, args='{"seq": 3}'),
             s(201, "cudaLaunchKernel", THREAD, 20100, 500, 2, kind="runtime", parent=200, correlation_id=7),
             s(300, "LinearBackward0", AUTOGRAD, 32000, 4000),
             s(400, "gemm", STREAM, 31000, 2000, kind="kernel", correlation_id=7),
             s(500, "ncclKernel_AllReduce", NCCL, 30000, 1500, kind="comm"),
             s(501, "ncclKernel_AllGather", NCCL, 34000, 1500, kind="comm"),
             s(502, "Memset (Device)", NCCL, 36000, 100, kind="memset"), *extra]
    counters = [{"track_id": COUNTER, "ts_ns": BASE + t, "value": v}
                for t, v in ((1000, 10.0), (1500, 30.0), (1700, 20.0), (9000, 50.0))]
    memory = [{"ts_ns": BASE + 20200, "bytes": 512, "total_allocated": 512, "total_reserved": 2048,
               "device": "cuda:0", "track_id": THREAD, "op_slice_id": 200}]
    flows = [{"src_id": 201, "dst_id": 400, "kind": "launch"}, {"src_id": 200, "dst_id": 300, "kind": "fwdbwd"}]
    return tables_from_rows(slices=rows, tracks=TRACKS, counters=counters, flows=flows, memory=memory)


@pytest.fixture(scope="module")
def index():
    return TimelineIndex(run())


def lane(window, track, depth):
    found = [entry for entry in window["lanes"] if entry["track"] == track and entry["depth"] == depth]
    return found[0] if found else None


def names_of(window, part):
    return [window["names"][i] for i in part["name"]]


# --- the track tree -----------------------------------------------------------------------------------------


def test_tracks_tree(index):
    tree = index.tracks()
    assert (tree["origin_ns"], tree["start_ns"], tree["end_ns"]) == (BASE, 0, 40000)
    groups = {g["name"]: g for g in tree["groups"]}
    assert [g["name"] for g in tree["groups"]] == ["host threads", "device streams", "communication",
                                                    "overlap analysis", "counters"]
    assert [(t["id"], t["name"], t["depth"]) for t in groups["host threads"]["tracks"]] == \
        [(THREAD, "main", 3), (AUTOGRAD, "autograd", 1)]
    assert [t["id"] for t in groups["device streams"]["tracks"]] == [STREAM]
    assert [t["id"] for t in groups["communication"]["tracks"]] == [NCCL]          # 2 of its 3 tasks are NCCL
    overlap = groups["overlap analysis"]["tracks"]
    assert [t["name"] for t in overlap] == ["merged computation", "merged communication", "pure communication",
                                            "free time"]
    assert all(t["kind"] == "overlap" and t["id"] > COUNTER for t in overlap)
    counters = groups["counters"]["tracks"]
    assert [(t["name"], t["min"], t["max"], t["unit"]) for t in counters] == [
        ("host.cpu_percent.process", 10.0, 50.0, "percent"), ("Memory allocated (cuda:0)", 512.0, 512.0, "bytes"),
        ("Memory reserved (cuda:0)", 2048.0, 2048.0, "bytes")]
    assert len({t["id"] for g in tree["groups"] for t in g["tracks"]}) == 11          # ids are unique
    assert all(g["rank"] == 0 and g["id"] == f"0/{g['name']}" for g in tree["groups"])


# --- windows --------------------------------------------------------------------------------------------------


def test_window_buckets_small_slices_per_pixel(index):
    w = index.window(0, 40000, 40, [THREAD])                        # 1000 ns per pixel
    assert (w["t0"], w["t1"], w["width"]) == (0, 40000, 40)
    step = lane(w, THREAD, 0)
    assert step["slices"]["id"] == [1000] and "buckets" not in step
    ops = lane(w, THREAD, 1)
    assert ops["slices"]["id"] == [200] and ops["slices"]["start"] == [20000] and ops["slices"]["dur"] == [10000]
    assert names_of(w, ops["slices"]) == ["aten::LINEAR"]
    buckets = ops["buckets"]
    assert buckets["count"] == [10] * 10                             # slice i in pixel i // 10
    assert buckets["start"] == [1000 * k for k in range(10)]
    assert buckets["end"] == [1000 * k + 900 + 19 for k in range(10)]   # the last one, 19 ns long, ends last
    assert names_of(w, buckets) == [f"n{(10 * k + 9) % 3}" for k in range(10)]   # the longest one's name
    launch = lane(w, THREAD, 2)                                      # 500 ns < 1 px: a bucket of one
    assert "slices" not in launch and launch["buckets"]["count"] == [1] and launch["buckets"]["start"] == [20100]
    assert [entry["track"] for entry in w["lanes"]] == [THREAD] * 3
    json.dumps(w, allow_nan=False)                                   # plain JSON types only


def test_window_zoomed_in_sends_slices_themselves(index):
    w = index.window(0, 1000, 100, [THREAD])                         # 10 ns per pixel
    ops = lane(w, THREAD, 1)
    assert ops["slices"]["id"] == list(range(10))                    # every one at least 10 ns long
    assert "buckets" not in ops
    assert names_of(w, ops["slices"]) == [f"n{i % 3}" for i in range(10)]
    assert set(w["names"]) == {"ProfilerStep#1", "n0", "n1", "n2"}  # the names sent, once each
    assert [w["kinds"][k] for k in lane(w, THREAD, 0)["slices"]["kind"]] == ["step"]


def _brute(rows, t0, t1, width):
    """Expected (individual ids, bucket counts by pixel) of one lane, by definition."""
    threshold = -(-(t1 - t0) // width)
    individual, buckets = [], {}
    for id_, start, dur in rows:
        if not (start < t1 and (start + dur > t0 or start >= t0)):
            continue
        if dur >= threshold:
            individual.append(id_)
        else:
            pixel = 0 if start < t0 else (start - t0) * width // (t1 - t0)
            while pixel + 1 < width and start >= t0 + (pixel + 1) * (t1 - t0) // width:
                pixel += 1
            while pixel > 0 and start < t0 + pixel * (t1 - t0) // width:
                pixel -= 1
            buckets[pixel] = buckets.get(pixel, 0) + 1
    return sorted(individual), [buckets[p] for p in sorted(buckets)]


def test_window_matches_brute_force_with_overlapping_siblings():
    rng = np.random.default_rng(3)
    starts = np.sort(rng.integers(0, 100_000, 400))
    durs = rng.choice([0, 5, 50, 500, 5000, 40000], 400)             # siblings overlap: ends are not sorted
    rows = [(i, int(a), int(d)) for i, (a, d) in enumerate(zip(starts, durs))]
    tables = tables_from_rows(slices=[s(i, f"x{i % 7}", THREAD, a, d) for i, a, d in rows], tracks=TRACKS[:1])
    index = TimelineIndex(tables)
    origin = min(a for _, a, _ in rows)
    for _ in range(60):
        t0 = int(rng.integers(-1000, 100_000))
        t1 = t0 + int(rng.integers(1, 60_000))
        width = int(rng.integers(1, 300))
        w = index.window(t0 - origin, t1 - origin, width)
        got = lane(w, THREAD, 0) or {}
        ids = sorted(got.get("slices", {}).get("id", []))
        counts = got.get("buckets", {}).get("count", [])
        assert (ids, counts) == _brute(rows, t0, t1, width), (t0, t1, width)


def test_window_finds_a_long_slice_begun_before_a_short_sibling():
    tables = tables_from_rows(slices=[s(1, "long", THREAD, 0, 1000), s(2, "short", THREAD, 100, 100)],
                              tracks=TRACKS[:1])
    w = TimelineIndex(tables).window(500, 600, 10)
    assert lane(w, THREAD, 0)["slices"]["id"] == [1]


def test_window_counters_min_max_last_per_pixel(index):
    w = index.window(1200, 9200, 8, [COUNTER])                       # pixels of 1000 ns from 1200
    [c] = w["counters"]
    assert c == {"track": COUNTER, "before": 10.0, "continues": False, "ts": [1500, 9000],
                 "min": [20.0, 50.0], "max": [30.0, 50.0], "last": [20.0, 50.0]}
    [c] = index.window(0, 1600, 16, [COUNTER])["counters"]
    assert c["before"] is None and c["continues"] and c["ts"] == [1000, 1500]
    assert w["lanes"] == [] and index.window(0, 40000, 10, [THREAD])["counters"] == []


def test_window_overlap_rows_are_lanes(index):
    tree = {t["name"]: t["id"] for g in index.tracks()["groups"] for t in g["tracks"]}
    w = index.window(0, 40000, 4000, [tree["merged computation"], tree["free time"], tree["pure communication"]])
    got = {(entry["track"]): entry["slices"] for entry in w["lanes"]}
    assert got[tree["merged computation"]]["start"] == [31000] and got[tree["merged computation"]]["dur"] == [2000]
    assert got[tree["pure communication"]]["start"] == [30000, 34000]          # neither overlaps the gemm
    assert got[tree["pure communication"]]["dur"] == [1000, 1500]
    assert got[tree["free time"]]["start"] == [33000, 35500]                  # the device span ends at 36100
    assert got[tree["free time"]]["dur"] == [1000, 600]
    assert set(got[tree["free time"]]["id"]) == {-1}


def test_window_flows_need_both_ends_sent_as_slices(index):
    w = index.window(19000, 37000, 18000)                            # 1 ns per pixel: all sent by themselves
    assert sorted(zip(w["flows"]["src"], w["flows"]["dst"], w["flows"]["kind"])) == \
        [(200, 300, "fwdbwd"), (201, 400, "launch")]
    assert not w["flows_truncated"]
    w = index.window(0, 40000, 40)                                   # the launch (500 ns) is in a bucket
    assert list(zip(w["flows"]["src"], w["flows"]["dst"])) == [(200, 300)]
    w = index.window(19000, 37000, 18000, [THREAD])                  # the other ends' tracks not asked for
    assert w["flows"] == {"src": [], "dst": [], "kind": []}
    assert MAX_FLOWS >= 1000


def test_window_rejects_bad_arguments(index):
    with pytest.raises(ValueError, match="t1"):
        index.window(10, 10, 100)
    with pytest.raises(ValueError, match="width"):
        index.window(0, 10, 0)
    with pytest.raises(ValueError, match="tracks: unknown track id 99"):
        index.window(0, 10, 10, [99])


# --- search ----------------------------------------------------------------------------------------------------


def test_search_next_prev_and_wrap(index):
    everything = index.search("N1", 0, "next", 1000)                  # case-insensitive: n1, ...
    assert everything["total"] == 33 and len(everything["matches"]) == 33 and not everything["wrapped"]
    starts = [m["start_ns"] for m in everything["matches"]]
    assert starts == sorted(starts) and [m["index"] for m in everything["matches"]] == list(range(33))
    first = everything["matches"][0]
    assert (first["id"], first["track"], first["depth"], first["dur_ns"], first["name"]) == (1, THREAD, 1, 11, "n1")

    after = index.search("n1", 9700, "next", 1)                      # the last one, at 9700
    assert [(m["id"], m["index"]) for m in after["matches"]] == [(97, 32)] and not after["wrapped"]
    wrapped = index.search("n1", 9700, "next", 2, after_id=97)       # past the last: round to the first
    assert [(m["id"], m["index"]) for m in wrapped["matches"]] == [(1, 0), (4, 1)] and wrapped["wrapped"]
    before = index.search("n1", 400, "prev", 2, after_id=4)          # before id 4 (at 400), descending
    assert [(m["id"], m["index"]) for m in before["matches"]] == [(1, 0), (97, 32)] and before["wrapped"]
    assert [m["id"] for m in index.search("n1", 400, "prev", 1)["matches"]] == [1]   # just before 400
    assert index.search("linear", 0)["matches"][0]["name"] == "aten::LINEAR"
    assert index.search("no such name", 0) == {"text": "no such name", "total": 0, "wrapped": False,
                                               "matches": []}
    assert index.search("free time", 0)["total"] == 0                 # overlap rows are not slices


def test_search_orders_equal_starts_by_id():
    rows = [s(i, "same", THREAD if i % 2 else AUTOGRAD, 500, 10) for i in (5, 2, 9)]
    index = TimelineIndex(tables_from_rows(slices=rows, tracks=TRACKS[:2]))
    assert [m["id"] for m in index.search("same", 0, "next", 10)["matches"]] == [2, 5, 9]
    assert [m["id"] for m in index.search("same", 0, "next", 10, after_id=2)["matches"]] == [5, 9, 2]
    assert [m["id"] for m in index.search("same", 0, "prev", 10, after_id=9)["matches"]] == [5, 2, 9]


def test_search_rejects_bad_arguments(index):
    for kwargs, name in (({"text": ""}, "q"), ({"text": "a", "direction": "up"}, "direction"),
                         ({"text": "a", "limit": 0}, "limit")):
        with pytest.raises(ValueError, match=name):
            index.search(**kwargs)


# --- slice details ----------------------------------------------------------------------------------------------


def test_slice_detail(index):
    d = index.slice_detail(201)
    assert (d["id"], d["name"], d["kind"], d["depth"]) == (201, "cudaLaunchKernel", "runtime", 2)
    assert d["track"] == {"id": THREAD, "name": "main", "kind": "thread", "rank": 0}
    assert (d["start_ns"], d["dur_ns"], d["end_ns"]) == (20100, 500, 20600)
    assert d["columns"]["start_ns"] == BASE + 20100 and d["columns"]["correlation_id"] == 7
    assert [p["name"] for p in d["parents"]] == ["ProfilerStep#1", "aten::LINEAR"]     # outermost first
    assert d["flows"] == [{"direction": "out", "kind": "launch", "id": 400, "name": "gemm", "track": STREAM,
                           "track_name": "cuda:0 stream 7", "start_ns": 31000}]
    kernel = index.slice_detail(400)
    assert [(f["direction"], f["id"], f["name"]) for f in kernel["flows"]] == [("in", 201, "cudaLaunchKernel")]
    assert index.slice_detail(200)["columns"]["args"] == '{"seq": 3}'
    json.dumps(d, allow_nan=False)
    with pytest.raises(KeyError):
        index.slice_detail(12345)


def test_slice_detail_with_unsorted_ids():
    rows = [s(9, "outer", THREAD, 0, 100), s(3, "inner", THREAD, 10, 10, 1, parent=9)]
    index = TimelineIndex(tables_from_rows(slices=rows, tracks=TRACKS[:1]))
    assert [p["id"] for p in index.slice_detail(3)["parents"]] == [9]
    with pytest.raises(KeyError):
        index.slice_detail(4)


# --- area sums --------------------------------------------------------------------------------------------------


def test_area_summary_clips_to_the_window(index):
    a = index.area_summary([THREAD, STREAM], 25000, 32000)
    assert a["rows"] == [
        {"name": "ProfilerStep#1", "count": 1, "dur_ns": 7000},
        {"name": "aten::LINEAR", "count": 1, "dur_ns": 5000},          # [25000, 30000) of [20000, 30000)
        {"name": "gemm", "count": 1, "dur_ns": 1000},                  # [31000, 32000) of [31000, 33000)
    ]
    assert (a["t0"], a["t1"], a["names"], a["count"], a["dur_ns"]) == (25000, 32000, 3, 3, 13000)
    small = index.area_summary([THREAD], 0, 205)                        # n0 [0, 10), n1 [100, 111), n2 [200, 212)
    assert {r["name"]: (r["count"], r["dur_ns"]) for r in small["rows"]} == {
        "ProfilerStep#1": (1, 205), "n0": (1, 10), "n1": (1, 11), "n2": (1, 5)}
    assert index.area_summary([THREAD], 0, 40000, limit=2)["names"] == 6
    assert len(index.area_summary([THREAD], 0, 40000, limit=2)["rows"]) == 2
    free = [t["id"] for g in index.tracks()["groups"] for t in g["tracks"] if t["name"] == "free time"]
    assert index.area_summary(free, 0, 40000)["rows"] == [{"name": "free time", "count": 2, "dur_ns": 1600}]
    with pytest.raises(ValueError, match="t1"):
        index.area_summary([THREAD], 5, 1)


# --- a real trace -------------------------------------------------------------------------------------------------


def test_real_trace(shared_data):
    import pyarrow.compute as pc

    from perfsight.ingest.kineto.reader import read_kineto

    tables = read_kineto([shared_data / "kineto/hta/nccl_parser_config/nccl_data.json.gz"])
    index = TimelineIndex(tables)
    tree = index.tracks()
    groups = {g["name"] for g in tree["groups"]}
    assert {"host threads", "device streams", "communication", "overlap analysis"} <= groups
    slice_tracks = {t["id"] for g in tree["groups"] if g["name"] not in ("overlap analysis", "counters")
                    for t in g["tracks"]}
    assert set(tables.slices.column("track_id").to_pylist()) <= slice_tracks

    width = 1200
    w = index.window(0, tree["end_ns"] + 1, width, sorted(slice_tracks))
    sent = sum(len(e.get("slices", {}).get("id", [])) + sum(e.get("buckets", {}).get("count", []))
               for e in w["lanes"])
    assert sent == tables.slices.num_rows                          # the whole run: every slice, once
    assert all(len(e.get("buckets", {}).get("count", [])) <= width for e in w["lanes"])
    assert all(len(e.get("slices", {}).get("id", [])) <= 2 * width for e in w["lanes"])
    json.dumps(w, allow_nan=False)

    launch = tables.flows.filter(pc.equal(tables.flows["kind"], "launch")).slice(0, 1).to_pylist()[0]
    kernel = index.slice_detail(launch["dst_id"])
    assert ("in", launch["src_id"]) in [(f["direction"], f["id"]) for f in kernel["flows"]]
    zoom = index.window(kernel["start_ns"] - 1000, kernel["end_ns"] + 1000, 1000)
    assert launch["dst_id"] in [i for e in zoom["lanes"] for i in e.get("slices", {}).get("id", [])]

    names = tables.slices.column("name")
    expected = pc.sum(pc.match_substring(names, "nccl", ignore_case=True)).as_py()
    found = index.search("NCCL", 0, "next", 5)
    assert found["total"] == expected > 0 and len(found["matches"]) == 5


@pytest.mark.parametrize("series, unit", [
    ("host.cpu_percent.process", "percent"), ("host.memory_percent.system", "percent"),
    ("host.memory_rss_bytes.process", "bytes"), ("npu.memory.APP.allocated_bytes", "bytes"), ("APP/DDR bytes", "bytes"),
    ("host.step_time_ns", "ns"), ("minddata push_time_ns", "ns"), ("GPU Utilization", None),
    ("AI Core Freq MHz", None), ("minddata host_queue size", None), ("kernel_nsec_count", None),
])
def test_counter_units_come_from_the_names_ending(series, unit):
    assert counter_unit(series) == unit


def test_the_profiled_window_is_the_span_of_the_steps():
    """Startup before the first step and work after the last one widen the run, not its profiled window."""
    index = TimelineIndex(run(extra=[s(600, "startup", THREAD, -500_000, 400_000),
                                     s(1001, "ProfilerStep#2", THREAD, 40_000, 9_000, kind="step", step=2),
                                     s(1002, "ProfilerStep#3", THREAD, 49_000, 10_000, kind="step", step=3),
                                     s(601, "after the profiler", THREAD, 90_000, 1_000)]))
    tree = index.tracks()
    assert (tree["origin_ns"], tree["start_ns"], tree["end_ns"]) == (BASE - 500_000, 0, 591_000)
    assert tree["profiled"] == {"start_ns": 540_000, "end_ns": 559_000}


def test_empty_run():
    from perfsight.core.tables import RunTables

    index = TimelineIndex(RunTables())
    assert index.tracks() == {"origin_ns": 0, "start_ns": 0, "end_ns": 0, "profiled": None, "groups": []}
    w = index.window(0, 10, 5)
    assert (w["lanes"], w["counters"], w["names"]) == ([], [], [])
    assert index.search("a")["total"] == 0 and index.area_summary([], 0, 5)["rows"] == []
