"""The readers perfsight has, in the order they are tried, and finding runs on disk with them.

``READERS`` is the one list of formats (each a ``Reader``: ``perfsight.ingest.common.reader``). A path (a file
or a folder) is a run of the first reader that recognises it (``runs_at``); the runs in a folder that is not
one itself are those of the first reader that recognises any of its entries (``runs_in``: the ranks of one
job, a perfsight run directory's siblings before Ascend folders before trace files). ``find_runs`` is what
``perfsight.open``, the CLI and export open at a path; ``runs_below`` searches further down for export's
``-dir runs/<job>/PROF_*``; insight's discovery asks ``runs_at`` of each entry of the folder it serves and
groups what it finds into jobs with ``perfsight.ingest.jobs``. A folder without runs that a reader
recognises by its names (``Reader.without_data``) gets an error saying what it is and what it lacks; such a
folder beside the runs of a job is named in the job's warnings (``skipped_beside``).
Adding a format: docs/readers.md.
"""
from __future__ import annotations

import contextlib
import stat
from pathlib import Path

from perfsight.core import layout
from perfsight.core.errors import InputError
from perfsight.core.files import file_kind
from perfsight.ingest.ascend.formats import MindSporeLegacyReader, MsprofReader, TorchNpuReader
from perfsight.ingest.common.reader import Reader, RunSource
from perfsight.ingest.kineto.perfsight_run import PerfsightRunReader
from perfsight.ingest.kineto.reader import KinetoReader

#: every format perfsight reads, in the order they are tried
READERS: tuple[Reader, ...] = (
    PerfsightRunReader(),        # PROF_ directory holding manifest.json
    TorchNpuReader(),            # *_ascend_pt / *_ascend_ms: its .db export, else ASCEND_PROFILER_OUTPUT/ text files
    MsprofReader(),              # msprof PROF_ directory (no manifest.json)
    MindSporeLegacyReader(),     # MindSpore's flat profiler folder, one run per rank
    KinetoReader(),              # *.pt.trace.json[.gz], or any Chrome-trace JSON
)

DEEPER_LEVELS = 4      # how many folder levels below a folder without runs are searched for some
DEEPER_FOLDERS = 2000  # how many folders that search looks into at most
DEEPER_SHOWN = 6       # how many of the folders (or empty files) found an error message names


def runs_at(path: Path) -> list[RunSource]:
    """The runs ``path`` (a file or a folder) itself is, by the first reader that recognises it; [] if none."""
    for reader in READERS:
        runs = reader.runs_at(path)
        if runs:
            return runs
    return []


def searched(folder_name: str) -> bool:
    """Whether a folder of this name is searched for runs: not perfsight's own cache, output, cluster store and
    live folders (a trace file's cache is ``<file>.perfsight_cache``), not a hidden folder."""
    return not (folder_name.startswith(".")
                or folder_name in (layout.CACHE_DIR, layout.OUTPUT_DIR, layout.CLUSTER_DIR, layout.LIVE_DIR)
                or folder_name.endswith("." + layout.CACHE_DIR))


def runs_in(folder: Path) -> list[RunSource]:
    """The runs of ``folder``: itself, or those of its entries (files and searched folders, one level) that
    the first reader recognising any of them finds, in name order (module docstring). OSError when the folder
    cannot be listed."""
    own = runs_at(folder)
    if own:
        return own
    entries = [p for p in sorted(folder.iterdir()) if not p.is_dir() or searched(p.name)]
    for reader in READERS:
        runs = [run for entry in entries for run in reader.runs_at(entry)]
        if runs:
            return runs
    return []


def find_runs(path: Path) -> list[RunSource]:
    """The runs at ``path``: a run (a run directory of any format, a trace file), or a folder holding them
    (one level: the ranks of one job). InputError saying what was expected when there are none."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        what = "a broken symbolic link" if path.is_symlink() else "no such file or directory"
        raise InputError(f"{path}: {what}") from None
    except OSError as error:
        raise InputError(f"{path}: cannot read it ({error.strerror or error})") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise InputError(f"{path}: {file_kind(mode)}, not a file or directory; expected a PROF_ directory, a "
                         "torch.profiler trace (*.pt.trace.json[.gz]) or a folder holding them")
    if stat.S_ISREG(mode):
        runs = runs_at(path)
        if runs:
            return runs
        zero_bytes = "an empty file (0 bytes), " if path.stat().st_size == 0 else ""
        raise InputError(f"{path}: {zero_bytes}not a run perfsight can read; expected a PROF_ directory, "
                         "a torch.profiler trace (*.pt.trace.json[.gz]) or a folder holding them")
    try:
        runs = runs_in(path)
    except OSError as error:
        raise InputError(f"{path}: cannot list the folder ({error.strerror or error})") from None
    if not runs:
        empty = _without_data(path)
        if empty:
            raise InputError(f"{path}: {empty}")
        zero = _empty_exports(path)
        if zero:
            more = f" and {len(zero) - DEEPER_SHOWN} more" if len(zero) > DEEPER_SHOWN else ""
            raise InputError(f"{path}: holds no run perfsight can read: these files are empty (0 bytes): "
                             f"{', '.join(zero[:DEEPER_SHOWN])}{more}")
        raise InputError(f"{path}: holds no run perfsight can read; expected a PROF_ directory (with "
                         "manifest.json), a parent of PROF_ directories, torch.profiler trace files, or "
                         "Ascend profiler output (*_ascend_pt / ASCEND_PROFILER_OUTPUT, msprof PROF_ "
                         "directories, MindSpore profiler files)" + _deeper_hint(path))
    return runs


def runs_below(path: Path) -> dict[Path, list[RunSource]]:
    """The runs in the folders below ``path`` (a folder without runs of its own; the seed's runs/<job>/PROF_*):
    breadth first, ``DEEPER_LEVELS`` levels, not below a folder with runs, nor into folders not ``searched``
    or symlinked; {folder: its runs}."""
    found: dict[Path, list[RunSource]] = {}
    level, looked = [path], 0
    for _ in range(DEEPER_LEVELS):
        level = [child for folder in level for child in _subfolders(folder)][:DEEPER_FOLDERS - looked]
        looked += len(level)
        without_runs = []
        for folder in level:
            with contextlib.suppress(InputError, OSError):
                runs = runs_in(folder)
                if runs:
                    found[folder] = runs
                else:
                    without_runs.append(folder)
        level = without_runs
    return found


def _deeper_hint(path: Path) -> str:
    """For the error on a folder without runs: the folders below it that hold runs (``runs_below``), so the
    user sees what to open instead; "" if none."""
    found = list(runs_below(path))
    if not found:
        return ""
    shown = ", ".join(str(folder.relative_to(path)) for folder in found[:DEEPER_SHOWN])
    more = f" and {len(found) - DEEPER_SHOWN} more" if len(found) > DEEPER_SHOWN else ""
    return (f". Runs were found below it, in {shown}{more}: open one of those, export them all with "
            f"`perfsight export summary -dir {path}`, or browse them all with "
            f"`perfsight insight --summary-base-dir {path}`")


def skipped_beside(path: Path, runs: list[RunSource]) -> list[str]:
    """For a folder whose entries are ``runs`` (a job's ranks, or one run beside others that are not): each of
    its subfolders that a reader recognises by its names but that holds nothing the reader reads
    (``Reader.without_data``), and each entry that is neither a regular file nor a folder (a FIFO, a socket,
    a device: never opened), as a warning of the job (``rank3_ascend_pt not read: a torch_npu profiler
    folder ... without any file perfsight reads: ...``, ``rank3.pt.trace.json not read: a FIFO (named pipe),
    not a regular file``); [] for a run that is the folder itself."""
    if any(run.path == path for run in runs):
        return []
    return ([f"{entry.name} not read: {what}" for entry in _subfolders(path) if (what := _said(entry))]
            + [f"{name} not read: {kind}, not a regular file" for name, kind in _special_files(path)])


#: what the names of profiler exports end with (an empty one is named as such when a folder holds no run)
EXPORT_SUFFIXES = (".json", ".json.gz", ".csv", ".db")


def _empty_exports(folder: Path) -> list[str]:
    """The names of the regular files of ``folder`` that are named like profiler exports (``EXPORT_SUFFIXES``)
    and hold 0 bytes."""
    with contextlib.suppress(OSError):
        return [entry.name for entry in sorted(folder.iterdir()) if entry.name.endswith(EXPORT_SUFFIXES)
                and entry.is_file() and entry.stat().st_size == 0]
    return []


def _special_files(folder: Path) -> list[tuple[str, str]]:
    """The entries of ``folder`` (links followed) that are neither regular files nor folders, with what each is."""
    special = []
    with contextlib.suppress(OSError):
        for entry in sorted(folder.iterdir()):
            try:
                mode = entry.stat().st_mode
            except OSError:
                continue
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                special.append((entry.name, file_kind(mode)))
    return special


def _said(path: Path) -> str | None:
    """What ``path`` is by a reader's names though it holds nothing that reader reads, or None."""
    return next((what for reader in READERS if (what := reader.without_data(path))), None)


def _without_data(folder: Path) -> str | None:
    """For a folder without runs: what it is by a reader's names though it holds nothing that reader reads
    (``Reader.without_data``), or what its subfolders are that are such; None when neither."""
    own = _said(folder)
    if own:
        return own
    found = [(entry.name, what) for entry in _subfolders(folder) if (what := _said(entry))]
    if not found:
        return None
    more = f" (and {len(found) - 1} more folders like it)" if len(found) > 1 else ""
    return f"holds no run perfsight can read: {found[0][0]} is {found[0][1]}{more}"


def _subfolders(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and searched(p.name))
    except OSError:
        return []
