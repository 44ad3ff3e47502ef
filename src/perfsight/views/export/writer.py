"""Writing analysis tables as msprof summary files: the one CSV/JSON writer every summary file uses.

Values are converted in DuckDB (no Python object per row) as each column's catalog entry says: ns
durations and times become microseconds with exactly three decimals ("Task Duration(us)"), computed in
DECIMAL arithmetic from the int64 ns so no float error creeps in; variances in ns² become us²; ratios get
three decimals; JSON-text columns are embedded as JSON in the JSON format; JSON lists of shapes or dtypes
are written as msprof writes them (``[[4, 1025], [4, 1025]]`` -> ``4,1025;4,1025``); device names become
msprof's Device_id (``cuda:0`` -> ``0``, host rows ``host``); a constant column is its value on every row.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from perfsight.core.tables import new_connection
from perfsight.views.export.catalog import HOST, Column


def us_sql(ns_expr: str) -> str:
    """SQL for int64 ns -> exact microseconds, DECIMAL with 3 decimals (1000000001 -> 1000000.001)."""
    return f"(CAST({ns_expr} AS DECIMAL(38,0)) * CAST(0.001 AS DECIMAL(4,3)))"


#: a JSON list of shapes or dtypes as msprof writes it: elements joined by ';', a shape's dims by ','
_MSPROF_LIST_SQL = r"""CASE WHEN json_valid({x}) AND json_type({x}) = 'ARRAY' THEN array_to_string(list_transform(
    json_extract({x}, '$[*]'), lambda e: CASE json_type(e) WHEN 'ARRAY' THEN regexp_replace(CAST(e AS VARCHAR),
    '[\[\]" ]', '', 'g') WHEN 'VARCHAR' THEN json_extract_string(e, '$') WHEN 'NULL' THEN '' ELSE CAST(e AS VARCHAR)
    END), ';') ELSE {x} END"""


def _column_sql(column: Column) -> str:
    if column.constant is not None:
        value = column.constant if column.constant.isdigit() else "'" + column.constant.replace("'", "''") + "'"
        return f'{value} AS "{column.header}"'
    source = f'"{column.source}"'
    converted = {
        "us": us_sql(source),
        "us2": f"CAST(round({source} / 1e6, 3) AS DECIMAL(38,3))",
        "%": f"CAST(round({source}, 3) AS DECIMAL(10,3))",
        "json": f"try_cast({source} AS JSON)",
        "list": _MSPROF_LIST_SQL.format(x=source),
        "device_id": f"CASE WHEN {source} LIKE '%:%' THEN split_part({source}, ':', 2) ELSE '{HOST}' END",
    }.get(column.unit, source)
    return f'{converted} AS "{column.header}"'


def write_rows(table: pa.Table, columns: tuple[Column, ...], path: Path, fmt: str) -> Path:
    """Write ``table``'s ``columns`` (renamed to their headers) to ``path``: CSV with a header row, or a
    JSON array with one object per row."""
    options = "HEADER, DELIMITER ','" if fmt == "csv" else "FORMAT JSON, ARRAY true"
    options += ", USE_TMP_FILE false"    # the caller's path is already a temp file (output.Staging)
    con = new_connection()
    con.register("result", table)
    select_list = ", ".join(_column_sql(c) for c in columns)
    target = str(path).replace("'", "''")
    con.execute(f"COPY (SELECT {select_list} FROM result) TO '{target}' ({options})")
    return path
