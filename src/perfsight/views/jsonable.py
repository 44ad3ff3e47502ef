"""JSON rendering of analysis results: Arrow tables become lists of row objects; NaN becomes null; columns
that hold JSON text (the advice's evidence) can be nested as JSON values."""
from __future__ import annotations

import math

import orjson
import pyarrow as pa


def plain(value):
    """``value`` with Arrow tables as row lists and non-finite floats as None, ready for any JSON encoder."""
    if isinstance(value, pa.Table):
        return [plain(row) for row in value.to_pylist()]
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps(results: dict, *, indent: bool = True) -> str:
    option = orjson.OPT_INDENT_2 if indent else 0
    return orjson.dumps(plain(results), default=str, option=option).decode()


def with_json_columns(table: pa.Table, columns: list[str]) -> list[dict]:
    """``table``'s rows with the JSON text of ``columns`` decoded, so it nests as JSON, not as a string."""
    rows = table.to_pylist()
    for row in rows:
        for column in columns:
            if row[column] is not None:
                row[column] = orjson.loads(row[column])
    return rows
