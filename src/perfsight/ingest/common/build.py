"""Assembling the canonical tables of the Ascend readers (torch_npu text, msprof, MindSpore), whose sources
come as several files of rows.

Owns ``RunBuilder``: a reader declares timeline rows (``track``), adds slices and counter samples as Arrow
columns in source order, and ``finish`` makes the six canonical tables: track ids in display order
(threads, then streams, then counters; ``track_offset`` + position), slice ids (``id_offset`` + row),
nesting per track (kineto_nesting), the step of every slice its source does not place (the rank's step
whose span holds the slice's start), launch flows (a device task and the host call with the same rank and
``correlation_id``: msprof's ``connection_id``) and meta.

Also owns ``add_steps``: a step trace given as numbers (msprof's step_trace CSV, MindSpore's
step_trace_raw) as slices on a timeline row.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.tables import SLICES, TRACKS, RunTables, conform, flows_table, meta_table
from perfsight.ingest.common.nesting import Nesting, overlap_warning

#: source columns a slice part may give (besides the required track, kind, name, start_ns, dur_ns)
_OPTIONAL = [f for f in SLICES if f.name not in ("id", "kind", "name", "track_id", "start_ns", "dur_ns",
                                                  "depth", "parent_id")]
_PART = pa.schema([pa.field("track", pa.int32()), pa.field("kind", pa.string()), pa.field("name", pa.string()),
                   pa.field("start_ns", pa.int64()), pa.field("dur_ns", pa.int64()), *_OPTIONAL,
                   pa.field("placeable", pa.bool_())])
_KIND_ORDER = {"thread": 0, "stream": 1, "overlap": 2, "counter": 3}


@dataclass
class RunBuilder:
    """Tracks, slices and counters of one run, gathered from several files, turned into RunTables."""

    warnings: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    _track_rows: list[dict] = field(default_factory=list)
    _track_keys: dict[tuple, int] = field(default_factory=dict)
    _slices: list[pa.Table] = field(default_factory=list)
    _counters: list[pa.Table] = field(default_factory=list)

    def track(self, kind: str, device: str, name: str, *, rank: int | None, pid: str | None = None,
              tid: str | None = None, sort_index: int | None = None) -> int:
        """The local index of the timeline row (created on first use; the same key gives the same row)."""
        key = (kind, rank, device, pid, tid, name)
        index = self._track_keys.get(key)
        if index is None:
            index = self._track_keys[key] = len(self._track_rows)
            self._track_rows.append(dict(kind=kind, rank=rank, device=device, name=name, pid=pid, tid=tid,
                                         sort_index=sort_index))
        return index

    def add_slices(self, columns: dict, *, placeable: bool = True) -> None:
        """Slices in source order: ``track`` (local index), ``kind``, ``name``, ``start_ns``, ``dur_ns`` and
        any optional canonical slice columns (op_type, task_type, step, correlation_id, input_shapes, ...).
        ``placeable=False``: times not on the step trace's clock; such slices get no step by time."""
        length = len(columns["name"])
        columns = {**columns, "placeable": np.full(length, placeable)}
        arrays = [_array(columns.get(f.name), f.type, length) for f in _PART]
        self._slices.append(pa.Table.from_arrays(arrays, schema=_PART))

    def add_counter(self, track: int, ts_ns, values) -> None:
        ts = pa.array(ts_ns, pa.int64())
        self._counters.append(pa.table({"track": pa.array(np.full(len(ts), track, np.int32)), "ts_ns": ts,
                                        "value": pa.array(values, pa.float64())}))

    def finish(self, facts: dict, *, id_offset: int = 0, track_offset: int = 0) -> RunTables:
        """The canonical tables; ``facts`` become meta (with ``source_files`` and ``parse_warnings``)."""
        order = sorted(range(len(self._track_rows)), key=lambda i: _display_order(self._track_rows[i]))
        final = np.zeros(len(self._track_rows), dtype=np.int32)
        final[order] = track_offset + np.arange(len(order), dtype=np.int32)
        tracks = pa.Table.from_pylist([{**self._track_rows[i], "track_id": int(final[i])} for i in order],
                                      schema=TRACKS)
        source = pa.concat_tables(self._slices or [_PART.empty_table()])
        local = source["track"].to_numpy()
        ranks = np.array([-1 if r["rank"] is None else r["rank"] for r in self._track_rows] or [0])[local]
        streams = np.array([r["kind"] == "stream" for r in self._track_rows] or [False])[local]
        slices, overlaps = _slices(source, final[local], ranks, id_offset)
        if overlaps:
            self.warnings.append(overlap_warning(overlaps))
        counters = pa.concat_tables(self._counters or [pa.table({"track": pa.array([], pa.int32()),
                                                                 "ts_ns": pa.array([], pa.int64()),
                                                                 "value": pa.array([], pa.float64())})])
        facts = {**facts, "source_files": self.sources, "parse_warnings": self.warnings}
        return RunTables(
            slices=slices,
            tracks=tracks,
            counters=conform("counters", pa.table({"track_id": pa.array(final[counters["track"].to_numpy()]),
                                                   "ts_ns": counters["ts_ns"], "value": counters["value"]})),
            flows=_launch_flows(slices, ranks, streams),
            meta=meta_table(facts),
        )


def _array(values, type: pa.DataType, length: int) -> pa.Array:
    if values is None:
        return pa.nulls(length, type)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values.cast(type) if isinstance(values, pa.Array) else pa.array(values, type)


def _display_order(row: dict) -> tuple:
    rank = -1 if row["rank"] is None else row["rank"]
    sort_index = row["sort_index"]
    return (_KIND_ORDER[row["kind"]], rank, row["device"] or "", sort_index is None, sort_index or 0,
            row["name"])


def _slices(source: pa.Table, track_ids: np.ndarray, ranks: np.ndarray, id_offset: int) -> tuple[pa.Table, int]:
    start = source["start_ns"].to_numpy()
    dur = source["dur_ns"].to_numpy()
    nesting = Nesting(track_ids, start, dur)
    ids = id_offset + np.arange(source.num_rows, dtype=np.int64)
    parent = nesting.parent
    columns = {name: source[name] for name in source.column_names if name not in ("track", "placeable")}
    columns.update(id=ids, track_id=pa.array(track_ids, pa.int32()),
                   depth=pa.array(nesting.depth.astype(np.int16)),
                   parent_id=pa.array(np.where(parent >= 0, id_offset + parent, 0), pa.int64(), mask=parent < 0),
                   step=_steps_by_time(source, ranks))
    return conform("slices", pa.table(columns)), nesting.overlaps


def _steps_by_time(source: pa.Table, ranks: np.ndarray) -> pa.Array:
    """The source's step where it gives one, else (placeable slices) the step of the same rank whose span
    holds the start."""
    given = source["step"]
    steps = pc.fill_null(given, -1).to_numpy().astype(np.int64)
    start = source["start_ns"].to_numpy()
    end = start + source["dur_ns"].to_numpy()
    is_step = pc.equal(source["kind"], "step").to_numpy(zero_copy_only=False) & (steps >= 0)
    for rank in np.unique(ranks[is_step]).tolist():
        rows = np.flatnonzero(is_step & (ranks == rank))
        numbers, step_of_row = np.unique(steps[rows], return_inverse=True)
        first = np.full(len(numbers), np.iinfo(np.int64).max)
        np.minimum.at(first, step_of_row, start[rows])
        last = np.full(len(numbers), np.iinfo(np.int64).min)
        np.maximum.at(last, step_of_row, end[rows])
        by_start = np.argsort(first, kind="stable")
        first, last, numbers = first[by_start], last[by_start], numbers[by_start]
        todo = np.flatnonzero((steps < 0) & (ranks == rank) & source["placeable"].to_numpy(zero_copy_only=False))
        position = np.searchsorted(first, start[todo], side="right") - 1
        inside = (position >= 0) & (start[todo] < last[np.maximum(position, 0)])
        steps[todo[inside]] = numbers[position[inside]]
    return pa.array(steps, pa.int32(), mask=steps < 0)


def _launch_flows(slices: pa.Table, ranks: np.ndarray, streams: np.ndarray) -> pa.Table:
    """``launch`` flows: each device task to the first host slice of its rank with its correlation id."""
    correlation = slices["correlation_id"]
    keys = pc.binary_join_element_wise(pa.array(ranks.astype(str)), correlation.cast(pa.string()), ":")
    valid = pc.is_valid(correlation).to_numpy(zero_copy_only=False)
    host = np.flatnonzero(valid & ~streams)
    device = np.flatnonzero(valid & streams)
    match = pc.index_in(keys.take(pa.array(device)), value_set=keys.take(pa.array(host)))
    match = pc.fill_null(match, -1).to_numpy()
    found = match >= 0
    ids = slices["id"].to_numpy()
    return flows_table(ids[host[match[found]]], ids[device[found]], "launch")


def add_steps(builder: RunBuilder, track: int, steps: pa.Table, *, phases: dict[str, str] | None = None,
              gap: str | None = None) -> None:
    """A step trace as slices on ``track``: per row of ``steps`` (columns step, start_ns, end_ns, fp_ns,
    bp_ns; fp/bp may be null) a ``step`` slice named ``Iteration N``; with ``phases``, ``annotation``
    slices for the forward+backward span [fp, bp) and the tail [bp, end) named ``phases["fp_bp"]`` and
    ``phases["tail"]`` (``{step}`` is replaced by the step); with ``gap`` a ``dataloader`` slice of that
    name for [start, fp) (MindSpore: the iteration interval reads the data queue)."""
    rows = steps.to_pylist()
    spans = [(f"Iteration {r['step']}", "step", r["start_ns"], r["end_ns"], r["step"]) for r in rows]
    for r in rows:
        fp, bp = r.get("fp_ns"), r.get("bp_ns")
        if gap and fp is not None and fp > r["start_ns"]:
            spans.append((gap, "dataloader", r["start_ns"], fp, r["step"]))
        if phases and fp is not None and bp is not None:
            spans.append((phases["fp_bp"].format(step=r["step"]), "annotation", fp, bp, r["step"]))
        if phases and bp is not None:
            spans.append((phases["tail"].format(step=r["step"]), "annotation", bp, r["end_ns"], r["step"]))
    spans = [s for s in spans if s[3] >= s[2]]
    builder.add_slices({"track": [track] * len(spans), "name": [s[0] for s in spans],
                        "kind": [s[1] for s in spans], "start_ns": [s[2] for s in spans],
                        "dur_ns": [s[3] - s[2] for s in spans], "step": [s[4] for s in spans]})
