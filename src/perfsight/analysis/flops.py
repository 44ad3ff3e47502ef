"""Computation (MindSpore Insight's 计算量分析): FLOPs per operator, per scope level and for the whole model
per step, the achieved FLOPS and their utilisation of the device's peak.

Insight reports "算子粒度、scope层级粒度、模型粒度的计算量数据" with three measures: FLOPs, FLOPS
(FLOPs per second) and FLOPS utilisation ("通过FLOPS除以设备峰值FLOPS得到 (FLOPS利用率的计算依赖了step的划分)").
perfsight reads the FLOPs the source counted (``slices.flops``, torch's ``with_flops``) or, for a trace
without any (current torch writes none), counts them from the operators' input shapes (``flops_shapes``):

* The counted operators are the slices with a non-null ``flops``, or with FLOPs from their shapes;
  ``flops_source`` says which (``trace``, ``shapes``; ``mixed`` for a group of both). Their *time*
  (``op_ns``) is the summed duration of the device tasks they launched (kernel/comm/memcpy/memset slices
  on a stream of the same rank with the operator's ``external_id``) when there are any, else the
  operator's own duration. ``time_source`` says which (``device``, ``host``; ``mixed`` for a group of both).
* FLOPs are summed over every counted slice (a sum beyond int64 is null), as torch's ``key_averages``
  does (torch counts each operator once: ``aten::linear`` has no flops of its own, its ``aten::addmm`` has).
* Scopes are the ranges enclosing operators on their track: Python ``nn.Module: X`` slices (label ``X``,
  from ``with_modules``/``with_stack``) and ``annotation`` slices (record_function ranges, label = name),
  except a ProfilerStep range the profiler's stop cut (``steps.CUT_STEP_SQL``: the profiler's, not a scope).
  An operator's scope path is its enclosing scopes, outermost first, found by following ``parent_id``;
  at ``level`` L the path is cut to its first L labels joined by ``/`` (shorter paths stay whole, so
  every level sums to the model total); ``(no scope)`` when none encloses it. ``scope_ns`` is the
  summed duration of the distinct scope slices at the cut (null for ``(no scope)``).
* Model per step: the FLOPs of the counted operators whose ``step`` is N, over the span of step N's host
  ``step`` slices (``step_ns``); operators outside steps form a row with a null step and null rate.
* ``flops_per_s`` = flops x 1e9 / time in ns (FLOP/s): over ``op_ns`` for operators and scopes, over
  ``step_ns`` for the model. ``utilization_percent`` = 100 x flops_per_s / ``peak_flops``;
  ``peak_flops`` and ``peak_source`` come from ``peaks.device_peak`` (``precision``, default fp32) or the
  ``peak_flops`` argument; null peak and ``peak_source`` = ``unknown`` when it is not known.
  ``peak_note`` is ``OVER_PEAK_NOTE`` on a row above 100% (the peak figure is wrong: an estimate too low,
  or a precision whose peak is higher than the one asked for), else null; every surface shows it.
"""
from __future__ import annotations

import pyarrow as pa

from perfsight.analysis.flops_shapes import shape_flops
from perfsight.analysis.ops import DEVICE_TASK_KINDS_SQL
from perfsight.analysis.peaks import device_peak
from perfsight.analysis.step_spans import STEP_SPANS_CTE
from perfsight.analysis.steps import CUT_STEP_SQL
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables, new_connection

_RATE_COLUMNS = [
    ("flops_per_s", pa.float64()),
    ("peak_flops", pa.float64()),
    ("peak_source", pa.string()),
    ("utilization_percent", pa.float64()),
    ("peak_note", pa.string()),
]

#: ``peak_note`` of a row whose utilisation exceeds 100%: no work runs faster than the device's peak
OVER_PEAK_NOTE = "above 100% of the peak: the peak figure is too low for this device, not a real utilisation"

OP_FLOPS = pa.schema([
    ("rank", pa.int32()),
    ("op_type", pa.string()),
    ("count", pa.int64()),
    ("flops", pa.int64()),
    ("op_ns", pa.int64()),
    ("time_source", pa.string()),
    ("flops_source", pa.string()),
] + _RATE_COLUMNS)

SCOPE_FLOPS = pa.schema([
    ("rank", pa.int32()),
    ("level", pa.int32()),
    ("scope", pa.string()),
    ("op_count", pa.int64()),
    ("flops", pa.int64()),
    ("op_ns", pa.int64()),
    ("scope_ns", pa.int64()),
] + _RATE_COLUMNS)

MODEL_FLOPS = pa.schema([
    ("rank", pa.int32()),
    ("step", pa.int32()),
    ("op_count", pa.int64()),
    ("flops", pa.int64()),
    ("step_ns", pa.int64()),
] + _RATE_COLUMNS)

# The counted operators with their rank, time and time source.
_COUNTED = f"""
WITH RECURSIVE counted AS (
    SELECT s.id, s.name, coalesce(s.op_type, s.name) AS op_type, s.track_id, s.parent_id, s.step,
           coalesce(s.flops, e.flops) AS flops, CASE WHEN s.flops IS NULL THEN 'shapes' ELSE 'trace' END
           AS flops_source, s.external_id, s.dur_ns, coalesce(t.rank, 0)::INTEGER AS rank
    FROM slices s JOIN tracks t USING (track_id) LEFT JOIN shape_flops e USING (id)
    WHERE coalesce(s.flops, e.flops) IS NOT NULL
), device_time AS (
    SELECT coalesce(t.rank, 0)::INTEGER AS rank, s.external_id, sum(s.dur_ns) AS device_ns
    FROM slices s JOIN tracks t USING (track_id)
    WHERE t.kind = 'stream' AND s.kind IN ({DEVICE_TASK_KINDS_SQL}) AND s.external_id IS NOT NULL
      AND s.external_id IN (SELECT external_id FROM counted)
    GROUP BY ALL
), ops AS (
    SELECT c.*, coalesce(d.device_ns, c.dur_ns) AS op_ns,
           CASE WHEN d.device_ns IS NULL THEN 'host' ELSE 'device' END AS time_source
    FROM counted c LEFT JOIN device_time d ON d.rank = c.rank AND d.external_id = c.external_id
)
"""

_OP_FLOPS_SQL = _COUNTED + """
SELECT rank, op_type, count(*) AS count, TRY_CAST(sum(flops) AS BIGINT) AS flops, sum(op_ns)::BIGINT AS op_ns,
       CASE WHEN min(time_source) = max(time_source) THEN min(time_source) ELSE 'mixed' END AS time_source,
       CASE WHEN min(flops_source) = max(flops_source) THEN min(flops_source) ELSE 'mixed' END AS flops_source,
       sum(flops) * 1e9 / nullif(sum(op_ns), 0) AS flops_per_s
FROM ops GROUP BY ALL ORDER BY rank, flops DESC, op_type
"""

_SCOPE_FLOPS_SQL = _COUNTED + f"""
, chain(op_id, ancestor_id) AS (
    SELECT id, parent_id FROM ops WHERE parent_id IS NOT NULL
    UNION ALL
    SELECT c.op_id, s.parent_id FROM chain c JOIN slices s ON s.id = c.ancestor_id WHERE s.parent_id IS NOT NULL
), scopes AS (
    SELECT c.op_id, s.id AS scope_id, s.dur_ns AS scope_dur, s.depth, s.start_ns,
           CASE WHEN s.kind = 'python' THEN substr(s.name, length('nn.Module: ') + 1) ELSE s.name END AS label
    FROM chain c JOIN slices s ON s.id = c.ancestor_id
    WHERE (s.kind = 'python' AND s.name LIKE 'nn.Module: %') OR (s.kind = 'annotation' AND NOT ({CUT_STEP_SQL}))
), ranked AS (
    SELECT *, row_number() OVER (PARTITION BY op_id ORDER BY depth, start_ns, scope_id) AS position
    FROM scopes
), cut AS (
    SELECT op_id, string_agg(label, '/' ORDER BY position) AS scope, arg_max(scope_id, position) AS scope_id,
           arg_max(scope_dur, position) AS scope_dur
    FROM ranked WHERE position <= $level GROUP BY op_id
), placed AS (
    SELECT o.rank, coalesce(c.scope, '(no scope)') AS scope, c.scope_id, c.scope_dur, o.flops, o.op_ns
    FROM ops o LEFT JOIN cut c ON c.op_id = o.id
), scope_time AS (
    SELECT rank, scope, sum(scope_dur)::BIGINT AS scope_ns
    FROM (SELECT DISTINCT rank, scope, scope_id, scope_dur FROM placed WHERE scope_id IS NOT NULL) GROUP BY ALL
)
SELECT p.rank, $level AS level, p.scope, count(*) AS op_count, TRY_CAST(sum(p.flops) AS BIGINT) AS flops,
       sum(p.op_ns)::BIGINT AS op_ns, any_value(st.scope_ns) AS scope_ns,
       sum(p.flops) * 1e9 / nullif(sum(p.op_ns), 0) AS flops_per_s
FROM placed p LEFT JOIN scope_time st USING (rank, scope)
GROUP BY p.rank, p.scope ORDER BY p.rank, flops DESC, p.scope
"""

_MODEL_FLOPS_SQL = _COUNTED + f"""
, {STEP_SPANS_CTE}
SELECT o.rank, o.step, count(*) AS op_count, TRY_CAST(sum(o.flops) AS BIGINT) AS flops,
       any_value(st.end_ns - st.start_ns) AS step_ns,
       sum(o.flops) * 1e9 / nullif(any_value(st.end_ns - st.start_ns), 0) AS flops_per_s
FROM ops o LEFT JOIN steps st ON st.rank = o.rank AND st.step = o.step
GROUP BY o.rank, o.step ORDER BY o.rank, o.step NULLS LAST
"""


def _connect(tables: RunTables):
    """The run's tables plus ``shape_flops``: the FLOPs counted from shapes where the trace has none."""
    con = tables.connect()
    con.register("shape_flops", computed(shape_flops, tables))
    return con


def _with_peak(table: pa.Table, tables: RunTables, precision: str, peak_flops: float | None,
               schema: pa.Schema) -> pa.Table:
    import pyarrow.compute as pc

    peak, source = device_peak(tables.meta_dict(), precision, peak_flops)
    n = table.num_rows
    rate = table.column("flops_per_s")
    util = pc.multiply(pc.divide(rate, peak), 100.0) if peak else pa.nulls(n, pa.float64())
    table = table.append_column("peak_flops", pa.array([peak] * n, pa.float64()))
    table = table.append_column("peak_source", pa.array([source] * n, pa.string()))
    table = table.append_column("utilization_percent", util)
    return _with_note(table).select(schema.names).cast(schema)


def _with_note(table: pa.Table) -> pa.Table:
    """``table`` with ``peak_note``: ``OVER_PEAK_NOTE`` where ``utilization_percent`` > 100, else null."""
    import pyarrow.compute as pc

    over = pc.fill_null(pc.greater(table.column("utilization_percent"), 100.0), False)
    return table.append_column("peak_note", pc.if_else(over, OVER_PEAK_NOTE, pa.scalar(None, pa.string())))


def op_flops(tables: RunTables, *, precision: str = "fp32", peak_flops: float | None = None) -> pa.Table:
    """Per rank and operator type (schema ``OP_FLOPS``): count, flops, op_ns, time_source, flops_source,
    flops_per_s, peak_flops, peak_source, utilization_percent (module docstring). Largest FLOPs first."""
    table = _connect(tables).sql(_OP_FLOPS_SQL).to_arrow_table()
    return _with_peak(table, tables, precision, peak_flops, OP_FLOPS)


def scope_flops(tables: RunTables, *, level: int = 1, precision: str = "fp32",
                peak_flops: float | None = None) -> pa.Table:
    """Per rank and scope path cut at ``level`` (>= 1; schema ``SCOPE_FLOPS``): op_count, flops, op_ns,
    scope_ns and the rates (module docstring). Largest FLOPs first."""
    if level < 1:
        raise ValueError(f"level must be >= 1, got {level}")
    table = _connect(tables).sql(_SCOPE_FLOPS_SQL, params={"level": level}).to_arrow_table()
    return _with_peak(table, tables, precision, peak_flops, SCOPE_FLOPS)


def model_flops(tables: RunTables, *, precision: str = "fp32", peak_flops: float | None = None) -> pa.Table:
    """Per rank and step (schema ``MODEL_FLOPS``): op_count, flops, step_ns and the rates over the step
    (module docstring); a null step gathers the counted operators outside steps."""
    table = _connect(tables).sql(_MODEL_FLOPS_SQL).to_arrow_table()
    return _with_peak(table, tables, precision, peak_flops, MODEL_FLOPS)


MODEL_FLOPS_TOTAL = pa.schema([
    ("rank", pa.int32()),
    ("steps", pa.int64()),
    ("op_count", pa.int64()),
    ("flops", pa.int64()),
    ("flops_per_step", pa.float64()),
    ("step_ns", pa.int64()),
] + _RATE_COLUMNS)

_MODEL_FLOPS_TOTAL_SQL = """
SELECT rank, count(*) AS steps, sum(op_count)::BIGINT AS op_count, TRY_CAST(sum(flops) AS BIGINT) AS flops,
       TRY_CAST(sum(flops) AS BIGINT) / count(*) AS flops_per_step,
       sum(step_ns)::BIGINT AS step_ns, sum(flops) * 1e9 / nullif(sum(step_ns), 0) AS flops_per_s,
       any_value(peak_flops) AS peak_flops, any_value(peak_source) AS peak_source,
       100.0 * sum(flops) * 1e9 / nullif(sum(step_ns), 0) / any_value(peak_flops) AS utilization_percent
FROM model WHERE step IS NOT NULL AND step_ns IS NOT NULL GROUP BY rank ORDER BY rank
"""


def model_flops_total(model: pa.Table) -> pa.Table:
    """Per rank, the profiled steps of a ``model_flops`` table taken together (schema
    ``MODEL_FLOPS_TOTAL``): the number of ``steps`` (rows with a step and a step span), their summed
    ``op_count``, ``flops`` and ``step_ns``, ``flops_per_step`` = flops / steps; ``flops_per_s`` = flops x
    1e9 / step_ns (the model's FLOPS over all its steps) and ``utilization_percent`` = 100 x flops_per_s /
    ``peak_flops`` (the rows' peak; null when unknown). Operators outside steps are not counted."""

    con = new_connection()
    con.register("model", model)
    return _with_note(con.sql(_MODEL_FLOPS_TOTAL_SQL).to_arrow_table()).cast(MODEL_FLOPS_TOTAL)
