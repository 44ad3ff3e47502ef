"""One job from several runs: which runs found side by side are one job (``jobs_in``, before reading them),
and the tables of each rank's run merged into one RunTables (``merge``; ``stack`` without mapping the ranks'
groups: a cluster map's batch of ranks, each summarised as if alone).

Before reading, runs of one reader found side by side in one folder are one job when the ranks they say
(``Reader.rank``: a perfsight manifest's, a trace's distributedInfo or file name, a MindSpore rank) are known
and distinct, or when their reader writes one folder per rank (``Reader.siblings_are_ranks``: torch_npu,
msprof); insight's run list shows such a job as one entry, and ``perfsight.open`` of the folder opens the
same runs as one job.

Each rank's tables keep their own ids; merging shifts slice ids (and every column that refers to
them) and track ids (and every column that refers to them) past the previous ranks', so ids stay
unique across the job. A run's rank is the one its tables say (``distributedInfo``, the perfsight
manifest), else the one its file name carries (``rank_in_name``: ``rank0``, ``rank-1``, ``rank_2``...).
Only runs whose ranks are known and differ are one job; anything else is refused with a summary of
the runs, to be opened one by one. Before merging, the group-local ranks the ranks' own places in their
groups map become global (``common.job_groups``). The job's ``parse_warnings`` are every rank's, each
prefixed ``rank N: `` (what a partial rank lacks, rows read around), then the job's own (group mapping);
``rank_meta`` keeps each rank's meta. All shifting is vectorised Arrow arithmetic on the id columns.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.errors import InputError
from perfsight.core.tables import RunTables, fits, meta_table, next_id
from perfsight.ingest.common.job_groups import map_job
from perfsight.ingest.common.reader import Reader, RunSource

SLICE_ID_COLUMNS = {"slices": ("id", "parent_id"), "flows": ("src_id", "dst_id"), "memory": ("op_slice_id",)}
TRACK_ID_COLUMNS = {"slices": ("track_id",), "tracks": ("track_id",), "counters": ("track_id",),
                    "memory": ("track_id",)}


def _shift(table: pa.Table, columns: tuple[str, ...], by: int) -> pa.Table:
    for name in columns:
        index = table.schema.get_field_index(name)
        shifted = pc.add(table.column(name), pa.scalar(by, table.schema.field(name).type))
        table = table.set_column(index, table.schema.field(name), shifted)
    return table


def _with_rank(tracks: pa.Table, rank: int) -> pa.Table:
    filled = pc.fill_null(tracks.column("rank"), pa.scalar(rank, pa.int32()))
    return tracks.set_column(tracks.schema.get_field_index("rank"), "rank", filled)


_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
#: runs named in the error of runs that are not one job
RUNS_SHOWN = 5


def rank_of(tables: RunTables) -> int | None:
    """The one rank a run's tracks name, else (a run without tracks: a rank whose files hold no events) the
    rank its meta says; None when neither names one (or the tracks name several)."""
    ranks = pc.unique(tables.tracks.column("rank").drop_null()).to_pylist()
    if ranks or not tables.tracks.num_rows:
        return ranks[0] if len(ranks) == 1 else _meta_rank(tables)
    return None


def _meta_rank(tables: RunTables) -> int | None:
    try:
        rank = json.loads(tables.meta_dict().get("rank") or "null")
    except ValueError:
        return None
    return rank if type(rank) is int and fits(rank, 32) else None


def rank_said(name: str, tables: RunTables) -> int | None:
    """The rank of a run read from source ``name``: the one its tables say (``rank_of``), else the one the
    name carries (``rank_in_name``); None when neither does."""
    rank = rank_of(tables)
    return rank_in_name(Path(name).name) if rank is None else rank


def as_rank(tables: RunTables, rank: int) -> RunTables:
    """``tables`` with ``rank`` on every track that names none (a rank read alone, as its job knows it)."""
    return replace(tables, tracks=_with_rank(tables.tracks, rank))


def rank_in_name(name: str) -> int | None:
    """The rank a file or folder name carries (``train_rank3.pt.trace.json``, ``rank-1``, ``rank_2``), or None."""
    found = _RANK_IN_NAME.search(name)
    return int(found.group(1)) if found and fits(int(found.group(1)), 32) else None


def one_job(runs: list[RunSource]) -> bool:
    """Whether ``runs`` (one reader's, found side by side) are one job's ranks as far as can be told before
    reading them (module docstring); reading may still refuse (``merge`` goes by the ranks the tables say)."""
    reader = runs[0].reader
    if reader.siblings_are_ranks:
        return True
    ranks = [reader.rank(run) for run in runs]
    return None not in ranks and len(set(ranks)) == len(ranks)


def jobs_in(found: list[list[RunSource]]) -> list[tuple[list[RunSource], bool]]:
    """What runs found side by side in one folder are, as a run list shows them: ``found`` holds the runs of
    each file or folder (``registry.runs_at``); one reader's runs of several of them are one job when
    ``one_job``, else each one's runs stand alone. ``(runs, is_job)`` pairs, in the order found."""
    by_reader: dict[Reader, list[list[RunSource]]] = {}
    for runs in found:
        by_reader.setdefault(runs[0].reader, []).append(runs)
    listed = []
    for group in by_reader.values():
        every = [run for runs in group for run in runs]
        if len(group) > 1 and one_job(every):
            listed.append((every, True))
        else:
            listed += [(runs, False) for runs in group]
    return listed


def _not_one_job(names: list[str], ranks: list[int | None]) -> str:
    """Why runs are not one job's ranks, naming at most RUNS_SHOWN of the runs at fault."""
    unknown = [name for name, rank in zip(names, ranks) if rank is None]
    if unknown:
        why, at_fault = f"{len(unknown)} of {len(names)} do not say their rank, in their data or name", unknown
    else:
        repeated = {rank for rank in ranks if rank is not None and ranks.count(rank) > 1}
        why = f"ranks repeat ({', '.join(map(str, sorted(repeated)[:RUNS_SHOWN]))})"
        at_fault = [f"{name} (rank {rank})" for name, rank in zip(names, ranks) if rank in repeated]
    more = f" and {len(at_fault) - RUNS_SHOWN} more" if len(at_fault) > RUNS_SHOWN else ""
    return (f"these {len(names)} runs are not one job's ranks: {why}: {', '.join(at_fault[:RUNS_SHOWN])}{more}; "
            "open them one by one")


def merge(parts: list[tuple[str, RunTables]]) -> RunTables:
    """Merge the tables of several ranks (``(source name, tables)`` pairs) into one run; a run whose tables
    do not say their rank takes the one its source name carries."""
    said = [rank_said(name, tables) for name, tables in parts]
    ranks = [rank for rank in said if rank is not None]
    if len(ranks) != len(said) or len(set(ranks)) != len(ranks):
        raise InputError(_not_one_job([name for name, _ in parts], said))
    warnings: list[str] = []
    mapped = map_job([(rank, tables) for (_, tables), rank in zip(parts, ranks)], warnings)
    return stack([(name, rank, tables) for (name, _), rank, tables in zip(parts, ranks, mapped)], warnings)[0]


def stack(parts: list[tuple[str, int, RunTables]], warnings: list[str] | None = None) -> tuple[RunTables, list[int]]:
    """The tables of several ranks (``(source name, rank, tables)``) side by side in one run, each rank's ids
    shifted past the previous ranks' (``merge`` without mapping group-local ranks: a cluster map's batch of
    ranks, each summarised as if alone); and the slice id offset of each part. ``warnings``: the job's own,
    after the ranks'."""
    merged: dict[str, list[pa.Table]] = {name: [] for name, _ in RunTables().items()}
    slice_offset = track_offset = 0
    offsets = []
    for _, rank, tables in parts:
        for name, table in tables.items():
            if name == "meta":
                continue
            table = _shift(table, SLICE_ID_COLUMNS.get(name, ()), slice_offset)
            table = _shift(table, TRACK_ID_COLUMNS.get(name, ()), track_offset)
            merged[name].append(_with_rank(table, rank) if name == "tracks" else table)
        offsets.append(slice_offset)
        slice_offset += next_id(tables.slices.column("id"))
        track_offset += next_id(tables.tracks.column("track_id"))
    pairs = [(name, tables) for name, _, tables in parts]
    ranks = [rank for _, rank, _ in parts]
    facts = {**parts[0][2].meta_dict(), "ranks": sorted(ranks), "world_size": max(len(ranks), _world_size(pairs)),
             "sources": [name for name, _ in pairs], "parse_warnings": _warnings(pairs, ranks) + (warnings or []),
             "rank_meta": {str(rank): {**tables.meta_dict(), "source": name} for name, rank, tables in parts}}
    facts.pop("rank", None)
    return RunTables(**{name: pa.concat_tables(tables) for name, tables in merged.items() if name != "meta"},
                     meta=meta_table(facts)), offsets


def _warnings(parts: list[tuple[str, RunTables]], ranks: list[int]) -> list[str]:
    """Every rank's ``parse_warnings``, each said of its rank (``rank 2: no kernel_details.csv, ...``), by rank."""
    said = []
    for rank, (_, tables) in sorted(zip(ranks, parts), key=lambda pair: pair[0]):
        try:
            warnings = json.loads(tables.meta_dict().get("parse_warnings") or "[]")
        except ValueError:
            warnings = []
        said += [f"rank {rank}: {warning}" for warning in warnings if isinstance(warning, str)]
    return said


def _world_size(parts) -> int:
    sizes = []
    for _, tables in parts:
        try:
            sizes.append(int(json.loads(tables.meta_dict().get("world_size") or "0")))
        except (TypeError, ValueError):
            continue
    return max(sizes, default=0)
