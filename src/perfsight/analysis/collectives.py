"""Communication between the ranks of a job: every collective and point-to-point operation a rank ran with
its size, timing and bandwidth, the clocks' offsets between ranks, the communication matrix between global
ranks, the groups, and the slow rank and slow link verdicts.

**Operations** (``collectives``): one row per communication operation a rank ran, from the first of these
sources the rank has (so nothing is counted twice):

1. ``device``: device ``comm`` slices whose args carry PyTorch's collective metadata: NCCL/RCCL kernels
   (Kineto copies the metadata onto the kernel since PyTorch 2.1: ``Collective name``, ``dtype``,
   ``In msg nelems``, ``Out msg nelems``, ``Group size``, ``Process Group Name``, ``Process Group Ranks``,
   and for send/recv ``Src Rank`` / ``Dst Rank``), and the HCCL operators of Ascend's readers (the same
   keys, ``ingest/ascend/torch_npu_comm.py``; ``collective_figures`` calls them ``hccl``). ``dur_ns`` is
   the device time.
2. ``host record``: host ``record_param_comms`` slices with the same metadata (``dur_ns`` null: the host
   slice only enqueues the work). PyTorch's records of ``wait`` (waiting on a work handle, no data) are
   left out.
3. ``host annotation``: the backend's host ranges (``nccl:all_reduce``, ``gloo:...``: core/communication.py's
   ``BACKENDS``) of traces whose PyTorch records no metadata: the collective is the name after the colon,
   ``in_nelems`` the elements of the recorded input shapes, the dtype the first input's; the group and the
   output are unknown. ``dur_ns`` is the range's time for a backend that runs the collective on the host
   thread that records it (``HOST_EXECUTED_BACKENDS``: gloo), else null.

Sizes: ``in_bytes`` / ``out_bytes`` = elements x the dtype's size (``DTYPE_BYTES``; null for a dtype not
listed). The group's ranks come from ``Process Group Ranks`` ("[0, 1, 2]"); PyTorch cuts that text past
30 ranks ("[0, 1, ..., 127]"), in which case they are rebuilt from ``Global rank start`` and ``Global
rank stride`` (start + i * stride for i < ``Group size``) when the trace has them, else unknown. A group
whose args say ``Process Group Ranks Local`` holds group-local positions (no global mapping was found):
``ranks_global`` false.

**Figures** (``collective_figures``), per operation:

* ``collective``: the name normalised (``COLLECTIVE_KINDS``; ``all_reduce``, ``_allgather_base``,
  ``reduce_scatter_tensor_coalesced``, HCCL's ``allreduce`` ... -> ``allreduce``, ``allgather``,
  ``reducescatter``; names none fits are ``other``).
* ``sequence``: the operation's index among the rank's operations of the same process group (a group not
  recorded is one group), 0-based. An *instance* is the operations of one group with one sequence number
  on every rank that recorded it (of the same collective kind; a rank whose operation there is of another
  kind is not a member: its profile window began elsewhere; a send and its recv are one instance).
* ``bytes``: the message size, the larger of input and output bytes (nccl-tests' size: an all-gather's
  output, a reduce-scatter's input).
* ``elapse_ns``: the operation's time (device time, or a gloo range's time), null when not recorded.
* ``wait_ns``: arrival skew, on aligned clocks (``clock_offsets``): from this rank's start to the start
  of the instance's last member among the ranks traced, clipped to [0, elapse]; null when no other member
  was traced. ``transit_ns`` = elapse - wait; ``sync_ns`` = wait (the trace cannot tell the library's
  synchronisation from other waiting); ``idle_ns`` = 0 (elapse = transit + wait + idle, as msprof-analyze
  splits it); ``wait_ratio`` = wait / (wait + transit), ``sync_ratio`` = sync / (sync + transit).
* ``algbw_gbps`` = bytes / transit (1e9 bytes/s); ``busbw_gbps`` = algbw x the nccl-tests factor of the
  collective for the group of n ranks (``BUS_FACTORS``: all-reduce 2(n-1)/n; all-gather, reduce-scatter,
  all-to-all (n-1)/n; broadcast, reduce, send, recv 1; null for barrier and other).
* Ascend operations whose args carry reported figures (core/communication.py's ``REPORTED_TIME``, in
  communication.json's form: from communication.json, or from analysis.db's CommAnalyzerTime) take them
  as reported (``figures_from`` the file, ``REPORTED_FROM``): ms x 1e6 -> ns, rounded; the ratios as
  they are, or wait / (wait + transit) and sync / (sync + transit) of the reported times where the file
  has none (analysis.db); ``reported_start_ns`` = its ``Start Timestamp(us)`` (the operation's start in
  the file's clock, which for analysis.db is not the database's: 13 to 22 us apart in the samples). The
  ``REPORTED_BANDWIDTH`` object gives ``link_bandwidth``: sizes in MB (10^6 bytes: its packet sizes are
  whole bytes only so) x 1e6 -> bytes, bandwidth GB/s (= MB/ms) as reported.

**Totals** (``collective_totals``, ``link_totals``): the figures summed per rank, group and kind, and the
link figures per rank and link type, as msprof-analyze's "Total Op Info" sums them (its ratios from the
sums); the Cluster page and the reports show these.

**Clock offsets** (``clock_offsets``): all members of a symmetric blocking collective (all-reduce,
all-gather, reduce-scatter, all-to-all, barrier) leave it at about the same moment, so a rank's offset is
the median, over the timed instances (``elapse_ns`` known) it shares with the reference rank (the lowest
rank), of (its end - the reference's end); ``spread_ns`` is the largest minus the smallest of those
differences. A rank on the reference's host (perfsight's run manifest says the host) shares its clock:
offset 0, the estimate still shown; a rank sharing no instance keeps offset 0 (``method`` says which).
``aligned_start_ns`` = ``start_ns`` - offset; every cross-rank figure (wait) uses aligned times.

**Matrix** (``communication_matrix``): per recording rank, step, group, key and (src, dst) pair of global
ranks. A rank whose meta holds ``communication_matrix`` (Ascend's communication_matrix.json, ingest) gives
its links as reported (``source`` "communication_matrix.json"; keys ``<op>-top1``, ``-middle``,
``-bottom1..3`` are msprof's sample operations, ``-total`` all of them: ``total`` true). Other ranks'
rows are computed (``source`` "computed", ``total`` true) from their operations, key = the collective: a
send is (rank, peer), a recv (peer, rank), a group operation (rank, each other member), with the
operations' message bytes and transit time. A computed cell is the volume of the operations the two ranks
share as the recording rank's trace records it, not the bytes crossing that link (NCCL moves data along
rings and trees no trace records): an all-reduce of N bytes in a group of 8 puts N bytes in 7 cells.
Operations whose peers are not recorded go to one row with ``dst_rank`` null. ``ranks_global`` false:
the row's src and dst are group-local positions (a reported link of a group nothing mapped; ingest's
``local``), kept as reported for msprof-analyze's outputs (``cluster_outputs``), which place them itself.
``communication_pairs`` sums the ``total`` rows per (src, dst) over the rows whose sender recorded them (src =
recording rank, or dst null), so a link is counted once; a group-local peer is never shown as a global rank:
its traffic goes to dst null.

**Verdicts**: ``slow_ranks`` (``SLOW_RANK_RULE``) and ``slow_links`` (``SLOW_LINK_RULE``) state their
rule and threshold in every row.
"""
from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from decimal import Decimal

import numpy as np
import pyarrow as pa

from perfsight.analysis.breakdown import median
from perfsight.analysis.rank_facts import rank_meta
from perfsight.core.communication import (
    BACKEND_RANGE,
    HOST_EXECUTED_BACKENDS,
    REPORTED_BANDWIDTH,
    REPORTED_FROM,
    REPORTED_TIME,
)
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

#: normalised collective kinds, by the prefix of the name's letters (lower case) that names them, in the
#: order they are tried (reducescatter before reduce)
COLLECTIVE_KINDS = (("allreduce", "allreduce"), ("allgather", "allgather"), ("reducescatter", "reducescatter"),
                    ("alltoall", "alltoall"), ("broadcast", "broadcast"), ("reduce", "reduce"), ("send", "send"),
                    ("recv", "recv"), ("receive", "recv"), ("barrier", "barrier"))

#: nccl-tests' bus bandwidth factor per collective for a group of n ranks: busbw = algbw x factor
BUS_FACTORS = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
}

_NS_PER_US, _NS_PER_MS, _BYTES_PER_MB = 1000, 1_000_000, 1_000_000

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
    ("step", pa.int32()),
    ("op_name", pa.string()),
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

#: an operation's time figures, and sums of them (collective_figures, collective_totals, cluster_outputs)
TIME_FIGURES = [
    pa.field("elapse_ns", pa.int64()),
    pa.field("transit_ns", pa.int64()),
    pa.field("wait_ns", pa.int64()),
    pa.field("sync_ns", pa.int64()),
    pa.field("idle_ns", pa.int64()),
    pa.field("wait_ratio", pa.float64()),
    pa.field("sync_ratio", pa.float64()),
]

COLLECTIVE_FIGURES = pa.schema([
    ("rank", pa.int32()),
    ("slice_id", pa.int64()),
    ("step", pa.int32()),
    ("source", pa.string()),
    ("op_name", pa.string()),
    ("collective", pa.string()),
    ("process_group", pa.string()),
    ("group_ranks", pa.list_(pa.int32())),
    ("ranks_global", pa.bool_()),
    ("sequence", pa.int64()),
    ("peer", pa.int32()),
    ("dtype", pa.string()),
    ("bytes", pa.int64()),
    ("start_ns", pa.int64()),
    ("aligned_start_ns", pa.int64()),
    ("reported_start_ns", pa.int64()),
    *TIME_FIGURES,
    ("algbw_gbps", pa.float64()),
    ("busbw_gbps", pa.float64()),
    ("figures_from", pa.string()),
    ("in_bytes", pa.int64()),
    ("out_bytes", pa.int64()),
    ("group_size", pa.int64()),
    ("members", pa.int64()),
])

_PACKETS = pa.list_(pa.struct([("packet_bytes", pa.int64()), ("count", pa.int64()), ("dur_ns", pa.int64())]))
LINK_BANDWIDTH = pa.schema([
    ("rank", pa.int32()),
    ("slice_id", pa.int64()),
    ("step", pa.int32()),
    ("op_name", pa.string()),
    ("process_group", pa.string()),
    ("link_type", pa.string()),
    ("transit_bytes", pa.int64()),
    ("transit_ns", pa.int64()),
    ("bandwidth_gbps", pa.float64()),
    ("large_packet_ratio", pa.float64()),
    ("size_distribution", _PACKETS),
])

COLLECTIVE_TOTALS = pa.schema([
    ("rank", pa.int32()),
    ("process_group", pa.string()),
    ("collective", pa.string()),
    ("operations", pa.int64()),
    ("timed", pa.int64()),
    ("bytes", pa.int64()),
    ("mean_bytes", pa.int64()),
    *TIME_FIGURES,
    ("algbw_gbps", pa.float64()),
    ("busbw_gbps", pa.float64()),
])

LINK_TOTALS = pa.schema([
    ("rank", pa.int32()),
    ("link_type", pa.string()),
    ("operations", pa.int64()),
    ("transit_bytes", pa.int64()),
    ("transit_ns", pa.int64()),
    ("bandwidth_gbps", pa.float64()),
    ("size_distribution", _PACKETS),
])

COMMUNICATION_MATRIX = pa.schema([
    ("rank", pa.int32()),
    ("step", pa.int32()),
    ("process_group", pa.string()),
    ("key", pa.string()),
    ("op_name", pa.string()),
    ("src_rank", pa.int32()),
    ("dst_rank", pa.int32()),
    ("transport", pa.string()),
    ("transit_bytes", pa.int64()),
    ("transit_ns", pa.int64()),
    ("bandwidth_gbps", pa.float64()),
    ("collectives", pa.int64()),
    ("source", pa.string()),
    ("total", pa.bool_()),
    ("ranks_global", pa.bool_()),
])

COMMUNICATION_PAIRS = pa.schema([
    ("src_rank", pa.int32()),
    ("dst_rank", pa.int32()),
    ("transport", pa.string()),
    ("transit_bytes", pa.int64()),
    ("transit_ns", pa.int64()),
    ("bandwidth_gbps", pa.float64()),
    ("collectives", pa.int64()),
])

CLOCK_OFFSETS = pa.schema([
    ("rank", pa.int32()),
    ("offset_ns", pa.int64()),
    ("reference_rank", pa.int32()),
    ("collectives_used", pa.int64()),
    ("spread_ns", pa.int64()),
    ("method", pa.string()),
    ("estimate_ns", pa.int64()),
])

SLOW_RANKS = pa.schema([
    ("process_group", pa.string()),
    ("rank", pa.int32()),
    ("instances", pa.int64()),
    ("mean_wait_ns", pa.int64()),
    ("others_mean_wait_ns", pa.int64()),
    ("slow", pa.bool_()),
    ("rule", pa.string()),
    ("threshold", pa.string()),
])

SLOW_LINKS = pa.schema([
    ("src_rank", pa.int32()),
    ("dst_rank", pa.int32()),
    ("transport", pa.string()),
    ("transit_bytes", pa.int64()),
    ("transit_ns", pa.int64()),
    ("bandwidth_gbps", pa.float64()),
    ("median_gbps", pa.float64()),
    ("links", pa.int64()),
    ("slow", pa.bool_()),
    ("rule", pa.string()),
    ("threshold", pa.string()),
])

COMMUNICATION_GROUPS = pa.schema([
    ("process_group", pa.string()),
    ("group_name", pa.string()),
    ("kind", pa.string()),
    ("ranks", pa.list_(pa.int32())),
    ("ranks_global", pa.bool_()),
    ("source", pa.string()),
])

#: a slow rank: the least mean wait of its group while the other members wait at least this many times
#: as long on average ...
SLOW_RANK_WAIT_FACTOR = 2.0
#: ... and at least this much longer (ns): less is noise, not a rank holding the others up
SLOW_RANK_MIN_GAP_NS = 100_000
SLOW_RANK_THRESHOLD = (f"others' mean wait >= {SLOW_RANK_WAIT_FACTOR:g} x the rank's and >= "
                       f"{SLOW_RANK_MIN_GAP_NS / 1e6:g} ms longer")
SLOW_RANK_RULE = ("the rank of a group with the least mean wait (arrival skew) over the group's instances, "
                  "while the other members' mean wait is at least the factor times and the gap longer: "
                  "they wait for it")
#: a slow link: bandwidth below this share of the median of the links of its transport ...
SLOW_LINK_SHARE = 0.8
#: ... among at least this many such links
SLOW_LINK_MIN_LINKS = 2
SLOW_LINK_THRESHOLD = (f"bandwidth < {SLOW_LINK_SHARE:.0%} of the median of its transport's links, "
                       f"with at least {SLOW_LINK_MIN_LINKS} links")
SLOW_LINK_RULE = ("a link (src, dst) whose bandwidth (transit bytes / transit time over its operations) is "
                  "below the share of the median bandwidth of the links of its transport")

# Candidate communication records with their metadata: the kernels and record_param_comms slices that
# carry "Collective name", and the backend's host ranges.
_CANDIDATES_SQL = """
WITH comm AS (
    SELECT s.id, coalesce(t.rank, 0)::INTEGER AS rank, t.kind AS track_kind, s.name, s.start_ns, s.dur_ns,
           s.step, s.task_type, s.input_shapes, s.input_dtypes, CASE WHEN json_valid(s.args) THEN s.args END AS args
    FROM slices s JOIN tracks t USING (track_id)
    WHERE s.kind = 'comm'
), described AS (
    SELECT *, json_extract_string(args, '$."Collective name"') AS collective FROM comm
)
SELECT id, rank, start_ns, name, step, task_type, input_shapes, input_dtypes,
       CASE WHEN collective IS NOT NULL AND track_kind = 'stream' THEN 1
            WHEN collective IS NOT NULL AND track_kind = 'thread' AND name = 'record_param_comms' THEN 2
            ELSE 3 END AS source,
       CASE WHEN collective IS NOT NULL AND track_kind = 'stream' THEN dur_ns
            WHEN collective IS NULL AND regexp_matches(name, $executed) THEN dur_ns END AS dur_ns,
       collective,
       json_extract_string(args, '$.dtype') AS dtype,
       TRY_CAST(json_extract_string(args, '$."In msg nelems"') AS BIGINT) AS in_nelems,
       TRY_CAST(json_extract_string(args, '$."Out msg nelems"') AS BIGINT) AS out_nelems,
       TRY_CAST(json_extract_string(args, '$."Group size"') AS BIGINT) AS group_size,
       json_extract_string(args, '$."Process Group Name"') AS process_group,
       json_extract_string(args, '$."Process Group Ranks"') AS group_ranks_text,
       TRY_CAST(json_extract_string(args, '$."Process Group Ranks Local"') AS BOOLEAN) AS ranks_local,
       TRY_CAST(json_extract_string(args, '$."Global rank start"') AS BIGINT) AS rank_start,
       TRY_CAST(json_extract_string(args, '$."Global rank stride"') AS BIGINT) AS rank_stride,
       TRY_CAST(json_extract_string(args, '$."Src Rank"') AS INTEGER) AS src_rank,
       TRY_CAST(json_extract_string(args, '$."Dst Rank"') AS INTEGER) AS dst_rank,
       json_extract(args, $reported_time)::VARCHAR AS time_info,
       json_extract(args, $reported_bandwidth)::VARCHAR AS bandwidth_info,
       json_extract_string(args, $reported_from) AS figures_from
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


def _operations(tables: RunTables) -> list[dict]:
    """Each rank's operations from its best source (module docstring), with what the figures need."""
    params = {"backend": BACKEND_RANGE, "executed": rf"^({'|'.join(HOST_EXECUTED_BACKENDS)}):",
              **{name: f'$."{key}"' for name, key in (("reported_time", REPORTED_TIME),
                                                      ("reported_bandwidth", REPORTED_BANDWIDTH),
                                                      ("reported_from", REPORTED_FROM))}}
    rows = tables.connect().sql(_CANDIDATES_SQL, params=params).to_arrow_table().to_pylist()
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
            "step": row["step"], "op_name": row["name"], "hccl": row["task_type"] == "HCCL",
            "ranks_global": not row["ranks_local"], "time_info": _json(row["time_info"]),
            "bandwidth_info": _json(row["bandwidth_info"]), "figures_from": row["figures_from"],
        })
    return out


def _json(text: str | None) -> dict | None:
    value = json.loads(text) if text else None
    return value if isinstance(value, dict) else None


def collectives(tables: RunTables) -> pa.Table:
    """One row per communication operation of each rank (schema ``COLLECTIVES``), from the rank's first
    source of the module docstring (``source``: ``device``, ``host record``, ``host annotation``):
    ``collective`` name as recorded, ``start_ns``, ``dur_ns`` (device time, or a gloo range's; null for
    other host sources), ``dtype``, ``in_nelems`` / ``out_nelems`` and their bytes, ``group_size``,
    ``process_group`` name, ``group_ranks`` (null when not recorded) and ``peer`` (send/recv: the other
    rank, from ``Dst Rank`` or ``Src Rank`` as the trace gives them), ``step`` and ``op_name`` (the
    slice's name). Sorted by rank, start."""
    return pa.Table.from_pylist(computed(_operations, tables), schema=COLLECTIVES)


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


def collective_kind(name: str | None) -> str:
    """A collective's recorded name -> its kind (``COLLECTIVE_KINDS``), ``other`` when none fits."""
    letters = re.sub(r"[^a-z]", "", (name or "").lower())
    return next((kind for prefix, kind in COLLECTIVE_KINDS if letters.startswith(prefix)), "other")


def bus_factor(kind: str, ranks: int | None) -> float | None:
    """nccl-tests' bus bandwidth factor of ``kind`` for a group of ``ranks`` (None when unknown)."""
    factor = BUS_FACTORS.get(kind)
    if factor is None or not ranks or ranks < 1:
        return None
    return factor(ranks)


def _sequenced(tables: RunTables) -> list[dict]:
    """The operations with their kind, group size, message bytes, end and ``sequence`` (module docstring)."""
    counters: dict[tuple, int] = defaultdict(int)
    out = []
    for op in computed(_operations, tables):
        key = (op["rank"], op["process_group"])
        sizes = [b for b in (op["in_bytes"], op["out_bytes"]) if b is not None]
        ranks = len(op["group_ranks"]) if op["group_ranks"] else op["group_size"]
        out.append({**op, "kind": collective_kind(op["collective"]), "sequence": counters[key],
                    "bytes": max(sizes) if sizes else None, "ranks": ranks,
                    "end_ns": op["start_ns"] + op["dur_ns"] if op["dur_ns"] is not None else None})
        counters[key] += 1
    return out


#: a send and its recv are one instance
_P2P = {"send": "sendrecv", "recv": "sendrecv"}


def _instances(ops: list[dict]) -> dict[tuple, list[dict]]:
    """(process group, sequence) -> the members' operations: one per rank, of the kind most ranks have there
    (a send and a recv are one kind)."""
    found: dict[tuple, list[dict]] = defaultdict(list)
    for op in ops:
        found[(op["process_group"], op["sequence"])].append(op)
    members = {}
    for key, group in found.items():
        kinds = [_P2P.get(op["kind"], op["kind"]) for op in group]
        kind = max(sorted(set(kinds)), key=kinds.count)
        members[key] = [op for op in group if _P2P.get(op["kind"], op["kind"]) == kind]
    return members


def _ranks(tables: RunTables) -> list[int]:
    return sorted({r if r is not None else 0 for r in tables.tracks.column("rank").to_pylist()})


#: collectives every member leaves at about the same moment (a broadcast's root, a reduce's senders and a
#: send may leave early): the instances clock offsets are estimated from
SYMMETRIC_KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "barrier")


def _hosts(tables: RunTables) -> dict[int, str]:
    """Each rank's host as its perfsight run manifest says (``host``); ranks without one are left out."""
    hosts = {}
    for rank, meta in computed(rank_meta, tables).items():
        try:
            host = json.loads(meta.get("manifest") or "{}").get("host")
        except (ValueError, AttributeError):
            host = None
        if isinstance(host, str) and host:
            hosts[rank] = host
    return hosts


def clock_offsets(tables: RunTables) -> pa.Table:
    """Per rank (schema ``CLOCK_OFFSETS``): its clock's ``offset_ns`` from the ``reference_rank``'s (the
    lowest rank), ``estimate_ns`` the median over the ``collectives_used`` (timed instances of
    ``SYMMETRIC_KINDS`` it shares with the reference) of its end minus the reference's end, ``spread_ns``
    the largest minus the smallest of those differences, and the ``method``. The offset is the estimate,
    except for a rank on the reference's host (its run manifest's ``host``), which shares its clock: 0
    (the estimate is then the collectives' own end skew), and a rank sharing no instance: 0. Sorted by
    rank; empty for a run without ranks."""
    ranks = _ranks(tables)
    if not ranks:
        return CLOCK_OFFSETS.empty_table()
    reference, hosts = ranks[0], _hosts(tables)
    timed = [op for op in computed(_sequenced, tables) if op["end_ns"] is not None and op["kind"] in SYMMETRIC_KINDS]
    differences: dict[int, list[int]] = defaultdict(list)
    for members in _instances(timed).values():
        ends = {op["rank"]: op["end_ns"] for op in members}
        if reference in ends and len(ends) > 1:
            for rank, end in ends.items():
                differences[rank].append(end - ends[reference])
    rows = []
    for rank in ranks:
        found = np.array(differences.get(rank, []), dtype=np.int64)
        estimate = round(median(found) or 0) if found.size else 0
        if rank == reference:
            method, offset = "reference rank", 0
        elif hosts.get(rank) is not None and hosts.get(rank) == hosts.get(reference):
            method, offset = f"same host as the reference rank ({hosts[rank]}): one clock", 0
        elif found.size:
            method, offset = "median of (end - reference end) over shared symmetric collective instances", estimate
        else:
            method, offset = "no timed collective shared with the reference rank: offset 0 assumed", 0
        spread = int(found.max() - found.min()) if found.size else 0
        rows.append({"rank": rank, "offset_ns": offset, "reference_rank": reference,
                     "collectives_used": int(found.size), "spread_ns": spread, "method": method,
                     "estimate_ns": estimate})
    return pa.Table.from_pylist(rows, schema=CLOCK_OFFSETS)


def _ns(milliseconds) -> int | None:
    return round(milliseconds * _NS_PER_MS) if isinstance(milliseconds, (int, float)) else None


def _start_ns(microseconds) -> int | None:
    """A reported start (us, a JSON number) as ns: the decimal it prints as, x 1000, rounded."""
    if isinstance(microseconds, bool) or not isinstance(microseconds, (int, float)) or not math.isfinite(microseconds):
        return None
    ns = int((Decimal(repr(microseconds)) * _NS_PER_US).to_integral_value())
    return ns if fits(ns, 64) else None


def _reported(info: dict, source: str | None) -> dict:
    """An operation's reported ``REPORTED_TIME`` object as figures (ms -> ns; ratios as reported, else from
    the reported times) from file ``source`` (module docstring)."""
    times = {key: _ns(info.get(name)) for key, name in (
        ("elapse_ns", "Elapse Time(ms)"), ("transit_ns", "Transit Time(ms)"), ("wait_ns", "Wait Time(ms)"),
        ("sync_ns", "Synchronization Time(ms)"), ("idle_ns", "Idle Time(ms)"))}
    ratios = {}
    for key, name, part in (("wait_ratio", "Wait Time Ratio", "wait_ns"),
                            ("sync_ratio", "Synchronization Time Ratio", "sync_ns")):
        value = info.get(name)
        ratios[key] = (value if isinstance(value, (int, float)) and not isinstance(value, bool)
                       else _share(times[part], times["transit_ns"]))
    return {**times, **ratios, "reported_start_ns": _start_ns(info.get("Start Timestamp(us)")),
            "figures_from": source or "reported"}


def _computed_figures(op: dict, last_start: int | None) -> dict:
    """Elapse, transit, wait, sync, idle and ratios of an operation whose instance's last member started at
    ``last_start`` (aligned; None: no other member traced)."""
    elapse = op["dur_ns"]
    if elapse is None or last_start is None:
        return {"elapse_ns": elapse, "transit_ns": None, "wait_ns": None, "sync_ns": None, "idle_ns": None,
                "wait_ratio": None, "sync_ratio": None, "reported_start_ns": None, "figures_from": "computed"}
    wait = min(max(last_start - op["aligned_start_ns"], 0), elapse)
    ratio = wait / elapse if elapse else None
    return {"elapse_ns": elapse, "transit_ns": elapse - wait, "wait_ns": wait, "sync_ns": wait, "idle_ns": 0,
            "wait_ratio": ratio, "sync_ratio": ratio, "reported_start_ns": None, "figures_from": "computed"}


def _figures(tables: RunTables) -> list[dict]:
    offsets = {r["rank"]: r["offset_ns"] for r in computed(clock_offsets, tables).to_pylist()}
    ops = [{**op, "aligned_start_ns": op["start_ns"] - offsets.get(op["rank"], 0)}
           for op in computed(_sequenced, tables)]
    last_start: dict[int, int | None] = {}
    members: dict[int, int] = {}
    for group in _instances(ops).values():
        latest = max(op["aligned_start_ns"] for op in group) if len({op["rank"] for op in group}) > 1 else None
        for op in group:
            last_start[op["slice_id"]], members[op["slice_id"]] = latest, len(group)
    out = []
    for op in ops:
        figures = (_reported(op["time_info"], op["figures_from"]) if op["time_info"] is not None
                   else _computed_figures(op, last_start.get(op["slice_id"])))
        transit, size = figures["transit_ns"], op["bytes"]
        algbw = size / transit if size is not None and transit else None
        factor = bus_factor(op["kind"], op["ranks"])
        out.append({**op, **figures, "collective": op["kind"], "source": "hccl" if op["hccl"] else op["source"],
                    "members": members.get(op["slice_id"], 1), "algbw_gbps": algbw,
                    "busbw_gbps": algbw * factor if algbw is not None and factor is not None else None})
    return out


def collective_figures(tables: RunTables) -> pa.Table:
    """One row per communication operation per rank (schema ``COLLECTIVE_FIGURES``; the module docstring
    defines each figure): its record, kind, group, ``sequence``, size, own and aligned start, elapse,
    transit, wait, synchronisation and idle time with their ratios, algorithm and bus bandwidth, and where
    the figures come from; added: ``in_bytes``, ``out_bytes``, ``group_size`` and ``members`` (the ranks
    traced in its instance). Sorted by rank, start."""
    return pa.Table.from_pylist(computed(_figures, tables), schema=COLLECTIVE_FIGURES)


def _packets(distribution) -> list[dict] | None:
    """communication.json's ``Size Distribution`` ({packet MB: [count, ms]}) as packet bytes, count and ns."""
    if not isinstance(distribution, dict):
        return None
    rows = []
    for size, (count, ms) in ((k, v) for k, v in distribution.items() if isinstance(v, list) and len(v) == 2):
        try:
            rows.append({"packet_bytes": round(float(size) * _BYTES_PER_MB), "count": int(count), "dur_ns": _ns(ms)})
        except (TypeError, ValueError):
            continue
    return sorted(rows, key=lambda r: r["packet_bytes"])


def link_bandwidth(tables: RunTables) -> pa.Table:
    """Per rank, operation and link type (schema ``LINK_BANDWIDTH``): Ascend's ``Communication Bandwidth
    Info`` as reported (HCCS, PCIE, RDMA, SDMA, SIO, ...: MB -> bytes, ms -> ns, GB/s, large packet ratio,
    packet sizes), else one row per operation: link type ``LOCAL`` for a group of one, ``UNKNOWN``
    otherwise (a trace does not say which links NCCL or gloo used), its message bytes over its transit
    time (bandwidth = ``algbw_gbps``; distribution null). Sorted by rank, start, link type."""
    rows = []
    for op in computed(_figures, tables):
        base = {"rank": op["rank"], "slice_id": op["slice_id"], "step": op["step"], "op_name": op["op_name"],
                "process_group": op["process_group"]}
        if op["bandwidth_info"] is not None:
            for link, info in sorted(op["bandwidth_info"].items()):
                if not isinstance(info, dict):
                    continue
                size, bandwidth, ratio = (info.get(k) for k in ("Transit Size(MB)", "Bandwidth(GB/s)",
                                                                 "Large Packet Ratio"))
                rows.append({**base, "link_type": link, "transit_ns": _ns(info.get("Transit Time(ms)")),
                             "transit_bytes": round(size * _BYTES_PER_MB) if isinstance(size, (int, float)) else None,
                             "bandwidth_gbps": bandwidth if isinstance(bandwidth, (int, float)) else None,
                             "large_packet_ratio": ratio if isinstance(ratio, (int, float)) else None,
                             "size_distribution": _packets(info.get("Size Distribution"))})
        else:
            rows.append({**base, "link_type": "LOCAL" if op["ranks"] == 1 else "UNKNOWN",
                         "transit_bytes": op["bytes"], "transit_ns": op["transit_ns"],
                         "bandwidth_gbps": op["algbw_gbps"], "large_packet_ratio": None, "size_distribution": None})
    return pa.Table.from_pylist(rows, schema=LINK_BANDWIDTH)


def _known_sum(values) -> int | None:
    """The sum of the values that are known (None when none is)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _share(part: int | None, other: int | None) -> float | None:
    """part / (part + other), as msprof-analyze's ratios (None when unknown or both 0)."""
    return part / (part + other) if part is not None and other is not None and part + other else None


def _totals_row(ops: list[dict]) -> dict:
    """One ``collective_totals`` row over the operations of one rank, group and collective kind."""
    first = ops[0]
    sums = {column: _known_sum(op[column] for op in ops)
            for column in ("bytes", "elapse_ns", "transit_ns", "wait_ns", "sync_ns", "idle_ns")}
    sized = [op for op in ops if op["bytes"] is not None]
    timed = [op for op in sized if op["transit_ns"] is not None]
    transit = sum(op["transit_ns"] for op in timed)
    algbw = sum(op["bytes"] for op in timed) / transit if transit else None
    factor = bus_factor(first["kind"], max((op["ranks"] for op in ops if op["ranks"]), default=None))
    return {"rank": first["rank"], "process_group": first["process_group"], "collective": first["kind"],
            "operations": len(ops), "timed": sum(op["transit_ns"] is not None for op in ops), **sums,
            "mean_bytes": round(sum(op["bytes"] for op in sized) / len(sized)) if sized else None,
            "wait_ratio": _share(sums["wait_ns"], sums["transit_ns"]),
            "sync_ratio": _share(sums["sync_ns"], sums["transit_ns"]),
            "algbw_gbps": algbw, "busbw_gbps": algbw * factor if algbw is not None and factor is not None else None}


def collective_totals(tables: RunTables) -> pa.Table:
    """Per rank, process group and collective kind, ``collective_figures`` summed (schema
    ``COLLECTIVE_TOTALS``; msprof-analyze's "Total Op Info" per rank and group, split by kind): the
    ``operations``, those ``timed`` (transit known), their message ``bytes`` and ``mean_bytes``, the sums
    of ``elapse_ns``, ``transit_ns``, ``wait_ns``, ``sync_ns`` and ``idle_ns`` over the operations where
    each is known (null when none is), ``wait_ratio`` = wait / (wait + transit) and ``sync_ratio`` = sync /
    (sync + transit) of those sums, ``algbw_gbps`` = the bytes of the operations with bytes and transit
    known over their transit, and ``busbw_gbps`` = algbw x the kind's nccl-tests factor for the group
    (``BUS_FACTORS``). Sorted by wait, longest first (null last), then rank, group, collective."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for op in computed(_figures, tables):
        groups[(op["rank"], op["process_group"], op["kind"])].append(op)
    rows = [_totals_row(ops) for ops in groups.values()]
    rows.sort(key=lambda r: (r["wait_ns"] is None, -(r["wait_ns"] or 0), r["rank"], r["process_group"] is None,
                             r["process_group"] or "", r["collective"]))
    return pa.Table.from_pylist(rows, schema=COLLECTIVE_TOTALS)


def link_totals(tables: RunTables) -> pa.Table:
    """Per rank and link type, ``link_bandwidth`` summed (schema ``LINK_TOTALS``; msprof-analyze's "Total
    Op Info" bandwidth per link type): the ``operations``, ``transit_bytes`` and ``transit_ns`` summed over
    the rows where each is known, ``bandwidth_gbps`` = bytes / ns (null without transit time), and the
    ``size_distribution`` merged: per packet size, counts and times summed (null when no row has one).
    Sorted by rank, link type."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in computed(link_bandwidth, tables).to_pylist():
        groups[(row["rank"], row["link_type"])].append(row)
    rows = []
    for (rank, link), links in sorted(groups.items()):
        size, time = (_known_sum(row[c] for row in links) for c in ("transit_bytes", "transit_ns"))
        packets: dict[int, dict] = {}
        for packet in (p for row in links for p in row["size_distribution"] or []):
            merged = packets.setdefault(packet["packet_bytes"], {"packet_bytes": packet["packet_bytes"], "count": 0,
                                                                 "dur_ns": 0})
            merged["count"] += packet["count"]
            merged["dur_ns"] += packet["dur_ns"] or 0
        distributed = any(row["size_distribution"] is not None for row in links)
        rows.append({"rank": rank, "link_type": link, "operations": len(links), "transit_bytes": size,
                     "transit_ns": time, "bandwidth_gbps": size / time if size is not None and time else None,
                     "size_distribution": [packets[k] for k in sorted(packets)] if distributed else None})
    return pa.Table.from_pylist(rows, schema=LINK_TOTALS)


def _reported_links(rank: int, text: str) -> list[dict]:
    """A rank's ``communication_matrix`` meta (ingest's contract: msprof units) as matrix rows."""
    rows = []
    for link in json.loads(text):
        size, time = link.get("transit_size_mb"), link.get("transit_time_ms")
        rows.append({"rank": rank, "step": link.get("step"), "process_group": link.get("group"),
                     "key": link.get("key"), "op_name": link.get("op_name"), "src_rank": link.get("src"),
                     "dst_rank": link.get("dst"), "transport": link.get("transport"),
                     "transit_bytes": round(size * _BYTES_PER_MB) if isinstance(size, (int, float)) else None,
                     "transit_ns": _ns(time), "bandwidth_gbps": link.get("bandwidth_gbps"), "collectives": 1,
                     "source": "communication_matrix.json", "total": str(link.get("key", "")).endswith("-total"),
                     "ranks_global": link.get("local") is not True})
    return rows


def _pairs(op: dict) -> list[tuple[int, int | None]]:
    """The (src, dst) global-rank pairs an operation is counted in (module docstring)."""
    rank = op["rank"]
    if not op["ranks_global"]:      # group-local positions name no global peer
        return [(rank, None)]
    if op["peer"] is not None:
        return [(op["peer"], rank)] if op["kind"] == "recv" else [(rank, op["peer"])]
    others = [r for r in op["group_ranks"] or [] if r != rank]
    return [(rank, r) for r in others] if others else ([(rank, None)] if not op["group_ranks"] else [])


def _computed_links(ops: list[dict]) -> list[dict]:
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for op in ops:
        for src, dst in _pairs(op):
            cells[(op["rank"], op["step"], op["process_group"], op["kind"], src, dst)].append(op)
    rows = []
    for (rank, step, group, kind, src, dst), members in cells.items():
        sizes = [op["bytes"] for op in members if op["bytes"] is not None]
        times = [op["transit_ns"] for op in members]
        size = sum(sizes) if sizes else None
        time = sum(times) if all(t is not None for t in times) else None
        largest = max(members, key=lambda op: op["bytes"] or 0)
        rows.append({"rank": rank, "step": step, "process_group": group, "key": kind, "op_name": largest["op_name"],
                     "src_rank": src, "dst_rank": dst, "transport": "LOCAL" if src == dst else "UNKNOWN",
                     "transit_bytes": size, "transit_ns": time,
                     "bandwidth_gbps": size / time if size is not None and time else None,
                     "collectives": len(members), "source": "computed", "total": True, "ranks_global": True})
    return rows


def communication_matrix(tables: RunTables) -> pa.Table:
    """Per recording rank, step, group, key and (src, dst) global-rank pair (schema
    ``COMMUNICATION_MATRIX``; the module docstring says what a cell is): transport, transit bytes and time,
    bandwidth (GB/s), the operations counted, where the row comes from, and whether it is a ``total`` row.
    Sorted by rank, step, group, key, src, dst (null last)."""
    meta = computed(rank_meta, tables)
    reported = {rank for rank, facts in meta.items() if facts.get("communication_matrix")}
    rows = [row for rank in sorted(reported) for row in _reported_links(rank, meta[rank]["communication_matrix"])]
    rows += _computed_links([op for op in computed(_figures, tables) if op["rank"] not in reported])
    rows.sort(key=lambda r: tuple((r[c] is None, r[c] if r[c] is not None else 0 if c.endswith(("rank", "step"))
                                   else "") for c in ("rank", "step", "process_group", "key", "src_rank", "dst_rank")))
    return pa.Table.from_pylist(rows, schema=COMMUNICATION_MATRIX)


def communication_pairs(tables: RunTables) -> pa.Table:
    """Per (src, dst) pair (schema ``COMMUNICATION_PAIRS``): the ``communication_matrix`` total rows the
    sender recorded (src = recording rank; dst null: the rank's operations whose peers are not recorded, or
    known only by their group-local position, ``ranks_global`` false: never shown as a global rank),
    summed over steps, groups and keys: transport (``MIXED`` when several), bytes, time, bandwidth and the
    operations counted. Sorted by src, dst (null last)."""
    con = new_connection()
    con.register("m", computed(communication_matrix, tables))
    query = """
        WITH sent AS (
            SELECT rank AS src_rank, CASE WHEN ranks_global THEN dst_rank END AS dst_rank, transport,
                   transit_bytes, transit_ns, collectives
            FROM m WHERE total AND (src_rank = rank OR NOT ranks_global)
        )
        SELECT src_rank, dst_rank,
               CASE WHEN count(DISTINCT transport) > 1 THEN 'MIXED' ELSE any_value(transport) END AS transport,
               sum(transit_bytes)::BIGINT AS transit_bytes,
               CASE WHEN count(transit_ns) = count(*) THEN sum(transit_ns)::BIGINT END AS transit_ns,
               NULL::DOUBLE AS bandwidth_gbps, sum(collectives)::BIGINT AS collectives
        FROM sent GROUP BY src_rank, dst_rank ORDER BY src_rank, dst_rank NULLS LAST
    """
    rows = con.sql(query).to_arrow_table().to_pylist()
    for row in rows:
        if row["transit_bytes"] is not None and row["transit_ns"]:
            row["bandwidth_gbps"] = row["transit_bytes"] / row["transit_ns"]
    return pa.Table.from_pylist(rows, schema=COMMUNICATION_PAIRS)


def slow_ranks(tables: RunTables) -> pa.Table:
    """Per process group and rank with wait figures (schema ``SLOW_RANKS``): the ``instances`` it took part
    in, its ``mean_wait_ns``, the other members' mean wait over the same group, and ``slow`` by
    ``SLOW_RANK_RULE`` (``rule`` and ``threshold`` say it in every row). A group of one rank has no
    verdict. Sorted by group, rank."""
    waits: dict[str | None, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for op in computed(_figures, tables):
        if op["wait_ns"] is not None:
            waits[op["process_group"]][op["rank"]].append(op["wait_ns"])
    rows = []
    for group in sorted(waits, key=lambda g: (g is not None, g)):
        by_rank = waits[group]
        if len(by_rank) < 2:
            continue
        means = {rank: sum(values) / len(values) for rank, values in by_rank.items()}
        least = min(sorted(means), key=lambda r: means[r])
        for rank in sorted(by_rank):
            others = [w for other, values in by_rank.items() if other != rank for w in values]
            others_mean = sum(others) / len(others)
            slow = (rank == least and others_mean >= SLOW_RANK_WAIT_FACTOR * means[rank]
                    and others_mean - means[rank] >= SLOW_RANK_MIN_GAP_NS)
            rows.append({"process_group": group, "rank": rank, "instances": len(by_rank[rank]),
                         "mean_wait_ns": round(means[rank]), "others_mean_wait_ns": round(others_mean),
                         "slow": slow, "rule": SLOW_RANK_RULE, "threshold": SLOW_RANK_THRESHOLD})
    return pa.Table.from_pylist(rows, schema=SLOW_RANKS)


def slow_links(tables: RunTables) -> pa.Table:
    """Per link of ``communication_pairs`` between two ranks with a transit time (schema ``SLOW_LINKS``;
    same-rank ``LOCAL`` links and unknown peers left out): its bandwidth, the median bandwidth of the
    ``links`` of its transport, and ``slow`` by ``SLOW_LINK_RULE`` (``rule`` and ``threshold`` in every
    row; a transport with fewer than ``SLOW_LINK_MIN_LINKS`` links has no slow link). Sorted by src, dst."""
    links = [row for row in computed(communication_pairs, tables).to_pylist()
             if row["dst_rank"] is not None and row["src_rank"] != row["dst_rank"] and row["bandwidth_gbps"]]
    by_transport: dict[str, list[float]] = defaultdict(list)
    for row in links:
        by_transport[row["transport"]].append(row["bandwidth_gbps"])
    rows = []
    for row in links:
        peers = by_transport[row["transport"]]
        middle = median(np.array(peers)) or 0.0
        rows.append({**row, "median_gbps": middle, "links": len(peers), "rule": SLOW_LINK_RULE,
                     "threshold": SLOW_LINK_THRESHOLD,
                     "slow": len(peers) >= SLOW_LINK_MIN_LINKS and row["bandwidth_gbps"] < SLOW_LINK_SHARE * middle})
    return pa.Table.from_pylist(rows, schema=SLOW_LINKS)


def communication_groups(tables: RunTables) -> pa.Table:
    """One row per process group seen in the operations (schema ``COMMUNICATION_GROUPS``): its name
    (``group_name``: the framework's, ``Process Group Desc`` / ``Process Group Description``), ``kind``
    (``p2p`` when all its operations are send/recv), its ``ranks`` (recorded ``Process Group Ranks``, else
    the traced ranks that ran its operations) with ``ranks_global`` and the ``source`` of the ranks. The
    group not recorded has a null name. Sorted by group."""
    descriptions = _descriptions(tables)
    groups: dict[str | None, list[dict]] = defaultdict(list)
    for op in computed(_sequenced, tables):
        groups[op["process_group"]].append(op)
    rows = []
    for group in sorted(groups, key=lambda g: (g is None, g or "")):
        ops = groups[group]
        recorded = next((op for op in ops if op["group_ranks"]), None)
        rows.append({"process_group": group, "group_name": descriptions.get(group) if group else None,
                     "kind": "p2p" if all(op["kind"] in ("send", "recv") for op in ops) else "collective",
                     "ranks": sorted(recorded["group_ranks"]) if recorded else sorted({op["rank"] for op in ops}),
                     "ranks_global": recorded["ranks_global"] if recorded else True,
                     "source": "Process Group Ranks" if recorded else "ranks that recorded its operations"})
    return pa.Table.from_pylist(rows, schema=COMMUNICATION_GROUPS)


def _descriptions(tables: RunTables) -> dict[str, str]:
    query = """
        SELECT json_extract_string(args, '$."Process Group Name"') AS pg,
               any_value(coalesce(json_extract_string(args, '$."Process Group Desc"'),
                                  json_extract_string(args, '$."Process Group Description"'))) AS description
        FROM (SELECT CASE WHEN json_valid(args) THEN args END AS args FROM slices WHERE kind = 'comm')
        GROUP BY pg HAVING pg IS NOT NULL
    """
    return {pg: desc for pg, desc in tables.connect().sql(query).fetchall() if desc}
