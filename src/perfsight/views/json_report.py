"""JSON rendering of analysis results: Arrow tables become lists of row objects."""
from __future__ import annotations

import json

import pyarrow as pa


def _plain(value):
    if isinstance(value, pa.Table):
        return value.to_pylist()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def dumps(results: dict) -> str:
    return json.dumps(_plain(results), indent=1, default=str)
