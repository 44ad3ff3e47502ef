"""Computation (MindSpore Insight's 计算量分析): FLOPs per operator, per scope level and for the whole model
per step, the achieved FLOPS and their utilisation of the device's peak at each operator's precision (MFU).

Insight reports "算子粒度、scope层级粒度、模型粒度的计算量数据" with three measures: FLOPs, FLOPS
(FLOPs per second) and FLOPS utilisation ("通过FLOPS除以设备峰值FLOPS得到 (FLOPS利用率的计算依赖了step的划分)").
perfsight reads the FLOPs the source counted (``slices.flops``, torch's ``with_flops``) or, for a trace
without any (current torch writes none), counts them from the operators' input shapes (``flops_shapes``):

* The counted operators are the slices with a non-null ``flops``, or with FLOPs from their shapes;
  ``flops_source`` says which (``trace``, ``shapes``; ``mixed`` for a group of both). Their *time*
  (``op_ns``) is the summed duration of the device tasks they launched, themselves or the operators nested
  in them (``operator_details.operator_device_time``' device total time: the task's launch call, or
  without launch flows its ``external_id``), when there are any, else the slice's own duration.
  ``time_source`` says which (``device``: tasks, or the slice is itself a device task; ``host``;
  ``mixed`` for a group of both).
* Each counted operator has a precision (``precision.op_precisions``: from its input dtypes, else its
  kernels' names, else fp32) unless ``precision`` is given, which then applies to every operator (what the
  utilisation would be at that precision's peak). ``peak_flops`` and ``peak_source`` of a precision come
  from ``peaks.device_peak`` (or the ``peak_flops`` argument, for every precision).
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
* Rates. ``flops_per_s`` = flops x 1e9 / time in ns (FLOP/s): over ``op_ns`` for operators and scopes, over
  ``step_ns`` for the model. Operator rows are per (rank, type, ``precision``), each against its
  precision's peak. A scope or step mixes precisions: its ``peak_flops`` is the peak of the mix, the
  FLOP-weighted harmonic mean ``sum(flops) / sum(flops_p / peak_p)`` (``sum(flops_p / peak_p)`` is the time
  the work would take at every precision's peak), so ``utilization_percent`` = 100 x flops_per_s /
  peak_flops is that time at peak over the time taken: the model FLOPS utilisation (MFU) against the mix.
  ``precision`` lists the precisions of a group, most FLOPs first, joined by ``+``; ``peak_source`` is the
  one source, or ``mix: `` and the sources joined by `` | ``. The peak is null (``unknown``) when any
  precision's is.
* ``peak_note`` is null, or, on a row above 100%, names it and says the peak entry is likely wrong
  (``OVER_PEAK_NOTE``: no work runs faster than the device's peak: a table entry or CPU estimate too low, or
  the wrong precision for the work); every surface shows it and ``over_peak_warnings`` lists them for the
  run summary's warnings.
"""
from __future__ import annotations

import pyarrow as pa

from perfsight.analysis.flops_shapes import shape_flops
from perfsight.analysis.operator_details import operator_device_time
from perfsight.analysis.peaks import PRECISIONS, device_peak
from perfsight.analysis.precision import op_precisions
from perfsight.analysis.step_spans import STEP_SPANS_CTE
from perfsight.analysis.steps import CUT_STEP_SQL
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables, new_connection

_RATE_COLUMNS = [
    ("flops_per_s", pa.float64()),
    ("precision", pa.string()),
    ("peak_flops", pa.float64()),
    ("peak_source", pa.string()),
    ("utilization_percent", pa.float64()),
    ("peak_note", pa.string()),
]

#: what ``peak_note`` says after naming a row whose utilisation exceeds 100%: no work runs faster than the peak
OVER_PEAK_NOTE = ("above 100% of its peak: the peak entry is likely wrong (too low for this device, or not the "
                  "precision the work ran at), not a real utilisation")

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

_PEAK_SCHEMA = pa.schema([("precision", pa.string()), ("peak", pa.float64()), ("source", pa.string())])

#: an operator's ``op_ns`` and ``time_source`` (module docstring), over ``slices s``, its ``tracks t`` and its
#: ``device_time d``
OP_TIME_SQL = """CASE WHEN d.device_total_ns > 0 THEN d.device_total_ns ELSE s.dur_ns END AS op_ns,
           CASE WHEN d.device_total_ns > 0 OR t.kind = 'stream' THEN 'device' ELSE 'host' END AS time_source"""

# The counted operators with their rank, time and time source, precision and its peak.
_COUNTED = f"""
WITH RECURSIVE counted AS (
    SELECT s.id, s.name, coalesce(s.op_type, s.name) AS op_type, s.track_id, s.parent_id, s.step,
           coalesce(s.flops, e.flops) AS flops, CASE WHEN s.flops IS NULL THEN 'shapes' ELSE 'trace' END
           AS flops_source, s.dur_ns, coalesce(t.rank, 0)::INTEGER AS rank, {OP_TIME_SQL},
           coalesce($precision, p.precision, 'fp32') AS precision
    FROM slices s JOIN tracks t USING (track_id) LEFT JOIN shape_flops e USING (id)
    LEFT JOIN device_time d USING (id) LEFT JOIN precisions p USING (id)
    WHERE coalesce(s.flops, e.flops) IS NOT NULL
), ops AS (
    SELECT c.*, pk.peak, pk.source AS peak_source FROM counted c LEFT JOIN peaks pk USING (precision)
)
"""

#: the peak of a group's precision mix from its rows' ``flops`` and ``peak`` (module docstring; exactly the peak
#: when there is one), and where it comes from
MIX_PEAK_SQL = """CASE WHEN count(peak) = count(*) THEN CASE WHEN min(peak) = max(peak) THEN min(peak)
                 ELSE sum(flops) / nullif(sum(flops / peak), 0) END END"""
MIX_SOURCE_SQL = """CASE WHEN count(DISTINCT peak_source) = 1 THEN any_value(peak_source)
            ELSE 'mix: ' || string_agg(DISTINCT peak_source, ' | ' ORDER BY peak_source) END"""

#: the rates of a group of ``ops`` (module docstring), after its ``flops`` and its time ``{time}``
_RATES = f"""
       sum(flops) * 1e9 / nullif({{time}}, 0) AS flops_per_s,
       string_agg(precision, '+' ORDER BY precision_flops DESC, precision) FILTER (WHERE precision_first)
           AS precision,
       {MIX_PEAK_SQL} AS peak_flops,
       {MIX_SOURCE_SQL} AS peak_source
"""

#: ``ops`` with, per group of ``{keys}``, each row's precision's FLOPs in the group and whether it is the
#: first row of its precision there (to list a group's precisions once each, most FLOPs first)
_RANKED = """
, ranked AS (
    SELECT *, sum(flops) OVER (PARTITION BY {keys}, precision) AS precision_flops,
           row_number() OVER (PARTITION BY {keys}, precision ORDER BY id) = 1 AS precision_first
    FROM {source}
)
"""

_OP_FLOPS_SQL = _COUNTED + _RANKED.format(keys="rank, op_type", source="ops") + """
SELECT rank, op_type, count(*) AS count, TRY_CAST(sum(flops) AS BIGINT) AS flops, sum(op_ns)::BIGINT AS op_ns,
       CASE WHEN min(time_source) = max(time_source) THEN min(time_source) ELSE 'mixed' END AS time_source,
       CASE WHEN min(flops_source) = max(flops_source) THEN min(flops_source) ELSE 'mixed' END AS flops_source,
""" + _RATES.format(time="sum(op_ns)") + """
FROM ranked GROUP BY rank, op_type, ranked.precision ORDER BY rank, flops DESC, op_type, precision
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
), positioned AS (
    SELECT *, row_number() OVER (PARTITION BY op_id ORDER BY depth, start_ns, scope_id) AS position
    FROM scopes
), cut AS (
    SELECT op_id, string_agg(label, '/' ORDER BY position) AS scope, arg_max(scope_id, position) AS scope_id,
           arg_max(scope_dur, position) AS scope_dur
    FROM positioned WHERE position <= $level GROUP BY op_id
), placed AS (
    SELECT o.id, o.rank, coalesce(c.scope, '(no scope)') AS scope, c.scope_id, c.scope_dur, o.flops, o.op_ns,
           o.precision, o.peak, o.peak_source
    FROM ops o LEFT JOIN cut c ON c.op_id = o.id
), scope_time AS (
    SELECT rank, scope, sum(scope_dur)::BIGINT AS scope_ns
    FROM (SELECT DISTINCT rank, scope, scope_id, scope_dur FROM placed WHERE scope_id IS NOT NULL) GROUP BY ALL
)""" + _RANKED.format(keys="rank, scope", source="placed") + """
SELECT p.rank, $level AS level, p.scope, count(*) AS op_count, TRY_CAST(sum(p.flops) AS BIGINT) AS flops,
       sum(p.op_ns)::BIGINT AS op_ns, any_value(st.scope_ns) AS scope_ns,
""" + _RATES.format(time="sum(p.op_ns)") + """
FROM ranked p LEFT JOIN scope_time st USING (rank, scope)
GROUP BY p.rank, p.scope ORDER BY p.rank, flops DESC, p.scope
"""

_MODEL_FLOPS_SQL = _COUNTED + f"""
, {STEP_SPANS_CTE}""" + _RANKED.format(keys="rank, step", source="ops") + """
SELECT o.rank, o.step, count(*) AS op_count, TRY_CAST(sum(o.flops) AS BIGINT) AS flops,
       any_value(st.end_ns - st.start_ns) AS step_ns,
""" + _RATES.format(time="any_value(st.end_ns - st.start_ns)") + """
FROM ranked o LEFT JOIN steps st ON st.rank = o.rank AND st.step = o.step
GROUP BY o.rank, o.step ORDER BY o.rank, o.step NULLS LAST
"""


def register_operator_facts(con, tables: RunTables, peak_flops: float | None = None):
    """Register on ``con`` (a ``RunTables.connect`` connection) what the operator queries here and in
    ``roofline`` join: ``shape_flops`` (the FLOPs counted from shapes where the trace has none),
    ``device_time`` (each operator's device total time, for ``OP_TIME_SQL``), ``precisions`` (each
    operator's) and ``peaks`` (each precision's peak and its source, or ``peak_flops`` for all); returns
    ``con``."""
    con.register("shape_flops", computed(shape_flops, tables))
    con.register("device_time", computed(operator_device_time, tables))
    con.register("precisions", computed(op_precisions, tables))
    meta = tables.meta_dict()
    found = [dict(zip(_PEAK_SCHEMA.names, (p, *device_peak(meta, p, peak_flops)))) for p in PRECISIONS]
    con.register("peaks", pa.Table.from_pylist(found, schema=_PEAK_SCHEMA))
    return con


def _finish(table: pa.Table, schema: pa.Schema, what: list[str]) -> pa.Table:
    """``table`` with ``utilization_percent`` = 100 x flops_per_s / peak_flops and ``peak_note`` (module
    docstring; ``what`` names each row), in ``schema``."""
    import pyarrow.compute as pc

    utilisation = pc.multiply(pc.divide(table.column("flops_per_s"), table.column("peak_flops")), 100.0)
    table = table.append_column("utilization_percent", utilisation)
    notes = [None if util is None or util <= 100.0 else f"{name}: {OVER_PEAK_NOTE}"
             for name, util in zip(what, table.column("utilization_percent").to_pylist())]
    table = table.append_column("peak_note", pa.array(notes, pa.string()))
    return table.select(schema.names).cast(schema)


def _sql(tables: RunTables, query: str, precision: str | None, peak_flops: float | None, **params) -> pa.Table:
    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    con = register_operator_facts(tables.connect(), tables, peak_flops)
    return con.sql(query, params={"precision": precision, **params}).to_arrow_table()


def op_flops(tables: RunTables, *, precision: str | None = None, peak_flops: float | None = None) -> pa.Table:
    """Per rank, operator type and precision (schema ``OP_FLOPS``): count, flops, op_ns, time_source,
    flops_source, flops_per_s, precision, peak_flops, peak_source, utilization_percent, peak_note (module
    docstring; ``precision`` None: each operator's own). Largest FLOPs first."""
    table = _sql(tables, _OP_FLOPS_SQL, precision, peak_flops)
    what = [f"{op} ({p})" for op, p in zip(table.column("op_type").to_pylist(), table.column("precision").to_pylist())]
    return _finish(table, OP_FLOPS, what)


def scope_flops(tables: RunTables, *, level: int = 1, precision: str | None = None,
                peak_flops: float | None = None) -> pa.Table:
    """Per rank and scope path cut at ``level`` (>= 1; schema ``SCOPE_FLOPS``): op_count, flops, op_ns,
    scope_ns and the rates against the peak of the scope's precision mix (module docstring). Largest FLOPs
    first."""
    if level < 1:
        raise ValueError(f"level must be >= 1, got {level}")
    table = _sql(tables, _SCOPE_FLOPS_SQL, precision, peak_flops, level=level)
    return _finish(table, SCOPE_FLOPS, [f"scope {scope}" for scope in table.column("scope").to_pylist()])


def model_flops(tables: RunTables, *, precision: str | None = None, peak_flops: float | None = None) -> pa.Table:
    """Per rank and step (schema ``MODEL_FLOPS``): op_count, flops, step_ns and the rates over the step against
    the peak of its precision mix, the MFU (module docstring); a null step gathers the counted operators
    outside steps."""
    table = _sql(tables, _MODEL_FLOPS_SQL, precision, peak_flops)
    what = [f"rank {rank} step {step}" for rank, step in zip(table.column("rank").to_pylist(),
                                                             table.column("step").to_pylist())]
    return _finish(table, MODEL_FLOPS, what)


MODEL_FLOPS_TOTAL = pa.schema([
    ("rank", pa.int32()),
    ("steps", pa.int64()),
    ("op_count", pa.int64()),
    ("flops", pa.int64()),
    ("flops_per_step", pa.float64()),
    ("step_ns", pa.int64()),
] + _RATE_COLUMNS)

_MODEL_FLOPS_TOTAL_SQL = f"""
SELECT rank, count(*) AS steps, sum(op_count)::BIGINT AS op_count, TRY_CAST(sum(flops) AS BIGINT) AS flops,
       TRY_CAST(sum(flops) AS BIGINT) / count(*) AS flops_per_step,
       sum(step_ns)::BIGINT AS step_ns, sum(flops) * 1e9 / nullif(sum(step_ns), 0) AS flops_per_s,
       array_to_string(list_sort(list_distinct(flatten(list(string_split(precision, '+'))))), '+') AS precision,
       {MIX_PEAK_SQL} AS peak_flops, {MIX_SOURCE_SQL} AS peak_source
FROM (SELECT *, peak_flops AS peak FROM model) WHERE step IS NOT NULL AND step_ns IS NOT NULL
GROUP BY rank ORDER BY rank
"""


def model_flops_total(model: pa.Table) -> pa.Table:
    """Per rank, the profiled steps of a ``model_flops`` table taken together (schema
    ``MODEL_FLOPS_TOTAL``): the number of ``steps`` (rows with a step and a step span), their summed
    ``op_count``, ``flops`` and ``step_ns``, ``flops_per_step`` = flops / steps; ``flops_per_s`` = flops x
    1e9 / step_ns (the model's FLOPS over all its steps), its ``precision``s, and ``utilization_percent`` =
    100 x flops_per_s / ``peak_flops``, the peak of the steps' mix (the FLOP-weighted harmonic mean of their
    peaks: the MFU over the steps; null when a step's peak is unknown). Operators outside steps are not
    counted."""
    con = new_connection()
    con.register("model", model)
    table = con.sql(_MODEL_FLOPS_TOTAL_SQL).to_arrow_table()
    return _finish(table, MODEL_FLOPS_TOTAL, [f"rank {rank} model" for rank in table.column("rank").to_pylist()])


def over_peak_warnings(tables: RunTables) -> list[str]:
    """The ``peak_note`` of every row above 100% of its peak (each names its operator type, scope, step or
    rank) of ``op_flops``, ``scope_flops`` (level 1), ``model_flops`` and ``model_flops_total``, with the peak
    it was measured against, for the run summary's warnings."""
    model = computed(model_flops, tables)
    found = (computed(op_flops, tables), computed(scope_flops, tables), model, model_flops_total(model))
    return [f"{row['peak_note']} (peak {row['peak_source']})" for table in found
            for row in table.to_pylist() if row["peak_note"]]
