"""Ingest: find the runs under a path, read each with the reader for its format, cache the tables.

Formats (``registry.READERS``, each a ``Reader``: common/reader.py): perfsight's own PROF_ run directories;
plain torch.profiler/Kineto traces (``*.pt.trace.json[.gz]`` or any chrome-trace JSON); torch_npu output
(``*_ascend_pt``/``*_ascend_ms`` with ASCEND_PROFILER_OUTPUT/, its .db export preferred when present); msprof
PROF_ directories (no perfsight manifest); MindSpore's legacy flat folder (one run per rank found in it).
Finding runs is ``registry`` (``find_runs``, ``runs_below``), merging a job's ranks ``jobs``; this module
loads a run's tables through its Parquet cache (``load``), and what was found at a path as one run
(``load_runs``: a job's ranks merged, the folders beside them skipped said in its warnings). A new format
is one reader module plus one entry in ``registry.READERS`` (docs/readers.md).
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from perfsight.core.errors import PerfsightError
from perfsight.core.tables import RunTables
from perfsight.ingest import cache
from perfsight.ingest.common.reader import RunSource
from perfsight.ingest.jobs import merge
from perfsight.ingest.registry import find_runs, runs_below, skipped_beside

__all__ = ["NOT_READ", "RunSource", "find_runs", "load", "load_runs", "runs_below", "skipped_beside",
           "system_allocator"]


def load_runs(path: Path, runs: list[RunSource], *, use_cache: bool = True) -> RunTables:
    """The tables of ``runs`` found at ``path`` (one run, or the ranks of one job merged: ``jobs.merge``), their
    warnings ending with the ranks that could not be read and the entries beside them that were skipped
    (``registry.skipped_beside``: each named with what it is and what it lacks), which meta ``NOT_READ`` also
    lists alone. A rank that cannot be read
    (its reader's PerfsightError) is left out of a job and named, as ``perfsight cluster`` leaves out a failed
    rank: one damaged rank never takes the job down; a job none of whose ranks can be read raises the first
    rank's error."""
    loaded, failed = [], []
    for run in runs:
        try:
            loaded.append((str(run.path), load(run, use_cache=use_cache)))
        except PerfsightError as error:
            if len(runs) == 1:
                raise
            failed.append((str(run.path), error))
    if not loaded:
        raise failed[0][1]
    tables = loaded[0][1] if len(loaded) == 1 else merge(loaded)
    skipped = [f"{Path(name).name} not read: {error}" for name, error in failed] + skipped_beside(path, runs)
    if not skipped:
        return tables
    return tables.with_meta({"parse_warnings": json.loads(tables.meta_dict().get("parse_warnings") or "[]") + skipped,
                             NOT_READ: skipped})


#: the meta key of what was found at a run's path and not read (ranks that failed, entries skipped beside them)
NOT_READ = "not_read"


def load(run: RunSource, *, use_cache: bool = True, write_cache: bool = True) -> RunTables:
    """The canonical tables of one run, from its Parquet cache when valid, else parsed (and cached, unless
    ``write_cache`` is false: not for a reader whose read is cheaper than the cache's, ``Reader.cached``)."""
    # fingerprinted before reading: a change meanwhile is stale
    stamp = cache.fingerprint(run.sources()) if use_cache and run.reader.cached else None
    with system_allocator():
        if stamp is not None:
            cached = cache.read(run.cache_dir, stamp)
            if cached is not None:
                return cached
        tables = run.read()
        if stamp is not None and write_cache:
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
