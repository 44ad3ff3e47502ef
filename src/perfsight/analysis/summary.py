"""A run at a glance: step-time statistics (medians by ``breakdown.median``), the profiled steps, the top
operators and the advice; the timeline's summary (MindSpore's overview: "总览页展示了Timeline中stream和task的汇总情况")
and where the run starts (pure functions)."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.analysis import cluster, collectives, waiting
from perfsight.analysis.advisor import advise
from perfsight.analysis.breakdown import CATEGORIES, median, overlap, step_breakdown, step_breakdown_average
from perfsight.analysis.critical_path import critical_path, critical_path_breakdown, what_if_summary, windows
from perfsight.analysis.data import data_verdict
from perfsight.analysis.flops import model_flops, model_flops_total, over_peak_warnings
from perfsight.analysis.health import health_by_check, trace_health
from perfsight.analysis.job import Job
from perfsight.analysis.job_summaries import job_of
from perfsight.analysis.memory import memory_peak
from perfsight.analysis.ops import DEVICE_TASK_KINDS, op_statistic
from perfsight.analysis.rank_facts import rank_facts, rank_meta
from perfsight.analysis.rank_spread import HIGHER, LOWER, rank_spread
from perfsight.analysis.roofline import over_roof_warnings
from perfsight.analysis.steps import no_steps_reason, step_phases, step_points, step_trace, unmatched_step_points
from perfsight.core.memo import computed
from perfsight.core.tables import DATA_WAIT_SERIES, STEP_TIME_SERIES, TRACE_SPAN_PID, RunTables, new_connection


def _series_stats(tables: RunTables) -> dict:
    """Count, mean and median (``breakdown.median``) of the collector's step times, and its mean data wait."""
    con = tables.connect()
    series = con.sql(f"""
        SELECT t.name, c.value FROM counters c JOIN tracks t USING (track_id)
        WHERE t.name IN ('{STEP_TIME_SERIES}', '{DATA_WAIT_SERIES}')""").to_arrow_table()
    step_times = series.filter(pc.equal(series.column("name"), STEP_TIME_SERIES)).column("value")
    data_waits = series.filter(pc.equal(series.column("name"), DATA_WAIT_SERIES)).column("value")
    return {"count": len(step_times), "mean_ns": pc.mean(step_times).as_py(),
            "median_ns": median(pc.drop_null(step_times).to_numpy()), "data_wait_mean_ns": pc.mean(data_waits).as_py()}


def run_summary(tables: RunTables, *, top: int = 10, fp_point: str | None = None,
                bp_point: str | None = None) -> dict:
    """``slices``: how many timed events the run has; ``steps``: statistics over every step the collector
    timed (perfsight runs' step-time series: with the first step and the profiler's stop; count 0 for other
    sources); ``profiled_steps``: the step trace, and ``step_digest`` its digest for a run of many steps;
    ``no_steps_reason``: why there are none
    (``steps.no_steps_reason``; None when there are); ``step_definitions``: what a step is, as the ranks'
    readers define it where they say (meta ``step_definition``: torch_npu's); ``top_ops``: the
    ``top`` operator types by self time; ``ops_category``: which operators those are (device tasks when the
    run has any, else CPU ops);
    ``breakdown``: per rank, the profiled steps' median (``median_step_ns``: the run's headline step time)
    and mean step, the mean split into compute, communication, memory, runtime, data loading, host ops,
    Python and idle (adds up to the step); ``overlap``: merged computation / communication / pure
    communication / free time over each rank's device span; ``memory_peak``: per device; ``flops``: the
    model's FLOPs over the profiled steps and their utilisation of the device peak (``model_flops_total``);
    ``data``: the data-preparation verdict; ``advice``: the advisor's findings; ``cluster``: a job's
    ranks compared (``cluster_summary``; None for one rank); ``rank_spreads``: a job's per-rank tables
    summarised across ranks (``rank_spreads``; None for one rank); ``health``: the ``health.trace_health``
    rows with findings (count > 0), ``health_by_check`` the same per check over every rank; ``warnings``:
    what the readers skipped (damaged input), how collection ended when not cleanly, named fp/bp points that
    are missing from steps, and every FLOPS utilisation or roofline share above 100%
    (``flops.over_peak_warnings``, ``roofline.over_roof_warnings``: the peak entry is likely wrong). Every
    analysis comes from the run's memo (``core.memo``)."""
    profiled = computed(step_trace, tables, fp_point=fp_point, bp_point=bp_point)
    steps = _series_stats(tables)
    stats = computed(op_statistic, tables)
    stats = stats.sort_by([("self_ns", "descending")]).slice(0, top)
    category = stats.column("category")[0].as_py() if stats.num_rows else None
    totals = computed(overlap, tables)
    meta = tables.meta_dict()
    warnings = json.loads(meta.get("parse_warnings") or "[]")
    if meta.get("collection_status", "complete") not in ("complete", "None"):
        warnings.insert(0, f"collection: {meta['collection_status']}")
    warnings += unmatched_step_points(profiled, *computed(step_points, tables, fp_point, bp_point))
    warnings += computed(over_peak_warnings, tables) + computed(over_roof_warnings, tables)
    breakdown = step_breakdown_average(computed(step_breakdown, tables))
    whole_span = totals.filter(pc.is_null(totals.column("step")))
    memory = computed(memory_peak, tables)
    flops = model_flops_total(computed(model_flops, tables))
    data = computed(data_verdict, tables)
    jobs = computed(cluster_summary, computed(job_of, tables)) if computed(rank_facts, tables).num_rows > 1 else None
    return {"slices": tables.slices.num_rows, "steps": steps, "profiled_steps": profiled,
            "step_digest": step_digest(profiled),
            "no_steps_reason": computed(no_steps_reason, tables), "step_definitions": sorted(
                {d for facts in computed(rank_meta, tables).values() if (d := facts.get("step_definition"))}),
            "top_ops": stats,
            "ops_category": category,
            "breakdown": breakdown, "overlap": whole_span, "memory_peak": memory, "flops": flops, "data": data,
            "advice": computed(advise, tables),
            "cluster": jobs,
            "rank_spreads": None if jobs is None else rank_spreads(
                jobs["spreads"]["ranks"], breakdown=breakdown, profiled_steps=profiled, overlap=whole_span,
                memory_peak=memory, flops=flops, data=data),
            "health": _findings(computed(trace_health, tables)),
            "health_by_check": health_by_check(computed(trace_health, tables)),
            "warnings": warnings}


#: the steps of each kind a step digest names (``step_digest``): the first, the slowest and the fastest
DIGEST_STEPS = 3

STEP_DIGEST = pa.schema([
    ("rank", pa.int32()), ("steps", pa.int64()), ("median_ns", pa.float64()), ("p10_ns", pa.float64()),
    ("p90_ns", pa.float64()), ("mean_ns", pa.float64()), ("min_ns", pa.float64()), ("max_ns", pa.float64()),
])


def step_digest(profiled: pa.Table, *, few: int = DIGEST_STEPS) -> dict:
    """A step trace (``steps.step_trace``) of many steps as a reader of it needs it: how long a step takes and
    how much that varies, and the steps that tell the rest. ``summary`` (schema ``STEP_DIGEST``): per rank, the
    count of its steps with an iteration time and their median (``breakdown.median``), 10th and 90th
    percentiles (linear between steps, as numpy.percentile: the band most steps fall in, which an outlier does
    not stretch as min and max do), mean, min and max. ``steps``: the rows of the step trace (every rank's
    together) that are among the ``few`` first steps (the warm-up: compilation, allocator growth, caches
    filling), the ``few`` slowest (the spikes to explain: a data-loader stall, a synchronisation, garbage
    collection, a checkpoint) or the ``few`` fastest (what a step can take), each once, in rank and step order,
    with ``why`` it is there (``first``, ``slowest``, ``fastest``, several joined by ``, ``)."""
    rows = [row for row in profiled.to_pylist() if row["iteration_ns"] is not None]
    why: dict[tuple, list[str]] = {}
    for reason, picked in (("first", sorted(rows, key=lambda row: (row["step"], row["rank"]))),
                           ("slowest", sorted(rows, key=lambda row: (-row["iteration_ns"], row["step"], row["rank"]))),
                           ("fastest", sorted(rows, key=lambda row: (row["iteration_ns"], row["step"], row["rank"])))):
        for row in picked[:few]:
            why.setdefault((row["rank"], row["step"]), []).append(reason)
    steps = [{**row, "why": ", ".join(why[(row["rank"], row["step"])])}
             for row in sorted(rows, key=lambda row: (row["rank"], row["step"])) if (row["rank"], row["step"]) in why]
    summary = []
    for rank in sorted({row["rank"] for row in rows}):
        times = np.array([row["iteration_ns"] for row in rows if row["rank"] == rank], dtype=float)
        p10, p90 = np.percentile(times, [10, 90])
        summary.append({"rank": rank, "steps": len(times), "median_ns": median(times), "p10_ns": float(p10),
                        "p90_ns": float(p90), "mean_ns": float(times.mean()), "min_ns": float(times.min()),
                        "max_ns": float(times.max())})
    schema = profiled.schema.append(pa.field("why", pa.string()))
    return {"summary": pa.Table.from_pylist(summary, schema=STEP_DIGEST),
            "steps": pa.Table.from_pylist(steps, schema=schema)}


def _findings(health: pa.Table) -> pa.Table:
    """The rows of a ``trace_health`` table that found something."""
    return health.filter(pc.greater(health.column("count"), 0))


#: the per-rank figures the reports summarise across ranks, table by table (``rank_spread``), each with the end
#: that is the slowest rank's: times, waits and bytes HIGHER, rates LOWER
SPREAD_FIGURES: dict[str, dict[str, str]] = {
    "breakdown": {"median_step_ns": HIGHER, "step_ns": HIGHER,
                  **{f"{category}_ns": HIGHER for category in (*CATEGORIES, "idle")}},
    "profiled_steps": dict.fromkeys(("iteration_ns", "gap_ns", "fp_bp_ns", "tail_ns", "data_wait_ns"), HIGHER),
    "overlap": dict.fromkeys(("span_ns", "computation_ns", "communication_ns", "pure_communication_ns", "free_ns"),
                             HIGHER),
    "memory_peak": dict.fromkeys(("peak_allocated_bytes", "peak_reserved_bytes"), HIGHER),
    "flops": {"flops_per_s": LOWER, "utilization_percent": LOWER},
    "data": dict.fromkeys(("wait_percent", "max_step_wait_percent"), HIGHER),
    "ranks_compared": dict.fromkeys(("boundary_step_ns", "step_ns", "communication_ns", "caused_wait_ns"), HIGHER),
    "clock_offsets": {"offset_ns": HIGHER},        # the "slowest" rank: the latest clock
    # the rank the others wait for waits least in its collectives (``waiting``: who waits for whom)
    "collectives": {"wait_ns": LOWER, "transit_ns": HIGHER},
}

_DEVICE_KIND_PEAKS_SQL = """
SELECT split_part(device, ':', 1) AS device_kind, rank, max(peak_allocated_bytes) AS peak_allocated_bytes,
       max(peak_reserved_bytes) AS peak_reserved_bytes
FROM peaks GROUP BY ALL ORDER BY device_kind, rank
"""


def rank_spreads(ranks: int, *, breakdown: pa.Table, profiled_steps: pa.Table, overlap: pa.Table,
                 memory_peak: pa.Table, flops: pa.Table, data: pa.Table) -> dict:
    """A job's per-rank tables of ``run_summary`` summarised across its ``ranks`` ranks (``rank_spread`` of
    the figures ``SPREAD_FIGURES`` names, table by table): ``ranks``; ``breakdown`` (the mean step
    breakdown); ``profiled_steps`` (each rank's mean phases: ``steps.step_phases``' average rows);
    ``overlap``; ``memory_peak``: per device kind (``cpu``, ``cuda``, ``npu``: the text before ``:``) a
    spread of each rank's largest peak among its devices of that kind; ``flops``; ``data``. The cluster
    section's own are ``cluster_summary``'s ``spreads``."""
    phases = step_phases(profiled_steps)
    con = new_connection()
    con.register("peaks", memory_peak)
    peaks = con.sql(_DEVICE_KIND_PEAKS_SQL).to_arrow_table()
    tables = {"breakdown": breakdown, "profiled_steps": phases.filter(pc.is_null(phases.column("step"))),
              "overlap": overlap, "flops": flops, "data": data}
    spreads: dict = {"ranks": ranks}
    spreads.update((name, rank_spread(table, SPREAD_FIGURES[name])) for name, table in tables.items())
    spreads["memory_peak"] = {kind: rank_spread(peaks.filter(pc.equal(peaks.column("device_kind"), kind)),
                                                SPREAD_FIGURES["memory_peak"])
                              for kind in dict.fromkeys(peaks.column("device_kind").to_pylist())}
    return spreads


#: collectives (per rank, group and kind) in a report's cluster section: the longest waits
TOP_COLLECTIVES = 5


def cluster_summary(job: Job, *, top: int = TOP_COLLECTIVES) -> dict | None:
    """A job's ranks compared, for the reports (None for a job of fewer than two ranks): ``ranks``
    (``cluster.rank_breakdown``: each rank's steps, exposed communication, the wait it causes, slowest and
    straggler),
    ``slowest`` (``cluster.slowest_rank``'s row, None without steps), ``top_collectives`` (the ``top``
    rows of ``collectives.collective_totals``, by wait), ``slow_ranks`` (``waiting.slow_ranks``: each group's
    straggler) and ``slow_links`` (the verdict
    rows that are slow) with ``slow_rank_rule`` / ``slow_link_rule`` and their thresholds, and how many
    verdicts were given (``rank_verdicts``: (group, rank) rows; ``link_verdicts``: links judged); ``clock_offsets``
    (``collectives.clock_offsets`` of the ranks whose offset or estimate is not 0), ``lacks``
    (``cluster.rank_lacks`` of the ranks that lack files), ``damaged`` (those whose input was damaged and read
    around: their ``damage``) and ``spreads``: the job's number of ``ranks``, and
    ``ranks_compared``, ``clock_offsets`` and ``collectives`` (each rank's ``collective_totals`` summed over its
    groups and kinds) summarised across ranks (``rank_spread`` of the figures ``SPREAD_FIGURES`` names), which
    the reports show instead beyond a screenful of ranks."""
    lacks = computed(cluster.rank_lacks, job)
    ranks = computed(cluster.rank_breakdown, job)
    count = len(set(lacks.column("rank").to_pylist()) | set(ranks.column("rank").to_pylist()))
    if count < 2:
        return None
    slowest = computed(cluster.slowest_rank, job).to_pylist()
    verdicts = {name: computed(fn, job) for name, fn in (("ranks", waiting.slow_ranks),
                                                         ("links", collectives.slow_links))}
    offsets = computed(collectives.clock_offsets, job)
    offsets = offsets.filter(pc.or_(pc.not_equal(offsets.column("offset_ns"), 0),
                                    pc.not_equal(offsets.column("estimate_ns"), 0)))
    totals = computed(collectives.collective_totals, job)
    by_rank = totals.group_by("rank").aggregate([("wait_ns", "sum"), ("transit_ns", "sum")]) \
        .select(["rank", "wait_ns_sum", "transit_ns_sum"]).rename_columns(["rank", "wait_ns", "transit_ns"])
    return {"ranks": ranks, "slowest": slowest[0] if slowest else None,
            "top_collectives": totals.slice(0, top),
            "slow_ranks": verdicts["ranks"].filter(verdicts["ranks"].column("slow")),
            "slow_rank_rule": waiting.STRAGGLER_RULE, "slow_rank_threshold": waiting.STRAGGLER_THRESHOLD,
            "rank_verdicts": verdicts["ranks"].num_rows,
            "slow_links": verdicts["links"].filter(verdicts["links"].column("slow")),
            "slow_link_rule": collectives.SLOW_LINK_RULE, "slow_link_threshold": collectives.SLOW_LINK_THRESHOLD,
            "link_verdicts": verdicts["links"].num_rows - verdicts["links"].column("slow").null_count,
            "clock_offsets": offsets,
            "lacks": lacks.filter(pc.greater(pc.list_value_length(lacks.column("lacking_files")), 0)),
            "damaged": lacks.filter(pc.greater(pc.list_value_length(lacks.column("damage")), 0)),
            "spreads": {"ranks": count, "ranks_compared": rank_spread(ranks, SPREAD_FIGURES["ranks_compared"]),
                        "clock_offsets": rank_spread(offsets, SPREAD_FIGURES["clock_offsets"]),
                        "collectives": rank_spread(by_rank, SPREAD_FIGURES["collectives"])}}


def run_start_ns(tables: RunTables) -> int:
    """The run's first instant (int ns, the tables' clock): the earliest slice start, counter sample or
    memory event; 0 for an empty run. Pages give times relative to it."""
    firsts = [pc.min(column).as_py() for column in (tables.slices.column("start_ns"),
                                                      tables.counters.column("ts_ns"), tables.memory.column("ts_ns"))
              if len(column)]
    return min((f for f in firsts if f is not None), default=0)


TIMELINE_SUMMARY = pa.schema([
    ("rank", pa.int32()),
    ("device", pa.string()),
    ("kind", pa.string()),
    ("tracks", pa.int64()),
    ("executions", pa.int64()),
    ("names", pa.int64()),
    ("busy_ns", pa.int64()),
    ("start_ns", pa.int64()),
    ("end_ns", pa.int64()),
])

_TIMELINE_SUMMARY_SQL = """
SELECT coalesce(t.rank, 0)::INTEGER AS rank, t.device, t.kind, count(DISTINCT s.track_id) AS tracks,
       count(*) AS executions, count(DISTINCT s.name) AS names,
       sum(s.dur_ns) FILTER (WHERE t.kind = 'stream' OR s.depth = 0)::BIGINT AS busy_ns,
       min(s.start_ns) AS start_ns, max(s.start_ns + s.dur_ns) AS end_ns
FROM slices s JOIN tracks t USING (track_id)
WHERE (t.kind = 'stream' AND list_contains($device_kinds, s.kind))
   OR (t.kind = 'thread' AND t.pid IS DISTINCT FROM $trace_span_pid)
GROUP BY 1, 2, 3 ORDER BY 1, t.kind = 'thread', 2
"""


def timeline_summary(tables: RunTables) -> pa.Table:
    """The timeline in numbers, per rank, device and kind of row (schema ``TIMELINE_SUMMARY``): ``stream``
    rows count the device streams and their tasks (kernel, comm, memcpy, memset), ``thread`` rows the host
    threads and their slices, but Kineto's trace spans (``PyTorch Profiler (0)`` on its own process,
    ``TRACE_SPAN_PID``: the whole capture, not a thread's work). ``tracks`` is the number of streams or
    threads with any, ``executions`` the tasks or slices, ``names`` their distinct names, ``busy_ns`` the
    summed duration of the tasks (of the outermost slices, depth 0, on threads: nested time is not counted
    twice) and ``start_ns`` / ``end_ns`` the first start and last end. Device rows first."""
    con = tables.connect()
    table = con.sql(_TIMELINE_SUMMARY_SQL, params={"device_kinds": list(DEVICE_TASK_KINDS),
                                                   "trace_span_pid": TRACE_SPAN_PID}).to_arrow_table()
    return table.cast(TIMELINE_SUMMARY)


def critical_path_summary(tables: RunTables, *, step: int | None = None, rank: int | None = None,
                          top: int = 12) -> dict:
    """What ``perfsight analyse --critical-path`` shows (``critical_path``): ``breakdown``, every window's
    critical path by category (``critical_path_breakdown``; the profiled steps, ``step`` and ``rank`` only
    those); ``window``: the one shown in detail, ``step`` if given, else the median window of ``rank`` (else
    the first rank) by length (the lower of the two middle ones), None without windows; ``on_path``: what
    that window's path spends its time in, the ``top`` names (slices; idle time and unnamed slices by their
    category) with their
    category, number of pieces, time and share of the window, most first; ``what_if``: ``what_if_summary``
    over the same windows (every scenario, mean per window). ``windows``: how many there are."""
    found = computed(windows, tables, step=step, rank=rank)
    breakdown = computed(critical_path_breakdown, tables, step=step, rank=rank)
    if not found:
        return {"breakdown": breakdown, "window": None, "on_path": None, "what_if": None, "windows": 0}
    first_rank = [w for w in found if w.rank == found[0].rank]
    shown = sorted(first_rank, key=lambda w: (w.end_ns - w.start_ns, w.start_ns))[(len(first_rank) - 1) // 2]
    path = computed(critical_path, tables, step=shown.step, rank=shown.rank)
    path = path.filter(pc.equal(path.column("window"), shown.label))
    con = new_connection()
    con.register("path", path)
    on_path = con.sql("""
        SELECT coalesce(nullif(name, ''), '(' || replace(category, '_', ' ') || ')') AS name, category,
               count(*) AS pieces, sum(dur_ns)::BIGINT AS dur_ns, sum(share_pct) AS share_pct
        FROM path GROUP BY ALL ORDER BY dur_ns DESC, name LIMIT $top""", params={"top": top}).to_arrow_table()
    return {"breakdown": breakdown, "windows": len(found),
            "window": {"rank": shown.rank, "step": shown.step, "label": shown.label,
                       "dur_ns": shown.end_ns - shown.start_ns, "pieces": path.num_rows,
                       "median_of": len(first_rank) if step is None else 1},
            "on_path": on_path, "what_if": computed(what_if_summary, tables, step=step, rank=shown.rank)}
