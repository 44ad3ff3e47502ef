"""Reading torch.profiler / Kineto chrome-trace JSON (``*.pt.trace.json[.gz]``) into the canonical tables.

Public: ``read_kineto`` and ``is_kineto_trace`` (and ``pair_flow_ends``, shared with the torch_npu reader);
``KinetoReader`` is the format's entry in ``perfsight.ingest.registry`` (a trace file is one run).
This module assembles the six tables; the work is split: kineto_decode (streaming msgspec decode,
truncation recovery), kineto_events (per-phase source columns, exact ns), kineto_kinds (slice kinds),
kineto_tracks (timeline rows), kineto_nesting (depth, parents, enclosing slices).

Ids: slice ids are ``id_offset`` + the slice's row in the returned table; track ids are ``track_offset`` +
the track's row. To merge several ranks into one run, read each with the offsets set to the number of
slices and tracks read before it.

Links: a device slice's launching host call is the host slice with the same ``correlation`` in the same
file (the id Kineto's ``ac2g`` flows carry). Launch flows and device steps come from that join rather than
from the ``ac2g`` flow events: Kineto also writes flow halves without partners (an ``f`` for every runtime
call, even those that launch nothing), and the join also works for traces that have no flow events.
``fwdbwd`` (and any other) flow events are bound to the innermost slice enclosing their timestamp on
their thread.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core import layout
from perfsight.core.errors import InputError
from perfsight.core.numbers import number_runs
from perfsight.core.tables import RunTables, conform, fits, flows_table, meta_table
from perfsight.ingest.common.chrome_json import Damage, TraceStream, json_pieces
from perfsight.ingest.common.columns import dictionary, flat
from perfsight.ingest.common.events import GROUPS, EventTables, TraceMetadata, event_tables
from perfsight.ingest.common.kinds import classify_columns, with_legacy_categories
from perfsight.ingest.common.nesting import OVERLAP_REPAIR_WARNING, Nesting, ids_or_null, take_or_missing
from perfsight.ingest.common.reader import Reader, RunSource
from perfsight.ingest.jobs import rank_in_name
from perfsight.ingest.kineto.tracks import Tracks, build_tracks

SNIFF_BYTES = 1 << 16
_TRACE_NAME = (".pt.trace.json", ".pt.trace.json.gz")
_JSON_NAME = (".json", ".json.gz")
_EVENT_LIST_START = re.compile(rb'\s*\[\s*\{')
#: a trace event's phase key, anywhere in the sniffed head (an event's args may come before its ph)
_PHASE_KEY = re.compile(rb'"ph"\s*:\s*"')
#: the rank in a trace's ``distributedInfo`` object, before any nested value (Kineto writes it near the start:
#: ``"distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8, "pg_config": [...]}``)
_DISTRIBUTED_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}\[\]]*?"rank"\s*:\s*(\d{1,9})\b')

#: c10::DeviceType values -> device names (PrivateUse1 is Ascend's npu under torch_npu)
DEVICE_TYPES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps", 19: "mtia", 20: "npu"}


def is_kineto_trace(path: Path) -> bool:
    """Cheap sniff: a ``*.pt.trace.json[.gz]`` name, or a .json[.gz] that starts like a Chrome trace."""
    name = Path(path).name.lower()
    if name.endswith(_TRACE_NAME):
        return True
    if not name.endswith(_JSON_NAME):
        return False
    try:
        start = next(json_pieces(Path(path), [], SNIFF_BYTES), b"")
    except (InputError, OSError):
        return False
    return bool(_EVENT_LIST_START.match(start) and _PHASE_KEY.search(start)) or (
        start.lstrip().startswith(b"{") and b'"traceEvents"' in start)


class KinetoReader(Reader):
    """A torch.profiler / Kineto trace file (``is_kineto_trace``); its cache and exports go beside it."""

    name = "torch.profiler"
    run_word = "trace"

    def runs_at(self, path: Path) -> list[RunSource]:
        return [RunSource(self, path)] if path.is_file() and is_kineto_trace(path) else []

    def rank(self, run: RunSource) -> int | None:
        """The rank the trace's ``distributedInfo`` says in its first SNIFF_BYTES (decompressed), as reading
        it takes it (``jobs.merge``), else the one its file name carries (``rank_in_name``): torch.profiler's
        own trace names (``host_pid.timestamp.pt.trace.json``) carry none."""
        try:
            head = next(json_pieces(run.path, [], SNIFF_BYTES), b"")
        except (InputError, OSError):
            head = b""
        said = _DISTRIBUTED_RANK.search(head)
        return int(said.group(1)) if said else rank_in_name(run.path.name)

    def sources(self, run: RunSource) -> list[Path]:
        return [run.path]

    def read(self, run: RunSource) -> RunTables:
        return read_kineto([run.path])

    def cache_dir(self, run: RunSource) -> Path:
        return run.path.with_name(run.path.name + "." + layout.CACHE_DIR)

    def output_dir(self, run: RunSource) -> Path:
        return run.path.parent / layout.OUTPUT_DIR / _trace_stem(run.path)


def _trace_stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".json", ".pt.trace"):
        name = name.removesuffix(suffix)
    return name


#: the pid stride of a trace that merged several ranks' traces as rank x stride + the rank's own pid
FUSED_PID_STRIDE = 100_000_000


def read_kineto(paths: Sequence[Path], *, rank: int | None = None, id_offset: int = 0,
                track_offset: int = 0) -> RunTables:
    """Read the trace files of one process (successive profiling windows share its clock) into tables.

    ``rank`` overrides the rank in the traces' ``distributedInfo``. A trace that holds several ranks' events
    (``_fused_ranks``: merged into one file) is read as those ranks, each track its own, and says so in meta
    ``parse_warnings``. Raises InputError for a file that is not a trace; damage inside a trace is skipped and
    reported in meta ``parse_warnings``.
    """
    paths = [Path(path) for path in paths]
    if not paths:
        raise InputError("read_kineto: no trace files given; expected one or more Kineto trace files")
    sources = [_Source.read(index, path) for index, path in enumerate(paths)]
    source = _combine(sources)
    fused = _fused_ranks(source.slices)
    if fused:
        ranks, how = fused
        sources[0].stream.warnings.append(
            f"{paths[0].name}: holds {len(set(ranks.values()))} ranks ({how}): read as a job of ranks "
            f"{number_runs(ranks.values())}")
        rank = None
    elif rank is None:
        rank = _first_fact(sources, "rank")
    source.slices = source.slices.set_column(source.slices.schema.get_field_index("cat"), "cat",
                                             with_legacy_categories(source.slices["cat"], source.slices["pid"]))
    for name, column in classify_columns(source.slices["cat"], source.slices["name"]).items():
        source.slices = source.slices.append_column(name, column)
    tracks = build_tracks(source.slices, source.memory, source.counters, source.metadata, rank, track_offset,
                          ranks_by_pid=fused[0] if fused else None)
    slices = _Slices.build(source.slices, tracks, id_offset, source.skipped)
    return RunTables(
        slices=slices.table(),
        tracks=tracks.table,
        counters=_counters(source.counters, tracks),
        flows=pa.concat_tables([slices.launch_flows(), slices.linked_flows(source.flows, tracks, source.skipped)]),
        memory=_memory(source.memory, tracks, slices),
        meta=_meta(sources, rank, source.skipped),
    )


# --- reading the files ----------------------------------------------------------------------------------

@dataclass
class _Source:
    """One file's header facts and event tables (each with a ``file`` column)."""

    path: Path
    stream: TraceStream
    events: EventTables

    @classmethod
    def read(cls, index: int, path: Path) -> _Source:
        stream = TraceStream(path)
        events = event_tables(stream)
        for group in GROUPS:
            table = getattr(events, group)
            setattr(events, group, table.append_column("file", pa.array(np.full(table.num_rows, index, np.int32))))
        return cls(path, stream, events)


def _fused_ranks(slices: pa.Table) -> tuple[dict[str, int], str] | None:
    """Per pid, the rank of a trace that holds several ranks' events (ranks' traces merged into one file), and
    how that was told: its events' args ``rank`` (a pid's most frequent), or pids that carry the rank as their
    prefix (rank x ``FUSED_PID_STRIDE`` + the rank's own pid). None for a trace of one rank."""
    said = pa.table({"pid": slices["pid"], "rank": slices["args_rank"]}).filter(pc.is_valid(slices["args_rank"]))
    if said.num_rows and len(pc.unique(said["rank"])) > 1:
        counts = said.group_by(["pid", "rank"]).aggregate([("rank", "count")]).to_pylist()
        counts.sort(key=lambda row: (row["pid"], -row["rank_count"], row["rank"]))
        ranks: dict[str, int] = {}
        for row in counts:
            ranks.setdefault(row["pid"], row["rank"])
        return ranks, "its events' args rank"
    pids = [pid for pid in pc.unique(slices["pid"]).to_pylist() if pid is not None and pid.isdigit()]
    prefixes = {pid: int(pid) // FUSED_PID_STRIDE for pid in pids}
    if len(set(prefixes.values())) > 1:       # no process id reaches the stride (Linux's pid_max: 2^22)
        return prefixes, f"pids prefixed with the rank x {FUSED_PID_STRIDE:,}"
    return None


def _combine(sources: list[_Source]) -> EventTables:
    metadata, skipped = TraceMetadata(), Counter[str]()
    for source in sources:
        metadata.update(source.events.metadata)
        skipped.update(source.events.skipped)
    groups = {group: pa.concat_tables([getattr(source.events, group) for source in sources])
              for group in GROUPS}
    return EventTables(**groups, metadata=metadata, skipped=skipped)


def _profiler_log(sources: list[_Source]) -> dict[str, list[str]]:
    """Kineto's log lines of every file, by level (``TraceStream.profiler_log``)."""
    log: dict[str, list[str]] = {}
    for source in sources:
        for level, lines in source.stream.profiler_log.items():
            log.setdefault(level, []).extend(lines)
    return log


def _first_fact(sources: list[_Source], key: str):
    """The first ``distributedInfo`` value of ``key`` that is an int32 (ranks and sizes are), else None."""
    for source in sources:
        value = (source.stream.distributed_info or {}).get(key)
        if type(value) is int and value >= 0 and fits(value, 32):
            return value
    return None


# --- slices -------------------------------------------------------------------------------------------

@dataclass
class _Slices:
    """The slices in source order (ids are ``id_offset`` + row), as numpy arrays for linking."""

    source: pa.Table  # classified source columns plus track_id
    ids: np.ndarray
    start: np.ndarray
    end: np.ndarray
    nesting: Nesting
    on_device: np.ndarray
    launcher: np.ndarray  # row of the host call that launched a device slice, -1 for none

    @classmethod
    def build(cls, source: pa.Table, tracks: Tracks, id_offset: int, skipped: Counter) -> _Slices:
        """Nest classified source slices (see kineto_kinds.classify_columns) and find their launchers."""
        source = source.append_column("track_id", tracks.timeline_ids(source["pid"], source["tid"]))
        track, start, dur = (source[name].to_numpy() for name in ("track_id", "ts_ns", "dur_ns"))
        nesting = Nesting(track, start, dur)
        if nesting.overlaps:
            skipped[OVERLAP_REPAIR_WARNING] += nesting.overlaps
        on_device = source["on_device"].to_numpy(zero_copy_only=False)
        launcher = np.full(len(track), -1, dtype=np.int64)
        device = np.flatnonzero(on_device)
        launcher[device] = _first_match(source, "correlation_id", device, np.flatnonzero(~on_device))
        ids = id_offset + np.arange(len(track), dtype=np.int64)
        return cls(source, ids, start, start + dur, nesting, on_device, launcher)

    def table(self) -> pa.Table:
        source = self.source
        kind = source["kind"]
        is_transfer = pc.is_in(kind, pa.array(["memcpy", "memset"]))
        return conform("slices", pa.table({
            "id": self.ids,
            "kind": kind,
            "name": source["name"],
            "op_type": source["name"],
            "task_type": source["task_type"],
            "track_id": source["track_id"],
            "start_ns": self.start,
            "dur_ns": self.end - self.start,
            "depth": self.nesting.depth.astype(np.int16),
            "parent_id": ids_or_null(self.ids, self.nesting.parent),
            "step": self._steps(),
            "correlation_id": source["correlation_id"],
            "external_id": source["external_id"],
            "input_shapes": source["input_shapes"],
            "input_dtypes": source["input_dtypes"],
            "flops": source["flops"],
            "bytes": pc.if_else(is_transfer, source["bytes"], pa.scalar(None, pa.int64())),
            "args": source["args"],
        }))

    def _steps(self) -> pa.Array:
        """Host slices: the ProfilerStep#N of their process they start in. Device slices: their launcher's
        step, else the step of a host slice with the same External id."""
        steps = self._host_steps()
        device = np.flatnonzero(self.on_device)
        launched = self.launcher[device]
        steps[device] = take_or_missing(steps, launched)
        unplaced = device[steps[device] < 0]
        same_op = _first_match(self.source, "external_id", unplaced, np.flatnonzero(~self.on_device & (steps >= 0)))
        steps[unplaced] = take_or_missing(steps, same_op)
        return pa.array(steps, pa.int32(), mask=steps < 0)

    def _host_steps(self) -> np.ndarray:
        steps = np.full(len(self.ids), -1, dtype=np.int64)
        name_step = self.source["name_step"]
        step_rows = np.flatnonzero(pc.is_valid(name_step).to_numpy(zero_copy_only=False) & ~self.on_device)
        if not len(step_rows):
            return steps
        numbers = pc.fill_null(name_step, -1).to_numpy()
        process = dictionary(self.source["pid"]).indices.to_numpy()
        for pid in np.unique(process[step_rows]).tolist():
            in_process = step_rows[process[step_rows] == pid]
            in_process = in_process[np.argsort(self.start[in_process], kind="stable")]
            rows = np.flatnonzero((process == pid) & ~self.on_device)
            position = np.searchsorted(self.start[in_process], self.start[rows], side="right") - 1
            step_row = in_process[np.maximum(position, 0)]
            inside = (position >= 0) & (self.start[rows] < self.end[step_row])
            steps[rows[inside]] = numbers[step_row[inside]]
        return steps

    def launch_flows(self) -> pa.Table:
        device = np.flatnonzero(self.launcher >= 0)
        return flows_table(self.ids[self.launcher[device]], self.ids[device], "launch")

    def linked_flows(self, flows: pa.Table, tracks: Tracks, skipped: Counter) -> pa.Table:
        """``fwdbwd`` and other flow events: bind each end to its enclosing slice, pair ends by id."""
        bound = self.enclosing_rows(flows, tracks)
        if (bound < 0).any():
            skipped["flow events outside any slice of their thread (dropped)"] += int((bound < 0).sum())
        src_rows, dst_rows, categories = pair_flow_ends(flows, bound)
        is_fwdbwd = pc.equal(categories, "fwdbwd").to_numpy(zero_copy_only=False)
        return pa.concat_tables([
            flows_table(self.ids[src_rows[is_fwdbwd]], self.ids[dst_rows[is_fwdbwd]], "fwdbwd"),
            flows_table(self.ids[src_rows[~is_fwdbwd]], self.ids[dst_rows[~is_fwdbwd]], "other"),
        ])

    def enclosing_rows(self, events: pa.Table, tracks: Tracks, accept: np.ndarray | None = None) -> np.ndarray:
        """Row of the innermost (accepted) slice enclosing each event's ts on its thread, -1 for none."""
        track = tracks.timeline_ids(events["pid"], events["tid"])
        return self.nesting.enclosing(pc.fill_null(track, -1).to_numpy(), events["ts_ns"].to_numpy(), accept)


def pair_flow_ends(flows: pa.Table, bound: np.ndarray) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """Pair the ``s`` and ``f`` ends of flow events (columns ``file``, ``cat``, ``ph``, ``id``) that share a
    file, category and id, each end bound to a slice row (``bound``; -1: the end is dropped): the source
    rows, the destination rows and the category of each pair."""
    ends = flows.select(["file", "cat", "ph"]).append_column("key", pc.binary_join_element_wise(
        pc.fill_null(flows["cat"], ""), flows["id"], "\x1f")).filter(pa.array(bound >= 0))
    bound = bound[bound >= 0]
    is_start = pc.equal(ends["ph"], "s").to_numpy(zero_copy_only=False)
    starts, finishes = np.flatnonzero(is_start), np.flatnonzero(~is_start)
    partner = _first_match(ends, "key", finishes, starts)
    paired = partner >= 0
    return bound[partner[paired]], bound[finishes[paired]], ends["cat"].take(finishes[paired])


def _first_match(table: pa.Table, key: str, rows: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """For each of ``rows``, the first of ``candidates`` with the same ``key`` in the same file; -1 for none."""
    files = table["file"].to_numpy()
    keys = flat(table[key])
    matches = np.full(len(rows), -1, dtype=np.int64)
    for file in np.unique(files[rows]).tolist():
        in_file = np.flatnonzero(files[rows] == file)
        file_candidates = candidates[files[candidates] == file]
        if not len(file_candidates):
            continue
        position = pc.index_in(keys.take(rows[in_file]), value_set=keys.take(file_candidates), skip_nulls=True)
        position = pc.fill_null(position, -1).to_numpy()
        matches[in_file] = take_or_missing(file_candidates, position)
    return matches


# --- memory, counters, meta -----------------------------------------------------------------------------

def _memory(memory: pa.Table, tracks: Tracks, slices: _Slices) -> pa.Table:
    is_cpu_op = pc.equal(slices.source["kind"], "cpu_op").to_numpy(zero_copy_only=False)
    operator = slices.enclosing_rows(memory, tracks, accept=is_cpu_op)
    return conform("memory", pa.table({
        "ts_ns": memory["ts_ns"],
        "addr": memory["addr"],
        "bytes": memory["bytes"],
        "total_allocated": memory["total_allocated"],
        "total_reserved": memory["total_reserved"],
        "device": _device_names(memory["device_type"], memory["device_id"]),
        "track_id": tracks.timeline_ids(memory["pid"], memory["tid"]),
        "op_slice_id": ids_or_null(slices.ids, operator),
    }))


def _device_names(device_type: pa.Array, device_id: pa.Array) -> pa.Array:
    """``cpu``, ``cuda:0``, ... from c10 DeviceType and index columns; null when the type is unknown."""
    pairs = pc.binary_join_element_wise(device_type.cast(pa.string()), device_id.cast(pa.string()), ":")
    encoded = dictionary(pairs)
    names = [_device_name(pair) for pair in encoded.dictionary.to_pylist()]
    return pa.array(names, pa.string()).take(encoded.indices)


def _device_name(pair: str) -> str:
    device_type, device_id = (int(part) for part in pair.split(":"))
    name = DEVICE_TYPES.get(device_type, f"device_type_{device_type}")
    return name if name == "cpu" or device_id < 0 else f"{name}:{device_id}"


def _counters(counters: pa.Table, tracks: Tracks) -> pa.Table:
    return conform("counters", pa.table({
        "track_id": tracks.counter_ids(counters["pid"], counters["series"]),
        "ts_ns": counters["ts_ns"],
        "value": counters["value"],
    }))


def _meta(sources: list[_Source], rank: int | None, skipped: Counter) -> pa.Table:
    bases = [source.stream.base_time_ns for source in sources]
    distinct_bases = set(bases)
    warnings = [warning for source in sources for warning in source.stream.warnings]
    warnings += [f"{count} {what}" for what, count in sorted(skipped.items()) if count]
    return meta_table({
        "source_format": "kineto",
        "source_files": [str(source.path) for source in sources],
        "base_time_ns": "" if distinct_bases == {None} else str(bases[0]) if len(distinct_bases) == 1 else bases,
        "device_properties": next((s.stream.device_properties for s in sources if s.stream.device_properties),
                                  None),
        "rank": rank,
        "world_size": _first_fact(sources, "world_size"),
        "distributed_info": next((s.stream.distributed_info for s in sources if s.stream.distributed_info), None),
        "parse_warnings": warnings,
        "damage": [warning for warning in warnings if isinstance(warning, Damage)] or None,
        "profiling_windows": [list(s.events.window) for s in sources if s.events.window] or None,
        "profiler_log": _profiler_log(sources) or None,
    })
