"""The web timeline's level-of-detail index over one run's tables: it answers the timeline's questions
(which track rows exist, what to draw in a time window at a pixel width, search, one slice's details, the
sums over a selected area) in time that depends on what is drawn, not on the size of the trace. Pure
numpy/pyarrow: no web framework here (views/insight/api_timeline.py serves it). What goes in which group
and the counter and memory series are analysis/timeline.py's, which the msprof timeline export reads too.

``TimelineIndex(tables)`` is built once per run. A *lane* is one track at one nesting depth; every lane's
slices are kept sorted by start in flat numpy arrays (one set for the whole run, lanes being contiguous
ranges of it). Siblings at one depth may overlap (docs/tables.md: a slice that starts inside another and
ends after it is its sibling), so a lane's ends are not sorted; a lane's running maximum of the ends is,
and two binary searches (on it and on the starts) find the slices overlapping a window.

Level of detail, in ``window(t0, t1, width)``: a pixel is ``(t1 - t0) / width`` ns. A slice at least one
pixel long is sent by itself; shorter ones are gathered per pixel (the one holding their start, pixel 0
for those that started before ``t0``) into a bucket: first start, last end, count, and the name of its
longest slice. A lane thus sends at most about two entries per pixel whatever the number of slices in
the window. Counter series send, per pixel with samples, the first sample time and the min, max and last
value. The overlap-analysis rows (``breakdown.overlap_intervals``) are lanes like the others.

Times: every time taken and returned is integer ns relative to ``origin_ns`` (the run's first instant,
``analysis.summary.run_start_ns``, the origin every insight page uses; ``tracks()``
gives it as absolute ns), so times stay exact as JSON numbers in a browser, whose numbers
are doubles (ns since the epoch need 61 bits; a double holds 53). Only ``slice_detail``'s ``columns``
carry the canonical absolute values. Every method returns plain dicts/lists (ints for times) ready for
JSON; names go out as data, never as markup (the page sets them as text).
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.analysis.breakdown import OVERLAP_ROWS, overlap_intervals
from perfsight.analysis.step_spans import STEP_SPANS_CTE
from perfsight.analysis.summary import run_start_ns
from perfsight.analysis.timeline import GROUPS, counter_series, memory_series, track_groups
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables

#: at most this many flow arrows in one window answer
MAX_FLOWS = 2000
#: times asked about are within this many ns of the origin (146 years), so a window's span fits int64
MAX_TIME_NS = 2**62
_COUNTER_UNITS = (("bytes", re.compile(r"[ _.]bytes\b")), ("ns", re.compile(r"[ _.]ns\b")),
                  ("percent", re.compile(r"percent")))


def counter_unit(series: str) -> str | None:
    """The unit of a counter series, from the ending its name carries by the tables' convention
    (docs/tables.md): ``bytes`` (``host.memory_rss_bytes.process``, ``APP/DDR bytes``), ``ns``
    (``host.step_time_ns``), ``percent`` (``host.cpu_percent.process``); None when the name says none (its
    unit may be in the name itself: ``AI Core Freq MHz``)."""
    name = series.lower()
    for unit, pattern in _COUNTER_UNITS:
        if pattern.search(name):
            return unit
    return None


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Dictionary-encode a string column: (int32 codes, the distinct values)."""
    encoded = pc.dictionary_encode(column.combine_chunks())
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32), encoded.dictionary.to_pylist()


def _run_starts(table: pa.Table, columns) -> np.ndarray:
    """The first row of each run of rows with equal ``columns`` values (nulls equal) in ``table``."""
    change = np.zeros(table.num_rows, dtype=bool)
    change[:1] = True
    for column in columns:
        codes = pc.dictionary_encode(table.column(column).combine_chunks(), null_encoding="encode").indices
        codes = codes.to_numpy(zero_copy_only=False)
        change[1:] |= codes[1:] != codes[:-1]
    return np.flatnonzero(change)


def _ints(column: pa.ChunkedArray, fill: int = 0) -> np.ndarray:
    return pc.fill_null(column, fill).to_numpy().astype(np.int64)


def _pixel_starts(sorted_times: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """First index of each non-empty pixel in ``sorted_times``, pixels being cut at ``edges``."""
    bounds = np.concatenate(([0], np.searchsorted(sorted_times, edges, "left")))
    bounds = bounds[np.concatenate(([True], bounds[1:] != bounds[:-1]))]
    return bounds[bounds < sorted_times.size]


def _smallest(starts: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` smallest (start, id) pairs, in that order."""
    if starts.size > k:
        kth = np.partition(starts, k - 1)[k - 1]
        candidates = np.flatnonzero(starts <= kth)
    else:
        candidates = np.arange(starts.size)
    return candidates[np.lexsort((ids[candidates], starts[candidates]))][:k]


class TimelineIndex:
    """One run's timeline, indexed for windows, search, details and area sums (module docstring)."""

    def __init__(self, tables: RunTables):
        self.tables = tables
        self._track_info = {int(t["track_id"]): t for t in tables.tracks.to_pylist()}
        slices = tables.slices
        names, self._names = _codes(slices.column("name"))
        kinds, self._kinds = _codes(slices.column("kind"))
        track, start = _ints(slices.column("track_id")), _ints(slices.column("start_ns"))
        self._table_ids = slices.column("id").to_numpy()
        self._id_order = None if np.all(self._table_ids[1:] > self._table_ids[:-1]) else np.argsort(self._table_ids)
        self._slice_names = len(self._names)
        lanes = [{"track": track, "depth": _ints(slices.column("depth")), "start": start,
                  "end": start + _ints(slices.column("dur_ns")), "id": self._table_ids, "name": names, "kind": kinds}]
        virtual = max(self._track_info, default=-1) + 1         # ids for the tracks made here
        overlap, virtual = self._overlap_lanes(tables, virtual)
        lanes.append(overlap)
        self._counters, self._memory_tracks = self._counter_series(tables, virtual)
        self.origin_ns = computed(run_start_ns, tables)
        self._counters = {t: (ts - self.origin_ns, v) for t, (ts, v) in self._counters.items()}
        self._index_lanes({key: np.concatenate([p[key] for p in lanes]) for key in lanes[0]})
        lasts = [int(ts[-1]) for ts, _ in self._counters.values()] + ([int(self._end.max())] if self._end.size else [])
        self._end_ns = max(lasts, default=0)
        self._index_flows(tables.flows)
        self._tree = self._build_tree(tables)
        steps = f"WITH {STEP_SPANS_CTE} SELECT min(start_ns), max(end_ns) FROM steps"
        [(first, last)] = tables.sql(steps).fetchall()
        self._profiled = None if first is None else {"start_ns": first - self.origin_ns,
                                                     "end_ns": last - self.origin_ns}

    # --- construction helpers ----------------------------------------------------------------------------

    def _overlap_lanes(self, tables: RunTables, virtual: int) -> tuple[dict, int]:
        """The overlap-analysis rows as lane arrays: one new track per (rank, row) from ``virtual``, names
        after the slice names, kind ``overlap``, id -1 (not slices). Returns them and the next free id."""
        overlap = computed(overlap_intervals, tables)
        rank = overlap.column("rank").to_numpy()
        row = pc.index_in(overlap.column("row"), pa.array(OVERLAP_ROWS)).to_numpy().astype(np.int32)
        track = np.zeros(overlap.num_rows, dtype=np.int64)
        self._overlap_tracks = {}            # track id -> (rank, row name)
        for r in np.unique(rank).tolist():
            for i, name in enumerate(OVERLAP_ROWS):
                self._overlap_tracks[virtual] = (r, name)
                track[(rank == r) & (row == i)] = virtual
                virtual += 1
        self._names += list(OVERLAP_ROWS)
        self._kinds.append("overlap")
        n = overlap.num_rows
        return {"track": track, "depth": np.zeros(n, np.int64), "start": overlap.column("start_ns").to_numpy(),
                "end": overlap.column("end_ns").to_numpy(), "id": np.full(n, -1, np.int64),
                "name": self._slice_names + row, "kind": np.full(n, len(self._kinds) - 1, np.int32)}, virtual

    def _index_lanes(self, rows: dict[str, np.ndarray]) -> None:
        """Sort every row by (track, depth, start) into the flat arrays; lane offsets and running max ends."""
        lane_key = (rows["track"] << 16) | rows["depth"]
        order = np.lexsort((rows["start"], lane_key))
        lane_key = lane_key[order]
        self._start = rows["start"][order] - self.origin_ns
        self._end = rows["end"][order] - self.origin_ns
        self._id, self._name, self._kind = rows["id"][order], rows["name"][order], rows["kind"][order]
        # the buckets' dominance key: the longest slice's name wins (duration clipped to fit in 63 bits)
        self._name_bits = max(1, len(self._names).bit_length())
        cap = (1 << (62 - self._name_bits)) - 1
        self._key = (np.minimum(self._end - self._start, cap) << self._name_bits) | self._name
        self._lane_lo = np.flatnonzero(np.concatenate(([True], lane_key[1:] != lane_key[:-1]))) \
            if lane_key.size else np.zeros(0, np.int64)
        self._lane_hi = np.append(self._lane_lo[1:], lane_key.size).astype(np.int64)
        self._lane_track = lane_key[self._lane_lo] >> 16
        self._lane_depth = lane_key[self._lane_lo] & 0xFFFF
        self._reach = np.empty_like(self._end)
        for lo, hi in zip(self._lane_lo.tolist(), self._lane_hi.tolist()):
            np.maximum.accumulate(self._end[lo:hi], out=self._reach[lo:hi])

    def _index_flows(self, flows: pa.Table) -> None:
        self._flow_src, self._flow_dst = flows.column("src_id").to_numpy(), flows.column("dst_id").to_numpy()
        self._flow_kind, self._flow_kinds = _codes(flows.column("kind"))
        self._by_src = np.argsort(self._flow_src, kind="stable")
        self._by_dst = np.argsort(self._flow_dst, kind="stable")

    @staticmethod
    def _counter_series(tables: RunTables, virtual: int) -> tuple[dict, dict]:
        """({track id: (ts_ns absolute, values)}, memory tracks): analysis/timeline.py's counter series under
        their track ids and its memory series under new track ids from ``virtual`` (memory tracks: {id:
        (rank, device, label)}; an unknown device is ``?``)."""
        series, memory_tracks = {}, {}
        for part, numbered in ((computed(counter_series, tables), False), (computed(memory_series, tables), True)):
            if not part.num_rows:
                continue
            ts, values = part.column("ts_ns").to_numpy(), part.column("value").to_numpy()
            columns = ("track_id", "rank", "device", "series")
            firsts = _run_starts(part, columns)
            for first, last in zip(firsts.tolist(), np.append(firsts[1:], part.num_rows).tolist()):
                track_id, rank, device, name = (part.column(c)[first].as_py() for c in columns)
                if numbered:
                    track_id, device = virtual, device or "?"
                    memory_tracks[track_id] = (rank, device, f"{name} ({device})")
                    virtual += 1
                series[track_id] = (ts[first:last], values[first:last])
        return series, memory_tracks

    def _build_tree(self, tables: RunTables) -> list[dict]:
        """The groups of analysis/timeline.py's ``track_groups`` (with the overlap rows and memory series),
        per rank in ``GROUPS`` order; tracks by device, sort index and id."""
        depth = dict(zip(self._lane_track.tolist(), (self._lane_depth + 1).tolist()))   # last lane of a track wins
        group_of = dict(zip(*(computed(track_groups, tables).column(c).to_pylist() for c in ("track_id", "group"))))
        groups: dict[tuple[int, str], list[dict]] = {}
        for t in sorted(self._track_info.values(), key=lambda t: (t["device"] or "", t["sort_index"] or 0,
                                                                  t["track_id"])):
            track_id, group = t["track_id"], group_of.get(t["track_id"])
            if group is None:
                continue
            entry = {"id": track_id, "name": t["name"], "kind": t["kind"], "device": t["device"], "depth": 1}
            if group == "counters":
                entry.update(self._value_range(track_id), unit=counter_unit(t["name"]))
            else:
                entry["depth"] = depth.get(track_id, 1)
            groups.setdefault((t["rank"] or 0, group), []).append(entry)
        for track_id, (rank, row) in self._overlap_tracks.items():
            groups.setdefault((rank, "overlap analysis"), []).append(
                {"id": track_id, "name": row, "kind": "overlap", "device": None, "depth": 1})
        for track_id, (rank, device, label) in self._memory_tracks.items():
            groups.setdefault((rank, "counters"), []).append(
                {"id": track_id, "name": label, "kind": "counter", "device": device, "depth": 1, "unit": "bytes",
                 **self._value_range(track_id)})
        return [{"id": f"{rank}/{group}", "rank": rank, "name": group, "tracks": groups[(rank, group)]}
                for rank, group in sorted(groups, key=lambda key: (key[0], GROUPS.index(key[1])))]

    def _value_range(self, track_id: int) -> dict:
        values = self._counters[track_id][1]
        return {"min": float(values.min()), "max": float(values.max())}

    # --- shared lookups ----------------------------------------------------------------------------------------

    def _lanes_of(self, track_ids) -> np.ndarray:
        if track_ids is None:
            return np.arange(self._lane_lo.size)
        known = set(self._track_info) | set(self._overlap_tracks) | set(self._memory_tracks)
        unknown = [t for t in track_ids if t not in known]
        if unknown:
            raise ValueError(f"tracks: unknown track id {unknown[0]}")
        return np.flatnonzero(np.isin(self._lane_track, list(track_ids)))

    def _lane_range(self, lane: int, t0: int, t1: int) -> tuple[int, int, int]:
        """(a, m, b): the lane's slices overlapping [t0, t1) are among [a, b); those in [a, m) started
        before t0 and overlap only if they end after it; those in [m, b) start inside."""
        lo, hi = int(self._lane_lo[lane]), int(self._lane_hi[lane])
        a = lo + int(np.searchsorted(self._reach[lo:hi], t0, "left"))
        m = lo + int(np.searchsorted(self._start[lo:hi], t0, "left"))
        b = lo + int(np.searchsorted(self._start[lo:hi], t1, "left"))
        return a, max(a, m), b

    def _visible(self, a: int, m: int, b: int, t0: int) -> np.ndarray:
        visible = np.ones(b - a, dtype=bool)
        visible[:m - a] = self._end[a:m] > t0
        return visible

    def _row_of(self, slice_id: int) -> int | None:
        """Row of the slices table holding ``slice_id``."""
        ids = self._table_ids
        if self._id_order is None:
            row = int(np.searchsorted(ids, slice_id))
        else:
            i = int(np.searchsorted(ids, slice_id, sorter=self._id_order))
            row = int(self._id_order[i]) if i < ids.size else ids.size
        return row if row < ids.size and ids[row] == slice_id else None

    def _track_name(self, track_id: int) -> str:
        if track_id in self._overlap_tracks:
            return self._overlap_tracks[track_id][1]
        if track_id in self._memory_tracks:
            return self._memory_tracks[track_id][2]
        return self._track_info[track_id]["name"]

    @staticmethod
    def _check_window(t0: int, t1: int) -> None:
        if t1 <= t0:
            raise ValueError(f"t1: must be greater than t0 (got t0={t0}, t1={t1})")

    # --- the questions ---------------------------------------------------------------------------------------

    def tracks(self) -> dict:
        """The track tree: ``groups`` (per rank, in ``GROUPS`` order: id, rank, name, tracks), each track with
        id, name, kind, device, depth (number of nesting levels; counters also min/max value and ``unit``,
        ``counter_unit``); the run's ``origin_ns`` (absolute), its extent ``start_ns`` (0) and ``end_ns``
        (relative), and ``profiled``: the span of its steps (``start_ns``, ``end_ns``, relative; the first
        step's start to the last one's end over the ranks, as ``step_spans`` defines steps), the window a
        timeline opens on, or None for a run without steps."""
        return {"origin_ns": self.origin_ns, "start_ns": 0, "end_ns": self._end_ns, "profiled": self._profiled,
                "groups": self._tree}

    def window(self, t0_ns: int, t1_ns: int, width_px: int, track_ids=None) -> dict:
        """What to draw of ``[t0_ns, t1_ns)`` at ``width_px`` pixels (module docstring): ``lanes`` (per track
        and depth: ``slices`` id/start/dur/name/kind and ``buckets`` start/end/count/name, as parallel
        lists), ``counters`` (per counter track: ``before``, the value at t0; per pixel with samples ``ts``,
        ``min``, ``max``, ``last``; ``continues`` if samples follow t1), the ``flows`` (src/dst/kind) whose
        both ends are among the slices sent (at most MAX_FLOWS, ``flows_truncated`` says if more), and the
        ``names`` and ``kinds`` the name and kind numbers index."""
        t0, t1, width = int(t0_ns), int(t1_ns), int(width_px)
        self._check_window(t0, t1)
        if width < 1:
            raise ValueError(f"width: must be at least 1 (got {width})")
        threshold = -(-(t1 - t0) // width)              # a slice this long is at least one pixel wide
        pixels = np.arange(1, width, dtype=np.int64)    # edge i = t0 + i * span // width, in int64 for any span:
        per_pixel, rest = divmod(t1 - t0, width)        # i * (span // width) + i * (span % width) // width
        edges = t0 + pixels * per_pixel + (pixels * rest) // width
        lanes, used_names, sent_ids = [], [], []
        mask = (1 << self._name_bits) - 1
        for lane in self._lanes_of(track_ids):
            a, m, b = self._lane_range(lane, t0, t1)
            if a == b:
                continue
            start, end = self._start[a:b], self._end[a:b]
            long_enough = (end - start) >= threshold
            visible = self._visible(a, m, b, t0) if m > a else None
            if visible is not None:
                long_enough &= visible
            big = a + np.flatnonzero(long_enough)
            small = ~long_enough if visible is None else ~long_enough & visible
            small_at = np.flatnonzero(small)
            entry: dict[str, Any] = {"track": int(self._lane_track[lane]), "depth": int(self._lane_depth[lane])}
            if big.size:
                entry["slices"] = {"id": self._id[big], "start": self._start[big],
                                   "dur": self._end[big] - self._start[big], "name": self._name[big],
                                   "kind": self._kind[big]}
                used_names.append(entry["slices"]["name"])
                sent_ids.append(entry["slices"]["id"])
            if small_at.size:
                if small_at.size == b - a:
                    s, e, key = start, end, self._key[a:b]
                else:
                    s, e, key = start[small_at], end[small_at], self._key[a:b][small_at]
                firsts = _pixel_starts(s, edges)
                entry["buckets"] = {"start": s[firsts], "end": np.maximum.reduceat(e, firsts),
                                    "count": np.diff(np.append(firsts, s.size)),
                                    "name": (np.maximum.reduceat(key, firsts) & mask).astype(np.int32)}
                used_names.append(entry["buckets"]["name"])
            if len(entry) > 2:
                lanes.append(entry)
        codes = np.unique(np.concatenate(used_names)) if used_names else np.zeros(0, np.int32)
        for entry in lanes:
            for part in ("slices", "buckets"):
                if part in entry:
                    entry[part]["name"] = np.searchsorted(codes, entry[part]["name"])
                    entry[part] = {k: v.tolist() for k, v in entry[part].items()}
        flows, truncated = self._flows_among(np.concatenate(sent_ids) if sent_ids else np.zeros(0, np.int64))
        return {"t0": t0, "t1": t1, "width": width, "names": [self._names[c] for c in codes.tolist()],
                "kinds": self._kinds, "lanes": lanes, "counters": self._counter_window(t0, t1, edges, track_ids),
                "flows": flows, "flows_truncated": truncated}

    def _counter_window(self, t0: int, t1: int, edges: np.ndarray, track_ids) -> list[dict]:
        out = []
        wanted = None if track_ids is None else set(track_ids)
        for track_id, (ts, values) in self._counters.items():
            if wanted is not None and track_id not in wanted:
                continue
            i0, i1 = int(np.searchsorted(ts, t0, "left")), int(np.searchsorted(ts, t1, "left"))
            entry = {"track": track_id, "before": float(values[i0 - 1]) if i0 else None,
                     "continues": i1 < ts.size, "ts": [], "min": [], "max": [], "last": []}
            if i1 > i0:
                t, v = ts[i0:i1], values[i0:i1]
                firsts = _pixel_starts(t, edges)
                entry.update(ts=t[firsts].tolist(), min=np.minimum.reduceat(v, firsts).tolist(),
                             max=np.maximum.reduceat(v, firsts).tolist(),
                             last=v[np.append(firsts[1:], v.size) - 1].tolist())
            out.append(entry)
        return out

    def _flows_among(self, ids: np.ndarray) -> tuple[dict, bool]:
        """The flows whose source and destination are both in ``ids``: ({src, dst, kind}, truncated)."""
        ids = np.unique(ids[ids >= 0])
        src_sorted = self._flow_src[self._by_src]
        first = np.searchsorted(src_sorted, ids, "left")
        count = np.searchsorted(src_sorted, ids, "right") - first
        total = int(count.sum())
        if not total:
            return {"src": [], "dst": [], "kind": []}, False
        offsets = np.repeat(first - np.cumsum(count) + count, count) + np.arange(total)
        flows = self._by_src[offsets]
        dst = self._flow_dst[flows]
        at = np.minimum(np.searchsorted(ids, dst), ids.size - 1)
        flows = flows[ids[at] == dst]
        truncated = flows.size > MAX_FLOWS
        flows = flows[:MAX_FLOWS]
        return {"src": self._flow_src[flows].tolist(), "dst": self._flow_dst[flows].tolist(),
                "kind": [self._flow_kinds[k] for k in self._flow_kind[flows].tolist()]}, truncated

    def search(self, text: str, after_ns: int = 0, direction: str = "next", limit: int = 1,
               after_id: int | None = None) -> dict:
        """Slices whose name contains ``text`` (case-insensitive) over the whole run: ``total`` matches, and
        up to ``limit`` of them from the position (``after_ns``, ``after_id``) in time order (start, then
        id): ``next`` the ones after it ascending, ``prev`` the ones before it descending, wrapping round the
        run's end (``wrapped``). Without ``after_id``, ``next`` starts at ``after_ns`` itself and ``prev``
        just before it. Each match: id, track, depth, start_ns, dur_ns, name and ``index`` (0-based rank of
        the match in time order, for "3 of 120")."""
        if not text:
            raise ValueError("q: the search text is empty")
        if direction not in ("next", "prev"):
            raise ValueError(f"direction: must be 'next' or 'prev' (got {direction!r})")
        if limit < 1:
            raise ValueError(f"limit: must be at least 1 (got {limit})")
        matching = np.zeros(len(self._names), dtype=bool)
        matching[:self._slice_names] = pc.match_substring(pa.array(self._names[:self._slice_names], pa.string()),
                                                          text, ignore_case=True).to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(matching[self._name])
        starts, ids = self._start[rows], self._id[rows]
        at, position = int(after_ns), -1 if after_id is None else int(after_id)
        if direction == "next":                       # after the position ascending, then from the run's start
            first = (starts > at) | ((starts == at) & (ids > position))
            sign, bases = 1, (rows.size - int(first.sum()), 0)
        else:                                         # before it descending, then from the run's end
            first = (starts < at) | ((starts == at) & (ids < position))
            sign, bases = -1, (int(first.sum()) - 1, rows.size - 1)
        picked: list[int] = []
        indexes: list[int] = []
        wrapped = False
        for subset, base in zip((first, ~first), bases):
            at_rows = np.flatnonzero(subset)
            left = limit - len(picked)
            if left <= 0 or not at_rows.size:
                continue
            wrapped = subset is not first
            chosen = at_rows[_smallest(sign * starts[at_rows], sign * ids[at_rows], left)]
            picked += chosen.tolist()
            indexes += (base + sign * np.arange(chosen.size)).tolist()
        matches = []
        for i, index in zip(picked, indexes):
            row = int(rows[i])
            lane = int(np.searchsorted(self._lane_lo, row, "right")) - 1
            matches.append({"id": int(self._id[row]), "track": int(self._lane_track[lane]),
                            "depth": int(self._lane_depth[lane]), "start_ns": int(self._start[row]),
                            "dur_ns": int(self._end[row] - self._start[row]),
                            "name": self._names[int(self._name[row])], "index": index})
        return {"text": text, "total": int(rows.size), "wrapped": wrapped, "matches": matches}

    def slice_detail(self, slice_id: int) -> dict:
        """One slice: its canonical ``columns`` (absolute times; args as JSON text), id, name, kind, track
        (id, name, kind, rank), depth, start_ns/dur_ns/end_ns (relative), ``parents`` (the enclosing slices,
        outermost first: the scope levels) and ``flows`` (direction out/in, kind, and the other end's id,
        name, track, track name and relative start). KeyError for an unknown id."""
        row = self._row_of(int(slice_id))
        if row is None:
            raise KeyError(f"no slice with id {slice_id}")
        slices = self.tables.slices
        columns = slices.slice(row, 1).to_pylist()[0]
        parents: list[dict] = []
        parent = columns["parent_id"]
        while parent is not None and len(parents) < 1000:
            prow = self._row_of(int(parent))
            if prow is None:
                break
            p = slices.slice(prow, 1).select(["id", "name", "kind", "parent_id"]).to_pylist()[0]
            parents.append({"id": p["id"], "name": p["name"], "kind": p["kind"]})
            parent = p["parent_id"]
        track = self._track_info.get(columns["track_id"], {})
        return {"id": columns["id"], "name": columns["name"], "kind": columns["kind"],
                "track": {"id": columns["track_id"], "name": track.get("name"), "kind": track.get("kind"),
                          "rank": track.get("rank")},
                "depth": columns["depth"] or 0, "start_ns": columns["start_ns"] - self.origin_ns,
                "dur_ns": columns["dur_ns"], "end_ns": columns["start_ns"] + columns["dur_ns"] - self.origin_ns,
                "columns": columns, "parents": parents[::-1], "flows": self._flows_of(int(slice_id))}

    def _flows_of(self, slice_id: int) -> list[dict]:
        out = []
        for direction, ends, others, order in (("out", self._flow_src, self._flow_dst, self._by_src),
                                               ("in", self._flow_dst, self._flow_src, self._by_dst)):
            sorted_ends = ends[order]
            lo, hi = np.searchsorted(sorted_ends, slice_id, "left"), np.searchsorted(sorted_ends, slice_id, "right")
            for f in order[lo:hi].tolist():
                other = {"direction": direction, "kind": self._flow_kinds[self._flow_kind[f]], "id": int(others[f])}
                row = self._row_of(int(others[f]))
                if row is not None:
                    o = self.tables.slices.slice(row, 1).select(["name", "track_id", "start_ns"]).to_pylist()[0]
                    other.update(name=o["name"], track=o["track_id"], track_name=self._track_name(o["track_id"]),
                                 start_ns=o["start_ns"] - self.origin_ns)
                out.append(other)
        return out

    def area_summary(self, track_ids, t0_ns: int, t1_ns: int, limit: int = 1000) -> dict:
        """Per name, over the slices of ``track_ids`` (all depths; overlap rows included) overlapping
        ``[t0_ns, t1_ns)``: ``count`` and ``dur_ns``, the durations clipped to the window; ``rows`` sorted by
        dur_ns descending (at most ``limit``; ``names`` tells how many there were), with the totals."""
        t0, t1 = int(t0_ns), int(t1_ns)
        self._check_window(t0, t1)
        counts = np.zeros(len(self._names), dtype=np.int64)
        sums = np.zeros(len(self._names), dtype=np.int64)
        for lane in self._lanes_of(list(track_ids)):
            a, m, b = self._lane_range(lane, t0, t1)
            if a == b:
                continue
            names = self._name[a:b]
            clipped = np.minimum(self._end[a:b], t1) - np.maximum(self._start[a:b], t0)
            if m > a:
                visible = self._visible(a, m, b, t0)
                names, clipped = names[visible], clipped[visible]
            np.add.at(counts, names, 1)
            np.add.at(sums, names, clipped)
        present = np.flatnonzero(counts)
        order = present[np.lexsort((present, -sums[present]))][:limit]
        return {"t0": t0, "t1": t1, "names": int(present.size), "count": int(counts.sum()), "dur_ns": int(sums.sum()),
                "rows": [{"name": self._names[i], "count": int(counts[i]), "dur_ns": int(sums[i])}
                         for i in order.tolist()]}
