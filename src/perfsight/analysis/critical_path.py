"""The critical path of a step and what-if: the chain of host work, launches, device tasks and synchronisations
that sets the step's time, and what the step would take with chosen parts of it faster or gone.

**The window.** One rank and one window: a profiled step (the span of its host ``step`` slices, as
``steps.step_trace`` times it), an instance of an annotation (slices whose name contains ``annotation``, as
HTA's ``critical_path_analysis`` picks them), or, in a run without steps, the rank's whole trace. Every host
slice the step breakdown counts (``breakdown.HOST_CATEGORY_KINDS_SQL``) and every device task overlapping the
window takes part, cut to the window; a host slice enclosing the whole window (the annotation itself, an outer
range) is the window, not work in it, and is left out. Slices of no duration are left out (HTA does too).

**The graph.** Each slice has a start and an end node; the window has a source and a sink node on its main
thread (the thread of the step or annotation slice; else the rank's busiest thread). An edge says "this point
cannot come earlier than that point plus the edge's weight" (ns). Edges, by ``edge`` kind:

* ``host``: consecutive boundaries (starts and ends) on a thread, weight the time between them, attributed to
  the innermost slice open in between (its category: the step breakdown's host categories); nothing open is
  ``idle``. A thread other than the main one works in *periods* (from an empty stack to the next). A blocking
  synchronisation's own time (``syncs.synchronisations``: stream, event and device synchronise calls, blocking
  copies) weighs 0 when it waited for a task: its end is set by that task (``sync`` below).
* ``handoff``: a period of another thread (the autograd engine's, a worker's) starts after the main thread's
  latest boundary before it, and after its own thread's previous period (a ``host`` edge, ``idle``; of the two
  the later source binds, the other weighs at most the nominal latency of its kind, as a task's dependencies
  below), and when it ends inside a gap
  of the main thread (nothing open there), the main thread's next boundary waits for it: the main thread,
  resuming, waited for the thread whose period ended last in its gap (the backward pass run by the autograd
  engine while the main thread sits in ``loss.backward()``); that gap then weighs 0, its end set by the
  period it waited for. Category ``idle``.
* ``device``: a device task's start to its end, its duration; category by kernel type (compute, communication,
  memory: ``kernels.DEVICE_TASKS_SQL``, the one communication rule). In a job of several ranks, a collective's
  task is split where the last member of its instance arrived (``collectives.collective_figures``: its
  ``wait_ns``, on aligned clocks): ``rank_wait`` (category ``rank_wait``: waiting for the other ranks) to that
  point, then ``device`` (the transfer). This is how the other ranks enter a rank's path.
* ``launch``: the launching call's start (``kernels.launch_stats``) to its task's start; ``stream``: the task
  before on the same stream, end to start; ``event_wait``: a ``cudaStreamWaitEvent`` (Kineto's ``Stream Wait
  Event`` with its ``wait_on_stream`` and ``wait_on_cuda_event_record_corr_id``): the last task launched on
  the awaited stream before the ``cudaEventRecord`` call, end to the start of the first task launched on the
  waiting stream after the wait call; ``comm_wait``, a stream wait the trace did not record (a rank without
  Kineto's ``Stream Wait Event`` records, as in older PyTorch): a task starting at most ``COMM_WAIT_NS`` after a
  communication task of another stream ended, when that end is later than every recorded dependency of the
  task (its launch, the task before it on its stream), waited for it, so the collective and the other ranks it
  waited for hold the task, not its launch. The dependency satisfied last (the latest source) *binds*: its edge
  weighs the observed time between the two points. The others weigh the observed time capped at the rank's
  nominal latency of their kind (the median of the observed times where that kind binds: ``launch``, the
  launch latency of an idle stream; ``stream`` and ``event_wait``, the gap between queued tasks), which is what
  they would take if a what-if made them bind (``comm_wait``: as ``event_wait``). A task with no dependency in
  the window (running when it began) hangs from the source (``window``). Categories: ``launch``, ``kernel_gap``.
* ``sync``: the device task a blocking call waited for (the last task of the rank ending inside the call) to
  the call's end, weight the time between (the call's return); category ``synchronisation``.

Dependencies that run backwards in time (a task starting before its launch call began: clocks of host and
device apart) cannot hold and are left out (the task binds to what is left, or hangs from the source);
``dropped_edges`` counts them.

**The path.** Longest path from source to sink (each node's time = the latest of its in-edges' source time +
weight; ties go to the edge from the latest source, the dependency satisfied last). With every edge at its
observed weight the replay gives every node its observed time, so the path's length is the window's
duration and its pieces add up to it exactly. ``critical_path`` lists the pieces in order (consecutive edges of
one slice and kind merged); ``critical_path_breakdown`` sums them by category.

**What-if.** ``what_if`` replays the same graph with chosen edges' weights divided by a factor (``inf``
removes them; for ``synchronisation``: the waits removed, the host goes on; for ``rank_wait``: every rank
arriving at its collectives together) and gives the window's new
duration. A change names a category (``PATH_CATEGORIES``) or a glob over slice names (``aten::mm``,
``nccl*``): a slice's change applies to its own time (its ``host`` or ``device`` edges, not the latencies of
its dependencies), and a host slice's to the slices nested in it and the device tasks they launched. What the
replay cannot know: work that would move to another stream or rank, caches, clocks. Each rank's graph is its
own: the other ranks enter it as its collectives' ``rank_wait``, not as their own paths.
"""
from __future__ import annotations

import bisect
import fnmatch
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.analysis.breakdown import CATEGORIES, HOST_CATEGORY_KINDS_SQL, HOST_CATEGORY_SQL
from perfsight.analysis.kernels import DEVICE_TASKS_SQL, KERNEL_TYPES, launch_stats
from perfsight.analysis.step_spans import STEP_SPANS_CTE
from perfsight.analysis.syncs import synchronisations
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables

#: the categories of the path's pieces: the step breakdown's, then the dependencies' own
PATH_CATEGORIES = (*CATEGORIES, "rank_wait", "launch", "kernel_gap", "synchronisation", "idle")
#: the edges' kinds (module docstring)
EDGE_KINDS = ("host", "device", "rank_wait", "launch", "stream", "event_wait", "comm_wait", "sync", "handoff",
              "window")
_CATEGORY = {name: i for i, name in enumerate(PATH_CATEGORIES)}
_EDGE = {name: i for i, name in enumerate(EDGE_KINDS)}
_EDGE_CATEGORY = {"rank_wait": "rank_wait", "launch": "launch", "stream": "kernel_gap", "event_wait": "kernel_gap",
                  "comm_wait": "kernel_gap", "sync": "synchronisation", "handoff": "idle", "window": "idle"}
#: a task that starts at most this long after a communication task of another stream ended, later than all its
#: recorded dependencies, waited for it (``comm_wait``): a stream wait resolves within microseconds
COMM_WAIT_NS = 20_000

CRITICAL_PATH = pa.schema([
    ("rank", pa.int32()),
    ("step", pa.int32()),
    ("window", pa.string()),
    ("position", pa.int32()),
    ("slice_id", pa.int64()),
    ("name", pa.string()),
    ("category", pa.string()),
    ("edge", pa.string()),
    ("start_ns", pa.int64()),
    ("end_ns", pa.int64()),
    ("dur_ns", pa.int64()),
    ("share_pct", pa.float64()),
])

CRITICAL_PATH_BREAKDOWN = pa.schema([
    ("rank", pa.int32()),
    ("step", pa.int32()),
    ("window", pa.string()),
    ("category", pa.string()),
    ("dur_ns", pa.int64()),
    ("share_pct", pa.float64()),
    ("path_ns", pa.int64()),
])

WHAT_IF = pa.schema([
    ("rank", pa.int32()),
    ("step", pa.int32()),
    ("window", pa.string()),
    ("baseline_ns", pa.int64()),
    ("what_if_ns", pa.int64()),
    ("saved_ns", pa.int64()),
    ("saved_pct", pa.float64()),
    ("dropped_edges", pa.int64()),
])

WHOLE_TRACE = "whole trace"


@dataclass(frozen=True)
class Window:
    """A span of one rank to find the critical path in: ``step`` (null for an annotation or the whole trace),
    its ``label`` and the thread track it runs on (None: the rank's busiest)."""
    rank: int
    step: int | None
    label: str
    start_ns: int
    end_ns: int
    track_id: int | None


_STEP_WINDOWS_SQL = f"""
WITH {STEP_SPANS_CTE}
SELECT st.rank, st.step, st.start_ns, st.end_ns,
       (SELECT s.track_id FROM slices s JOIN tracks t USING (track_id)
        WHERE s.kind = 'step' AND s.step = st.step AND t.kind = 'thread' AND coalesce(t.rank, 0) = st.rank
        ORDER BY s.start_ns LIMIT 1) AS track_id
FROM steps st ORDER BY st.rank, st.step
"""

_ANNOTATION_WINDOWS_SQL = """
SELECT coalesce(t.rank, 0)::INTEGER AS rank, s.name, s.start_ns, s.start_ns + s.dur_ns AS end_ns, s.track_id
FROM slices s JOIN tracks t USING (track_id)
WHERE t.kind = 'thread' AND contains(s.name, $annotation) AND s.dur_ns > 0
ORDER BY rank, s.start_ns, s.id
"""

_WHOLE_WINDOWS_SQL = """
SELECT coalesce(t.rank, 0)::INTEGER AS rank, min(s.start_ns) AS start_ns, max(s.start_ns + s.dur_ns) AS end_ns
FROM slices s JOIN tracks t USING (track_id) WHERE t.kind IN ('thread', 'stream') GROUP BY ALL ORDER BY rank
"""


def windows(tables: RunTables, *, step: int | None = None, rank: int | None = None, annotation: str | None = None,
            instance: int | None = None) -> list[Window]:
    """The windows ``critical_path`` and ``what_if`` work on (module docstring), in rank and time order.
    ``annotation``: its instances (``instance``: only the one of that index, from 0, per rank); else the
    profiled steps (``step``: only that one); a run without steps: each rank's whole trace."""
    found: list[Window] = []
    if annotation is not None:
        rows = tables.sql(_ANNOTATION_WINDOWS_SQL, params={"annotation": annotation}).to_arrow_table().to_pylist()
        per_rank: dict[int, int] = {}
        for row in rows:
            index = per_rank[row["rank"]] = per_rank.get(row["rank"], -1) + 1
            if instance is None or index == instance:
                found.append(Window(row["rank"], None, f"{row['name']} #{index}", row["start_ns"], row["end_ns"],
                                    row["track_id"]))
    else:
        rows = tables.sql(_STEP_WINDOWS_SQL).to_arrow_table().to_pylist()
        if rows:
            found = [Window(r["rank"], r["step"], f"step {r['step']}", r["start_ns"], r["end_ns"], r["track_id"])
                     for r in rows if step is None or r["step"] == step]
        elif step is None:
            found = [Window(r["rank"], None, WHOLE_TRACE, r["start_ns"], r["end_ns"], None)
                     for r in tables.sql(_WHOLE_WINDOWS_SQL).to_arrow_table().to_pylist()]
    return [w for w in found if (rank is None or w.rank == rank) and w.end_ns > w.start_ns]


_HOST_SQL = f"""
SELECT s.id, s.track_id, s.kind, s.name, greatest(s.start_ns, $w0) AS start_ns,
       least(s.start_ns + s.dur_ns, $w1) AS end_ns, coalesce(s.depth, 0) AS depth, s.parent_id,
       {HOST_CATEGORY_SQL} AS category
FROM slices s JOIN tracks t USING (track_id)
WHERE t.kind = 'thread' AND coalesce(t.rank, 0) = $rank AND {HOST_CATEGORY_KINDS_SQL} AND s.dur_ns > 0
  AND s.start_ns < $w1 AND s.start_ns + s.dur_ns > $w0 AND NOT (s.start_ns <= $w0 AND s.start_ns + s.dur_ns >= $w1)
ORDER BY s.id
"""

_DEVICE_SQL = f"""
SELECT id, track_id, stream, name, kernel_type, greatest(start_ns, $w0) AS start_ns, end_ns
FROM ({DEVICE_TASKS_SQL}) WHERE rank = $rank AND dur_ns > 0 AND start_ns < $w1 AND end_ns > $w0
ORDER BY track_id, start_ns, id
"""

#: Kineto's ``Stream Wait Event`` records: the waiting call's correlation, the waiting and awaited streams, and
#: the correlation of the ``cudaEventRecord`` call that recorded the awaited event
_EVENT_WAITS_SQL = """
SELECT s.correlation_id AS wait_correlation, json_extract_string(s.args, '$.stream') AS stream,
       json_extract_string(s.args, '$.wait_on_stream') AS awaited_stream,
       TRY_CAST(json_extract_string(s.args, '$.wait_on_cuda_event_record_corr_id') AS BIGINT) AS record_correlation
FROM slices s JOIN tracks t USING (track_id)
WHERE s.kind = 'sync' AND s.name = 'Stream Wait Event' AND coalesce(t.rank, 0) = $rank AND json_valid(s.args)
  AND s.start_ns < $w1 AND s.start_ns + s.dur_ns > $w0
"""

_STREAM_WAIT_RANKS_SQL = """
SELECT DISTINCT coalesce(t.rank, 0) AS rank FROM slices s JOIN tracks t USING (track_id)
WHERE s.kind = 'sync' AND s.name = 'Stream Wait Event'
"""

_CALLS_SQL = """
SELECT correlation_id, min(start_ns) AS start_ns FROM slices s JOIN tracks t USING (track_id)
WHERE t.kind = 'thread' AND coalesce(t.rank, 0) = $rank AND s.kind IN ('runtime', 'driver')
  AND list_contains($correlations, s.correlation_id) GROUP BY ALL
"""


@dataclass
class Graph:
    """One window's dependency graph (module docstring). Nodes: their observed times (ns since the window's
    start). Edges (parallel lists and arrays) in an order where every edge comes after the edges into its
    source: source and destination nodes, weight, kind (index into ``EDGE_KINDS``), category (index into
    ``PATH_CATEGORIES``) and the slice it is attributed to (index into ``slice_ids``/``slice_names``, -1 none).
    ``slice_parent``: a host slice's enclosing slice, a task's launching call (indices, -1 none)."""
    window: Window
    node_ns: np.ndarray
    source: int
    sink: int
    src: list[int]
    dst: list[int]
    weight: list[int]
    kind: np.ndarray
    category: np.ndarray
    slice_index: np.ndarray
    slice_ids: np.ndarray
    slice_names: pa.StringArray
    slice_parent: np.ndarray
    dropped_edges: int


class _Builder:
    """Finds a window's nodes and edges (module docstring) and makes the ``Graph``. Slices are indexed host
    slices first, then device tasks; nodes: host starts, host ends, task starts, task ends, source, sink, then
    the arrival points of the collectives that waited for other ranks."""

    def __init__(self, tables: RunTables, window: Window):
        self.tables, self.window = tables, window
        params = {"rank": window.rank, "w0": window.start_ns, "w1": window.end_ns}
        self.host = tables.sql(_HOST_SQL, params=params).to_arrow_table()
        self.device = tables.sql(_DEVICE_SQL, params=params).to_arrow_table()
        self.n_host, self.n_device = self.host.num_rows, self.device.num_rows
        w0 = window.start_ns
        self.h_start = self.host.column("start_ns").to_numpy() - w0
        self.h_end = self.host.column("end_ns").to_numpy() - w0
        self.d_start = self.device.column("start_ns").to_numpy() - w0
        self.d_end = self.device.column("end_ns").to_numpy() - w0
        self.source = 2 * (self.n_host + self.n_device)
        self.sink = self.source + 1
        self.sink_ns = window.end_ns - w0
        self.rank_wait = self._rank_waits()            # task -> (its arrival node, the wait)
        arrivals = [int(self.d_start[task - self.n_host]) + wait for task, (_, wait) in self.rank_wait.items()]
        self.node_ns = np.concatenate([self.h_start, self.h_end, self.d_start, self.d_end,
                                       [0, self.sink_ns], arrivals]).astype(np.int64)
        self.host_ids = self.host.column("id").to_numpy()
        self.host_index = {int(i): k for k, i in enumerate(self.host_ids)}
        self.depth = self.host.column("depth").to_numpy().astype(np.int64)
        self.tracks = self.host.column("track_id").to_numpy()
        self.main = (window.track_id if window.track_id is not None and np.any(self.tracks == window.track_id)
                     else _busiest(self.tracks, self.h_end - self.h_start))
        self.rows: list[tuple[int, int, int, int, int, int]] = []
        self.dropped = 0
        self.launch_call = self._launch_calls()

    # nodes of slice k
    def start(self, k: int) -> int:
        return k if k < self.n_host else self.n_host + k

    def end(self, k: int) -> int:
        return self.n_host + k if k < self.n_host else self.n_host + self.n_device + k

    def add(self, src: int, dst: int, kind: str, category: str | int, slice_index: int = -1,
            weight: int | None = None) -> None:
        """An edge; its weight the observed time between its nodes unless given (never below 0)."""
        observed = int(self.node_ns[dst] - self.node_ns[src]) if weight is None else int(weight)
        category = category if isinstance(category, int) else _CATEGORY[category]
        self.rows.append((src, dst, max(0, observed), _EDGE[kind], category, slice_index))

    def _rank_waits(self) -> dict[int, tuple[int, int]]:
        """{task: (its arrival node, ns)} of the window's collectives that waited for the other ranks of their
        instance (``collectives.collective_figures``' ``wait_ns`` inside (0, the task's duration]); only in a
        job of several ranks."""
        from perfsight.analysis.collectives import collective_figures
        from perfsight.analysis.job_summaries import job_of
        from perfsight.analysis.rank_facts import rank_facts

        if computed(rank_facts, self.tables).num_rows < 2 or not self.n_device:
            return {}
        figures = computed(collective_figures, computed(job_of, self.tables))
        task_of = {int(i): self.n_host + j for j, i in enumerate(self.device.column("id").to_pylist())}
        waits: dict[int, tuple[int, int]] = {}
        for rank, slice_id, wait in zip(figures.column("rank").to_pylist(), figures.column("slice_id").to_pylist(),
                                        figures.column("wait_ns").to_pylist()):
            task = task_of.get(slice_id) if rank == self.window.rank else None
            if task is not None and wait and 0 < wait <= self.d_end[task - self.n_host] - self.d_start[
                    task - self.n_host]:
                waits[task] = (self.sink + 1 + len(waits), int(wait))
        return waits

    def _launch_calls(self) -> dict[int, int]:
        """{task index: index of its launching call}, for the tasks whose call is a host slice of the window."""
        calls = computed(_launching_calls, self.tables)
        found = {}
        for j, task in enumerate(self.device.column("id").to_pylist()):
            call = self.host_index.get(calls.get(task, -1), -1)
            if call >= 0:
                found[self.n_host + j] = call
        return found

    def waits(self) -> dict[int, int]:
        """The window's blocking calls that waited (``syncs.synchronisations``): {call: the task it waited for,
        the rank's last task ending inside the call}."""
        syncs = computed(synchronisations, self.tables)
        calls = [self.host_index[i] for r, i in zip(syncs.column("rank").to_pylist(),
                                                     syncs.column("slice_id").to_pylist())
                 if r == self.window.rank and i in self.host_index]
        by_end = np.argsort(self.d_end, kind="stable")
        ends = self.d_end[by_end]
        waited = {}
        for call in calls:
            k = int(np.searchsorted(ends, self.h_end[call], side="right")) - 1
            if k >= 0 and ends[k] > self.h_start[call]:
                waited[call] = self.n_host + int(by_end[k])
        return waited

    def thread_edges(self, waited: dict[int, int]) -> None:
        """``host`` edges along each thread and ``handoff`` edges between the main thread and the others."""
        n, main, idle = self.n_host, self.main, _CATEGORY["idle"]
        ts = np.concatenate([self.h_start, self.h_end])
        is_start = np.concatenate([np.ones(n, dtype=bool), np.zeros(n, dtype=bool)])
        nested = np.concatenate([self.depth, -self.depth])
        track = np.concatenate([self.tracks, self.tracks])
        order = np.lexsort((np.arange(2 * n), nested, is_start, ts, track != main, track))
        category = self.host.column("category").to_pylist()
        main_nodes, main_ns = [self.source], [0]
        # the main thread's gaps: (start ns, node ending it, its ns, the edge across it)
        gap_ends: list[tuple[int, int, int, int]] = []
        # other threads: (node starting a period, its ns, the thread's previous period's end or (-1, 0))
        period_starts: list[tuple[int, int, tuple[int, int]]] = []
        period_ends: list[tuple[int, int]] = []        # other threads: (node ending a period, its ns)
        stack: list[int] = []
        current, previous = None, (-1, 0)

        def close(track_id):
            if track_id == main:
                gap_ends.append((previous[1], self.sink, self.sink_ns, len(self.rows)))
                self.add(previous[0], self.sink, "host", idle)
            elif track_id is not None:
                period_ends.append(previous)

        for b in order.tolist():
            node, now = b, int(ts[b])
            event = b if b < n else b - n
            if track[b] != current:
                close(current)
                current, stack = int(track[b]), []
                previous = (self.source, 0) if current == main else (-1, 0)
            if stack or current == main:
                top = stack[-1] if stack else -1
                weight = 0 if top in waited else None
                if not stack:
                    gap_ends.append((previous[1], node, now, len(self.rows)))
                self.add(previous[0], node, "host", category[top] if top >= 0 else idle, top, weight)
            else:
                if previous[0] >= 0:
                    period_ends.append(previous)
                period_starts.append((node, now, previous))
            if current == main:
                main_nodes.append(node)
                main_ns.append(now)
            if is_start[b]:
                stack.append(event)
            elif event in stack:
                stack.remove(event)
            previous = (node, now)
        close(current)
        if main is None or main not in set(self.tracks.tolist()):
            gap_ends.append((0, self.sink, self.sink_ns, len(self.rows)))
            self.add(self.source, self.sink, "host", idle)
        self._period_starts(period_starts, main_nodes, main_ns)
        gap_end_ns = [g[2] for g in gap_ends]
        last_in_gap: dict[int, tuple[int, int]] = {}     # gap -> the period ending last in it: (its ns, node)
        for node, now in period_ends:
            k = bisect.bisect_left(gap_end_ns, now)
            if k < len(gap_ends) and gap_ends[k][0] <= now:
                last_in_gap[k] = max(last_in_gap.get(k, (now, node)), (now, node))
        for k, (now, node) in last_in_gap.items():
            end_node, gap_edge = gap_ends[k][1], gap_ends[k][3]
            self.add(node, end_node, "handoff", idle)
            src, dst, _, kind, category, index = self.rows[gap_edge]    # the main thread waited: its gap weighs 0
            self.rows[gap_edge] = (src, dst, 0, kind, category, index)

    def _period_starts(self, starts: list[tuple[int, int, tuple[int, int]]], main_nodes: list[int],
                       main_ns: list[int]) -> None:
        """The two edges into a period's start: the ``handoff`` from the main thread's latest boundary before it and
        the ``host`` gap since its thread's previous period; the later source binds, the other is capped at the
        nominal latency of its kind (as a task's dependencies are, ``device_edges``)."""
        idle = _CATEGORY["idle"]
        candidates = []
        for node, now, previous in starts:
            k = bisect.bisect_right(main_ns, now) - 1
            found = [(main_nodes[k], main_ns[k], "handoff")] + ([(previous[0], previous[1], "host")]
                                                                if previous[0] >= 0 else [])
            candidates.append((node, now, found, max(found, key=lambda c: c[1])))
        nominal = _nominal((now - binding[1], binding[2]) for _, now, _, binding in candidates)
        for node, now, found, binding in candidates:
            for source, ns, kind in found:
                weight = now - ns if (source, ns, kind) == binding else min(now - ns, nominal[kind])
                self.add(source, node, kind, idle, -1, weight)

    def device_edges(self) -> None:
        """Each task's ``device`` edge and its dependencies: ``launch``, ``stream``, ``event_wait``, or ``window``."""
        n_host = self.n_host
        kernel_type = self.device.column("kernel_type").to_pylist()
        candidates: list[list[tuple[int, int, str]]] = [[] for _ in range(self.n_device)]   # (source node, ns, kind)
        for task, call in self.launch_call.items():
            candidates[task - n_host].append((self.start(call), int(self.h_start[call]), "launch"))
        tracks = self.device.column("track_id").to_numpy()
        for j in range(1, self.n_device):
            if tracks[j] == tracks[j - 1]:
                candidates[j].append((self.end(n_host + j - 1), int(self.d_end[j - 1]), "stream"))
        for before, after in self._event_waits():
            candidates[after - n_host].append((self.end(before), int(self.d_end[before - n_host]), "event_wait"))
        for j, found in enumerate(candidates):        # a dependency after its task began cannot hold: dropped
            candidates[j] = [c for c in found if c[1] <= self.d_start[j]]
            self.dropped += len(found) - len(candidates[j])
        self._comm_waits(candidates)
        binding = [max(c, key=lambda dep: (dep[1], dep[2] == "launch")) if c else None for c in candidates]
        nominal = _nominal((int(self.d_start[j]) - b[1], b[2]) for j, b in enumerate(binding) if b)
        nominal["event_wait"] = nominal["comm_wait"] = nominal["stream"]
        for j in range(self.n_device):
            task = n_host + j
            category = KERNEL_TYPE_CATEGORY[kernel_type[j]]
            if task in self.rank_wait:
                arrival = self.rank_wait[task][0]
                self.add(self.start(task), arrival, "rank_wait", "rank_wait", task)
                self.add(arrival, self.end(task), "device", category, task)
            else:
                self.add(self.start(task), self.end(task), "device", category, task)
            if binding[j] is None:
                self.add(self.source, self.start(task), "window", "idle", task)
            for node, ns, kind in candidates[j]:
                observed = int(self.d_start[j]) - ns
                weight = observed if (node, ns, kind) == binding[j] else min(observed, nominal[kind])
                self.add(node, self.start(task), kind, _EDGE_CATEGORY[kind], task, weight)

    def _comm_waits(self, candidates: list[list[tuple[int, int, str]]]) -> None:
        """Adds each task's ``comm_wait`` dependency (module docstring) to its ``candidates``, on a rank whose trace
        records no stream waits."""
        if self.window.rank in computed(_ranks_recording_stream_waits, self.tables):
            return
        communication = np.array([KERNEL_TYPE_CATEGORY[t] == "communication"
                                  for t in self.device.column("kernel_type").to_pylist()], dtype=bool)
        if not communication.any():
            return
        tracks = self.device.column("track_id").to_numpy()
        ends = np.flatnonzero(communication)
        ends = ends[np.argsort(self.d_end[ends], kind="stable")]
        end_ns = self.d_end[ends]
        for j in range(self.n_device):
            start = int(self.d_start[j])
            latest = max((c[1] for c in candidates[j]), default=start - COMM_WAIT_NS - 1)
            k = int(np.searchsorted(end_ns, start, side="right")) - 1
            while k >= 0 and end_ns[k] > latest and end_ns[k] >= start - COMM_WAIT_NS:
                if tracks[ends[k]] != tracks[j]:
                    task = self.n_host + int(ends[k])
                    candidates[j].append((self.end(task), int(end_ns[k]), "comm_wait"))
                    break
                k -= 1

    def _event_waits(self) -> list[tuple[int, int]]:
        """(awaited task, waiting task) of the window's stream waits (module docstring), as slice indices."""
        params = {"rank": self.window.rank, "w0": self.window.start_ns, "w1": self.window.end_ns}
        waits = self.tables.sql(_EVENT_WAITS_SQL, params=params).to_arrow_table().to_pylist()
        if not waits or not self.launch_call:
            return []
        correlations = [w["wait_correlation"] for w in waits] + [w["record_correlation"] for w in waits]
        call_start = dict(self.tables.sql(_CALLS_SQL, params={"rank": self.window.rank, "correlations": [
            c for c in correlations if c is not None]}).fetchall())
        streams = self.device.column("stream").to_pylist()
        launched: dict[str, list[tuple[int, int]]] = {}        # stream -> [(launch ns, task)] in launch order
        for task, call in self.launch_call.items():
            launched.setdefault(streams[task - self.n_host], []).append(
                (int(self.h_start[call]) + self.window.start_ns, task))
        for tasks in launched.values():
            tasks.sort()
        pairs = []
        for wait in waits:
            record, waiting = call_start.get(wait["record_correlation"]), call_start.get(wait["wait_correlation"])
            before, after = launched.get(wait["awaited_stream"], []), launched.get(wait["stream"], [])
            if record is None or waiting is None:
                continue
            k = bisect.bisect_left(before, (record, -1)) - 1
            m = bisect.bisect_right(after, (waiting, self.n_host + self.n_device))
            if k >= 0 and m < len(after):
                pairs.append((before[k][1], after[m][1]))
        return pairs

    def sync_edges(self, waited: dict[int, int]) -> None:
        for call, task in waited.items():
            self.add(self.end(task), self.end(call), "sync", "synchronisation", call)

    def graph(self) -> Graph:
        waited = self.waits()
        self.thread_edges(waited)
        self.device_edges()
        self.sync_edges(waited)
        order = _node_order(self.node_ns, self.n_host, self.n_device, self.depth, self.source, self.sink,
                            len(self.rank_wait))
        place = np.empty_like(order)
        place[order] = np.arange(order.size)
        kept = sorted((row for row in self.rows if place[row[0]] < place[row[1]]), key=lambda row: place[row[1]])
        src, dst, weight, kind, category, slice_index = (list(c) for c in zip(*kept)) if kept else ([],) * 6
        parent = np.full(self.n_host + self.n_device, -1, dtype=np.int64)
        for k, p in enumerate(self.host.column("parent_id").to_pylist()):
            parent[k] = self.host_index.get(p, -1) if p is not None else -1
        for task, call in self.launch_call.items():
            parent[task] = call
        return Graph(self.window, self.node_ns, self.source, self.sink, src, dst, weight,
                     np.array(kind, dtype=np.int8), np.array(category, dtype=np.int8),
                     np.array(slice_index, dtype=np.int64),
                     np.concatenate([self.host_ids, self.device.column("id").to_numpy()]).astype(np.int64),
                     pa.chunked_array([*self.host.column("name").cast(pa.string()).chunks,
                                       *self.device.column("name").cast(pa.string()).chunks],
                                      type=pa.string()).combine_chunks(), parent,
                     self.dropped + len(self.rows) - len(kept))


def _nominal(observed: Iterable[tuple[int, str]]) -> dict[str, int]:
    """Per kind of dependency, the median of the observed latencies (ns, >= 0) where that kind binds; 0 for a
    kind that never binds."""
    by_kind: dict[str, list[int]] = {}
    for latency, kind in observed:
        by_kind.setdefault(kind, []).append(latency)
    return defaultdict(int, {kind: max(0, int(np.median(values))) for kind, values in by_kind.items()})


#: a device task's path category by its kernel type (``kernels.KERNEL_TYPES``)
KERNEL_TYPE_CATEGORY = dict(zip(KERNEL_TYPES, ("compute", "communication", "memory")))


def _ranks_recording_stream_waits(tables: RunTables) -> set[int]:
    """The ranks whose traces hold Kineto's ``Stream Wait Event`` records, once per run."""
    return {rank for (rank,) in tables.sql(_STREAM_WAIT_RANKS_SQL).fetchall()}


def _launching_calls(tables: RunTables) -> dict[int, int]:
    """The run's device task id -> its launching call's id (``kernels.launch_stats``), once per run."""
    launches = computed(launch_stats, tables)
    return dict(zip(launches.column("kernel_id").to_pylist(), launches.column("runtime_id").to_pylist()))


def _slice_names(tables: RunTables) -> frozenset[str]:
    """Every slice name of the run, once per run (what a what-if's globs are checked against)."""
    return frozenset(tables.slices.column("name").unique().to_pylist())


def _busiest(tracks: np.ndarray, durations: np.ndarray) -> int | None:
    """The thread track with the most host time, None without any."""
    if not tracks.size:
        return None
    ids, inverse = np.unique(tracks, return_inverse=True)
    return int(ids[np.argmax(np.bincount(inverse, weights=durations))])


def _node_order(node_ns: np.ndarray, n_host: int, n_device: int, depth: np.ndarray, source: int,
                sink: int, arrivals: int) -> np.ndarray:
    """Nodes in time order. At one time: the source first and the sink last; ends before starts; a collective's
    arrival point before a task's end, a task's end before a call's end (a call waits for a task), a call's
    start before a task's start (a call launches a task); inner ends before outer ends and outer starts before
    inner starts."""
    h, d, a = (np.ones(n, dtype=np.int64) for n in (n_host, n_device, arrivals))
    is_start = np.concatenate([h, 0 * h, d, 0 * d, [0, 0], 0 * a])
    side = np.concatenate([0 * h, h, d, 0 * d, [0, 0], -a])       # starts: host first; ends: device first
    nested = np.concatenate([depth, -depth, 0 * d, 0 * d, [0, 0], 0 * a])
    first_last = np.ones(node_ns.size, dtype=np.int64)
    first_last[source], first_last[sink] = 0, 2
    return np.lexsort((np.arange(node_ns.size), nested, side, is_start, node_ns, first_last))


def graph(tables: RunTables, window: Window) -> Graph:
    """The dependency graph of ``window`` (module docstring)."""
    return _Builder(tables, window).graph()


def _replay(g: Graph, weight: list[float] | None = None) -> tuple[list[float], list[int]]:
    """Each node's time (the latest of its in-edges' source time + weight) and the edge that sets it (-1 none),
    with the graph's weights or ``weight`` (``-inf``: the edge is gone); ties go to the latest source."""
    weights = g.weight if weight is None else weight
    time = [-math.inf] * g.node_ns.size
    time[g.source] = 0
    chosen = [-1] * g.node_ns.size
    chosen_src = [-math.inf] * g.node_ns.size
    for e, (u, v, w) in enumerate(zip(g.src, g.dst, weights)):
        tu = time[u]
        candidate = tu + w
        if candidate > time[v] or (candidate == time[v] and tu > chosen_src[v]):
            time[v], chosen[v], chosen_src[v] = candidate, e, tu
    return time, chosen


def _graphs(tables: RunTables, step: int | None, rank: int | None, annotation: str | None,
            instance: int | None) -> list[Graph]:
    return [computed(graph, tables, w) for w in computed(windows, tables, step=step, rank=rank,
                                                         annotation=annotation, instance=instance)]


def _path(g: Graph) -> list[dict]:
    """The critical path of ``g``: its edges from source to sink, consecutive edges of one slice and kind
    merged, host pieces of no time left out (a dependency of none stays: it says why the path turns), as rows
of ``CRITICAL_PATH`` without the window's columns."""
    time, chosen = _replay(g)
    edges = []
    node = g.sink
    while chosen[node] >= 0:
        edges.append(chosen[node])
        node = g.src[chosen[node]]
    length = time[g.sink]
    rows: list[dict] = []
    w0 = g.window.start_ns
    for e in reversed(edges):
        key = (int(g.slice_index[e]), int(g.kind[e]), int(g.category[e]))
        start, end = w0 + int(time[g.src[e]]), w0 + int(time[g.dst[e]])
        if start == end and key[1] == _EDGE["host"]:
            continue
        if rows and rows[-1]["key"] == key and rows[-1]["end_ns"] == start:
            rows[-1]["end_ns"] = end
            continue
        rows.append({"key": key, "start_ns": start, "end_ns": end})
    for position, row in enumerate(rows):
        index, kind, category = row.pop("key")
        row.update(position=position, slice_id=int(g.slice_ids[index]) if index >= 0 else None,
                   name=g.slice_names[index].as_py() if index >= 0 else None, category=PATH_CATEGORIES[category],
                   edge=EDGE_KINDS[kind], dur_ns=row["end_ns"] - row["start_ns"],
                   share_pct=100.0 * (row["end_ns"] - row["start_ns"]) / length if length else None)
    return rows


def _of_window(g: Graph) -> dict:
    return {"rank": g.window.rank, "step": g.window.step, "window": g.window.label}


def critical_path(tables: RunTables, *, step: int | None = None, rank: int | None = None,
                  annotation: str | None = None, instance: int | None = None) -> pa.Table:
    """Per rank and window (``windows``: the profiled steps, ``step`` only that one; or the instances of
    ``annotation``; or the whole trace), the critical path's pieces in order (schema ``CRITICAL_PATH``):
    the slice (null for idle time), its name, category (``PATH_CATEGORIES``), the kind of edge (``EDGE_KINDS``),
    its start, end and duration and its share of the window (module docstring)."""
    rows = [{**_of_window(g), **row} for g in _graphs(tables, step, rank, annotation, instance) for row in _path(g)]
    return pa.Table.from_pylist(rows, schema=CRITICAL_PATH)


def critical_path_breakdown(tables: RunTables, *, step: int | None = None, rank: int | None = None,
                            annotation: str | None = None, instance: int | None = None) -> pa.Table:
    """Per rank, window and category (``PATH_CATEGORIES`` order; categories absent from the path left out): the
    time on the critical path (``dur_ns``), its share of the path and the path's length (``path_ns``, the
    window's duration) (schema ``CRITICAL_PATH_BREAKDOWN``)."""
    rows = []
    for g in _graphs(tables, step, rank, annotation, instance):
        totals = dict.fromkeys(PATH_CATEGORIES, 0)
        for piece in _path(g):
            totals[piece["category"]] += piece["dur_ns"]
        length = sum(totals.values())
        rows += [{**_of_window(g), "category": c, "dur_ns": ns, "share_pct": 100.0 * ns / length if length else None,
                  "path_ns": length} for c, ns in totals.items() if ns]
    return pa.Table.from_pylist(rows, schema=CRITICAL_PATH_BREAKDOWN)


def _changed_weights(g: Graph, faster: Mapping[str, float]) -> list[float]:
    """The graph's weights with ``faster``'s changes (``what_if``)."""
    weight = [float(w) for w in g.weight]
    for key, factor in faster.items():
        if key in _CATEGORY:
            edges = np.flatnonzero(g.category == _CATEGORY[key])
        else:
            chosen = _named_slices(g.slice_names, key)
            chosen = _with_descendants(chosen, g.slice_parent)
            own_time = (g.kind == _EDGE["host"]) | (g.kind == _EDGE["device"])
            edges = np.flatnonzero(own_time & (g.slice_index >= 0) & chosen[np.maximum(g.slice_index, 0)])
        gone = key == "synchronisation" or math.isinf(factor)
        for e in edges.tolist():
            weight[e] = -math.inf if gone and g.kind[e] == _EDGE["sync"] else (0.0 if gone else weight[e] / factor)
    return weight


def _named_slices(names: pa.StringArray, key: str) -> np.ndarray:
    """Per slice of ``names``, whether ``key`` names it (``_named``), each distinct name tried once; at least
    one element (False) so that an index of -1 clipped to 0 is safe in a graph without slices."""
    encoded = names.dictionary_encode()
    distinct = encoded.dictionary.to_pylist()
    matching = np.array([_named(name, key) for name in distinct] + [False], dtype=bool)   # the last: no name
    chosen = matching[pc.fill_null(encoded.indices, len(distinct)).to_numpy()]
    return chosen if chosen.size else np.zeros(1, dtype=bool)


def _named(name: str, key: str) -> bool:
    """Whether a slice called ``name`` is what a what-if's ``key`` names: the name itself (kernel names hold
    brackets and stars) or a glob matching it."""
    return name == key or fnmatch.fnmatchcase(name, key)


def _with_descendants(chosen: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """``chosen`` widened to every slice whose chain of parents reaches a chosen one."""
    chosen = chosen.copy()
    for _ in range(64):
        inherited = chosen | ((parent >= 0) & chosen[np.maximum(parent, 0)])
        if (inherited == chosen).all():
            break
        chosen = inherited
    return chosen


def check_changes(faster: Mapping[str, float], names: frozenset[str] | None = None) -> None:
    """Raise ValueError unless every key of ``faster`` is a path category or (given the run's slice ``names``)
    a glob matching one, and every factor a number > 0 (``inf``: removed)."""
    for key, factor in faster.items():
        if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not factor > 0:
            raise ValueError(f"what_if: {key!r} must be made faster by a number > 0 (2: twice as fast, "
                             f"inf: removed), got {factor!r}")
        if key not in _CATEGORY and names is not None and not any(_named(n, key) for n in names):
            raise ValueError(f"what_if: {key!r} is neither a category ({', '.join(PATH_CATEGORIES)}) nor the name "
                             "(or glob) of any slice in the run")


def what_if(tables: RunTables, faster: Mapping[str, float], *, step: int | None = None, rank: int | None = None,
            annotation: str | None = None, instance: int | None = None) -> pa.Table:
    """Per rank and window, the window's duration replayed with ``faster``'s changes (module docstring): a
    category (``PATH_CATEGORIES``) or a glob over slice names -> how many times faster (``inf``: removed; for
    ``synchronisation``, any factor removes the waits) (schema ``WHAT_IF``): ``baseline_ns`` (the window),
    ``what_if_ns``, ``saved_ns`` and ``saved_pct``, ``dropped_edges`` (dependencies left out as backwards in
    time)."""
    check_changes(faster, computed(_slice_names, tables))
    rows = []
    for g in _graphs(tables, step, rank, annotation, instance):
        baseline = int(g.node_ns[g.sink])
        after = int(_replay(g, _changed_weights(g, faster))[0][g.sink])
        rows.append({**_of_window(g), "baseline_ns": baseline, "what_if_ns": after, "saved_ns": baseline - after,
                     "saved_pct": 100.0 * (baseline - after) / baseline if baseline else None,
                     "dropped_edges": g.dropped_edges})
    return pa.Table.from_pylist(rows, schema=WHAT_IF)


#: the what-ifs the reports show and the advice's estimated gains come from: name -> (changes, what they mean)
SCENARIOS: dict[str, tuple[dict[str, float], str]] = {
    "overlap_communication": ({"communication": math.inf}, "communication fully overlapped"),
    "no_launch_overhead": ({"launch": math.inf, "kernel_gap": math.inf}, "no launch latency or kernel gaps"),
    "no_sync_waits": ({"synchronisation": math.inf}, "no host waits for the device"),
    "no_data_wait": ({"dataloader": math.inf}, "no waits for the data loader"),
    "host_twice_as_fast": ({"host_ops": 2, "python": 2, "runtime": 2}, "host work twice as fast"),
    "compute_twice_as_fast": ({"compute": 2}, "device compute twice as fast"),
    "no_rank_waits": ({"rank_wait": math.inf}, "ranks arriving together"),
}

WHAT_IF_SUMMARY = pa.schema([
    ("rank", pa.int32()),
    ("scenario", pa.string()),
    ("description", pa.string()),
    ("windows", pa.int64()),
    ("baseline_ns", pa.int64()),
    ("what_if_ns", pa.int64()),
    ("saved_ns", pa.int64()),
    ("saved_pct", pa.float64()),
])


def what_if_summary(tables: RunTables, *, step: int | None = None, rank: int | None = None) -> pa.Table:
    """Per rank and scenario of ``SCENARIOS`` (in its order), ``what_if`` over the rank's windows (the profiled
    steps, ``step`` only that one; the whole trace without steps) (schema ``WHAT_IF_SUMMARY``): how many
    windows, the mean ``baseline_ns`` and ``what_if_ns`` per window, the mean ``saved_ns`` and the share it is
    of the baseline (``saved_pct``)."""
    rows = []
    for name, (changes, description) in SCENARIOS.items():
        by_rank: dict[int, list[dict]] = {}
        for row in computed(what_if, tables, changes, step=step, rank=rank).to_pylist():
            by_rank.setdefault(row["rank"], []).append(row)
        for r, found in sorted(by_rank.items()):
            baseline = sum(x["baseline_ns"] for x in found) // len(found)
            after = sum(x["what_if_ns"] for x in found) // len(found)
            rows.append({"rank": r, "scenario": name, "description": description, "windows": len(found),
                         "baseline_ns": baseline, "what_if_ns": after, "saved_ns": baseline - after,
                         "saved_pct": 100.0 * (baseline - after) / baseline if baseline else None})
    return pa.Table.from_pylist(rows, schema=WHAT_IF_SUMMARY)
