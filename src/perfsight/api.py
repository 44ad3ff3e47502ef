"""The Python API over ingest and export: what the CLI and Profiler.analyse call.

    load(path)           -> the canonical tables of the run (or one job's ranks) at path
    export(path, ...)    -> {run path: [files written]} for every run at path
"""
from __future__ import annotations

import os
from pathlib import Path

from perfsight.core.tables import RunTables


def load(path: str | os.PathLike, *, use_cache: bool = True) -> RunTables:
    """The canonical tables of what ``perfsight.open(path)`` opens."""
    from perfsight.run import open as open_run

    return open_run(path, use_cache=use_cache).tables


def export(path: str | os.PathLike, *, timeline: bool = True, summary: bool = True, fmt: str = "csv",
           iteration_id: int | None = None, model_id: int | None = None, iteration_count: int | None = None,
           clear: bool = False, output: str | os.PathLike | None = None) -> dict[Path, list[Path]]:
    """Export every run at ``path`` the msprof way; returns the files written per run.

    ``path`` is a run, or a folder holding runs (also further down: ``runs/<job>/PROF_*``). ``output``
    puts the files in ``output/<run name>/`` instead of the run's own perfsight_output/ (needed when the
    run's directory is read-only). ``clear`` removes the Parquet cache afterwards. Each run's files are
    written all or none; a file perfsight did not write is never overwritten.
    """
    from perfsight.options.export import check_export_format
    from perfsight.views.export import Selection, export_runs, find_export_runs

    check_export_format(fmt)
    selection = Selection(iteration_id=iteration_id, model_id=model_id, iteration_count=iteration_count)
    return export_runs(find_export_runs(path), timeline=timeline, summary=summary, fmt=fmt, selection=selection,
                       clear=clear, output=output)


def export_run(run_dir: Path, *, timeline: bool, summary: bool, fmt: str = "csv") -> list[Path]:
    """Export one perfsight run into its own perfsight_output/ (Profiler.analyse)."""
    return export(run_dir, timeline=timeline, summary=summary, fmt=fmt)[run_dir]
