"""Benchmark: the insight timeline's server side (perfsight.analysis.timeline_index) on a synthetic run of
millions of slices: building the TimelineIndex, then window queries at many zoom levels and positions,
with search and area sums beside them.

The run is built directly as canonical Arrow tables with numpy (no trace file, no parser): ``--threads``
host threads, each a sequence of ProfilerSteps nesting four levels below them (step > operator > child
operator > grandchild > cudaLaunchKernel, fan-out 8, 4, 3, 3), every launch starting a kernel on one of
``--streams`` compute streams or, one in twenty, an NCCL kernel on a communication stream (with its
launch flow), plus two host counter series. The number of steps is chosen to reach ``--slices``.

Queries (each ``window(t0, t1, --width, all tracks)`` as the web page asks, then ``orjson.dumps`` of the
answer as the HTTP layer does): ``full`` (the whole run), ``10%``, ``1%``, ``0.01%`` of it at random
positions, and ``random`` (a random length, log-uniform from 100 ns to the whole run, at a random
position); ``search`` (the next match of a random vocabulary word after a random time) and ``area``
(name sums over 10% of the run on every host thread). ``--rounds`` rounds; each round runs one query of
every kind in a shuffled order, so the kinds interleave. Reports per kind p50/p95/max of the query and
of query + JSON encoding, the median JSON size, and the process's peak RSS. Timing assertions never go in
tests; tests/bench/test_timeline_window_bench.py only checks the output's shape on a tiny run.

    PYTHONPATH=src python bench/timeline_window.py [--slices 5000000] [--rounds 60] [--markdown] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import time

import numpy as np
import orjson
import pyarrow as pa
from stats import load_average, quantile  # bench/stats.py (scripts here import their siblings)

from perfsight.analysis.timeline_index import TimelineIndex
from perfsight.core.tables import RunTables, conform, meta_table

FANOUT = (8, 4, 3, 3)                 # children per slice at depths 0..3 (depth 4 = the launches)
STEP_NS = 50_000_000                  # one ProfilerStep
KINDS = ("full", "10%", "1%", "0.01%", "random", "search", "area")
VOCABULARY = ("linear", "conv", "relu", "matmul", "softmax", "layer_norm", "dropout", "embedding", "gelu", "add")


def _children(start, dur, fanout, rng):
    """Children of each (start, dur) parent: fanout equal slots, each child inside its slot (5% in, 60-90%
    of the slot long). Returns (start, dur, parent index)."""
    slot = dur // fanout
    parent = np.repeat(np.arange(start.size), fanout)
    j = np.tile(np.arange(fanout), start.size)
    s = start[parent] + j * slot[parent] + slot[parent] // 20
    d = (slot[parent] * rng.uniform(0.6, 0.9, parent.size)).astype(np.int64)
    return s, d, parent


def _strings(codes: np.ndarray, vocabulary: list[str]) -> pa.Array:
    """A string column from codes into a vocabulary (built through a dictionary: no Python object per row)."""
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(vocabulary)).cast(pa.string())


def synthetic_run(slices: int, *, threads: int = 4, streams: int = 4, seed: int = 0) -> RunTables:
    """A run of at least ``slices`` slices (a whole number of steps; module docstring), as canonical tables."""
    rng = np.random.default_rng(seed)
    per_step = 1 + int(np.cumprod(FANOUT).sum())                     # host slices under one step
    launches = int(np.prod(FANOUT))
    steps = max(1, -(-slices // (threads * (per_step + launches))))          # at least ``slices``
    base = 1_700_000_000_000_000_000
    operators = [f"aten::{word}{i}" for word in VOCABULARY for i in range(40)]
    kernels = [f"void kernel_{i}<float>" for i in range(1000)] + ["ncclKernel_AllReduce_RING_LL_Sum_float"]
    parts = {k: [] for k in ("kind", "name", "track_id", "start_ns", "dur_ns", "depth", "parent_id",
                             "correlation_id")}

    def add(kind, name, track, start, dur, depth, parent, correlation):
        n = start.size
        parts["kind"].append(_strings(np.zeros(n, np.int32), [kind]))
        parts["name"].append(name)
        parts["track_id"].append(np.full(n, track, dtype=np.int32))
        parts["start_ns"].append(start)
        parts["dur_ns"].append(dur)
        parts["depth"].append(np.full(n, depth, dtype=np.int16))
        parts["parent_id"].append(parent)
        parts["correlation_id"].append(correlation)

    next_id, launch_ids, launch_ends = 0, [], []
    for thread in range(threads):
        start = base + np.arange(steps, dtype=np.int64) * STEP_NS + rng.integers(0, 1000, steps)
        dur = np.full(steps, STEP_NS - 2_000_000, dtype=np.int64)
        parent_ids = np.full(steps, -1, dtype=np.int64)
        for depth in range(len(FANOUT) + 1):
            ids = next_id + np.arange(start.size)
            next_id += start.size
            if depth == 0:
                add("step", pa.array([f"ProfilerStep#{i}" for i in range(steps)]), thread, start, dur, 0,
                    parent_ids, np.full(steps, -1))
            elif depth < len(FANOUT):
                add("cpu_op", _strings(rng.integers(0, len(operators), start.size), operators), thread, start,
                    dur, depth, parent_ids, np.full(start.size, -1))
            else:
                add("runtime", _strings(np.zeros(start.size, np.int32), ["cudaLaunchKernel"]), thread, start, dur,
                    depth, parent_ids, ids)
                launch_ids.append(ids)
                launch_ends.append(start + dur)
            if depth < len(FANOUT):
                start, dur, parent = _children(start, dur, FANOUT[depth], rng)
                parent_ids = ids[parent]
    # the kernels: one per launch, on a compute stream or (1 in 20) the NCCL stream
    launch_ids, launch_ends = np.concatenate(launch_ids), np.concatenate(launch_ends)
    n = launch_ids.size
    comm = rng.random(n) < 0.05
    start = launch_ends + rng.integers(2_000, 20_000, n)
    dur = rng.lognormal(9.5, 1.0, n).astype(np.int64) + 500
    stream = np.where(comm, threads + streams, threads + rng.integers(0, streams, n))
    kernel_ids = next_id + np.arange(n)
    parts["kind"].append(_strings(comm.astype(np.int32), ["kernel", "comm"]))
    parts["name"].append(_strings(np.where(comm, len(kernels) - 1, rng.integers(0, len(kernels) - 1, n)), kernels))
    for key, value in (("track_id", stream.astype(np.int32)), ("start_ns", start), ("dur_ns", dur),
                       ("depth", np.zeros(n, np.int16)), ("parent_id", np.full(n, -1)),
                       ("correlation_id", launch_ids)):
        parts[key].append(value)
    total = next_id + n
    columns = {k: pa.concat_arrays(v) for k, v in parts.items() if k in ("kind", "name")}
    columns.update({k: np.concatenate(v) for k, v in parts.items() if k not in ("kind", "name")})
    for key in ("parent_id", "correlation_id"):
        columns[key] = pa.array(columns[key], mask=columns[key] < 0)
    slices_table = conform("slices", pa.table({"id": np.arange(total, dtype=np.int64), "op_type": columns["name"],
                                               **columns}))
    tracks = [{"track_id": t, "rank": 0, "pid": "1", "tid": str(t), "device": "cpu", "kind": "thread",
               "name": f"thread {t}", "sort_index": t} for t in range(threads)]
    tracks += [{"track_id": threads + s, "rank": 0, "pid": "0", "tid": f"stream {s}", "device": "cuda:0",
                "kind": "stream", "name": f"cuda:0 stream {s}", "sort_index": s} for s in range(streams + 1)]
    counter = threads + streams + 1
    series = ("host.cpu_percent.process", "host.memory_rss_bytes.process")
    tracks += [{"track_id": counter + c, "rank": 0, "pid": "1", "tid": None, "device": "cpu", "kind": "counter",
                "name": name, "sort_index": None} for c, name in enumerate(series)]
    samples = steps * 20
    ts = base + np.linspace(0, steps * STEP_NS, samples).astype(np.int64)
    counters = pa.table({"track_id": np.repeat(np.array([counter, counter + 1], dtype=np.int32), samples),
                         "ts_ns": np.concatenate([ts, ts]),
                         "value": np.concatenate([rng.uniform(0, 200, samples), rng.uniform(1e9, 2e9, samples)])})
    flows = pa.table({"src_id": launch_ids, "dst_id": kernel_ids, "kind": _strings(np.zeros(n, np.int32), ["launch"])})
    return RunTables(slices=slices_table, tracks=conform("tracks", pa.Table.from_pylist(tracks)),
                     counters=conform("counters", counters), flows=conform("flows", flows),
                     meta=meta_table({"source_format": "synthetic"}))


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _query(index: TimelineIndex, kind: str, span: int, width: int, rng: random.Random, host_tracks):
    """One query of ``kind``: (the call's answer, a description of it)."""
    fraction = {"full": 1.0, "10%": 0.1, "1%": 0.01, "0.01%": 0.0001}.get(kind)
    if kind == "random":
        fraction = 10 ** rng.uniform(np.log10(100 / span), 0)
    if fraction is not None:
        length = max(1, int(span * fraction))
        t0 = rng.randrange(0, span - length + 1)
        return index.window(t0, t0 + length, width)
    if kind == "search":
        return index.search(rng.choice(VOCABULARY), rng.randrange(0, span), "next", 1)
    length = span // 10
    t0 = rng.randrange(0, span - length + 1)
    return index.area_summary(host_tracks, t0, t0 + length)


def measure(slices: int, rounds: int, width: int, threads: int, streams: int, seed: int) -> dict:
    t = time.perf_counter()
    tables = synthetic_run(slices, threads=threads, streams=streams, seed=seed)
    made_s, tables_rss = time.perf_counter() - t, _rss_mib()
    t = time.perf_counter()
    index = TimelineIndex(tables)
    build_s, index_rss = time.perf_counter() - t, _rss_mib()
    info = index.tracks()
    span = info["end_ns"]
    host_tracks = [tr["id"] for g in info["groups"] if g["name"] == "host threads" for tr in g["tracks"]]
    rng = random.Random(seed)
    samples = {kind: [] for kind in KINDS}
    for _ in range(rounds):
        order = list(KINDS)
        rng.shuffle(order)
        for kind in order:
            t0 = time.perf_counter()
            answer = _query(index, kind, span, width, rng, host_tracks)
            t1 = time.perf_counter()
            body = orjson.dumps(answer)
            t2 = time.perf_counter()
            sizes = {"bytes": len(body)}
            if "lanes" in answer:
                sizes["entries"] = sum(len(lane.get(part, {}).get("start", [])) for lane in answer["lanes"]
                                       for part in ("slices", "buckets"))
            samples[kind].append({"query_s": t1 - t0, "total_s": t2 - t0, **sizes})
    return {"slices": tables.slices.num_rows, "flows": tables.flows.num_rows,
            "counter_samples": tables.counters.num_rows,
            "tracks": sum(len(g["tracks"]) for g in info["groups"]), "span_ns": span, "width": width,
            "rounds": rounds, "make_s": made_s, "build_s": build_s, "samples": samples,
            "tables_mib": tables.slices.nbytes / 2**20 + tables.flows.nbytes / 2**20,
            "rss_after_tables_mib": tables_rss, "rss_after_index_mib": index_rss,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def summary(result: dict) -> list[dict]:
    rows = []
    for kind, samples in result["samples"].items():
        query = [s["query_s"] * 1000 for s in samples]
        total = [s["total_s"] * 1000 for s in samples]
        row = {"kind": kind, "n": len(samples), "p50_ms": quantile(query, 0.5), "p95_ms": quantile(query, 0.95),
               "max_ms": max(query), "json_p50_ms": quantile(total, 0.5), "json_p95_ms": quantile(total, 0.95),
               "json_max_ms": max(total), "kib_p50": quantile([s["bytes"] / 1024 for s in samples], 0.5)}
        if "entries" in samples[0]:
            row["entries_p50"] = quantile([s["entries"] for s in samples], 0.5)
        rows.append(row)
    return rows


def markdown(result: dict, rows: list[dict], command: str, load_before: str, load_after: str, wall_s: float) -> str:
    windows = [r for r in rows if "entries_p50" in r]
    worst = max(r["json_p95_ms"] for r in windows)
    lines = [
        "## Insight timeline window queries",
        "",
        "What the web timeline's server side costs on a run of millions of events: building the level-of-detail "
        "index (`perfsight.analysis.timeline_index.TimelineIndex`) once, then answering window queries at many "
        "zoom levels and positions. Produced by `bench/timeline_window.py` (its docstring has the details); a "
        "benchmark, not a test.",
        "",
        f"Run: synthetic, built as canonical tables with numpy: {result['slices']:,} slices on {result['tracks']} "
        f"tracks (host threads with ProfilerStep > 3 levels of operators > cudaLaunchKernel, i.e. depth 0-4; "
        f"compute streams; an NCCL stream; overlap-analysis rows; 2 counters of "
        f"{result['counter_samples'] // 2:,} samples), {result['flows']:,} launch flows, "
        f"{result['span_ns'] / 1e9:.1f} s long. Making the tables: {result['make_s']:.1f} s (not perfsight's).",
        "",
        f"Building the index (sorting the lanes, overlap analysis, flow and counter arrays): "
        f"**{result['build_s']:.2f} s**, once per run. Memory: the tables hold {result['tables_mib']:.0f} MiB (slices "
        f"and flows); the process's RSS is {result['rss_after_tables_mib']:.0f} MiB once they are made and "
        f"{result['rss_after_index_mib']:.0f} MiB with the index built (the index: "
        f"+{result['rss_after_index_mib'] - result['rss_after_tables_mib']:.0f} MiB); peak RSS of the whole process "
        f"(making the tables, the build's temporaries, the queries): **{result['peak_rss_mib']:.0f} MiB**.",
        "",
        f"Queries: {result['rounds']} rounds, each running one query of every kind in a shuffled order; windows "
        f"at {result['width']} px over all tracks. *query* is the `window()` / `search()` / `area_summary()` call "
        "(JSON-ready lists out); *+ JSON* adds `orjson.dumps` of the answer, as the HTTP route does. *entries* is "
        "the number of slices + per-pixel buckets sent.",
        "",
        "| query | n | p50 ms | p95 ms | max ms | + JSON p50 ms | + JSON p95 ms | + JSON max ms | JSON KiB p50 "
        "| entries p50 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        entries = f"{r['entries_p50']:,.0f}" if "entries_p50" in r else "-"
        lines.append(f"| {r['kind']} | {r['n']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['max_ms']:.1f} | "
                     f"{r['json_p50_ms']:.1f} | {r['json_p95_ms']:.1f} | {r['json_max_ms']:.1f} | "
                     f"{r['kib_p50']:.1f} | {entries} |")
    lines += [
        "",
        "Kinds: `full` the whole run; `10%`, `1%`, `0.01%` that share of it at a random position; `random` a "
        "log-uniform length from 100 ns to the whole run at a random position; `search` the next match of a word "
        "after a random time (whole-run, case-insensitive substring); `area` name sums over 10% of the run on "
        "every host thread.",
        "",
        f"Target (issue): window p95 under 200 ms on at least 5 million events. Worst window p95 here, JSON "
        f"included: {worst:.0f} ms: {'met' if worst < 200 and result['slices'] >= 5_000_000 else '**not met**'}.",
        "",
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}, pyarrow "
        f"{pa.__version__}, {platform.platform()}. Load average (1, 5, 15 min) before / after: {load_before} / "
        f"{load_after}. Benchmark wall time: {wall_s:.0f} s.",
        "",
        "Reproduce (from the repository root):",
        "",
        f"    {command}",
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slices", type=int, default=5_000_000)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--width", type=int, default=1600, help="canvas width in pixels")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown", action="store_true", help="print the bench/RESULTS.md section")
    parser.add_argument("--json", help="also write the raw samples here")
    args = parser.parse_args(argv)
    started, load_before = time.perf_counter(), load_average()
    result = measure(args.slices, args.rounds, args.width, args.threads, args.streams, args.seed)
    rows = summary(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**result, "summary": rows}, f)
    command = (f"PYTHONPATH=src python bench/timeline_window.py --slices {args.slices} --rounds {args.rounds} "
               f"--width {args.width} --markdown")
    if args.markdown:
        print(markdown(result, rows, command, load_before, load_average(), time.perf_counter() - started))
    else:
        print(json.dumps({k: v for k, v in result.items() if k != "samples"} | {"summary": rows}, indent=1))


if __name__ == "__main__":
    main()
