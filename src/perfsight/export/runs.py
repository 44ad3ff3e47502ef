"""``perfsight export -dir PATH``: the runs at PATH, and the export of each into its output folder.

Finding the runs: PATH must be a folder or a regular file (a special file such as /dev/null, a FIFO or a
socket is refused before anything reads it, so nothing hangs). The seed's -dir is "PROF_XXX目录或PROF_XXX
目录的父目录"; perfsight takes what ``ingest.find_runs`` opens at PATH, and when PATH itself holds no run, the
runs further down (``runs/<job>/PROF_*``): breadth first, ``DEEPER_LEVELS`` levels, not below a folder
that has runs, nor into perfsight's own cache and output folders, hidden folders or symlinked folders.

Exporting a run: its files go to the run's ``perfsight_output/`` or to ``OUTPUT/<run name>/``; the folder
is checked (``output.prepare_folder``) before the run is read, the files get one msprof stamp
(YYYYMMDDhhmmss, made unique in the folder) and are written all or none (``output.Staging``) together with
the README.txt that describes them.
"""
from __future__ import annotations

import stat
import time
from pathlib import Path

from .. import ingest, layout
from ..errors import InputError, OutputError
from ..ingest import RunSource
from ..run import with_step_points_from_env
from .output import describe_kind, special_kind, staging
from .readme import stage_readme
from .select import Selection, select
from .summary import stage_summary
from .timeline import stage_timeline

#: how many folder levels below -dir are searched when -dir itself holds no run
DEEPER_LEVELS = 4
#: how many folders that search looks into at most
DEEPER_FOLDERS = 2000

_DIR_TAKES = "-dir takes a PROF_ directory, a folder holding runs, or a torch.profiler trace file"


def find_export_runs(path: str | Path) -> list[RunSource]:
    """The runs ``export -dir path`` exports (module docstring); InputError when there are none."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InputError(f"-dir {path}: no such file or directory") from None
    except OSError as exc:
        raise InputError(f"-dir {path}: cannot be read ({exc.strerror}); {_DIR_TAKES}") from None
    kind = special_kind(mode)
    if kind:
        raise InputError(f"-dir {path}: is {kind}, not a file or folder perfsight can read; {_DIR_TAKES}")
    try:
        return ingest.find_runs(path)
    except InputError:
        runs = _runs_below(path) if stat.S_ISDIR(mode) else []
        if not runs:
            raise
        return runs


def _runs_below(path: Path) -> list[RunSource]:
    found: list[RunSource] = []
    level, looked = [path], 0
    for _ in range(DEEPER_LEVELS):
        children = [child for folder in level for child in _subfolders(folder)][:DEEPER_FOLDERS - looked]
        looked += len(children)
        level = []
        for folder in children:
            try:
                runs = ingest.find_runs(folder)
            except (InputError, OSError):
                level.append(folder)
            else:
                found += runs
    return found


def _subfolders(folder: Path) -> list[Path]:
    skipped = (layout.CACHE_DIR, layout.OUTPUT_DIR)
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()
                      and p.name not in skipped and not p.name.startswith("."))
    except OSError:
        return []


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
