"""Ingest: find the runs under a path, read each with the reader for its format, cache the tables.

Formats known so far: perfsight's own PROF_ run directories and plain torch.profiler/Kineto traces
(``*.pt.trace.json[.gz]`` or any chrome-trace JSON). A new format is one reader module plus one
entry in ``find_runs``.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from .. import layout
from ..errors import InputError
from ..tables import RunTables
from . import cache


@dataclass(frozen=True)
class RunSource:
    """One run found on disk: how to read it and where its cache and exports go."""

    kind: str            # "perfsight" | "kineto"
    path: Path           # the PROF_ directory or the trace file

    @property
    def cache_dir(self) -> Path:
        if self.kind == "perfsight":
            return self.path / layout.CACHE_DIR
        return self.path.with_name(self.path.name + "." + layout.CACHE_DIR)

    @property
    def default_output_dir(self) -> Path:
        if self.kind == "perfsight":
            return self.path / layout.OUTPUT_DIR
        return self.path.parent / layout.OUTPUT_DIR / _trace_stem(self.path)

    def sources(self) -> list[Path]:
        if self.kind == "perfsight":
            from .perfsight_run import sources

            return sources(self.path)
        return [self.path]

    def read(self) -> RunTables:
        if self.kind == "perfsight":
            from .perfsight_run import read_run

            return read_run(self.path)
        from .kineto import read_kineto

        return read_kineto([self.path])


def _trace_stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    return name


def find_runs(path: Path) -> list[RunSource]:
    """The runs at ``path``: a PROF_ dir, a trace file, or a directory holding either (one level)."""
    from .kineto import is_kineto_trace

    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    if path.is_file():
        if is_kineto_trace(path):
            return [RunSource("kineto", path)]
        raise InputError(f"{path}: not a run perfsight can read; expected a PROF_ directory, "
                         "a torch.profiler trace (*.pt.trace.json[.gz]) or a folder holding them")
    runs = [RunSource("perfsight", p) for p in layout.find_run_dirs(path)]
    if not runs:
        runs = [RunSource("kineto", p) for p in sorted(path.iterdir()) if p.is_file() and is_kineto_trace(p)]
    if not runs:
        raise InputError(f"{path}: holds no run perfsight can read; expected a PROF_ directory (with "
                         "manifest.json), a parent of PROF_ directories, or torch.profiler trace files")
    return runs


def load(run: RunSource, *, use_cache: bool = True) -> RunTables:
    """The canonical tables of one run, from its Parquet cache when valid, else parsed (and cached)."""
    sources = run.sources()
    with system_allocator():
        if use_cache:
            cached = cache.read(run.cache_dir, sources)
            if cached is not None:
                return cached
        tables = run.read()
        if use_cache:
            cache.write(run.cache_dir, sources, tables)
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
