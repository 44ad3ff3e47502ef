"""A job's group-local ranks made global from its ranks' own places in their groups (``jobs.merge`` calls
``map_job`` on each rank's tables before merging them).

A rank whose reader could not map a communication group keeps the group's members as group-local ranks
(meta ``communication_groups`` entry ``local`` true) and says its own group-local rank there
(``group_rank``: Ascend's link of the rank to itself in communication_matrix.json). Across a job, rank R
saying ``group_rank`` i in group G means G's local rank i is global rank R (msprof-analyze maps a job's
links by the same rule). With those places:

* a link of meta ``communication_matrix`` (local) whose two ends have places becomes global (``local``
  false);
* a group whose every member has a place becomes global in every rank's meta ``communication_groups``
  (``ranks`` the places, ``source`` says so) and in its communication slices' ``args`` (``Process Group
  Ranks``, ``Dst Rank`` / ``Src Rank``; ``Process Group Ranks Local`` removed). A group with members
  without a place stays local: local and global ranks are never mixed in one list.

Two ranks claiming one place (or one rank two) leave the group unmapped, with a warning in the merged meta.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.tables import RunTables

LOCAL_KEY = "Process Group Ranks Local"
SOURCE = "the job's ranks' places in the group (group-local rank -> the rank saying it is its own)"


def map_job(parts: list[tuple[int, RunTables]], warnings: list[str]) -> list[RunTables]:
    """Each rank's tables with the group-local ranks the job's places map made global (module docstring)."""
    metas = [tables.meta_dict() for _, tables in parts]
    groups = [_json(meta.get("communication_groups")) or {} for meta in metas]
    places = group_places([rank for rank, _ in parts], groups, warnings)
    if not places:
        return [tables for _, tables in parts]
    out = []
    for (_, tables), meta, rank_groups in zip(parts, metas, groups):
        mapped = {name: group for name, group in rank_groups.items()
                  if group.get("local") and name in places and set(group.get("ranks") or ()) <= set(places[name])
                  and group.get("ranks")}
        for name, group in mapped.items():
            rank_groups[name] = {**group, "ranks": sorted(places[name][r] for r in group["ranks"]), "local": False,
                                 "source": SOURCE}
        links = _json(meta.get("communication_matrix")) or []
        for link in links:
            where = places.get(link.get("group"), {})
            if link.get("local") and link.get("src") in where and link.get("dst") in where:
                link.update(src=where[link["src"]], dst=where[link["dst"]], local=False)
        slices = _slices(tables.slices, {name: places[name] for name in mapped})
        out.append(replace(tables, slices=slices).with_meta({"communication_groups": rank_groups or None,
                                                             "communication_matrix": links or None}))
    return out


def group_places(ranks: list[int], groups: list[dict], warnings: list[str]) -> dict[str, dict[int, int]]:
    """Group -> {group-local rank: global rank} from the ranks' ``group_rank`` in their local groups (each
    rank's meta ``communication_groups``); a clash is said in ``warnings``."""
    claims: dict[str, dict[int, set[int]]] = {}
    for rank, rank_groups in zip(ranks, groups):
        for name, group in rank_groups.items():
            place = group.get("group_rank") if isinstance(group, dict) else None
            if group.get("local") and type(place) is int:
                claims.setdefault(name, {}).setdefault(place, set()).add(rank)
    places = {}
    for name, claimed in claims.items():
        clashes = {place: sorted(owners) for place, owners in claimed.items() if len(owners) > 1}
        owners = [owner for owners_ in claimed.values() for owner in owners_]
        if clashes or len(set(owners)) != len(owners):
            warnings.append(f"communication group {name}: ranks claim the same group-local place "
                            f"({json.dumps({str(k): v for k, v in clashes.items()})}); its ranks stay group-local")
            continue
        places[name] = {place: next(iter(owners_)) for place, owners_ in claimed.items()}
    return places


def _slices(slices: pa.Table, mapped: dict[str, dict[int, int]]) -> pa.Table:
    """``slices`` with the args of communication slices of the ``mapped`` groups made global."""
    if not mapped:
        return slices
    marked = pc.fill_null(pc.and_(pc.equal(slices["kind"], "comm"), pc.match_substring(slices["args"], LOCAL_KEY)),
                          False)
    rows = pc.indices_nonzero(marked).to_pylist()
    args = slices["args"].to_pylist()
    for row in rows:
        value = json.loads(args[row])
        where = mapped.get(value.get("Process Group Name"))
        ranks = _json(value.get("Process Group Ranks"))
        if where is None or not isinstance(ranks, list) or not set(ranks) <= set(where):
            continue
        value["Process Group Ranks"] = json.dumps(sorted(where[r] for r in ranks))
        for key in ("Dst Rank", "Src Rank"):
            if value.get(key) in where:
                value[key] = where[value[key]]
        value.pop(LOCAL_KEY)
        args[row] = json.dumps(value)
    index = slices.schema.get_field_index("args")
    return slices.set_column(index, slices.schema.field(index), pa.array(args, pa.string()))


def _json(text: str | None):
    """A JSON text's value; None for none or malformed JSON."""
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None
