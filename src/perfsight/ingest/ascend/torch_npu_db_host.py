"""Host slices of a torch_npu profiler database: PYTORCH_API (framework operators, Python functions,
task-queue ranges, msproftx ranges) and CANN_API (CANN runtime calls), as source columns.

Owns: reading both tables, their kinds, input shapes and dtypes (as canonical JSON lists, through
ascend_csv's converters), call stacks (PYTORCH_CALLCHAINS) and the ``args`` JSON. The assembly into
canonical tables (tracks, ids, nesting, steps, flows) is torch_npu_db.py's.

Kinds: PYTORCH_API ``type`` (ENUM_API_TYPE) 50001 ``op`` is a framework operator, classified by
kineto_kinds as in a Kineto trace (``cpu_op``; ``step`` for ProfilerStep#N, ``dataloader``, ``comm`` for
c10d ranges); 50002 ``queue`` is torch_npu's ``Enqueue`` / ``Dequeue@<op>`` range of its task queue
(``annotation``, as the text reader makes them); 50003 ``trace`` a Python function (``python``); 50004
``mstx`` a user range (``annotation``). A CANN_API row is ``ascend_kinds.api_kind`` of its level
(ENUM_API_TYPE: acl, node, runtime, hccl, model; kept in ``args.level``) and name.

Some torch_npu versions write PYTORCH_API's ``inputShapes`` and ``inputDtypes`` string ids the wrong way
round (the samples do: ``inputShapes`` holds ``ScalarList;\\r\\nScalar``). A row whose shapes text holds
letters and whose dtypes text holds none is read swapped back.
"""
from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.ingest.ascend.ascend_csv import dtypes_json, shapes_json
from perfsight.ingest.ascend.ascend_kinds import api_kind
from perfsight.ingest.ascend.torch_npu_db_source import Database
from perfsight.ingest.common.kinds import classify_columns

INT = pa.int64()
TEXT = pa.string()

#: PYTORCH_API.type -> its name (ENUM_API_TYPE) and the Kineto category whose kinds it takes
API_TYPES = {50001: ("op", "cpu_op"), 50002: ("queue", "user_annotation"), 50003: ("trace", "python_function"),
             50004: ("mstx", "user_annotation")}


def read_host(db: Database, con: duckdb.DuckDBPyConnection) -> pa.Table:
    """The host slices in source order (PYTORCH_API rows, then CANN_API rows), as source columns: ``pid``,
    ``tid`` (from ``globalTid`` = pid << 32 | tid), ``name``, ``api`` (the PYTORCH_API type name; null for
    CANN calls), ``kind``, ``name_step``, ``start_ns``, ``dur_ns``, ``connection_id`` (PYTORCH_API: its key
    into CONNECTION_IDS; CANN_API: its connection id), ``is_runtime``, ``input_shapes``, ``input_dtypes``,
    ``args``. ``con`` has ``strings`` registered."""
    con.register("pytorch", numbered(db.read("PYTORCH_API", {
        "start_ns": ("CAST(startNs AS INTEGER)", INT), "end_ns": ("CAST(endNs AS INTEGER)", INT),
        "global_tid": ("globalTid", INT), "connection_id": ("connectionId", INT), "name": ("name", INT),
        "sequence": ("sequenceNumber", INT), "fwd_thread": ("fwdThreadId", INT),
        "dtypes": ("inputDtypes", INT), "shapes": ("inputShapes", INT), "callchain": ("callchainId", INT),
        "type": ("type", INT)})))
    con.register("callchains", db.read("PYTORCH_CALLCHAINS", {
        "id": ("id", INT), "stack": ("stack", INT), "depth": ("stackDepth", INT)}))
    con.register("cann", numbered(db.read("CANN_API", {
        "start_ns": ("startNs", INT), "end_ns": ("endNs", INT), "type": ("type", INT),
        "global_tid": ("globalTid", INT), "connection_id": ("connectionId", INT), "name": ("name", INT)})))
    con.register("api_levels", enum_table(db, "ENUM_API_TYPE"))
    con.register("api_types", pa.table({"type": list(API_TYPES), "api": [v[0] for v in API_TYPES.values()],
                                        "category": [v[1] for v in API_TYPES.values()]}))
    calls = con.sql("SELECT DISTINCT l.name AS level, n.value AS name FROM cann c LEFT JOIN api_levels l "
                    "ON l.id = c.type LEFT JOIN strings n ON n.id = c.name").fetchall()
    con.register("call_kinds", pa.table({"level": pa.array([c[0] for c in calls], TEXT),
                                         "name": pa.array([c[1] for c in calls], TEXT),
                                         "kind": pa.array([api_kind(*c) for c in calls], TEXT)}))
    table = con.sql(_HOST_SQL).to_arrow_table()
    classified = classify_columns(table["category"], table["name"])
    kind = pc.coalesce(table["call_kind"], classified["kind"])
    return pa.table({
        **{name: table[name] for name in ("pid", "tid", "name", "api", "start_ns", "dur_ns", "connection_id",
                                          "is_runtime")},
        "kind": kind, "name_step": classified["name_step"],
        "input_shapes": shapes_json(table["shapes_text"]), "input_dtypes": dtypes_json(table["dtypes_text"]),
        "args": table["args"],
    })


def numbered(table: pa.Table) -> pa.Table:
    """``table`` with a ``row`` column: its source order, which SQL keeps through joins."""
    return table.append_column("row", pa.array(np.arange(table.num_rows, dtype=np.int64)))


def enum_table(db: Database, table: str) -> pa.Table:
    """An ENUM_* table (id -> name) as Arrow; empty when the database lacks it."""
    rows = db.rows(f'SELECT id, name FROM "{table}"', table)
    return pa.table({"id": pa.array([r[0] for r in rows], INT), "name": pa.array([r[1] for r in rows], TEXT)})


_HOST_SQL = """
WITH stacks AS (
    SELECT c.id, string_agg(s.value, ';\n' ORDER BY c.depth) AS stack
    FROM callchains c JOIN strings s ON s.id = c.stack GROUP BY c.id
), api AS (
    SELECT p.*, n.value AS name_text, ds.value AS declared_dtypes, ss.value AS declared_shapes,
           regexp_matches(coalesce(ss.value, ''), '[A-Za-z]') AND NOT regexp_matches(coalesce(ds.value, ''), '[A-Za-z]')
               AS swapped
    FROM pytorch p
    LEFT JOIN strings n ON n.id = p.name
    LEFT JOIN strings ds ON ds.id = p.dtypes
    LEFT JOIN strings ss ON ss.id = p.shapes
), host AS (
    SELECT 0 AS part, row, global_tid, name_text AS name, t.api, coalesce(t.category, 'cpu_op') AS category,
           NULL AS call_kind, start_ns, end_ns, connection_id, false AS is_runtime,
           CASE WHEN swapped THEN declared_dtypes ELSE declared_shapes END AS shapes_text,
           CASE WHEN swapped THEN declared_shapes ELSE declared_dtypes END AS dtypes_text,
           json_object('Sequence number', sequence, 'Fwd thread id', fwd_thread, 'Call stack', st.stack,
                       'type', t.api) AS args
    FROM api a
    LEFT JOIN api_types t USING (type)
    LEFT JOIN stacks st ON st.id = a.callchain
    UNION ALL
    SELECT 1 AS part, row, global_tid, n.value AS name, NULL AS api, NULL AS category, k.kind AS call_kind,
           start_ns, end_ns, connection_id, true AS is_runtime, NULL AS shapes_text, NULL AS dtypes_text,
           json_object('level', l.name, 'connection_id', connection_id) AS args
    FROM cann c
    LEFT JOIN strings n ON n.id = c.name
    LEFT JOIN api_levels l ON l.id = c.type
    LEFT JOIN call_kinds k ON k.level IS NOT DISTINCT FROM l.name AND k.name IS NOT DISTINCT FROM n.value
)
SELECT global_tid >> 32 AS pid, global_tid & 4294967295 AS tid, coalesce(name, '') AS name, api, category,
       call_kind, start_ns, greatest(end_ns - start_ns, 0) AS dur_ns, connection_id, is_runtime,
       shapes_text, dtypes_text, nullif(json_merge_patch('{}', args), '{}') AS args
FROM host
ORDER BY part, row
"""
