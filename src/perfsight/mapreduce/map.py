"""The map of a cluster analysis: batches of ranks, each read and reduced to its ranks' summaries, stored as
Parquet.

``batches(sources)`` cuts a job's ranks into batches of at most ``BATCH_RANKS`` ranks and ``BATCH_BYTES`` of
files (a larger rank is a batch alone), in the order found. ``map_batch(BatchTask)`` runs in a worker (a local
process, or a Ray task on any node): it reads each rank (``ingest.load``: from the rank's run cache when one is
valid, never writing one, as the batch's summaries are the cluster's cache and writing every rank's tables took
a fifth of a first map), sets
the rank on its tables (``jobs.rank_said``: what its tables say, else its name), stacks the batch's ranks side
by side (``jobs.stack``: each rank summarised as if alone, its own slice ids given back) and computes every
per-rank summary (``analysis/job_summaries.SUMMARIES``) once for the whole batch: the analyses' fixed cost
(their queries) is paid per batch, not per rank. It writes one file per summary into the batch's folder of the
store, ``<store>/ranks/<first name>-<hash>/<summary>.parquet``, with ``OUTCOMES`` (each rank's source, rank,
status, error and fingerprint), all written whole or not at all (``ingest/cache``), only ever replacing a
folder perfsight wrote. A rank's fingerprint is its files' (``cache.fingerprint``: their paths, sizes, mtimes
and head and tail hashes, and the readers' code); the batch's folder is valid for the analysis code that wrote
it (``summary_code``). A rank whose files and perfsight did not change is not read again (``cached``: its rows
are taken from the batch's stored files), so a re-run reads only the ranks that changed. A rank that cannot be
read comes back ``failed`` with the reason (``PerfsightError``'s message, else the exception's type and
message), never raised: the batch goes on without it, and a failed rank is read again next time. A rank said
twice in one batch is kept for its first source (by name); ``BatchTask.excluded`` names sources the driver
found to repeat a rank of another batch. Every value crossing to and from a worker is a small picklable record.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from perfsight import ingest
from perfsight.analysis.job_summaries import SUMMARIES, SUMMARY_SCHEMAS, SUMMARY_SLICE_IDS, summarise
from perfsight.core.errors import PerfsightError
from perfsight.core.tables import RunTables, new_connection
from perfsight.ingest import cache
from perfsight.ingest.common.reader import RunSource
from perfsight.ingest.jobs import as_rank, rank_said, stack

#: the store's folder of the batches' summaries
RANKS_FOLDER = "ranks"
#: outcomes of a rank's task
DONE, CACHED, FAILED = "done", "cached", "failed"
#: characters kept of a source's name in its folder's name (the rest is a hash of its path)
NAME_CHARACTERS = 48
#: the most ranks one map task reads and summarises together: the summaries' queries cost ~25 ms whatever the
#: number of ranks they cover (5 ms a light rank in a batch of 64 against 56 ms alone), and a changed rank
#: costs a re-run only its own read
BATCH_RANKS = 64
#: the most bytes of files one batch reads (its ranks' tables are in the worker's memory at once); a rank
#: larger than this is a batch alone
BATCH_BYTES = 32 * 1024 * 1024
#: the table of each batch's ranks: source name, rank, status, error, fingerprint (JSON)
OUTCOMES = "outcomes"
OUTCOMES_SCHEMA = pa.schema([("source", pa.string()), ("rank", pa.int32()), ("status", pa.string()),
                             ("error", pa.string()), ("stamp", pa.string())])


@dataclass(frozen=True)
class BatchTask:
    """Ranks to map together (``sources``), the store their summaries go to, and the sources to leave out
    (``excluded``: the ``source_key`` of each source whose rank another batch holds)."""

    sources: tuple[RunSource, ...]
    store: Path
    use_cache: bool = True
    excluded: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class RankOutcome:
    """What mapping one rank did (module docstring); ``seconds`` of wall time in the worker (its read and its
    share of the batch's summaries) and the worker process's peak RSS after it."""

    name: str
    rank: int | None
    status: str
    error: str | None
    seconds: float
    peak_rss_bytes: int


@functools.cache
def summary_code() -> str:
    """A hash of the analysis code the summaries come from (``summary_code`` in a batch's fingerprint)."""
    package = Path(__file__).resolve().parents[1] / "analysis"
    digest = hashlib.sha1()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def batches(sources: list[RunSource]) -> list[tuple[RunSource, ...]]:
    """``sources`` cut, in their order, into batches of at most ``BATCH_RANKS`` ranks and ``BATCH_BYTES`` of
    files (module docstring)."""
    cut: list[tuple[RunSource, ...]] = []
    batch: list[RunSource] = []
    held = 0
    for source in sources:
        size = _size(source)
        if batch and (len(batch) == BATCH_RANKS or held + size > BATCH_BYTES):
            cut.append(tuple(batch))
            batch, held = [], 0
        batch.append(source)
        held += size
    return cut + [tuple(batch)] if batch else cut


def _size(source: RunSource) -> int:
    """The bytes of a source's files (0 for one that cannot be listed or sized: its read will say why)."""
    try:
        return sum(path.stat().st_size for path in source.sources())
    except (OSError, PerfsightError):
        return 0


def source_key(source: RunSource) -> str:
    """A source as a batch knows it: its path and its rank (a file holding several ranks is one source a rank)."""
    return str(source.path) if source.rank is None else f"{source.path} (rank {source.rank})"


def batch_folder(store: Path, sources: tuple[RunSource, ...]) -> Path:
    """The folder of a batch's summaries in ``store``: its first source's name's readable part and a hash of
    every source's resolved path, its rank (for a folder holding several ranks' files) and its reader (a rank
    read light or whole)."""
    key = "\n".join(f"{source.path.resolve()}\0{source.rank}\0{source.reader.name}" for source in sources)
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", sources[0].path.name)[:NAME_CHARACTERS]
    return store / RANKS_FOLDER / f"{readable}-{hashlib.sha1(key.encode()).hexdigest()[:12]}"


def batch_stamp(sources: tuple[RunSource, ...]) -> dict:
    """What a batch's folder is valid for: the cache's format, the readers' and the analyses' code and the
    batch's sources (each rank's own fingerprint is in its ``OUTCOMES`` row)."""
    return {"cache_format": cache.CACHE_FORMAT, "code": cache.code_hash(), "summary_code": summary_code(),
            "sources": [source_key(source) for source in sources]}


def rank_stamp(source: RunSource) -> str:
    """A rank's fingerprint (module docstring), as JSON text; the reason when its files cannot be listed."""
    try:
        return json.dumps(cache.fingerprint(source.sources()), sort_keys=True)
    except PerfsightError as error:
        return json.dumps({"error": str(error)})


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


@functools.cache
def _worker_process() -> None:
    """Set a worker process up once: its DuckDB runs one thread (a worker is one of as many as the cores:
    DuckDB's own threads only contend with the other workers; ~10-15% less CPU per rank)."""
    new_connection().execute("SET threads TO 1")


def map_batch(task: BatchTask) -> list[RankOutcome]:
    """Read a batch's ranks (those not stored unchanged) and store the batch's summaries (module docstring);
    one outcome per source, in order. Runs in a worker process (``engines``), never in the driver: it sets the
    worker's DuckDB to one thread."""
    _worker_process()
    folder = batch_folder(task.store, task.sources)
    stamp = batch_stamp(task.sources)
    stored = cache.read_tables(folder, stamp, [*SUMMARIES, OUTCOMES]) if task.use_cache else None
    before = {row["source"]: row for row in stored[OUTCOMES].to_pylist()} if stored else {}
    rows: dict[str, dict] = {}
    seconds: dict[str, float] = {}
    parts: list[tuple[str, int, RunTables]] = []
    kept: list[int] = []                # the ranks whose stored rows are taken unchanged
    ranks_seen: dict[int, str] = {}
    for source in sorted(task.sources, key=lambda source: (str(source.path), source_key(source))):
        key, began, fingerprint = source_key(source), time.perf_counter(), rank_stamp(source)
        old = before.get(key)
        if key in task.excluded:
            row = _row(key, None, FAILED, "left out: its rank is another source's", fingerprint)
        elif old is not None and old["status"] != FAILED and old["stamp"] == fingerprint \
                and old["rank"] not in ranks_seen:
            row = {**old, "status": CACHED}
            kept.append(old["rank"])
        else:
            row = _read(source, fingerprint, task.use_cache, ranks_seen, parts)
        if row["status"] != FAILED:
            ranks_seen[row["rank"]] = str(source.path)
        rows[key], seconds[key] = row, time.perf_counter() - began
    if parts or not stored or set(kept) != {row["rank"] for row in before.values() if row["status"] != FAILED}:
        began = time.perf_counter()
        if not store_batch(task.store, task.sources, _summaries(parts, stored, kept), list(rows.values())):
            why = f"its summaries could not be written to {folder}"
            rows = {key: {**row, "status": FAILED, "error": row["error"] or why} for key, row in rows.items()}
        share = (time.perf_counter() - began) / max(len(parts), 1)
        for key in (key for key, row in rows.items() if row["status"] == DONE):
            seconds[key] += share
    peak = _peak_rss_bytes()
    return [RankOutcome(str(source.path), rows[source_key(source)]["rank"], rows[source_key(source)]["status"],
                        rows[source_key(source)]["error"], seconds[source_key(source)], peak)
            for source in task.sources]


def store_batch(store: Path, sources: tuple[RunSource, ...], summaries: dict[str, pa.Table], rows: list[dict]) -> bool:
    """Write a batch's summaries (``SUMMARY_SCHEMAS``' tables, every rank's rows) and its ``OUTCOMES`` rows
    (``outcome_row``) into its folder of ``store``, whole or not at all; False when they could not be written."""
    folder = batch_folder(store, sources)
    folder.parent.mkdir(parents=True, exist_ok=True)
    outcomes = pa.Table.from_pylist(rows, schema=OUTCOMES_SCHEMA)
    return cache.write(folder, batch_stamp(sources), {**summaries, OUTCOMES: outcomes})


def outcome_row(source: RunSource, rank: int | None, status: str, error: str | None = None,
                stamp: str | None = None) -> dict:
    """A source's ``OUTCOMES`` row; ``stamp``: its fingerprint (``rank_stamp``), taken now when not given."""
    return _row(source_key(source), rank, status, error, rank_stamp(source) if stamp is None else stamp)


def _row(key: str, rank: int | None, status: str, error: str | None, stamp: str) -> dict:
    return {"source": key, "rank": rank, "status": status, "error": error, "stamp": stamp}


def _read(source: RunSource, fingerprint: str, use_cache: bool, ranks_seen: dict[int, str],
          parts: list[tuple[str, int, RunTables]]) -> dict:
    """Read one rank into ``parts``; its ``OUTCOMES`` row."""
    name, key = str(source.path), source_key(source)
    try:
        tables = ingest.load(source, use_cache=use_cache, write_cache=False)
        rank = rank_said(name, tables)
    except PerfsightError as error:
        return _row(key, None, FAILED, str(error), fingerprint)
    except Exception as error:          # noqa: BLE001 - a reader's bug on one rank must not stop the job
        return _row(key, None, FAILED, f"{type(error).__name__}: {error}", fingerprint)
    if rank is None:
        return _row(key, None, FAILED, "it does not say its rank, in its data or its name", fingerprint)
    if rank in ranks_seen:
        return _row(key, rank, FAILED, f"rank {rank} is also {ranks_seen[rank]}'s", fingerprint)
    parts.append((name, rank, as_rank(tables, rank).with_meta({"source": name})))
    return _row(key, rank, DONE, None, fingerprint)


def _summaries(parts: list[tuple[str, int, RunTables]], stored: dict[str, pa.Table] | None,
               kept: list[int]) -> dict[str, pa.Table]:
    """The batch's summaries: those of the ranks read (``parts``, summarised together, each rank's slice ids its
    own again) and the stored rows of the ranks ``kept``."""
    tables = {name: schema.empty_table() for name, schema in SUMMARY_SCHEMAS.items()}
    if parts:
        stacked, offsets = stack(parts)
        tables = _own_slice_ids(summarise(stacked), {rank: offset for (_, rank, _), offset in zip(parts, offsets)})
    if stored and kept:
        ranks = pa.array(kept, pa.int32())
        tables = {name: pa.concat_tables([stored[name].filter(pc.is_in(stored[name]["rank"], value_set=ranks))
                                          .cast(table.schema), table])
                  for name, table in tables.items()}
    return tables


def _own_slice_ids(summaries: dict[str, pa.Table], offsets: dict[int, int]) -> dict[str, pa.Table]:
    """``summaries`` of stacked ranks with each slice id column back to its rank's own ids."""
    ranks = pa.array(list(offsets), pa.int32())
    shifts = pa.array(list(offsets.values()), pa.int64())
    for name, column in SUMMARY_SLICE_IDS.items():
        table = summaries[name]
        shift = shifts.take(pc.index_in(table["rank"], value_set=ranks))
        ids = pc.subtract(table[column], shift.cast(table.schema.field(column).type))
        summaries[name] = table.set_column(table.schema.get_field_index(column), column, ids)
    return summaries
