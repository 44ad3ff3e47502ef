"""kernel_details.csv of a torch_npu profile: what it says about each device task, joined to the trace's tasks.

Owns matching a kernel_details row to the trace's device task (same name, start within
``MATCH_TOLERANCE_NS``, nearest first, each task used once: the CSV rounds times to the ns its own way, and
HCCL rows can be 1 ns off the trace) and what the row adds to the task: ``op_type`` (``Type``),
``task_type`` (``Accelerator Core``: more precise than the trace's ``Task Type``, e.g. AI_VECTOR_CORE for a
task the trace calls AI_CORE), ``step`` (``Step Id``), ``input_shapes`` / ``input_dtypes`` (embedded quotes
stripped, as JSON lists) and every other column (block dim, formats, output shapes, PMU metrics...) merged
into ``args`` (numbers as JSON numbers; canonical names for the columns ascend_csv knows, the header
otherwise). Without trace_view.json the rows themselves become the device tasks (``tasks_from_kernels``),
on one row per ``Stream ID`` (``npu:D stream S``), or per accelerator core for the rows without one
(``npu:D HCCL``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.tables import new_connection
from perfsight.ingest.ascend.ascend_csv import (
    dtypes_json,
    ns_from_us,
    number_rows,
    numbers,
    read_csv,
    row_json,
    shapes_json,
)
from perfsight.ingest.ascend.ascend_kinds import task_kinds
from perfsight.ingest.common.build import RunBuilder
from perfsight.ingest.common.columns import dictionary

MATCH_TOLERANCE_NS = 1000
_USED = {"name", "op_type", "task_type", "start_us", "duration_us", "step", "input_shapes", "input_dtypes"}


def read_kernels(path: Path, warnings: list[str]) -> pa.Table:
    """The rows as columns: name, op_type, task_type, start_ns, dur_ns, step, input_shapes, input_dtypes,
    extra (JSON text of the other columns), stream. Rows without a start time, or with a time, step or stream
    that is not a number, are left out (warned)."""
    table = number_rows(read_csv(path, warnings, required=["name", "start_us", "duration_us"]), path, warnings,
                        times=["start_us", "duration_us"], numbers=["step", "stream_id"])
    start = ns_from_us(table["start_us"])
    if start.null_count:
        warnings.append(f"{path.name}: {start.null_count} rows without a start time (not read)")
        table, start = table.filter(pc.is_valid(start)), start.drop_null()
    duration = ns_from_us(table["duration_us"])
    return pa.table({
        "name": _column(table, "name"), "op_type": _column(table, "op_type"),
        "task_type": _column(table, "task_type"), "start_ns": start,
        "dur_ns": pc.max_element_wise(pc.fill_null(duration, 0), 0),
        "step": numbers(_column(table, "step"), pa.int32()),
        "input_shapes": shapes_json(_column(table, "input_shapes")),
        "input_dtypes": dtypes_json(_column(table, "input_dtypes")),
        "extra": row_json(pa.table({name: _typed(table[name]) for name in table.column_names if name not in _USED})),
        "stream": _column(table, "stream_id"),
    })


def _column(table: pa.Table, name: str) -> pa.Array:
    return table[name].combine_chunks() if name in table.column_names else pa.nulls(table.num_rows, pa.string())


def _typed(column: pa.ChunkedArray) -> pa.Array:
    """A text column as integers or floats when every value is a number (``N/A`` and empty are already null),
    else as text without its embedded quotes (``"32,1,224,224,8"`` -> ``32,1,224,224,8``)."""
    values = numbers(column)
    if values.null_count != column.null_count:
        return pc.utf8_trim(pc.utf8_trim_whitespace(column.combine_chunks()), '"')
    whole = pc.all(pc.equal(pc.floor(values), values)).as_py() is not False
    return values.cast(pa.int64()) if whole else values


def enrich(slices: pa.Table, kernels: pa.Table, *, name: str, warnings: list[str]) -> pa.Table:
    """``slices`` (torch_npu_trace.Trace.slices) with each matched device task completed by its row."""
    device = np.flatnonzero(pc.is_in(slices["role"], pa.array(["device", "communication"])).to_numpy(
        zero_copy_only=False) & pc.not_equal(slices["kind"], "other").to_numpy(zero_copy_only=False))
    task, row = match(slices["name"].take(device), slices["start_ns"].take(device).to_numpy(),
                      kernels["name"], kernels["start_ns"].to_numpy())
    if len(row) < kernels.num_rows:
        warnings.append(f"{name}: {kernels.num_rows - len(row)} rows match no device task of the trace "
                        f"(same name, start within {MATCH_TOLERANCE_NS} ns); not read")
    rows = device[task]
    matched = kernels.take(pa.array(row, pa.int64()))
    for column in ("op_type", "task_type", "step", "input_shapes", "input_dtypes"):
        slices = replace_rows(slices, column, rows, matched[column])
    return replace_rows(slices, "args", rows, merge_args(slices["args"].take(pa.array(rows, pa.int64())),
                                                         matched["extra"]))


def match(task_names: pa.Array, task_starts: np.ndarray, names: pa.ChunkedArray, starts: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (task position, row) of the same name and starts within the tolerance, nearest first, each
    task and each row used once; sorted by task position."""
    encoded = dictionary(pa.chunked_array([pa.array(task_names, pa.string()), *names.chunks], pa.string()))
    codes = encoded.indices.to_numpy()
    task_codes, row_codes = codes[:len(task_starts)], codes[len(task_starts):]
    found = [_nearest(np.flatnonzero(task_codes == code), np.flatnonzero(row_codes == code), task_starts, starts)
             for code in np.intersect1d(task_codes, row_codes).tolist()]
    tasks = np.concatenate([f[0] for f in found] or [np.zeros(0, np.int64)])
    rows = np.concatenate([f[1] for f in found] or [np.zeros(0, np.int64)])
    order = np.argsort(tasks, kind="stable")
    return tasks[order], rows[order]


def _nearest(tasks: np.ndarray, rows: np.ndarray, task_starts: np.ndarray, starts: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """The (tasks, rows) pairs of one name: each row takes the task starting nearest to it (the two around
    it by binary search) within the tolerance; when rows want the same task, the nearest wins, greedily."""
    order = tasks[np.argsort(task_starts[tasks], kind="stable")]
    after = np.clip(np.searchsorted(task_starts[order], starts[rows]), 0, len(order) - 1)
    before = np.maximum(after - 1, 0)
    gaps = np.abs(task_starts[order[np.stack([after, before])]] - starts[rows])
    pick = np.where(gaps[1] < gaps[0], before, after)
    task, ok = order[pick], gaps.min(axis=0) <= MATCH_TOLERANCE_NS
    wanted, count = np.unique(task[ok], return_counts=True)
    clash = ok & np.isin(task, wanted[count > 1])
    kept = ok & ~clash
    used_tasks, used_rows, extra = set(task[kept].tolist()), set(), []
    candidates = sorted((int(gaps[k, i]), int(order[(after, before)[k][i]]), int(rows[i]))
                        for i in np.flatnonzero(clash).tolist() for k in (0, 1))
    for distance, candidate, row in candidates:
        if distance <= MATCH_TOLERANCE_NS and candidate not in used_tasks and row not in used_rows:
            used_tasks.add(candidate)
            used_rows.add(row)
            extra.append((candidate, row))
    return (np.concatenate([task[kept], np.array([e[0] for e in extra], np.int64)]),
            np.concatenate([rows[kept], np.array([e[1] for e in extra], np.int64)]))


def merge_args(args: pa.Array, patches: pa.Array) -> pa.Array:
    """Each ``args`` JSON object text with its ``patches`` object's keys added (RFC 7386: a null value
    removes the key); a null patch leaves the args as they are."""
    con = new_connection()
    con.register("t", pa.table({"args": args, "patch": patches}))
    return con.sql("SELECT CASE WHEN patch IS NULL THEN args "
                   "ELSE json_merge_patch(coalesce(args, '{}'), patch)::VARCHAR END FROM t"
                   ).to_arrow_table().column(0).combine_chunks()


def replace_rows(table: pa.Table, column: str, rows: np.ndarray, values: pa.Array) -> pa.Table:
    """``table`` with ``column``'s ``rows`` replaced by the non-null ``values``."""
    current = table[column].combine_chunks()
    full = np.full(table.num_rows, -1, np.int64)
    full[rows] = np.arange(len(rows))
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    scattered = values.cast(current.type).take(pa.array(full, pa.int64(), mask=full < 0))
    return table.set_column(table.schema.get_field_index(column), column, pc.coalesce(scattered, current))


def tasks_from_kernels(kernels: pa.Table, builder: RunBuilder, *, rank: int | None, device: int) -> pa.Table:
    """The rows as device tasks, in the Trace.slices layout (no trace_view.json to join them to)."""
    npu = f"npu:{device}"
    streams = numbers(kernels["stream"], pa.int64()).cast(pa.string())
    lanes = dictionary(pc.coalesce(pc.binary_join_element_wise("stream ", streams, ""), kernels["task_type"],
                                   pa.scalar("tasks")))
    rows = [builder.track("stream", npu, f"{npu} {lane}", rank=rank, tid=lane) for lane in lanes.dictionary.to_pylist()]
    kind = task_kinds(kernels["task_type"], kernels["name"])
    n = kernels.num_rows
    return pa.table({
        "track": pa.array(np.array(rows, np.int32)[lanes.indices.to_numpy()] if n else [], pa.int32()),
        "kind": kind, "name": kernels["name"], "op_type": kernels["op_type"], "start_ns": kernels["start_ns"],
        "dur_ns": kernels["dur_ns"], "task_type": kernels["task_type"], "step": kernels["step"],
        "correlation_id": pa.nulls(n, pa.int64()),
        "input_shapes": kernels["input_shapes"], "input_dtypes": kernels["input_dtypes"],
        "args": kernels["extra"], "role": pc.if_else(pc.equal(kind, "comm"), "communication", "device"),
    })
