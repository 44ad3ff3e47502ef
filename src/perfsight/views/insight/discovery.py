"""Finding the runs under insight's summary-base-dir: what the run list shows, one entry per job.

Walks the tree while it serves (symlinked directories are not followed; a symlinked file, folder or run that
resolves outside the base directory is ignored) and asks ingest what each entry is: a run of which format
(``registry.runs_at``) and, for the runs found side by side in one folder, which are one job
(``jobs.jobs_in``: several perfsight run directories whose manifests name distinct ranks, traces whose
names carry distinct rank numbers, torch_npu or msprof folders of one job's ranks). An entry is what
``perfsight.open`` opens as one job, with the RunSources to open (``runs``: the library opens those and
nothing else): a run, or a job (the folder holding its ranks); one rank of a job opens alone as the entry
``rank_candidate`` makes. The base directory that is itself a run is
one entry, ".". Folders that are not ``registry.searched`` (perfsight's own cache and output folders,
hidden folders) and a run's insides are not walked. Entry ids are a hash of the path relative to the base
directory: stable across restarts and free of path syntax.

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

from perfsight.collect.livefiles import LIVE_MARKER
from perfsight.core import layout
from perfsight.core.errors import InputError
from perfsight.ingest import RunSource
from perfsight.ingest.cache import source_stamps
from perfsight.ingest.jobs import jobs_in
from perfsight.ingest.registry import runs_at, searched

#: links named in the error of a run that ``confine`` refuses
LINKS_SHOWN = 5


@dataclass(frozen=True)
class Candidate:
    """One run-list entry: a job perfsight.open can open at ``path``."""

    id: str
    path: Path              # resolved, inside the base directory
    relpath: str            # as shown, relative to the base directory ("." for the base itself)
    kind: str               # "<format> run" ("torch.profiler trace") or "<format> job": its reader's name
                            # (perfsight, torch.profiler, torch_npu, msprof, mindspore) and run_word
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
    own = runs_at(base)
    if own:                                            # the base directory is itself a run
        return [_candidate(base, base, own, job=False)]
    found: list[Candidate] = []
    for folder, dirnames, filenames in os.walk(base, followlinks=False):
        here = Path(folder)
        dirnames[:] = sorted(d for d in dirnames if searched(d) and inside(base, here / d) is not None)
        runs = {name: found_here for name in [*dirnames, *sorted(filenames)]
                if (path := inside(base, here / name)) is not None and (found_here := runs_at(path))}
        dirnames[:] = [d for d in dirnames if d not in runs]     # a run's insides are its own
        for job_runs, is_job in jobs_in(list(runs.values())):
            found.append(_candidate(base, here if is_job else job_runs[0].path, job_runs, job=is_job))
    unique = {c.id: c for c in reversed(found)}      # a symlink to a run inside base: listed once
    return sorted(unique.values(), key=lambda c: c.relpath)


def live_folders(base: Path) -> list[Path]:
    """Every armed job's live folder under ``base`` (resolved): a ``layout.LIVE_DIR`` folder that perfsight made
    (``livefiles.LIVE_MARKER``), inside base, not inside a run; sorted."""
    base = base.resolve()
    found = []
    for folder, dirnames, _ in os.walk(base, followlinks=False):
        here = Path(folder)
        if (here / layout.LIVE_DIR / LIVE_MARKER).is_file() and inside(base, here / layout.LIVE_DIR) is not None:
            found.append(here / layout.LIVE_DIR)
        dirnames[:] = sorted(d for d in dirnames if searched(d) and inside(base, here / d) is not None
                             and not runs_at(here / d))
    return found


def _read_paths(runs) -> list[Path]:
    """What opening ``runs`` reads: their run directories or trace files, and their cache folders."""
    return [path for run in runs for path in (run.path, run.cache_dir)]


def _candidate(base: Path, path: Path, runs: list[RunSource], *, job: bool) -> Candidate:
    """The entry of ``runs`` (a job's ranks, or the runs of one file or folder) at ``path``; its sources are not
    even listed when a link leads out of what it reads."""
    relpath = path.relative_to(base).as_posix() or "."
    reader = runs[0].reader
    kind = f"{reader.name} {'job' if job else reader.run_word}"
    sources = () if links_leaving(base, _read_paths(runs)) else tuple(f for run in runs for f in run.sources())
    return Candidate(run_id(relpath), path, relpath, kind, tuple(runs), sources)


def rank_candidate(base: Path, job: Candidate, source: RunSource, rank: int) -> Candidate:
    """The entry of one rank of ``job`` opened alone (a job mapped rank by rank: its ranks' own pages): the
    rank's ``source``, at the job's path followed by ``#rank<rank>`` (its id a hash of that: stable across
    restarts)."""
    base = base.resolve()
    candidate = _candidate(base, source.path, [source], job=False)
    relpath = f"{job.relpath}#rank{rank}"
    return Candidate(run_id(relpath), candidate.path, relpath, candidate.kind, candidate.runs, candidate.sources)
