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

from perfsight.core.errors import PerfsightError
from perfsight.ingest.common import progress
from perfsight.run import Run, open_sources
from perfsight.views.insight.discovery import Candidate, confine, discover

log = logging.getLogger("perfsight.views.insight")


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

    def as_dict(self) -> dict:
        c = self.candidate
        done = self.status in ("ready", "error")
        fraction = 1.0 if done else (min(self.bytes_done / self.bytes_total, 0.99) if self.bytes_total else 0.0)
        return {"id": c.id, "path": c.relpath, "kind": c.kind, "size_bytes": self.bytes_total,
                "status": self.status, "progress": round(fraction, 3), "error": self.error,
                "steps": self.steps, "ranks": self.ranks, "slices": self.slices,
                "parse_warnings": self.warnings, "parse_seconds": self.parse_seconds}


class LoadedRun:
    """An open run: its list entry, the run and its tables (whose memo keeps what the pages compute)."""

    def __init__(self, entry: Entry, run: Run):
        self.entry, self.run, self.tables = entry, run, run.tables


class RunLibrary:
    def __init__(self, base: Path, *, workers: int = 1, max_open: int = 2, rescan_seconds: float = 5.0):
        self.base = Path(base).resolve()
        self.rescan_seconds = rescan_seconds
        self.max_open = max_open
        self._entries: dict[str, Entry] = {}
        self._open: OrderedDict[str, LoadedRun] = OrderedDict()
        self._opening: dict[str, Future] = {}       # run id -> the reopening that requests wait for
        self._lock = threading.RLock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="perfsight-parse")
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
                del self._entries[gone]
                self._open.pop(gone, None)
            for run_id, candidate in found.items():
                fingerprint = candidate.fingerprint()
                entry = self._entries.get(run_id)
                if entry is not None and entry.fingerprint == fingerprint:
                    continue
                entry = self._entries[run_id] = Entry(candidate, fingerprint,
                                                      bytes_total=sum(size or 0 for _, size, _ in fingerprint))
                self._open.pop(run_id, None)
                self._pool.submit(self._parse, entry)
            self._scanned_at = time.monotonic()

    def entries(self) -> list[dict]:
        if time.monotonic() - self._scanned_at > self.rescan_seconds:
            self.scan()
        with self._lock:
            return [entry.as_dict() for entry in sorted(self._entries.values(), key=lambda e: e.candidate.relpath)]

    def entry(self, run_id: str) -> Entry | None:
        with self._lock:
            return self._entries.get(run_id)

    # --- parsing and opening ------------------------------------------------------------------------------

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
        except PerfsightError as error:
            entry.status, entry.error = "error", str(error)
            return
        except Exception as error:  # noqa: BLE001 - one broken run must not break the list
            log.exception("parsing %s failed", entry.candidate.path)
            entry.status, entry.error = "error", f"perfsight could not read this run ({type(error).__name__}: {error})"
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
        with self._lock:
            entry = self._entries.get(run_id)
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
            if self._entries.get(run_id) is not loaded.entry:
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
