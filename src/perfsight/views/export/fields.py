"""The msprof fields of an exported row that its slice holds but the analyses do not return.

op_summary, task_time and msprof_tx rows are slices (their ``id``); msprof's Task ID, Stream ID, Model ID,
OP State, Block Dim, HF32 Eligible and the formats and outputs are read from the slice's ``args``, where
the Ascend readers keep them (under their canonical names or the torch_npu .db names), with the CUDA/HIP
equivalent where there is one (the runtime correlation id, the kernel's stream or its stream track's
number, the blocks of its grid)
and ``N/A`` where the field has no meaning off Ascend. Also each row's end time and msproftx event type, and
api_statistic's Level and API Name as msprof spells them (``with_msprof_api_names``).
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.tables import RunTables
from perfsight.ingest.ascend.ascend_kinds import API_LEVEL_PREFIXES
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


def with_msprof_api_names(rows: pa.Table) -> pa.Table:
    """``ops.api_statistic`` rows with msprof's Level and API Name where the name carries CANN's level prefix
    (``AscendCL@aclnnMatmul`` -> ``acl``, ``aclnnMatmul``; ``ascend_kinds.API_LEVEL_PREFIXES``); the other rows
    (CUDA, HIP: ``runtime`` / ``driver``) as they are."""
    prefix = pc.list_element(pc.split_pattern(rows["name"], "@", max_splits=1), 0)
    rest = pc.replace_substring_regex(rows["name"], "^[^@]*@", "", max_replacements=1)
    level = pc.fill_null(pc.index_in(prefix, pa.array(list(API_LEVEL_PREFIXES))), -1)
    known = pc.and_(pc.greater_equal(level, 0), pc.match_substring(rows["name"], "@"))
    levels = pa.array(list(API_LEVEL_PREFIXES.values())).take(pc.max_element_wise(level, 0))
    rows = rows.set_column(rows.schema.get_field_index("category"), "category",
                           pc.if_else(known, levels, rows["category"]))
    return rows.set_column(rows.schema.get_field_index("name"), "name", pc.if_else(known, rest, rows["name"]))
