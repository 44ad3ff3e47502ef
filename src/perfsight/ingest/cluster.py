"""One job from several runs: the tables of each rank's run merged into one RunTables.

Each rank's tables keep their own ids; merging shifts slice ids (and every column that refers to
them) and track ids (and every column that refers to them) past the previous ranks', so ids stay
unique across the job. Only runs that say their rank (``distributedInfo``, the perfsight manifest) and
whose ranks differ are one job; anything else is refused with the list of runs, to be opened one by
one. All shifting is vectorised Arrow arithmetic on the id columns.
"""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..tables import RunTables, meta_table, next_id

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


def rank_of(tables: RunTables) -> int | None:
    """The one rank a run's tracks name, or None when they name none (or several)."""
    ranks = pc.unique(tables.tracks.column("rank").drop_null()).to_pylist()
    return ranks[0] if len(ranks) == 1 else None


def merge(parts: list[tuple[str, RunTables]]) -> RunTables:
    """Merge the tables of several ranks (``(source name, tables)`` pairs) into one run."""
    ranks = [rank_of(tables) for _, tables in parts]
    if None in ranks or len(set(ranks)) != len(ranks):
        listing = ", ".join(f"{name} (rank {'unknown' if rank is None else rank})"
                            for (name, _), rank in zip(parts, ranks))
        why = "some do not say their rank" if None in ranks else "ranks repeat"
        raise InputError(f"these runs are not one job's ranks ({why}): {listing}; open them one by one")
    merged: dict[str, list[pa.Table]] = {name: [] for name, _ in RunTables().items()}
    slice_offset = track_offset = 0
    for (_, tables), rank in zip(parts, ranks):
        for name, table in tables.items():
            if name == "meta":
                continue
            table = _shift(table, SLICE_ID_COLUMNS.get(name, ()), slice_offset)
            table = _shift(table, TRACK_ID_COLUMNS.get(name, ()), track_offset)
            merged[name].append(_with_rank(table, rank) if name == "tracks" else table)
        slice_offset += next_id(tables.slices.column("id"))
        track_offset += next_id(tables.tracks.column("track_id"))
    facts = {**parts[0][1].meta_dict(), "ranks": sorted(ranks), "world_size": max(len(ranks), _world_size(parts)),
             "sources": [name for name, _ in parts],
             "rank_meta": {str(rank): tables.meta_dict() for (_, tables), rank in zip(parts, ranks)}}
    facts.pop("rank", None)
    return RunTables(**{name: pa.concat_tables(tables) for name, tables in merged.items() if name != "meta"},
                     meta=meta_table(facts))


def _world_size(parts) -> int:
    sizes = []
    for _, tables in parts:
        try:
            sizes.append(int(json.loads(tables.meta_dict().get("world_size") or "0")))
        except (TypeError, ValueError):
            continue
    return max(sizes, default=0)
