"""Timeline rows (the canonical ``tracks`` table) of a Kineto trace, and each event's row.

Owns: one track per host thread (pid, tid), per device stream (a device event's pid is the device index,
its tid the stream: ``cuda:0 stream 7``) and per counter series; their names (from ``thread_name`` /
``process_name`` metadata), devices, sort indexes, display order and ids (``track_offset`` + position).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.tables import TRACKS, fits
from perfsight.ingest.common.columns import dictionary, flat
from perfsight.ingest.common.events import TraceMetadata

_KEY_SEPARATOR = "\x1f"
_GPU_LABEL = re.compile(r"GPU (\d+)")
_TRAILING_NUMBER = re.compile(r"(-?\d+)\s*$")
_INTEGER = re.compile(r"-?\d+")
_KIND_ORDER = {"thread": 0, "stream": 1, "counter": 2}


@dataclass
class Tracks:
    """The tracks table and the key -> track_id lookup used to place events on them."""

    table: pa.Table
    keys: pa.Array  # "{namespace}\x1f{pid}\x1f{tid or series}", aligned with table rows

    def timeline_ids(self, pids: pa.Array, tids: pa.Array) -> pa.Array:
        """track_id of each (pid, tid) thread or stream; null where there is none."""
        return self._ids(TIMELINE, pids, tids)

    def counter_ids(self, pids: pa.Array, series: pa.Array) -> pa.Array:
        """track_id of each (pid, series) counter."""
        return self._ids(COUNTER, pids, series)

    def _ids(self, namespace: str, pids: pa.Array, names: pa.Array) -> pa.Array:
        keys = pc.binary_join_element_wise(namespace, pids, names, _KEY_SEPARATOR)
        return pc.take(self.table["track_id"], pc.index_in(keys, value_set=self.keys))


TIMELINE, COUNTER = "timeline", "counter"


def build_tracks(slices: pa.Table, memory: pa.Table, counters: pa.Table, metadata: TraceMetadata,
                 rank: int | None, track_offset: int, *, ranks_by_pid: dict[str, int] | None = None) -> Tracks:
    """One track per distinct thread, stream and counter series, in display order; each of ``rank``, or of
    its pid's rank in ``ranks_by_pid`` (a trace holding several ranks)."""
    timelines = dictionary(pc.binary_join_element_wise(
        pa.chunked_array(slices["pid"].chunks + memory["pid"].chunks, pa.string()),
        pa.chunked_array(slices["tid"].chunks + memory["tid"].chunks, pa.string()), _KEY_SEPARATOR))
    slice_timelines = timelines.indices.to_numpy()[:slices.num_rows]
    on_device = np.zeros(len(timelines.dictionary), dtype=bool)
    on_device[slice_timelines[flat(slices["on_device"]).to_numpy(zero_copy_only=False)]] = True
    rows = [_timeline_row(*_pid_and_rest(key), device, metadata)
            for key, device in zip(timelines.dictionary.to_pylist(), on_device.tolist())]
    series = pc.unique(flat(pc.binary_join_element_wise(counters["pid"], counters["series"], _KEY_SEPARATOR)))
    rows += [_counter_row(*_pid_and_rest(key), metadata) for key in series.to_pylist()]
    rows.sort(key=_display_order)
    ranks = ranks_by_pid or {}
    table = pa.Table.from_pylist([
        {**row, "track_id": track_offset + position, "rank": ranks.get(row["pid"], rank)}
        for position, row in enumerate(rows)], schema=TRACKS)
    keys = [_KEY_SEPARATOR.join((COUNTER, row["pid"], row["name"])) if row["kind"] == "counter"
            else _KEY_SEPARATOR.join((TIMELINE, row["pid"], row["tid"])) for row in rows]
    return Tracks(table, pa.array(keys, pa.string()))


def _pid_and_rest(key: str) -> tuple[str, str]:
    """(pid, tid or series) of a key that build_tracks joined with _KEY_SEPARATOR."""
    pid, _, rest = key.partition(_KEY_SEPARATOR)
    return pid, rest


def _timeline_row(pid: str, tid: str, on_device: bool, metadata: TraceMetadata) -> dict:
    sort_index = metadata.thread_sort_indexes.get((pid, tid))
    if on_device:
        stream = _trailing_number(tid)
        device = f"cuda:{_trailing_number(pid)}"
        if sort_index is None and _is_integer(stream):
            sort_index = int(stream)
        return dict(pid=pid, tid=tid, device=device, kind="stream", name=f"{device} stream {stream}",
                    sort_index=_int32_or_none(sort_index))
    return dict(pid=pid, tid=tid, device="cpu", kind="thread", name=_thread_name(pid, tid, metadata),
                sort_index=_int32_or_none(sort_index))


def _int32_or_none(value: int | None) -> int | None:
    """A sort index that fits the tracks' int32 column; None (unsorted) for one beyond it."""
    return value if value is not None and fits(value, 32) else None


def _trailing_number(text: str) -> str:
    """``7`` of ``stream 7`` (the 2021 format's tid), the text itself when it does not end in a number."""
    found = _TRAILING_NUMBER.search(text)
    return found.group(1) if found else text


def _thread_name(pid: str, tid: str, metadata: TraceMetadata) -> str:
    named = metadata.thread_names.get((pid, tid))
    if named:
        return named
    if not _is_integer(pid):
        return f"{pid}: {tid}"
    process = metadata.process_names.get(pid)
    return f"thread {tid} ({process})" if process else f"thread {tid}"


def _counter_row(pid: str, series: str, metadata: TraceMetadata) -> dict:
    gpu = _GPU_LABEL.fullmatch(metadata.process_labels.get(pid, ""))
    device = f"cuda:{gpu.group(1)}" if gpu else "cpu"
    return dict(pid=pid, tid=None, device=device, kind="counter", name=series, sort_index=None)


def _display_order(row: dict) -> tuple:
    """Threads, then streams, then counters; by process, sort index, thread/stream, name."""
    sort_index = row["sort_index"]
    return (_KIND_ORDER[row["kind"]], _natural(row["pid"]), sort_index is None, sort_index or 0,
            _natural(row["tid"] or ""), row["name"])


def _natural(text: str | None) -> tuple:
    """Numbers before other texts, numbers by value."""
    text = text or ""
    return (0, int(text), "") if _is_integer(text) else (1, 0, text)


def _is_integer(text: str) -> bool:
    return _INTEGER.fullmatch(text) is not None
