"""The links between the slices of a torch_npu profiler database: steps, correlation and external ids,
flows.

torch_npu links everything through connection ids. A CANN_API row and the device work it launched share
one (TASK / COMMUNICATION_OP ``connectionId``); a PYTORCH_API row instead names a key of CONNECTION_IDS,
which lists the connection ids it takes part in: the device work its operator caused (the trace's
``async_npu`` flows), the Enqueue -> Dequeue pair of its task-queue entry (``async_task_queue``), and the
forward -> backward pair of an autograd operator (``fwdbwd``). From these:

* ``correlation_id`` = the connection id, on runtime calls and on device slices (Kineto's
  ``correlation``: a device slice's launching call is the runtime call with the same correlation);
* ``external_id`` = the CONNECTION_IDS key of the framework operator, on the operator itself and on the
  runtime calls and device slices of its connection ids (the innermost operator, when several list one);
* flows: ``launch`` (runtime call -> each device slice of its connection id, HCCL plane steps excepted:
  their operator has the flow), ``fwdbwd`` (the earlier operator of a shared connection id -> the later
  ones), ``other`` (Enqueue -> Dequeue);
* ``step``: host slices by time inside a ``ProfilerStep#N`` of their process; device slices by the step
  of the runtime call that launched them, else by that of their framework operator.
"""
from __future__ import annotations

import duckdb
import pyarrow as pa

from perfsight.core.tables import conform, flows_table

_LINKS_SQL = """
WITH step_spans AS (
    SELECT pid, name_step AS step, start_ns, end_ns FROM src
    WHERE side <> 'device' AND kind = 'step' AND name_step IS NOT NULL
), host_steps AS (
    SELECT s.id, arg_max(p.step, p.start_ns) AS step
    FROM src s JOIN step_spans p ON p.pid = s.pid AND s.start_ns >= p.start_ns AND s.start_ns < p.end_ns
    WHERE s.side <> 'device' GROUP BY s.id
), ops AS (
    SELECT s.id, s.connection_id AS key, s.depth, h.step
    FROM src s LEFT JOIN host_steps h USING (id)
    WHERE s.api = 'op' AND s.connection_id IS NOT NULL
), owners AS (
    SELECT c.connectionId AS connection, arg_max(o.key, o.depth) AS external_id, arg_max(o.step, o.depth) AS step
    FROM ops o JOIN connections c ON c.id = o.key GROUP BY c.connectionId
), launchers AS (
    SELECT s.connection_id AS connection, min(s.id) AS id, arg_min(h.step, s.id) AS step
    FROM src s LEFT JOIN host_steps h USING (id)
    WHERE s.side = 'cann' AND s.connection_id IS NOT NULL GROUP BY s.connection_id
)
SELECT s.id,
       CASE WHEN s.side = 'device' THEN coalesce(l.step, w.step) ELSE h.step END AS step,
       CASE WHEN s.side <> 'pytorch' THEN s.connection_id END AS correlation_id,
       CASE WHEN s.side = 'pytorch' THEN o.key ELSE w.external_id END AS external_id,
       CASE WHEN s.side = 'device' AND s.plane IS NULL THEN l.id END AS launcher
FROM src s
LEFT JOIN host_steps h USING (id)
LEFT JOIN ops o USING (id)
LEFT JOIN owners w ON s.side <> 'pytorch' AND w.connection = s.connection_id
LEFT JOIN launchers l ON s.side = 'device' AND l.connection = s.connection_id
ORDER BY s.id
"""

_PAIRS_SQL = """
WITH shared AS (
    SELECT c.connectionId, list(s.id ORDER BY s.start_ns, s.id) AS ids, bool_and(s.api = 'queue') AS queue
    FROM connections c JOIN src s ON s.side = 'pytorch' AND s.connection_id = c.id
    GROUP BY c.connectionId HAVING count(*) >= 2
)
SELECT ids[1] AS src_id, unnest(ids[2:]) AS dst_id, CASE WHEN queue THEN 'other' ELSE 'fwdbwd' END AS kind
FROM shared ORDER BY src_id, dst_id
"""


def link(con: duckdb.DuckDBPyConnection) -> tuple[pa.Table, pa.Table]:
    """``(columns, flows)`` for the slices registered as ``src`` (one row per slice: ``id``, ``side``
    = ``pytorch`` / ``cann`` / ``device``, ``api`` (PYTORCH_API's type name), ``pid``, ``kind``, ``name_step``,
    ``start_ns``, ``end_ns``, ``depth``, ``connection_id``, ``plane``) and CONNECTION_IDS registered as ``connections``:
    ``columns`` has ``step``, ``correlation_id`` and ``external_id`` per slice in id order; ``flows`` is
    the canonical flows table."""
    columns = con.sql(_LINKS_SQL).to_arrow_table()
    launched = columns.filter(columns["launcher"].is_valid())
    flows = pa.concat_tables([
        flows_table(launched["launcher"], launched["id"], "launch"),
        conform("flows", con.sql(_PAIRS_SQL).to_arrow_table()),
    ])
    return columns.drop_columns(["id", "launcher"]), flows
