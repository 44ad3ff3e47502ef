"""What a timeline draws, decided once for both timelines (the msprof timeline file of
views/export/timeline.py and the web timeline's index, analysis/timeline_index.py): the layer of every
slice and sample, the group of every track, and the counter and memory series.

**Layers** (the msprof timeline's processes, per rank; ``SLICE_LAYER_COLUMNS``, ``SAMPLE_LAYER_COLUMNS``):
a slice is drawn in ``Communication`` when it is communication (core/communication.py), else in ``Device
tasks <device>`` when it is on a stream, else in ``Runtime API`` when it is a runtime or driver call, else
in ``Framework (CPU ops, Python)``; a sample of a series in ``Host counters`` (the host's, or of no known
device) or ``Device counters <device>``. Layers are ordered framework, runtime, device, communication,
counters (``layer_order`` 1 to 5).

**Track groups** (the web timeline's rows, per rank, in ``GROUPS`` order; ``track_groups``): a stream is
in ``communication`` when it is a communication stream (core/communication.py: most of its device tasks are
communication slices), else in ``device streams``; a counter track with finite samples in ``counters``
(beside the memory series), one without in none (nothing to draw); every other track in ``host threads``.
``overlap analysis`` holds the rows of ``breakdown.overlap_intervals``, which the index adds.

**Series** (``counter_series``, ``memory_series``): each counter track's finite samples, named after the
track; and, from the memory table, ``Memory allocated`` and ``Memory reserved`` (the allocator's totals
after each event, where recorded) per rank and device. Within a series samples are in time order, samples
of one instant in table order.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.analysis.ops import API_KINDS_SQL, DEVICE_TASK_KINDS_SQL
from perfsight.core.communication import COMM_KIND, is_comm_stream
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables

#: track groups of a rank, in display order
GROUPS = ("host threads", "device streams", "communication", "overlap analysis", "counters")
#: the memory series: (memory table column, series name)
MEMORY_SERIES_COLUMNS = (("total_allocated", "Memory allocated"), ("total_reserved", "Memory reserved"))

#: SQL columns ``layer_order`` and ``layer`` of slice ``s`` on its track ``t``
SLICE_LAYER_COLUMNS = f"""
       CASE WHEN s.kind = '{COMM_KIND}' THEN 4 WHEN t.kind = 'stream' THEN 3
            WHEN s.kind IN ({API_KINDS_SQL}) THEN 2 ELSE 1 END AS layer_order,
       CASE WHEN s.kind = '{COMM_KIND}' THEN 'Communication'
            WHEN t.kind = 'stream' THEN 'Device tasks ' || coalesce(t.device, '?')
            WHEN s.kind IN ({API_KINDS_SQL}) THEN 'Runtime API'
            ELSE 'Framework (CPU ops, Python)' END AS layer"""

#: SQL columns ``layer_order`` and ``layer`` of a sample of a series of device ``device``
SAMPLE_LAYER_COLUMNS = """5 AS layer_order,
       CASE WHEN coalesce(device, 'cpu') = 'cpu' THEN 'Host counters' ELSE 'Device counters ' || device END AS layer"""

TRACK_GROUPS = pa.schema([("track_id", pa.int32()), ("rank", pa.int32()), ("group", pa.string())])

SERIES = pa.schema([
    ("track_id", pa.int32()),
    ("rank", pa.int32()),
    ("device", pa.string()),
    ("series", pa.string()),
    ("ts_ns", pa.int64()),
    ("value", pa.float64()),
])

_DEVICE_TASKS_PER_TRACK = f"""
SELECT track_id, count(*) AS tasks, count(*) FILTER (WHERE kind = '{COMM_KIND}') AS comm_tasks
FROM slices WHERE kind IN ({DEVICE_TASK_KINDS_SQL}) GROUP BY track_id
"""


def track_groups(tables: RunTables) -> pa.Table:
    """The group of every track drawn (schema ``TRACK_GROUPS``: track_id, rank (0 when unknown), group of
    ``GROUPS``; the module docstring gives the rule), in the tracks table's order."""
    tracks = tables.tracks
    tasks = tables.sql(_DEVICE_TASKS_PER_TRACK).to_arrow_table()
    at = pc.index_in(tracks.column("track_id"), tasks.column("track_id"))
    comm_tasks, all_tasks = (pc.fill_null(pc.take(tasks.column(c), at), 0).to_numpy() for c in ("comm_tasks", "tasks"))
    kind = tracks.column("kind").to_numpy(zero_copy_only=False)
    group = np.where(kind == "stream", np.where(is_comm_stream(comm_tasks, all_tasks), "communication",
                                                "device streams"),
                     np.where(kind == "counter", "counters", "host threads"))
    sampled = pc.is_in(tracks.column("track_id"), pc.unique(computed(counter_series, tables).column("track_id")))
    drawn = pc.or_(pc.not_equal(tracks.column("kind"), "counter"), sampled)
    return pa.table({"track_id": tracks.column("track_id"), "rank": pc.fill_null(tracks.column("rank"), 0),
                     "group": pa.array(group, pa.string())}, schema=TRACK_GROUPS).filter(drawn)


def counter_series(tables: RunTables) -> pa.Table:
    """Every finite sample of the counters table on a known track (schema ``SERIES``: the track's id, rank
    (0 when unknown), device, and name as ``series``), by track id, then time (one instant: table order)."""
    counters, tracks = tables.counters, tables.tracks
    at = pc.index_in(counters.column("track_id"), tracks.column("track_id"))
    keep = pc.and_(pc.is_valid(at), pc.is_finite(pc.fill_null(counters.column("value"), np.nan)))
    counters, at = counters.filter(keep), at.filter(keep)
    series = pa.table({
        "track_id": counters.column("track_id"), "rank": pc.fill_null(pc.take(tracks.column("rank"), at), 0),
        "device": pc.take(tracks.column("device"), at), "series": pc.take(tracks.column("name"), at),
        "ts_ns": counters.column("ts_ns"), "value": counters.column("value")}, schema=SERIES)
    return series.take(pc.sort_indices(series, [("track_id", "ascending"), ("ts_ns", "ascending")]))


def memory_series(tables: RunTables) -> pa.Table:
    """The memory series (schema ``SERIES``, ``track_id`` null: the module docstring), per rank (that of the
    event's track, 0 when unknown), device (in order of first appearance in the memory table; null when
    unknown) and series (allocated, then reserved), each by time (one instant: table order)."""
    memory = tables.memory
    if not memory.num_rows:
        return SERIES.empty_table()
    tracks = tables.tracks
    ranks = pc.fill_null(pc.take(tracks.column("rank"), pc.index_in(memory.column("track_id"),
                                                                     tracks.column("track_id"))), 0).to_numpy()
    encoded = pc.dictionary_encode(memory.column("device").combine_chunks(), null_encoding="encode")
    devices, names = encoded.indices.to_numpy(zero_copy_only=False), encoded.dictionary
    ts = memory.column("ts_ns").to_numpy()
    totals = [(pc.fill_null(memory.column(column).cast(pa.float64()), np.nan).to_numpy(), label)
              for column, label in MEMORY_SERIES_COLUMNS]
    parts = []
    for rank, device in np.unique(np.stack([ranks, devices]), axis=1).T.tolist():      # by rank, then device
        mine = (ranks == rank) & (devices == device)
        for values, label in totals:
            rows = np.flatnonzero(mine & np.isfinite(values))
            rows = rows[np.argsort(ts[rows], kind="stable")]
            parts.append(pa.table({
                "track_id": pa.nulls(rows.size, pa.int32()), "rank": pa.array(np.full(rows.size, rank), pa.int32()),
                "device": pa.repeat(names[device], rows.size).cast(pa.string()),
                "series": pa.array([label] * rows.size, pa.string()), "ts_ns": ts[rows], "value": values[rows]},
                schema=SERIES))
    return pa.concat_tables(parts)
