"""Framework operators with their host time, the device time of the tasks they launched, and their Python
call stack: torch_npu's operator_details.csv (the E2E profiler's pytorch_operator_view.csv).

One row per framework operator execution (``ops.op_instances`` of kind ``cpu_op``, in start order): host
total and self time as op_instances has them; device self time = the summed duration of the device tasks
whose ``launch_op_id`` is this operator; device total time = the same for the tasks launched by it or by
any operator nested in it (on its track); the call stack = the Python functions (kind ``python``: with_stack,
TORCH_CALL_STACK) enclosing it on its track, innermost first, joined by ``;\\n`` as torch_npu joins them.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from perfsight.analysis.ops import op_instances
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables

OPERATOR_DETAILS = pa.schema([
    ("id", pa.int64()),
    ("name", pa.string()),
    ("input_shapes", pa.string()),
    ("input_dtypes", pa.string()),
    ("call_stack", pa.string()),
    ("host_self_ns", pa.int64()),
    ("host_total_ns", pa.int64()),
    ("device_self_ns", pa.int64()),
    ("device_total_ns", pa.int64()),
    ("start_ns", pa.int64()),
    ("rank", pa.int32()),
    ("track", pa.string()),
    ("step", pa.int32()),
])

#: how the frames of a call stack are joined (torch_npu's operator_details.csv)
STACK_SEPARATOR = ";\n"

def enclosing_sql(seeds: str) -> str:
    """A common table expression of a ``WITH RECURSIVE`` query, ``up(launcher, id, hops)``: each ``id`` of the
    table ``seeds`` (as ``launcher``) and every slice enclosing it on its track (``hops`` levels up, at most
    ``$max_depth``): what an operator's device tasks are summed or judged over, its own and its nested
    operators'."""
    return f"""up(launcher, id, hops) AS (
    SELECT id, id, 0 FROM {seeds}
    UNION ALL
    SELECT u.launcher, s.parent_id, u.hops + 1 FROM up u JOIN slices s ON s.id = u.id
    WHERE s.parent_id IS NOT NULL AND u.hops < $max_depth
)"""


_DEVICE_TIME_SQL = """
WITH RECURSIVE launched AS (      -- device time per launching operator
    SELECT launch_op_id AS id, sum(dur_ns) AS device_ns FROM tasks WHERE launch_op_id IS NOT NULL GROUP BY 1
), {enclosing}, device_total AS (
    SELECT u.id, sum(l.device_ns) AS device_ns FROM up u JOIN launched l ON l.id = u.launcher GROUP BY u.id
)
SELECT d.id, coalesce(l.device_ns, 0) AS device_self_ns, d.device_ns AS device_total_ns
FROM device_total d LEFT JOIN launched l USING (id) ORDER BY d.id
""".replace("{enclosing}", enclosing_sql("launched"))

_DETAILS_SQL = """
WITH RECURSIVE frames(op, id, hops) AS (      -- each operator and every slice enclosing it (when there are stacks)
    SELECT id, id, 0 FROM ops WHERE EXISTS (SELECT 1 FROM slices WHERE kind = 'python')
    UNION ALL
    SELECT f.op, s.parent_id, f.hops + 1 FROM frames f JOIN slices s ON s.id = f.id
    WHERE s.parent_id IS NOT NULL AND f.hops < $max_depth
), stacks AS (
    SELECT f.op AS id, string_agg(s.name, $separator ORDER BY f.hops) AS call_stack
    FROM frames f JOIN slices s ON s.id = f.id WHERE f.hops > 0 AND s.kind = 'python' GROUP BY f.op
)
SELECT o.id, o.name, o.input_shapes, o.input_dtypes, st.call_stack, o.self_ns AS host_self_ns,
       o.dur_ns AS host_total_ns, coalesce(d.device_self_ns, 0) AS device_self_ns,
       coalesce(d.device_total_ns, 0) AS device_total_ns, o.start_ns, o.rank, o.track, o.step
FROM ops o
LEFT JOIN device_time d USING (id)
LEFT JOIN stacks st USING (id)
ORDER BY o.start_ns, o.id
"""

#: the deepest nesting followed upwards (slices.depth is an int16; real stacks are far shallower)
MAX_DEPTH = 1 << 15


OPERATOR_DEVICE_TIME = pa.schema([("id", pa.int64()), ("device_self_ns", pa.int64()),
                                  ("device_total_ns", pa.int64())])


def operator_device_time(tables: RunTables) -> pa.Table:
    """The device time of every slice that launched device tasks or encloses one that did (schema
    ``OPERATOR_DEVICE_TIME``): ``device_self_ns``, of the tasks whose ``launch_op_id`` is the slice (0 when
    none), and ``device_total_ns``, of those launched by it or by any slice nested in it (module docstring).
    The device tasks are ``op_instances``' default executions of category ``device``."""
    tasks = computed(op_instances, tables)
    con = tables.connect()
    con.register("tasks", tasks.filter(pc.equal(tasks["category"], "device")).select(["launch_op_id", "dur_ns"]))
    return con.sql(_DEVICE_TIME_SQL, params={"max_depth": MAX_DEPTH}).to_arrow_table().cast(OPERATOR_DEVICE_TIME)


def operator_details(tables: RunTables) -> pa.Table:
    """One row per framework operator execution (schema ``OPERATOR_DETAILS``; module docstring)."""
    con = tables.connect()
    con.register("ops", computed(op_instances, tables, kinds=("cpu_op",)))
    con.register("device_time", computed(operator_device_time, tables))
    params = {"max_depth": MAX_DEPTH, "separator": STACK_SEPARATOR}
    return con.sql(_DETAILS_SQL, params=params).to_arrow_table().cast(OPERATOR_DETAILS)
