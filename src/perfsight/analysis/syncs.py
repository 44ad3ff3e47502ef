"""Where the host waits for the device: every synchronisation, what asked for it, and the gap it leaves.

A synchronisation is a host-side call that returns only once the device has done its queued work:

* ``synchronize``: a stream, event or device synchronise call (a ``sync`` slice on a host thread, or a runtime
  or driver call named ``...Synchronize``);
* ``blocking copy``: a synchronous copy call (``cudaMemcpy``, ``hipMemcpy``, ``...Memcpy2D/3D``), or an
  asynchronous one whose copy moves to or from pageable memory (its device task is ``Memcpy DtoH (Device ->
  Pageable)`` and the like: the host is blocked until it is done), what ``.item()``, ``.cpu()`` and
  ``.tolist()`` do.

For each: the call, its ``host_op`` (the innermost framework operator enclosing it, following the slices'
nesting: ``aten::item``, ``aten::_local_scalar_dense``, ``aten::to``; null when none encloses it), the time the
host was blocked in it (its duration) and ``device_idle_after_ns``: from the call's end to the next device
task of the rank (any stream), the gap the device sat idle while the host caught up (null when no task
follows). The advisor's synchronisation rule reads these (``advisor._excessive_sync``)."""
from __future__ import annotations

import pyarrow as pa

from perfsight.analysis.ops import DEVICE_TASK_KINDS_SQL, LAUNCHING_OP_KINDS, innermost_operator_sql
from perfsight.core.tables import RunTables

SYNCHRONIZE, BLOCKING_COPY = "synchronize", "blocking copy"

SYNCHRONISATIONS = pa.schema([
    ("rank", pa.int32()),
    ("slice_id", pa.int64()),
    ("sync_kind", pa.string()),
    ("call", pa.string()),
    ("host_op", pa.string()),
    ("start_ns", pa.int64()),
    ("dur_ns", pa.int64()),
    ("device_idle_after_ns", pa.int64()),
    ("step", pa.int32()),
])

#: synchronous copy calls (their name whole, any case)
BLOCKING_COPY_CALLS = r"^(cuda|hip)memcpy(2d|3d)?$"

_SYNCHRONISATIONS_SQL = f"""
WITH RECURSIVE host AS (
    SELECT s.*, coalesce(t.rank, 0) AS rank FROM slices s JOIN tracks t USING (track_id) WHERE t.kind <> 'stream'
), pageable AS (      -- the launch calls of copies to or from pageable memory
    SELECT DISTINCT coalesce(t.rank, 0) AS rank, s.correlation_id FROM slices s JOIN tracks t USING (track_id)
    WHERE t.kind = 'stream' AND s.kind = 'memcpy' AND s.name ILIKE '%pageable%' AND s.correlation_id IS NOT NULL
), calls AS (
    SELECT h.id, h.rank, h.name, h.start_ns, h.dur_ns, h.step,
           CASE WHEN h.kind = 'sync' OR h.name ILIKE '%synchronize%' THEN '{SYNCHRONIZE}'
                ELSE '{BLOCKING_COPY}' END AS sync_kind
    FROM host h LEFT JOIN pageable p ON p.rank = h.rank AND p.correlation_id = h.correlation_id
    WHERE h.kind = 'sync'
       OR (h.kind IN ('runtime', 'driver') AND (h.name ILIKE '%synchronize%'
                                                OR regexp_matches(lower(h.name), $blocking_copies)
                                                OR p.correlation_id IS NOT NULL))
), {innermost_operator_sql("SELECT id AS seed_id, id FROM calls")}, host_op AS (
    SELECT o.seed_id AS call_id, s.name AS host_op FROM innermost_operator o JOIN slices s USING (id)
), tasks AS (
    SELECT coalesce(t.rank, 0) AS rank, s.start_ns FROM slices s JOIN tracks t USING (track_id)
    WHERE t.kind = 'stream' AND s.kind IN ({DEVICE_TASK_KINDS_SQL})
)
SELECT c.rank, c.id AS slice_id, c.sync_kind, c.name AS call, o.host_op, c.start_ns, c.dur_ns,
       (SELECT min(k.start_ns) FROM tasks k WHERE k.rank = c.rank AND k.start_ns >= c.start_ns + c.dur_ns)
           - (c.start_ns + c.dur_ns) AS device_idle_after_ns,
       c.step
FROM calls c LEFT JOIN host_op o ON o.call_id = c.id
ORDER BY c.rank, c.start_ns, c.id
"""


def synchronisations(tables: RunTables) -> pa.Table:
    """One row per synchronisation (module docstring; schema ``SYNCHRONISATIONS``), in start order."""
    params = {"blocking_copies": BLOCKING_COPY_CALLS, "operator_kinds": list(LAUNCHING_OP_KINDS)}
    return tables.sql(_SYNCHRONISATIONS_SQL, params=params).to_arrow_table().cast(SYNCHRONISATIONS)
