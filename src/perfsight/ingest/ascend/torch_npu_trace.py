"""trace_view.json of a torch_npu profile: its events classified as canonical slices on timeline rows.

Owns reading the file with the Kineto decoder (kineto_decode.TraceStream: a plain JSON list or a
``traceEvents`` object; ``ts`` strings of microseconds with ns decimals become exact int64 ns; a truncated
file keeps its valid events and warns) and what each event is, by the role of its process
(``ascend_kinds.process_role`` of its ``process_name``; any event with a category is host work):

* host (``Python``): Kineto's classification (kineto_kinds: ``cpu_op``, ``python``, ``step`` for
  ProfilerStep#N, ``dataloader``, ...); the task queue's ``enqueue``/``dequeue`` ranges are ``annotation``;
  ``Input Dims`` / ``Input type`` texts (``"32,3;\\r\\n64"``) become canonical JSON lists;
* runtime (``CANN``): API calls, ``ascend_kinds.api_kind`` of their ``args.level`` and name, on
  ``CANN Thread N`` rows;
* device (``Ascend Hardware``): tasks, ``ascend_kinds.task_kind`` of ``args["Task Type"]``, on
  ``npu:D stream S`` rows (tid = stream id);
* communication (``HCCL``): the operators (rows without ``args["task type"]``) are ``comm`` with task
  type ``HCCL`` on ``npu:D HCCL Group N Communication``; the per-plane tasks are ``other`` (their work is
  the operator's) on ``npu:D HCCL Plane K`` (tid ``hccl K``, apart from the hardware streams);
* overlap (``Overlap Analysis``): not read: torch_npu's own overlap rows (perfsight computes overlap);
* counters (``ph: "C"``): one series per process, event name and args key (``AI Core Freq MHz``); sizes
  in KB or MB become bytes (``APP/DDR bytes``).

``args.connection_id`` (the CANN call <-> device task link) becomes ``correlation_id``; flow events
(``fwdbwd``, ``async_npu`` op -> task, ``async_task_queue``, ``HostToDevice``) are returned for linking.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.json_depth import loads_bounded
from perfsight.ingest.ascend.ascend_csv import dtypes_json, shapes_json
from perfsight.ingest.ascend.ascend_kinds import api_kinds, process_role, task_kinds
from perfsight.ingest.common.build import RunBuilder
from perfsight.ingest.common.chrome_json import TraceStream
from perfsight.ingest.common.columns import dictionary
from perfsight.ingest.common.events import TraceMetadata, decode_args, event_tables
from perfsight.ingest.common.kinds import classify_columns

#: host event categories of torch_npu that Kineto does not know -> slice kind
HOST_CATEGORY_KINDS = {"enqueue": "annotation", "dequeue": "annotation"}
_SIZE_UNITS = {"KB": 1024.0, "MB": 1024.0 ** 2}


class _Args(msgspec.Struct, gc=False, rename={"task_type": "Task Type", "part_type": "task type"}):
    connection_id: Any = None
    task_type: Any = None
    part_type: Any = None
    level: Any = None


@dataclass
class Trace:
    """The slices of trace_view.json in source order (columns below, ``track`` = builder row index), and
    its flow events (pid, tid, ts_ns, ph, cat, id, file)."""

    slices: pa.Table    # track, kind, name, op_type, start_ns, dur_ns, task_type, step, correlation_id,
    flows: pa.Table     # input_shapes, input_dtypes, args, role
    track_keys: dict[tuple[str, str], int]  # (pid, tid) -> builder row


def read_trace(path: Path, builder: RunBuilder, *, rank: int | None, device: int) -> Trace:
    """Read ``path``: counters straight into ``builder``, slices and flows returned (see module docstring)."""
    stream = TraceStream(path)
    events = event_tables(stream)
    builder.warnings += stream.warnings + [f"{path.name}: {n} {what}" for what, n in sorted(events.skipped.items())]
    source = events.slices
    roles = _roles(source, events.metadata)
    overlap = pc.equal(roles, "overlap")
    if pc.any(overlap).as_py():
        builder.warnings.append(f"{path.name}: {pc.sum(overlap).as_py()} Overlap Analysis events not read "
                                "(torch_npu's own overlap rows; perfsight computes overlap from the tasks)")
        source, roles = source.filter(pc.invert(overlap)), roles.filter(pc.invert(overlap))
    # args that are not objects were counted by event_tables already (its own decode fails on them too)
    args = decode_args([a.encode() if a else b"null" for a in source["args"].to_pylist()], _Args, Counter())
    npu = f"npu:{device}"
    track_keys = _tracks(source, roles, events.metadata, builder, rank, npu)
    kinds, task_types, steps = _kinds(source, roles, args)
    _add_counters(events.counters, events.metadata, builder, rank, npu)
    pairs = dictionary(pc.binary_join_element_wise(source["pid"], source["tid"], "\x1f"))
    rows = [track_keys[tuple(pair.split("\x1f", 1))] for pair in pairs.dictionary.to_pylist()]
    slices = pa.table({
        "track": pa.array(rows, pa.int32()).take(pairs.indices),
        "kind": kinds, "name": source["name"], "op_type": pa.nulls(source.num_rows, pa.string()),
        "start_ns": source["ts_ns"], "dur_ns": source["dur_ns"],
        "task_type": task_types, "step": steps,
        "correlation_id": pa.array([_int(a.connection_id) for a in args], pa.int64()),
        "input_shapes": _listed(source["input_shapes"], shapes_json),
        "input_dtypes": _listed(source["input_dtypes"], dtypes_json),
        "args": source["args"], "role": roles,
    })
    flows = events.flows.append_column("file", pa.array(np.zeros(events.flows.num_rows, np.int32)))
    return Trace(slices, flows, track_keys)


def _roles(source: pa.Table, metadata: TraceMetadata) -> pa.Array:
    """Each event's role: ``host`` when it has a category, else its process's (module docstring)."""
    pids = dictionary(source["pid"])
    by_pid = [process_role(metadata.process_names.get(pid)) or "other" for pid in pids.dictionary.to_pylist()]
    roles = pa.array(by_pid, pa.string()).take(pids.indices)
    return pc.if_else(pc.is_valid(source["cat"]), "host", roles)


def _tracks(source: pa.Table, roles: pa.Array, metadata: TraceMetadata, builder: RunBuilder, rank: int | None,
            npu: str) -> dict[tuple[str, str], int]:
    """One builder row per (pid, tid) of the slices."""
    keys: dict[tuple[str, str], int] = {}
    distinct = pc.unique(pc.binary_join_element_wise(roles, source["pid"], source["tid"], "\x1f"))
    for role, pid, tid in (key.split("\x1f") for key in distinct.to_pylist()):
        process = metadata.process_names.get(pid, f"process {pid}")
        thread = metadata.thread_names.get((pid, tid), f"Thread {tid}")
        sort_index = metadata.thread_sort_indexes.get((pid, tid))
        if role == "device":
            row = builder.track("stream", npu, f"{npu} stream {tid}", rank=rank, pid=pid, tid=tid,
                                sort_index=sort_index)
        elif role == "communication":
            row = builder.track("stream", npu, f"{npu} HCCL {thread}", rank=rank, pid=pid, tid=f"hccl {tid}",
                                sort_index=sort_index)
        else:
            row = builder.track("thread", "cpu", f"{process} {thread}", rank=rank, pid=pid, tid=tid,
                                sort_index=sort_index)
        keys.setdefault((pid, tid), row)
    return keys


def _kinds(source: pa.Table, roles: pa.Array, args: list) -> tuple[pa.Array, pa.Array, pa.Array]:
    """kind, task_type and step (ProfilerStep#N's N) of every event."""
    role = roles.to_numpy(zero_copy_only=False)
    host = classify_columns(source["cat"], source["name"])
    category = pc.utf8_lower(pc.fill_null(source["cat"], ""))
    kinds = np.array(host["kind"].to_pylist(), dtype=object)
    for name, kind in HOST_CATEGORY_KINDS.items():
        kinds[pc.equal(category, name).to_numpy(zero_copy_only=False)] = kind
    task_type = np.full(len(role), None, dtype=object)
    runtime = np.flatnonzero(role == "runtime")
    levels = pa.array([_text(args[row].level) for row in runtime.tolist()], pa.string())
    kinds[runtime] = api_kinds(levels, source["name"].take(pa.array(runtime))).to_pylist()
    device = np.flatnonzero(role == "device")
    task_type[device] = [_text(args[row].task_type) for row in device.tolist()]
    kinds[device] = task_kinds(pa.array(task_type[device], pa.string()), source["name"].take(pa.array(device))
                               ).to_pylist()
    for row in np.flatnonzero(role == "communication").tolist():
        part = _text(args[row].part_type)
        kinds[row], task_type[row] = ("other", part) if part else ("comm", "HCCL")
    kinds[role == "other"] = "other"
    step = pc.if_else(pc.equal(pa.array(kinds, pa.string()), "step"), host["name_step"], pa.scalar(None, pa.int32()))
    return pa.array(kinds, pa.string()), pa.array(task_type, pa.string()), step


def _listed(raw: pa.ChunkedArray, convert) -> pa.Array:
    """Raw JSON args values: a JSON list is kept; a JSON string (torch_npu's ``"a,b;\\r\\nc"``) is converted."""
    encoded = dictionary(raw)
    texts = [None if v is None else v if v.lstrip().startswith("[") else _string(v)
             for v in encoded.dictionary.to_pylist()]
    converted = convert(pa.array(texts, pa.string())).to_pylist()
    values = [v if v is not None and v.lstrip().startswith("[") else c for v, c in zip(texts, converted)]
    return pa.array(values, pa.string()).take(encoded.indices)


def _string(text: str) -> str | None:
    try:
        value = loads_bounded(text, "args")
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _int(value) -> int | None:
    if type(value) is int:
        return value
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _text(value) -> str | None:
    return value if isinstance(value, str) or value is None else str(value)


def _add_counters(counters: pa.Table, metadata: TraceMetadata, builder: RunBuilder, rank: int | None,
                  npu: str) -> None:
    """One series per (process, event name, args key); KB/MB values as bytes."""
    if not counters.num_rows:
        return
    keys = dictionary(pc.binary_join_element_wise(counters["pid"], pc.fill_null(counters["name"], ""),
                                                  counters["series"], "\x1f"))
    codes, ts, values = keys.indices.to_numpy(), counters["ts_ns"].to_numpy(), counters["value"].to_numpy()
    for code, key in enumerate(keys.dictionary.to_pylist()):
        pid, name, unit = key.split("\x1f")
        factor = _SIZE_UNITS.get(unit)
        series = f"{name} bytes" if factor else name if unit in (name, "value") else f"{name} {unit}"
        device = "cpu" if metadata.process_labels.get(pid) == "CPU" else npu
        track = builder.track("counter", device, series, rank=rank,
                              pid=metadata.process_names.get(pid, f"process {pid}"))
        rows = codes == code
        builder.add_counter(track, ts[rows], values[rows] * (factor or 1.0))
