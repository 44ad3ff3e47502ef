"""Dynamic shape per step (MindSpore Insight's 动态shape迭代分析): operator time per step by type and by
instance, and the input shapes each operator type saw in each step.

Insight shows "训练各迭代中各算子耗时的波动情况以及算子在不同的迭代中的shape信息": per operator type the
average time per step ("这里展示的耗时是不同算子类型执行的平均耗时"), per operator instance its time per step,
and an instance's shapes at a step. perfsight reads the executions of ``ops.op_instances`` (device tasks
when the run has any, else ``cpu_op`` slices; ``kinds`` picks explicitly), keeping those with a step:

* ``op_time_by_step``: per rank, step and op type: count, total, average, min and max duration (ns).
* ``op_instance_time_by_step``: an *instance* is the k-th execution (0-based, in start order) of an op
  type within a step and rank, so ``aten::addmm#1`` is the same call site in every step of a static
  loop; its duration and input shapes per step.
* ``op_shapes_by_step``: per rank, op type and step, the sorted distinct ``input_shapes`` (JSON text;
  executions without recorded shapes are left out) and ``dynamic``: whether the op type's shape set is
  not the same in every step it ran in with shapes.
"""
from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from perfsight.analysis.ops import op_instances
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables, new_connection

OP_TIME_BY_STEP = pa.schema([
    ("rank", pa.int32()),
    ("step", pa.int32()),
    ("op_type", pa.string()),
    ("count", pa.int64()),
    ("total_ns", pa.int64()),
    ("avg_ns", pa.int64()),
    ("min_ns", pa.int64()),
    ("max_ns", pa.int64()),
])

OP_INSTANCE_TIME_BY_STEP = pa.schema([
    ("rank", pa.int32()),
    ("step", pa.int32()),
    ("op_type", pa.string()),
    ("instance", pa.int64()),
    ("instance_name", pa.string()),
    ("id", pa.int64()),
    ("start_ns", pa.int64()),
    ("dur_ns", pa.int64()),
    ("input_shapes", pa.string()),
])

OP_SHAPES_BY_STEP = pa.schema([
    ("rank", pa.int32()),
    ("op_type", pa.string()),
    ("step", pa.int32()),
    ("shapes", pa.list_(pa.string())),
    ("shape_count", pa.int64()),
    ("dynamic", pa.bool_()),
])


def _query(tables: RunTables, kinds: Sequence[str] | None, sql: str) -> pa.Table:
    con = new_connection()
    con.register("i", computed(op_instances, tables, kinds=kinds))
    return con.sql(sql).to_arrow_table()


def op_time_by_step(tables: RunTables, *, kinds: Sequence[str] | None = None) -> pa.Table:
    """Per rank, step and op type (schema ``OP_TIME_BY_STEP``): count, total_ns, avg_ns (rounded),
    min_ns, max_ns of the executions in that step."""
    sql = """
        SELECT rank, step, op_type, count(*) AS count, sum(dur_ns)::BIGINT AS total_ns,
               round(avg(dur_ns))::BIGINT AS avg_ns, min(dur_ns) AS min_ns, max(dur_ns) AS max_ns
        FROM i WHERE step IS NOT NULL GROUP BY ALL ORDER BY rank, op_type, step
    """
    return _query(tables, kinds, sql).cast(OP_TIME_BY_STEP)


def op_instance_time_by_step(tables: RunTables, *, kinds: Sequence[str] | None = None) -> pa.Table:
    """One row per execution with a step (schema ``OP_INSTANCE_TIME_BY_STEP``): its ``instance`` ordinal
    within (rank, step, op type), ``instance_name`` = ``<op_type>#<instance>``, slice id, start, duration
    and input shapes. Ordered by rank, op type, instance, step, so one instance's steps are adjacent."""
    sql = """
        WITH numbered AS (
            SELECT *, row_number() OVER (PARTITION BY rank, step, op_type ORDER BY start_ns, id) - 1 AS instance
            FROM i WHERE step IS NOT NULL
        )
        SELECT rank, step, op_type, instance, op_type || '#' || instance AS instance_name, id, start_ns, dur_ns,
               input_shapes
        FROM numbered ORDER BY rank, op_type, instance, step
    """
    return _query(tables, kinds, sql).cast(OP_INSTANCE_TIME_BY_STEP)


def op_shapes_by_step(tables: RunTables, *, kinds: Sequence[str] | None = None) -> pa.Table:
    """Per rank, op type and step (schema ``OP_SHAPES_BY_STEP``): the sorted distinct input shapes,
    their count, and ``dynamic`` (the same for every step of the op type: True when its shape sets differ
    between steps). Dynamic op types first, then by op type and step."""
    sql = """
        WITH per_step AS (
            SELECT rank, op_type, step, list_sort(list(DISTINCT input_shapes)) AS shapes
            FROM i WHERE step IS NOT NULL AND input_shapes IS NOT NULL GROUP BY ALL
        ), flagged AS (
            SELECT *, count(DISTINCT shapes) OVER (PARTITION BY rank, op_type) > 1 AS dynamic FROM per_step
        )
        SELECT rank, op_type, step, shapes, len(shapes) AS shape_count, dynamic
        FROM flagged ORDER BY rank, dynamic DESC, op_type, step
    """
    return _query(tables, kinds, sql).cast(OP_SHAPES_BY_STEP)
