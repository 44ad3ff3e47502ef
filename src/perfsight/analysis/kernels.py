"""Device kernels: per-kernel statistics, time per kernel type, launch overheads, idle gaps between
kernels (Holistic Trace Analysis' get_gpu_kernel_breakdown, get_cuda_kernel_launch_stats,
get_idle_time_breakdown and get_queue_length_summary, in integer nanoseconds).

Every function reads the canonical tables and returns an Arrow table; times and durations are int64 ns.

Device tasks are the slices of kind ``kernel``, ``comm``, ``memcpy`` or ``memset`` on a ``stream`` track
(``gpu_annotation`` ranges and ``sync`` events are not device work). Their ``kernel_type``, as HTA's:

* ``COMMUNICATION``: kind ``comm`` (communication as core/communication.py decides: NCCL/RCCL/HCCL kernels);
* ``MEMORY``: kind ``memcpy`` or ``memset``;
* ``COMPUTATION``: every other device task.

Differences from HTA, deliberate: times are exact ns (HTA rounds float-us timestamps, so kernels under
1 us get -1 us or 0); every ProfilerStep is kept (HTA drops the kernels launched in the last step when a
trace has two or more); ``cuda_sync`` events and GPU user annotations are not counted as device work.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from perfsight.analysis.ops import DEVICE_TASK_KINDS_SQL
from perfsight.core.communication import COMM_KIND
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables, new_connection

KERNEL_TYPES = ("COMPUTATION", "COMMUNICATION", "MEMORY")

#: SQL for the device tasks of a run: id, rank, track_id, stream, kind, name, kernel_type, start/end/dur, step,
#: correlation_id. Shared with the breakdown analyses.
DEVICE_TASKS_SQL = f"""
SELECT s.id, coalesce(t.rank, 0) AS rank, s.track_id, regexp_replace(t.tid, '^stream ', '') AS stream,
       s.kind, s.name,
       CASE WHEN s.kind = '{COMM_KIND}' THEN 'COMMUNICATION'
            WHEN s.kind IN ('memcpy', 'memset') THEN 'MEMORY'
            ELSE 'COMPUTATION' END AS kernel_type,
       s.start_ns, s.start_ns + s.dur_ns AS end_ns, s.dur_ns, s.step, s.correlation_id
FROM slices s JOIN tracks t USING (track_id)
WHERE t.kind = 'stream' AND s.kind IN ({DEVICE_TASK_KINDS_SQL})
"""

KERNEL_BREAKDOWN = pa.schema([
    ("rank", pa.int32()),
    ("kernel_type", pa.string()),
    ("name", pa.string()),
    ("count", pa.int64()),
    ("sum_ns", pa.int64()),
    ("max_ns", pa.int64()),
    ("min_ns", pa.int64()),
    ("mean_ns", pa.float64()),
    ("stddev_ns", pa.float64()),
    ("pct", pa.float64()),
])


def kernel_breakdown(tables: RunTables) -> pa.Table:
    """One row per (rank, kernel name) (schema ``KERNEL_BREAKDOWN``): its ``kernel_type``, ``count``,
    ``sum_ns``, ``max_ns``, ``min_ns``, ``mean_ns``, ``stddev_ns`` (sample standard deviation, 0 for a single
    execution, as HTA) and ``pct``, the share (percent) of the summed duration of all the rank's device tasks
    of the same kernel type. Sorted by rank, kernel type, sum descending, name. Unlike HTA's
    ``kernel_breakdown`` no kernels are folded into an ``others`` row."""
    query = f"""
        WITH k AS ({DEVICE_TASKS_SQL})
        SELECT rank, kernel_type, name, count(*) AS count, sum(dur_ns)::BIGINT AS sum_ns,
               max(dur_ns) AS max_ns, min(dur_ns) AS min_ns, avg(dur_ns) AS mean_ns,
               coalesce(stddev_samp(dur_ns), 0) AS stddev_ns,
               100.0 * sum(dur_ns) / nullif(sum(sum(dur_ns)) OVER (PARTITION BY rank, kernel_type), 0) AS pct
        FROM k GROUP BY rank, kernel_type, name
        ORDER BY rank, kernel_type, sum_ns DESC, name
    """
    return tables.sql(query).to_arrow_table().cast(KERNEL_BREAKDOWN)


KERNEL_TYPE_BREAKDOWN = pa.schema([
    ("rank", pa.int32()),
    ("kernel_type", pa.string()),
    ("sum_ns", pa.int64()),
    ("pct", pa.float64()),
])


def device_task_arrays(tables: RunTables) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The device tasks as numpy arrays: (rank, kernel type index into ``KERNEL_TYPES``, start_ns, end_ns).
    Shared with the breakdown analyses: use through the memo (``computed``)."""
    query = f"""
        SELECT rank, list_position($types, kernel_type) - 1 AS type_index, start_ns, end_ns
        FROM ({DEVICE_TASKS_SQL})
    """
    t = tables.sql(query, params={"types": list(KERNEL_TYPES)}).to_arrow_table()
    return tuple(t.column(c).to_numpy() for c in ("rank", "type_index", "start_ns", "end_ns"))


def kernel_type_breakdown(tables: RunTables) -> pa.Table:
    """Device time per kernel type and per combination of overlapping types, per rank (schema
    ``KERNEL_TYPE_BREAKDOWN``), as HTA's kernel type breakdown: each type's tasks are merged (so parallel
    kernels of one type count once), then every instant the device is busy is given to exactly one label,
    the set of types active then: ``COMPUTATION``, ``COMMUNICATION``, ``MEMORY``, or ``COMPUTATION
    overlapping MEMORY`` (both at once), ``COMPUTATION overlapping COMMUNICATION overlapping MEMORY``, ...
    ``sum_ns`` over a rank's labels is the rank's busy time (the union of all its device tasks); ``pct`` is the
    label's share (percent) of it. Labels with no time are omitted; sorted by rank, sum descending."""
    from perfsight.analysis import intervals

    rank, type_index, start, end = computed(device_task_arrays, tables)
    rows: dict[str, list] = {"rank": [], "kernel_type": [], "sum_ns": [], "pct": []}
    for r in sorted(set(rank.tolist())):
        mine = rank == r
        sets = {name: (start[mine & (type_index == i)], end[mine & (type_index == i)])
                for i, name in enumerate(KERNEL_TYPES)}
        cover = intervals.exact_cover(sets)
        busy = sum(cover.values())
        for mask, ns in sorted(cover.items(), key=lambda kv: (-kv[1], kv[0])):
            rows["rank"].append(r)
            rows["kernel_type"].append(" overlapping ".join(n for i, n in enumerate(KERNEL_TYPES) if mask >> i & 1))
            rows["sum_ns"].append(ns)
            rows["pct"].append(100.0 * ns / busy)
    return pa.table(rows, schema=KERNEL_TYPE_BREAKDOWN)


LAUNCH_STATS = pa.schema([
    ("rank", pa.int32()),
    ("correlation_id", pa.int64()),
    ("runtime_id", pa.int64()),
    ("runtime_name", pa.string()),
    ("kernel_id", pa.int64()),
    ("kernel_name", pa.string()),
    ("kernel_type", pa.string()),
    ("stream", pa.string()),
    ("cpu_start_ns", pa.int64()),
    ("cpu_dur_ns", pa.int64()),
    ("gpu_start_ns", pa.int64()),
    ("gpu_dur_ns", pa.int64()),
    ("launch_delay_ns", pa.int64()),
    ("start_delay_ns", pa.int64()),
    ("step", pa.int32()),
])

_LAUNCHES_SQL = f"""
WITH k AS ({DEVICE_TASKS_SQL}
), api AS (
    SELECT s.id, coalesce(t.rank, 0) AS rank, s.name, s.kind, s.start_ns, s.dur_ns, s.correlation_id
    FROM slices s JOIN tracks t USING (track_id)
    WHERE t.kind = 'thread' AND s.kind IN ('runtime', 'driver') AND s.correlation_id IS NOT NULL
)
SELECT k.rank, k.correlation_id, a.id AS runtime_id, a.name AS runtime_name, k.id AS kernel_id,
       k.name AS kernel_name, k.kernel_type, k.stream, a.start_ns AS cpu_start_ns, a.dur_ns AS cpu_dur_ns,
       k.start_ns AS gpu_start_ns, k.dur_ns AS gpu_dur_ns,
       k.start_ns - (a.start_ns + a.dur_ns) AS launch_delay_ns, k.start_ns - a.start_ns AS start_delay_ns,
       k.step
FROM k JOIN api a ON a.rank = k.rank AND a.correlation_id = k.correlation_id
QUALIFY row_number() OVER (PARTITION BY k.id ORDER BY a.kind = 'runtime' DESC, a.start_ns, a.id) = 1
ORDER BY k.rank, k.start_ns, k.id
"""


def launch_stats(tables: RunTables) -> pa.Table:
    """One row per device task launched by a host runtime/driver call (same rank and ``correlation_id``;
    a runtime call is preferred over a driver call of the same correlation) (schema ``LAUNCH_STATS``):
    ``cpu_dur_ns`` is the call's duration, ``gpu_dur_ns`` the task's, ``launch_delay_ns`` = task start -
    end of the call (HTA's ``launch_delay``; negative when the task starts before the call returns) and
    ``start_delay_ns`` = task start - start of the call. HTA restricts itself to cudaLaunchKernel(ExC),
    cudaMemcpyAsync and cudaMemsetAsync; this keeps every launching call (cudaGraphLaunch, whose one call
    launches many kernels; Triton's cuLaunchKernel; ...). HTA also clips negative launch delays to 0."""
    return tables.sql(_LAUNCHES_SQL).to_arrow_table().cast(LAUNCH_STATS)


#: runtime calls that replay a captured graph: each kernel they launch is the graph's, launched with it at once
GRAPH_LAUNCH_CALLS = ("cudaGraphLaunch", "cudaGraphLaunch_v10000", "hipGraphLaunch")

LAUNCH_SUMMARY = pa.schema([
    ("rank", pa.int32()),
    ("launches", pa.int64()),
    ("graph_kernels", pa.int64()),
    ("short_kernels", pa.int64()),
    ("short_kernel_gpu_ns", pa.int64()),
    ("short_kernel_cpu_ns", pa.int64()),
    ("runtime_outliers", pa.int64()),
    ("launch_delay_outliers", pa.int64()),
    ("mean_cpu_dur_ns", pa.float64()),
    ("mean_gpu_dur_ns", pa.float64()),
    ("mean_launch_delay_ns", pa.float64()),
    ("median_launch_delay_ns", pa.float64()),
    ("max_launch_delay_ns", pa.int64()),
])


def launch_summary(launches: pa.Table, *, runtime_cutoff_ns: int = 50_000,
                   launch_delay_cutoff_ns: int = 100_000) -> pa.Table:
    """Per rank, from ``launch_stats`` rows (schema ``LAUNCH_SUMMARY``): ``launches`` (every task with its
    launch call), ``graph_kernels`` (those a graph launch replayed, ``GRAPH_LAUNCH_CALLS``: one call launches
    them all, so they are left out of what follows); of the others: ``short_kernels``, the launches whose call
    took at most ``runtime_cutoff_ns`` and longer than the task itself (launch overhead exceeds the kernel:
    HTA's "short GPU kernels"), with their summed task and call time; ``runtime_outliers``, calls longer than
    ``runtime_cutoff_ns``; ``launch_delay_outliers``, launch delays above ``launch_delay_cutoff_ns``; the mean
    call and the mean, median and max launch delay. ``mean_gpu_dur_ns`` is over every task. HTA's defaults:
    50 us and 100 us (HTA counts no graph launch at all)."""

    con = new_connection()
    con.register("launches", launches)
    query = """
        WITH l AS (SELECT *, list_contains($graph_calls, runtime_name) AS replayed FROM launches)
        SELECT rank, count(*) AS launches, count(*) FILTER (WHERE replayed) AS graph_kernels,
               count(*) FILTER (WHERE NOT replayed AND cpu_dur_ns <= $rc AND gpu_dur_ns < cpu_dur_ns)
                   AS short_kernels,
               coalesce(sum(gpu_dur_ns) FILTER (WHERE NOT replayed AND cpu_dur_ns <= $rc
                                                AND gpu_dur_ns < cpu_dur_ns), 0) AS short_kernel_gpu_ns,
               coalesce(sum(cpu_dur_ns) FILTER (WHERE NOT replayed AND cpu_dur_ns <= $rc
                                                AND gpu_dur_ns < cpu_dur_ns), 0) AS short_kernel_cpu_ns,
               count(*) FILTER (WHERE NOT replayed AND cpu_dur_ns > $rc) AS runtime_outliers,
               count(*) FILTER (WHERE NOT replayed AND launch_delay_ns > $lc) AS launch_delay_outliers,
               avg(cpu_dur_ns) FILTER (WHERE NOT replayed) AS mean_cpu_dur_ns,
               avg(gpu_dur_ns) AS mean_gpu_dur_ns,
               avg(launch_delay_ns) FILTER (WHERE NOT replayed) AS mean_launch_delay_ns,
               median(launch_delay_ns) FILTER (WHERE NOT replayed) AS median_launch_delay_ns,
               max(launch_delay_ns) FILTER (WHERE NOT replayed) AS max_launch_delay_ns
        FROM l GROUP BY rank ORDER BY rank
    """
    params = {"rc": runtime_cutoff_ns, "lc": launch_delay_cutoff_ns, "graph_calls": list(GRAPH_LAUNCH_CALLS)}
    return con.sql(query, params=params).to_arrow_table().cast(LAUNCH_SUMMARY)


IDLE_TIME_BREAKDOWN = pa.schema([
    ("rank", pa.int32()),
    ("track_id", pa.int32()),
    ("stream", pa.string()),
    ("idle_category", pa.string()),
    ("idle_ns", pa.int64()),
    ("count", pa.int64()),
    ("idle_ratio", pa.float64()),
])

IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")

_IDLE_SQL = f"""
WITH k AS ({DEVICE_TASKS_SQL}
), api AS (
    SELECT coalesce(t.rank, 0) AS rank, s.correlation_id, min(s.start_ns) AS runtime_start
    FROM slices s JOIN tracks t USING (track_id)
    WHERE t.kind = 'thread' AND s.kind IN ('runtime', 'driver') AND s.correlation_id IS NOT NULL
    GROUP BY ALL
), gaps AS (
    SELECT k.rank, k.track_id, k.stream, k.start_ns, a.runtime_start,
           max(k.end_ns) OVER (PARTITION BY k.track_id ORDER BY k.start_ns, k.id
                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS previous_end
    FROM k LEFT JOIN api a ON a.rank = k.rank AND a.correlation_id = k.correlation_id
), classified AS (
    SELECT rank, track_id, stream, greatest(start_ns - previous_end, 0) AS idle_ns,
           CASE WHEN runtime_start > previous_end THEN 'host_wait'
                WHEN start_ns - previous_end < $delay THEN 'kernel_wait'
                ELSE 'other' END AS idle_category
    FROM gaps WHERE previous_end IS NOT NULL
), categories AS (
    SELECT DISTINCT k.rank, k.track_id, k.stream, cat.idle_category
    FROM k CROSS JOIN (SELECT unnest($categories) AS idle_category) cat
)
SELECT rank, track_id, stream, idle_category, coalesce(sum(c.idle_ns), 0)::BIGINT AS idle_ns,
       count(c.idle_ns) AS count,
       coalesce(sum(c.idle_ns), 0) / nullif(sum(sum(c.idle_ns)) OVER (PARTITION BY rank, track_id), 0)
           AS idle_ratio
FROM categories LEFT JOIN classified c USING (rank, track_id, stream, idle_category)
GROUP BY rank, track_id, stream, idle_category
ORDER BY rank, track_id, list_position($categories, idle_category)
"""


def idle_time_breakdown(tables: RunTables, consecutive_kernel_delay_ns: int = 30_000) -> pa.Table:
    """Idle time between consecutive device tasks on each stream, split as HTA's idle time breakdown
    (schema ``IDLE_TIME_BREAKDOWN``: three rows per (rank, stream), ``idle_ns``, ``count`` of gaps and
    ``idle_ratio`` of the stream's idle time):

    * the gap before a task is its start minus the latest end of the earlier tasks on the stream (0 when
      it overlaps them; the first task on a stream has no gap);
    * ``host_wait``: the runtime call that launched the task started after that end: the host was late;
    * ``kernel_wait``: otherwise, a gap shorter than ``consecutive_kernel_delay_ns`` (default 30 us): the
      normal delay between back-to-back kernels;
    * ``other``: the rest (e.g. waits on events or other streams).

    HTA compares with the previous task's own end and sums negative gaps (overlapping tasks) as
    kernel_wait; here an overlap is a zero gap, measured from the furthest end so far."""
    params = {"delay": consecutive_kernel_delay_ns, "categories": list(IDLE_CATEGORIES)}
    return tables.sql(_IDLE_SQL, params=params).to_arrow_table().cast(IDLE_TIME_BREAKDOWN)


QUEUE_LENGTH = pa.schema([
    ("rank", pa.int32()),
    ("track_id", pa.int32()),
    ("stream", pa.string()),
    ("count", pa.int64()),
    ("mean", pa.float64()),
    ("min", pa.int64()),
    ("median", pa.float64()),
    ("max", pa.int64()),
])


def queue_length(tables: RunTables) -> pa.Table:
    """Per (rank, stream) summary of the launch queue's length (schema ``QUEUE_LENGTH``), HTA's queue length
    as HTA defines it: the device tasks launched on the stream and not yet started, one more when a task's
    runtime call starts, one fewer when the task starts (a task without its launch call in the trace is not
    counted; a CUDA graph launch enqueues each kernel it replays, which HTA leaves out), sampled at every one
    of those events (``count`` samples); at one instant a launch counts before a start."""
    query = f"""
        WITH launched AS (
            SELECT l.rank, k.track_id, l.stream, l.cpu_start_ns, l.gpu_start_ns
            FROM ({_LAUNCHES_SQL}) l JOIN ({DEVICE_TASKS_SQL}) k ON k.id = l.kernel_id
        ), events AS (
            SELECT rank, track_id, stream, cpu_start_ns AS ts, 1 AS delta FROM launched
            UNION ALL SELECT rank, track_id, stream, gpu_start_ns AS ts, -1 AS delta FROM launched
        ), running AS (
            SELECT rank, track_id, stream,
                   sum(delta) OVER (PARTITION BY track_id ORDER BY ts, delta DESC
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS queue
            FROM events
        )
        SELECT rank, track_id, stream, count(*) AS count, avg(queue) AS mean, min(queue) AS min,
               median(queue) AS median, max(queue) AS max
        FROM running GROUP BY ALL ORDER BY rank, track_id
    """
    return tables.sql(query).to_arrow_table().cast(QUEUE_LENGTH)
