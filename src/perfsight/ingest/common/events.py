"""Splitting one decoded Kineto trace into Arrow tables of source columns, one per kind of event.

Owns: grouping events by phase (``X`` complete, ``s``/``f`` flow, ``i`` instant, ``C`` counter, ``M``
metadata), decoding the ``args`` fields perfsight promotes to columns (one batched, typed msgspec decode
per group), exact nanosecond times, and counting what is skipped. Nothing here knows about tracks, kinds
or ids; kineto.py builds the canonical tables from these.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Sequence

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.json_depth import MAX_JSON_DEPTH, JsonTooDeep, check_depth
from perfsight.core.tables import (
    BEYOND_CLOCK_WARNING,
    LONG_DURATION_WARNING,
    NEGATIVE_DURATION_WARNING,
    TRACE_SPAN_CATEGORY,
)
from perfsight.ingest.common.chrome_json import ABSENT, Event, TraceStream
from perfsight.ingest.common.columns import ZERO, int_column, micros_to_ns, raw_text_column, scalar_text, text_column

#: runtime -> device flow categories (current, 2021 and 2022 Kineto); slices' correlation ids carry these links
LAUNCH_FLOW_CATEGORIES = ("ac2g", "async", "async_cpu_to_gpu")
#: times (and slice ends) beyond +-2^62 ns (146 years from the trace clock's zero) are not kept: adding two
#: of them must not overflow int64 in the analyses
MAX_TIME_NS = 1 << 62
#: slices longer than 2^50 ns (13 days) and memory events of more than 2^50 bytes (1 PiB) are not kept:
#: no profile holds them, and sums of thousands of them must still fit int64
MAX_DURATION_NS = 1 << 50
MAX_BYTES = 1 << 50
MEMORY_EVENT = "[memory]"
#: Kineto's instants bounding its capture window: a trace span's start ("Iteration Start: PyTorch Profiler",
#: the profiler's start) and the window's end (device activity ending after it was dropped by Kineto)
WINDOW_START_PREFIX = "Iteration Start: "
WINDOW_END = "Record Window End"
_EMPTY_ARGS = pa.array(["{}", "null"], pa.string())


class _SliceArgs(msgspec.Struct, gc=False, rename={
        "external_id": "External id", "external_id_2021": "external id", "input_dims": "Input Dims",
        "input_type": "Input type"}):
    external_id: Any = None
    external_id_2021: Any = None
    correlation: Any = None
    input_dims: msgspec.Raw = ABSENT
    input_type: msgspec.Raw = ABSENT
    flops: Any = None
    bytes: Any = None
    rank: Any = None


class _MemoryArgs(msgspec.Struct, gc=False, rename={
        "addr": "Addr", "bytes": "Bytes", "total_allocated": "Total Allocated", "total_reserved": "Total Reserved",
        "device_type": "Device Type", "device_id": "Device Id"}):
    addr: Any = None
    bytes: Any = None
    total_allocated: Any = None
    total_reserved: Any = None
    device_type: Any = None
    device_id: Any = None


@dataclass
class TraceMetadata:
    """Names and sort indexes from ``ph: "M"`` events, keyed by pid text or (pid, tid) text."""

    process_names: dict[str, str] = field(default_factory=dict)
    process_labels: dict[str, str] = field(default_factory=dict)
    thread_names: dict[tuple[str, str], str] = field(default_factory=dict)
    thread_sort_indexes: dict[tuple[str, str], int] = field(default_factory=dict)

    def update(self, other: TraceMetadata) -> None:
        """Add ``other``'s entries where this one has none (the first file wins)."""
        for name in ("process_names", "process_labels", "thread_names", "thread_sort_indexes"):
            mine = getattr(self, name)
            for key, value in getattr(other, name).items():
                mine.setdefault(key, value)


@dataclass
class EventTables:
    """One file's events as source columns (times in integer ns, ``baseTimeNanoseconds`` applied)."""

    slices: pa.Table
    flows: pa.Table
    memory: pa.Table
    counters: pa.Table
    metadata: TraceMetadata
    skipped: Counter
    window: tuple[int, int] | None = None  # Kineto's capture window (``capture_window``), ns on the tables' clock


#: the EventTables fields that are tables
GROUPS = ("slices", "flows", "memory", "counters")


def event_tables(stream: TraceStream) -> EventTables:
    """Read ``stream`` batch by batch into per-group tables."""
    metadata, skipped, marks = TraceMetadata(), Counter[str](), list[Event]()  # marks: capture_window's
    parts = {group: [build([], skipped)] for group, build in _BUILDERS.items()}  # the schemas
    for batch in stream.batches():
        for group, events in _split(batch, metadata, skipped, marks).items():
            if events:
                parts[group].append(_BUILDERS[group](events, skipped))
    base = stream.base_time_ns or 0
    if abs(base) > MAX_TIME_NS:
        stream.warnings.append(f"{stream.path.name}: ignored baseTimeNanoseconds {base} (beyond +-2^62 ns)")
        base = 0
    tables = {group: _on_the_clock(pa.concat_tables(tables), base, skipped) for group, tables in parts.items()}
    return EventTables(**tables, metadata=metadata, skipped=skipped, window=capture_window(marks, base))


def capture_window(marks: list[Event], base: int) -> tuple[int, int] | None:
    """Kineto's capture window from its marks (``base`` added): from the earliest ``Iteration Start: ...``
    instant or trace span (category ``Trace``, the ``PyTorch Profiler (N)`` rows) start to the latest ``Record
    Window End`` instant or trace span end (a span may end a few us after the window: Kineto stops its clock
    first); None without a ``Record Window End``, with unusable times, or with the end before the start."""
    spans = [e for e in marks if e.ph == "X"]
    starts, _ = micros_to_ns([e.ts for e in marks if e.name != WINDOW_END])
    ends, _ = micros_to_ns([e.ts for e in marks if e.name == WINDOW_END])
    span_ends = pc.add(micros_to_ns([e.ts for e in spans])[0], pc.fill_null(micros_to_ns([e.dur for e in spans])[0], 0))
    start, end = pc.min(starts).as_py(), pc.max(ends).as_py()
    if start is None or end is None:
        return None
    end = max(end, pc.max(span_ends).as_py() or end)
    if end < start or max(abs(start + base), abs(end + base)) > MAX_TIME_NS:
        return None
    return start + base, end + base


def _on_the_clock(table: pa.Table, base: int, skipped: Counter) -> pa.Table:
    """``table`` with ``baseTimeNanoseconds`` added to its times, without the events whose time (and end,
    for slices) lies beyond +-MAX_TIME_NS or that last more than MAX_DURATION_NS, where sums of times would
    overflow int64 (counted)."""
    ts = table["ts_ns"].to_numpy()            # int64, or float64 with nan where null
    if ts.dtype != np.int64:
        ts = np.nan_to_num(ts).astype(np.int64)
    dur = table["dur_ns"].to_numpy() if "dur_ns" in table.column_names else np.zeros(len(ts), dtype=np.int64)
    within = (np.abs(ts) <= MAX_TIME_NS) & (np.abs(ts + base) <= MAX_TIME_NS)
    within &= dur <= MAX_TIME_NS - np.clip(ts + base, -MAX_TIME_NS, MAX_TIME_NS)
    short = dur <= MAX_DURATION_NS
    if not (within & short).all():
        _count(skipped, BEYOND_CLOCK_WARNING, int((~within).sum()))
        _count(skipped, LONG_DURATION_WARNING, int((within & ~short).sum()))
        table = table.filter(pa.array(within & short))
    if not base:
        return table
    column = table.schema.get_field_index("ts_ns")
    return table.set_column(column, "ts_ns", pc.add(table["ts_ns"], pa.scalar(base, pa.int64())))


def _split(events: list[Event], metadata: TraceMetadata, skipped: Counter,
           marks: list[Event]) -> dict[str, list[Event]]:
    """The events of each group (metadata goes into ``metadata``, Kineto's window instants into ``marks``, other
    phases are counted as skipped)."""
    groups = _group_by_phase(events)
    events.clear()
    complete = groups.pop("X", [])
    instants = groups.pop("i", []) + groups.pop("I", [])
    flows = groups.pop("s", []) + groups.pop("f", [])
    counters = groups.pop("C", [])
    metadata.update(_metadata(groups.pop("M", [])))
    groups.pop("t", None)  # flow steps: perfsight links only the two ends
    marks += [e for e in instants if isinstance(e.name, str) and (e.name == WINDOW_END
                                                                   or e.name.startswith(WINDOW_START_PREFIX))]
    marks += [e for e in complete if e.cat == TRACE_SPAN_CATEGORY]
    for phase, unsupported in groups.items():
        skipped[f"events of unsupported phase {phase!r}"] += len(unsupported)
    return {"slices": complete, "flows": flows, "memory": [e for e in instants if e.name == MEMORY_EVENT],
            "counters": counters}


def _group_by_phase(events: list[Event]) -> dict[Any, list[Event]]:
    groups: dict[Any, list[Event]] = {}
    try:
        for event in events:
            group = groups.get(event.ph)
            if group is None:
                group = groups[event.ph] = []
            group.append(event)
    except TypeError:  # a ph that is a list or an object: its events go to an unsupported phase of that name
        return _group_by_phase([msgspec.structs.replace(e, ph=type(e.ph).__name__) if isinstance(e.ph, (list, dict))
                                else e for e in events])
    return groups


def _scalar_columns(events: list[Event], skipped: Counter, what: str) -> dict:
    """pid and tid (text, "" when absent) and ts_ns (null when unusable) of ``events``."""
    ts_ns, invalid = micros_to_ns([e.ts for e in events])
    _count(skipped, f"{what} with a ts that is not a number", invalid)
    _count(skipped, f"{what} without ts", ts_ns.null_count - invalid)
    return {
        "pid": _absent_as_empty(scalar_text([e.pid for e in events])),
        "tid": _absent_as_empty(scalar_text([e.tid for e in events])),
        "ts_ns": ts_ns,
    }


def _absent_as_empty(text: pa.Array) -> pa.Array:
    return pc.fill_null(text, "") if text.null_count else text


def _count(skipped: Counter, what: str, count: int) -> None:
    if count:
        skipped[what] += count


def _keep_valid(table: pa.Table, required: list[str]) -> pa.Table:
    if not any(table[name].null_count for name in required):
        return table
    valid = pc.is_valid(table[required[0]])
    for name in required[1:]:
        valid = pc.and_(valid, pc.is_valid(table[name]))
    return table.filter(valid)


def _slice_table(events: list[Event], skipped: Counter) -> pa.Table:
    columns = _scalar_columns(events, skipped, "complete events")
    names = text_column([e.name for e in events])
    _count(skipped, "complete events without a name", names.null_count)
    columns.update(name=names, cat=text_column([e.cat for e in events]),
                   dur_ns=_durations([e.dur for e in events], skipped))
    args = [e.args for e in events]
    args_text = raw_text_column(args)
    empty = pc.is_in(args_text, _EMPTY_ARGS)
    columns["args"] = pc.if_else(empty, pa.scalar(None, pa.string()), args_text)
    columns.update(_slice_args_columns(args, skipped))
    return _keep_valid(pa.table(columns), ["ts_ns", "name"])


def _durations(values: list, skipped: Counter) -> pa.Array:
    dur_ns, _ = micros_to_ns(values)
    _count(skipped, "complete events without a usable dur (set to 0)", dur_ns.null_count)
    _count(skipped, NEGATIVE_DURATION_WARNING, pc.sum(pc.less(dur_ns, ZERO)).as_py() or 0)
    return pc.max_element_wise(pc.fill_null(dur_ns, ZERO), ZERO)


def decode_args(raws: Sequence[bytes | msgspec.Raw], struct: type, skipped: Counter) -> list:
    """Decode every ``args`` text (JSON bytes, ``null`` or empty for none) into ``struct`` with one batched
    call; one that is not an object of the expected types becomes the default (counted in ``skipped``)."""
    decoder = msgspec.json.Decoder(list[struct | None])  # type: ignore[valid-type]  # a type made at run time
    try:
        decoded = decoder.decode(b"[" + b",".join(raws) + b"]")
    except msgspec.ValidationError:
        decoded = [_decode_one_args(raw, struct, skipped) for raw in raws]
    default = struct()
    return [default if args is None else args for args in decoded] if None in decoded else decoded


def _decode_one_args(raw: bytes | msgspec.Raw, struct: type, skipped: Counter):
    try:
        return msgspec.json.decode(raw, type=struct | None)
    except msgspec.ValidationError:
        skipped["events whose args are not an object of the expected types (args ignored)"] += 1
        return None


def _int_args(decoded: list, name: str, skipped: Counter) -> pa.Array:
    column, invalid = int_column(list(map(attrgetter(name), decoded)))
    _count(skipped, f"args values of {name!r} that are not integers (set to null)", invalid)
    return column


def _slice_args_columns(raws: list[msgspec.Raw], skipped: Counter) -> dict[str, pa.Array]:
    decoded = decode_args(raws, _SliceArgs, skipped)
    return {
        "external_id": pc.coalesce(_int_args(decoded, "external_id", skipped),
                                   _int_args(decoded, "external_id_2021", skipped)),
        "correlation_id": _int_args(decoded, "correlation", skipped),
        "input_shapes": _within_depth(raw_text_column([args.input_dims for args in decoded]), "Input Dims",
                                      skipped),
        "input_dtypes": _within_depth(raw_text_column([args.input_type for args in decoded]), "Input type",
                                      skipped),
        "flops": _int_args(decoded, "flops", skipped),
        "bytes": _int_args(decoded, "bytes", skipped),
        "args_rank": _int_args(decoded, "rank", skipped),
    }


def _within_depth(texts: pa.Array, key: str, skipped: Counter) -> pa.Array:
    """``texts`` (the JSON values of args ``key``) with those nested deeper than ``MAX_JSON_DEPTH`` set to null,
    counted in ``skipped``: the analyses that walk them (shapes, the roofline's element counts) recurse once per
    level. Only a text with more brackets than the limit can nest deeper: the others are not scanned."""
    suspects = pc.greater(pc.count_substring_regex(texts, r"[\[{]"), MAX_JSON_DEPTH)
    rows = pc.indices_nonzero(pc.fill_null(suspects, False)).to_pylist()
    too_deep = []
    for row in rows:
        try:
            check_depth(texts[row].as_py(), key)
        except JsonTooDeep:
            too_deep.append(row)
    if not too_deep:
        return texts
    _count(skipped, f"args values of {key!r} nested deeper than {MAX_JSON_DEPTH} levels (set to null)",
           len(too_deep))
    keep = np.ones(len(texts), dtype=bool)
    keep[too_deep] = False
    return pc.if_else(pa.array(keep), texts, pa.nulls(len(texts), texts.type))


def _flow_table(events: list[Event], skipped: Counter) -> pa.Table:
    linked = [e for e in events if e.cat not in LAUNCH_FLOW_CATEGORIES]
    columns = _scalar_columns(linked, skipped, "flow events")
    columns.update(ph=text_column([e.ph for e in linked]), cat=text_column([e.cat for e in linked]),
                   id=scalar_text([e.id for e in linked]))
    return _keep_valid(pa.table(columns), ["ts_ns", "id"])


def _memory_table(events: list[Event], skipped: Counter) -> pa.Table:
    columns = _scalar_columns(events, skipped, "memory events")
    decoded = decode_args([e.args for e in events], _MemoryArgs, skipped)
    for name in ("addr", "bytes", "total_allocated", "total_reserved", "device_type", "device_id"):
        columns[name] = _int_args(decoded, name, skipped)
    table = _keep_valid(pa.table(columns), ["ts_ns", "bytes"])
    sizes = [pc.fill_null(pc.abs(table[name]), 0).to_numpy() for name in ("bytes", "total_allocated", "total_reserved")]
    within = np.maximum.reduce(sizes) <= MAX_BYTES if table.num_rows else np.ones(0, dtype=bool)
    if not within.all():
        _count(skipped, "memory events of more than 2^50 bytes (skipped)", int((~within).sum()))
        table = table.filter(pa.array(within))
    return table


def _counter_table(events: list[Event], skipped: Counter) -> pa.Table:
    """One row per (event, numeric args value): the args key names the series (``name``: the event's)."""
    rows, series, values = [], [], []
    for row, event in enumerate(events):
        for key, value in _args_dict(event).items():
            if type(value) in (int, float):
                rows.append(row)
                series.append(key)
                values.append(float(value))
            else:
                skipped["counter values that are not numbers"] += 1
    columns = _scalar_columns(events, skipped, "counter events")
    columns["name"] = text_column([e.name for e in events])
    table = pa.table(columns).take(pa.array(np.array(rows, dtype=np.int64)))
    table = table.append_column("series", pa.array(series, pa.string())).append_column(
        "value", pa.array(np.array(values, dtype=np.float64)))
    return _keep_valid(table, ["ts_ns"])


def _args_dict(event: Event) -> dict:
    try:
        args = msgspec.json.decode(event.args)
    except msgspec.DecodeError:
        return {}
    return args if isinstance(args, dict) else {}


#: group -> the function building its table from its events
_BUILDERS = {"slices": _slice_table, "flows": _flow_table, "memory": _memory_table, "counters": _counter_table}

_METADATA_FIELDS = {  # event name -> (args key, TraceMetadata attribute, keyed by (pid, tid) or by pid)
    "process_name": ("name", "process_names", False),
    "process_labels": ("labels", "process_labels", False),
    "thread_name": ("name", "thread_names", True),
    "thread_sort_index": ("sort_index", "thread_sort_indexes", True),
}


def _metadata(events: list[Event]) -> TraceMetadata:
    metadata = TraceMetadata()
    for event in events:
        spec = _METADATA_FIELDS.get(event.name) if isinstance(event.name, str) else None
        if spec is None:
            continue
        key, attribute, per_thread = spec
        value = _args_dict(event).get(key)
        if value is None or (key == "sort_index" and type(value) is not int):
            continue
        pid = _as_text(event.pid)
        where = (pid, _as_text(event.tid)) if per_thread else pid
        getattr(metadata, attribute).setdefault(where, value if key == "sort_index" else str(value))
    return metadata


def _as_text(value) -> str:
    """pid/tid text as ``scalar_text`` makes it, "" when absent."""
    return "" if value is None else str(value)
