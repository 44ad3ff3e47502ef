"""Finding the runs under insight's summary-base-dir: what the run list shows, one entry per job.

Walks the tree (symlinked directories are not followed; a symlinked file or run that resolves outside
the base directory is ignored, so nothing outside it is ever read). An entry is what ``perfsight.open``
opens as one job:

* a perfsight run directory (PROF_..., holding manifest.json); several run directories in one folder whose manifests name distinct ranks
  (a torchrun job) are one entry, the folder;
* a torch.profiler trace file; several traces in one folder whose names carry distinct rank numbers
  (``rank0``, ``rank-1``, ``rank_2``...) are one entry, the folder;
* an Ascend run (torch_npu ``*_ascend_pt``, an msprof PROF_ directory, MindSpore's profiler folder with
  all its ranks); several torch_npu or msprof runs in one folder (one per rank) are one entry, the folder.

perfsight's own cache and output folders and hidden folders are skipped. Entry ids are a hash of the
path relative to the base directory: stable across restarts and free of path syntax.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .. import layout
from ..ingest import RunSource, ascend_runs_at
from ..ingest.kineto import is_kineto_trace

_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_SKIPPED_DIRS = (layout.CACHE_DIR, layout.OUTPUT_DIR)


@dataclass(frozen=True)
class Candidate:
    """One run-list entry: a job perfsight.open can open at ``path``."""

    id: str
    path: Path              # resolved, inside the base directory
    relpath: str            # as shown, relative to the base directory ("." for the base itself)
    kind: str               # "perfsight run" | "perfsight job" | "torch.profiler trace" | "torch.profiler job"
                            # | "<format> run" | "<format> job" for Ascend formats (torch_npu, msprof, mindspore)
    sources: tuple[Path, ...]  # the raw files whose size and mtime say whether the run changed

    def fingerprint(self) -> tuple:
        stats = []
        for source in self.sources:
            try:
                st = source.stat()
            except OSError:
                continue
            stats.append((str(source), st.st_size, st.st_mtime_ns))
        return tuple(stats)

    def size_bytes(self) -> int:
        return sum(size for _, size, _ in self.fingerprint())


def run_id(relpath: str) -> str:
    return hashlib.sha1(relpath.encode("utf-8")).hexdigest()[:12]


def inside(base: Path, path: Path) -> Path | None:
    """``path`` resolved, or None when it resolves outside ``base`` (a resolved directory)."""
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    return resolved if resolved == base or resolved.is_relative_to(base) else None


def discover(base: Path) -> list[Candidate]:
    """Every run under ``base`` (resolved), sorted by relative path."""
    base = base.resolve()
    own = ascend_runs_at(base)
    if own:                                            # the base directory is itself an Ascend run
        return [_candidate(base, base, f"{own[0].kind} run", [f for run in own for f in run.sources()])]
    found: list[Candidate] = []
    for folder, dirnames, filenames in os.walk(base, followlinks=False):
        here = Path(folder)
        dirnames[:] = sorted(d for d in dirnames if _descend(d))
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


def _candidate(base: Path, path: Path, kind: str, sources: list[Path]) -> Candidate:
    relpath = path.relative_to(base).as_posix() or "."
    return Candidate(run_id(relpath), path, relpath, kind, tuple(sources))


def _prof_entries(base: Path, folder: Path, names: list[str]) -> list[Candidate]:
    runs = [p for p in (inside(base, folder / name) for name in names) if p is not None]
    sources = {run: RunSource("perfsight", run).sources() for run in runs}
    ranks = [_manifest_rank(run) for run in runs]
    if len(runs) > 1 and None not in ranks and len(set(ranks)) == len(ranks):
        return [_candidate(base, folder, "perfsight job", [s for run in runs for s in sources[run]])]
    return [_candidate(base, run, "perfsight run", sources[run]) for run in runs]


def _ascend_entries(base: Path, folder: Path, runs: dict[str, list[RunSource]]) -> list[Candidate]:
    """Entries for the Ascend runs in ``folder`` (name -> its RunSources): one job entry for several."""
    runs = {name: sources for name, sources in runs.items() if inside(base, folder / name) is not None}
    if not runs:
        return []
    files = {name: [f for source in sources for f in source.sources()] for name, sources in runs.items()}
    kinds = {sources[0].kind for sources in runs.values()}
    if len(runs) > 1 and len(kinds) == 1 and kinds <= {"torch_npu", "msprof"}:    # one directory per rank
        return [_candidate(base, folder.resolve(), f"{kinds.pop()} job", [f for fs in files.values() for f in fs])]
    return [_candidate(base, (folder / name).resolve(), f"{sources[0].kind} run", files[name])
            for name, sources in runs.items()]


def _manifest_rank(run: Path) -> int | None:
    try:
        rank = json.loads((run / layout.MANIFEST).read_text(encoding="utf-8")).get("rank")
    except (OSError, ValueError, AttributeError):
        return None
    return rank if type(rank) is int else None


def _trace_entries(base: Path, folder: Path, names: list[str]) -> list[Candidate]:
    traces = []
    for name in names:
        path = inside(base, folder / name)
        if path is not None and path.is_file() and is_kineto_trace(path):
            traces.append(path)
    ranks = [_rank_in_name(path.name) for path in traces]
    if len(traces) > 1 and None not in ranks and len(set(ranks)) == len(ranks):
        return [_candidate(base, folder, "torch.profiler job", traces)]
    return [_candidate(base, path, "torch.profiler trace", [path]) for path in traces]


def _rank_in_name(name: str) -> int | None:
    found = _RANK_IN_NAME.search(name)
    return int(found.group(1)) if found else None
