"""MindSpore's data-pipeline (MindData) profiling files of one rank read into a RunBuilder as counters.

* ``device_queue_profiling_N.txt`` (data sinking; else ``dataset_iterator_profiling_N.txt``): lines
  ``type extra_info batch_num value [time_stamp]``. Type 1 is the size of the queue the host pipeline
  fills for the device (``extra_info`` = its capacity): series ``minddata host_queue size`` (MindSpore
  Insight's 主机队列). Type 0 is a time in ms of the batch (``extra_info`` 0 push, 1 batch, 2 pipeline):
  series ``minddata push_time_ns`` / ``batch_time_ns`` / ``pipeline_time_ns`` in ns. The sample time is
  ``time_stamp`` (ms); lines without one (older MindSpore) use the batch number as ``ts_ns``.
* ``minddata_pipeline_raw_N.csv``: per pipeline operator, ``output_queue_size`` sampled every
  ``sample_interval`` ms from 0: series ``minddata host pipeline {op_type}#{op_id} output_queue``; the
  operator graph (workers, parent, children, queue length and usage) goes to meta.
* ``minddata_cpu_utilization_N.json``: per ``time_stamp`` (ms) the machine's (``device_info``), the
  process's and each pipeline operator's CPU utilisation (percent) and the machine's runnable processes
  and context switches: series ``minddata cpu {device|process|op N} {metric}``.

Queue series are named so the data analysis finds them (``queue`` in the name; ``host`` for a host-side
queue). Timestamps are on MindSpore's host clock (or from 0), not on the step trace's device clock.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from perfsight.core.files import read_regular
from perfsight.core.json_depth import loads_bounded
from perfsight.ingest.ascend.ascend_csv import RAGGED_SHOWN, number_rows, numbers, read_csv
from perfsight.ingest.common.build import RunBuilder
from perfsight.ingest.common.columns import counted

_MS = 1_000_000
_TIME_KINDS = {0: "push_time_ns", 1: "batch_time_ns", 2: "pipeline_time_ns"}


def add_device_queue(path: Path, builder: RunBuilder, *, rank: int, facts: dict) -> None:
    series: dict[str, tuple[list, list]] = {}
    capacity = None
    for number, line in enumerate(read_regular(path).decode("utf-8", "replace").splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        try:
            kind, extra, batch, value = (int(f) for f in fields[:4])
            ts = int(fields[4]) * _MS if len(fields) > 4 else batch
        except ValueError:
            builder.warnings.append(f"{path.name}: line {number} is not 'type extra_info batch value [time]'")
            continue
        if kind == 1:
            name, capacity = "minddata host_queue size", extra
        elif kind == 0 and extra in _TIME_KINDS:
            name, value = f"minddata {_TIME_KINDS[extra]}", value * _MS
        else:
            continue
        times, values = series.setdefault(name, ([], []))
        times.append(ts)
        values.append(float(value))
    for name, (times, values) in series.items():
        builder.add_counter(_track(builder, name, rank), times, values)
    if capacity is not None:
        facts["mindspore_host_queue_capacity"] = capacity
    builder.sources.append(str(path))


def add_pipeline(path: Path, builder: RunBuilder, *, rank: int, facts: dict) -> None:
    table = number_rows(read_csv(path, builder.warnings, required=["op_id", "op_type", "output_queue_size"]), path,
                        builder.warnings, numbers=["sample_interval"])
    interval = (numbers(table["sample_interval"]).to_pylist() if "sample_interval" in table.column_names
                else [None] * table.num_rows)
    bad = []
    for op_id, op_type, sizes, every in zip(table["op_id"].to_pylist(), table["op_type"].to_pylist(),
                                            table["output_queue_size"].to_pylist(), interval):
        values = _list(sizes)
        if values is None:
            bad.append(f"{op_type}#{op_id} {sizes!r}")
        elif values:
            step = int((every or 1) * _MS)
            track = _track(builder, f"minddata host pipeline {op_type}#{op_id} output_queue", rank)
            builder.add_counter(track, np.arange(len(values), dtype=np.int64) * step, values)
    if bad:
        builder.warnings.append(f"{path.name}: {counted(len(bad), 'output_queue_size')} not a list of numbers, not "
                                f"read: {', '.join(bad[:RAGGED_SHOWN])}")
    facts["mindspore_pipeline"] = table.drop_columns(["output_queue_size"]).to_pylist()
    builder.sources.append(str(path))


def add_cpu_utilization(path: Path, builder: RunBuilder, *, rank: int) -> None:
    try:
        data = loads_bounded(read_regular(path), path.name)
        times = np.array([int(t) for t in data["time_stamp"]], dtype=np.int64) * _MS
    except (OSError, ValueError, KeyError, TypeError, OverflowError) as error:
        builder.warnings.append(f"{path.name}: not a MindData CPU utilisation file ({error}); expected JSON with "
                                "time_stamp (a list of integer ms), device_info, process_info, op_info; not read")
        return
    ops = data.get("op_info") if isinstance(data.get("op_info"), list) else []
    groups = [("device", data.get("device_info")), ("process", data.get("process_info"))]
    groups += [(f"op {op.get('op_id')}", op.get("metrics")) if isinstance(op, dict) else ("op ?", op) for op in ops]
    bad = [who for who, metrics in groups if metrics is not None and not isinstance(metrics, dict)]
    for who, metrics in groups:
        for metric, values in (metrics.items() if isinstance(metrics, dict) else ()):
            series = _numbers(values, len(times))
            if series is None:
                bad.append(f"{who} {metric}")
            else:
                builder.add_counter(_track(builder, f"minddata cpu {who} {metric}", rank), times, series)
    if bad:
        builder.warnings.append(f"{path.name}: {counted(len(bad), 'metric')} not read (not a list of "
                                f"{len(times)} numbers, one per time_stamp, or not an object of them): "
                                f"{', '.join(bad[:RAGGED_SHOWN])}")
    builder.sources.append(str(path))


def _track(builder: RunBuilder, name: str, rank: int) -> int:
    return builder.track("counter", "cpu", name, rank=rank, pid="MindData")


def _list(text: str | None) -> list[float] | None:
    """``"[10, 20, 30]"`` -> [10.0, 20.0, 30.0]; empty -> []; None when not a list of numbers."""
    if not text or not text.strip():
        return []
    try:
        values = loads_bounded(text, "output_queue_size")
    except ValueError:
        return None
    return _numbers(values, len(values)) if isinstance(values, list) else None


def _numbers(values, n: int) -> list[float] | None:
    """``values`` as floats when it is a list of ``n`` numbers (not booleans), else None."""
    if not isinstance(values, list) or len(values) != n or \
            not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    return [float(v) for v in values]
