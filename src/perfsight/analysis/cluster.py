"""Several ranks of one job (MindSpore Insight's cluster pages): each rank's step breakdown side by side,
the slowest rank and the straggler, and who communicates with whom.

**Ranks compared** (``mean_step_by_rank``, ``rank_breakdown``, ``slowest_rank``): each rank's mean step
(``mean_step_by_rank``, which the advisor's uneven-ranks rule quotes too) and mean step breakdown
(``breakdown.step_breakdown`` averaged by ``breakdown.step_breakdown_average``) over the step numbers
every rank has (``common_steps`` true); when the ranks share no step number, over each rank's own steps.

* The *slowest* rank has the largest mean ``step_ns``; ``gap_ns`` / ``gap_pct`` compare a rank's mean
  step with the fastest rank's.
* In synchronous training every rank waits for the others in its collectives, so the step times come
  out alike and the rank that holds the others up is the one that spends the least time in exposed
  communication: the *straggler* has the largest ``non_communication_ns`` = ``step_ns`` -
  ``communication_ns`` (communication while no compute runs, breakdown's category); the others show
  that difference as communication time, waiting for it.
* Ties go to the lowest rank.

**Collectives** (``collectives``): one row per communication operation a rank ran, from the first of
these sources the rank has (so nothing is counted twice):

1. ``device``: NCCL/RCCL kernels (``comm`` slices on a device stream) whose args carry PyTorch's
   collective metadata (Kineto copies it onto the kernel since PyTorch 2.1): ``Collective name``,
   ``dtype``, ``In msg nelems``, ``Out msg nelems``, ``Group size``, ``Process Group Name``,
   ``Process Group Ranks``, and for send/recv ``Src Rank`` / ``Dst Rank``. ``dur_ns`` is the kernel's
   device time.
2. ``host record``: host ``record_param_comms`` slices with the same metadata (``dur_ns`` null: the host
   slice only enqueues the work). PyTorch's records of ``wait`` (waiting on a work handle, no data) are
   left out.
3. ``host annotation``: the backend's host ranges (``nccl:all_reduce``, ``gloo:...``: core/communication.py's
   ``BACKENDS``) of traces whose PyTorch records no metadata: the collective is the name after the colon,
   ``in_nelems`` the elements of the recorded input shapes, the dtype the first input's; the group and the
   output are unknown.

Sizes: ``in_bytes`` / ``out_bytes`` = elements x the dtype's size (``DTYPE_BYTES``; null for a dtype not
listed). The group's ranks come from ``Process Group Ranks`` ("[0, 1, 2]"); PyTorch cuts that text past
30 ranks ("[0, 1, ..., 127]"), in which case they are rebuilt from ``Global rank start`` and ``Global
rank stride`` (start + i * stride for i < ``Group size``) when the trace has them, else unknown.

**Communication matrix** (``communication_matrix``): per (rank, peer), the collectives the rank ran whose
group holds the peer (or whose send/recv peer it is), their count, message bytes and device time. What it
can and cannot show:

* It shows which ranks work together and how much data their collectives carry: a cell is the volume of
  the operations the two ranks share, as each rank's own trace records it (row = the recording rank), so
  the matrix needs only the traces of the ranks you have; peers without a trace appear as columns.
* It does not show the bytes that cross each link: NCCL moves a collective's data along rings and trees
  of its own choosing, which no trace records, so an all-reduce of N bytes in a group of 8 puts N bytes
  in 7 cells of its row although each link carries about 2N/8.
* When the trace records no peers (sources 3, or metadata without ``Process Group Ranks``), the rank's
  operations go to one row with ``peer`` null, "peers not recorded": their volume is known, not with whom.
  PyTorch before 2.1 (most public traces) records no peers; neither do traces of other backends.
"""
from __future__ import annotations

import json
import math
import re

import pyarrow as pa
import pyarrow.compute as pc

from perfsight.analysis.breakdown import STEP_BREAKDOWN_AVERAGE, step_breakdown, step_breakdown_average
from perfsight.analysis.step_spans import STEP_SPANS_CTE
from perfsight.core.communication import BACKEND_RANGE
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables, fits, new_connection

#: bytes per element: PyTorch's scalar type names (record_param_comms' ``dtype``) and the C++ type names
#: of Kineto's ``Input type`` (lower-cased when looked up)
DTYPE_BYTES = {
    "bool": 1, "byte": 1, "char": 1, "qint8": 1, "quint8": 1, "quint4x2": 1, "float8_e5m2": 1,
    "float8_e4m3fn": 1, "float8_e5m2fnuz": 1, "float8_e4m3fnuz": 1, "signed char": 1, "unsigned char": 1,
    "int8": 1, "uint8": 1,
    "short": 2, "half": 2, "bfloat16": 2, "uint16": 2, "short int": 2, "c10::half": 2, "c10::bfloat16": 2,
    "int16": 2, "float16": 2, "unsigned short": 2,
    "int": 4, "float": 4, "qint32": 4, "complexhalf": 4, "uint32": 4, "int32": 4, "float32": 4,
    "unsigned int": 4,
    "long": 8, "double": 8, "complexfloat": 8, "uint64": 8, "long int": 8, "long long": 8, "int64": 8,
    "float64": 8, "c10::complex<float>": 8, "unsigned long": 8,
    "complexdouble": 16, "c10::complex<double>": 16,
}

RANK_BREAKDOWN = pa.schema(list(STEP_BREAKDOWN_AVERAGE) + [
    ("common_steps", pa.bool_()),
    ("non_communication_ns", pa.int64()),
    ("gap_ns", pa.int64()),
    ("gap_pct", pa.float64()),
    ("slowest", pa.bool_()),
    ("straggler", pa.bool_()),
])

SLOWEST_RANK = pa.schema([
    ("ranks", pa.int64()),
    ("steps", pa.int64()),
    ("common_steps", pa.bool_()),
    ("slowest_rank", pa.int32()),
    ("slowest_step_ns", pa.int64()),
    ("fastest_rank", pa.int32()),
    ("fastest_step_ns", pa.int64()),
    ("gap_ns", pa.int64()),
    ("gap_pct", pa.float64()),
    ("straggler_rank", pa.int32()),
    ("straggler_non_communication_ns", pa.int64()),
    ("reason", pa.string()),
])

COLLECTIVES = pa.schema([
    ("rank", pa.int32()),
    ("slice_id", pa.int64()),
    ("source", pa.string()),
    ("collective", pa.string()),
    ("start_ns", pa.int64()),
    ("dur_ns", pa.int64()),
    ("dtype", pa.string()),
    ("in_nelems", pa.int64()),
    ("out_nelems", pa.int64()),
    ("in_bytes", pa.int64()),
    ("out_bytes", pa.int64()),
    ("group_size", pa.int64()),
    ("process_group", pa.string()),
    ("group_ranks", pa.list_(pa.int32())),
    ("peer", pa.int32()),
])

COMMUNICATION_MATRIX = pa.schema([
    ("rank", pa.int32()),
    ("peer", pa.int32()),
    ("collectives", pa.int64()),
    ("bytes", pa.int64()),
    ("dur_ns", pa.int64()),
])

COLLECTIVE_SUMMARY = pa.schema([
    ("rank", pa.int32()),
    ("collective", pa.string()),
    ("source", pa.string()),
    ("count", pa.int64()),
    ("in_bytes", pa.int64()),
    ("out_bytes", pa.int64()),
    ("dur_ns", pa.int64()),
    ("with_peers", pa.int64()),
])


def _compared(steps: pa.Table) -> tuple[pa.Table, bool]:
    """The rows (one per rank and step) of the step numbers every rank has, or all rows when they share none;
    and whether they share some."""
    ranks = pc.unique(steps["rank"]).to_pylist()
    shared = None
    for r in ranks:
        numbers = set(steps.filter(pc.equal(steps["rank"], r))["step"].to_pylist())
        shared = numbers if shared is None else shared & numbers
    if not shared:
        return steps, False
    return steps.filter(pc.is_in(steps["step"], pa.array(sorted(shared), pa.int32()))), True


MEAN_STEP = pa.schema([("rank", pa.int32()), ("steps", pa.int64()), ("step_ns", pa.int64()),
                       ("common_steps", pa.bool_())])

_STEP_SPANS_SQL = f"WITH {STEP_SPANS_CTE} SELECT rank, step, end_ns - start_ns AS step_ns FROM steps ORDER BY ALL"


def mean_step_by_rank(tables: RunTables) -> pa.Table:
    """Per rank, its mean step over the compared steps (schema ``MEAN_STEP``): the step numbers every rank
    has (``common_steps`` true), or each rank's own steps when the ranks share none; ``steps`` compared,
    ``step_ns`` their mean duration rounded to the ns (steps as ``step_spans`` defines them). Sorted by rank;
    empty without steps.

    Over shared steps, because ranks are compared: in synchronous training step N of every rank ends at the
    same collectives, so the ranks' step N are one stretch of the job seen from each rank; a step only some
    ranks recorded (a profiler window started a step later on one rank, the first step's warm-up) would
    measure the window, not the rank. The Cluster page and the advisor's uneven-ranks rule quote this."""
    steps, common = _compared(tables.connect().sql(_STEP_SPANS_SQL).to_arrow_table())
    ranks = steps.column("rank").to_numpy()
    durations = steps.column("step_ns").to_numpy()
    rows = []
    for r in sorted(set(ranks.tolist())):
        mine = durations[ranks == r]
        rows.append({"rank": r, "steps": int(mine.size), "step_ns": round(int(mine.sum()) / mine.size),
                     "common_steps": common})
    return pa.Table.from_pylist(rows, schema=MEAN_STEP)


def rank_breakdown(tables: RunTables) -> pa.Table:
    """Per rank, its mean step breakdown over the compared steps (module docstring; schema
    ``RANK_BREAKDOWN``: ``breakdown.STEP_BREAKDOWN_AVERAGE``'s columns, then ``common_steps``,
    ``non_communication_ns`` = step_ns - communication_ns, ``gap_ns`` and ``gap_pct`` (mean step over the
    fastest rank's, in ns and percent of the fastest), and the ``slowest`` and ``straggler`` flags). Sorted
    by rank; empty without steps. ``step_ns`` is ``mean_step_by_rank``'s."""
    compared, common = _compared(computed(step_breakdown, tables))
    rows = step_breakdown_average(compared).to_pylist()
    if not rows:
        return RANK_BREAKDOWN.empty_table()
    means = {m["rank"]: m for m in computed(mean_step_by_rank, tables).to_pylist()}
    for r in rows:      # the mean step is mean_step_by_rank's (the average's own, over the same steps, is equal)
        r.update(steps=means[r["rank"]]["steps"], step_ns=means[r["rank"]]["step_ns"])
    fastest = min(r["step_ns"] for r in rows)
    slowest = max(rows, key=lambda r: r["step_ns"])["rank"]
    straggler = max(rows, key=lambda r: r["step_ns"] - r["communication_ns"])["rank"]
    for r in rows:
        r.update(common_steps=common, non_communication_ns=r["step_ns"] - r["communication_ns"],
                 gap_ns=r["step_ns"] - fastest, gap_pct=100.0 * (r["step_ns"] - fastest) / fastest if fastest else None,
                 slowest=r["rank"] == slowest, straggler=r["rank"] == straggler)
    return pa.Table.from_pylist(rows, schema=RANK_BREAKDOWN)


def slowest_rank(tables: RunTables) -> pa.Table:
    """One row (schema ``SLOWEST_RANK``; empty without steps) from ``rank_breakdown``: the number of
    ``ranks`` and of ``steps`` compared, the slowest and the fastest rank with their mean step, the gap
    between them, the straggler with its ``non_communication_ns``, and a ``reason`` text."""
    rows = computed(rank_breakdown, tables).to_pylist()
    if not rows:
        return SLOWEST_RANK.empty_table()
    slow = next(r for r in rows if r["slowest"])
    fast = min(rows, key=lambda r: r["step_ns"])
    lag = next(r for r in rows if r["straggler"])
    others = [r["communication_ns"] for r in rows if r is not lag]
    reason = (f"rank {slow['rank']} has the longest mean step ({slow['step_ns'] / 1e6:.3f} ms, "
              f"{slow['gap_pct']:.1f}% over rank {fast['rank']}'s); rank {lag['rank']} spends the most time "
              f"outside exposed communication ({lag['non_communication_ns'] / 1e6:.3f} ms per step)")
    if others:
        reason += (f" and {lag['communication_ns'] / 1e6:.3f} ms communicating against "
                   f"{max(others) / 1e6:.3f} ms at most on the others, which wait for it in their collectives")
    return pa.Table.from_pylist([{
        "ranks": len(rows), "steps": slow["steps"], "common_steps": slow["common_steps"],
        "slowest_rank": slow["rank"], "slowest_step_ns": slow["step_ns"], "fastest_rank": fast["rank"],
        "fastest_step_ns": fast["step_ns"], "gap_ns": slow["gap_ns"], "gap_pct": slow["gap_pct"],
        "straggler_rank": lag["rank"], "straggler_non_communication_ns": lag["non_communication_ns"],
        "reason": reason}], schema=SLOWEST_RANK)


# Candidate communication records with their metadata: the kernels and record_param_comms slices that
# carry "Collective name", and the backend's host ranges.
_CANDIDATES_SQL = """
WITH comm AS (
    SELECT s.id, coalesce(t.rank, 0)::INTEGER AS rank, t.kind AS track_kind, s.name, s.start_ns, s.dur_ns,
           s.input_shapes, s.input_dtypes, CASE WHEN json_valid(s.args) THEN s.args END AS args
    FROM slices s JOIN tracks t USING (track_id)
    WHERE s.kind = 'comm'
), described AS (
    SELECT *, json_extract_string(args, '$."Collective name"') AS collective FROM comm
)
SELECT id, rank, start_ns, name, input_shapes, input_dtypes,
       CASE WHEN collective IS NOT NULL AND track_kind = 'stream' THEN 1
            WHEN collective IS NOT NULL AND track_kind = 'thread' AND name = 'record_param_comms' THEN 2
            ELSE 3 END AS source,
       CASE WHEN collective IS NOT NULL AND track_kind = 'stream' THEN dur_ns END AS dur_ns,
       collective,
       json_extract_string(args, '$.dtype') AS dtype,
       TRY_CAST(json_extract_string(args, '$."In msg nelems"') AS BIGINT) AS in_nelems,
       TRY_CAST(json_extract_string(args, '$."Out msg nelems"') AS BIGINT) AS out_nelems,
       TRY_CAST(json_extract_string(args, '$."Group size"') AS BIGINT) AS group_size,
       json_extract_string(args, '$."Process Group Name"') AS process_group,
       json_extract_string(args, '$."Process Group Ranks"') AS group_ranks_text,
       TRY_CAST(json_extract_string(args, '$."Global rank start"') AS BIGINT) AS rank_start,
       TRY_CAST(json_extract_string(args, '$."Global rank stride"') AS BIGINT) AS rank_stride,
       TRY_CAST(json_extract_string(args, '$."Src Rank"') AS INTEGER) AS src_rank,
       TRY_CAST(json_extract_string(args, '$."Dst Rank"') AS INTEGER) AS dst_rank
FROM described
WHERE (collective IS NOT NULL AND (track_kind = 'stream' OR name = 'record_param_comms') AND collective <> 'wait')
   OR (collective IS NULL AND track_kind = 'thread' AND regexp_matches(name, $backend))
ORDER BY rank, start_ns, id
"""

SOURCES = ("device", "host record", "host annotation")
_RANK_LIST = re.compile(r"^\s*\[(.*)\]\s*$", re.S)


#: the largest group whose rank list is rebuilt from start and stride (more is not a real job: unknown)
MAX_GROUP_SIZE = 1 << 20


def _group_ranks(text: str | None, size: int | None, start: int | None, stride: int | None) -> list[int] | None:
    """The group's global ranks from ``Process Group Ranks`` text, rebuilt from start/stride if it was cut."""
    found = _RANK_LIST.match(text or "")
    items = [item.strip() for item in found.group(1).split(",") if item.strip()] if found else []
    if items and all(item.lstrip("-").isdigit() for item in items):
        ranks = [int(item) for item in items]
    elif items and size and start is not None and stride and stride > 0 and size <= MAX_GROUP_SIZE:
        ranks = [start + i * stride for i in range(size)]
    else:
        return None
    return ranks if all(rank >= 0 and fits(rank, 32) for rank in ranks) else None


def _elements(shapes_text: str | None) -> tuple[int | None, list]:
    """Total elements of the tensors in an ``input_shapes`` JSON text, and the shapes (None if unreadable)."""
    try:
        shapes = json.loads(shapes_text) if shapes_text else None
    except ValueError:
        return None, []
    if not isinstance(shapes, list):
        return None, []
    total = sum(math.prod(shape) for shape in shapes
                if isinstance(shape, list) and shape and all(isinstance(d, int) for d in shape))
    return total if fits(total, 64) else None, shapes


def _first_dtype(dtypes_text: str | None, shapes: list) -> str | None:
    try:
        dtypes = json.loads(dtypes_text) if dtypes_text else []
    except ValueError:
        return None
    for shape, dtype in zip(shapes, dtypes if isinstance(dtypes, list) else []):
        if isinstance(shape, list) and shape and isinstance(dtype, str):
            return dtype
    return None


def _bytes(nelems: int | None, dtype: str | None) -> int | None:
    size = DTYPE_BYTES.get((dtype or "").lower())
    if nelems is None or size is None or not fits(nelems * size, 64):  # shapes that make no sense: unknown
        return None
    return nelems * size


def collectives(tables: RunTables) -> pa.Table:
    """One row per communication operation of each rank (schema ``COLLECTIVES``), from the rank's first
    source of the module docstring (``source``: ``device``, ``host record``, ``host annotation``):
    ``collective`` name, ``start_ns``, ``dur_ns`` (device time; null for host sources), ``dtype``,
    ``in_nelems`` / ``out_nelems`` and their bytes, ``group_size``, ``process_group`` name,
    ``group_ranks`` (null when not recorded) and ``peer`` (send/recv: the other rank, from ``Dst Rank``
    or ``Src Rank`` as the trace gives them). Sorted by rank, start."""
    con = tables.connect()
    rows = con.sql(_CANDIDATES_SQL, params={"backend": BACKEND_RANGE}).to_arrow_table().to_pylist()
    best: dict[int, int] = {}
    for row in rows:
        best[row["rank"]] = min(best.get(row["rank"], 4), row["source"])
    out = []
    for row in rows:
        if row["source"] != best[row["rank"]]:
            continue
        collective, dtype, in_nelems = row["collective"], row["dtype"], row["in_nelems"]
        if row["source"] == 3:
            collective = row["name"].split(":", 1)[1]
            in_nelems, shapes = _elements(row["input_shapes"])
            dtype = _first_dtype(row["input_dtypes"], shapes)
        peer = next((p for p in (row["dst_rank"], row["src_rank"]) if p is not None and p >= 0 and p != row["rank"]),
                    None)
        out.append({
            "rank": row["rank"], "slice_id": row["id"], "source": SOURCES[row["source"] - 1],
            "collective": collective, "start_ns": row["start_ns"], "dur_ns": row["dur_ns"], "dtype": dtype,
            "in_nelems": in_nelems, "out_nelems": row["out_nelems"], "in_bytes": _bytes(in_nelems, dtype),
            "out_bytes": _bytes(row["out_nelems"], dtype), "group_size": row["group_size"],
            "process_group": row["process_group"], "peer": peer,
            "group_ranks": _group_ranks(row["group_ranks_text"], row["group_size"], row["rank_start"],
                                        row["rank_stride"]),
        })
    return pa.Table.from_pylist(out, schema=COLLECTIVES)


def communication_matrix(tables: RunTables) -> pa.Table:
    """Per (rank, peer) (schema ``COMMUNICATION_MATRIX``; read the module docstring for what it can and
    cannot show): the ``collectives`` of ``collectives(tables)`` the rank ran with that peer (a send/recv
    to or from it, or a group holding it), their message ``bytes`` (the larger of input and output bytes,
    where the dtype is known) and ``dur_ns`` (device time, null when not recorded). ``peer`` null: the
    rank's operations whose peers are not recorded. Sorted by rank, peer (null last)."""
    con = new_connection()
    con.register("c", computed(collectives, tables))
    query = """
        WITH peers AS (
            SELECT rank, CASE WHEN peer IS NOT NULL THEN [peer] ELSE group_ranks END AS peers,
                   greatest(in_bytes, out_bytes) AS bytes, dur_ns
            FROM c
        ), cells AS (
            SELECT rank, unnest(peers) AS peer, bytes, dur_ns FROM peers WHERE len(peers) > 0
            UNION ALL
            SELECT rank, NULL AS peer, bytes, dur_ns FROM peers WHERE peers IS NULL OR len(peers) = 0
        )
        SELECT rank, peer, count(*) AS collectives, sum(bytes)::BIGINT AS bytes, sum(dur_ns)::BIGINT AS dur_ns
        FROM cells WHERE peer IS DISTINCT FROM rank
        GROUP BY rank, peer ORDER BY rank, peer NULLS LAST
    """
    return con.sql(query).to_arrow_table().cast(COMMUNICATION_MATRIX)


def collective_summary(tables: RunTables) -> pa.Table:
    """Per rank and collective name (schema ``COLLECTIVE_SUMMARY``) of ``collectives(tables)``: the
    ``source`` used, ``count``, summed ``in_bytes``, ``out_bytes`` and ``dur_ns`` (device time; null when
    not recorded), and how many of them name their peers (``with_peers``). Sorted by rank, then largest
    input bytes first."""
    con = new_connection()
    con.register("c", computed(collectives, tables))
    query = """
        SELECT rank, collective, any_value(source) AS source, count(*) AS count,
               sum(in_bytes)::BIGINT AS in_bytes, sum(out_bytes)::BIGINT AS out_bytes,
               sum(dur_ns)::BIGINT AS dur_ns,
               count(*) FILTER (WHERE peer IS NOT NULL OR len(group_ranks) > 0) AS with_peers
        FROM c GROUP BY rank, collective ORDER BY rank, in_bytes DESC NULLS LAST, collective
    """
    return con.sql(query).to_arrow_table().cast(COLLECTIVE_SUMMARY)
