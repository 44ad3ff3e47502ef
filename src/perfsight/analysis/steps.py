"""Step trace (迭代轨迹): each training step split into iteration gap, forward+backward and tail.

MindSpore Insight divides a step into "迭代间隙 (两次step执行的间隔时间)、前向与反向执行、all reduce、参数更新"
and finds the phase boundaries automatically: "前向计算开始的算子指定为get_next算子之后连接的第一个算子,
反向计算结束的算子指定为最后一次all reduce之前连接的算子"; msprof's PROFILING_OPTIONS let the user name
them instead (fp_point: "指定的正向第一个算子名字", bp_point: "指定的反向最后一个算子名字"). For a PyTorch
trace perfsight applies those rules to host slices, per rank and step:

* A step is the host ``step`` slices (ProfilerStep#N) of a rank with step number N (``step`` column):
  start_ns = earliest start, end_ns = latest end; the main thread is the track of the longest one.
* Only host slices (on thread tracks) whose ``step`` column is N are considered.
* data_wait_ns: the time inside the step covered by its ``dataloader`` slices (``step_spans.DATA_WAIT_CTE``:
  their union, cut to the step).
* fp_start_ns (forward start, get_next's successor): the start of the first ``cpu_op`` on the main thread
  that starts after the last dataloader slice of the step ends (after the step start if there is none),
  ignoring operators inside an optimizer range (``Optimizer.zero_grad``, ``Optimizer.step``). With
  ``fp_point``: the start of the first host slice of the step named exactly ``fp_point``.
* The update boundary: the start of the first optimizer update after fp (a slice whose name starts with
  ``Optimizer.step`` or contains ``optimizer`` in any case, except zero_grad ranges); without one, the
  start of the last all-reduce (name containing ``allreduce`` or ``all_reduce``); without one, the step end.
* bp_end_ns (backward end): the latest end of the backward operators that start after fp and before the
  update boundary. Backward operators are ``cpu_op`` slices named with ``backward`` (any case, e.g.
  ``AddmmBackward0``) or ``autograd::...``, and every ``cpu_op`` on a thread other than the main one that
  does autograd work (runs a slice so named). With ``bp_point``: the end of the last host slice of the
  step named exactly ``bp_point``. An operator that runs past the step's end (on another thread) counts
  up to the step end, so the tail is never negative.
* iteration_ns = end - start; gap_ns (迭代间隙: data wait) = fp_start - start; fp_bp_ns = bp_end - fp_start;
  tail_ns (迭代拖尾: all-reduce and parameter update) = end - bp_end; so iteration = gap + fp_bp + tail.
  The gap starts at the step's own start, not at the previous step's end: torch closes one ProfilerStep
  and opens the next tens of microseconds apart, and that pause belongs to neither step (a gap reaching
  back over it made the phases add up to more than the step).

Columns that cannot be found are null (no forward op, no backward op such as in inference, a named
fp_point/bp_point absent from the step). No step slices: an empty table with the same columns.

Where the names come from (``step_points``): the arguments, else meta ``fp_point``/``bp_point``, which
holds PERFSIGHT_FP_START / PERFSIGHT_BP_END when ``perfsight.open`` saw them set (the seed's
PROFILING_FP_START / PROFILING_BP_END), else the run's own fp_point/bp_point options (perfsight runs),
else a reader's phase slices (MindSpore's ``fp_and_bp``); otherwise the points are found automatically.
"""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from perfsight.analysis.step_spans import DATA_WAIT_CTE
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables, new_connection

STEP_TRACE = pa.schema([
    ("rank", pa.int32()),
    ("step", pa.int32()),
    ("start_ns", pa.int64()),
    ("end_ns", pa.int64()),
    ("fp_start_ns", pa.int64()),
    ("bp_end_ns", pa.int64()),
    ("iteration_ns", pa.int64()),
    ("fp_bp_ns", pa.int64()),
    ("gap_ns", pa.int64()),
    ("tail_ns", pa.int64()),
    ("data_wait_ns", pa.int64()),
])

_BACKWARD_NAME = "(s.name ILIKE '%backward%' OR s.name LIKE 'autograd::%')"

_FP_AUTO = """
    SELECT s.rank, s.step, min(s.start_ns) AS fp_start
    FROM host s LEFT JOIN data_wait l USING (rank, step)
    WHERE s.kind = 'cpu_op' AND s.track_id = s.main_track
      AND s.start_ns >= coalesce(l.last_end, s.step_start)
      AND NOT EXISTS (SELECT 1 FROM optimizer o
                      WHERE o.rank = s.rank AND o.step = s.step AND o.track_id = s.track_id
                        AND s.start_ns >= o.start_ns AND s.end_ns <= o.end_ns)
    GROUP BY ALL
"""

_FP_NAMED = "SELECT rank, step, min(start_ns) AS fp_start FROM host WHERE name = $fp_point GROUP BY ALL"

_BP_AUTO = f"""
    SELECT s.rank, s.step, max(s.end_ns) AS bp_end
    FROM host s JOIN boundary b USING (rank, step)
    LEFT JOIN autograd_threads a ON a.rank = s.rank AND a.track_id = s.track_id
    WHERE s.kind = 'cpu_op' AND s.start_ns >= b.fp_start AND s.start_ns < b.update_start
      AND ({_BACKWARD_NAME} OR a.track_id IS NOT NULL)
    GROUP BY ALL
"""

_BP_NAMED = "SELECT rank, step, max(end_ns) AS bp_end FROM host WHERE name = $bp_point GROUP BY ALL"

_STEP_TRACE_SQL = """
WITH s AS (
    SELECT sl.kind, sl.name, sl.track_id, sl.start_ns, sl.start_ns + sl.dur_ns AS end_ns, sl.parent_id,
           sl.step, coalesce(t.rank, 0) AS rank, t.kind AS track_kind
    FROM slices sl JOIN tracks t USING (track_id)
    WHERE sl.step IS NOT NULL
), steps AS (
    SELECT rank, step, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
           arg_max(track_id, end_ns - start_ns) AS main_track
    FROM s WHERE kind = 'step' AND track_kind = 'thread' GROUP BY rank, step
), host AS (
    SELECT s.*, st.main_track, st.start_ns AS step_start
    FROM s JOIN steps st USING (rank, step) WHERE s.track_kind = 'thread'
), {data_wait}, optimizer AS (
    SELECT rank, step, track_id, start_ns, end_ns, lower(name) NOT LIKE '%zero_grad%' AS is_update
    FROM host WHERE lower(name) LIKE '%optimizer%'
), autograd_threads AS (
    SELECT DISTINCT s.rank, s.track_id FROM host s WHERE s.track_id <> s.main_track AND {backward_name}
), fp AS ({fp}
), boundary AS (
    SELECT st.rank, st.step, fp.fp_start, coalesce(
        (SELECT min(o.start_ns) FROM optimizer o
         WHERE o.rank = st.rank AND o.step = st.step AND o.is_update AND o.start_ns >= fp.fp_start),
        (SELECT max(h.start_ns) FROM host h
         WHERE h.rank = st.rank AND h.step = st.step
           AND (lower(h.name) LIKE '%allreduce%' OR lower(h.name) LIKE '%all_reduce%')
           AND h.start_ns >= fp.fp_start),
        st.end_ns) AS update_start
    FROM steps st JOIN fp USING (rank, step)
), bp AS ({bp}
), timed AS (
    SELECT st.*, fp.fp_start, CASE WHEN bp.bp_end > st.end_ns THEN st.end_ns ELSE bp.bp_end END AS bp_end,
           coalesce(l.wait_ns, 0) AS data_wait_ns
    FROM steps st
    LEFT JOIN fp USING (rank, step) LEFT JOIN bp USING (rank, step) LEFT JOIN data_wait l USING (rank, step)
)
SELECT rank, step, start_ns, end_ns, fp_start AS fp_start_ns, bp_end AS bp_end_ns,
       end_ns - start_ns AS iteration_ns, bp_end - fp_start AS fp_bp_ns,
       fp_start - start_ns AS gap_ns,
       end_ns - bp_end AS tail_ns, data_wait_ns
FROM timed ORDER BY rank, step
"""


#: slices that are a ProfilerStep range the profiler's stop cut short: the reader demotes them to annotations
CUT_STEP_SQL = "kind = 'annotation' AND name LIKE 'ProfilerStep#%'"


def no_steps_reason(tables: RunTables) -> str | None:
    """Why the run has no steps, in a sentence for every surface; None when it has some."""
    if tables.sql("SELECT 1 FROM slices WHERE kind = 'step' AND step IS NOT NULL LIMIT 1").fetchall():
        return None
    [(cut,)] = tables.sql(f"SELECT min(name) FROM slices WHERE {CUT_STEP_SQL}").fetchall()
    if cut:
        return (f"no finished step: the profile covers the whole run, and its only step range ({cut}) was cut by "
                "the profiler's stop (an inference script, or one that never steps an optimizer); there are no "
                "step times, and the figures cover the whole profile")
    lacking = _step_files_lacking(tables.meta_dict())
    if lacking:
        return (f"no steps: the profile lacks {' and '.join(lacking)}, where step ranges come from (ProfilerStep#N "
                "ranges, the device tasks' Step Id); step times, the step breakdown and the data verdict need them"
                + _step_source_said(tables.meta_dict()) + "; the figures cover the whole profile")
    return ("no steps (no ProfilerStep#N ranges): step times, the step breakdown and the data verdict need them "
            "(torch.profiler's schedule, or prof.step() each step); the figures cover the whole trace")


#: the files a reader's meta ``lacking_files`` may name that step ranges come from (torch_npu's)
STEP_RANGE_FILES = ("trace_view.json", "kernel_details.csv")


def _step_files_lacking(meta: dict) -> list[str]:
    """The step range files the run's reader said its folder lacks (meta ``lacking_files``), when it lacks
    the trace (whose ranges come first); [] otherwise."""
    try:
        lacking = json.loads(meta.get("lacking_files") or "[]")
    except ValueError:
        return []
    lacking = [name for name in STEP_RANGE_FILES if isinstance(lacking, list) and name in lacking]
    return lacking if STEP_RANGE_FILES[0] in lacking else []


def _step_source_said(meta: dict) -> str:
    """Where the run's per-step figures come from when not from step ranges (meta ``step_source``), or ""."""
    source = meta.get("step_source")
    return f"; its per-step figures are torch_npu's own {source} (meta step_trace_time)" \
        if source == "step_trace_time.csv" else ""


def step_points(tables: RunTables, fp_point: str | None = None, bp_point: str | None = None
                ) -> tuple[str | None, str | None]:
    """The operator names the step trace uses for its forward start and backward end: those given, else
    those in meta (the run's fp_point/bp_point options, PERFSIGHT_FP_START / PERFSIGHT_BP_END as applied
    by ``perfsight.open``, or a reader's own phase slices); None where the point is found automatically."""
    meta = tables.meta_dict()
    return fp_point or meta.get("fp_point") or None, bp_point or meta.get("bp_point") or None


def unmatched_step_points(trace: pa.Table, fp_point: str | None, bp_point: str | None) -> list[str]:
    """For a ``step_trace`` made with named points: a sentence for each point that names no host operator
    in some of its steps (their phases are then unknown, null)."""
    found = []
    for option, name, column in (("fp_point", fp_point, "fp_start_ns"), ("bp_point", bp_point, "bp_end_ns")):
        missing = trace.filter(pc.is_null(trace.column(column))).column("step").to_pylist() if name else []
        if missing:
            shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
            found.append(f"{option} {name!r} names no host operator in {len(missing)} of {trace.num_rows} "
                         f"steps ({shown}): the step phases that depend on it are unknown there")
    return found


def step_trace(tables: RunTables, *, fp_point: str | None = None, bp_point: str | None = None) -> pa.Table:
    """One row per (rank, step) with the phase boundaries and durations described in the module
    docstring (schema ``STEP_TRACE``; times and durations int64 ns). Without ``fp_point``/``bp_point``,
    the ones a reader declared in meta (sources that record their own phase slices, e.g. MindSpore's
    ``fp_and_bp``) are used, else the points are found automatically."""
    fp_point, bp_point = computed(step_points, tables, fp_point, bp_point)
    query = _STEP_TRACE_SQL.format(
        backward_name=_BACKWARD_NAME, data_wait=DATA_WAIT_CTE,
        fp=_FP_NAMED if fp_point else _FP_AUTO,
        bp=_BP_NAMED if bp_point else _BP_AUTO,
    )
    params = {name: value for name, value in (("fp_point", fp_point), ("bp_point", bp_point)) if value}
    return tables.sql(query, params=params or None).to_arrow_table().cast(STEP_TRACE)


STEP_PHASES = pa.schema([
    ("rank", pa.int32()),
    ("step", pa.int32()),
    ("steps", pa.int64()),
    ("iteration_ns", pa.int64()),
    ("gap_ns", pa.int64()),
    ("fp_bp_ns", pa.int64()),
    ("tail_ns", pa.int64()),
    ("data_wait_ns", pa.int64()),
    ("fp_offset_ns", pa.int64()),
    ("bp_offset_ns", pa.int64()),
])

_PHASES_SQL = """
SELECT rank, step, 1::BIGINT AS steps, iteration_ns, gap_ns, fp_bp_ns, tail_ns, data_wait_ns,
       fp_start_ns - start_ns AS fp_offset_ns, bp_end_ns - start_ns AS bp_offset_ns
FROM trace
UNION ALL
SELECT rank, NULL, count(*), round(avg(iteration_ns)), round(avg(gap_ns)), round(avg(fp_bp_ns)),
       round(avg(tail_ns)), round(avg(data_wait_ns)), round(avg(fp_start_ns - start_ns)),
       round(avg(bp_end_ns - start_ns))
FROM trace GROUP BY rank
ORDER BY rank, step NULLS FIRST
"""


def step_phases(trace: pa.Table) -> pa.Table:
    """The phases of each step as drawn inside the step (MindSpore's step trace chart), from a
    ``step_trace`` table (schema ``STEP_PHASES``): per rank, first an average row (``step`` null; the
    chart's default, "默认显示的是各step的平均值"), then one row per step. ``iteration_ns``, ``gap_ns``,
    ``fp_bp_ns``, ``tail_ns`` and ``data_wait_ns`` are the step trace's; ``fp_offset_ns`` = fp_start -
    start and ``bp_offset_ns`` = bp_end - start place forward+backward in the step (the gap ends at
    fp_offset, the tail starts at bp_offset). ``steps`` is 1 on a step's row and the rank's number of steps
    on the average row, whose every column is the mean over the steps where that column is known,
    rounded to the ns (null when it is known in none)."""

    con = new_connection()
    con.register("trace", trace)
    return con.sql(_PHASES_SQL).to_arrow_table().cast(STEP_PHASES)
