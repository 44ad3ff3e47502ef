"""Cluster analysis as a map-reduce over a job's ranks, for jobs of any size (``perfsight cluster``).

**Map** (``mapreduce/map.py``): the ranks go in batches to the workers of an engine (``mapreduce/engines.py``:
a local process pool by default, or Ray tasks across machines); each rank is read alone and each batch
reduced at once to its ranks' summaries (``analysis/job_summaries.py``), stored as Parquet in the job's store:
``<output>/perfsight_cluster/`` (the output folder defaults to the job's folder; on a cluster, a shared
filesystem carries the files between the nodes). A rank whose files did not change is not read again; a
batch whose worker died is mapped again rank by rank.

**Reduce**: the store's summaries are a ``Job`` (``analysis/job.py``) whose cross-rank analyses (the
collectives' wait and bandwidth, clock offsets, the matrix, the slow rank and link, the step trace of every
rank) are DuckDB queries over the Parquet files, out of core: the driver never holds any rank's slices.
Every figure is the one ``perfsight.open`` gives for the same job opened whole (a slice id is its rank's
own: a job opened whole shifts each rank's ids to keep them unique across the job).

``analyse_job`` finds the ranks (``ingest.find_runs``), maps them, and returns a ``ClusterJob``: the Job, each
rank's outcome (done, cached, failed and why), and the engine's description. A rank that fails is left out
and reported; the rest completes. Two sources saying one rank: the first (by path) is the rank, the others
fail. ``light``: each rank read from only the files its reader's light read takes (``Reader.light``:
torch_npu's text output, its steps and communication as reported, as msprof-analyze's cluster mode reads;
the figures from its traces, kernels and memory are not computed; other formats are read whole). The store
folder is perfsight's (it holds ``STORE_MARKER``); a folder of that name perfsight did not
make is never written into. A command that maps and reduces a job holds its store (``holding_store``) from the
map to its last read, so two runs into one output take turns.
"""
from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from perfsight import ingest
from perfsight.analysis.job import PLACES, Job
from perfsight.analysis.job_summaries import SUMMARY_SCHEMAS
from perfsight.core import layout
from perfsight.core.errors import InputError, OutputError
from perfsight.core.pidlock import holding
from perfsight.core.tables import new_connection
from perfsight.ingest.common.job_groups import group_places
from perfsight.mapreduce.engines import Engine, TaskLost, engine_for
from perfsight.mapreduce.map import (
    CACHED,
    DONE,
    FAILED,
    BatchTask,
    RankOutcome,
    batch_folder,
    batches,
    map_batch,
    source_key,
)
from perfsight.run import Run
from perfsight.run import open as open_run

#: a job of more ranks than this is analysed rank by rank, never merged whole (``perfsight analyse``, insight)
WHOLE_JOB_RANKS = 16

#: the store's folder in the output folder, the file that says perfsight made it, and the lock of the run
#: using it
STORE_FOLDER = layout.CLUSTER_DIR
STORE_MARKER = "perfsight_cluster.json"
STORE_LOCK = "perfsight_cluster.lock"


@dataclass
class ClusterJob:
    """A job analysed by ``analyse_job``: its summaries (``job``), each rank's outcome, and how it ran."""

    path: Path
    store: Path
    job: Job
    outcomes: list[RankOutcome]
    engine: str
    seconds: float
    sources: list[ingest.RunSource] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    light: bool = False

    @property
    def failed(self) -> list[RankOutcome]:
        return [outcome for outcome in self.outcomes if outcome.status == FAILED]

    @property
    def counts(self) -> dict[str, int]:
        """How many ranks were read (done), found stored (cached), and failed."""
        return {status: sum(outcome.status == status for outcome in self.outcomes) for status in (DONE, CACHED, FAILED)}

    def source_of(self, rank: int) -> str | None:
        """The file or folder rank ``rank`` was read from (None for a rank not in the job)."""
        return next((o.name for o in self.outcomes if o.rank == rank and o.status != FAILED), None)

    def open_rank(self, rank: int) -> Run:
        """Rank ``rank`` opened alone, its own tables only (``perfsight.open`` of its source): the drill-down
        from the job's figures to one rank's every analysis."""
        source = self.source_of(rank)
        if source is None:
            raise InputError(f"rank {rank} is not one of the job's ranks read ({_ranks_text(self.ranks)})")
        return open_run(source)

    @property
    def ranks(self) -> list[int]:
        return sorted(outcome.rank for outcome in self.outcomes if outcome.status != FAILED
                      and outcome.rank is not None)


#: the memory DuckDB may hold in a process that reduces a job (``bound_reduce_memory``); more spills to disk
REDUCE_MEMORY_LIMIT = "384MB"
SPILL_FOLDER = "spill"


def bound_reduce_memory(store: Path) -> None:
    """Bound this process's DuckDB to ``REDUCE_MEMORY_LIMIT``, spilling into the store's ``SPILL_FOLDER``
    (perfsight's): for a process whose work is one job's reduce (``perfsight cluster``, ``perfsight analyse``
    of a large job), whose driver stays within its memory whatever the number of ranks. A process-wide setting,
    so a library call (``analyse_job``) does not make it."""
    spill = store / SPILL_FOLDER
    spill.mkdir(exist_ok=True)
    con = new_connection()
    con.execute(f"SET memory_limit = '{REDUCE_MEMORY_LIMIT}'")
    con.execute(f"SET temp_directory = '{spill.as_posix().replace(chr(39), chr(39) * 2)}'")


def _ranks_text(ranks: list[int]) -> str:
    return f"{ranks[0]}-{ranks[-1]}, {len(ranks)} ranks" if ranks else "none"


def store_of(output: Path) -> Path:
    """The store in ``output`` (made, with its marker, if missing); an OutputError if something perfsight did
    not make is there."""
    store = output / STORE_FOLDER
    marker = store / STORE_MARKER
    if store.exists() and not marker.is_file():
        raise OutputError(f"{store} is not a folder perfsight made (it has no {STORE_MARKER}); perfsight will "
                          "not write into it: move it, or give another output folder with -o")
    if not store.exists():
        try:
            store.mkdir(parents=True)
            marker.write_text(json.dumps({"made_by": "perfsight", "holds": "per-rank summaries (Parquet)"}),
                              encoding="utf-8")
        except OSError as error:
            raise OutputError(f"cannot make the cluster store {store}: {error.strerror}") from None
    return store


def output_root(path: Path, output: str | Path | None = None) -> Path:
    """The output folder of the job at ``path``: ``output`` when given, else the job's folder (a trace file's
    folder)."""
    return Path(output) if output is not None else path if path.is_dir() else path.parent


@contextlib.contextmanager
def holding_store(root: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[Path]:
    """The store in ``root`` (``store_of``), held by this process alone while the block runs: a second run
    into the same output (another ``perfsight cluster``, insight mapping the job) waits for the first to
    finish instead of reading summaries the first is replacing; ``on_wait`` is told why it waits (the
    holder's pid). The lock (``STORE_LOCK``, an advisory ``flock``) goes with the process that holds it."""
    store = store_of(root)

    def waiting(holder: str) -> None:
        if on_wait is not None:
            on_wait(f"another perfsight run (pid {holder}) is using {store}; waiting for it to finish")
    with holding(store / STORE_LOCK, wait=True, on_wait=waiting):
        yield store


def _lost(task: BatchTask, lost: TaskLost) -> list[RankOutcome]:
    return [RankOutcome(str(source.path), None, FAILED, lost.why, 0.0, 0) for source in task.sources]


def _one_rank_each(outcomes: list[RankOutcome]) -> list[RankOutcome]:
    """The outcomes with each rank kept for the first source (by name) saying it, the others failed."""
    first: dict[int, str] = {}
    kept = list(outcomes)
    for index, outcome in sorted(enumerate(outcomes), key=lambda item: (item[1].name, item[0])):
        rank = outcome.rank
        if outcome.status != FAILED and rank is not None:
            if rank in first:
                kept[index] = RankOutcome(outcome.name, rank, FAILED, f"rank {rank} is also {first[rank]}'s",
                                          outcome.seconds, outcome.peak_rss_bytes)
            else:
                first[rank] = outcome.name
    return kept


def _map(engine: Engine, tasks: list[BatchTask], on_outcome: Callable[[RankOutcome], None] | None,
         alone_if_lost: bool) -> list[tuple[BatchTask, list[RankOutcome]]]:
    """Every task mapped on ``engine``, with its outcomes; ``alone_if_lost``: a batch whose worker died is
    mapped again rank by rank, so a rank that kills its worker costs only itself."""
    done: dict[int, list[RankOutcome]] = {}

    def arrived(index: int, result: list[RankOutcome] | TaskLost) -> None:
        if isinstance(result, TaskLost) and alone_if_lost and len(tasks[index].sources) > 1:
            return
        done[index] = _lost(tasks[index], result) if isinstance(result, TaskLost) else result
        if on_outcome is not None:
            for outcome in done[index]:
                on_outcome(outcome)

    engine.map(map_batch, tasks, arrived)
    alone = [BatchTask((source,), task.store, task.use_cache) for index, task in enumerate(tasks)
             if index not in done for source in task.sources]
    return [(task, done[index]) for index, task in enumerate(tasks) if index in done] + (
        _map(engine, alone, on_outcome, False) if alone else [])


def _without_repeated_ranks(engine: Engine, mapped: list[tuple[BatchTask, list[RankOutcome]]]
                            ) -> list[tuple[BatchTask, list[RankOutcome]]]:
    """``mapped`` with each rank kept for its first source (``_one_rank_each``): a batch holding a source whose
    rank another batch's source said first is mapped again without it (its other ranks taken from its store)."""
    kept = _one_rank_each([outcome for _, outcomes in mapped for outcome in outcomes])
    result, again, position = [], [], 0
    for task, outcomes in mapped:
        mine = kept[position:position + len(outcomes)]
        position += len(outcomes)
        repeated = frozenset(source_key(source) for source, outcome, was in zip(task.sources, mine, outcomes)
                             if outcome.status == FAILED and was.status != FAILED)
        if repeated:
            again.append((BatchTask(task.sources, task.store, task.use_cache, repeated), mine))
        else:
            result.append((task, mine))
    for task, outcomes in again:
        (_, redone), = _map(engine, [task], None, False)
        stored = all(o.status != FAILED for source, o in zip(task.sources, redone)
                     if source_key(source) not in task.excluded and o.rank is not None)
        result.append((task, outcomes if stored else [
            RankOutcome(o.name, o.rank, FAILED, "its batch could not be stored again", 0.0, 0) for o in outcomes]))
    return result


def _places(job: Job, warnings: list[str]) -> pa.Table:
    """The places of the job's group-local ranks (``job_groups.group_places`` over the ranks' meta
    ``communication_groups``; ``Job``'s module docstring)."""
    said = job.sql("SELECT rank, json_extract_string(meta, '$.communication_groups') AS groups FROM rank_facts "
                   "ORDER BY rank").to_pylist()
    groups = []
    for row in said:
        try:
            value = json.loads(row["groups"] or "null")
        except ValueError:
            value = None
        groups.append(value if isinstance(value, dict) else {})
    places = group_places([row["rank"] for row in said], groups, warnings)
    return pa.Table.from_pylist([{"process_group": group, "local_rank": local, "global_rank": rank}
                                 for group, where in places.items() for local, rank in where.items()], schema=PLACES)


def analyse_job(path: str | Path, *, engine: Engine | None = None, output: str | Path | None = None,
                use_cache: bool = True, on_start: Callable[[int], None] | None = None,
                on_outcome: Callable[[RankOutcome], None] | None = None, bound_memory: bool = False,
                light: bool = False) -> ClusterJob:
    """Map every rank of the job at ``path`` on ``engine`` (default: ``engine_for()``, the local pool) into the
    store in ``output`` (default: ``path``, or a trace file's folder) and return the job (module docstring);
    ``on_start`` is called with the number of ranks found, ``on_outcome`` with each rank's outcome as it
    comes; ``bound_memory`` bounds this process's DuckDB (``bound_reduce_memory``: for a CLI command); ``light``
    reads each rank light (module docstring)."""
    began = time.perf_counter()
    path = Path(path)
    sources = [source.reader.light(source) if light else source for source in ingest.find_runs(path)]
    store = store_of(output_root(path, output))
    if bound_memory:
        bound_reduce_memory(store)
    tasks = [BatchTask(batch, store, use_cache) for batch in batches(sources)]
    if on_start is not None:
        on_start(len(sources))
    engine = engine or engine_for()
    mapped = _without_repeated_ranks(engine, _map(engine, tasks, on_outcome, True))
    folders = [batch_folder(store, task.sources) for task, outcomes in mapped
               if any(outcome.status != FAILED for outcome in outcomes)]
    files = {name: [folder / f"{name}.parquet" for folder in folders] for name in SUMMARY_SCHEMAS}
    warnings = ingest.skipped_beside(path, sources) if path.is_dir() else []
    places = _places(Job.of_parquet(files, SUMMARY_SCHEMAS), warnings)
    position = {id(source): index for index, source in enumerate(sources)}
    outcomes = [outcome for _, batch in sorted(mapped, key=lambda pair: position[id(pair[0].sources[0])])
                for outcome in batch]
    return ClusterJob(path, store, Job.of_parquet(files, SUMMARY_SCHEMAS, places), outcomes, engine.description,
                      time.perf_counter() - began, sources, warnings, light)


__all__ = ["DONE", "WHOLE_JOB_RANKS", "ClusterJob", "analyse_job", "holding_store", "output_root"]
