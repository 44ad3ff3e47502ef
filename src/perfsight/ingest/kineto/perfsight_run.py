"""Reader of perfsight's own run directory (PROF_.../ with manifest.json) into the canonical tables.

The Kineto trace windows in host/data become slices/tracks/flows/memory (via the Kineto reader), with
the stub of a step that profiling stopped in demoted to an annotation;
host_usage.csv becomes host counter series; steps.csv becomes the per-step series
``host.step_number``, ``host.step_time_ns`` and ``host.data_wait_ns`` (every step the collector saw,
profiled or not);
msproftx.csv becomes annotation slices on one ``msproftx`` track per thread; the manifest goes to meta,
and the run's fp_point/bp_point options (when given) to meta ``fp_point``/``bp_point``, where the step trace
looks for them.
A run killed mid-collection is read as far as its files go, and meta says it was interrupted.
``PerfsightRunReader`` is the format's entry in ``perfsight.ingest.registry``.
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from perfsight.core import layout
from perfsight.core.errors import InputError
from perfsight.core.files import read_regular
from perfsight.core.tables import (
    DATA_WAIT_SERIES,
    STEP_NUMBER_SERIES,
    STEP_TIME_SERIES,
    RunTables,
    conform,
    meta_table,
    next_id,
)
from perfsight.ingest.common.reader import Reader, RunSource
from perfsight.ingest.kineto.reader import read_kineto


def sources(run_dir: Path) -> list[Path]:
    """Every raw file the tables are built from (the cache's fingerprint)."""
    host = run_dir / layout.HOST_DATA
    found = [run_dir / layout.MANIFEST, *sorted(host.glob(layout.TRACE_GLOB))]
    found += [host / name for name in (layout.HOST_USAGE, layout.STEPS, layout.MSPROFTX) if (host / name).is_file()]
    return [p for p in found if not p.name.endswith(".partial")]


def read_run(run_dir: Path) -> RunTables:
    manifest = layout.read_manifest(run_dir)
    host = run_dir / layout.HOST_DATA
    traces = [p for p in sorted(host.glob(layout.TRACE_GLOB)) if not p.name.endswith(".partial")]
    tables = read_kineto(traces, rank=manifest.get("rank")) if traces else RunTables()
    tables.slices = _demote_cut_steps(tables.slices, manifest.get("cut_steps", []))
    next_track = next_id(tables.tracks.column("track_id"))
    counters, tracks = [tables.counters], [tables.tracks]
    for csv_name, reader in ((layout.HOST_USAGE, _wide_series), (layout.STEPS, _step_series)):
        path = host / csv_name
        if path.is_file():
            for series_name, table in reader(path):
                tracks.append(_counter_track(next_track, series_name, manifest))
                counters.append(conform("counters", table.append_column("track_id", pa.array(
                    [next_track] * table.num_rows, pa.int32()))))
                next_track += 1
    slices = [tables.slices]
    if (host / layout.MSPROFTX).is_file():
        marks, mark_tracks = _msproftx(host / layout.MSPROFTX, next_track, next_id(tables.slices.column("id")),
                                       manifest)
        slices.append(marks)
        tracks.append(mark_tracks)
    facts = {**tables.meta_dict(), "source_format": "perfsight", "manifest": manifest,
             "parse_warnings": _parse_warnings(tables.meta_dict(), manifest, traces),
             "rank": manifest.get("rank", 0), "world_size": manifest.get("world_size", 1),
             "collection_status": _status(manifest)}
    options = manifest.get("options_resolved", {})
    facts.update({point: options[point] for point in ("fp_point", "bp_point") if options.get(point)})
    return RunTables(
        slices=pa.concat_tables(slices), tracks=pa.concat_tables(tracks),
        counters=pa.concat_tables(counters), flows=tables.flows, memory=tables.memory,
        meta=meta_table(facts),
    )


class PerfsightRunReader(Reader):
    """perfsight's own run directory: a folder holding manifest.json (``layout.is_run_dir``)."""

    name = "perfsight"

    def runs_at(self, path: Path) -> list[RunSource]:
        return [RunSource(self, path)] if layout.is_run_dir(path) else []

    def rank(self, run: RunSource) -> int | None:
        """The manifest's rank; None when it names none, cannot be read, or is a link (finding runs reads no
        file through a link: insight reads nothing outside its folder)."""
        if (run.path / layout.MANIFEST).is_symlink():
            return None
        try:
            rank = layout.read_manifest(run.path).get("rank")
        except InputError:
            return None
        return rank if type(rank) is int else None

    def sources(self, run: RunSource) -> list[Path]:
        return sources(run.path)

    def read(self, run: RunSource) -> RunTables:
        return read_run(run.path)


def _demote_cut_steps(slices: pa.Table, cut_steps: list[int]) -> pa.Table:
    """A step that profiling stopped in (the manifest's ``cut_steps``: torch leaves a stub
    ProfilerStep#N at ``stop()``) is not a step: its range becomes a plain annotation and its slices
    belong to no step."""
    if not cut_steps:
        return slices
    unfinished = pc.fill_null(pc.is_in(slices.column("step"), value_set=pa.array(cut_steps, pa.int32())), False)
    is_stub_step = pc.and_(unfinished, pc.equal(slices.column("kind"), "step"))
    kind = pc.if_else(is_stub_step, "annotation", slices.column("kind"))
    step = pc.if_else(unfinished, pa.scalar(None, pa.int32()), slices.column("step"))
    slices = slices.set_column(slices.schema.get_field_index("kind"), "kind", kind)
    return slices.set_column(slices.schema.get_field_index("step"), "step", step)


def _parse_warnings(facts: dict, manifest: dict, traces: list[Path]) -> list[str]:
    """The trace reader's warnings, and the trace windows the manifest lists that are gone (storage_limit
    ages out the oldest windows)."""
    warnings = json.loads(facts.get("parse_warnings") or "[]")
    listed = manifest.get("traces")
    if not isinstance(listed, list):
        listed = []
    present = {path.name for path in traces}
    missing = [name for name in listed if isinstance(name, str) and name not in present]
    if missing:
        warnings.append(f"{len(missing)} of the {len(listed)} trace windows the manifest lists are gone (aged out "
                        f"by storage_limit, or deleted): {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    return warnings


def _status(manifest: dict) -> str:
    if manifest.get("status") == "collecting":
        return "interrupted: the collecting process ended without closing the run; data flushed before that is kept"
    return str(manifest.get("status"))


def _read_csv(path: Path) -> pa.Table:
    """A flushed CSV; a last line torn by a kill is dropped."""
    text = read_regular(path)
    if not text.endswith(b"\n"):
        text = text[: text.rfind(b"\n") + 1]
    return pacsv.read_csv(pa.py_buffer(text))


def _wide_series(path: Path):
    table = _read_csv(path)
    ts = table.column("ts_ns").cast(pa.int64())
    for name in table.column_names[1:]:
        yield name, pa.table({"ts_ns": ts, "value": table.column(name).cast(pa.float64())})


def _step_series(path: Path):
    table = _read_csv(path)
    end = table.column("end_ns").cast(pa.int64())
    step_time = pc.subtract(end, table.column("start_ns").cast(pa.int64()))
    yield STEP_NUMBER_SERIES, pa.table({"ts_ns": end, "value": table.column("step").cast(pa.float64())})
    yield STEP_TIME_SERIES, pa.table({"ts_ns": end, "value": step_time.cast(pa.float64())})
    yield DATA_WAIT_SERIES, pa.table({"ts_ns": end, "value": table.column("data_wait_ns").cast(pa.float64())})


def _counter_track(track_id: int, name: str, manifest: dict) -> pa.Table:
    return conform("tracks", pa.table({
        "track_id": pa.array([track_id], pa.int32()), "rank": pa.array([manifest.get("rank", 0)], pa.int32()),
        "pid": [str(manifest.get("pid", ""))], "device": ["cpu"], "kind": ["counter"], "name": [name],
    }))


def _msproftx(path: Path, first_track: int, first_id: int, manifest: dict) -> tuple[pa.Table, pa.Table]:
    table = _read_csv(path)
    tids = table.column("tid").cast(pa.string())
    distinct = pc.unique(tids).to_pylist()
    track_of = {tid: first_track + i for i, tid in enumerate(distinct)}
    track_ids = pa.array([track_of[t] for t in tids.to_pylist()], pa.int32())
    start = table.column("start_ns").cast(pa.int64())
    slices = conform("slices", pa.table({
        "id": pa.array(range(first_id, first_id + table.num_rows), pa.int64()),
        "kind": pa.array(["annotation"] * table.num_rows), "name": table.column("name").cast(pa.string()),
        "track_id": track_ids, "start_ns": start,
        "dur_ns": pc.subtract(table.column("end_ns").cast(pa.int64()), start),
    }))
    tracks = conform("tracks", pa.table({
        "track_id": pa.array(list(track_of.values()), pa.int32()),
        "rank": pa.array([manifest.get("rank", 0)] * len(distinct), pa.int32()),
        "pid": [str(manifest.get("pid", ""))] * len(distinct), "tid": distinct,
        "device": ["cpu"] * len(distinct), "kind": ["thread"] * len(distinct),
        "name": [f"msproftx thread {tid}" for tid in distinct],
    }))
    return slices, tracks
