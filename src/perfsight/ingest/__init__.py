"""Ingest: find the runs under a path, read each with the reader for its format, cache the tables.

Formats: perfsight's own PROF_ run directories; plain torch.profiler/Kineto traces (``*.pt.trace.json[.gz]``
or any chrome-trace JSON); torch_npu output (``*_ascend_pt``/``*_ascend_ms`` with ASCEND_PROFILER_OUTPUT/,
its .db export preferred when present); msprof PROF_ directories (no perfsight manifest); MindSpore's
legacy flat profiler folder (one run per rank found in it). A new format is one reader module plus one
entry in ``RunSource`` and ``find_runs``.
"""
from __future__ import annotations

import contextlib
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from perfsight.core import layout
from perfsight.core.errors import InputError
from perfsight.core.files import file_kind
from perfsight.core.tables import RunTables
from perfsight.ingest import cache
from perfsight.ingest.ascend.detect import find_torch_npu_db, is_mindspore_legacy_dir, is_msprof_dir, is_torch_npu_dir, ranks_in

#: RunSource kinds whose run is a directory (their cache and exports go inside it)
DIRECTORY_KINDS = ("perfsight", "torch_npu", "msprof", "mindspore")


@dataclass(frozen=True)
class RunSource:
    """One run found on disk: how to read it and where its cache and exports go."""

    kind: str            # "perfsight" | "kineto" | "torch_npu" | "msprof" | "mindspore"
    path: Path           # the run directory, or the trace file
    rank: int | None = None   # MindSpore's flat folder holds every rank's files: which one this run is

    @property
    def cache_dir(self) -> Path:
        if self.kind == "mindspore":
            return self.path / f"{layout.CACHE_DIR}_rank{self.rank}"
        if self.kind in DIRECTORY_KINDS:
            return self.path / layout.CACHE_DIR
        return self.path.with_name(self.path.name + "." + layout.CACHE_DIR)

    @property
    def default_output_dir(self) -> Path:
        if self.kind == "mindspore":
            return self.path / layout.OUTPUT_DIR / f"rank{self.rank}"
        if self.kind in DIRECTORY_KINDS:
            return self.path / layout.OUTPUT_DIR
        return self.path.parent / layout.OUTPUT_DIR / _trace_stem(self.path)

    def sources(self) -> list[Path]:
        if self.kind == "perfsight":
            from perfsight.ingest.kineto.perfsight_run import sources

            return sources(self.path)
        if self.kind == "torch_npu":
            from perfsight.ingest.ascend import torch_npu_db, torch_npu_text

            reader = torch_npu_db if find_torch_npu_db(self.path) else torch_npu_text
            return reader.sources(self.path)
        if self.kind == "msprof":
            from perfsight.ingest.ascend.msprof_dir import msprof_sources

            return msprof_sources(self.path)
        if self.kind == "mindspore":
            from perfsight.ingest.ascend.mindspore_legacy import legacy_sources

            return legacy_sources(self.path, self.rank)
        return [self.path]

    def read(self) -> RunTables:
        if self.kind == "perfsight":
            from perfsight.ingest.kineto.perfsight_run import read_run

            return read_run(self.path)
        if self.kind == "torch_npu":
            from perfsight.ingest.ascend.torch_npu_db import read_torch_npu_db
            from perfsight.ingest.ascend.torch_npu_text import read_torch_npu_text

            return (read_torch_npu_db if find_torch_npu_db(self.path) else read_torch_npu_text)(self.path)
        if self.kind == "msprof":
            from perfsight.ingest.ascend.msprof_dir import read_msprof_dir

            return read_msprof_dir(self.path)
        if self.kind == "mindspore":
            from perfsight.ingest.ascend.mindspore_legacy import read_mindspore_legacy

            return read_mindspore_legacy(self.path, rank=self.rank)
        from perfsight.ingest.kineto.reader import read_kineto

        return read_kineto([self.path])


def _trace_stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    return name


def ascend_runs_at(folder: Path) -> list[RunSource]:
    """The Ascend run ``folder`` itself is (one per rank for MindSpore's flat folder), or []."""
    if is_torch_npu_dir(folder) or find_torch_npu_db(folder):
        return [RunSource("torch_npu", folder)]
    if is_msprof_dir(folder):
        return [RunSource("msprof", folder)]
    if is_mindspore_legacy_dir(folder):
        return [RunSource("mindspore", folder, rank) for rank in ranks_in(folder)]
    return []


def ascend_runs(path: Path) -> list[RunSource]:
    """The Ascend runs at ``path``: itself, or its subdirectories (one per rank of a job)."""
    found = ascend_runs_at(path)
    if not found:
        for child in sorted(p for p in path.iterdir() if p.is_dir()):
            if child.name not in (layout.CACHE_DIR, layout.OUTPUT_DIR):
                found += ascend_runs_at(child)
    return found


def find_runs(path: Path) -> list[RunSource]:
    """The runs at ``path``: a run directory (perfsight or Ascend), a trace file, or a directory holding
    them (one level: the ranks of one job)."""
    from perfsight.ingest.kineto.reader import is_kineto_trace

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
        if is_kineto_trace(path):
            return [RunSource("kineto", path)]
        raise InputError(f"{path}: not a run perfsight can read; expected a PROF_ directory, "
                         "a torch.profiler trace (*.pt.trace.json[.gz]) or a folder holding them")
    try:
        runs = _runs_in_folder(path)
    except OSError as error:
        raise InputError(f"{path}: cannot list the folder ({error.strerror or error})") from None
    if not runs:
        raise InputError(f"{path}: holds no run perfsight can read; expected a PROF_ directory (with "
                         "manifest.json), a parent of PROF_ directories, torch.profiler trace files, or "
                         "Ascend profiler output (*_ascend_pt / ASCEND_PROFILER_OUTPUT, msprof PROF_ "
                         "directories, MindSpore profiler files)" + _deeper_hint(path))
    return runs


def _runs_in_folder(path: Path) -> list[RunSource]:
    from perfsight.ingest.kineto.reader import is_kineto_trace

    runs = [RunSource("perfsight", p) for p in layout.find_run_dirs(path)]
    if not runs:
        runs = ascend_runs(path)
    if not runs:
        runs = [RunSource("kineto", p) for p in sorted(path.iterdir()) if p.is_file() and is_kineto_trace(p)]
    return runs


DEEPER_LEVELS = 4      # how many folder levels below a folder without runs are searched for some
DEEPER_FOLDERS = 2000  # how many folders that search looks into at most
DEEPER_SHOWN = 6       # how many of the folders found the error message names


def runs_below(path: Path) -> dict[Path, list[RunSource]]:
    """The runs in the folders below ``path`` (a folder without runs of its own; the seed's runs/<job>/PROF_*):
    breadth first, ``DEEPER_LEVELS`` levels, not below a folder with runs, nor into perfsight's own cache and
    output folders, hidden folders or symlinked folders; {folder: its runs}."""
    found: dict[Path, list[RunSource]] = {}
    level, looked = [path], 0
    for _ in range(DEEPER_LEVELS):
        level = [child for folder in level for child in _subfolders(folder)][:DEEPER_FOLDERS - looked]
        looked += len(level)
        without_runs = []
        for folder in level:
            with contextlib.suppress(InputError, OSError):
                runs = _runs_in_folder(folder)
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


def _subfolders(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()
                      and p.name not in (layout.CACHE_DIR, layout.OUTPUT_DIR) and not p.name.startswith("."))
    except OSError:
        return []


def load(run: RunSource, *, use_cache: bool = True) -> RunTables:
    """The canonical tables of one run, from its Parquet cache when valid, else parsed (and cached)."""
    stamp = cache.fingerprint(run.sources()) if use_cache else None  # before reading: a change meanwhile is stale
    with system_allocator():
        if stamp is not None:
            cached = cache.read(run.cache_dir, stamp)
            if cached is not None:
                return cached
        tables = run.read()
        if stamp is not None:
            cache.write_in_background(run.cache_dir, stamp, tables)
    return tables


@contextlib.contextmanager
def system_allocator() -> Iterator[None]:
    """Allocate Arrow memory with malloc while reading: Arrow's default pool (mimalloc) keeps what a
    read frees, which raised the peak by ~20% (bench/RESULTS.md). Buffers remember their pool, so
    tables made here stay valid after the previous pool is restored."""
    previous = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(previous)
