"""The map of a cluster analysis: one rank read alone and reduced to its summaries, stored as Parquet.

``map_rank(RankTask)`` runs in a worker (a local process, or a Ray task on any node): it reads the rank's
files through the run cache (``ingest.load``), sets the rank on its tables (``jobs.rank_said``: what its
tables say, else its name), computes every per-rank summary (``analysis/job_summaries.SUMMARIES``) and
writes them into the rank's folder of the store, ``<store>/ranks/<name>-<hash>/<summary>.parquet``, with a
fingerprint (``ingest/cache``: written whole or not at all, only ever replacing a folder perfsight wrote).
The fingerprint is the rank's files' (``cache.fingerprint``: their paths, sizes, mtimes and head and tail
hashes, and the readers' code) plus the analysis code's (``summary_code``), so a rank whose files and
perfsight did not change is not read again (``cached``). A rank that cannot be read comes back ``failed``
with the reason (``PerfsightError``'s message, else the exception's type and message), never raised: the job
goes on without it. Every value crossing to and from a worker is a small picklable record.
"""
from __future__ import annotations

import functools
import hashlib
import re
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from perfsight import ingest
from perfsight.analysis.job_summaries import SUMMARIES, summarise
from perfsight.core.errors import PerfsightError
from perfsight.core.tables import new_connection
from perfsight.ingest import cache
from perfsight.ingest.common.reader import RunSource
from perfsight.ingest.jobs import as_rank, rank_said

#: the store's folder of per-rank summaries
RANKS_FOLDER = "ranks"
#: outcomes of a rank's task
DONE, CACHED, FAILED = "done", "cached", "failed"
#: characters kept of a source's name in its folder's name (the rest is a hash of its path)
NAME_CHARACTERS = 48


@dataclass(frozen=True)
class RankTask:
    """One rank to map: its source and the store its summaries go to."""

    source: RunSource
    store: Path
    use_cache: bool = True


@dataclass(frozen=True)
class RankOutcome:
    """What mapping one rank did (module docstring); ``seconds`` of wall time in the worker and the worker
    process's peak RSS after it."""

    name: str
    rank: int | None
    status: str
    error: str | None
    seconds: float
    peak_rss_bytes: int


@functools.cache
def summary_code() -> str:
    """A hash of the analysis code the summaries come from (``SUMMARY_CODE`` in a fingerprint)."""
    package = Path(__file__).resolve().parents[1] / "analysis"
    digest = hashlib.sha1()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def rank_folder(store: Path, source: RunSource) -> Path:
    """The folder of ``source``'s summaries in ``store``: its name's readable part and a hash of its resolved
    path, its rank (for a folder holding several ranks' files) and its reader (a rank read light or whole)."""
    key = f"{source.path.resolve()}\0{source.rank}\0{source.reader.name}"
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", source.path.name)[:NAME_CHARACTERS]
    return store / RANKS_FOLDER / f"{readable}-{hashlib.sha1(key.encode()).hexdigest()[:12]}"


def stamp(source: RunSource) -> dict:
    """The fingerprint of a rank's summaries: its files' and the code's (module docstring)."""
    return {**cache.fingerprint(source.sources()), "summary_code": summary_code()}


def stored_rank(folder: Path) -> int | None:
    """The rank a rank folder's summaries are of."""
    ranks = pq.ParquetFile(folder / "rank_facts.parquet").read(columns=["rank"]).column("rank").to_pylist()
    return ranks[0] if ranks else None


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


@functools.cache
def _worker_process() -> None:
    """Set a worker process up once: its DuckDB runs one thread (a worker is one of as many as the cores:
    DuckDB's own threads only contend with the other workers; ~10-15% less CPU per rank)."""
    new_connection().execute("SET threads TO 1")


def map_rank(task: RankTask) -> RankOutcome:
    """Read one rank and store its summaries, or find them stored (module docstring). Runs in a worker
    process (``engines``), never in the driver: it sets the worker's DuckDB to one thread."""
    _worker_process()
    began, name = time.perf_counter(), str(task.source.path)
    folder = rank_folder(task.store, task.source)

    def outcome(rank: int | None, status: str, error: str | None = None) -> RankOutcome:
        return RankOutcome(name, rank, status, error, time.perf_counter() - began, _peak_rss_bytes())

    try:
        fingerprint = stamp(task.source)
        if task.use_cache and cache.valid(folder, fingerprint, list(SUMMARIES)):
            return outcome(stored_rank(folder), CACHED)
        tables = ingest.load(task.source, use_cache=task.use_cache)
        rank = rank_said(name, tables)
        if rank is None:
            return outcome(None, FAILED, "it does not say its rank, in its data or its name")
        summaries = summarise(as_rank(tables, rank).with_meta({"source": name}))
        del tables
        cache.wait()                    # the run cache's write of this rank, before the next rank is read
        folder.parent.mkdir(parents=True, exist_ok=True)
        if not cache.write(folder, fingerprint, summaries):
            return outcome(rank, FAILED, f"its summaries could not be written to {folder}")
        return outcome(rank, DONE)
    except PerfsightError as error:
        return outcome(None, FAILED, str(error))
    except Exception as error:          # noqa: BLE001 - a reader's bug on one rank must not stop the job
        return outcome(None, FAILED, f"{type(error).__name__}: {error}")
