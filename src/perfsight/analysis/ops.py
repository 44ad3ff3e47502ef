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

from perfsight.core.memo import computed
from perfsight.core.tables import RunTables, new_connection

#: slice kinds that are tasks a device executes (gpu_annotation is a user range, not a task)
DEVICE_TASK_KINDS = ("kernel", "comm", "memcpy", "memset")
#: slice kinds of host-side runtime and driver API calls
API_KINDS = ("runtime", "driver")
#: the two as SQL lists of text literals, for ``kind IN (...)``
DEVICE_TASK_KINDS_SQL = ", ".join(f"'{kind}'" for kind in DEVICE_TASK_KINDS)
API_KINDS_SQL = ", ".join(f"'{kind}'" for kind in API_KINDS)

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
    ("pid", pa.string()),
    ("tid", pa.string()),
    ("launch_op", pa.string()),
    ("launch_op_id", pa.int64()),
])

_STATISTIC_VALUES = [
    ("count", pa.int64()),
    ("total_ns", pa.int64()),
    ("self_ns", pa.int64()),
    ("avg_ns", pa.int64()),
    ("min_ns", pa.int64()),
    ("max_ns", pa.int64()),
    ("ratio", pa.float64()),
    ("variance_ns2", pa.float64()),
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

#: the time of the slices directly nested in each slice (``id``, ``child_ns``), for self time (``_SELF_NS``)
_CHILD_TIME = """child_time AS (
    SELECT parent_id AS id, sum(dur_ns) AS child_ns FROM slices WHERE parent_id IS NOT NULL GROUP BY parent_id
)"""
#: a slice's self time: its duration minus its directly nested slices' (``c``: a row of ``_CHILD_TIME``)
_SELF_NS = "greatest(0, {slice}.dur_ns - coalesce(c.child_ns, 0))"

_INSTANCES_SQL = """
WITH RECURSIVE picked AS (
    SELECT s.id, s.name, s.op_type, s.kind, s.task_type, s.track_id, s.depth, s.start_ns, s.dur_ns,
           s.input_shapes, s.input_dtypes, s.step, s.external_id,
           coalesce(t.rank, 0) AS rank, t.device, t.name AS track, t.pid, t.tid,
           CASE WHEN t.kind = 'stream' THEN 'device' ELSE s.kind END AS category
    FROM slices s JOIN tracks t USING (track_id)
    WHERE {predicate}
), {child_time}, {innermost_operator}, launched_by AS (   -- the innermost host operator around a task's launch call
    SELECT o.seed_id AS task_id, s.name AS launch_op, s.id AS launch_op_id, s.input_shapes, s.input_dtypes
    FROM innermost_operator o JOIN slices s USING (id)
), same_external_id AS (  -- without a launch flow: the innermost host operator with the task's External id
    SELECT coalesce(t.rank, 0) AS rank, s.external_id, arg_max(s.name, s.depth) AS launch_op,
           arg_max(s.id, s.depth) AS launch_op_id,
           arg_max(s.input_shapes, s.depth) FILTER (WHERE s.input_shapes IS NOT NULL) AS input_shapes,
           arg_max(s.input_dtypes, s.depth) FILTER (WHERE s.input_shapes IS NOT NULL) AS input_dtypes
    FROM slices s JOIN tracks t USING (track_id)
    WHERE t.kind <> 'stream' AND list_contains($operator_kinds, s.kind) AND s.external_id IS NOT NULL
    GROUP BY ALL
)
SELECT p.id, p.name, coalesce(p.op_type, p.name) AS op_type, p.kind, p.category, p.task_type,
       p.start_ns, p.dur_ns, {self_ns} AS self_ns,
       greatest(0, coalesce(p.start_ns - lag(p.start_ns + p.dur_ns) OVER same_lane, 0)) AS wait_ns,
       coalesce(p.input_shapes, CASE WHEN b.task_id IS NULL THEN x.input_shapes ELSE b.input_shapes END)
           AS input_shapes,
       coalesce(p.input_dtypes, CASE WHEN b.task_id IS NULL THEN x.input_dtypes ELSE b.input_dtypes END)
           AS input_dtypes,
       p.step, p.rank, p.device, p.track, p.pid, p.tid, coalesce(b.launch_op, x.launch_op) AS launch_op,
       coalesce(b.launch_op_id, x.launch_op_id) AS launch_op_id
FROM picked p
LEFT JOIN child_time c ON c.id = p.id
LEFT JOIN launched_by b ON p.category = 'device' AND b.task_id = p.id
LEFT JOIN same_external_id x ON p.category = 'device' AND b.task_id IS NULL AND x.rank = p.rank
                                AND x.external_id = p.external_id
WINDOW same_lane AS (PARTITION BY p.track_id, coalesce(p.depth, 0) ORDER BY p.start_ns, p.id)
ORDER BY p.start_ns, p.id
"""

#: how many enclosing slices (Python functions, annotations) are climbed from a launch call to its operator
MAX_LAUNCH_HOPS = 64
#: host slice kinds that are the operators launching device tasks (a collective's host op is ``comm``)
LAUNCHING_OP_KINDS = ("cpu_op", "comm")


def innermost_operator_sql(seeds: str) -> str:
    """Two common table expressions of a ``WITH RECURSIVE`` query, ``enclosing`` and then
    ``innermost_operator(seed_id, id)``: for each row of ``seeds`` (a query of ``seed_id`` and ``id``, the slice
    to start from), the innermost slice of ``LAUNCHING_OP_KINDS`` among it and the slices enclosing it,
    climbing ``parent_id`` at most ``MAX_LAUNCH_HOPS`` times; none when no operator encloses it. The query
    passes ``$operator_kinds`` (``LAUNCHING_OP_KINDS``). A launch call's operator (``op_instances``) and a
    synchronisation's (``syncs``)."""
    return f"""enclosing(seed_id, id, kind, parent_id, hops) AS (
    SELECT x.seed_id, s.id, s.kind, s.parent_id, 0 FROM ({seeds}) x JOIN slices s ON s.id = x.id
    UNION ALL
    SELECT e.seed_id, s.id, s.kind, s.parent_id, e.hops + 1
    FROM enclosing e JOIN slices s ON s.id = e.parent_id
    WHERE NOT list_contains($operator_kinds, e.kind) AND e.hops < {MAX_LAUNCH_HOPS}
), innermost_operator AS (
    SELECT seed_id, id FROM enclosing WHERE list_contains($operator_kinds, kind)
)"""


def has_device_tasks(tables: RunTables) -> bool:
    """Whether the run has device tasks (kernel/comm/memcpy/memset slices on a stream track)."""
    query = f"SELECT count(*) FROM slices s JOIN tracks t USING (track_id) WHERE {_DEVICE_TASK_PREDICATE}"
    return tables.sql(query, params={"device_kinds": list(DEVICE_TASK_KINDS)}).fetchall()[0][0] > 0


def op_instances(tables: RunTables, *, kinds: Sequence[str] | None = None) -> pa.Table:
    """One row per operator or task execution, in start order (schema ``OP_INSTANCES``).

    ``kinds=None`` picks the device tasks if the run has any, else the ``cpu_op`` slices (see the module
    docstring). ``wait_ns`` is the gap since the previous picked execution on the same track at the same
    depth (for device tasks: the previous task on the stream), 0 for the first and when they overlap.
    ``self_ns`` is the duration minus the time of the slices directly nested in it (= dur_ns for tasks).
    ``launch_op`` and ``launch_op_id`` (device tasks): the name and slice id of the innermost host operator
    (``cpu_op``, or a collective's host ``comm`` op) enclosing the runtime call that launched the task (its
    ``launch`` flow), or, for a task without a launch flow, of the innermost host operator of the same rank
    with the task's ``external_id``; tasks without shapes of their own take ``input_shapes``/``input_dtypes``
    from that operator. ``pid``/``tid``: the source's process and thread (or stream) ids of the track.
    """
    predicate, params = _picked(tables, kinds)
    launches = "SELECT dst_id AS seed_id, src_id AS id FROM flows WHERE kind = 'launch'"
    query = _INSTANCES_SQL.format(predicate=predicate, innermost_operator=innermost_operator_sql(launches),
                                  child_time=_CHILD_TIME, self_ns=_SELF_NS.format(slice="p"))
    params = {**params, "operator_kinds": list(LAUNCHING_OP_KINDS)}
    return tables.sql(query, params=params).to_arrow_table().cast(OP_INSTANCES)


def _picked(tables: RunTables, kinds: Sequence[str] | None) -> tuple[str, dict]:
    """The predicate over slices ``s`` joined with their tracks ``t``, and its parameters, that picks the
    executions of ``op_instances(tables, kinds=kinds)``."""
    if kinds is None and computed(has_device_tasks, tables):
        return _DEVICE_TASK_PREDICATE, {"device_kinds": list(DEVICE_TASK_KINDS)}
    return "list_contains($kinds, s.kind)", {"kinds": list(kinds or ("cpu_op",))}


EXECUTION_TOTALS = pa.schema([
    ("rank", pa.int32()), ("name", pa.string()), ("op_type", pa.string()), ("step", pa.int32()),
    ("count", pa.int64()), ("total_ns", pa.int64()), ("self_ns", pa.int64()),
])


def execution_totals(tables: RunTables, *, kinds: Sequence[str] | None = None) -> pa.Table:
    """Per rank, name, operator type (as ``op_instances``': the name where none is recorded) and step (schema
    ``EXECUTION_TOTALS``): the number, summed duration and summed self time (``op_instances``' ``self_ns``) of
    the executions ``op_instances(tables, kinds=kinds)`` picks, without its work per execution (the launching
    operator, shapes): counting and summing is all a comparison of two runs needs, at a fraction of the cost
    on a large trace."""
    predicate, params = _picked(tables, kinds)
    query = f"""
        WITH {_CHILD_TIME}
        SELECT coalesce(t.rank, 0) AS rank, s.name, coalesce(s.op_type, s.name) AS op_type, s.step,
               count(*) AS count, sum(s.dur_ns)::BIGINT AS total_ns,
               sum({_SELF_NS.format(slice="s")})::BIGINT AS self_ns
        FROM slices s JOIN tracks t USING (track_id) LEFT JOIN child_time c ON c.id = s.id
        WHERE {predicate} GROUP BY ALL ORDER BY ALL
    """
    return tables.sql(query, params=params).to_arrow_table().cast(EXECUTION_TOTALS)


def duration_statistics(instances: pa.Table, keys: Sequence[str]) -> pa.Table:
    """count, total/self/avg/min/max ns, ``ratio`` (percent of the total of the same rank and category) and
    ``variance_ns2`` (population variance of the durations, ns squared) per distinct ``keys``; ``keys`` must
    include ``rank`` and ``category``. Sorted by rank, category, total descending."""

    con = new_connection()
    con.register("instances", instances)
    key_list = ", ".join(f'"{k}"' for k in keys)
    query = f"""
        SELECT {key_list}, count(*) AS count, sum(dur_ns)::BIGINT AS total_ns, sum(self_ns)::BIGINT AS self_ns,
               round(avg(dur_ns))::BIGINT AS avg_ns,
               min(dur_ns) AS min_ns, max(dur_ns) AS max_ns,
               100.0 * sum(dur_ns) / nullif(sum(sum(dur_ns)) OVER (PARTITION BY rank, category), 0) AS ratio,
               var_pop(dur_ns) AS variance_ns2
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
    stats = duration_statistics(computed(op_instances, tables, kinds=kinds), ["rank", "category", *keys, "task_type"])
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
    keep: list[int] = []
    seen: dict[tuple, int] = {}
    for index, group in enumerate(zip(stats["rank"].to_pylist(), stats["category"].to_pylist())):
        seen[group] = seen.get(group, 0) + 1
        if seen[group] <= n:
            keep.append(index)
    return stats.take(pa.array(keep, pa.int64()))


def api_statistic(tables: RunTables, *, by: Sequence[str] = ("name",)) -> pa.Table:
    """Runtime and driver API calls per name (or ``by`` = any ``op_instances`` columns, e.g. ``("name",
    "pid", "tid")`` per calling thread): count, total_ns, avg_ns, min_ns, max_ns, variance_ns2 and ratio
    (percent of all calls of the same rank and category, where the category is ``runtime`` or ``driver``).
    The host's synchronising calls (kind ``sync`` off the device streams: cudaDeviceSynchronize,
    aclrtSynchronizeStream, ...) are API calls too, counted as ``runtime``; device-side sync tasks are not."""
    calls = computed(op_instances, tables, kinds=(*API_KINDS, "sync"))
    calls = calls.filter(pc.not_equal(calls["category"], "device"))
    category = pc.if_else(pc.equal(calls["category"], "sync"), "runtime", calls["category"])
    calls = calls.set_column(calls.schema.get_field_index("category"), "category", category)
    return duration_statistics(calls, ["rank", "category", *by])


def task_time(tables: RunTables) -> pa.Table:
    """The tasks the device's streams ran (schema ``TASK_TIME``), as msprof's task_time lists them: the device
    tasks and the streams' synchronisation tasks (Ascend's EVENT_RECORD / EVENT_WAIT, CUDA's stream waits):
    name, task type, rank, device, stream track, start, duration, step; in start order."""
    instances = computed(op_instances, tables, kinds=(*DEVICE_TASK_KINDS, "sync"))
    device = instances.filter(pc.equal(instances["category"], "device"))
    return device.select(TASK_TIME.names).cast(TASK_TIME)


TYPE_SHARES = pa.schema([
    ("rank", pa.int32()),
    ("category", pa.string()),
    ("op_type", pa.string()),
    ("types", pa.int64()),
    ("count", pa.int64()),
    ("self_ns", pa.int64()),
    ("total_ns", pa.int64()),
    ("share_percent", pa.float64()),
])

_TYPE_SHARES_SQL = """
WITH per_type AS (
    SELECT rank, category, op_type, count(*) AS count, sum(self_ns) AS self_ns, sum(dur_ns) AS total_ns
    FROM instances GROUP BY ALL
), ranked AS (
    SELECT *, row_number() OVER (PARTITION BY rank, category ORDER BY self_ns DESC, op_type) <= $top AS kept,
           sum(self_ns) OVER (PARTITION BY rank, category) AS category_ns
    FROM per_type
)
SELECT rank, category, CASE WHEN kept THEN op_type END AS op_type, count(*) AS types, sum(count) AS count,
       sum(self_ns) AS self_ns, sum(total_ns) AS total_ns,
       100.0 * sum(self_ns) / nullif(any_value(category_ns), 0) AS share_percent
FROM ranked GROUP BY rank, category, kept, CASE WHEN kept THEN op_type END
ORDER BY rank, category, NOT kept, self_ns DESC, op_type
"""


def type_shares(instances: pa.Table, *, top: int = 20) -> pa.Table:
    """The shares of time of the operator types of an ``op_instances`` table, for a pie of the ``top``
    types (MindSpore's "统计前20个占比时间最长的算子类别") (schema ``TYPE_SHARES``): per rank and category, the
    ``top`` op types with the longest self time (largest first), then one row with a null ``op_type`` for
    all the others together (absent when there are none); ``types`` is the number of op types a row
    covers, ``count`` their executions, ``self_ns`` and ``total_ns`` their summed self and total time and
    ``share_percent`` their self time in percent of the category's. Self time, because host operators
    nest: their self times add up without counting nested time twice (device tasks: self = total)."""

    if top < 1:
        raise ValueError(f"top must be >= 1, got {top}")
    con = new_connection()
    con.register("instances", instances)
    return con.sql(_TYPE_SHARES_SQL, params={"top": top}).to_arrow_table().cast(TYPE_SHARES)


def _contains_pattern(term: str) -> str:
    """An ILIKE pattern (escape character ``\\``) matching text that contains ``term``."""
    return "%" + "".join(f"\\{ch}" if ch in "%_\\" else ch for ch in term) + "%"


def instance_page(table: pa.Table, *, where: dict | None = None, search: str | None = None,
                  sort: str = "dur_ns", descending: bool = True, offset: int = 0,
                  limit: int = 50) -> tuple[pa.Table, int]:
    """One page of a table of executions (``op_instances``, ``op_instance_time_by_step``, any table with
    the columns named) and the number of rows matching, for a paged, sortable, searchable table view:

    * ``where``: ``{column: value}`` keeps the rows whose column equals the value (a list: is one of its
      values; None: is null);
    * ``search``: a fuzzy match on the ``name`` and ``op_type`` columns present, as MindSpore's operator
      search ("支持对算子名称/类别进行模糊搜索"): every whitespace-separated term must occur in one of them,
      ignoring case, in any order (``GEMM volta`` finds ``volta_sgemm_128x64_nn``);
    * the rows are sorted by ``sort`` (nulls last), then by ``id`` (else ``slice_id``) when the table has
      one, and the page is ``limit`` rows from ``offset``.

    Returns ``(page, total)``; ``page`` has the table's schema. Unknown columns raise ValueError."""

    columns = table.schema.names
    unknown = [c for c in [*(where or {}), sort] if c not in columns]
    if unknown:
        raise ValueError(f"no column {unknown[0]!r}; the columns are {', '.join(columns)}")
    conditions, params = [], {}
    for i, (column, value) in enumerate((where or {}).items()):
        if value is None:
            conditions.append(f'"{column}" IS NULL')
        else:
            conditions.append(f'list_contains($w{i}, "{column}")' if isinstance(value, list) else f'"{column}" = $w{i}')
            params[f"w{i}"] = value
    searched = [c for c in ("name", "op_type") if c in columns]
    for i, term in enumerate((search or "").split() if searched else []):
        params[f"s{i}"] = _contains_pattern(term)
        conditions.append("(" + " OR ".join(f"\"{c}\" ILIKE $s{i} ESCAPE '\\'" for c in searched) + ")")
    condition = " AND ".join(conditions) or "true"
    order = f'"{sort}" {"DESC" if descending else "ASC"} NULLS LAST'
    key = next((c for c in ("id", "slice_id") if c in columns), None)
    if key is not None and sort != key:
        order += f', "{key}"'
    con = new_connection()
    con.register("t", table)
    total = con.sql(f"SELECT count(*) FROM t WHERE {condition}", params=params or None).fetchall()[0][0]
    page = con.sql(f"SELECT * FROM t WHERE {condition} ORDER BY {order} LIMIT {int(limit)} OFFSET {int(offset)}",
                   params=params or None).to_arrow_table()
    return page.cast(table.schema), int(total)


CALL_STACK = pa.schema([
    ("level", pa.int64()),
    ("id", pa.int64()),
    ("kind", pa.string()),
    ("name", pa.string()),
    ("track", pa.string()),
    ("start_ns", pa.int64()),
    ("dur_ns", pa.int64()),
])

_CALL_STACK_SQL = """
WITH RECURSIVE target AS (
    SELECT s.id, s.correlation_id, coalesce(t.rank, 0) AS rank, t.kind AS track_kind
    FROM slices s JOIN tracks t USING (track_id) WHERE s.id = $id
), launcher AS (      -- a device task's launch: the runtime (else driver) call of its rank and correlation id
    SELECT s.id FROM slices s JOIN tracks t USING (track_id) JOIN target g ON s.correlation_id = g.correlation_id
    WHERE g.track_kind = 'stream' AND t.kind = 'thread' AND coalesce(t.rank, 0) = g.rank
      AND s.kind IN ('runtime', 'driver')
    ORDER BY s.kind = 'runtime' DESC, s.id LIMIT 1
), chain(id, up) AS (
    SELECT id, 0 FROM (SELECT id FROM launcher UNION ALL
                       SELECT id FROM target WHERE NOT EXISTS (SELECT 1 FROM launcher))
    UNION ALL
    SELECT s.parent_id, c.up + 1 FROM chain c JOIN slices s ON s.id = c.id WHERE s.parent_id IS NOT NULL
), frames AS (
    SELECT id, up FROM chain
    UNION ALL
    SELECT id, -1 FROM target WHERE EXISTS (SELECT 1 FROM launcher)
)
SELECT row_number() OVER (ORDER BY f.up DESC) - 1 AS level, s.id, s.kind, s.name, t.name AS track,
       s.start_ns, s.dur_ns
FROM frames f JOIN slices s ON s.id = f.id JOIN tracks t USING (track_id)
ORDER BY level
"""


def call_stack(tables: RunTables, slice_id: int) -> pa.Table:
    """The call stack of one slice (schema ``CALL_STACK``), outermost first (``level`` 0): the slices
    enclosing it on its track (``parent_id`` chain: Python functions and modules recorded with
    ``with_stack``, user annotations, enclosing operators, the step), then the slice itself. For a device
    task, the chain is that of the host runtime call that launched it (same rank and ``correlation_id``;
    a runtime call preferred over a driver call), followed by the task. Empty for an unknown id."""
    table = tables.sql(_CALL_STACK_SQL, params={"id": int(slice_id)}).to_arrow_table()
    return table.cast(CALL_STACK)
