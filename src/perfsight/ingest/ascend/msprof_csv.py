"""The summary CSV exports msprof writes and torch_npu does not, read by header name (ascend_csv).

(op_summary is kernel_details.csv's twin: torch_npu_kernels.read_kernels reads it; the timeline is
trace_view.json's: torch_npu_trace.read_trace.) Each function takes the parts of one export in order
(``_slice_N_`` splits concatenated; msprof_dir orders them) and the device of rows without ``Device_id``:

* ``task_kernels``: ``task_time`` rows (kernel_name, kernel_type = the task type, stream_id, task_id,
  task_start(us), task_time(us)) in read_kernels' layout, for when there is neither timeline nor op_summary;
* ``step_rows``: ``step_trace`` rows (Iteration ID; from Iteration End(us) - Iteration Time(us) to Iteration
  End(us); FP Start(us), BP End(us));
* ``statistic_rows``: ``op_statistic`` / ``api_statistic`` rows verbatim, for meta (msprof's own
  aggregates; the analyses recompute them from the tasks and API calls);
* ``add_npu_mem``: ``npu_mem`` samples (ddr, hbm, memory in KB -> bytes) as counters
  ``npu.mem.{event}.{ddr|hbm|memory}_bytes``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.ingest.ascend.ascend_csv import bytes_from, ns_from_us, number_rows, numbers, read_csv, row_json
from perfsight.ingest.common.build import RunBuilder

_TASK_TIME_USED = {"name", "kernel_name", "task_type", "kernel_type", "start_us", "duration_us", "stream_id"}


def task_kernels(paths: list[Path], warnings: list[str]) -> pa.Table:
    """task_time rows in torch_npu_kernels.read_kernels' layout (name, op_type, task_type, start_ns, dur_ns,
    step, input_shapes, input_dtypes, extra, stream)."""
    parts = []
    for path in paths:
        table = number_rows(read_csv(path, warnings, required=["start_us", "duration_us"]), path, warnings,
                            times=["start_us", "duration_us"], numbers=["stream_id"])
        names = [table[c] for c in ("name", "kernel_name") if c in table.column_names]
        types = [table[c] for c in ("task_type", "kernel_type") if c in table.column_names]
        if not names:
            read_csv(path, warnings, required=["kernel_name"])  # the clear error naming the file and the column
        n = table.num_rows
        parts.append(pa.table({
            "name": pc.coalesce(*names).combine_chunks(), "op_type": pa.nulls(n, pa.string()),
            "task_type": pc.coalesce(*types).combine_chunks() if types else pa.nulls(n, pa.string()),
            "start_ns": ns_from_us(table["start_us"]),
            "dur_ns": pc.max_element_wise(pc.fill_null(ns_from_us(table["duration_us"]), 0), 0),
            "step": pa.nulls(n, pa.int32()), "input_shapes": pa.nulls(n, pa.string()),
            "input_dtypes": pa.nulls(n, pa.string()),
            "extra": row_json(table.select([c for c in table.column_names if c not in _TASK_TIME_USED])),
            "stream": (table["stream_id"].combine_chunks() if "stream_id" in table.column_names
                       else pa.nulls(n, pa.string())),
        }))
    return pa.concat_tables(parts)


def step_rows(paths: list[Path], warnings: list[str], *, device: int) -> pa.Table:
    """step_trace rows: device, step, start_ns, end_ns, fp_ns, bp_ns."""
    parts = []
    for path in paths:
        table = number_rows(read_csv(path, warnings, required=["step", "iteration_end_us", "iteration_time_us"]),
                            path, warnings, times=["iteration_end_us", "iteration_time_us", "fp_start_us", "bp_end_us"],
                            numbers=["step", "device_id"])
        end = ns_from_us(table["iteration_end_us"])
        optional = {name: ns_from_us(table[column]) if column in table.column_names
                    else pa.nulls(table.num_rows, pa.int64())
                    for name, column in (("fp_ns", "fp_start_us"), ("bp_ns", "bp_end_us"))}
        parts.append(pa.table({
            "device": pc.fill_null(_devices(table), device), "step": numbers(table["step"], pa.int32()),
            "start_ns": pc.subtract(end, ns_from_us(table["iteration_time_us"])),
            "end_ns": end, **optional}))
    return pa.concat_tables(parts)


def statistic_rows(paths: list[Path], warnings: list[str]) -> list[dict]:
    """op_statistic / api_statistic rows as read (canonical names where the alias table knows them)."""
    return [row for path in paths for row in read_csv(path, warnings).to_pylist()]


def add_npu_mem(paths: list[Path], builder: RunBuilder, *, device: int, ranks: dict[int, int | None]) -> None:
    """npu_mem rows as counters ``npu.mem.{event}.{ddr|hbm|memory}_bytes`` on their device."""
    for path in paths:
        table = number_rows(read_csv(path, builder.warnings, required=["timestamp_us"]), path, builder.warnings,
                            times=["timestamp_us"], numbers=["device_id", "ddr_kb", "hbm_kb", "memory_kb"])
        ts = ns_from_us(table["timestamp_us"]).to_numpy(zero_copy_only=False)
        devices = pc.fill_null(_devices(table), device).to_numpy()
        events = (pc.fill_null(table["event"], "").to_numpy(zero_copy_only=False) if "event" in table.column_names
                  else np.full(table.num_rows, "", dtype=object))
        for field in ("ddr", "hbm", "memory"):
            if f"{field}_kb" not in table.column_names:
                continue
            values = bytes_from(table[f"{field}_kb"], "KB")
            valid = pc.is_valid(values).to_numpy(zero_copy_only=False)
            values = pc.fill_null(values, 0).to_numpy()
            for npu, event in sorted(set(zip(devices[valid].tolist(), events[valid].tolist()))):
                rows = valid & (devices == npu) & (events == event)
                series = ".".join(part for part in ("npu.mem", event.lower(), f"{field}_bytes") if part)
                track = builder.track("counter", f"npu:{npu}", series, rank=ranks.get(npu), pid=path.name)
                builder.add_counter(track, ts[rows], values[rows].astype(np.float64))
        builder.sources.append(str(path))


def _devices(table: pa.Table) -> pa.Array:
    if "device_id" not in table.column_names:
        return pa.nulls(table.num_rows, pa.int32())
    return numbers(table["device_id"], pa.int32())
