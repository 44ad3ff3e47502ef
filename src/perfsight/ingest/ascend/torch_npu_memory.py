"""NPU memory of a torch_npu profile: memory_record.csv, operator_memory.csv and npu_module_mem.csv.

Owns:

* the ``memory`` rows: memory_record.csv's records of the framework's allocator (component ``PTA``,
  torch_npu's PyTorch adapter; ``MindSpore`` / ``MS`` for MindSpore; every row when the file has no
  ``Component`` column), in file order: ``ts_ns``, ``total_allocated`` / ``total_reserved`` (MB -> bytes)
  after the record and ``bytes`` = the change of ``total_allocated`` since the previous record that has
  one (the first record: 0), the device (``NPU:0`` -> ``npu:0``); the file records no address (``addr`` null). A record
  at the exact time of an operator_memory.csv allocation or release names its operator (``op_name``, for
  the caller to find the operator slice);
* counter series of the other components (``npu.memory.{component}.allocated_bytes``, ``.reserved_bytes``,
  ``.active_bytes``: ``APP`` the whole process as the driver sees it, ``GE`` the graph engine, ``PTA+GE``
  both) and of npu_module_mem.csv (``npu.module_memory.{component}.reserved_bytes``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.ingest.ascend.ascend_csv import bytes_from, ns_from_us, number_rows, read_csv
from perfsight.ingest.common.build import RunBuilder
from perfsight.ingest.common.columns import dictionary

ALLOCATOR_COMPONENTS = ("PTA", "MindSpore", "MS")
_TOTALS = {"allocated": "total_allocated_mb", "reserved": "total_reserved_mb", "active": "total_active_mb"}


def read_memory(output: Path, builder: RunBuilder, *, rank: int | None, device: int,
                files: tuple[str, ...]) -> pa.Table:
    """The allocator's records (ts_ns, bytes, total_allocated, total_reserved, device, op_name); the other
    components and the modules as counters in ``builder``. Files that are absent or not named in ``files``
    give nothing."""
    npu = f"npu:{device}"

    def readable(name: str) -> bool:
        return name in files and (output / name).is_file()

    records = _read(output / "memory_record.csv", builder.warnings) if readable("memory_record.csv") else None
    if readable("npu_module_mem.csv"):
        modules = _read(output / "npu_module_mem.csv", builder.warnings, required=("timestamp_us", "total_reserved_mb"))
        _series(modules, "npu.module_memory", {"reserved": "total_reserved_mb"}, output / "npu_module_mem.csv",
                builder, rank, npu)
    if records is None:
        return _empty()
    component = records["Component"] if "Component" in records.column_names else None
    present = set(pc.unique(component).to_pylist()) if component is not None else set()
    allocator = next((c for c in ALLOCATOR_COMPONENTS if c in present), None)
    if component is not None:
        others = records.filter(pc.invert(pc.fill_null(pc.equal(component, allocator or ""), False)))
        _series(others, "npu.memory", _TOTALS, output / "memory_record.csv", builder, rank, npu)
        records = records.filter(pc.fill_null(pc.equal(component, allocator or ""), False))
    ts = ns_from_us(records["timestamp_us"])
    records, ts = records.filter(pc.is_valid(ts)), ts.drop_null()
    allocated = _bytes(records, "total_allocated_mb")
    return pa.table({
        "ts_ns": ts, "bytes": _changes(allocated), "total_allocated": allocated,
        "total_reserved": _bytes(records, "total_reserved_mb"),
        "device": _devices(records, npu), "op_name": _operators(output / "operator_memory.csv", ts, builder.warnings),
    })


def _changes(totals: pa.Array) -> pa.Array:
    """Each total minus the previous known one (0 for the first, and for a record without a total)."""
    values = totals.to_numpy(zero_copy_only=False).astype(np.float64)
    known = ~np.isnan(values)
    last = np.maximum.accumulate(np.where(known, np.arange(len(values)), -1))
    previous = np.concatenate([[-1], last[:-1]]) if len(values) else last
    change = np.where(known & (previous >= 0), values - values[np.maximum(previous, 0)], 0)
    return pa.array(change.astype(np.int64), pa.int64())


def _read(path: Path, warnings: list[str], required: tuple[str, ...] = ("timestamp_us",)) -> pa.Table:
    """memory_record.csv or npu_module_mem.csv: the rows whose time and totals are numbers."""
    return number_rows(read_csv(path, warnings, required=required), path, warnings, times=["timestamp_us"],
                       numbers=list(_TOTALS.values()))


def _bytes(table: pa.Table, column: str) -> pa.Array:
    return bytes_from(table[column], "MB") if column in table.column_names else pa.nulls(table.num_rows, pa.int64())


def _devices(table: pa.Table, default: str) -> pa.Array:
    if "device_type" not in table.column_names:
        return pa.array([default] * table.num_rows, pa.string())
    named = pc.utf8_lower(pc.replace_substring_regex(table["device_type"], r"^\s*NPU:?\s*(\d+)\s*$", "npu:\\1"))
    return pc.fill_null(named, default).combine_chunks()


def _operators(path: Path, ts: pa.Array, warnings: list[str]) -> pa.Array:
    """The operator_memory.csv operator allocating or releasing at exactly each time (null for none)."""
    if not path.is_file():
        return pa.nulls(len(ts), pa.string())
    table = number_rows(read_csv(path, warnings, required=["name", "allocation_us"]), path, warnings,
                        times=["allocation_us", "release_us"])
    times = [ns_from_us(table["allocation_us"])]
    names = [table["name"].combine_chunks()]
    if "release_us" in table.column_names:
        times.append(ns_from_us(table["release_us"]))
        names.append(table["name"].combine_chunks())
    times, names = pa.concat_arrays(times), pa.concat_arrays(names)
    position = pc.index_in(ts, value_set=times, skip_nulls=True)
    return names.take(position)


def _series(table: pa.Table, prefix: str, totals: dict[str, str], path: Path, builder: RunBuilder,
            rank: int | None, npu: str) -> None:
    """One counter series per component and total (MB -> bytes)."""
    if not table.num_rows:
        return
    ts = ns_from_us(table["timestamp_us"]).to_numpy(zero_copy_only=False)
    components = dictionary(pc.fill_null(table["Component"], "") if "Component" in table.column_names
                            else pa.array([""] * table.num_rows))
    codes = components.indices.to_numpy()
    for what, column in totals.items():
        if column not in table.column_names:
            continue
        values = bytes_from(table[column], "MB").to_numpy(zero_copy_only=False)
        for code, component in enumerate(components.dictionary.to_pylist()):
            rows = (codes == code) & ~np.isnan(values.astype(np.float64))
            if rows.any():
                series = ".".join(part for part in (prefix, component, f"{what}_bytes") if part)
                builder.add_counter(builder.track("counter", npu, series, rank=rank, pid=path.name),
                                    ts[rows], values[rows].astype(np.float64))


def _empty() -> pa.Table:
    return pa.table({"ts_ns": pa.array([], pa.int64()), "bytes": pa.array([], pa.int64()),
                     "total_allocated": pa.array([], pa.int64()), "total_reserved": pa.array([], pa.int64()),
                     "device": pa.array([], pa.string()), "op_name": pa.array([], pa.string())})
