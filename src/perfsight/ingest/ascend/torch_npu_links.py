"""Links between the slices of a torch_npu profile: framework operator <-> device task, flows, and the
operator behind each memory record.

Owns, over the slices in builder order (ids are ``id_offset`` + row) and their nesting on timeline rows:

* ``external_id``: torch_npu's ``async_npu`` flows (``torch_to_npu``: from the framework operator, bound to
  the innermost ``cpu_op`` at the flow's start on its thread, to the device task starting at its end) give
  the operator and the task the operator's slice id, as Kineto's ``External id`` links an operator and its
  kernels (ops.op_instances' ``launch_op`` and input shapes, flops' device time);
* flows: ``fwdbwd`` pairs; ``async_task_queue`` (enqueue -> dequeue) and other categories as ``other``;
  an ``async_npu`` pair as ``launch`` only for a task that no CANN call launches (same ``correlation_id``:
  those launch flows come from the correlation, ascend_build); ``HostToDevice`` flows are that
  correlation itself and are not repeated;
* the operator of a memory record: on the host threads (the one with the steps first), the innermost
  ``cpu_op`` enclosing the record's time, or its enclosing operator named as operator_memory.csv names
  the allocation, when one is; the row (``track_id``) of a record no host thread holds (a profile without
  host threads): the first row of its device (``device_tracks``), so the record keeps the rank's rank.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.tables import flows_table
from perfsight.ingest.common.nesting import Nesting, take_or_missing
from perfsight.ingest.kineto.reader import pair_flow_ends


@dataclass
class Links:
    external_id: pa.Array
    flows: pa.Table          # src_id, dst_id, kind (besides the correlation launch flows)
    nesting: Nesting


def link(slices: pa.Table, flows: pa.Table, track_keys: dict[tuple[str, str], int], id_offset: int,
         warnings: list[str]) -> Links:
    """External ids and flows of ``slices`` (torch_npu_trace.Trace.slices layout) from ``flows``."""
    nesting = Nesting(slices["track"].to_numpy(), slices["start_ns"].to_numpy(), slices["dur_ns"].to_numpy())
    ids = id_offset + np.arange(slices.num_rows, dtype=np.int64)
    flows = flows.filter(pc.invert(pc.fill_null(pc.equal(flows["cat"], "HostToDevice"), False)))
    bound = _bind(flows, nesting, track_keys, slices)
    if (bound < 0).any():
        warnings.append(f"{int((bound < 0).sum())} flow events outside any slice of their row (dropped)")
    src, dst, categories = pair_flow_ends(flows, bound)
    category = pc.fill_null(categories, "").to_numpy(zero_copy_only=False)
    external = np.full(slices.num_rows, -1, np.int64)
    npu = category == "async_npu"
    external[dst[npu][::-1]] = ids[src[npu][::-1]]          # the first pair wins
    external[src[npu]] = ids[src[npu]]
    launched = _launched(slices)
    unlaunched = npu & ~launched[dst]
    parts = [(src[category == "fwdbwd"], dst[category == "fwdbwd"], "fwdbwd"),
             (src[unlaunched], dst[unlaunched], "launch"),
             (src[~np.isin(category, ["fwdbwd", "async_npu"])], dst[~np.isin(category, ["fwdbwd", "async_npu"])],
              "other")]
    table = pa.concat_tables([flows_table(ids[s], ids[d], k) for s, d, k in parts])
    return Links(pa.array(external, pa.int64(), mask=external < 0), table, nesting)


def _bind(flows: pa.Table, nesting: Nesting, track_keys: dict, slices: pa.Table) -> np.ndarray:
    """The slice row each flow end is bound to: ``async_npu`` starts to the innermost enclosing ``cpu_op``,
    every other end to the innermost enclosing slice of its row; -1 for none."""
    tracks = np.array([track_keys.get((p, t), -1) for p, t in zip(flows["pid"].to_pylist(), flows["tid"].to_pylist())],
                      dtype=np.int64)
    ts = flows["ts_ns"].to_numpy()
    bound = nesting.enclosing(tracks, ts)
    operator = pc.and_(pc.equal(flows["cat"], "async_npu"), pc.equal(flows["ph"], "s")).to_numpy(zero_copy_only=False)
    if operator.any():
        is_op = pc.equal(slices["kind"], "cpu_op").to_numpy(zero_copy_only=False)
        bound[operator] = nesting.enclosing(tracks[operator], ts[operator], is_op)
    return bound


def _launched(slices: pa.Table) -> np.ndarray:
    """Whether each slice is a device task whose correlation id a host slice has (a CANN call launched it)."""
    host = pc.equal(slices["role"], "runtime")
    keys = slices["correlation_id"].filter(host)
    device = pc.is_in(slices["role"], pa.array(["device", "communication"]))
    return pc.and_(device, pc.fill_null(pc.is_in(slices["correlation_id"], value_set=keys), False)).to_numpy(
        zero_copy_only=False)


def memory_operators(records: pa.Table, slices: pa.Table, nesting: Nesting) -> np.ndarray:
    """Row of the operator of each memory record (module docstring), -1 for none."""
    ts = records["ts_ns"].to_numpy()
    wanted = records["op_name"].to_pylist()
    names = np.array(slices["name"].to_pylist(), dtype=object)
    is_op = pc.equal(slices["kind"], "cpu_op").to_numpy(zero_copy_only=False)
    chosen = np.full(len(ts), -1, np.int64)
    fallback = np.full(len(ts), -1, np.int64)
    for track in host_tracks(slices):
        inner = nesting.enclosing(np.full(len(ts), track, np.int64), ts, is_op)
        fallback = np.where((fallback < 0) & (inner >= 0), inner, fallback)
        named = _named_ancestor(inner, wanted, names, nesting.parent)
        chosen = np.where((chosen < 0) & (named >= 0), named, chosen)
    return np.where(chosen >= 0, chosen, fallback)


def device_tracks(tracks: pa.Table, devices: pa.Array | pa.ChunkedArray) -> pa.Array:
    """For each memory record's ``devices`` (``npu:4``), the first track of that device in ``tracks`` (the
    final tracks table), else the first track: every track of a rank's run carries its rank."""
    first = pc.index_in(devices, value_set=tracks["device"])
    fallback = pa.scalar(0 if tracks.num_rows else None, pa.int32())
    return pc.take(tracks["track_id"], pc.fill_null(first, fallback)).cast(pa.int32())


def host_tracks(slices: pa.Table) -> list[int]:
    """The host rows' track indices, the one holding step slices first."""
    host = pc.equal(slices["role"], "host").to_numpy(zero_copy_only=False)
    track = slices["track"].to_numpy()
    steps = np.unique(track[host & pc.equal(slices["kind"], "step").to_numpy(zero_copy_only=False)]).tolist()
    return steps + [t for t in np.unique(track[host]).tolist() if t not in steps]


def _named_ancestor(rows: np.ndarray, wanted: list, names: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """For each row, itself or its nearest enclosing slice named ``wanted`` (-1 when none or no name)."""
    current = np.where(np.array([w is not None for w in wanted], dtype=bool), rows, -1)
    target = np.array(wanted, dtype=object)
    pending = np.flatnonzero(current >= 0)
    while len(pending):
        hit = names[current[pending]] == target[pending]
        pending = pending[~hit]
        current[pending] = take_or_missing(parent, current[pending])
        pending = pending[current[pending] >= 0]
    return current
