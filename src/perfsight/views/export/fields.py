"""The msprof fields of an exported row that its slice holds but the analyses do not return.

op_summary, task_time and msprof_tx rows are slices (their ``id``); msprof's Task ID, Stream ID, Model ID,
OP State, Block Dim, HF32 Eligible and the formats and outputs are read from the slice's ``args``, where
the Ascend readers keep them (under their canonical names or the torch_npu .db names), with the CUDA/HIP
equivalent where there is one (the runtime correlation id, the kernel's stream or its stream track's
number, the blocks of its grid)
and ``N/A`` where the field has no meaning off Ascend. Also each row's end time and msproftx event type.
"""
from __future__ import annotations

import pyarrow as pa

from perfsight.core.tables import RunTables
from perfsight.views.export.catalog import NA

_GRID_BLOCKS = ("CAST(json_extract(a, '$.grid[0]') AS BIGINT) * coalesce(CAST(json_extract(a, '$.grid[1]') "
                "AS BIGINT), 1) * coalesce(CAST(json_extract(a, '$.grid[2]') AS BIGINT), 1)")

#: field -> (the args keys that hold it, first found wins; the SQL of its value when none does)
ARGS_FIELDS: dict[str, tuple[tuple[str, ...], str]] = {
    "task_id": (("task_id", "Task Id"), "CAST(s.correlation_id AS VARCHAR)"),
    "stream_id": (("stream_id", "Stream Id", "stream"),
                  r"CASE WHEN s.track_kind = 'stream' THEN nullif(regexp_extract(s.tid, '(\d+)$', 1), '') END"),
    "model_id": (("model_id", "Model Id"), f"'{NA}'"),
    "op_state": (("op_state",), f"'{NA}'"),
    "block_dim": (("block_dim", "Block Dim"), f"CAST({_GRID_BLOCKS} AS VARCHAR)"),
    "hf32_eligible": (("HF32 Eligible",), f"'{NA}'"),
    "input_formats": (("input_formats", "Input Formats"), f"'{NA}'"),
    "output_shapes": (("output_shapes", "Output Shapes"), f"'{NA}'"),
    "output_dtypes": (("output_dtypes", "Output Data Types"), f"'{NA}'"),
    "output_formats": (("output_formats", "Output Formats"), f"'{NA}'"),
}


def with_msprof_fields(tables: RunTables, rows: pa.Table) -> pa.Table:
    """``rows`` (one per slice: ``id``, ``start_ns``, ``dur_ns``) with the ``ARGS_FIELDS`` as text, ``end_ns``
    and ``event_type`` (msproftx's: ``marker`` for a zero-length slice, else ``push/pop``)."""
    fields = ",\n".join(
        f"coalesce({', '.join(_extracted(key) for key in keys)}, {fallback}) AS {name}"
        for name, (keys, fallback) in ARGS_FIELDS.items())
    con = tables.connect()
    con.register("exported_rows", rows)
    return con.sql(f"""
        SELECT r.*, {fields},
               r.start_ns + r.dur_ns AS end_ns,
               CASE WHEN r.dur_ns = 0 THEN 'marker' ELSE 'push/pop' END AS event_type
        FROM exported_rows r
        LEFT JOIN (SELECT id, correlation_id, CASE WHEN json_valid(args) THEN args END AS a, t.kind AS track_kind,
                          t.tid
                   FROM slices JOIN tracks t USING (track_id)) s USING (id)
        ORDER BY r.start_ns, r.id
    """).to_arrow_table()


def _extracted(key: str) -> str:
    """SQL of the text of args key ``key`` (its JSON path step quoted unless a plain identifier)."""
    step = key if key.isidentifier() else '"' + key.replace('"', '\\"') + '"'
    return f"json_extract_string(a, '$.{step}')"
