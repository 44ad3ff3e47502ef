"""HCCL communication groups of one Ascend rank: their names, their members as GLOBAL ranks where something
maps them, and the rank's communication_matrix links in the canonical meta form.

Owns:

* the group's name: HCCL names a group by its communicator (``90.91.105.46%enp189s0f0_60000_0_1736410538306028``:
  torch_npu's database, ``parallel_group_info``'s keys); communication.json, communication_matrix.json and
  analysis.db name it by ``group_hash`` of that (msprof's 64-bit double hash, ``17148521525495523210``), the
  name perfsight keys groups by (``Process Group Name``);
* ``parallel_group_info`` (profiler_metadata.json, META_DATA): ``{communicator: {group_name, group_rank,
  global_ranks}}``; a group-local rank ``i`` is ``sorted(global_ranks)[i]`` (HCCL numbers a group's members in
  the order torch's ``new_group`` sorts them, as msprof-analyze maps them). A group it does not name keeps
  its group-local ranks, marked ``local`` (a group of the same size is not the same group);
* a rank's own group-local rank in a group (``group_rank``): parallel_group_info's, else the one link of
  communication_matrix.json from a rank to itself (``"3-3"``, transport LOCAL), as msprof-analyze reads it.
  ``ingest.common.job_groups`` maps a job's local groups with these;
* the links (``matrix_links``): one dict per ``{step: {collective|p2p: {key@group: {"src-dst": {...}}}}}``
  entry, the meta ``communication_matrix`` format (docs/tables.md), src/dst global where the group is
  mapped (``local`` false), else group-local (``local`` true). A damaged entry is skipped, counted and
  described in the warnings.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from perfsight.core.json_depth import JsonTooDeep, loads_bounded

_LINK = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")
_STEP = re.compile(r"(\d+)\s*$")
_UINT32 = 0xFFFFFFFF
_HASH_PRIMES = (29, 131)
#: link values as communication_matrix.json names them -> the meta link's keys
_LINK_VALUES = {"Transit Size(MB)": "transit_size_mb", "Transit Time(ms)": "transit_time_ms",
                "Bandwidth(GB/s)": "bandwidth_gbps"}
#: damaged entries described in a warning (the rest are counted)
DESCRIBED = 3


def group_hash(name: str) -> str:
    """The name communication.json gives the group of HCCL communicator ``name``: msprof's double hash (two
    32-bit polynomial hashes of the characters, primes 29 and 131, high and low word) in decimal. A name of
    digits only is such a hash already and is kept."""
    if name.isdigit():
        return name
    high = low = 0
    for char in name:
        high = (high * _HASH_PRIMES[0] + ord(char)) & _UINT32
        low = (low * _HASH_PRIMES[1] + ord(char)) & _UINT32
    return str(high << 32 | low)


@dataclass
class Group:
    """One HCCL group: its members (global ranks, or group-local ranks when ``local``) and where they came
    from."""

    ranks: list[int]
    local: bool
    source: str
    name: str | None = None          # the framework's group name (parallel_group_info's group_name)
    group_rank: int | None = None    # this rank's group-local rank
    communicator: str | None = None  # HCCL's communicator name, when known

    def global_rank(self, local_rank: int) -> int | None:
        """The global rank of group-local rank ``local_rank``; None when the group is not mapped."""
        if self.local or not 0 <= local_rank < len(self.ranks):
            return None
        return self.ranks[local_rank]

    def facts(self) -> dict:
        """The group as meta ``communication_groups`` says it."""
        return {"ranks": self.ranks, "local": self.local, "source": self.source, "name": self.name,
                "group_rank": self.group_rank, "communicator": self.communicator}


def parallel_groups(info, where: str, warnings: list[str]) -> dict[str, Group]:
    """parallel_group_info (a dict, or its JSON text as META_DATA stores it) as mapped groups by
    ``group_hash`` of the communicator; entries without a list of non-negative int ranks are skipped with a
    warning naming ``where``."""
    if isinstance(info, str):
        try:
            info = loads_bounded(info, f"{where}: parallel_group_info") if info.strip() else None
        except JsonTooDeep as error:
            warnings.append(f"{error}; groups keep their group-local ranks")
            return {}
        except ValueError as error:
            warnings.append(f"{where}: parallel_group_info is not valid JSON ({error}); groups keep their "
                            "group-local ranks")
            return {}
    if info is None:
        return {}
    if not isinstance(info, dict):
        warnings.append(f"{where}: parallel_group_info is a {type(info).__name__}, not an object of groups; "
                        "ignored")
        return {}
    groups, bad = {}, []
    for communicator, entry in info.items():
        ranks = entry.get("global_ranks") if isinstance(entry, dict) else None
        if not (isinstance(ranks, list) and ranks and all(type(r) is int and r >= 0 for r in ranks)
                and len(set(ranks)) == len(ranks)):
            bad.append(f"{communicator!r}: global_ranks {json.dumps(ranks)[:60] if ranks is not None else 'missing'}")
            continue
        own = entry.get("group_rank")
        groups[group_hash(str(communicator))] = Group(
            sorted(ranks), False, "parallel_group_info", entry.get("group_name") or None,
            own if type(own) is int and 0 <= own < len(ranks) else None, str(communicator))
    if bad:
        warnings.append(_skipped(f"{where}: parallel_group_info", len(bad), "groups", bad,
                                 "a list of distinct non-negative int ranks is needed"))
    return groups


@dataclass
class _Link:
    step: int | None
    kind: str
    key: str
    group: str
    src: int
    dst: int
    values: dict


def matrix_links(document, where: str, warnings: list[str]) -> list[_Link]:
    """The links of a communication_matrix.json document (group-local ranks); damaged entries skipped,
    counted and described in one warning naming ``where``."""
    links: list[_Link] = []
    bad: list[str] = []
    if document is not None and not isinstance(document, dict):
        bad.append(f"the document is a {type(document).__name__}, not an object of steps")
    for step_key, step in document.items() if isinstance(document, dict) else ():
        for kind, ops in _items(step, step_key, bad):
            for op, op_links in _items(ops, f"{step_key}/{kind}", bad):
                where_op = f"{step_key}/{kind}/{op}"
                if "@" not in op:
                    bad.append(f"{where_op}: no '@group' in the key")
                    continue
                key, group = op.rsplit("@", 1)
                for pair, values in _items(op_links, where_op, bad):
                    found = _LINK.match(pair)
                    if not found:
                        bad.append(f"{where_op}: link {pair!r} is not 'src-dst'")
                        continue
                    figures = _values(values)
                    if figures is None:
                        bad.append(f"{where_op}: link {pair!r} has no numeric transit size, time and bandwidth")
                        continue
                    step_number = _STEP.search(str(step_key))
                    links.append(_Link(int(step_number.group(1)) if step_number else None, str(kind), key, group,
                                       int(found.group(1)), int(found.group(2)), figures))
    if bad:
        warnings.append(_skipped(f"{where}", len(bad), "entries", bad, "the rest are read"))
    return links


def _items(value, where: str, bad: list[str]) -> Iterator[tuple[str, object]]:
    if isinstance(value, dict):
        yield from value.items()
    else:
        bad.append(f"{where}: a {type(value).__name__}, not an object")


def _values(values) -> dict | None:
    if not isinstance(values, dict):
        return None
    figures: dict[str, float | str | None] = {}
    for name, key in _LINK_VALUES.items():
        number = values.get(name)
        if not isinstance(number, (int, float)) or isinstance(number, bool):
            return None
        figures[key] = float(number)
    transport, op_name = values.get("Transport Type"), values.get("Op Name")
    figures["transport"] = transport if isinstance(transport, str) else None
    figures["op_name"] = op_name if isinstance(op_name, str) else None
    return figures


def _skipped(what: str, count: int, unit: str, described: list[str], rest: str) -> str:
    more = f"; and {count - DESCRIBED} more" if count > DESCRIBED else ""
    return f"{what}: {count} {unit} skipped ({'; '.join(described[:DESCRIBED])}{more}); {rest}"


def local_groups(links: Iterable[_Link], mapped: dict[str, Group], warnings: list[str], where: str) -> dict[str, Group]:
    """The groups the links name that ``mapped`` does not: their group-local members, and this rank's
    group-local rank from its link to itself (none when the links name no such link, or several)."""
    members: dict[str, set[int]] = {}
    own: dict[str, set[int]] = {}
    for link in links:
        members.setdefault(link.group, set()).update((link.src, link.dst))
        if link.src == link.dst:
            own.setdefault(link.group, set()).add(link.src)
    for group, selves in own.items():
        if len(selves) > 1:
            warnings.append(f"{where}: group {group} has links to itself from group-local ranks "
                            f"{sorted(selves)}; this rank's place in it is unknown")
    return {group: Group(sorted(ranks), True, f"{where} (group-local ranks: no parallel_group_info entry)",
                         group_rank=next(iter(own[group])) if len(own.get(group, ())) == 1 else None)
            for group, ranks in members.items() if group not in mapped}


def place_rank(groups: dict[str, Group], links: Iterable[_Link], rank: int | None) -> None:
    """Give a mapped group without ``group_rank`` this rank's group-local rank: its position among the
    group's global ranks, else the rank's link to itself."""
    for group in groups.values():
        if not group.local and group.group_rank is None and rank in group.ranks:
            group.group_rank = group.ranks.index(rank)
    for link in links:
        found = groups.get(link.group)
        if found is not None and found.group_rank is None and link.src == link.dst:
            found.group_rank = link.src


def link_facts(links: Iterable[_Link], groups: dict[str, Group]) -> list[dict]:
    """The links as meta ``communication_matrix`` entries: src/dst global where the group maps both."""
    facts = []
    for link in links:
        group = groups.get(link.group)
        src, dst = (group.global_rank(link.src), group.global_rank(link.dst)) if group else (None, None)
        mapped = src is not None and dst is not None
        facts.append({"step": link.step, "kind": link.kind, "key": link.key, "group": link.group,
                      "src": src if mapped else link.src, "dst": dst if mapped else link.dst, "local": not mapped,
                      **link.values})
    return facts


def local_warning(groups: dict[str, Group]) -> str | None:
    """The warning for groups whose ranks stay group-local, or None."""
    local = sorted(name for name, group in groups.items() if group.local)
    if not local:
        return None
    return (f"communication groups {', '.join(local)}: no parallel_group_info maps their group-local ranks to "
            "global ranks; their ranks are kept group-local and marked so (args \"Process Group Ranks Local\", "
            "meta communication_groups and communication_matrix \"local\")")
