"""Vectorised interval arithmetic on integer nanoseconds (numpy; no Python loop per interval).

An interval set is two int64 arrays ``(starts, ends)`` of half-open intervals ``[start, end)``.
``merge`` turns any set into its union: sorted, disjoint, non-empty intervals. Every other quantity the
breakdown analyses need is a length of a union, so they are derived from unions only:

* ``|A ∩ B| = |A| + |B| - |A ∪ B|``;  ``|A \\ B| = |A ∪ B| - |B|``;
* the time of ``A`` inside a window ``[a, b)`` is ``covered(A, b) - covered(A, a)``, where
  ``covered(A, t)`` is the length of ``A`` before ``t`` (a ``searchsorted`` over the union's cumulative
  lengths), so any number of windows (steps) is answered in one vectorised call.

``difference`` builds the set ``A \\ B`` itself, for views that draw the intervals (the overlap rows of
the timeline).
"""
from __future__ import annotations

import numpy as np

_EMPTY = np.zeros(0, dtype=np.int64)


def merge(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """The union of ``[starts[i], ends[i])`` as sorted disjoint intervals (empty ones dropped; intervals
    that touch are joined)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    if starts.size == 0:
        return _EMPTY, _EMPTY
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)                 # furthest end so far
    first = np.empty(s.size, dtype=bool)
    first[0] = True
    first[1:] = s[1:] > reach[:-1]                   # a gap before this interval opens a new group
    heads = np.flatnonzero(first)
    tails = np.append(heads[1:] - 1, s.size - 1)
    return s[heads], reach[tails]


def length(merged: tuple[np.ndarray, np.ndarray]) -> int:
    """Total length of a merged interval set."""
    s, e = merged
    return int((e - s).sum())


def covered(merged: tuple[np.ndarray, np.ndarray], t) -> np.ndarray:
    """Length of the merged set before each time in ``t`` (int64 array like ``t``)."""
    s, e = merged
    t = np.asarray(t, dtype=np.int64)
    if s.size == 0:
        return np.zeros(t.shape, dtype=np.int64)
    cum = np.concatenate(([0], np.cumsum(e - s)))    # cum[i] = length of the first i intervals
    i = np.searchsorted(s, t, side="right")          # intervals starting at or before t
    last = np.maximum(i - 1, 0)
    partial = np.where(i > 0, np.clip(t - s[last], 0, e[last] - s[last]), 0)
    return cum[last] + partial


def within(merged: tuple[np.ndarray, np.ndarray], window_starts, window_ends) -> np.ndarray:
    """Length of the merged set inside each window ``[window_starts[k], window_ends[k])``."""
    return covered(merged, window_ends) - covered(merged, window_starts)


def union_of(*sets: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The union of several interval sets (merged or not)."""
    if not sets:
        return _EMPTY, _EMPTY
    return merge(np.concatenate([s for s, _ in sets]), np.concatenate([e for _, e in sets]))


def difference(a: tuple[np.ndarray, np.ndarray],
               b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The set ``a \\ b`` (both merged or not) as sorted disjoint intervals: one sweep over the boundaries of
    the merged sets, keeping the stretches where ``a`` is active and ``b`` is not."""
    a, b = merge(*a), merge(*b)
    if a[0].size == 0 or b[0].size == 0:
        return a
    t = np.concatenate([a[0], a[1], b[0], b[1]])
    d = np.concatenate([np.full(a[0].size, 1), np.full(a[0].size, -1), np.full(b[0].size, 2), np.full(b[0].size, -2)])
    order = np.argsort(t, kind="stable")
    t, state = t[order], np.cumsum(d[order])[:-1]       # state on [t[k], t[k+1]): bit 0 = in a, bit 1 = in b
    keep = state == 1
    return merge(t[:-1][keep], t[1:][keep])


def exact_cover(sets: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[int, int]:
    """Time during which exactly the subset of ``sets`` given by a bit mask is active (bit i = the i-th set
    in ``sets``' order), for every mask with non-zero time except 0. Each set is merged first, so overlap
    within one set counts once. A sweep over +bit/-bit boundary events: one sort, one cumulative sum."""
    times, deltas = [], []
    for bit, (s, e) in enumerate(sets.values()):
        s, e = merge(s, e)
        times += [s, e]
        deltas += [np.full(s.size, 1 << bit, dtype=np.int64), np.full(e.size, -(1 << bit), dtype=np.int64)]
    if not times:
        return {}
    t = np.concatenate(times)
    d = np.concatenate(deltas)
    if t.size == 0:
        return {}
    order = np.argsort(t, kind="stable")
    t, d = t[order], d[order]
    state = np.cumsum(d)[:-1]                         # active mask on [t[k], t[k+1])
    dur = np.diff(t)
    totals = np.zeros(1 << len(sets), dtype=np.int64)
    np.add.at(totals, state, dur)
    return {mask: int(v) for mask, v in enumerate(totals) if mask and v}
