"""docs/analyses.md and docs/tables.md agree with the code they describe: every Run analysis is listed with its
module and every listed function exists; every canonical table's columns are documented with their types, in
the schema's order, and nothing else."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from perfsight.core.tables import SCHEMAS
from perfsight.run import Run, _Analysis

DOCS = Path(__file__).resolve().parents[1] / "docs"


def analyses_rows() -> dict[str, tuple[str, str]]:
    """docs/analyses.md's rows: method -> (module, what it returns)."""
    rows = {}
    for line in (DOCS / "analyses.md").read_text(encoding="utf-8").splitlines():
        found = re.match(r"\| `(\w+)` \| (\w+) \| (.*) \|$", line)
        if found:
            assert found.group(1) not in rows, f"{found.group(1)} is listed twice"
            rows[found.group(1)] = (found.group(2), found.group(3).strip())
    return rows


def test_every_run_analysis_is_listed_with_its_module():
    methods = {name: attribute.module for name, attribute in vars(Run).items() if isinstance(attribute, _Analysis)}
    rows = analyses_rows()
    assert {name: rows.get(name, (None,))[0] for name in methods} == methods


def test_every_listed_analysis_exists_and_is_described():
    for name, (module, what) in analyses_rows().items():
        function = getattr(importlib.import_module(f"perfsight.analysis.{module}"), name, None)
        assert callable(function), f"docs/analyses.md lists {module}.{name}, which the code does not have"
        assert function.__doc__ and len(what) > 20, f"{module}.{name}: no docstring or no description"


def documented_columns(table: str) -> list[tuple[str, str]]:
    """The (column, type) rows of the table under docs/tables.md's heading ``## <table>:``, in order; a row
    naming several columns (``start_ns, dur_ns``) gives one pair per column."""
    text = (DOCS / "tables.md").read_text(encoding="utf-8")
    section = re.search(rf"^## {table}:.*?(?=^## |\Z)", text, re.M | re.S)
    assert section, f"docs/tables.md has no section '## {table}:'"
    rows = re.findall(r"^\| ([\w, ]+) \| (\w+) \|", section.group(0), re.M)
    return [(column.strip(), kind) for columns, kind in rows if columns != "column" for column in columns.split(",")]


@pytest.mark.parametrize("table", [name for name in SCHEMAS if name != "meta"])
def test_each_tables_columns_and_types_are_documented_in_order(table):
    assert documented_columns(table) == [(field.name, str(field.type)) for field in SCHEMAS[table]]


def test_meta_is_documented_as_key_and_value():
    assert [field.name for field in SCHEMAS["meta"]] == ["key", "value"]
    assert "## meta: facts of the run (key, value" in (DOCS / "tables.md").read_text(encoding="utf-8")
