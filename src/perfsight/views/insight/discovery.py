"""Finding the runs under insight's summary-base-dir: what the run list shows, one entry per job.

Walks the tree (symlinked directories are not followed; a symlinked file, folder or run that resolves
outside the base directory is ignored). An entry is what ``perfsight.open`` opens as one job, with the
RunSources to open (``runs``: the library opens those and nothing else):

* a perfsight run directory (PROF_..., holding manifest.json); several run directories in one folder whose manifests name distinct ranks
  (a torchrun job) are one entry, the folder;
* a torch.profiler trace file; several traces in one folder whose names carry distinct rank numbers
  (``rank0``, ``rank-1``, ``rank_2``...) are one entry, the folder;
* an Ascend run (torch_npu ``*_ascend_pt``, an msprof PROF_ directory, MindSpore's profiler folder with
  all its ranks); several torch_npu or msprof runs in one folder (one per rank) are one entry, the folder.

perfsight's own cache and output folders and hidden folders are skipped. Entry ids are a hash of the
path relative to the base directory: stable across restarts and free of path syntax.

Nothing outside the base directory is read by any path: ``confine`` (called before a run is opened)
refuses an entry when a symbolic link inside what it reads (its run directories, trace files and cache
folders, and the folders of base that links lead to from there) resolves outside the base directory or
nowhere.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from perfsight.core import layout
from perfsight.core.errors import InputError
from perfsight.ingest import RunSource, ascend_runs_at
from perfsight.ingest.cache import source_stamps
from perfsight.ingest.jobs import rank_in_name
from perfsight.ingest.kineto.reader import is_kineto_trace

_SKIPPED_DIRS = (layout.CACHE_DIR, layout.OUTPUT_DIR)
#: links named in the error of a run that ``confine`` refuses
LINKS_SHOWN = 5


@dataclass(frozen=True)
class Candidate:
    """One run-list entry: a job perfsight.open can open at ``path``."""

    id: str
    path: Path              # resolved, inside the base directory
    relpath: str            # as shown, relative to the base directory ("." for the base itself)
    kind: str               # "perfsight run" | "perfsight job" | "torch.profiler trace" | "torch.profiler job"
                            # | "<format> run" | "<format> job" for Ascend formats (torch_npu, msprof, mindspore)
    runs: tuple[RunSource, ...]  # what to open: one run, or the ranks of one job
    sources: tuple[Path, ...]  # the raw files whose size and mtime say whether the run changed

    def fingerprint(self) -> tuple:
        """(path, size, mtime) of each source: ``cache.source_stamps`` without the content hash."""
        return tuple(tuple(stamp) for stamp in source_stamps(self.sources, content=False))

    def size_bytes(self) -> int:
        return sum(size or 0 for _, size, _ in self.fingerprint())


def run_id(relpath: str) -> str:
    return hashlib.sha1(relpath.encode("utf-8")).hexdigest()[:12]


def inside(base: Path, path: Path) -> Path | None:
    """``path`` resolved, or None when it resolves outside ``base`` (a resolved directory) or nowhere."""
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    return resolved if resolved == base or resolved.is_relative_to(base) else None


def links_leaving(base: Path, roots) -> list[Path]:
    """The symbolic links at or below ``roots`` (files or folders) that resolve outside ``base`` (resolved)
    or nowhere. Links that stay inside are followed (what they lead to is read too); only directory
    entries are looked at."""
    found, seen = [], set()
    stack = [Path(root) for root in roots if os.path.lexists(root)]
    while stack:
        path = stack.pop()
        if path.is_symlink():
            target = inside(base, path)
            if target is None:
                found.append(path)
                continue
            path = target
        if path in seen or not path.is_dir():
            continue
        seen.add(path)
        try:
            with os.scandir(path) as entries:
                stack += [Path(e.path) for e in entries if e.is_symlink() or e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
    return sorted(found)


def confine(base: Path, candidate: Candidate) -> None:
    """Raise InputError naming the links when opening ``candidate`` would read outside ``base`` (its run
    directories, trace files and cache folders: ``links_leaving``)."""
    base = base.resolve()
    leaving = links_leaving(base, _read_paths(candidate.runs))
    if leaving:
        shown = ", ".join(path.relative_to(base).as_posix() for path in leaving[:LINKS_SHOWN])
        more = f" and {len(leaving) - LINKS_SHOWN} more" if len(leaving) > LINKS_SHOWN else ""
        raise InputError(f"{shown}{more}: symbolic link{'s' if len(leaving) > 1 else ''} leading outside "
                         "--summary-base-dir (or nowhere); insight reads nothing outside it, so this run is not "
                         "opened: copy the files into the folder instead of linking them")


def discover(base: Path) -> list[Candidate]:
    """Every run under ``base`` (resolved), sorted by relative path."""
    base = base.resolve()
    own = ascend_runs_at(base)
    if own:                                            # the base directory is itself an Ascend run
        return [_candidate(base, base, f"{own[0].kind} run", own)]
    found: list[Candidate] = []
    for folder, dirnames, filenames in os.walk(base, followlinks=False):
        here = Path(folder)
        dirnames[:] = sorted(d for d in dirnames if _descend(d) and inside(base, here / d) is not None)
        run_dirs = [d for d in dirnames if layout.is_run_dir(here / d)]
        ascend = {d: runs for d in dirnames if d not in run_dirs and (runs := ascend_runs_at(here / d))}
        dirnames[:] = [d for d in dirnames if d not in run_dirs and d not in ascend]   # a run's insides are its own
        found += _prof_entries(base, here, run_dirs)
        found += _ascend_entries(base, here, ascend)
        found += _trace_entries(base, here, sorted(filenames))
    unique = {c.id: c for c in reversed(found)}      # a symlink to a run inside base: listed once
    return sorted(unique.values(), key=lambda c: c.relpath)


def _descend(name: str) -> bool:
    return not (name.startswith(".") or name in _SKIPPED_DIRS or name.endswith("." + layout.CACHE_DIR))


def _read_paths(runs) -> list[Path]:
    """What opening ``runs`` reads: their run directories or trace files, and their cache folders."""
    return [path for run in runs for path in (run.path, run.cache_dir)]


def _candidate(base: Path, path: Path, kind: str, runs: list[RunSource]) -> Candidate:
    """The entry of ``runs``; its sources are not even listed when a link leads out of what it reads."""
    relpath = path.relative_to(base).as_posix() or "."
    sources = () if links_leaving(base, _read_paths(runs)) else tuple(f for run in runs for f in run.sources())
    return Candidate(run_id(relpath), path, relpath, kind, tuple(runs), sources)


def _prof_entries(base: Path, folder: Path, names: list[str]) -> list[Candidate]:
    runs = [RunSource("perfsight", p) for p in (inside(base, folder / name) for name in names) if p is not None]
    ranks = [_manifest_rank(base, run.path) for run in runs]
    if len(runs) > 1 and None not in ranks and len(set(ranks)) == len(ranks):
        return [_candidate(base, folder, "perfsight job", runs)]
    return [_candidate(base, run.path, "perfsight run", [run]) for run in runs]


def _ascend_entries(base: Path, folder: Path, runs: dict[str, list[RunSource]]) -> list[Candidate]:
    """Entries for the Ascend runs in ``folder`` (name -> its RunSources): one job entry for several."""
    runs = {name: sources for name, sources in runs.items() if inside(base, folder / name) is not None}
    if not runs:
        return []
    kinds = {sources[0].kind for sources in runs.values()}
    if len(runs) > 1 and len(kinds) == 1 and kinds <= {"torch_npu", "msprof"}:    # one directory per rank
        return [_candidate(base, folder.resolve(), f"{kinds.pop()} job", [s for ss in runs.values() for s in ss])]
    return [_candidate(base, (folder / name).resolve(), f"{sources[0].kind} run", sources)
            for name, sources in runs.items()]


def _manifest_rank(base: Path, run: Path) -> int | None:
    if inside(base, run / layout.MANIFEST) is None:
        return None
    try:
        rank = layout.read_manifest(run).get("rank")
    except InputError:
        return None
    return rank if type(rank) is int else None


def _trace_entries(base: Path, folder: Path, names: list[str]) -> list[Candidate]:
    traces = []
    for name in names:
        path = inside(base, folder / name)
        if path is not None and path.is_file() and is_kineto_trace(path):
            traces.append(RunSource("kineto", path))
    ranks = [rank_in_name(run.path.name) for run in traces]
    if len(traces) > 1 and None not in ranks and len(set(ranks)) == len(ranks):
        return [_candidate(base, folder, "torch.profiler job", traces)]
    return [_candidate(base, run.path, "torch.profiler trace", [run]) for run in traces]
