"""Reading the terminal reports back in tests: the rows of a compact rich table, split into cells."""
from __future__ import annotations

import re


def cells(lines: list[str], title: str) -> list[list[str]]:
    """The rows of the compact table under ``title`` (after its header rule), split into cells."""
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rule = next(i for i in range(start, len(lines)) if lines[i].lstrip().startswith("─"))
    rows = []
    for line in lines[rule + 1:]:
        if not line.strip():
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows
