"""The Python API over ingest and export: what the CLI and Profiler.analyse call.

    load(path)           -> the canonical tables of the run (or one job's ranks) at path
    export(path, ...)    -> {run path: [files written]} for every run at path
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from . import ingest
from .errors import InputError
from .tables import RunTables


def load(path: str | os.PathLike, *, use_cache: bool = True) -> RunTables:
    """The canonical tables of what ``perfsight.open(path)`` opens."""
    from .run import open as open_run

    return open_run(path, use_cache=use_cache).tables


def export(path: str | os.PathLike, *, timeline: bool = True, summary: bool = True, fmt: str = "csv",
           iteration_id: int | None = None, model_id: int | None = None, iteration_count: int | None = None,
           clear: bool = False, output: str | os.PathLike | None = None) -> dict[Path, list[Path]]:
    """Export every run at ``path`` the msprof way; returns the files written per run.

    ``output`` puts the files in ``output/<run name>/`` instead of the run's own perfsight_output/
    (needed when the run's directory is read-only). ``clear`` removes the Parquet cache afterwards.
    """
    from .export import Selection, export_summary, export_timeline, select, write_readme
    from .run import with_step_points_from_env

    if fmt not in ("csv", "json"):
        raise InputError(f"--format: {fmt!r} is not allowed; allowed: csv, json")
    selection = Selection(iteration_id=iteration_id, model_id=model_id, iteration_count=iteration_count)
    runs = ingest.find_runs(Path(path))
    results: dict[Path, list[Path]] = {}
    for run in runs:
        tables = with_step_points_from_env(select(ingest.load(run), selection))
        out_dir = Path(output) / run.path.name if output else run.default_output_dir
        _ensure_writable(out_dir)
        stamp = _free_stamp(out_dir)
        written: list[Path] = []
        if timeline:
            written += export_timeline(tables, out_dir, stamp=stamp)
        if summary:
            written += export_summary(tables, out_dir, stamp=stamp, fmt=fmt)
        if written:
            written.append(write_readme(out_dir, written))
        if clear:
            ingest.cache.clear(run.cache_dir)
        results[run.path] = written
    return results


def export_run(run_dir: Path, *, timeline: bool, summary: bool, fmt: str = "csv") -> list[Path]:
    """Export one perfsight run into its own perfsight_output/ (Profiler.analyse)."""
    return export(run_dir, timeline=timeline, summary=summary, fmt=fmt)[run_dir]


def _ensure_writable(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".perfsight_write_test_{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise InputError(f"{out_dir}: cannot write the export there ({exc.strerror}); "
                         "choose another place with --output DIR") from None


def _free_stamp(out_dir: Path) -> str:
    """YYYYMMDDhhmmss as msprof stamps its files, made unique so an earlier export is never overwritten."""
    stamp = time.strftime("%Y%m%d%H%M%S")
    candidate, n = stamp, 1
    while any(out_dir.glob(f"*_{candidate}.*")):
        candidate, n = f"{stamp}_{n}", n + 1
    return candidate
