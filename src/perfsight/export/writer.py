"""Writing analysis tables as msprof summary files: the one CSV/JSON writer every summary file uses.

Values are converted in DuckDB (no Python object per row): ns durations and times become microseconds
with exactly three decimals ("Task Duration(us)"), computed in DECIMAL arithmetic from the int64 ns so
no float error creeps in; ratios get three decimals; JSON-text columns (shapes, dtypes) are embedded as
JSON in the JSON format.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ..tables import new_connection
from .catalog import Column

FORMATS = ("csv", "json")


def us_sql(ns_expr: str) -> str:
    """SQL for int64 ns -> exact microseconds, DECIMAL with 3 decimals (1000000001 -> 1000000.001)."""
    return f"(CAST({ns_expr} AS DECIMAL(38,0)) * CAST(0.001 AS DECIMAL(4,3)))"


def _column_sql(column: Column) -> str:
    source = f'"{column.source}"'
    converted = {
        "us": us_sql(source),
        "%": f"CAST(round({source}, 3) AS DECIMAL(10,3))",
        "json": f"try_cast({source} AS JSON)",
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
