"""Trace health: what in a run's own data is damaged or incomplete, per rank, and which analyses it touches.

``trace_health(tables)`` gives one row per rank and check (every check, count 0 when it finds nothing), each
check defined exactly here. ``affected_ns`` is the summed duration of the affected events still in the tables
(0 for events the readers could not keep, and for checks that are not about events: see each), ``example``
names the first affected event (by time), ``affects`` the ``Run`` methods whose figures the problem touches
(``CHECKS``), ``detail`` says what the count is made of.

* ``stream_overlap``: a device task (kind kernel, comm, memcpy or memset on a stream track:
  ``kernels.DEVICE_TASKS_SQL``) that starts before an earlier task of its stream ended (earlier: by start,
  then id). A stream executes its tasks in order, so an overlap means wrong timestamps or several streams
  merged into one track. The readers' nesting warning ("started inside another of its track and ended
  after it") is another count: every kind of track, and no task wholly inside another.
* ``outside_window``: a slice starting before or ending after the rank's profiling window, outside every
  window of the rank when it has several (successive traces of one process). The window is the one the
  profiler recorded (meta ``profiling_windows``): Kineto's capture window, from its ``Iteration Start: ...``
  instant (the profiler's start, where its ``PyTorch Profiler (N)`` span starts) to its ``Record Window End``
  instant (Kineto itself drops the device activity ending after it: the "Out-of-range" count of its log). A
  rank whose source records no window (older Kineto traces, Ascend output) is not checked (``detail`` says
  so): its own slices' span would contain them all by definition.
* ``launch_outside_trace``: a device task with a ``correlation_id`` but no launch call (a runtime or driver
  call on a host thread of its rank with the same id, the link ``kernels.launch_stats`` uses) whose id is
  below the least or above the greatest id of the rank's calls: launched before the trace began or after
  the host side of it ended (CUPTI's and CANN's correlation ids grow with every call). Kept in every
  analysis; ``affected_ns`` is their time.
* ``task_without_launch``: any other device task without a launch call: no correlation id, or one inside
  the range of the rank's calls whose call is not in the trace (lost, or filtered out by the profiler).
* ``launch_without_task``: a runtime or driver call with a correlation id and no device task of its rank
  with that id, among the calls whose name launched a device task elsewhere in the rank (so synchronise or
  allocation calls, which launch nothing, are not counted); typically the last launches before the window
  ended, whose tasks Kineto dropped. These three are checked only on ranks with both device tasks and
  runtime or driver calls (a source that records no launch calls cannot miss one).
* ``duration_overflow``: a slice the readers could not keep as given, counted from their ``parse_warnings``
  (``READER_DURATION_WARNINGS``: a negative duration set to 0, a duration over 2^50 ns skipped, a time or end
  beyond +-2^62 ns skipped: the sentinels some tools write, -1 or uint64 max, land there), plus any kept
  slice with a negative duration. A duration longer than the trace is counted by ``outside_window``: such a
  slice cannot fit in the rank's profiling window.
* ``clock_skew``: a rank whose clock offset from the job's reference rank (``collectives.clock_offsets``,
  estimated from the ends of collectives both ran) is at least ``CLOCK_SKEW_THRESHOLD_NS``; ``affected_ns``
  is the offset's size, no event is named. Only for runs of several ranks.
* ``dropped_events``: the profiler's own markers that it lost events (meta ``profiler_log``, Kineto's log
  lines): ``Dropped N activity records`` (counts N), ``Exceeded max GPU buffer count ... terminating
  tracing`` and ``CUPTI stopped early? = 1`` in its record counts (each counts 1: the device activity after
  it is missing, how much is unknown). Kineto's "Out-of-range = N" is not counted: those are records it
  dropped for lying outside the window, by design. torch_npu and msprof write no such marker in the files
  perfsight reads.

``health_by_check`` sums the findings per check over every rank, for a report of many ranks.
"""
from __future__ import annotations

import json
import re

import pyarrow as pa

from perfsight.analysis.collectives import clock_offsets
from perfsight.analysis.job_summaries import job_of
from perfsight.analysis.kernels import DEVICE_TASKS_SQL
from perfsight.analysis.rank_facts import rank_meta
from perfsight.analysis.waiting import NOISE_FLOOR_NS
from perfsight.core.memo import computed
from perfsight.core.tables import READER_DURATION_WARNINGS, RunTables

TRACE_HEALTH = pa.schema([
    ("rank", pa.int32()),
    ("check", pa.string()),
    ("count", pa.int64()),
    ("affected_ns", pa.int64()),
    ("example", pa.string()),
    ("affects", pa.list_(pa.string())),
    ("detail", pa.string()),
])

#: a clock offset from the reference rank from which cross-rank figures are in doubt: the smallest wait the
#: straggler verdict acts on (``waiting.NOISE_FLOOR_NS``); a skew as large can move a collective's wait from
#: one rank to another and so the verdict
CLOCK_SKEW_THRESHOLD_NS = NOISE_FLOOR_NS

_BUSY_FIGURES = ("temporal_breakdown", "kernel_type_breakdown", "idle_time_breakdown", "overlap",
                 "step_breakdown", "queue_length")
_LAUNCH_FIGURES = ("launch_stats", "operator_details", "op_flops", "idle_time_breakdown", "queue_length")

#: each check: what it finds (a noun phrase for "N ...") and the Run methods whose figures it touches
CHECKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "stream_overlap": ("device tasks overlapping an earlier task of their stream", _BUSY_FIGURES),
    "outside_window": ("slices outside the profiling window", ("op_statistic", "kernel_breakdown",
                                                               "step_breakdown", "temporal_breakdown")),
    "launch_outside_trace": ("device tasks launched outside the trace (kept)", _LAUNCH_FIGURES),
    "task_without_launch": ("device tasks without their launch call", _LAUNCH_FIGURES),
    "launch_without_task": ("launch calls without their device task", _LAUNCH_FIGURES),
    "duration_overflow": ("slices with an impossible duration", ("op_statistic", "kernel_breakdown",
                                                                 "step_breakdown", "temporal_breakdown")),
    "clock_skew": ("clock offset from the reference rank", ("collective_figures", "collective_totals",
                                                            "slow_ranks", "straggler", "communication_matrix",
                                                            "cluster_step_trace")),
    "dropped_events": ("events the profiler dropped", ("kernel_breakdown", "temporal_breakdown",
                                                       "step_breakdown", "launch_stats", "op_statistic")),
}

_WINDOWS_SQL = "SELECT rank::INTEGER AS rank, w[1]::BIGINT AS start_ns, w[2]::BIGINT AS end_ns FROM windows"

_CHECKS_SQL = f"""
WITH tasks AS ({DEVICE_TASKS_SQL}
), calls AS (
    SELECT s.id, coalesce(t.rank, 0) AS rank, s.name, s.start_ns, s.dur_ns, s.correlation_id
    FROM slices s JOIN tracks t USING (track_id)
    WHERE t.kind = 'thread' AND s.kind IN ('runtime', 'driver') AND s.correlation_id IS NOT NULL
), linked_ranks AS (
    SELECT rank, min(correlation_id) AS low, max(correlation_id) AS high FROM calls
    WHERE rank IN (SELECT rank FROM tasks) GROUP BY rank
), unlaunched AS (
    SELECT k.*, k.correlation_id IS NOT NULL AND (k.correlation_id < r.low OR k.correlation_id > r.high) AS outside
    FROM tasks k JOIN linked_ranks r USING (rank)
    WHERE NOT EXISTS (SELECT 1 FROM calls c WHERE c.rank = k.rank AND c.correlation_id = k.correlation_id)
), launching_names AS (
    SELECT DISTINCT c.rank, c.name FROM calls c SEMI JOIN tasks k ON k.rank = c.rank
                                                                  AND k.correlation_id = c.correlation_id
), taskless AS (
    SELECT c.* FROM calls c SEMI JOIN launching_names USING (rank, name)
    WHERE NOT EXISTS (SELECT 1 FROM tasks k WHERE k.rank = c.rank AND k.correlation_id = c.correlation_id)
), overlapping AS (
    SELECT * FROM tasks
    QUALIFY start_ns < max(end_ns) OVER (PARTITION BY track_id ORDER BY start_ns, id
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
), ranked AS (
    SELECT s.id, coalesce(t.rank, 0) AS rank, s.name, s.start_ns, s.dur_ns FROM slices s JOIN tracks t USING (track_id)
), outside AS (
    SELECT s.* FROM ranked s SEMI JOIN ({_WINDOWS_SQL}) w USING (rank)
    WHERE NOT EXISTS (SELECT 1 FROM ({_WINDOWS_SQL}) w WHERE w.rank = s.rank AND s.start_ns >= w.start_ns
                                                          AND s.start_ns + s.dur_ns <= w.end_ns)
), overlong AS (
    SELECT s.* FROM ranked s
    WHERE s.dur_ns < 0
), found AS (
    SELECT 'stream_overlap' AS "check", rank, name, start_ns, id, dur_ns FROM overlapping
    UNION ALL SELECT 'outside_window', rank, name, start_ns, id, dur_ns FROM outside
    UNION ALL SELECT 'launch_outside_trace', rank, name, start_ns, id, dur_ns FROM unlaunched WHERE outside
    UNION ALL SELECT 'task_without_launch', rank, name, start_ns, id, dur_ns FROM unlaunched WHERE NOT outside
    UNION ALL SELECT 'launch_without_task', rank, name, start_ns, id, dur_ns FROM taskless
    UNION ALL SELECT 'duration_overflow', rank, name, start_ns, id, dur_ns FROM overlong
)
SELECT "check", rank::INTEGER AS rank, count(*) AS count, sum(greatest(dur_ns, 0))::BIGINT AS affected_ns,
       arg_min(name || ' (slice ' || id || ')', (start_ns, id)) AS example
FROM found GROUP BY ALL
"""

#: Kineto's log lines that say it lost events, and the count each stands for (its number, else 1)
_DROP_MARKERS = (
    (re.compile(r"Dropped (\d+) activity records"), "activity records CUPTI dropped"),
    (re.compile(r"Exceeded max GPU buffer count.*terminating tracing"), "CUPTI buffer limit reached: tracing stopped"),
    (re.compile(r"CUPTI stopped early\? = 1\b"), "CUPTI stopped early"),
)
_WARNING_COUNT = re.compile(r"^(\d+) (.*)$")


def trace_health(tables: RunTables) -> pa.Table:
    """One row per rank and check (schema ``TRACE_HEALTH``, checks in ``CHECKS``' order, every check for every
    rank): ``count`` of findings, ``affected_ns`` (int ns), ``example`` (the first affected event, by time:
    ``name (slice id)``), ``affects`` (the Run methods whose figures it touches) and ``detail``. The module
    docstring defines each check."""
    metas = computed(rank_meta, tables)
    ranks = sorted(set(metas) | {r if r is not None else 0 for r in tables.tracks.column("rank").to_pylist()})
    windows = {rank: _windows(metas.get(rank, {})) for rank in ranks}
    con = tables.connect()
    con.register("windows", pa.table({"rank": pa.array([r for r in ranks for _ in windows[r]], pa.int32()),
                                      "w": pa.array([w for r in ranks for w in windows[r]], pa.list_(pa.int64()))}))
    found = {(row["check"], row["rank"]): row for row in con.sql(_CHECKS_SQL).to_arrow_table().to_pylist()}
    skews = _clock_skews(tables) if len(ranks) > 1 else {}
    rows = []
    for rank in ranks:
        meta = metas.get(rank, {})
        for check, (_, affects) in CHECKS.items():
            row = {"rank": rank, "check": check, "count": 0, "affected_ns": 0, "example": None,
                   "affects": list(affects), "detail": None}
            row.update({k: v for k, v in found.get((check, rank), {}).items() if k != "rank" and k != "check"})
            if check == "outside_window" and not windows[rank]:
                row["detail"] = "not checked: the source records no profiling window"
            elif check == "duration_overflow":
                _add_reader_counts(row, meta)
            elif check == "clock_skew" and rank in skews:
                row.update(skews[rank])
            elif check == "dropped_events":
                _add_drop_markers(row, meta)
            rows.append(row)
    return pa.Table.from_pylist(rows, schema=TRACE_HEALTH)


def _windows(meta: dict) -> list[list[int]]:
    """The rank's recorded profiling windows ([start_ns, end_ns] pairs of meta ``profiling_windows``)."""
    try:
        windows = json.loads(meta.get("profiling_windows") or "[]")
    except ValueError:
        return []
    return [w for w in windows if isinstance(w, list) and len(w) == 2 and all(type(t) is int for t in w)]


def _add_reader_counts(row: dict, meta: dict) -> None:
    """Add to a ``duration_overflow`` row the slices the rank's reader set to 0 or skipped (its warnings)."""
    try:
        warnings = json.loads(meta.get("parse_warnings") or "[]")
    except ValueError:
        warnings = []
    said = [_WARNING_COUNT.match(w) for w in warnings if isinstance(w, str)]
    counts = {what: int(m[1]) for m in said if m and (what := m[2]) in READER_DURATION_WARNINGS}
    kept = row["count"]
    row["count"] += sum(counts.values())
    parts = [f"{count} {what}" for what, count in counts.items()]
    if kept:
        parts.append(f"{kept} kept with a negative duration")
    row["detail"] = "; ".join(parts) or None


def _clock_skews(tables: RunTables) -> dict[int, dict]:
    """Per rank whose clock offset reaches CLOCK_SKEW_THRESHOLD_NS, the fields of its ``clock_skew`` row."""
    offsets = computed(clock_offsets, computed(job_of, tables)).to_pylist()
    return {o["rank"]: {"count": 1, "affected_ns": abs(o["offset_ns"]), "example": None,
                        "detail": f"{o['offset_ns']} ns from rank {o['reference_rank']}'s clock ({o['method']}, "
                                  f"{o['collectives_used']} collectives); threshold {CLOCK_SKEW_THRESHOLD_NS} ns"}
            for o in offsets if abs(o["offset_ns"]) >= CLOCK_SKEW_THRESHOLD_NS}


def _add_drop_markers(row: dict, meta: dict) -> None:
    """Fill a ``dropped_events`` row from the rank's profiler log lines (meta ``profiler_log``)."""
    try:
        log = json.loads(meta.get("profiler_log") or "{}")
    except ValueError:
        log = {}
    lines = [line for lines in (log.values() if isinstance(log, dict) else ()) if isinstance(lines, list)
             for line in lines if isinstance(line, str)]
    said = []
    for line in lines:
        for pattern, what in _DROP_MARKERS:
            if match := pattern.search(line):
                count = int(match[1]) if match.groups() else 1
                row["count"] += count
                said.append(f"{count} {what}" if match.groups() else what)
                row["example"] = row["example"] or line
    row["detail"] = "; ".join(said) or None


HEALTH_BY_CHECK = pa.schema([
    ("check", pa.string()),
    ("ranks", pa.int64()),
    ("first_rank", pa.int32()),
    ("count", pa.int64()),
    ("affected_ns", pa.int64()),
    ("example", pa.string()),
    ("affects", pa.list_(pa.string())),
])


def health_by_check(health: pa.Table) -> pa.Table:
    """A ``trace_health`` table's findings (count > 0) per check over every rank (schema ``HEALTH_BY_CHECK``):
    how many ``ranks`` found it, the lowest of them (``first_rank``) and its ``example``, ``count`` and
    ``affected_ns`` summed; in ``CHECKS``' order. What a report of many ranks shows."""
    rows: dict[str, dict] = {}
    for row in health.to_pylist():
        if row["count"]:
            into = rows.setdefault(row["check"], {"check": row["check"], "ranks": 0, "first_rank": row["rank"],
                                                  "count": 0, "affected_ns": 0, "example": row["example"],
                                                  "affects": row["affects"]})
            into["ranks"] += 1
            into["count"] += row["count"]
            into["affected_ns"] += row["affected_ns"]
    return pa.Table.from_pylist([rows[c] for c in CHECKS if c in rows], schema=HEALTH_BY_CHECK)
