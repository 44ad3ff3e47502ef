"""communication.json of a torch_npu profile: its records of HCCL operators, and the operators themselves for
a rank whose folder holds neither trace_view.json nor kernel_details.csv.

Owns reading the file (``{"stepN": {"collective"|"p2p": {"op@group": {"Communication Time Info": ...,
"Communication Bandwidth Info": ...}}}}``) into ``Record``s: the step (the number of the ``stepN`` key,
None when the key has none), the kind, the operator name and group (split at the last ``@``), its start
(``Start Timestamp(us)``) and elapse (``Elapse Time(ms)``) as exact integer ns (the JSON numbers are read
as decimals, never through float), and both info objects verbatim. A record that is not an object costs
that record: counted and described in the warnings; objects under keys without ``@`` are the file's own
totals (``Total Op Info``), not operators, and are passed over. ``operators`` gives the timed records as
device tasks in torch_npu_kernels.read_kernels' layout (task type ``HCCL``, op_type the name without its
``_N_N_N`` instance suffix, ``step`` the record's), so that ``tasks_from_kernels`` puts them on the rank's
``npu:D HCCL`` row as it does kernel_details' HCCL rows.

``match`` pairs HCCL operators with their records (of communication.json, or of analysis.db:
torch_npu_db_analysis makes the same ``Record``s): same name, same group where the operator's is known,
nearest start; one record per operator and one operator per record, the closest pairs first.
"""
from __future__ import annotations

import json
import re
from bisect import bisect_left
from collections import Counter, defaultdict
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.communication import REPORTED_BANDWIDTH, REPORTED_FROM, REPORTED_TIME
from perfsight.ingest.ascend.ascend_csv import read_json
from perfsight.ingest.ascend.ascend_kinds import HCCL_OP_SUFFIX
from perfsight.ingest.common.columns import counted

#: the two objects of a record kept verbatim (what torch_npu_comm adds to the operator's args)
INFO_KEYS = (REPORTED_TIME, REPORTED_BANDWIDTH)
COMMUNICATION_JSON = "communication.json"
STEP_KEY = re.compile(r"^step\s*(\d+)$", re.IGNORECASE)
NS_PER_US, NS_PER_MS = 1000, 1_000_000


@dataclass(frozen=True)
class Record:
    """One HCCL operator as communication.json records it."""

    step: int | None
    kind: str                   # "collective" or "p2p"
    name: str                   # hcom_allReduce__586_0_1
    group: str                  # the HCCL group name after "@"
    start_ns: int | None        # Start Timestamp(us), exact
    elapse_ns: int | None       # Elapse Time(ms), rounded to the ns
    info: dict                  # INFO_KEYS -> their objects, as communication.json has them
    source: str                 # the file: communication.json, analysis.db

    def args(self) -> dict:
        """What the record adds to its operator's args: its objects and the file they came from."""
        return {**self.info, REPORTED_FROM: self.source}


def records(path: Path | None, warnings: list[str]) -> list[Record]:
    """The records of ``path`` (module docstring), in file order; [] when there is no file or it is not
    readable JSON (warned)."""
    if path is None or not path.is_file():
        return []
    document = read_json(path, warnings, "communication operators, groups and times unknown",
                         parse_float=Decimal)
    found: list[Record] = []
    skipped: Counter[str] = Counter()
    for step_key, step in document.items() if isinstance(document, dict) else ():
        if not isinstance(step, dict):
            skipped[f"step {step_key!r} is not an object"] += 1
            continue
        number = STEP_KEY.match(str(step_key))
        for kind, entries in step.items():
            if not isinstance(entries, dict):
                skipped[f"{step_key}/{kind} is not an object"] += 1
                continue
            for key, entry in entries.items():
                record = _record(number, kind, key, entry, skipped)
                if record is not None:
                    found.append(record)
    if skipped:
        described = "; ".join(f"{n} x {why}" for why, n in sorted(skipped.items()))
        warnings.append(f"{path.name}: {counted(sum(skipped.values()), 'record')} not read ({described})")
    return found


def _record(step: re.Match | None, kind: str, key: str, entry, skipped: Counter) -> Record | None:
    if "@" not in key:
        if not isinstance(entry, dict):
            skipped[f"{key!r} is not an operator@group record"] += 1
        return None                                          # the file's totals ("Total Op Info")
    if not isinstance(entry, dict):
        skipped["an operator record that is not an object"] += 1
        return None
    time_info = entry.get("Communication Time Info")
    time_info = time_info if isinstance(time_info, dict) else {}
    name, group = key.rsplit("@", 1)
    return Record(int(step.group(1)) if step else None, kind, name, group,
                  record_ns(time_info.get("Start Timestamp(us)"), NS_PER_US),
                  record_ns(time_info.get("Elapse Time(ms)"), NS_PER_MS),
                  json.loads(json.dumps({k: entry[k] for k in INFO_KEYS if k in entry}, default=float)),
                  COMMUNICATION_JSON)


def record_ns(value, per: int) -> int | None:
    """A number of microseconds (``per`` NS_PER_US) or milliseconds (NS_PER_MS) as integer ns: a JSON number
    read as a Decimal, an int, or a float as the decimal it prints as (SQLite's REAL); None for anything
    else."""
    if isinstance(value, float):
        value = Decimal(repr(value))
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        return None
    try:
        return int((Decimal(value) * per).to_integral_value())
    except (InvalidOperation, ValueError, OverflowError):
        return None


def match(found: list[Record], names: list[str], starts: list[int], groups: list[str | None]) -> list[Record | None]:
    """The record of each operator (``names``, ``starts`` in ns, ``groups``: the group name after ``@``, None
    when the operator does not say), or None (module docstring). A timed record is a candidate for the
    operators of its name and group that start nearest it, before and after; the closest pairs are taken
    first. Untimed records go, in file order, to the operators of their name and group left without one."""
    keyed: dict[tuple[str, str | None], list[int]] = defaultdict(list)
    for index, record in enumerate(found):
        keyed[(record.name, record.group)].append(index)
        keyed[(record.name, None)].append(index)
    timed: dict[tuple[str, str | None], list[tuple[int, int]]] = {
        key: sorted((start, i) for i in indices if (start := found[i].start_ns) is not None)
        for key, indices in keyed.items()}
    pairs: list[tuple[int, int, int]] = []
    for operator, key in enumerate(zip(names, groups)):
        near = timed.get(key, [])
        at = bisect_left(near, (starts[operator], -1))
        pairs += [(abs(near[j][0] - starts[operator]), operator, near[j][1])
                  for j in (at - 1, at) if 0 <= j < len(near)]
    chosen: dict[int, int] = {}
    used: set[int] = set()
    for _, operator, index in sorted(pairs):
        if operator not in chosen and index not in used:
            chosen[operator] = index
            used.add(index)
    for operator, key in enumerate(zip(names, groups)):
        if operator in chosen:
            continue
        spare = next((i for i in keyed.get(key, ()) if found[i].start_ns is None and i not in used), None)
        if spare is not None:
            chosen[operator] = spare
            used.add(spare)
    return [found[chosen[o]] if o in chosen else None for o in range(len(names))]


def operators(found: list[Record], path: Path, warnings: list[str]) -> pa.Table:
    """The timed records as device tasks, in torch_npu_kernels.read_kernels' layout (module docstring); the
    records without a numeric start or elapse time are counted in ``warnings`` (not on the timeline)."""
    timed = [r for r in found if r.start_ns is not None and r.elapse_ns is not None]
    if len(timed) < len(found):
        warnings.append(f"{path.name}: {counted(len(found) - len(timed), 'operator')} without a numeric Start "
                        "Timestamp(us) and Elapse Time(ms): not on the timeline")
    names = pa.array([r.name for r in timed], pa.string())
    n = len(timed)
    return pa.table({
        "name": names, "op_type": pc.replace_substring_regex(names, HCCL_OP_SUFFIX, ""),
        "task_type": pa.array(["HCCL"] * n, pa.string()),
        "start_ns": pa.array([r.start_ns for r in timed], pa.int64()),
        "dur_ns": pa.array([max(r.elapse_ns or 0, 0) for r in timed], pa.int64()),
        "step": pa.array([r.step for r in timed], pa.int32()),
        "input_shapes": pa.nulls(n, pa.string()), "input_dtypes": pa.nulls(n, pa.string()),
        "extra": pa.array([json.dumps({"group_name": r.group}) for r in timed], pa.string()),
        "stream": pa.nulls(n, pa.string()),
    })
