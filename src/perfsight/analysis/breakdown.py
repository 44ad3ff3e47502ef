"""Where the time goes: the device timeline split into compute / non-compute / idle (HTA's temporal
breakdown), each training step split into categories that add up exactly to the step, and MindSpore's
computation-communication overlap ("Op Overlap Analyse") with the interval sets behind it (the timeline's
overlap rows).

Every function reads the canonical tables and returns an Arrow table; times and durations are int64 ns,
percentages float64 in [0, 100].

Time categories, in priority order (an instant belongs to the first category active at that instant, so
nothing is counted twice; every category is the union of its slices, so parallel kernels or nested host
ops count once):

1. ``compute``: device tasks of kernel type COMPUTATION (``kernels`` module: kernel slices on a stream
   that are not communication);
2. ``communication``: device tasks of type COMMUNICATION, while no compute runs; on a rank without
   device communication tasks (a CPU job on gloo), its host ``comm`` slices (core/communication.py:
   counted once);
3. ``memory``: memcpy/memset device tasks, while neither compute nor communication runs;
4. ``runtime``: host runtime/driver API calls and device synchronisation (kinds ``runtime``, ``driver``,
   ``sync`` on thread tracks: cudaLaunchKernel, cudaDeviceSynchronize...) while the device is idle;
5. ``dataloader``: host ``dataloader`` slices while the device is idle and no runtime call runs;
6. ``host_ops``: other host work (``cpu_op``, ``annotation``, host-side ``comm`` slices of a rank whose
   device communicates) while none of the above;
7. ``python``: Python function slices (with_stack) while none of the above;
8. ``idle``: the remainder: nothing recorded on the host or the device.

Host categories count the rank's thread tracks together (the main thread, the autograd thread, ...).
A step is the rank's ``step`` slices (ProfilerStep#N) of step number N: from the earliest start to the
latest end; time is attributed to a step by when it happens (device work launched in step N that runs
after the step ended belongs to the next window, not to N), so the categories of a step sum exactly to
``step_ns``. A CPU-only trace has no compute or memory categories; the same sweep then splits the step
between communication (its torch.distributed work), runtime, dataloader, host ops, python and idle.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.analysis import intervals
from perfsight.analysis.kernels import device_task_arrays
from perfsight.analysis.rank_facts import ranks_without_compute, reported_step_trace
from perfsight.analysis.step_spans import STEP_SPANS_CTE
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables

#: the categories of the priority sweep, highest priority first (idle is the remainder)
CATEGORIES = ("compute", "communication", "memory", "runtime", "dataloader", "host_ops", "python")

#: the host slices of each category (index into CATEGORIES) of the sweep, per rank (the device ones are the
#: device tasks by kernel type, ``kernels.device_task_arrays``: KERNEL_TYPES are CATEGORIES' first three)
#: SQL: the host slices the sweep counts (slices ``s`` on thread tracks ``t``), and the expression giving each its
#: category (an index into CATEGORIES; a host ``comm`` slice is communication on a rank whose device does none)
HOST_CATEGORY_KINDS_SQL = ("s.kind IN ('runtime', 'driver', 'sync', 'dataloader', 'cpu_op', 'annotation', 'comm', "
                           "'python')")
HOST_CATEGORY_SQL = """CASE WHEN s.kind = 'comm' AND coalesce(t.rank, 0) NOT IN (
                SELECT DISTINCT coalesce(dt.rank, 0) FROM slices ds JOIN tracks dt USING (track_id)
                WHERE dt.kind = 'stream' AND ds.kind = 'comm') THEN 1
            WHEN s.kind IN ('runtime', 'driver', 'sync') THEN 3
            WHEN s.kind = 'dataloader' THEN 4
            WHEN s.kind IN ('cpu_op', 'annotation', 'comm') THEN 5
            ELSE 6 END"""

_HOST_CATEGORY_SQL = f"""
SELECT coalesce(t.rank, 0) AS rank, {HOST_CATEGORY_SQL} AS category, s.start_ns, s.start_ns + s.dur_ns AS end_ns
FROM slices s JOIN tracks t USING (track_id)
WHERE t.kind = 'thread' AND {HOST_CATEGORY_KINDS_SQL}
"""

_STEPS_SQL = f"WITH {STEP_SPANS_CTE} SELECT * FROM steps ORDER BY rank, step"


class _Rank:
    """One rank's slices as interval sets per category, with cumulative unions of the priority sweep."""

    def __init__(self, category: np.ndarray, start: np.ndarray, end: np.ndarray):
        self.sets = [intervals.merge(start[category == i], end[category == i]) for i in range(len(CATEGORIES))]
        self.prefix = []            # prefix[k] = union of categories 0..k
        union = intervals.merge([], [])
        for s in self.sets:
            union = intervals.union_of(union, s)
            self.prefix.append(union)

    def device_span(self) -> tuple[int, int] | None:
        devices = self.prefix[2]
        return (int(devices[0][0]), int(devices[1][-1])) if devices[0].size else None

    def exclusive(self, starts, ends) -> list[np.ndarray]:
        """Per window, the time of each category under the priority sweep (a list over CATEGORIES)."""
        previous = np.zeros(len(starts), dtype=np.int64)
        out = []
        for union in self.prefix:
            now = intervals.within(union, starts, ends)
            out.append(now - previous)
            previous = now
        return out


def _host_rows(tables: RunTables) -> pa.Table:
    """The host slices the sweep counts, with their category (``_HOST_CATEGORY_SQL``); through the memo."""
    return tables.sql(_HOST_CATEGORY_SQL).to_arrow_table()


def _ranks(tables: RunTables, *, host: bool = True) -> dict[int, _Rank]:
    """Each rank's category sets; with ``host=False`` only the device ones (the host sets stay empty). Every
    breakdown analysis uses them: through the memo (``computed``)."""
    rank, category, start, end = computed(device_task_arrays, tables)
    if host:
        rows = computed(_host_rows, tables)
        rank, category, start, end = (np.concatenate((device, rows.column(c).to_numpy())) for device, c in
                                      zip((rank, category, start, end), ("rank", "category", "start_ns", "end_ns")))
    return {int(r): _Rank(category[rank == r], start[rank == r], end[rank == r]) for r in np.unique(rank)}


def _overlap_ranks(tables: RunTables) -> dict[int, _Rank]:
    """Each rank's sets as ``overlap`` compares them: its device tasks; a rank without device tasks (a CPU
    job) has its host as its device: its host operators (the sweep's ``host_ops`` slices) are its computation
    and its host communication its communication. Through the memo (``computed``)."""
    ranks = dict(computed(_ranks, tables, host=False))
    rows = computed(_host_rows, tables)
    rank, category, start, end = (rows.column(c).to_numpy() for c in ("rank", "category", "start_ns", "end_ns"))
    communication, host_ops = CATEGORIES.index("communication"), CATEGORIES.index("host_ops")
    for r in np.unique(rank).tolist():
        if r in ranks and ranks[r].device_span() is not None:
            continue
        mine = (rank == r) & np.isin(category, (communication, host_ops))
        as_device = np.where(category[mine] == host_ops, CATEGORIES.index("compute"), communication)
        ranks[r] = _Rank(as_device, start[mine], end[mine])
    return ranks


def _steps(tables: RunTables) -> pa.Table:
    """The steps' spans (``STEP_SPANS_CTE``) by rank and step; through the memo (``computed``)."""
    return tables.sql(_STEPS_SQL).to_arrow_table()


def _pct(part, whole) -> list[float | None]:
    part, whole = np.asarray(part, dtype=np.float64), np.asarray(whole, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.where(whole > 0, 100.0 * part / whole, np.nan)
    return [None if np.isnan(v) else float(v) for v in values]


TEMPORAL_BREAKDOWN = pa.schema([
    ("rank", pa.int32()),
    ("start_ns", pa.int64()),
    ("end_ns", pa.int64()),
    ("kernel_time_ns", pa.int64()),
    ("busy_ns", pa.int64()),
    ("idle_ns", pa.int64()),
    ("compute_ns", pa.int64()),
    ("non_compute_ns", pa.int64()),
    ("communication_ns", pa.int64()),
    ("memory_ns", pa.int64()),
    ("idle_pct", pa.float64()),
    ("compute_pct", pa.float64()),
    ("non_compute_pct", pa.float64()),
])


def temporal_breakdown(tables: RunTables) -> pa.Table:
    """Per rank with device tasks, its device timeline (schema ``TEMPORAL_BREAKDOWN``), as HTA's temporal
    breakdown: ``kernel_time_ns`` (HTA's name) is the span from the first device task's start
    (``start_ns``) to the last one's end (``end_ns``); ``busy_ns`` the union of all device tasks in it;
    ``idle_ns`` = kernel_time - busy; ``compute_ns`` the union of COMPUTATION tasks; ``non_compute_ns`` =
    busy - compute, itself split into ``communication_ns`` (communication while no compute runs) and
    ``memory_ns`` (memcpy/memset while neither runs). ``*_pct`` are percent of ``kernel_time_ns``. A rank
    without device tasks has no row (HTA crashes on such traces), nor has a rank whose device compute was not
    recorded (``rank_facts.ranks_without_compute``: its timeline holds only its communication operators, so
    its compute and idle time are unknown, not 0% and the rest)."""
    ranks = computed(_ranks, tables, host=False)
    unrecorded = computed(ranks_without_compute, tables)
    rows: list[dict] = []
    for r, data in sorted(ranks.items()):
        if r in unrecorded:
            continue
        span = data.device_span()
        if span is None:
            continue
        a, b = np.array([span[0]]), np.array([span[1]])
        compute, communication, memory = (int(v[0]) for v in data.exclusive(a, b)[:3])
        kernel_time = span[1] - span[0]
        busy = compute + communication + memory
        rows.append({"rank": r, "start_ns": span[0], "end_ns": span[1], "kernel_time_ns": kernel_time,
                     "busy_ns": busy, "idle_ns": kernel_time - busy, "compute_ns": compute,
                     "non_compute_ns": busy - compute, "communication_ns": communication, "memory_ns": memory})
    for row in rows:
        for name in ("idle", "compute", "non_compute"):
            row[f"{name}_pct"] = 100.0 * row[f"{name}_ns"] / row["kernel_time_ns"] if row["kernel_time_ns"] else None
    return pa.Table.from_pylist(rows, schema=TEMPORAL_BREAKDOWN)


STEP_BREAKDOWN = pa.schema(
    [("rank", pa.int32()), ("step", pa.int32()), ("start_ns", pa.int64()), ("end_ns", pa.int64()),
     ("step_ns", pa.int64())]
    + [(f"{c}_ns", pa.int64()) for c in CATEGORIES] + [("idle_ns", pa.int64()), ("source", pa.string())]
)

#: ``step_breakdown``'s ``source`` of a step computed from the trace, and of one the rank's profiler reported
TRACE_SOURCE, REPORTED_SOURCE = "trace", "step_trace_time.csv"


def step_breakdown(tables: RunTables) -> pa.Table:
    """One row per (rank, step) (schema ``STEP_BREAKDOWN``): ``step_ns`` = end - start of the step and the
    time of each category of the module docstring's priority sweep inside it (``compute_ns``,
    ``communication_ns``, ``memory_ns``, ``runtime_ns``, ``dataloader_ns``, ``host_ops_ns``, ``python_ns``,
    ``idle_ns``); they add up exactly to ``step_ns``; ``source`` "trace". A rank without step ranges whose
    profiler reported its steps (``rank_facts.reported_step_trace``: torch_npu's step_trace_time.csv) gets
    those steps instead (``source`` "step_trace_time.csv"): ``start_ns`` / ``end_ns`` null (not reported),
    ``step_ns`` = Preparing + Stage + Bubble (torch_npu's step, from its start to its last device task),
    ``compute_ns`` = Computing, ``communication_ns`` = Communication(Not Overlapped), ``idle_ns`` the rest
    (Free and Preparing: what the host did then is not known), the other categories 0. No steps: an empty
    table."""
    ranks, steps = computed(_ranks, tables), computed(_steps, tables)
    columns: dict[str, list] = {name: [] for name in STEP_BREAKDOWN.names}
    for r in sorted(set(steps.column("rank").to_pylist())):
        mine = steps.filter(pc.equal(steps["rank"], r))
        starts, ends = mine.column("start_ns").to_numpy(), mine.column("end_ns").to_numpy()
        data = ranks.get(r) or _Rank(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
        parts = data.exclusive(starts, ends)
        columns["rank"] += [r] * len(starts)
        columns["step"] += mine.column("step").to_pylist()
        columns["start_ns"] += starts.tolist()
        columns["end_ns"] += ends.tolist()
        columns["step_ns"] += (ends - starts).tolist()
        for name, values in zip(CATEGORIES, parts):
            columns[f"{name}_ns"] += values.tolist()
        columns["idle_ns"] += (ends - starts - sum(parts)).tolist()
        columns["source"] += [TRACE_SOURCE] * len(starts)
    traced = set(columns["rank"])
    for row in computed(reported_step_trace, tables).to_pylist():
        step_ns = sum(row[n] or 0 for n in ("preparing_ns", "stage_ns", "bubble_ns"))
        if row["rank"] in traced or row["step"] is None or step_ns <= 0:
            continue
        compute, communication = row["computing_ns"] or 0, row["communication_not_overlapped_ns"] or 0
        reported = {"rank": row["rank"], "step": row["step"], "start_ns": None, "end_ns": None, "step_ns": step_ns,
                    **{f"{c}_ns": 0 for c in CATEGORIES}, "compute_ns": compute, "communication_ns": communication,
                    "idle_ns": step_ns - compute - communication, "source": REPORTED_SOURCE}
        for name, value in reported.items():
            columns[name].append(value)
    return pa.table(columns, schema=STEP_BREAKDOWN)


STEP_BREAKDOWN_AVERAGE = pa.schema(
    [("rank", pa.int32()), ("steps", pa.int64()), ("step_ns", pa.int64()), ("median_step_ns", pa.int64())]
    + [(f"{c}_ns", pa.int64()) for c in CATEGORIES] + [("idle_ns", pa.int64())]
    + [(f"{c}_pct", pa.float64()) for c in CATEGORIES] + [("idle_pct", pa.float64())]
)


def step_breakdown_average(breakdown: pa.Table) -> pa.Table:
    """Per rank, the mean over the steps of a ``step_breakdown`` table (schema ``STEP_BREAKDOWN_AVERAGE``):
    ``steps`` counted, ``step_ns`` the mean step rounded to the ns, ``median_step_ns`` the median step (the
    mean of the middle two for an even count, rounded to the ns: the step time a run is headlined with, as
    startup or one slow step does not move it), and each part (``idle_ns`` included) its mean apportioned to
    whole ns by largest remainder, so the averages too add up exactly to ``step_ns`` and none is negative;
    ``*_pct`` are percent of the summed step time (exact, not rounded)."""
    parts = [f"{c}_ns" for c in (*CATEGORIES, "idle")]
    rows = []
    ranks = breakdown.column("rank").to_numpy() if breakdown.num_rows else np.zeros(0, np.int32)
    for r in sorted(set(ranks.tolist())):
        mine = ranks == r
        total = {n: int(breakdown.column(n).to_numpy()[mine].sum()) for n in ["step_ns", *parts]}
        count = int(mine.sum())
        middle = median(breakdown.column("step_ns").to_numpy()[mine])
        row = {"rank": r, "steps": count, "step_ns": round(total["step_ns"] / count),
               "median_step_ns": None if middle is None else round(middle)}
        row.update(zip(parts, _apportion([total[n] for n in parts], count, row["step_ns"])))
        for c in (*CATEGORIES, "idle"):
            row[f"{c}_pct"] = 100.0 * total[f"{c}_ns"] / total["step_ns"] if total["step_ns"] else None
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=STEP_BREAKDOWN_AVERAGE)


def median(values: np.ndarray) -> float | None:
    """The exact median of ``values``: the middle one, the mean of the middle two for an even count; None
    for none. Every median perfsight quotes is this one."""
    return float(np.median(values)) if len(values) else None


def _apportion(totals: list[int], count: int, target: int) -> list[int]:
    """Whole-ns means ``totals[i] / count`` that add up to ``target`` (the rounded mean of their sum):
    floors first, then one ns more each to the parts with the largest remainders."""
    floors = [total // count for total in totals]
    by_remainder = sorted(range(len(totals)), key=lambda i: totals[i] % count, reverse=True)
    for i in by_remainder[:target - sum(floors)]:
        floors[i] += 1
    return floors


OVERLAP = pa.schema([
    ("rank", pa.int32()),
    ("step", pa.int32()),
    ("start_ns", pa.int64()),
    ("end_ns", pa.int64()),
    ("span_ns", pa.int64()),
    ("computation_ns", pa.int64()),
    ("communication_ns", pa.int64()),
    ("overlap_ns", pa.int64()),
    ("pure_communication_ns", pa.int64()),
    ("free_ns", pa.int64()),
    ("comm_comp_overlap_pct", pa.float64()),
])


def overlap(tables: RunTables) -> pa.Table:
    """Computation-communication overlap (MindSpore's "Op Overlap Analyse"), per (rank, step) and, in a row
    with ``step`` null, over the rank's whole device span (first device task start to last end) (schema
    ``OVERLAP``). In the window ``[start_ns, end_ns)`` (``span_ns`` long):

    * ``computation_ns``: the union of COMPUTATION device tasks (merged computation);
    * ``communication_ns``: the union of COMMUNICATION tasks (merged communication);
    * ``overlap_ns``: the time both run; ``pure_communication_ns`` = communication - overlap;
    * ``free_ns``: the time with neither (memcpy/memset time counts as free here);
    * ``comm_comp_overlap_pct`` = 100 * overlap / communication (null without communication): the share of
      communication hidden behind computation, HTA's get_comm_comp_overlap (over the whole span).

    A rank without device tasks (a CPU job) has its host as its device: its host operators are its
    computation, its torch.distributed work its communication. A rank whose device compute was not recorded
    (``rank_facts.ranks_without_compute``: only its communication operators were kept) has no row: its
    overlap is unknown, not zero.

    Sorted by rank, then the steps in order, then the whole-span row."""
    ranks, steps = computed(_overlap_ranks, tables), computed(_steps, tables)
    step_rank = steps.column("rank").to_numpy()
    rows = []
    for r in sorted((set(ranks) | set(step_rank.tolist())) - computed(ranks_without_compute, tables)):
        data = ranks.get(r) or _Rank(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
        mine = step_rank == r
        numbers = steps.column("step").to_numpy()[mine].tolist()
        starts = steps.column("start_ns").to_numpy()[mine]
        ends = steps.column("end_ns").to_numpy()[mine]
        span = data.device_span()
        if span is not None:
            numbers, starts, ends = numbers + [None], np.append(starts, span[0]), np.append(ends, span[1])
        computation = intervals.within(data.sets[0], starts, ends)
        communication = intervals.within(data.sets[1], starts, ends)
        both = intervals.within(intervals.union_of(data.sets[0], data.sets[1]), starts, ends)
        overlapped = computation + communication - both
        pct = _pct(overlapped, communication)
        for i, step in enumerate(numbers):
            rows.append({"rank": r, "step": step, "start_ns": int(starts[i]), "end_ns": int(ends[i]),
                         "span_ns": int(ends[i] - starts[i]), "computation_ns": int(computation[i]),
                         "communication_ns": int(communication[i]), "overlap_ns": int(overlapped[i]),
                         "pure_communication_ns": int(communication[i] - overlapped[i]),
                         "free_ns": int(ends[i] - starts[i] - both[i]), "comm_comp_overlap_pct": pct[i]})
    return pa.Table.from_pylist(rows, schema=OVERLAP)


OVERLAP_ROWS = ("merged computation", "merged communication", "pure communication", "free time")

OVERLAP_INTERVALS = pa.schema([
    ("rank", pa.int32()),
    ("row", pa.string()),
    ("start_ns", pa.int64()),
    ("end_ns", pa.int64()),
])


def overlap_intervals(tables: RunTables) -> pa.Table:
    """The interval sets behind ``overlap``'s whole-span row, per rank with device tasks (schema
    ``OVERLAP_INTERVALS``; MindSpore's overlap timeline rows), ``row`` one of ``OVERLAP_ROWS``:

    * ``merged computation``: the union of COMPUTATION device tasks;
    * ``merged communication``: the union of COMMUNICATION tasks;
    * ``pure communication``: communication while no computation runs;
    * ``free time``: the gaps inside the rank's device span (first device task start to last end) with
      neither computation nor communication (memcpy/memset time counts as free, as in ``overlap``).

    Each row's intervals are disjoint, sorted and non-empty; their lengths add up to ``overlap``'s
    ``computation_ns``, ``communication_ns``, ``pure_communication_ns`` and ``free_ns`` (a rank without
    device tasks: its host's, as there). Sorted by rank, row (in ``OVERLAP_ROWS`` order), start."""
    ranks = computed(_overlap_ranks, tables)
    parts = []                          # (rank, row index, starts, ends)
    for r, data in sorted(ranks.items()):
        span = data.device_span()
        if span is None:
            continue
        computation, communication = data.sets[0], data.sets[1]
        busy = intervals.union_of(computation, communication)
        sets = (computation, communication, intervals.difference(communication, computation),
                intervals.difference((np.array([span[0]]), np.array([span[1]])), busy))
        parts += [(r, i, starts, ends) for i, (starts, ends) in enumerate(sets)]
    if not parts:
        return OVERLAP_INTERVALS.empty_table()
    rows = np.concatenate([np.full(s.size, i, dtype=np.int8) for _, i, s, _ in parts])
    return pa.table({
        "rank": np.concatenate([np.full(s.size, r, dtype=np.int32) for r, _, s, _ in parts]),
        "row": pa.DictionaryArray.from_arrays(rows, pa.array(OVERLAP_ROWS)).cast(pa.string()),
        "start_ns": np.concatenate([s for _, _, s, _ in parts]),
        "end_ns": np.concatenate([e for _, _, _, e in parts]),
    }, schema=OVERLAP_INTERVALS)
