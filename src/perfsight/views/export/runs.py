"""``perfsight export -dir PATH``: the runs at PATH, and the export of each into its output folder.

Finding the runs: the seed's -dir is "PROF_XXX目录或PROF_XXX目录的父目录"; perfsight takes what
``ingest.find_runs`` opens at PATH (which refuses a special file such as /dev/null or a FIFO before
anything reads it), and when PATH itself holds no run, the runs further down (``ingest.runs_below``:
``runs/<job>/PROF_*``).

Exporting a run: its files go to the run's ``perfsight_output/`` or to ``OUTPUT/<run name>/``; the folder
is checked (``output.prepare_folder``) before the run is read, the files get one msprof stamp
(YYYYMMDDhhmmss, made unique in the folder) and are written all or none (``output.Staging``) together with
the README.txt that describes them.
"""
from __future__ import annotations

import time
from pathlib import Path

from perfsight import ingest
from perfsight.core.errors import InputError, OutputError
from perfsight.ingest import RunSource
from perfsight.options.export import check_export_format
from perfsight.run import with_step_points_from_env
from perfsight.views.export.output import describe_kind, staging
from perfsight.views.export.readme import stage_readme
from perfsight.views.export.select import Selection, select
from perfsight.views.export.summary import stage_summary
from perfsight.views.export.timeline import stage_timeline


def find_export_runs(path: str | Path) -> list[RunSource]:
    """The runs ``export -dir path`` exports (module docstring); InputError when there are none."""
    path = Path(path)
    try:
        return ingest.find_runs(path)
    except InputError:
        runs = [run for found in ingest.runs_below(path).values() for run in found] if path.is_dir() else []
        if not runs:
            raise
        return runs


def export_runs(runs: list[RunSource], *, timeline: bool, summary: bool, fmt: str = "csv",
                selection: Selection = Selection(), clear: bool = False,
                output: str | Path | None = None) -> dict[Path, list[Path]]:
    """Export each run (module docstring); returns the files written per run (README.txt last)."""
    if output is not None:
        _check_output_root(Path(output))
    results: dict[Path, list[Path]] = {}
    for run in runs:
        out_dir = Path(output) / run.path.name if output is not None else run.default_output_dir
        with staging(out_dir) as stage:
            tables = with_step_points_from_env(select(ingest.load(run), selection))
            stamp = _free_stamp(out_dir)
            if timeline:
                stage_timeline(tables, stage, stamp=stamp)
            if summary:
                stage_summary(tables, stage, stamp=stamp, fmt=fmt)
            if stage.written:
                stage_readme(stage, stage.written)
            results[run.path] = stage.commit()
        if clear:
            ingest.cache.clear(run.cache_dir)
    return results


def _check_output_root(output: Path) -> None:
    kind = describe_kind(output)
    if kind not in ("a folder", "missing"):
        raise OutputError(f"--output {output}: is {kind}, not a folder; --output takes a folder (the files go "
                         "to OUTPUT/<run name>/)")


def _free_stamp(out_dir: Path) -> str:
    """YYYYMMDDhhmmss as msprof stamps its files, made unique so an earlier export is never overwritten."""
    stamp = time.strftime("%Y%m%d%H%M%S")
    candidate, n = stamp, 1
    while any(out_dir.glob(f"*_{candidate}.*")):
        candidate, n = f"{stamp}_{n}", n + 1
    return candidate


def export(path: str | Path, *, timeline: bool = True, summary: bool = True, fmt: str = "csv",
           iteration_id: int | None = None, model_id: int | None = None, iteration_count: int | None = None,
           clear: bool = False, output: str | Path | None = None) -> dict[Path, list[Path]]:
    """Export every run at ``path`` the msprof way; returns the files written per run.

    ``path`` is a run, or a folder holding runs (also further down: ``runs/<job>/PROF_*``). ``output``
    puts the files in ``output/<run name>/`` instead of the run's own perfsight_output/ (needed when the
    run's directory is read-only). ``clear`` removes the Parquet cache afterwards. Each run's files are
    written all or none; a file perfsight did not write is never overwritten.
    """
    check_export_format(fmt)
    selection = Selection(iteration_id=iteration_id, model_id=model_id, iteration_count=iteration_count)
    return export_runs(find_export_runs(path), timeline=timeline, summary=summary, fmt=fmt, selection=selection,
                       clear=clear, output=output)


def export_run(run_dir: Path, *, timeline: bool, summary: bool, fmt: str = "csv") -> list[Path]:
    """Export one perfsight run into its own perfsight_output/ (Profiler.analyse)."""
    return export(run_dir, timeline=timeline, summary=summary, fmt=fmt)[run_dir]
