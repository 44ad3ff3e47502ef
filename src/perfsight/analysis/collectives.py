"""Communication between the ranks of a job: every collective and point-to-point operation a rank ran with
its size, timing and bandwidth, the clocks' offsets between ranks, the communication matrix between global
ranks, the groups, and the slow link verdict.

**Map and reduce**: what one rank's tables say of its operations is computed on that rank alone
(``rank_operations``, ``reported_links``, ``reported_matrix``: a job's per-rank summaries,
``analysis/job_summaries.py``); every figure that needs the other ranks (instances, clock offsets, waits,
bandwidths, totals, the matrix, verdicts, groups) is a DuckDB query over a ``Job``'s summaries
(``analysis/job.py``), the same for a job read whole and for one stored rank by rank (``perfsight.mapreduce``).
A ``slice_id`` is the rank's own slice's: unique within a rank; a job read whole shifts each rank's ids so
they are unique across the job too.

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
   output are unknown. The time is the communication kernels the range launched (a launch call inside it,
   its kernel by correlation: an older PyTorch's NCCL kernels carry no metadata; ``slice_id`` and
   ``start_ns`` are then the first kernel's, ``dur_ns`` to the last one's end), else the range's own for a
   backend that runs the collective on the host thread that records it (``HOST_EXECUTED_BACKENDS``: gloo),
   else null.

Sizes: ``in_bytes`` / ``out_bytes`` = elements x the dtype's size (``DTYPE_BYTES``; null for a dtype not
listed). The group's ranks come from ``Process Group Ranks`` ("[0, 1, 2]"); PyTorch cuts that text past
30 ranks ("[0, 1, ..., 127]"), in which case they are rebuilt from ``Global rank start`` and ``Global
rank stride`` (start + i * stride for i < ``Group size``) when the trace has them, else from another record
of the same group on the rank that has them (Kineto's NCCL kernels carry the cut text without start and
stride; the rank's ``record_param_comms`` of the group carry them), else unknown. A group
whose args say ``Process Group Ranks Local`` holds group-local positions (no global mapping was found):
``ranks_global`` false.

**Figures** (``collective_figures``), per operation:

* ``collective``: the name normalised (``COLLECTIVE_KINDS``; ``all_reduce``, ``_allgather_base``,
  ``reduce_scatter_tensor_coalesced``, HCCL's ``allreduce`` ... -> ``allreduce``, ``allgather``,
  ``reducescatter``; HCCL's ``batch_send_recv`` -> ``sendrecv``; names none fits are ``other``).
* ``sequence``: the operation's index among the rank's operations of the same process group, 0-based. An
  operation whose group the trace does not say (gloo's and older NCCL's host ranges, kernels without
  collective args) is in the rank's one process group when torch's ``distributedInfo`` (meta
  ``distributed_info``) lists one (``pg_config``: its ``pg_name``, ``ranks``, ``pg_desc``), else in
  ``UNRECORDED_GROUP``, one group the cluster outputs key like any other. An *instance* is the operations of
  one group with one sequence number on every rank that recorded it (of the same collective kind; a rank
  whose operation there is of another kind is not a member: its profile window began elsewhere; a send and
  its recv are one instance).
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
  all-to-all (n-1)/n; broadcast, reduce, send, recv, sendrecv 1; null for barrier and other).
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
A group operation whose group's ranks are not recorded pairs with the other ranks traced in its instance, a
send or recv whose peer is not recorded with the other rank of its instance.
Operations whose peers are not known so go to one row with ``dst_rank`` null, and so do those of a group
of more than ``PAIRED_GROUP_RANKS`` ranks: a world all-reduce of 1,024 ranks would be a million cells per
step saying only that every rank took part (its data moves between ring or tree neighbours, which no trace
records). ``ranks_global`` false:
the row's src and dst are group-local positions (a reported link of a group nothing mapped; ingest's
``local``), kept as reported for msprof-analyze's outputs (``cluster_outputs``), which place them itself.
``communication_pairs`` sums the ``total`` rows per (src, dst) over the rows whose sender recorded them (src =
recording rank, or dst null), so a link is counted once; a group-local peer is never shown as a global rank:
its traffic goes to dst null.

**Verdicts**: ``slow_links`` (``SLOW_LINK_RULE``) states its rule and threshold in every row. Which rank
holds the others up is ``analysis/waiting.py``'s, from the arrivals at these instances.
"""
from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from decimal import Decimal

import pyarrow as pa

from perfsight.analysis.job import EXACT_MEDIAN, Job
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
                    ("recv", "recv"), ("receive", "recv"), ("batchsendrecv", "sendrecv"), ("barrier", "barrier"))
#: the point-to-point kinds (HCCL's hcom_send, hcom_receive, hcom_batchSendRecv; torch's send, recv): a group
#: whose operations are all of them is a ``p2p`` group, and a send, its recv and a batched send-recv are one
#: instance
P2P_KINDS = ("send", "recv", "sendrecv")
#: ``P2P_KINDS`` as an SQL list
P2P_KINDS_SQL = "(" + ", ".join(f"'{kind}'" for kind in P2P_KINDS) + ")"


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

#: an operation's record: rank, slice, step, name, group and place in it (OPERATIONS, COLLECTIVE_FIGURES)
_OPERATION = [
    pa.field("rank", pa.int32()),
    pa.field("slice_id", pa.int64()),
    pa.field("step", pa.int32()),
    pa.field("source", pa.string()),
    pa.field("op_name", pa.string()),
    pa.field("collective", pa.string()),
    pa.field("process_group", pa.string()),
    pa.field("group_ranks", pa.list_(pa.int32())),
    pa.field("ranks_global", pa.bool_()),
    pa.field("sequence", pa.int64()),
    pa.field("peer", pa.int32()),
]

#: a rank's operations as the cross-rank figures need them (``rank_operations``: the map's summary)
OPERATIONS = pa.schema([
    *_OPERATION,
    ("kind", pa.string()),
    ("group_name", pa.string()),
    ("src_rank", pa.int32()),
    ("dst_rank", pa.int32()),
    ("dtype", pa.string()),
    ("in_bytes", pa.int64()),
    ("out_bytes", pa.int64()),
    ("bytes", pa.int64()),
    ("group_size", pa.int64()),
    ("ranks", pa.int64()),
    ("start_ns", pa.int64()),
    ("dur_ns", pa.int64()),
    ("end_ns", pa.int64()),
    ("reported", pa.bool_()),
    ("links_reported", pa.bool_()),
    ("figures_from", pa.string()),
    ("reported_start_ns", pa.int64()),
    *(pa.field(f"reported_{field.name}", field.type) for field in TIME_FIGURES),
])

COLLECTIVE_FIGURES = pa.schema([
    *_OPERATION,
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

#: a slow link: bandwidth below this share of the median of the links of its transport ...
SLOW_LINK_SHARE = 0.8
#: ... among at least this many such links
SLOW_LINK_MIN_LINKS = 2
#: the mean bytes per operation below which a link's transfers are latency-bound (96-byte sends run at 0.02
#: GB/s on a link that moves 1 GB at full speed): such a link's bandwidth says nothing of the link; it is not
#: judged and sets no median
SLOW_LINK_MIN_BYTES = 1_000_000
SLOW_LINK_THRESHOLD = (f"bandwidth < {SLOW_LINK_SHARE:.0%} of the median of its transport's links, "
                       f"with at least {SLOW_LINK_MIN_LINKS} links; only links whose operations move "
                       f"{SLOW_LINK_MIN_BYTES / 1e6:g} MB or more on average are judged")
SLOW_LINK_RULE = ("a link (src, dst) whose bandwidth (transit bytes / transit time over its operations) is "
                  "below the share of the median bandwidth of the links of its transport that move enough bytes "
                  "per operation to be bandwidth-bound")

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

# The communication kernels each backend host range launched (a launch call inside the range, its kernel by
# correlation, on the rank's streams): the collective's device time when no kernel carries its metadata.
_LAUNCHED_SQL = """
WITH ranges AS (
    SELECT s.id, s.track_id, t.rank, s.start_ns, s.start_ns + s.dur_ns AS end_ns
    FROM slices s JOIN tracks t USING (track_id)
    WHERE s.kind = 'comm' AND t.kind = 'thread' AND regexp_matches(s.name, $backend)
), calls AS (
    SELECT s.track_id, s.start_ns, s.correlation_id FROM slices s
    WHERE s.kind IN ('runtime', 'driver') AND s.correlation_id IS NOT NULL
), kernels AS (
    SELECT s.id, t.rank, s.correlation_id, s.start_ns, s.start_ns + s.dur_ns AS end_ns
    FROM slices s JOIN tracks t USING (track_id)
    WHERE s.kind = 'comm' AND t.kind = 'stream' AND s.correlation_id IS NOT NULL
)
SELECT r.id, arg_min(k.id, k.start_ns) AS kernel_id, min(k.start_ns) AS start_ns, max(k.end_ns) AS end_ns
FROM ranges r JOIN calls c ON c.track_id = r.track_id AND c.start_ns >= r.start_ns AND c.start_ns < r.end_ns
JOIN kernels k ON k.correlation_id = c.correlation_id AND k.rank IS NOT DISTINCT FROM r.rank
GROUP BY r.id
"""

SOURCES = ("device", "host record", "host annotation")
#: the process group of the operations whose group the trace does not say
UNRECORDED_GROUP = "unrecorded"
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


def _group_ranks_from(ranks: list[int] | None, size: int | None) -> list[int] | None:
    """A group's ranks another record of the group gave, for a record whose own list was cut without a start
    and stride to rebuild it (Kineto's NCCL kernels): when its size says as many (or nothing)."""
    return ranks if ranks and (size is None or size == len(ranks)) else None


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
    rows = tables.sql(_CANDIDATES_SQL, params=params).to_arrow_table().to_pylist()
    untimed = any(row["source"] == 3 and row["dur_ns"] is None for row in rows)    # NCCL's ranges: their kernels'
    launched = {row[0]: row[1:] for row in tables.sql(_LAUNCHED_SQL, params={"backend": BACKEND_RANGE}).fetchall()
                } if untimed else {}
    best: dict[int, int] = {}
    members: dict[tuple, list[int]] = {}      # (rank, group) -> its ranks, from any record of the group
    only = {rank: _only_group(facts.get("distributed_info")) for rank, facts in computed(rank_meta, tables).items()}
    for row in rows:
        best[row["rank"]] = min(best.get(row["rank"], 4), row["source"])
        row["group_ranks"] = _group_ranks(row["group_ranks_text"], row["group_size"], row["rank_start"],
                                          row["rank_stride"])
        if row["group_ranks"] and row["process_group"] is not None:
            members.setdefault((row["rank"], row["process_group"]), row["group_ranks"])
    out = []
    for row in rows:
        if row["source"] != best[row["rank"]]:
            continue
        if row["process_group"] is None:
            group, ranks = only.get(row["rank"]) or (UNRECORDED_GROUP, None)
            row["process_group"] = group
            row["group_ranks"] = row["group_ranks"] or ranks
        collective, dtype, in_nelems = row["collective"], row["dtype"], row["in_nelems"]
        if row["source"] == 3:
            collective = row["name"].split(":", 1)[1]
            in_nelems, shapes = _elements(row["input_shapes"])
            dtype = _first_dtype(row["input_dtypes"], shapes)
            if row["dur_ns"] is None and row["id"] in launched:    # its kernels' time: the collective's own
                row["id"], row["start_ns"], end = launched[row["id"]]
                row["dur_ns"] = end - row["start_ns"]
        peer = next((p for p in (row["dst_rank"], row["src_rank"]) if p is not None and p >= 0 and p != row["rank"]),
                    None)
        out.append({
            "rank": row["rank"], "slice_id": row["id"], "source": SOURCES[row["source"] - 1],
            "collective": collective, "start_ns": row["start_ns"], "dur_ns": row["dur_ns"], "dtype": dtype,
            "in_nelems": in_nelems, "out_nelems": row["out_nelems"], "in_bytes": _bytes(in_nelems, dtype),
            "out_bytes": _bytes(row["out_nelems"], dtype), "group_size": row["group_size"],
            "process_group": row["process_group"], "peer": peer,
            "group_ranks": row["group_ranks"] or _group_ranks_from(
                members.get((row["rank"], row["process_group"])), row["group_size"]),
            "src_rank": row["src_rank"], "dst_rank": row["dst_rank"],
            "step": row["step"], "op_name": row["name"], "hccl": row["task_type"] == "HCCL",
            "ranks_global": not row["ranks_local"], "time_info": _json(row["time_info"]),
            "bandwidth_info": _json(row["bandwidth_info"]), "figures_from": row["figures_from"],
        })
    return out


def _pg_config(distributed_info: str | None) -> list[dict]:
    """The process groups a rank made, as torch's ``distributedInfo`` lists them (``pg_config``: each with
    ``pg_name``, ``pg_desc``, ``ranks``...); none when the meta holds no such list."""
    try:
        info = json.loads(distributed_info) if distributed_info else None
    except ValueError:
        return []
    groups = info.get("pg_config") if isinstance(info, dict) else None
    return [group for group in groups if isinstance(group, dict)] if isinstance(groups, list) else []


def _only_group(distributed_info: str | None) -> tuple[str, list[int] | None] | None:
    """The name and global ranks of a rank's one process group (``_pg_config``), or None when it made none or
    several (then an operation that does not say its group cannot be placed)."""
    groups = _pg_config(distributed_info)
    if len(groups) != 1 or not isinstance(groups[0].get("pg_name"), (str, int)):
        return None
    ranks = groups[0].get("ranks")
    fine = isinstance(ranks, list) and all(isinstance(r, int) and 0 <= r < MAX_GROUP_SIZE for r in ranks)
    return str(groups[0]["pg_name"]), (sorted(ranks) if fine and ranks else None)


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


# ---- the map: one rank's operations, its reported links and matrix (per-rank summaries, ``analysis/job.py``)

def rank_operations(tables: RunTables) -> pa.Table:
    """Each rank's operations (``collectives``) as the cross-rank figures need them (schema ``OPERATIONS``):
    the ``kind`` (``collective_kind``), ``sequence`` in its group, message ``bytes``, the group's number of
    ``ranks``, ``end_ns``, the framework's ``group_name``, and the figures the rank's files reported
    (``reported``; ``reported_*`` columns, ms -> ns) and whether they reported its links
    (``links_reported``: ``reported_links``). Per rank, computed on that rank's tables alone: the map of a
    job's analysis. Sorted by rank, start."""
    counters: dict[tuple, int] = defaultdict(int)
    descriptions = _descriptions(tables)
    rows = []
    for op in computed(_operations, tables):
        key = (op["rank"], op["process_group"])
        sizes = [b for b in (op["in_bytes"], op["out_bytes"]) if b is not None]
        reported = _reported(op["time_info"], op["figures_from"]) if op["time_info"] is not None else {}
        rows.append({
            **op, "kind": collective_kind(op["collective"]), "sequence": counters[key],
            "source": "hccl" if op["hccl"] else op["source"], "bytes": max(sizes) if sizes else None,
            "ranks": len(op["group_ranks"]) if op["group_ranks"] else op["group_size"],
            "end_ns": op["start_ns"] + op["dur_ns"] if op["dur_ns"] is not None else None,
            "group_name": descriptions.get(op["process_group"]) if op["process_group"] else None,
            "reported": bool(reported), "links_reported": op["bandwidth_info"] is not None,
            "figures_from": reported.pop("figures_from", "computed"),
            **{name if name.startswith("reported") else f"reported_{name}": value for name, value in reported.items()}})
        counters[key] += 1
    return pa.Table.from_pylist(rows, schema=OPERATIONS)


def reported_links(tables: RunTables) -> pa.Table:
    """Per rank, operation and link type (schema ``LINK_BANDWIDTH``) of the operations whose files reported
    their links: Ascend's ``Communication Bandwidth Info`` (HCCS, PCIE, RDMA, SDMA, SIO, ...: MB -> bytes,
    ms -> ns, GB/s, large packet ratio, packet sizes). Sorted by rank, start, link type."""
    rows = []
    for op in computed(_operations, tables):
        for link, info in sorted((op["bandwidth_info"] or {}).items()):
            if not isinstance(info, dict):
                continue
            size, bandwidth, ratio = (info.get(k) for k in ("Transit Size(MB)", "Bandwidth(GB/s)",
                                                             "Large Packet Ratio"))
            rows.append({"rank": op["rank"], "slice_id": op["slice_id"], "step": op["step"], "op_name": op["op_name"],
                         "process_group": op["process_group"], "link_type": link,
                         "transit_ns": _ns(info.get("Transit Time(ms)")),
                         "transit_bytes": round(size * _BYTES_PER_MB) if isinstance(size, (int, float)) else None,
                         "bandwidth_gbps": bandwidth if isinstance(bandwidth, (int, float)) else None,
                         "large_packet_ratio": ratio if isinstance(ratio, (int, float)) else None,
                         "size_distribution": _packets(info.get("Size Distribution"))})
    return pa.Table.from_pylist(rows, schema=LINK_BANDWIDTH)


def reported_matrix(tables: RunTables) -> pa.Table:
    """Per rank whose meta holds ``communication_matrix`` (Ascend's communication_matrix.json, ingest), its
    links as reported (schema ``COMMUNICATION_MATRIX``; ``source`` "communication_matrix.json"; module
    docstring). Sorted by rank, in the file's order."""
    rows = []
    for rank, facts in sorted(computed(rank_meta, tables).items()):
        if facts.get("communication_matrix"):
            rows += _reported_links(rank, facts["communication_matrix"])
    return pa.Table.from_pylist(rows, schema=COMMUNICATION_MATRIX)


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


def _share(part: int | None, other: int | None) -> float | None:
    """part / (part + other), as msprof-analyze's ratios (None when unknown or both 0)."""
    return part / (part + other) if part is not None and other is not None and part + other else None


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


def _descriptions(tables: RunTables) -> dict[str, str]:
    """Each process group's description: its operations' ``Process Group Desc`` args, else the ``pg_desc`` of
    torch's ``distributedInfo``."""
    query = """
        SELECT json_extract_string(args, '$."Process Group Name"') AS pg,
               any_value(coalesce(json_extract_string(args, '$."Process Group Desc"'),
                                  json_extract_string(args, '$."Process Group Description"'))) AS description
        FROM (SELECT CASE WHEN json_valid(args) THEN args END AS args FROM slices WHERE kind = 'comm')
        GROUP BY pg HAVING pg IS NOT NULL
    """
    described = {pg: desc for pg, desc in tables.sql(query).fetchall() if desc}
    for facts in computed(rank_meta, tables).values():
        for group in _pg_config(facts.get("distributed_info")):
            if isinstance(group.get("pg_desc"), str):
                described.setdefault(str(group.get("pg_name")), group["pg_desc"])
    return described


# ---- the reduce: the cross-rank figures over a job's summaries (``analysis/job.py``)

#: nccl-tests' bus bandwidth factor per collective for a group of n ranks (busbw = algbw x factor), as DuckDB
#: expressions of n
BUS_FACTORS = {
    "allreduce": "2 * ({n} - 1) / {n}",
    "allgather": "({n} - 1) / {n}",
    "reducescatter": "({n} - 1) / {n}",
    "alltoall": "({n} - 1) / {n}",
    "broadcast": "1.0",
    "reduce": "1.0",
    "send": "1.0",
    "recv": "1.0",
    "sendrecv": "1.0",
}


def _bus_factor_sql(kind: str, ranks: str) -> str:
    """SQL: the bus factor (``BUS_FACTORS``) of collective kind column ``kind`` for ``ranks`` (null when
    unknown, less than 1, or a kind without one)."""
    cases = " ".join(f"WHEN {kind} = '{name}' THEN {factor.format(n=ranks)}" for name, factor in BUS_FACTORS.items())
    return f"(CASE WHEN {ranks} >= 1 THEN CASE {cases} END END)"


def _members_sql(source: str) -> str:
    """SQL: the rows of relation ``source`` (operations) that are members of their instance (module docstring):
    of the kind most rows of the (group, sequence) have, a send and a recv one kind, ties to the first kind by
    name."""
    family = f"CASE WHEN kind IN {P2P_KINDS_SQL} THEN 'sendrecv' ELSE kind END"
    return f"""(
        SELECT o.* FROM (SELECT *, {family} AS family FROM {source}) o
        JOIN (SELECT process_group, sequence, {family} AS family FROM {source} GROUP BY 1, 2, 3
              QUALIFY row_number() OVER (PARTITION BY process_group, sequence ORDER BY count(*) DESC, family) = 1) c
          ON c.process_group IS NOT DISTINCT FROM o.process_group AND c.sequence = o.sequence AND c.family = o.family
    )"""


#: collectives every member leaves at about the same moment (a broadcast's root, a reduce's senders and a
#: send may leave early): the instances clock offsets are estimated from
SYMMETRIC_KINDS = ("allreduce", "allgather", "reducescatter", "alltoall", "barrier")

_DIFFERENCES_SQL = f"""
WITH members AS {_members_sql(f"(SELECT * FROM operations WHERE end_ns IS NOT NULL AND kind IN {SYMMETRIC_KINDS})")},
instances AS (
    SELECT process_group, sequence, max(end_ns) FILTER (WHERE rank = $reference) AS reference_end
    FROM members GROUP BY ALL HAVING count(*) > 1 AND reference_end IS NOT NULL
)
SELECT m.rank, round_even(median(m.end_ns - i.reference_end), 0)::BIGINT AS estimate_ns, count(*) AS used,
       max(m.end_ns - i.reference_end) - min(m.end_ns - i.reference_end) AS spread_ns
FROM members m JOIN instances i ON i.process_group IS NOT DISTINCT FROM m.process_group AND i.sequence = m.sequence
GROUP BY m.rank
"""


def clock_offsets(job: Job) -> pa.Table:
    """Per rank (schema ``CLOCK_OFFSETS``): its clock's ``offset_ns`` from the ``reference_rank``'s (the
    lowest rank), ``estimate_ns`` the median over the ``collectives_used`` (timed instances of
    ``SYMMETRIC_KINDS`` it shares with the reference) of its end minus the reference's end, ``spread_ns``
    the largest minus the smallest of those differences, and the ``method``. The offset is the estimate,
    except for a rank on the reference's host (its run manifest's ``host``), which shares its clock: 0
    (the estimate is then the collectives' own end skew), and a rank sharing no instance: 0. Sorted by
    rank; empty for a job without ranks."""
    con = job.connect()
    hosts = dict(con.sql("SELECT rank, host FROM rank_facts").fetchall())
    ranks = sorted(hosts)
    if not ranks:
        return CLOCK_OFFSETS.empty_table()
    reference = ranks[0]
    found = {row[0]: row[1:] for row in con.sql(_DIFFERENCES_SQL, params={"reference": reference}).fetchall()}
    rows = []
    for rank in ranks:
        estimate, used, spread = found.get(rank, (0, 0, 0))
        if rank == reference:
            method, offset = "reference rank", 0
        elif hosts[rank] is not None and hosts[rank] == hosts[reference]:
            method, offset = f"same host as the reference rank ({hosts[rank]}): one clock", 0
        elif used:
            method, offset = "median of (end - reference end) over shared symmetric collective instances", estimate
        else:
            method, offset = "no timed collective shared with the reference rank: offset 0 assumed", 0
        rows.append({"rank": rank, "offset_ns": offset, "reference_rank": reference, "collectives_used": used,
                     "spread_ns": spread, "method": method, "estimate_ns": estimate})
    return pa.Table.from_pylist(rows, schema=CLOCK_OFFSETS)


_FIGURES_SQL = f"""
WITH aligned AS (
    SELECT o.*, o.start_ns - coalesce(c.offset_ns, 0) AS aligned_start_ns
    FROM operations o LEFT JOIN offsets c USING (rank)
), members AS {_members_sql("aligned")},
instances AS (
    SELECT process_group, sequence, count(*) AS members,
           CASE WHEN count(DISTINCT rank) > 1 THEN max(aligned_start_ns) END AS last_start_ns
    FROM members GROUP BY ALL
), marked AS (
    SELECT m.rank, m.slice_id, i.members, i.last_start_ns
    FROM members m JOIN instances i ON i.process_group IS NOT DISTINCT FROM m.process_group AND i.sequence = m.sequence
), timed AS (
    SELECT a.*, coalesce(k.members, 1) AS members,
           CASE WHEN a.dur_ns IS NOT NULL AND k.last_start_ns IS NOT NULL
                THEN least(greatest(k.last_start_ns - a.aligned_start_ns, 0), a.dur_ns) END AS computed_wait_ns
    FROM aligned a LEFT JOIN marked k USING (rank, slice_id)
), figures AS (
    SELECT *,
           CASE WHEN reported THEN reported_elapse_ns ELSE dur_ns END AS elapse_ns,
           CASE WHEN reported THEN reported_transit_ns ELSE dur_ns - computed_wait_ns END AS transit_ns,
           CASE WHEN reported THEN reported_wait_ns ELSE computed_wait_ns END AS wait_ns,
           CASE WHEN reported THEN reported_sync_ns ELSE computed_wait_ns END AS sync_ns,
           CASE WHEN reported THEN reported_idle_ns WHEN computed_wait_ns IS NOT NULL THEN 0 END AS idle_ns,
           CASE WHEN reported THEN reported_wait_ratio WHEN dur_ns <> 0 THEN computed_wait_ns / dur_ns END
               AS wait_ratio,
           CASE WHEN reported THEN reported_sync_ratio WHEN dur_ns <> 0 THEN computed_wait_ns / dur_ns END
               AS sync_ratio
    FROM timed
)
SELECT rank, slice_id, step, source, op_name, kind AS collective, process_group, group_ranks, ranks_global, sequence,
       peer, dtype, bytes, start_ns, aligned_start_ns, reported_start_ns, elapse_ns, transit_ns, wait_ns, sync_ns,
       idle_ns, wait_ratio, sync_ratio, algbw_gbps, algbw_gbps * {_bus_factor_sql("kind", "ranks")} AS busbw_gbps,
       figures_from, in_bytes, out_bytes, group_size, members
FROM (SELECT *, CASE WHEN transit_ns <> 0 THEN bytes / transit_ns END AS algbw_gbps FROM figures)
ORDER BY rank, start_ns, slice_id
"""


def collective_figures(job: Job) -> pa.Table:
    """One row per communication operation per rank (schema ``COLLECTIVE_FIGURES``; the module docstring
    defines each figure): its record, kind, group, ``sequence``, size, own and aligned start, elapse,
    transit, wait, synchronisation and idle time with their ratios, algorithm and bus bandwidth, and where
    the figures come from; added: ``in_bytes``, ``out_bytes``, ``group_size`` and ``members`` (the ranks
    traced in its instance). Sorted by rank, start."""
    con = job.connect()
    con.register("offsets", computed(clock_offsets, job))
    return con.sql(_FIGURES_SQL).to_arrow_table().cast(COLLECTIVE_FIGURES)


def _figures_connection(job: Job):
    """A connection to ``job`` with ``figures`` (``collective_figures``) registered."""
    con = job.connect()
    con.register("figures", computed(collective_figures, job))
    return con


_LINK_BANDWIDTH_SQL = """
SELECT * EXCLUDE (start_ns) FROM (
    SELECT l.*, f.start_ns FROM reported_links l JOIN figures f USING (rank, slice_id)
    UNION ALL BY NAME
    SELECT f.rank, f.slice_id, f.step, f.op_name, f.process_group, f.start_ns,
           CASE WHEN o.ranks = 1 THEN 'LOCAL' ELSE 'UNKNOWN' END AS link_type, f.bytes AS transit_bytes,
           f.transit_ns, f.algbw_gbps AS bandwidth_gbps, NULL::DOUBLE AS large_packet_ratio, NULL AS size_distribution
    FROM figures f JOIN operations o USING (rank, slice_id) WHERE NOT o.links_reported)
ORDER BY rank, start_ns, slice_id, link_type
"""


def link_bandwidth(job: Job) -> pa.Table:
    """Per rank, operation and link type (schema ``LINK_BANDWIDTH``): the links the rank's files reported
    (``reported_links``), else one row per operation: link type ``LOCAL`` for a group of one, ``UNKNOWN``
    otherwise (a trace does not say which links NCCL or gloo used), its message bytes over its transit
    time (bandwidth = ``algbw_gbps``; distribution null). Sorted by rank, start, link type."""
    return _figures_connection(job).sql(_LINK_BANDWIDTH_SQL).to_arrow_table().cast(LINK_BANDWIDTH)


def _share_sql(part: str, other: str) -> str:
    """SQL: ``_share`` of two columns."""
    return f"CASE WHEN {part} + {other} <> 0 THEN {part} / ({part} + {other}) END"


_TOTALS_SQL = f"""
SELECT *, {_share_sql("wait_ns", "transit_ns")} AS wait_ratio, {_share_sql("sync_ns", "transit_ns")} AS sync_ratio,
       algbw_gbps * {_bus_factor_sql("collective", "ranks")} AS busbw_gbps
FROM (
    SELECT f.rank, f.process_group, f.collective, count(*) AS operations, count(f.transit_ns) AS timed,
           sum(f.bytes)::BIGINT AS bytes, round_even(avg(f.bytes), 0)::BIGINT AS mean_bytes,
           sum(f.elapse_ns)::BIGINT AS elapse_ns, sum(f.transit_ns)::BIGINT AS transit_ns,
           sum(f.wait_ns)::BIGINT AS wait_ns, sum(f.sync_ns)::BIGINT AS sync_ns, sum(f.idle_ns)::BIGINT AS idle_ns,
           max(o.ranks) FILTER (WHERE o.ranks <> 0) AS ranks,
           CASE WHEN sum(f.transit_ns) FILTER (WHERE f.bytes IS NOT NULL) <> 0
                THEN sum(f.bytes) FILTER (WHERE f.transit_ns IS NOT NULL)
                     / sum(f.transit_ns) FILTER (WHERE f.bytes IS NOT NULL) END AS algbw_gbps
    FROM figures f JOIN operations o USING (rank, slice_id)
    GROUP BY f.rank, f.process_group, f.collective)
ORDER BY wait_ns DESC NULLS LAST, rank, process_group NULLS LAST, collective
"""


def collective_totals(job: Job) -> pa.Table:
    """Per rank, process group and collective kind, ``collective_figures`` summed (schema
    ``COLLECTIVE_TOTALS``; msprof-analyze's "Total Op Info" per rank and group, split by kind): the
    ``operations``, those ``timed`` (transit known), their message ``bytes`` and ``mean_bytes``, the sums
    of ``elapse_ns``, ``transit_ns``, ``wait_ns``, ``sync_ns`` and ``idle_ns`` over the operations where
    each is known (null when none is), ``wait_ratio`` = wait / (wait + transit) and ``sync_ratio`` = sync /
    (sync + transit) of those sums, ``algbw_gbps`` = the bytes of the operations with bytes and transit
    known over their transit, and ``busbw_gbps`` = algbw x the kind's nccl-tests factor for the group
    (``BUS_FACTORS``). Sorted by wait, longest first (null last), then rank, group, collective."""
    return _figures_connection(job).sql(_TOTALS_SQL).to_arrow_table().select(COLLECTIVE_TOTALS.names).cast(
        COLLECTIVE_TOTALS)


_LINK_TOTALS_SQL = """
WITH links AS (SELECT * FROM link_bandwidth), packets AS (
    SELECT rank, link_type, p.packet_bytes, sum(p.count)::BIGINT AS count, sum(coalesce(p.dur_ns, 0))::BIGINT AS dur_ns
    FROM (SELECT rank, link_type, unnest(size_distribution) AS p FROM links) GROUP BY ALL
), distributions AS (
    SELECT rank, link_type,
           list({'packet_bytes': packet_bytes, 'count': count, 'dur_ns': dur_ns} ORDER BY packet_bytes) AS merged
    FROM packets GROUP BY ALL
)
SELECT l.rank, l.link_type, count(*) AS operations, sum(l.transit_bytes)::BIGINT AS transit_bytes,
       sum(l.transit_ns)::BIGINT AS transit_ns,
       CASE WHEN sum(l.transit_ns) <> 0 THEN sum(l.transit_bytes) / sum(l.transit_ns) END AS bandwidth_gbps,
       CASE WHEN bool_or(l.size_distribution IS NOT NULL) THEN coalesce(any_value(d.merged), []) END
           AS size_distribution
FROM links l LEFT JOIN distributions d USING (rank, link_type)
GROUP BY l.rank, l.link_type ORDER BY l.rank, l.link_type
"""


def link_totals(job: Job) -> pa.Table:
    """Per rank and link type, ``link_bandwidth`` summed (schema ``LINK_TOTALS``; msprof-analyze's "Total
    Op Info" bandwidth per link type): the ``operations``, ``transit_bytes`` and ``transit_ns`` summed over
    the rows where each is known, ``bandwidth_gbps`` = bytes / ns (null without transit time), and the
    ``size_distribution`` merged: per packet size, counts and times summed (null when no row has one).
    Sorted by rank, link type."""
    con = job.connect()
    con.register("link_bandwidth", computed(link_bandwidth, job))
    return con.sql(_LINK_TOTALS_SQL).to_arrow_table().cast(LINK_TOTALS)


#: the largest group whose operations are computed matrix cells by pair of ranks (module docstring): a tensor-,
#: pipeline- or expert-parallel group, or a data-parallel one of a job of up to 64 nodes of 8 ranks. At 256 a
#: 1,024-rank job's data-parallel groups (128 ranks) made 850k cells a step, which took the driver to 900 MiB and
#: 13 s writing msprof-analyze's matrix files, cells that say only that every member took part
PAIRED_GROUP_RANKS = 64

_COMPUTED_LINKS_SQL = f"""
WITH instances AS (
    SELECT process_group, sequence, list(DISTINCT rank) AS traced FROM {_members_sql("operations")}
    GROUP BY ALL HAVING count(DISTINCT rank) > 1
), ops AS (
    SELECT f.* REPLACE (coalesce(f.peer, CASE WHEN o.kind IN {P2P_KINDS_SQL} AND len(i.traced) = 2
                                              THEN list_filter(i.traced, lambda r: r <> f.rank)[1] END) AS peer),
           o.kind, CASE WHEN len(f.group_ranks) > 0 THEN f.group_ranks ELSE i.traced END AS known_ranks
    FROM figures f JOIN operations o USING (rank, slice_id)
    LEFT JOIN instances i ON i.process_group IS NOT DISTINCT FROM f.process_group AND i.sequence = f.sequence
    WHERE f.rank NOT IN (SELECT DISTINCT rank FROM reported_matrix)
), pairs AS (
    SELECT *, rank AS src, NULL::INTEGER AS dst FROM ops
    WHERE NOT ranks_global OR (peer IS NULL AND (coalesce(len(known_ranks), 0) = 0 OR len(known_ranks) > $paired))
    UNION ALL BY NAME
    SELECT *, CASE WHEN kind = 'recv' THEN peer ELSE rank END AS src,
           CASE WHEN kind = 'recv' THEN rank ELSE peer END AS dst
    FROM ops WHERE ranks_global AND peer IS NOT NULL
    UNION ALL BY NAME
    SELECT * EXCLUDE (others), rank AS src, unnest(others) AS dst
    FROM (SELECT *, list_filter(known_ranks, lambda r: r <> rank) AS others FROM ops
          WHERE ranks_global AND peer IS NULL AND len(known_ranks) BETWEEN 1 AND $paired)
)
SELECT rank, step, process_group, kind AS key,
       first(op_name ORDER BY coalesce(bytes, 0) DESC, start_ns, slice_id) AS op_name, src AS src_rank, dst AS dst_rank,
       CASE WHEN src = dst THEN 'LOCAL' ELSE 'UNKNOWN' END AS transport, sum(bytes)::BIGINT AS transit_bytes,
       CASE WHEN count(transit_ns) = count(*) THEN sum(transit_ns)::BIGINT END AS transit_ns,
       CASE WHEN count(transit_ns) = count(*) AND sum(transit_ns) <> 0 THEN sum(bytes) / sum(transit_ns) END
           AS bandwidth_gbps,
       count(*) AS collectives, 'computed' AS source, true AS total, true AS ranks_global
FROM pairs GROUP BY rank, step, process_group, kind, src, dst
"""

_MATRIX_SQL = f"""
SELECT * FROM (SELECT * FROM reported_matrix UNION ALL BY NAME ({_COMPUTED_LINKS_SQL}))
ORDER BY rank NULLS LAST, step NULLS LAST, process_group NULLS LAST, key NULLS LAST, src_rank NULLS LAST,
         dst_rank NULLS LAST
"""


def communication_matrix(job: Job) -> pa.Table:
    """Per recording rank, step, group, key and (src, dst) global-rank pair (schema
    ``COMMUNICATION_MATRIX``; the module docstring says what a cell is): transport, transit bytes and time,
    bandwidth (GB/s), the operations counted, where the row comes from, and whether it is a ``total`` row.
    Sorted by rank, step, group, key, src, dst (null last)."""
    matrix = _figures_connection(job).sql(_MATRIX_SQL, params={"paired": PAIRED_GROUP_RANKS}).to_arrow_table()
    return matrix.select(COMMUNICATION_MATRIX.names).cast(COMMUNICATION_MATRIX)


_PAIRS_SQL = """
WITH sent AS (
    SELECT rank AS src_rank, CASE WHEN ranks_global THEN dst_rank END AS dst_rank, transport,
           transit_bytes, transit_ns, collectives
    FROM m WHERE total AND (src_rank = rank OR NOT ranks_global)
)
SELECT src_rank, dst_rank,
       CASE WHEN count(DISTINCT transport) > 1 THEN 'MIXED' ELSE any_value(transport) END AS transport,
       sum(transit_bytes)::BIGINT AS transit_bytes,
       CASE WHEN count(transit_ns) = count(*) THEN sum(transit_ns)::BIGINT END AS transit_ns,
       CASE WHEN count(transit_ns) = count(*) AND sum(transit_ns) <> 0 THEN sum(transit_bytes) / sum(transit_ns) END
           AS bandwidth_gbps,
       sum(collectives)::BIGINT AS collectives
FROM sent GROUP BY src_rank, dst_rank ORDER BY src_rank, dst_rank NULLS LAST
"""


def communication_pairs(job: Job) -> pa.Table:
    """Per (src, dst) pair (schema ``COMMUNICATION_PAIRS``): the ``communication_matrix`` total rows the
    sender recorded (src = recording rank; dst null: the rank's operations whose peers are not recorded, or
    known only by their group-local position, ``ranks_global`` false: never shown as a global rank),
    summed over steps, groups and keys: transport (``MIXED`` when several), bytes, time, bandwidth and the
    operations counted. Sorted by src, dst (null last)."""
    con = job.connect()
    con.register("m", computed(communication_matrix, job))
    return con.sql(_PAIRS_SQL).to_arrow_table().cast(COMMUNICATION_PAIRS)


_SLOW_LINKS_SQL = """
WITH links AS (
    SELECT *, transit_bytes >= $min_bytes * greatest(collectives, 1) AS judged FROM pairs
    WHERE dst_rank IS NOT NULL AND src_rank <> dst_rank AND bandwidth_gbps <> 0
), medians AS (
    SELECT transport, exact_median(list(bandwidth_gbps)) AS median_gbps, count(*) AS links FROM links WHERE judged
    GROUP BY ALL
)
SELECT l.src_rank, l.dst_rank, l.transport, l.transit_bytes, l.transit_ns, l.bandwidth_gbps, m.median_gbps, m.links,
       CASE WHEN l.judged THEN coalesce(m.links >= $links AND l.bandwidth_gbps < $share * m.median_gbps, false) END
           AS slow, $rule AS rule, $threshold AS threshold
FROM links l LEFT JOIN medians m USING (transport)
ORDER BY l.src_rank, l.dst_rank
"""


def slow_links(job: Job) -> pa.Table:
    """Per link of ``communication_pairs`` between two ranks with a transit time (schema ``SLOW_LINKS``;
    same-rank ``LOCAL`` links and unknown peers left out): its bandwidth, the median bandwidth of the
    ``links`` of its transport that move ``SLOW_LINK_MIN_BYTES`` per operation or more, and ``slow`` by
    ``SLOW_LINK_RULE`` (``rule`` and ``threshold`` in every row; a transport with fewer than
    ``SLOW_LINK_MIN_LINKS`` such links has no slow link; a link of smaller transfers is not judged: ``slow``
    null). Sorted by src, dst."""
    return judged_links(computed(communication_pairs, job))


def judged_links(pairs: pa.Table) -> pa.Table:
    """``slow_links`` of the links in ``pairs`` (schema ``COMMUNICATION_PAIRS``)."""
    con = new_connection()
    con.execute(EXACT_MEDIAN)
    con.register("pairs", pairs)
    params = {"links": SLOW_LINK_MIN_LINKS, "share": SLOW_LINK_SHARE, "min_bytes": SLOW_LINK_MIN_BYTES,
              "rule": SLOW_LINK_RULE, "threshold": SLOW_LINK_THRESHOLD}
    return con.sql(_SLOW_LINKS_SQL, params=params).to_arrow_table().cast(SLOW_LINKS)


_GROUPS_SQL = f"""
SELECT process_group, CASE WHEN process_group IS NOT NULL THEN any_value(group_name) END AS group_name,
       CASE WHEN bool_and(kind IN {P2P_KINDS_SQL}) THEN 'p2p' ELSE 'collective' END AS kind,
       coalesce(list_sort(first(group_ranks ORDER BY rank, start_ns, slice_id) FILTER (WHERE len(group_ranks) > 0)),
                list_sort(list(DISTINCT rank))) AS ranks,
       coalesce(first(ranks_global ORDER BY rank, start_ns, slice_id) FILTER (WHERE len(group_ranks) > 0), true)
           AS ranks_global,
       CASE WHEN count(*) FILTER (WHERE len(group_ranks) > 0) > 0 THEN 'Process Group Ranks'
            ELSE 'ranks that recorded its operations' END AS source
FROM operations GROUP BY process_group ORDER BY process_group NULLS LAST
"""


def communication_groups(job: Job) -> pa.Table:
    """One row per process group seen in the operations (schema ``COMMUNICATION_GROUPS``): its name
    (``group_name``: the framework's, ``Process Group Desc`` / ``Process Group Description``), ``kind``
    (``p2p`` when all its operations are of ``P2P_KINDS``), its ``ranks`` (recorded ``Process Group Ranks``, else
    the traced ranks that ran its operations) with ``ranks_global`` and the ``source`` of the ranks. The
    group not recorded has a null name. Sorted by group."""
    return job.sql(_GROUPS_SQL).cast(COMMUNICATION_GROUPS)
