"""HCCL communication operators of a torch_npu profile described as analysis/collectives.py reads them.

Owns adding to each ``comm`` operator slice's ``args`` the keys PyTorch writes on NCCL kernels (and
``collectives.collectives`` reads): ``Collective name`` (``hcom_allReduce__586_0_1`` -> ``allreduce``),
``dtype`` (HCCL's ``data_type``: ``FP32`` -> ``float32``), ``In msg nelems`` / ``Out msg nelems`` (HCCL's
``count``, the elements the operator was called with), and from the operator's group: ``Process Group
Name`` (the group name after ``@`` in communication.json's ``op@group`` keys), ``Process Group Desc`` (the
framework's group name), ``Group size`` and ``Process Group Ranks`` (global ranks where the group is
mapped, else group-local with ``Process Group Ranks Local`` true: hccl_groups.Group).
The operator's record of communication.json (torch_npu_hccl.match: same name and group, nearest ``Start
Timestamp(us)``) is added too: ``Communication Time Info`` (elapse, transit, wait, synchronization and idle
times, ms), ``Communication Bandwidth Info`` (per transport: size MB, time ms, bandwidth GB/s, packet sizes)
and ``Communication Info From`` (``communication.json``).
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.ingest.ascend.ascend_csv import json_object
from perfsight.ingest.ascend.ascend_kinds import collective_args
from perfsight.ingest.ascend.hccl_groups import Group, group_hash
from perfsight.ingest.ascend.torch_npu_hccl import Record, match
from perfsight.ingest.ascend.torch_npu_kernels import merge_args, replace_rows


def describe(slices: pa.Table, communication: list[Record], groups: dict[str, Group]) -> pa.Table:
    """``slices`` (torch_npu_trace.Trace.slices layout) with the args of its HCCL operators completed from
    their groups and their records of communication.json (torch_npu_hccl.records)."""
    rows, objects, records = _operators(slices, communication)
    if not len(rows):
        return slices
    names = slices["name"].take(pa.array(rows)).to_pylist()
    patches = [json.dumps(_patch(name, a, record, groups)) for name, a, record in zip(names, objects, records)]
    args = slices["args"].take(pa.array(rows))
    return replace_rows(slices, "args", rows, merge_args(args, pa.array(patches, pa.string())))


def unlisted(slices: pa.Table, communication: list[Record]) -> list[Record]:
    """The records of ``communication`` that no HCCL operator of ``slices`` is matched to (torch_npu_hccl.match),
    in file order: operators the profiler reported that the trace or kernel_details.csv left out."""
    matched = {id(record) for record in _operators(slices, communication)[2] if record is not None}
    return [record for record in communication if id(record) not in matched]


def _operators(slices: pa.Table, communication: list[Record]) -> tuple[np.ndarray, list[dict], list[Record | None]]:
    """The rows of ``slices``' HCCL operators, their args as objects and their records (or None)."""
    rows = np.flatnonzero(pc.and_(pc.equal(slices["kind"], "comm"), pc.equal(slices["role"], "communication"))
                          .to_numpy(zero_copy_only=False))
    if not len(rows):
        return rows, [], []
    names = slices["name"].take(pa.array(rows)).to_pylist()
    starts = slices["start_ns"].take(pa.array(rows)).to_pylist()
    objects = [json_object(text) for text in slices["args"].take(pa.array(rows)).to_pylist()]
    records = match(communication, names, starts,
                    [group_hash(str(a["group_name"])) if a.get("group_name") else None for a in objects])
    return rows, objects, records


def _patch(name: str, args: dict, record: Record | None, groups: dict[str, Group]) -> dict:
    group_name = args.get("group_name") or (record.group if record else None)
    group = groups.get(group_name) if group_name else None
    patch = collective_args(name, args.get("data_type"), args.get("count"), group_name,
                            group.name if group else None, list(group.ranks) if group else [],
                            group.local if group else False)
    if record is not None:
        patch.update(record.args())
    return {key: value for key, value in patch.items() if value is not None}
