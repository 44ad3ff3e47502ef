"""The runs insight serves: their list and status, parsing in the background, and the open runs.

``RunLibrary`` rescans the summary-base-dir (on a timer and when the list is asked for), so runs that
appear while the server runs show up without a restart, and runs whose files change are parsed again.
Parsing (``perfsight.run.open_sources`` of what discovery found, which writes the Parquet cache beside
the run, after ``discovery.confine`` found no link out of the base directory) happens once per run, in a
pool of ``workers`` threads, reporting bytes read as progress. A run that fails to parse keeps its error
on its own entry; the others are unaffected.

Open runs (their tables, and what pages computed from them: the tables' memo, ``core.memo``) are kept for
the ``max_open`` most recently used runs; others are reopened from their cache when asked for again (once,
however many requests ask at the same time), so the server's memory is bounded by a few runs whatever
the number of runs under the directory.

A job of more than ``cluster_ranks`` ranks (``cluster.WHOLE_JOB_RANKS`` by default) is never merged: it is mapped rank
by rank (``perfsight.mapreduce.analyse_job`` on ``engine_for(workers=map_workers)``, its store beside the job as
``perfsight cluster`` makes it, a fresh store reused: its ranks are not read again) in a thread of its own,
the entry's progress the ranks done of the total; then ``prepare_job`` (set by the server: the Cluster page's
analyses, computed once into the Job's memo) runs on its ``Job``, and the entry is ready. Its pages read
only that Job (``LoadedRun.job``; asking for its ``tables`` is ``NotMerged``); each of its ranks is an entry
of its own (``rank_entries``: not in the list, found by id, parsed when first asked for), its pages the
rank's alone.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from perfsight.analysis.job import Job
from perfsight.core.errors import PerfsightError
from perfsight.core.numbers import number_runs
from perfsight.ingest.common import progress
from perfsight.mapreduce import WHOLE_JOB_RANKS, ClusterJob, analyse_job, holding_store, output_root
from perfsight.mapreduce.engines import engine_for
from perfsight.mapreduce.map import FAILED, RankOutcome
from perfsight.run import Run, open_sources
from perfsight.views.insight.discovery import Candidate, confine, discover, rank_candidate

log = logging.getLogger("perfsight.views.insight")
#: an entry's modes: its tables merged and every page, or its ranks' summaries and the Cluster page
MERGED, CLUSTER = "merged", "cluster"


class NotMerged(Exception):
    """A page asked for the merged tables of a job analysed rank by rank (``entry``)."""

    def __init__(self, entry: Entry):
        super().__init__(entry.candidate.relpath)
        self.entry = entry


class RunNotReady(Exception):
    """The run is queued, parsing, or failed to parse; ``entry`` says which."""

    def __init__(self, entry: Entry):
        super().__init__(entry.status)
        self.entry = entry


@dataclass
class Entry:
    """One row of the run list and the state of its parse."""

    candidate: Candidate
    fingerprint: tuple
    status: str = "queued"          # queued | parsing | ready | error
    error: str | None = None
    bytes_done: int = 0
    bytes_total: int = 0
    parse_seconds: float | None = None
    steps: list[int] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    slices: int | None = None
    warnings: int = 0
    mode: str = MERGED
    job_id: str | None = None           # a rank of a job mapped rank by rank: the job's entry id
    ranks_done: int = 0                 # mode CLUSTER: ranks mapped (read, found stored, or failed) ...
    ranks_total: int = 0                # ... of the job's ranks found
    phase: str | None = None            # mode CLUSTER: "mapping ranks", "reducing"
    cluster: ClusterJob | None = None
    rank_ids: dict[int, str] = field(default_factory=dict)    # mode CLUSTER: rank -> its own entry's id
    submitted: bool = False             # its parse was handed to a pool

    def as_dict(self) -> dict:
        c = self.candidate
        done = self.status in ("ready", "error")
        if done:
            fraction = 1.0
        elif self.mode == CLUSTER:
            fraction = min(self.ranks_done / self.ranks_total, 0.99) if self.ranks_total else 0.0
        else:
            fraction = min(self.bytes_done / self.bytes_total, 0.99) if self.bytes_total else 0.0
        failed = [{"name": o.name, "error": o.error} for o in self.cluster.failed] if self.cluster else []
        return {"id": c.id, "path": c.relpath, "kind": c.kind, "size_bytes": self.bytes_total,
                "status": self.status, "progress": round(fraction, 3), "error": self.error,
                "steps": self.steps, "ranks": self.ranks,
                "ranks_as_ranges": number_runs(self.ranks) if self.ranks else None, "slices": self.slices,
                "parse_warnings": self.warnings, "parse_seconds": self.parse_seconds, "mode": self.mode,
                "job": self.job_id, "ranks_done": self.ranks_done, "ranks_total": self.ranks_total,
                "phase": self.phase, "failed_ranks": failed}


class LoadedRun:
    """An open run: its list entry, the run and its tables (whose memo keeps what the pages compute); or a job
    mapped rank by rank: its entry and ``ClusterJob``, with no tables."""

    def __init__(self, entry: Entry, run: Run | None = None, cluster: ClusterJob | None = None):
        self.entry, self.run, self.cluster = entry, run, cluster

    @property
    def tables(self):
        """The run's tables (NotMerged for a job mapped rank by rank)."""
        if self.run is None:
            raise NotMerged(self.entry)
        return self.run.tables

    @property
    def job(self) -> Job:
        """The job's ranks' summaries, which the cross-rank analyses read (``analysis/job.py``)."""
        return self.cluster.job if self.cluster is not None else self.run.job


def _failed(entry: Entry, error: Exception, doing: str) -> None:
    """Mark ``entry`` failed: a PerfsightError's message as it is; anything else logged with its traceback and
    said as what perfsight could not do (``doing``: "read this run", "map this job")."""
    if isinstance(error, PerfsightError):
        message = str(error)
    else:
        log.error("could not %s: %s", doing, entry.candidate.path, exc_info=error)
        message = f"perfsight could not {doing} ({type(error).__name__}: {error})"
    entry.status, entry.error = "error", message


class RunLibrary:
    def __init__(self, base: Path, *, workers: int = 1, max_open: int = 2, rescan_seconds: float = 5.0,
                 cluster_ranks: int = WHOLE_JOB_RANKS, map_workers: int | None = None):
        self.base = Path(base).resolve()
        self.rescan_seconds = rescan_seconds
        self.max_open = max_open
        self.cluster_ranks, self.map_workers = cluster_ranks, map_workers
        #: what is computed on a mapped job's Job before it is ready (the server sets the Cluster page's)
        self.prepare_job: Callable[[Job], None] = lambda job: None
        self._entries: dict[str, Entry] = {}
        self._rank_entries: dict[str, Entry] = {}   # the ranks of jobs mapped rank by rank, by id
        self._open: OrderedDict[str, LoadedRun] = OrderedDict()
        self._opening: dict[str, Future] = {}       # run id -> the reopening that requests wait for
        self._lock = threading.RLock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="perfsight-parse")
        self._maps = ThreadPoolExecutor(max_workers=1, thread_name_prefix="perfsight-cluster")
        self._scanned_at = 0.0
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Scan now and keep rescanning in the background until ``close``."""
        self.scan()
        self._watcher = threading.Thread(target=self._watch, name="perfsight-rescan", daemon=True)
        self._watcher.start()

    def close(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._maps.shutdown(wait=False, cancel_futures=True)

    def _watch(self) -> None:
        while not self._stop.wait(self.rescan_seconds):
            try:
                self.scan()
            except Exception:  # noqa: BLE001 - the watcher must outlive one bad scan
                log.exception("rescanning %s failed", self.base)

    # --- the list ---------------------------------------------------------------------------------------

    def scan(self) -> None:
        """Find the runs now under the base dir: add new ones, re-parse changed ones, drop vanished ones."""
        found = {c.id: c for c in discover(self.base)}
        with self._lock:
            for gone in set(self._entries) - set(found):
                self._forget(gone)
            for run_id, candidate in found.items():
                fingerprint = candidate.fingerprint()
                entry = self._entries.get(run_id)
                if entry is not None and entry.fingerprint == fingerprint:
                    continue
                self._forget(run_id)
                mapped = candidate.kind.endswith(" job") and len(candidate.runs) > self.cluster_ranks
                entry = self._entries[run_id] = Entry(candidate, fingerprint, submitted=True,
                                                      bytes_total=sum(size or 0 for _, size, _ in fingerprint),
                                                      mode=CLUSTER if mapped else MERGED)
                if mapped:
                    self._maps.submit(self._map, entry)
                else:
                    self._pool.submit(self._parse, entry)
            self._scanned_at = time.monotonic()

    def _forget(self, run_id: str) -> None:
        """Drop the entry ``run_id`` (gone, or changed), its open run and its ranks' entries."""
        entry = self._entries.pop(run_id, None)
        self._open.pop(run_id, None)
        for rank_id in entry.rank_ids.values() if entry is not None else ():
            self._rank_entries.pop(rank_id, None)
            self._open.pop(rank_id, None)

    def entries(self) -> list[dict]:
        if time.monotonic() - self._scanned_at > self.rescan_seconds:
            self.scan()
        with self._lock:
            return [entry.as_dict() for entry in sorted(self._entries.values(), key=lambda e: e.candidate.relpath)]

    def entry(self, run_id: str) -> Entry | None:
        """The entry ``run_id``: a listed run, or a rank of a job mapped rank by rank (whose parse starts when it
        is first asked for)."""
        with self._lock:
            entry = self._entries.get(run_id) or self._rank_entries.get(run_id)
            if entry is not None and not entry.submitted:
                entry.submitted = True
                self._pool.submit(self._parse, entry)
            return entry

    # --- parsing and opening ------------------------------------------------------------------------------

    def _map(self, entry: Entry) -> None:
        """Map the job of ``entry`` rank by rank and prepare its Job (module docstring)."""
        if self._stop.is_set() or self.entry(entry.candidate.id) is not entry:
            return
        entry.status, entry.phase = "parsing", "mapping ranks"
        started = time.perf_counter()

        def begun(total: int) -> None:
            entry.ranks_total = total

        def arrived(outcome: RankOutcome) -> None:
            entry.ranks_done += 1

        try:
            confine(self.base, entry.candidate)
            with holding_store(output_root(entry.candidate.path)):
                cluster = analyse_job(entry.candidate.path, engine=engine_for(workers=self.map_workers),
                                      on_start=begun, on_outcome=arrived)
                entry.phase = "reducing"
                self.prepare_job(cluster.job)
        except Exception as error:  # noqa: BLE001 - one broken job must not break the list
            _failed(entry, error, "map this job")
            return
        sources = {str(source.path): source for source in entry.candidate.runs}
        ranks = {outcome.rank: sources[outcome.name] for outcome in cluster.outcomes
                 if outcome.status != FAILED and outcome.rank is not None and outcome.name in sources}
        with self._lock:
            if self._entries.get(entry.candidate.id) is not entry:
                return                                # superseded while it was mapping
            for rank, source in sorted(ranks.items()):
                candidate = rank_candidate(self.base, entry.candidate, source, rank)
                self._rank_entries[candidate.id] = Entry(candidate, candidate.fingerprint(), job_id=entry.candidate.id,
                                                         bytes_total=candidate.size_bytes())
                entry.rank_ids[rank] = candidate.id
        entry.cluster, entry.ranks = cluster, cluster.ranks
        entry.warnings = len(cluster.failed) + len(cluster.warnings)
        entry.parse_seconds = round(time.perf_counter() - started, 3)
        entry.status, entry.phase = "ready", None

    def _parse(self, entry: Entry) -> None:
        if self._stop.is_set() or self.entry(entry.candidate.id) is not entry:
            return                                    # stopped, or superseded by a newer scan
        entry.status = "parsing"
        started = time.perf_counter()

        def advance(nbytes: int) -> None:
            entry.bytes_done += nbytes

        try:
            with progress.reporting(advance):
                run = self._read(entry.candidate)
        except Exception as error:  # noqa: BLE001 - one broken run must not break the list
            _failed(entry, error, "read this run")
            return
        entry.steps, entry.ranks = run.steps, run.ranks
        entry.slices = run.tables.slices.num_rows
        entry.warnings = len(_parse_warnings(run))
        entry.parse_seconds = round(time.perf_counter() - started, 3)
        entry.status = "ready"
        self._keep_open(LoadedRun(entry, run))

    def _read(self, candidate: Candidate) -> Run:
        """The run's tables: what discovery listed for it, once ``confine`` has found no link leaving the
        base directory."""
        confine(self.base, candidate)
        return open_sources(candidate.path, candidate.runs)

    def get(self, run_id: str) -> LoadedRun | None:
        """The open run (reopened from its cache if it was closed); None for an unknown id. Requests that
        arrive while a run is being reopened wait for that one opening (one read and one memo per run).

        Raises RunNotReady while the run is queued or parsing, or when it failed."""
        entry = self.entry(run_id)
        if entry is not None and entry.cluster is not None:
            return LoadedRun(entry, cluster=entry.cluster)
        with self._lock:
            if entry is None:
                return None
            loaded = self._open.get(run_id)
            if loaded is not None:
                self._open.move_to_end(run_id)
                return loaded
            if entry.status != "ready":
                raise RunNotReady(entry)
            opening = self._opening.get(run_id)
            mine = opening is None
            if mine:
                opening = self._opening[run_id] = Future()
        if not mine:
            return opening.result()
        try:
            opening.set_result(self._keep_open(LoadedRun(entry, self._read(entry.candidate))))
        except PerfsightError as error:             # the run changed on disk since it was parsed
            entry.status, entry.error = "error", str(error)
            opening.set_exception(RunNotReady(entry))
        except BaseException as error:
            opening.set_exception(error)
        finally:
            with self._lock:
                del self._opening[run_id]
        return opening.result()

    def _keep_open(self, loaded: LoadedRun) -> LoadedRun:
        with self._lock:
            run_id = loaded.entry.candidate.id
            if (self._entries.get(run_id) or self._rank_entries.get(run_id)) is not loaded.entry:
                return loaded                         # superseded while it was opening
            self._open[run_id] = loaded
            self._open.move_to_end(run_id)
            while len(self._open) > self.max_open:
                self._open.popitem(last=False)
            return loaded


def _parse_warnings(run: Run) -> list:
    try:
        return json.loads(run.meta.get("parse_warnings") or "[]")
    except ValueError:
        return []
