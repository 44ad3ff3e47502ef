"""msprof-analyze's cluster figures (``msprof-analyze cluster -m all``, version 26.x) of a job (``Job``): the
cluster step trace, the communication groups keyed by rank set, the per-operator communication time and
bandwidth with msprof-analyze's "Total Op Info" sums, and the communication matrix merged across ranks. The
files that carry them (cluster_analysis_output/) are written by ``views/export/cluster_analysis.py``; every
figure is computed here, in perfsight's units (int64 ns, int64 bytes, GB/s = 1e9 bytes/s = bytes per ns).

* **Step trace** (``cluster_step_trace``): per rank and step, torch_npu's step_trace_time.csv columns.
  Computing, Communication, Overlapped and Communication(Not Overlapped) are ``breakdown.overlap``'s unions
  inside the step; the step's device window runs from the first to the last computing or communication
  instant inside the step (from ``breakdown.overlap_intervals``); Preparing = window start - step start;
  Free = window - (computing ∪ communication); Bubble = the summed elapse of the step's receive operations
  (``collectives.collective_figures``, collective ``recv``); Stage = window - Bubble; Communication(Not
  Overlapped and Exclude Receive) = Communication(Not Overlapped) - Bubble (msprof-analyze's and torch_npu's
  definitions). A rank whose steps came from anything but trace ranges (meta ``step_source``) and that
  carries torch_npu's own rows (meta ``step_trace_time``) gets those rows, converted to ns.
* **Groups** (``cluster_communication_groups``): per communication group, ``recorded_ranks`` = the profiled
  ranks that recorded an operation or a matrix link of the group (msprof-analyze's rank-set key, the
  ``"(0, 1)"`` of its JSON files), and ``rank_set`` = the group's global ranks when perfsight knows them
  (msprof-analyze: parallel_group_info's global_ranks), else ``recorded_ranks``. ``group_name`` is the
  name msprof-analyze gives the group (``msprof_group_name``).
* **Communication time** (``cluster_communication_time``): one row per (operation, rank) from
  ``collectives.collective_figures`` (its start: the reported start where the figures were reported, as
  msprof-analyze writes the file's, else the operation's) and, per (rank-set key, step, group, rank), a
  ``Total Op Info`` row: the sums of elapse, transit, wait, synchronisation and idle, wait ratio = wait /
  (wait + transit), synchronisation ratio = sync / (sync + transit) (0 when the divisor is 0), no start.
* **Bandwidth** (``cluster_communication_bandwidth``): one row per (operation, rank, link type) from
  ``collectives.link_bandwidth`` and the ``Total Op Info`` row per link type: summed transit bytes and
  time, bandwidth = bytes / time, size distributions merged by packet size (counts and durations summed).
* **Matrix** (``cluster_communication_matrix``): ``collectives.communication_matrix``'s links of the same
  (step, group, matrix key, src, dst) recorded by several ranks are summed (transport and operation name:
  the last rank's); in a group whose ranks are group-local (no global mapping), a local rank is mapped to
  the profiled rank that recorded its self-link (``src == dst``) and a link with an end no profiled rank
  owns is left out, as msprof-analyze does; bandwidth = bytes / time. ``Total Op Info`` sums, per link, the
  keys msprof-analyze adds up: those naming none of ``top``, ``middle``, ``bottom`` (torch_npu's per-size
  statistics keys such as ``allreduce-top1``; ``allreduce-total`` is added), transport and operation name
  from the last key added.
* **Devices** (``cluster_rank_devices``): per rank its device id, host uid and name and profile folder.

Operation names: an operation keeps the name recorded when no rank ran two operations of that name in the step
and group (HCCL's names are unique in a step, e.g. ``hcom_allReduce__586_0_1``); otherwise (Kineto's NCCL
kernels, gloo ranges) it is named ``<op_name>_<sequence>``, its instance number in its group, so the same
instance has one name on every rank.
"""
from __future__ import annotations

import pyarrow as pa

from perfsight.analysis import breakdown, collectives
from perfsight.analysis.job import Job
from perfsight.analysis.rank_facts import STEP_TRACE_TIME_HEADERS, job_rank_meta, meta_items, reported_step_trace
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables, new_connection

#: the name of msprof-analyze's per-group sums, in every cluster output
TOTAL_OP_INFO = "Total Op Info"

#: words of the matrix keys msprof-analyze leaves out of Total Op Info (torch_npu's per-size statistics of
#: one operator: allreduce-top1, allreduce-middle, allreduce-bottom1 ...; allreduce-total is added)
MATRIX_STATISTIC_WORDS = ("middle", "top", "bottom")

CLUSTER_STEP_TRACE = pa.schema(
    [("rank", pa.int32()), ("step", pa.int32())]
    + [(column, pa.int64()) for column in STEP_TRACE_TIME_HEADERS.values()]
    + [("source", pa.string())])

CLUSTER_COMMUNICATION_GROUPS = pa.schema([
    ("kind", pa.string()),
    ("process_group", pa.string()),
    ("group_name", pa.string()),
    ("group_id", pa.string()),
    ("pg_name", pa.string()),
    ("rank_set", pa.list_(pa.int32())),
    ("recorded_ranks", pa.list_(pa.int32())),
])

CLUSTER_COMMUNICATION_TIME = pa.schema([
    ("step", pa.int32()),
    ("group_name", pa.string()),
    ("op_name", pa.string()),
    ("rank", pa.int32()),
    ("start_ns", pa.int64()),
    *collectives.TIME_FIGURES,
])

#: link_bandwidth's columns of a link (``collectives.LINK_BANDWIDTH``), kept as they are
_LINK_COLUMNS = ("link_type", "transit_bytes", "transit_ns", "bandwidth_gbps", "large_packet_ratio",
                 "size_distribution")

CLUSTER_COMMUNICATION_BANDWIDTH = pa.schema(
    [("step", pa.int32()), ("group_name", pa.string()), ("op_name", pa.string()), ("rank", pa.int32())]
    + [collectives.LINK_BANDWIDTH.field(name) for name in _LINK_COLUMNS])

CLUSTER_COMMUNICATION_MATRIX = pa.schema([
    ("step", pa.int32()),
    ("group_name", pa.string()),
    ("key", pa.string()),
    ("src_rank", pa.int32()),
    ("dst_rank", pa.int32()),
    ("transport", pa.string()),
    ("op_name", pa.string()),
    ("transit_bytes", pa.int64()),
    ("transit_ns", pa.int64()),
    ("bandwidth_gbps", pa.float64()),
])

CLUSTER_RANK_DEVICES = pa.schema([
    ("rank", pa.int32()),
    ("device_id", pa.int32()),
    ("host_uid", pa.string()),
    ("host_name", pa.string()),
    ("profile_path", pa.string()),
])


def msprof_group_name(process_group: str) -> str:
    """The name msprof-analyze gives a communication group: a name of digits as it is (torch_npu's
    communication.json already writes the hashed name after ``@``), any other name (an HCCL comm name such as
    ``90.91.105.46%enp189s0f0_60000_0_1736410538306028``, a torch process group) hashed as msprof-analyze
    hashes it: two 32-bit polynomial hashes of the characters (primes 29 and 131), the first in the high
    half, as a decimal string."""
    if process_group.isdigit():
        return process_group
    low = high = 0
    for char in process_group:
        high = (high * 29 + ord(char)) & 0xFFFFFFFF
        low = (low * 131 + ord(char)) & 0xFFFFFFFF
    return str((high << 32) | low)


_WINDOWS_SQL = """
SELECT o.rank, o.step, o.start_ns,
       greatest(min(i.start_ns), o.start_ns) AS first_ns, least(max(i.end_ns), o.end_ns) AS last_ns
FROM overlap o LEFT JOIN busy i
  ON i.rank = o.rank AND i.end_ns > o.start_ns AND i.start_ns < o.end_ns
WHERE o.step IS NOT NULL
GROUP BY o.rank, o.step, o.start_ns, o.end_ns
"""

_STEP_TRACE_SQL = f"""
WITH windows AS ({_WINDOWS_SQL}), receives AS (
    SELECT rank, step, sum(CASE WHEN reported THEN reported_elapse_ns ELSE dur_ns END) AS bubble
    FROM operations WHERE kind = 'recv' GROUP BY ALL
)
SELECT o.rank, o.step, o.computation_ns AS computing_ns, o.pure_communication_ns AS communication_not_overlapped_ns,
       o.overlap_ns AS overlapped_ns, o.communication_ns,
       coalesce(w.last_ns - w.first_ns, 0) - (o.computation_ns + o.pure_communication_ns) AS free_ns,
       coalesce(w.last_ns - w.first_ns, 0) - coalesce(r.bubble, 0) AS stage_ns, coalesce(r.bubble, 0) AS bubble_ns,
       o.pure_communication_ns - coalesce(r.bubble, 0) AS communication_not_overlapped_exclude_receive_ns,
       coalesce(w.first_ns - w.start_ns, 0) AS preparing_ns, 'trace' AS source
FROM overlap o JOIN windows w USING (rank, step) LEFT JOIN receives r USING (rank, step)
WHERE NOT list_contains($reported::INTEGER[], o.rank)
ORDER BY o.rank, o.step
"""


def rank_step_trace(tables: RunTables) -> pa.Table:
    """Per rank and step, torch_npu's step_trace_time.csv figures (schema ``CLUSTER_STEP_TRACE``; the module
    docstring gives each definition): computed from the trace (``source`` "trace"), or the rank's own
    step_trace_time.csv rows when its steps did not come from trace ranges ("step_trace_time.csv"). Per
    rank (a job's summary, ``analysis/job.py``); ``cluster_step_trace`` is every rank's."""
    reported = [{**row, "source": "step_trace_time.csv"} for row in computed(reported_step_trace, tables).to_pylist()]
    con = new_connection()
    con.register("overlap", computed(breakdown.overlap, tables))
    intervals = computed(breakdown.overlap_intervals, tables)
    con.register("all_intervals", intervals)
    con.sql("CREATE TEMP VIEW busy AS SELECT * FROM all_intervals "
                "WHERE row IN ('merged computation', 'merged communication')")
    con.register("operations", computed(collectives.rank_operations, tables))
    traced = con.sql(_STEP_TRACE_SQL, params={"reported": sorted({row["rank"] for row in reported})}).to_arrow_table()
    rows = traced.to_pylist() + reported
    rows.sort(key=lambda row: (row["rank"], row["step"] if row["step"] is not None else -1))
    return pa.Table.from_pylist(rows, schema=CLUSTER_STEP_TRACE)


def cluster_step_trace(job: Job) -> pa.Table:
    """Every rank's ``rank_step_trace`` (schema ``CLUSTER_STEP_TRACE``), sorted by rank and step."""
    return job.sql("SELECT * FROM step_trace ORDER BY rank, step NULLS FIRST").cast(CLUSTER_STEP_TRACE)


def _with_order(table: pa.Table) -> pa.Table:
    """``table`` with ``n``, its row order (the order of the files the rows came from)."""
    return table.append_column("n", pa.array(range(table.num_rows), pa.int64()))


_GROUPS_SQL = f"""
WITH recorded AS (
    SELECT process_group, rank FROM figures WHERE process_group IS NOT NULL
    UNION SELECT process_group, rank FROM matrix WHERE process_group IS NOT NULL
), recorders AS (
    SELECT process_group, list_sort(list(rank)) AS recorded_ranks FROM recorded GROUP BY process_group
), kinds AS (
    SELECT process_group, bool_and(collective IN {collectives.P2P_KINDS_SQL}) AS p2p FROM figures GROUP BY process_group
)
SELECT coalesce(g.kind, CASE WHEN k.p2p THEN 'p2p' ELSE 'collective' END) AS kind, r.process_group,
       '' AS group_id, coalesce(g.group_name, '') AS pg_name,
       CASE WHEN g.ranks_global AND len(g.ranks) > 0 THEN list_sort(g.ranks) ELSE r.recorded_ranks END AS rank_set,
       r.recorded_ranks
FROM recorders r LEFT JOIN groups g USING (process_group) LEFT JOIN kinds k USING (process_group)
ORDER BY kind = 'p2p', recorded_ranks, process_group
"""


def group_map(figures: pa.Table, matrix: pa.Table, groups: pa.Table) -> pa.Table:
    """The communication groups as msprof-analyze keys them (schema ``CLUSTER_COMMUNICATION_GROUPS``; module
    docstring), from ``collectives``' collective_figures, communication_matrix and communication_groups
    tables; collective groups first, then p2p, each by recorded ranks."""
    con = new_connection()
    for name, table in (("figures", figures), ("matrix", matrix), ("groups", groups)):
        con.register(name, table)
    rows = con.sql(_GROUPS_SQL).to_arrow_table().to_pylist()
    for row in rows:
        row["group_name"] = msprof_group_name(row["process_group"])
    return pa.Table.from_pylist(rows, schema=CLUSTER_COMMUNICATION_GROUPS)


#: the groups (``keys``: ``group_map``) with ``key_order``, their order by rank-set key: the outputs' rows are
#: in that order and name their group (``group_name``), never carry its rank list (a world group's 1,024
#: ranks on each of a million matrix rows)
_ORDERED_KEYS_SQL = "ordered_keys AS (SELECT *, dense_rank() OVER (ORDER BY recorded_ranks) AS key_order FROM keys)"

#: the figures with ``op_key``, an operation's name in the cluster outputs (module docstring)
_NAMED_SQL = """named AS (
    SELECT *, CASE WHEN max(repeats) OVER (PARTITION BY step, process_group, op_name) > 1
                   THEN op_name || '_' || sequence ELSE op_name END AS op_key
    FROM (SELECT *, count(*) OVER (PARTITION BY rank, step, process_group, op_name) AS repeats FROM figures)
)"""

_TIME_SQL = f"""
WITH {_NAMED_SQL}, {_ORDERED_KEYS_SQL}, ops AS (
    SELECT k.key_order, f.step, k.group_name, f.op_key AS op_name, f.rank,
           coalesce(f.reported_start_ns, f.start_ns) AS start_ns, f.elapse_ns,
           f.transit_ns, f.wait_ns, f.sync_ns, f.idle_ns, f.wait_ratio, f.sync_ratio
    FROM named f JOIN ordered_keys k USING (process_group)
), totals AS (
    SELECT key_order, step, group_name, '{TOTAL_OP_INFO}' AS op_name, rank, NULL::BIGINT AS start_ns,
           sum(elapse_ns) AS elapse_ns, sum(transit_ns) AS transit_ns, sum(wait_ns) AS wait_ns,
           sum(sync_ns) AS sync_ns, sum(idle_ns) AS idle_ns
    FROM ops GROUP BY ALL
)
SELECT * EXCLUDE (is_total, first_ns) FROM (
    SELECT *, false AS is_total,
           min(start_ns) OVER (PARTITION BY step, group_name, op_name) AS first_ns FROM ops
    UNION ALL BY NAME
    SELECT *, CASE WHEN wait_ns + transit_ns > 0 THEN wait_ns / (wait_ns + transit_ns) ELSE 0 END AS wait_ratio,
           CASE WHEN sync_ns + transit_ns > 0 THEN sync_ns / (sync_ns + transit_ns) ELSE 0 END AS sync_ratio,
           true AS is_total, NULL AS first_ns FROM totals)
ORDER BY key_order, step NULLS FIRST, is_total, first_ns, op_name, group_name, rank
"""


def communication_time(figures: pa.Table, keys: pa.Table) -> pa.Table:
    """Per operation and rank, and ``Total Op Info`` per (rank-set key, step, group, rank) (schema
    ``CLUSTER_COMMUNICATION_TIME``; module docstring), from a collective_figures table and ``group_map``;
    ordered as msprof-analyze's cluster_communication.json: by key, step, operation (first start), rank, the
    totals last."""
    con = new_connection()
    con.register("figures", figures)
    con.register("keys", keys)
    return con.sql(_TIME_SQL).to_arrow_table().select(CLUSTER_COMMUNICATION_TIME.names).cast(
        CLUSTER_COMMUNICATION_TIME)


_BANDWIDTH_SQL = f"""
WITH {_NAMED_SQL}, {_ORDERED_KEYS_SQL}, ops AS (
    SELECT k.key_order, l.step, k.group_name, f.op_key AS op_name, l.rank, l.link_type, l.transit_bytes,
           l.transit_ns, l.bandwidth_gbps, l.large_packet_ratio, l.size_distribution, l.n,
           coalesce(f.reported_start_ns, f.start_ns) AS start_ns
    FROM links l JOIN named f USING (rank, slice_id) JOIN ordered_keys k ON k.process_group = f.process_group
), packets AS (
    SELECT key_order, step, group_name, rank, link_type, d.packet_bytes, sum(d.count) AS count,
           sum(d.dur_ns) AS dur_ns
    FROM (SELECT *, unnest(size_distribution) AS d FROM ops) GROUP BY ALL
), distributions AS (
    SELECT key_order, step, group_name, rank, link_type,
           list({{'packet_bytes': packet_bytes, 'count': count, 'dur_ns': dur_ns}} ORDER BY packet_bytes)
               AS size_distribution
    FROM packets GROUP BY ALL
), totals AS (
    SELECT key_order, step, group_name, '{TOTAL_OP_INFO}' AS op_name, rank, link_type,
           sum(transit_bytes) AS transit_bytes, sum(transit_ns) AS transit_ns, min(n) AS n
    FROM ops GROUP BY ALL
)
SELECT * EXCLUDE (is_total, first_ns, n) FROM (
    SELECT * EXCLUDE (start_ns), false AS is_total,
           min(start_ns) OVER (PARTITION BY step, group_name, op_name) AS first_ns FROM ops
    UNION ALL BY NAME
    SELECT t.*, CASE WHEN t.transit_ns > 0 THEN t.transit_bytes / t.transit_ns ELSE 0 END AS bandwidth_gbps,
           NULL::DOUBLE AS large_packet_ratio, coalesce(d.size_distribution, []) AS size_distribution,
           true AS is_total, NULL AS first_ns
    FROM totals t LEFT JOIN distributions d USING (key_order, step, group_name, rank, link_type))
ORDER BY key_order, step NULLS FIRST, is_total, first_ns, op_name, group_name, rank, n
"""


def communication_bandwidth(links: pa.Table, figures: pa.Table, keys: pa.Table) -> pa.Table:
    """Per operation, rank and link type, and ``Total Op Info`` per (rank-set key, step, group, rank, link
    type) (schema ``CLUSTER_COMMUNICATION_BANDWIDTH``; module docstring), from a link_bandwidth table, the
    collective_figures table it belongs to and ``group_map``; link types in the order they were recorded."""
    con = new_connection()
    con.register("links", _with_order(links))
    con.register("figures", figures)
    con.register("keys", keys)
    return con.sql(_BANDWIDTH_SQL).to_arrow_table().select(CLUSTER_COMMUNICATION_BANDWIDTH.names).cast(
        CLUSTER_COMMUNICATION_BANDWIDTH)


_STATISTIC_KEY = " OR ".join(f"contains(key, '{word}')" for word in MATRIX_STATISTIC_WORDS)

_MATRIX_SQL = f"""
WITH {_ORDERED_KEYS_SQL}, owners AS (
    SELECT process_group, src_rank AS local_rank, min(rank) AS rank FROM matrix WHERE src_rank = dst_rank GROUP BY ALL
), mapped AS (
    SELECT m.*,
           CASE WHEN g.ranks_global THEN m.src_rank ELSE s.rank END AS src,
           CASE WHEN g.ranks_global THEN m.dst_rank ELSE d.rank END AS dst
    FROM matrix m LEFT JOIN groups g USING (process_group)
    LEFT JOIN owners s ON s.process_group = m.process_group AND s.local_rank = m.src_rank
    LEFT JOIN owners d ON d.process_group = m.process_group AND d.local_rank = m.dst_rank
), links AS (
    SELECT step, process_group, key, src AS src_rank, dst AS dst_rank, arg_max(transport, n) AS transport,
           arg_max(op_name, n) AS op_name, sum(transit_bytes) AS transit_bytes, sum(transit_ns) AS transit_ns,
           min(n) AS n
    FROM mapped WHERE src IS NOT NULL AND dst IS NOT NULL GROUP BY ALL
), totals AS (
    SELECT step, process_group, '{TOTAL_OP_INFO}' AS key, src_rank, dst_rank, arg_max(transport, n) AS transport,
           arg_max(op_name, n) AS op_name, sum(transit_bytes) AS transit_bytes, sum(transit_ns) AS transit_ns,
           min(n) AS n
    FROM links WHERE NOT ({_STATISTIC_KEY}) GROUP BY ALL
), rows AS (
    SELECT *, false AS is_total, min(n) OVER (PARTITION BY step, process_group, key) AS first_n FROM links
    UNION ALL BY NAME
    SELECT *, true AS is_total, 0 AS first_n FROM totals
)
SELECT k.key_order, r.step, k.group_name, r.key, r.src_rank, r.dst_rank, r.transport, r.op_name,
       r.transit_bytes, r.transit_ns,
       CASE WHEN r.transit_ns > 0 THEN r.transit_bytes / r.transit_ns ELSE 0 END AS bandwidth_gbps
FROM rows r JOIN ordered_keys k USING (process_group)
ORDER BY k.key_order, r.step NULLS FIRST, r.is_total, r.first_n, k.group_name, r.n
"""


def matrix_links(matrix: pa.Table, groups: pa.Table, keys: pa.Table) -> pa.Table:
    """The communication matrix merged across the recording ranks, and ``Total Op Info`` per (step, group,
    link) (schema ``CLUSTER_COMMUNICATION_MATRIX``; module docstring), from a communication_matrix table,
    the communication_groups table (which groups' ranks are global) and ``group_map``; links in the order
    first recorded."""
    con = new_connection()
    con.register("matrix", _with_order(matrix))
    con.register("groups", groups)
    con.register("keys", keys)
    return con.sql(_MATRIX_SQL).to_arrow_table().select(CLUSTER_COMMUNICATION_MATRIX.names).cast(
        CLUSTER_COMMUNICATION_MATRIX)


def cluster_communication_groups(job: Job) -> pa.Table:
    """The job's communication groups as msprof-analyze keys them (schema ``CLUSTER_COMMUNICATION_GROUPS``:
    kind, process_group, group_name (msprof-analyze's name), group_id, pg_name (the framework's name),
    rank_set (the global ranks when known, else the recorded ranks), recorded_ranks (the profiled ranks that
    recorded the group's operations: msprof-analyze's rank-set key))."""
    return group_map(computed(collectives.collective_figures, job),
                     computed(collectives.communication_matrix, job),
                     computed(collectives.communication_groups, job))


def cluster_communication_time(job: Job) -> pa.Table:
    """msprof-analyze's communication time per operation and rank and its ``Total Op Info`` per group, step
    and rank (schema ``CLUSTER_COMMUNICATION_TIME``; int64 ns, ratios in [0, 1]; module docstring)."""
    return communication_time(computed(collectives.collective_figures, job),
                              computed(cluster_communication_groups, job))


def cluster_communication_bandwidth(job: Job) -> pa.Table:
    """msprof-analyze's bandwidth per operation, rank and link type and its ``Total Op Info`` (schema
    ``CLUSTER_COMMUNICATION_BANDWIDTH``; bytes, ns, GB/s; module docstring)."""
    return communication_bandwidth(computed(collectives.link_bandwidth, job),
                                   computed(collectives.collective_figures, job),
                                   computed(cluster_communication_groups, job))


def cluster_communication_matrix(job: Job) -> pa.Table:
    """msprof-analyze's communication matrix: links merged across ranks, local ranks mapped, and ``Total Op
    Info`` per link (schema ``CLUSTER_COMMUNICATION_MATRIX``; bytes, ns, GB/s; module docstring)."""
    return matrix_links(computed(collectives.communication_matrix, job),
                        computed(collectives.communication_groups, job),
                        computed(cluster_communication_groups, job))


def cluster_rank_devices(job: Job) -> pa.Table:
    """Per rank (schema ``CLUSTER_RANK_DEVICES``): its device id (meta ``device_id``, else the first NPU or
    GPU of ``device_properties``), its host's uid and name (meta ``host_info``: torch_npu's HOST_INFO) and
    the folder it was read from (meta ``source``, set when ranks are merged into a job); null where unknown."""
    rows = []
    for rank, facts in sorted(computed(job_rank_meta, job).items()):
        device = facts.get("device_id")
        if device in (None, ""):
            device = next((d.get("id") for d in meta_items(facts.get("device_properties"), dict)
                           if d.get("type") in ("npu", "cuda", "gpu")), None)
        host: dict = next(iter(meta_items(facts.get("host_info"), dict)), {})
        rows.append({"rank": rank, "device_id": int(device) if isinstance(device, (int, str)) and str(device).isdigit()
                     else None,
                     "host_uid": host.get("host_uid"), "host_name": host.get("host_name"),
                     "profile_path": facts.get("source")})
    return pa.Table.from_pylist(rows, schema=CLUSTER_RANK_DEVICES)
