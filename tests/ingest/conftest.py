"""Helpers for the Kineto reader tests: writing small planted traces with exact number texts."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

_NUMBER = re.compile(r'"\\u0000number:([^"]*)"')


def number(text: str) -> str:
    """A JSON number written verbatim (``number("1736413971558972.912")``), beyond float64 precision."""
    return f"\0number:{text}"


def trace_text(events: list[dict], **header) -> str:
    """A Kineto-style trace: ``header`` keys, then ``traceEvents``; a top-level list if no header."""
    document = {**header, "traceEvents": events} if header else events
    return _NUMBER.sub(r"\1", json.dumps(document))


@pytest.fixture
def write_trace(tmp_path: Path):
    """write_trace(events, name=..., **header) -> path; a name ending in .gz is gzipped."""

    def write(events: list[dict], name: str = "planted.pt.trace.json", **header) -> Path:
        path = tmp_path / name
        text = trace_text(events, **({"schemaVersion": 1} | header)).encode()
        path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
        return path

    return write
