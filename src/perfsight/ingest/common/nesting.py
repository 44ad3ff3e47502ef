"""Nesting of slices on timeline rows, in exact integer nanoseconds.

Owns: each slice's parent and depth on its track, and the innermost slice that encloses a point in time
(a memory event's operator, a flow's end). Nothing here is Kineto-specific: it takes numpy arrays in any
row order and answers in that order.

A slice covers [start, start + dur). One that ends exactly when the next starts does not enclose it. A
point in time is enclosed by the slices that cover it and by zero-duration slices at that very instant
(sub-microsecond ops in integer-microsecond traces).
A slice's parent always contains it entirely. Slices on a track are expected to nest; when one starts
inside an open slice but ends after it (a partial overlap: real traces have them, e.g. a Python-tracer
call around a record_function whose range outlives it, or overlapping kernels on one stream), the open
slice is closed early and the new one becomes its sibling. Such pairs are counted in ``overlaps`` so
callers can report them. No input makes this fail.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

#: the parse warning of slices that started inside another of their track and ended after it (kept whole, as
#: siblings), after its count
OVERLAP_REPAIR_WARNING = "times a slice started inside another of its track and ended after it (made siblings)"


class Nesting:
    """Parents and depths of slices (rows in the caller's order; -1 for none)."""

    def __init__(self, track: np.ndarray, start: np.ndarray, dur: np.ndarray):
        # Work in (track, start, longest first) order, where every parent precedes its children.
        self._order = np.lexsort((np.arange(len(track)), -dur, start, track))
        self._track = track[self._order]
        self._start = start[self._order]
        self._end = self._start + dur[self._order]
        self._parent, depth, self.overlaps = _nest(self._track, self._start, self._end)
        self.parent = np.empty(len(track), dtype=np.int64)
        self.parent[self._order] = self._to_rows(self._parent)
        self.depth = np.empty(len(track), dtype=np.int64)
        self.depth[self._order] = depth

    def enclosing(self, point_track: np.ndarray, point_ts: np.ndarray, accept: np.ndarray | None = None) -> np.ndarray:
        """For each point, the innermost slice on its track with start <= ts < end (-1 for none).

        With ``accept`` (a boolean per slice), only accepted slices count.
        """
        candidate = self._last_started(point_track, point_ts)
        accepted = None if accept is None else accept[self._order]
        pending = np.flatnonzero(candidate >= 0)
        while len(pending):
            rows = candidate[pending]
            ts = point_ts[pending]
            outside = (self._end[rows] <= ts) & (self._start[rows] != ts)
            if accepted is not None:
                outside |= ~accepted[rows]
            pending = pending[outside]
            candidate[pending] = self._parent[candidate[pending]]
            pending = pending[candidate[pending] >= 0]
        return self._to_rows(candidate)

    def _to_rows(self, positions: np.ndarray) -> np.ndarray:
        """Positions in working order -> the caller's rows (-1 stays -1)."""
        return take_or_missing(self._order, positions)

    def _last_started(self, point_track: np.ndarray, point_ts: np.ndarray) -> np.ndarray:
        """For each point, the last slice position of its track with start <= ts, or -1."""
        candidate = np.full(len(point_track), -1, dtype=np.int64)
        if not len(self._track):
            return candidate
        bounds = np.flatnonzero(np.diff(self._track)) + 1
        firsts, lasts = np.concatenate(([0], bounds)), np.concatenate((bounds, [len(self._track)]))
        for first, last in zip(firsts.tolist(), lasts.tolist()):
            points = np.flatnonzero(point_track == self._track[first])
            position = np.searchsorted(self._start[first:last], point_ts[points], side="right") - 1
            candidate[points] = np.where(position >= 0, first + position, -1)
        return candidate


def overlap_warning(count: int) -> str:
    """The parse warning for ``Nesting.overlaps`` partial overlaps (readers that report them as text)."""
    return f"{count} {OVERLAP_REPAIR_WARNING}"


def ids_or_null(ids: np.ndarray, rows: np.ndarray) -> pa.Array:
    """The ``ids`` of ``rows`` as an int64 column, null where a row is -1 (a missing parent, operator...)."""
    return pa.array(take_or_missing(ids, rows, 0), pa.int64(), mask=rows < 0)


def take_or_missing(values: np.ndarray, rows: np.ndarray, missing: int = -1) -> np.ndarray:
    """``values[rows]``, with ``missing`` where a row is -1 (no such row)."""
    found = rows >= 0
    result = np.full(len(rows), missing, dtype=values.dtype)
    result[found] = values[rows[found]]
    return result


def _nest(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Parent position, depth and partial-overlap count of slices sorted by (track, start, longest first).

    Tracks whose slices nest properly (most) are nested by whole-array operations (``_nested_pass``); a
    track with a partial overlap goes through the stack pass, which decides what becomes a sibling.
    """
    parent, depth, crossed = _nested_pass(track, start, end)
    overlaps = 0
    for first, last in _track_bounds(track, np.unique(track[crossed])):
        part = slice(first, last)
        part_parent, depth[part], part_overlaps = _stack_pass(track[part], start[part], end[part])
        parent[part] = np.where(part_parent >= 0, part_parent + first, -1)
        overlaps += part_overlaps
    return parent, depth, overlaps


def _nested_pass(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the stack pass finds when every track nests properly, in O(n log n) whatever the depth, and
    where that assumption fails.

    A slice's depth is the number of earlier slices of its track still open at its start (end > start);
    its parent is the latest earlier slice one level up. If slices cross, the first slice that crosses an
    earlier one gets a parent that ends before it does, so checking every parent finds every track that
    needs the stack pass (the returned mask).
    """
    n = len(track)
    if not n:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    position = np.arange(n, dtype=np.int64)
    first = _track_first(track)
    # Ends at or before each start among the track's slices: merge ends and starts, ends first on ties.
    is_start = np.repeat(np.array([False, True]), n)
    merged = np.lexsort((is_start, np.concatenate((end, start)), np.concatenate((track, track))))
    ends_before = np.cumsum(~is_start[merged]) - ~is_start[merged]
    closed = np.empty(n, dtype=np.int64)
    closed[merged[is_start[merged]] - n] = ends_before[is_start[merged]]
    closed -= first                                   # the ends of earlier tracks all sort before
    closed -= _zero_durations_from_here(track, start, end)  # ... and so do the instant slices at this start
    depth = position - first - closed
    # Parent: the latest earlier position at depth - 1 (keys depth * n + position are unique and sorted).
    keys = np.sort(depth * n + position)
    below = np.searchsorted(keys, (depth - 1) * n + position) - 1
    candidate = keys[np.maximum(below, 0)]
    found = (depth > 0) & (below >= 0) & (candidate // n == depth - 1)
    parent = np.where(found, candidate % n, -1)
    holder = np.maximum(parent, 0)
    encloses = (parent >= 0) & (end[holder] > start) & (end[holder] >= end)
    return parent, depth, (depth > 0) & ~encloses


def _zero_durations_from_here(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per slice, the zero-duration slices at or after it with the same track and start (they sort last)."""
    zero = (end == start).astype(np.int64)
    counted = np.cumsum(zero)
    new_run = np.ones(len(track), dtype=bool)
    new_run[1:] = (track[1:] != track[:-1]) | (start[1:] != start[:-1])
    run_last = np.append(np.flatnonzero(new_run)[1:] - 1, len(track) - 1)
    last = np.repeat(run_last, np.diff(np.append(np.flatnonzero(new_run), len(track))))
    return counted[last] - counted + zero


def _track_first(track: np.ndarray) -> np.ndarray:
    """Per position, the first position of its track (positions sorted by track)."""
    starts = np.flatnonzero(np.concatenate(([True], track[1:] != track[:-1])))
    return np.repeat(starts, np.diff(np.append(starts, len(track))))


def _track_bounds(track: np.ndarray, wanted: np.ndarray) -> list[tuple[int, int]]:
    """(first, last + 1) positions of each of the ``wanted`` tracks (positions sorted by track)."""
    firsts = np.searchsorted(track, wanted, side="left")
    lasts = np.searchsorted(track, wanted, side="right")
    return list(zip(firsts.tolist(), lasts.tolist()))


def _stack_pass(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Parent position and depth of sorted slices with one pass and a stack of open slices per track."""
    parents = [-1] * len(track)
    depths = [0] * len(track)
    ends = end.tolist()
    overlaps = 0
    stack: list[int] = []
    current_track = None
    for row, (row_track, row_start, row_end) in enumerate(zip(track.tolist(), start.tolist(), ends)):
        if row_track != current_track:
            stack.clear()
            current_track = row_track
        while stack and ends[stack[-1]] <= row_start:
            stack.pop()
        while stack and ends[stack[-1]] < row_end:
            stack.pop()
            overlaps += 1
        if stack:
            parents[row] = stack[-1]
            depths[row] = depths[stack[-1]] + 1
        stack.append(row)
    return np.array(parents, dtype=np.int64), np.array(depths, dtype=np.int64), overlaps
