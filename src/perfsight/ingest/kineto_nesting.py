"""Nesting of slices on a timeline row, in exact integer nanoseconds.

Owns: the order slices are stored in (by track, start, longest first), each slice's parent and depth,
and finding the innermost slice that encloses a point in time (a memory event's operator, a flow's
end). Nothing here is Kineto-specific; the functions take plain numpy arrays.

A slice covers [start, start + dur). One that ends exactly when the next starts does not enclose it.
Slices on a track are expected to nest; a slice that starts inside another and ends after it (a partial
overlap, which real traces sometimes contain) is treated as its child and counted, so callers can report
it. No input makes these functions fail.
"""
from __future__ import annotations

import numpy as np


def nesting_order(track: np.ndarray, start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Row order by (track, start, longest first, original position): parents precede children."""
    return np.lexsort((np.arange(len(track)), -dur, start, track))


def nest(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Parent row (-1 for none) and depth of slices in ``nesting_order``; plus the partial-overlap count.

    One pass with a stack of open slices per track.
    """
    count = len(track)
    parents = [-1] * count
    depths = [0] * count
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
        if stack:
            parent = stack[-1]
            parents[row] = parent
            depths[row] = depths[parent] + 1
            overlaps += row_end > ends[parent]
        stack.append(row)
    return np.array(parents, dtype=np.int64), np.array(depths, dtype=np.int64), overlaps


def enclosing(track: np.ndarray, start: np.ndarray, end: np.ndarray, parent: np.ndarray,
              point_track: np.ndarray, point_ts: np.ndarray, accept: np.ndarray | None = None) -> np.ndarray:
    """For each point, the innermost slice row on its track with start <= ts < end (-1 for none).

    Slices must be in ``nesting_order`` with ``parent`` from ``nest``. With ``accept`` (a boolean per
    slice), only accepted slices count: the innermost accepted one that encloses the point.
    """
    candidate = _last_started(track, start, point_track, point_ts)
    pending = candidate >= 0
    while True:
        rows = candidate[pending]
        bad = end[rows] <= point_ts[pending]
        if accept is not None:
            bad |= ~accept[rows]
        if not bad.any():
            return candidate
        still = np.flatnonzero(pending)[bad]
        candidate[still] = parent[candidate[still]]
        pending = np.zeros(len(candidate), dtype=bool)
        pending[still] = candidate[still] >= 0


def _last_started(track: np.ndarray, start: np.ndarray, point_track: np.ndarray,
                  point_ts: np.ndarray) -> np.ndarray:
    """For each point, the last slice row of its track (in nesting order) with start <= ts, or -1."""
    candidate = np.full(len(point_track), -1, dtype=np.int64)
    if not len(track):
        return candidate
    bounds = np.flatnonzero(np.diff(track)) + 1
    firsts = np.concatenate(([0], bounds))
    lasts = np.concatenate((bounds, [len(track)]))
    for first, last in zip(firsts.tolist(), lasts.tolist()):
        points = np.flatnonzero(point_track == track[first])
        if len(points):
            position = np.searchsorted(start[first:last], point_ts[points], side="right") - 1
            candidate[points] = np.where(position >= 0, first + position, -1)
    return candidate
