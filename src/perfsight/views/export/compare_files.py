"""``perfsight compare``'s report (the comparison's tables as rows, for the terminal and ``--json``) and its
CSV files (``-o OUT``): one file per table of ``perfsight.comparison.Comparison``, named in ``FILES``, with
the tables' own columns (``analysis/compare.py`` documents them; times in ns, as the Python API gives them;
a list of names, a family row's members, joined by ``LIST_SEPARATOR``).
A table without rows is not written. The folder follows ``output.Staging``: all files or none, and a file
perfsight did not write there is never replaced.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import csv

from perfsight.comparison import Comparison
from perfsight.views.export.output import staging

#: the comparison's tables (``Comparison`` method names) and the file each is written to
FILES = {"runs": "compare_runs.csv", "steps": "compare_steps.csv", "breakdown": "compare_breakdown.csv",
         "operators": "compare_operators.csv",
         "kernels": "compare_kernels.csv", "modules": "compare_modules.csv",
         "communication": "compare_communication.csv", "memory": "compare_memory.csv", "ranks": "compare_ranks.csv",
         "figures": "compare_figures.csv"}


#: what separates the names of a list in a CSV cell
LIST_SEPARATOR = " | "


def comparison_report(comparison: Comparison, *, fail_if_slower: float | None = None) -> dict:
    """The comparison's tables as row lists by name (``FILES``' keys; ``steps`` its one row), the paths of
    BASE's and NEW's runs and their labels (which rank of a job was taken), a list a side in the order of the
    ``runs`` table, what of each side was not read (``Taken.not_read``), and with ``fail_if_slower`` the gate:
    ``{"percent", "failed"}`` (``Comparison.slower_than``)."""
    report: dict = {}
    for side, runs in (("base", comparison.base_taken), ("new", comparison.new_taken)):
        report[side] = [str(taken.run.path) for taken in runs]
        report[f"{side}_labels"] = [taken.label for taken in runs]
        report[f"{side}_not_read"] = [item for taken in runs for item in taken.not_read]
    for name in FILES:
        report[name] = getattr(comparison, name)().to_pylist()
    report["steps"] = report["steps"][0]
    if fail_if_slower is not None:
        report["gate"] = {"percent": fail_if_slower, "failed": comparison.slower_than(fail_if_slower)}
    return report


def write_comparison(comparison: Comparison, folder: str | Path) -> list[Path]:
    """Write the comparison's tables into ``folder`` (module docstring); the paths written."""
    with staging(Path(folder)) as stage:
        for name, file_name in FILES.items():
            table = getattr(comparison, name)()
            if table.num_rows:
                flat = _flat(table)
                stage.write(file_name, lambda path, flat=flat: csv.write_csv(flat, path), replaceable=True)
        return stage.commit()


def _flat(table: pa.Table) -> pa.Table:
    """``table`` with each list column's lists joined into text (CSV cells hold no lists)."""
    for index, field in enumerate(table.schema):
        if pa.types.is_list(field.type):
            table = table.set_column(index, field.name, pc.binary_join(table[field.name], LIST_SEPARATOR))
    return table
