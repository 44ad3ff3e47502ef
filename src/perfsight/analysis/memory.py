"""Memory usage (MindSpore Insight's 内存使用情况 page): the allocated/reserved curve, the peak and what
was running at it, allocations per operator type, and the allocations alive at the peak.

Insight shows "模型的内存分配概览, 包括总可用内存、峰值内存", "占用内存大小随执行顺序的变化" and, at a point of
the curve, "当前执行位置的已占用内存分配给了哪些算子的输出张量 ... 以及张量内存活跃的生命周期". perfsight
computes the same from the ``memory`` table (one row per allocation, ``bytes > 0``, or free, ``bytes < 0``,
with the allocator totals after the event), per rank and device:

* Events are ordered by ``ts_ns`` and then by their row order in the table (the source's order), which
  keeps several events at the same nanosecond in the order the allocator made them.
* The rank of an event is that of its track (``memory.track_id``; 0 when unknown).
* The operator of an event is ``memory.op_slice_id`` (the innermost framework op running on that thread);
  its ``op_type`` and ``name`` come from slices. The step of an event is the step of the host ``step``
  slice (ProfilerStep#N) of the same rank whose interval ``[start, end)`` holds ``ts_ns``.
* A tensor's lifetime: an allocation is matched to the next event at the same (rank, device, addr) when
  that event is a free; an allocation followed by another allocation at the same address (a free the
  trace missed) or by nothing is never freed in the trace (``free_ts_ns`` null).
* What is alive at a point of the curve (Insight's breakdown at a clicked point): at event ``seq`` of a
  rank and device, the allocations made at or before it and freed after it or never; at a time ``t``,
  the point is the last event at or before ``t`` (so every event at ``t`` itself has happened).

All sizes are bytes (int64), all times int64 ns.
"""
from __future__ import annotations

import pyarrow as pa

from perfsight.analysis.step_spans import STEP_SPANS_CTE
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables, new_connection

MEMORY_CURVE = pa.schema([
    ("rank", pa.int32()),
    ("device", pa.string()),
    ("seq", pa.int64()),
    ("ts_ns", pa.int64()),
    ("bytes", pa.int64()),
    ("allocated_bytes", pa.int64()),
    ("reserved_bytes", pa.int64()),
    ("op_slice_id", pa.int64()),
    ("op_type", pa.string()),
    ("step", pa.int32()),
])

MEMORY_PEAK = pa.schema([
    ("rank", pa.int32()),
    ("device", pa.string()),
    ("peak_allocated_bytes", pa.int64()),
    ("peak_ts_ns", pa.int64()),
    ("step", pa.int32()),
    ("op_slice_id", pa.int64()),
    ("op_type", pa.string()),
    ("op_name", pa.string()),
    ("peak_reserved_bytes", pa.int64()),
    ("alive_tracked_bytes", pa.int64()),
    ("events", pa.int64()),
])

ALLOCATIONS_BY_OP = pa.schema([
    ("rank", pa.int32()),
    ("device", pa.string()),
    ("op_type", pa.string()),
    ("alloc_count", pa.int64()),
    ("alloc_bytes", pa.int64()),
    ("free_count", pa.int64()),
    ("freed_bytes", pa.int64()),
    ("net_bytes", pa.int64()),
])

TENSOR_LIFETIMES = pa.schema([
    ("rank", pa.int32()),
    ("device", pa.string()),
    ("addr", pa.int64()),
    ("bytes", pa.int64()),
    ("alloc_seq", pa.int64()),
    ("alloc_ts_ns", pa.int64()),
    ("free_ts_ns", pa.int64()),
    ("lifetime_ns", pa.int64()),
    ("op_slice_id", pa.int64()),
    ("op_type", pa.string()),
    ("step", pa.int32()),
])

ALIVE_AT_PEAK = pa.schema([
    ("rank", pa.int32()),
    ("device", pa.string()),
    ("addr", pa.int64()),
    ("bytes", pa.int64()),
    ("share", pa.float64()),
    ("alloc_ts_ns", pa.int64()),
    ("age_ns", pa.int64()),
    ("free_ts_ns", pa.int64()),
    ("op_slice_id", pa.int64()),
    ("op_type", pa.string()),
    ("step", pa.int32()),
])

# Every memory event with its order, rank, operator and step.
_EVENTS = f"""
WITH raw AS (
    SELECT m.*, row_number() OVER () AS source_row FROM memory m
), {STEP_SPANS_CTE}, events AS (
    SELECT coalesce(t.rank, 0)::INTEGER AS rank, coalesce(r.device, t.device) AS device, r.ts_ns, r.addr, r.bytes,
           r.total_allocated, r.total_reserved, r.op_slice_id, r.source_row,
           coalesce(o.op_type, o.name) AS op_type, o.name AS op_name
    FROM raw r LEFT JOIN tracks t USING (track_id) LEFT JOIN slices o ON o.id = r.op_slice_id
), ordered AS (
    SELECT e.*, row_number() OVER (PARTITION BY e.rank, e.device ORDER BY e.ts_ns, e.source_row) AS seq,
           (SELECT max(st.step) FROM steps st
            WHERE st.rank = e.rank AND e.ts_ns >= st.start_ns AND e.ts_ns < st.end_ns) AS step
    FROM events e
)
"""

_LIFETIMES = _EVENTS + """
, lived AS (
    SELECT *, lead(bytes) OVER same_addr AS next_bytes, lead(ts_ns) OVER same_addr AS next_ts,
           lead(seq) OVER same_addr AS next_seq
    FROM ordered WHERE addr IS NOT NULL
    WINDOW same_addr AS (PARTITION BY rank, device, addr ORDER BY seq)
), lifetimes AS (
    SELECT rank, device, addr, bytes, seq AS alloc_seq, ts_ns AS alloc_ts_ns,
           CASE WHEN next_bytes < 0 THEN next_ts END AS free_ts_ns,
           CASE WHEN next_bytes < 0 THEN next_ts - ts_ns END AS lifetime_ns,
           CASE WHEN next_bytes < 0 THEN next_seq END AS free_seq,
           op_slice_id, op_type, step
    FROM lived
)
"""

_PEAKS = """
, peaks AS (
    SELECT o.rank, o.device, m.peak_allocated, m.peak_reserved, min(o.seq) AS peak_seq, m.events
    FROM ordered o JOIN (
        SELECT rank, device, max(total_allocated) AS peak_allocated, max(total_reserved) AS peak_reserved,
               count(*) AS events
        FROM ordered GROUP BY ALL
    ) m ON m.rank = o.rank AND m.device IS NOT DISTINCT FROM o.device
    WHERE o.total_allocated = m.peak_allocated GROUP BY ALL
)
"""

# The allocations alive at each row of a ``points`` CTE (rank, device, seq: the event looked at, ts_ns: the
# time looked at, allocated: the allocator total there), largest first.
_ALIVE_AT_POINTS = """
    SELECT l.rank, l.device, l.addr, l.bytes, l.bytes / nullif(p.allocated, 0) AS share, l.alloc_ts_ns,
           p.ts_ns - l.alloc_ts_ns AS age_ns, l.free_ts_ns, l.op_slice_id, l.op_type, l.step
    FROM lifetimes l JOIN points p ON p.rank = l.rank AND p.device IS NOT DISTINCT FROM l.device
    WHERE l.bytes > 0 AND l.alloc_seq <= p.seq AND (l.free_seq IS NULL OR l.free_seq > p.seq)
    ORDER BY l.rank, l.device, l.bytes DESC, l.alloc_seq
"""


def memory_curve(tables: RunTables) -> pa.Table:
    """The allocator totals after every memory event, per rank and device, in event order (schema
    ``MEMORY_CURVE``): ``seq`` (1-based event order within the rank and device), ``ts_ns``, ``bytes`` (the
    event: > 0 allocation, < 0 free), ``allocated_bytes`` and ``reserved_bytes`` (totals after it), the
    operator running (``op_slice_id``, ``op_type``) and the ``step``."""
    query = _EVENTS + """
        SELECT rank, device, seq, ts_ns, bytes, total_allocated AS allocated_bytes,
               total_reserved AS reserved_bytes, op_slice_id, op_type, step
        FROM ordered ORDER BY rank, device, seq
    """
    return tables.sql(query).to_arrow_table().cast(MEMORY_CURVE)


def memory_peak(tables: RunTables) -> pa.Table:
    """One row per rank and device (schema ``MEMORY_PEAK``): the peak of ``total_allocated``
    (``peak_allocated_bytes``) at its first event reaching it (``peak_ts_ns``), the ``step`` and the
    operator running then (``op_slice_id``, ``op_type``, ``op_name``; null when no op was running),
    ``peak_reserved_bytes`` (the maximum of ``total_reserved``, wherever it happens), ``alive_tracked_bytes``
    (the bytes of the allocations the trace saw that are alive at the peak: less than the peak by what was
    allocated before the trace began) and the number of ``events``."""
    if not tables.memory.num_rows:       # none (the query over nothing costs ~10 ms, once per rank of a job)
        return MEMORY_PEAK.empty_table()
    query = _LIFETIMES + _PEAKS + """
        SELECT p.rank, p.device, p.peak_allocated AS peak_allocated_bytes, o.ts_ns AS peak_ts_ns, o.step,
               o.op_slice_id, o.op_type, o.op_name, p.peak_reserved AS peak_reserved_bytes,
               (SELECT coalesce(sum(l.bytes), 0) FROM lifetimes l
                WHERE l.rank = p.rank AND l.device IS NOT DISTINCT FROM p.device
                  AND l.bytes > 0 AND l.alloc_seq <= p.peak_seq
                  AND (l.free_seq IS NULL OR l.free_seq > p.peak_seq)) AS alive_tracked_bytes,
               p.events
        FROM peaks p
        JOIN ordered o ON o.rank = p.rank AND o.device IS NOT DISTINCT FROM p.device AND o.seq = p.peak_seq
        ORDER BY p.rank, p.device
    """
    return tables.sql(query).to_arrow_table().cast(MEMORY_PEAK)


def allocations_by_op(tables: RunTables) -> pa.Table:
    """Per rank, device and operator type of the event (null ``op_type``: no operator was running; schema
    ``ALLOCATIONS_BY_OP``): ``alloc_count`` and ``alloc_bytes`` of allocations, ``free_count`` and
    ``freed_bytes`` (positive) of frees, ``net_bytes`` = allocated - freed. Sorted by allocated bytes,
    largest first."""
    query = _EVENTS + """
        SELECT rank, device, op_type,
               count(*) FILTER (WHERE bytes > 0) AS alloc_count,
               coalesce(sum(bytes) FILTER (WHERE bytes > 0), 0) AS alloc_bytes,
               count(*) FILTER (WHERE bytes < 0) AS free_count,
               coalesce(-sum(bytes) FILTER (WHERE bytes < 0), 0) AS freed_bytes,
               coalesce(sum(bytes), 0) AS net_bytes
        FROM ordered GROUP BY ALL
        ORDER BY rank, device, alloc_bytes DESC, op_type NULLS LAST
    """
    return tables.sql(query).to_arrow_table().cast(ALLOCATIONS_BY_OP)


def tensor_lifetimes(tables: RunTables) -> pa.Table:
    """One row per allocation with an address (schema ``TENSOR_LIFETIMES``), matched to its free as the
    module docstring says: ``free_ts_ns`` and ``lifetime_ns`` null when the trace never frees it; the
    allocating operator and step. In event order."""
    query = _LIFETIMES + """
        SELECT rank, device, addr, bytes, alloc_seq, alloc_ts_ns, free_ts_ns, lifetime_ns, op_slice_id, op_type, step
        FROM lifetimes WHERE bytes > 0 ORDER BY rank, device, alloc_seq
    """
    return tables.sql(query).to_arrow_table().cast(TENSOR_LIFETIMES)


def alive_at_peak(tables: RunTables) -> pa.Table:
    """The allocations alive at each rank and device's peak (``memory_peak``): allocated at or before the
    peak event and freed after it or never (schema ``ALIVE_AT_PEAK``). ``share`` is ``bytes`` over the
    peak's ``total_allocated``; ``age_ns`` = peak time - allocation time; the allocating operator and step.
    Sorted by bytes, largest first, then by allocation order."""
    query = _LIFETIMES + _PEAKS + """
        , points AS (
            SELECT p.rank, p.device, p.peak_seq AS seq, o.ts_ns, p.peak_allocated AS allocated
            FROM peaks p
            JOIN ordered o ON o.rank = p.rank AND o.device IS NOT DISTINCT FROM p.device AND o.seq = p.peak_seq
        )
    """ + _ALIVE_AT_POINTS
    return tables.sql(query).to_arrow_table().cast(ALIVE_AT_PEAK)


ALIVE_BY_OP_AT = pa.schema([
    ("rank", pa.int32()),
    ("device", pa.string()),
    ("op_type", pa.string()),
    ("tensors", pa.int64()),
    ("bytes", pa.int64()),
    ("share", pa.float64()),
])


def alive_at(tables: RunTables, ts_ns: int, *, rank: int | None = None, device: str | None = None) -> pa.Table:
    """The allocations alive at time ``ts_ns`` (absolute ns) on each rank and device (or only ``rank`` /
    ``device``): allocated at or before the last event at or before ``ts_ns`` and freed after it or never
    (schema ``ALIVE_AT_PEAK``). ``share`` is ``bytes`` over that event's ``total_allocated``, ``age_ns`` =
    ``ts_ns`` - allocation time. A rank and device with no event by ``ts_ns`` has no rows. Sorted by
    bytes, largest first, then by allocation order."""
    query = _LIFETIMES + """
        , points AS (
            SELECT rank, device, max(seq) AS seq, $ts::BIGINT AS ts_ns,
                   arg_max(total_allocated, seq) AS allocated
            FROM ordered
            WHERE ts_ns <= $ts AND ($rank IS NULL OR rank = $rank) AND ($device IS NULL OR device = $device)
            GROUP BY rank, device
        )
    """ + _ALIVE_AT_POINTS
    params = {"ts": int(ts_ns), "rank": rank, "device": device}
    return tables.sql(query, params=params).to_arrow_table().cast(ALIVE_AT_PEAK)


def alive_by_op_at(tables: RunTables, ts_ns: int, *, rank: int | None = None, device: str | None = None) -> pa.Table:
    """``alive_at`` grouped by the allocating operator type (schema ``ALIVE_BY_OP_AT``; null ``op_type``:
    allocated while no operator ran): ``tensors`` alive, their ``bytes`` and ``share`` of the allocator
    total at that point. Sorted by bytes, largest first."""

    con = new_connection()
    con.register("alive", computed(alive_at, tables, ts_ns, rank=rank, device=device))
    query = """
        SELECT rank, device, op_type, count(*) AS tensors, sum(bytes)::BIGINT AS bytes, sum(share) AS share
        FROM alive GROUP BY ALL ORDER BY rank, device, bytes DESC, op_type NULLS LAST
    """
    return con.sql(query).to_arrow_table().cast(ALIVE_BY_OP_AT)


def memory_curve_sampled(tables: RunTables, *, max_points: int = 4000) -> pa.Table:
    """``memory_curve`` thinned for drawing (schema ``MEMORY_CURVE``): a rank and device with at most
    ``max_points`` events keeps them all; one with more is cut, by ``seq``, into ``max_points // 2``
    buckets of consecutive events, and each bucket keeps its event of largest ``allocated_bytes`` and its
    event of smallest (the earliest of equals), so every rise and fall of the curve, the peak (its first
    event) and the lowest point stay; the first and last events always stay. In ``seq`` order."""

    if max_points < 2:
        raise ValueError(f"max_points must be at least 2, got {max_points}")
    con = new_connection()
    con.register("curve", computed(memory_curve, tables))
    query = """
        WITH sized AS (
            SELECT *, count(*) OVER (PARTITION BY rank, device) AS n FROM curve
        ), bucketed AS (
            SELECT *, (seq - 1) * ($points // 2) // n AS bucket FROM sized
        ), ranked AS (
            SELECT *, row_number() OVER (PARTITION BY rank, device, bucket ORDER BY allocated_bytes DESC, seq) AS hi,
                      row_number() OVER (PARTITION BY rank, device, bucket ORDER BY allocated_bytes, seq) AS lo
            FROM bucketed
        )
        SELECT rank, device, seq, ts_ns, bytes, allocated_bytes, reserved_bytes, op_slice_id, op_type, step
        FROM ranked WHERE n <= $points OR hi = 1 OR lo = 1 OR seq = 1 OR seq = n
        ORDER BY rank, device, seq
    """
    return con.sql(query, params={"points": int(max_points)}).to_arrow_table().cast(MEMORY_CURVE)
