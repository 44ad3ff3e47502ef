"""Operator and task executions and their statistics (msprof's op_summary, op_statistic, api_statistic,
task_time).

Every function reads the canonical tables and returns an Arrow table; durations and times are int64 ns.

Which executions count ("the category"): by default the *device tasks* (slices of kind kernel, comm,
memcpy or memset on a device stream track) when the run has any, otherwise the host framework operators
(kind ``cpu_op``), as msprof's op_summary lists the tasks the device ran. Each row carries a ``category``:
``device`` for a slice on a stream track, otherwise the slice's kind (``cpu_op``, ``runtime``, ...).
Passing ``kinds`` picks the slice kinds explicitly (on any track).

Host operators nest (``aten::linear`` contains ``aten::addmm``), so host totals and ratios count nested
time in every enclosing operator too; device tasks do not nest.
"""
from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ..tables import RunTables

#: slice kinds that are tasks a device executes (gpu_annotation is a user range, not a task)
DEVICE_TASK_KINDS = ("kernel", "comm", "memcpy", "memset")
#: slice kinds of host-side runtime and driver API calls
API_KINDS = ("runtime", "driver")

OP_INSTANCES = pa.schema([
    ("id", pa.int64()),
    ("name", pa.string()),
    ("op_type", pa.string()),
    ("kind", pa.string()),
    ("category", pa.string()),
    ("task_type", pa.string()),
    ("start_ns", pa.int64()),
    ("dur_ns", pa.int64()),
    ("self_ns", pa.int64()),
    ("wait_ns", pa.int64()),
    ("input_shapes", pa.string()),
    ("input_dtypes", pa.string()),
    ("step", pa.int32()),
    ("rank", pa.int32()),
    ("device", pa.string()),
    ("track", pa.string()),
    ("launch_op", pa.string()),
])

_STATISTIC_VALUES = [
    ("count", pa.int64()),
    ("total_ns", pa.int64()),
    ("self_ns", pa.int64()),
    ("avg_ns", pa.int64()),
    ("min_ns", pa.int64()),
    ("max_ns", pa.int64()),
    ("ratio", pa.float64()),
]

TASK_TIME = pa.schema([
    ("id", pa.int64()),
    ("name", pa.string()),
    ("task_type", pa.string()),
    ("rank", pa.int32()),
    ("device", pa.string()),
    ("track", pa.string()),
    ("start_ns", pa.int64()),
    ("dur_ns", pa.int64()),
    ("step", pa.int32()),
    ("launch_op", pa.string()),
])

_DEVICE_TASK_PREDICATE = "t.kind = 'stream' AND list_contains($device_kinds, s.kind)"

_INSTANCES_SQL = """
WITH picked AS (
    SELECT s.*, coalesce(t.rank, 0) AS rank, t.device, t.name AS track,
           CASE WHEN t.kind = 'stream' THEN 'device' ELSE s.kind END AS category
    FROM slices s JOIN tracks t USING (track_id)
    WHERE {predicate}
), child_time AS (    -- time spent in directly nested slices, for self time
    SELECT parent_id AS id, sum(dur_ns) AS child_ns FROM slices WHERE parent_id IS NOT NULL GROUP BY parent_id
), launching_op AS (  -- the innermost host operator a device task came from, and its input shapes
    SELECT coalesce(t.rank, 0) AS rank, s.external_id, arg_max(s.name, s.depth) AS launch_op,
           arg_max(s.input_shapes, s.depth) FILTER (WHERE s.input_shapes IS NOT NULL) AS input_shapes,
           arg_max(s.input_dtypes, s.depth) FILTER (WHERE s.input_shapes IS NOT NULL) AS input_dtypes
    FROM slices s JOIN tracks t USING (track_id)
    WHERE s.kind = 'cpu_op' AND s.external_id IS NOT NULL
    GROUP BY ALL
)
SELECT p.id, p.name, coalesce(p.op_type, p.name) AS op_type, p.kind, p.category, p.task_type,
       p.start_ns, p.dur_ns, greatest(0, p.dur_ns - coalesce(c.child_ns, 0)) AS self_ns,
       greatest(0, coalesce(p.start_ns - lag(p.start_ns + p.dur_ns) OVER same_lane, 0)) AS wait_ns,
       coalesce(p.input_shapes, l.input_shapes) AS input_shapes,
       coalesce(p.input_dtypes, l.input_dtypes) AS input_dtypes,
       p.step, p.rank, p.device, p.track, l.launch_op
FROM picked p
LEFT JOIN child_time c ON c.id = p.id
LEFT JOIN launching_op l ON p.category = 'device' AND l.rank = p.rank AND l.external_id = p.external_id
WINDOW same_lane AS (PARTITION BY p.track_id, coalesce(p.depth, 0) ORDER BY p.start_ns, p.id)
ORDER BY p.start_ns, p.id
"""


def has_device_tasks(tables: RunTables) -> bool:
    """Whether the run has device tasks (kernel/comm/memcpy/memset slices on a stream track)."""
    return _has_device_tasks(tables.connect())


def _has_device_tasks(con) -> bool:
    query = f"SELECT count(*) FROM slices s JOIN tracks t USING (track_id) WHERE {_DEVICE_TASK_PREDICATE}"
    return con.execute(query, {"device_kinds": list(DEVICE_TASK_KINDS)}).fetchall()[0][0] > 0


def op_instances(tables: RunTables, *, kinds: Sequence[str] | None = None) -> pa.Table:
    """One row per operator or task execution, in start order (schema ``OP_INSTANCES``).

    ``kinds=None`` picks the device tasks if the run has any, else the ``cpu_op`` slices (see the module
    docstring). ``wait_ns`` is the gap since the previous picked execution on the same track at the same
    depth (for device tasks: the previous task on the stream), 0 for the first and when they overlap.
    ``self_ns`` is the duration minus the time of the slices directly nested in it (= dur_ns for tasks).
    Device tasks without shapes of their own take ``input_shapes``/``input_dtypes`` from the host
    operator that launched them (same rank and ``external_id``).
    """
    con = tables.connect()
    if kinds is None and _has_device_tasks(con):
        predicate, params = _DEVICE_TASK_PREDICATE, {"device_kinds": list(DEVICE_TASK_KINDS)}
    else:
        predicate, params = "list_contains($kinds, s.kind)", {"kinds": list(kinds or ("cpu_op",))}
    return con.sql(_INSTANCES_SQL.format(predicate=predicate), params=params).to_arrow_table().cast(OP_INSTANCES)


def duration_statistics(instances: pa.Table, keys: Sequence[str]) -> pa.Table:
    """count, total/self/avg/min/max ns and ``ratio`` (percent of the total of the same rank and category) per
    distinct ``keys``; ``keys`` must include ``rank`` and ``category``. Sorted by rank, category, total
    descending."""
    import duckdb

    con = duckdb.connect()
    con.register("instances", instances)
    key_list = ", ".join(f'"{k}"' for k in keys)
    query = f"""
        SELECT {key_list}, count(*) AS count, sum(dur_ns)::BIGINT AS total_ns, sum(self_ns)::BIGINT AS self_ns,
               round(avg(dur_ns))::BIGINT AS avg_ns,
               min(dur_ns) AS min_ns, max(dur_ns) AS max_ns,
               100.0 * sum(dur_ns) / nullif(sum(sum(dur_ns)) OVER (PARTITION BY rank, category), 0) AS ratio
        FROM instances GROUP BY {key_list}
        ORDER BY rank, category, total_ns DESC, {key_list}
    """
    schema = pa.schema([instances.schema.field(k) for k in keys] + _STATISTIC_VALUES)
    return con.sql(query).to_arrow_table().cast(schema)


def op_statistic(tables: RunTables, *, by: str | Sequence[str] = "op_type", kinds: Sequence[str] | None = None,
                 search: str | None = None, top: int | None = None) -> pa.Table:
    """Per operator type (or ``by`` = any ``op_instances`` column or columns, e.g. ``name`` or
    ``["op_type", "input_shapes"]`` to group by input shape) and task type: count, total_ns, self_ns,
    avg_ns, min_ns, max_ns and ratio (percent of the category's total), per rank and category.
    The executions are those of ``op_instances(tables, kinds=kinds)``; ``search`` keeps the operators whose
    name or type contains it (case-insensitive; ratios stay shares of the whole category); ``top`` keeps
    the ``top`` longest totals per rank and category."""
    keys = [by] if isinstance(by, str) else list(by)
    stats = duration_statistics(op_instances(tables, kinds=kinds), ["rank", "category", *keys, "task_type"])
    if search:
        needle = search.lower()
        columns = [c for c in ("name", "op_type") if c in keys]
        if not columns:
            raise ValueError(f"search needs 'name' or 'op_type' among the grouping columns, got {keys}")
        hits = [pc.match_substring(pc.utf8_lower(stats[c]), needle) for c in columns]
        mask = hits[0] if len(hits) == 1 else pc.or_(*hits)
        stats = stats.filter(pc.fill_null(mask, False))
    if top is not None:
        stats = _first_per_group(stats, top)
    return stats


def _first_per_group(stats: pa.Table, n: int) -> pa.Table:
    """The first ``n`` rows of each (rank, category) group of a table sorted by them (statistics are small)."""
    keep, seen = [], {}
    for index, group in enumerate(zip(stats["rank"].to_pylist(), stats["category"].to_pylist())):
        seen[group] = seen.get(group, 0) + 1
        if seen[group] <= n:
            keep.append(index)
    return stats.take(pa.array(keep, pa.int64()))


def api_statistic(tables: RunTables) -> pa.Table:
    """Runtime and driver API calls per name: count, total_ns, avg_ns, min_ns, max_ns and ratio (percent
    of all calls of the same rank and category, where the category is ``runtime`` or ``driver``)."""
    return duration_statistics(op_instances(tables, kinds=API_KINDS), ["rank", "category", "name"])


def task_time(tables: RunTables) -> pa.Table:
    """The device tasks (schema ``TASK_TIME``): name, task type, rank, device, stream track, start,
    duration, step; in start order."""
    instances = op_instances(tables, kinds=DEVICE_TASK_KINDS)
    device = instances.filter(pc.equal(instances["category"], "device"))
    return device.select(TASK_TIME.names).cast(TASK_TIME)
