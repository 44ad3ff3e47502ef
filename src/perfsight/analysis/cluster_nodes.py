"""The nodes of a job: which node each rank runs on, and the communication between nodes (the Cluster page's
matrix of a job too large to show rank by rank, with drill-down to the ranks of a node pair).

**A rank's node** (``rank_nodes``): its host where the rank's facts say one: its perfsight run manifest's
``host`` (``rank_facts``), else torch_npu's HOST_INFO ``host_name`` (``cluster_outputs.cluster_rank_devices``);
a rank whose facts name no host is *assumed* to run on node ``rank // RANKS_PER_NODE`` (named ``ASSUMED_NODE``,
``assumed`` true: a guess, said as one). Nodes are numbered (``node_index``) in the order of their lowest rank.

**Between nodes** (``communication_by_node``): ``collectives.communication_pairs`` (traffic from the rank that
recorded it to a peer) summed per (src node, dst node): bytes, transit time (null when a pair has none), the
bandwidth of the sums, the operations, the rank pairs (``links``) and the transport (``MIXED`` when several).
A pair's traffic whose peer is not recorded goes to ``dst_node`` null. ``node_links`` gives the rank pairs of
one node pair: the drill-down.
"""
from __future__ import annotations

import pyarrow as pa

from perfsight.analysis import cluster_outputs, collectives
from perfsight.analysis.job import Job
from perfsight.core.memo import computed

#: ranks per node assumed for a rank whose facts name no host (8 accelerators per server)
RANKS_PER_NODE = 8
#: the name of an assumed node (``index``: rank // RANKS_PER_NODE)
ASSUMED_NODE = "node {index} (assumed)"
#: where a rank's node came from
FROM_MANIFEST, FROM_HOST_INFO, FROM_ASSUMPTION = ("run manifest host", "HOST_INFO host_name",
                                                  f"assumed: {RANKS_PER_NODE} ranks per node")

RANK_NODES = pa.schema([
    ("rank", pa.int32()),
    ("node", pa.string()),
    ("node_index", pa.int32()),
    ("assumed", pa.bool_()),
    ("source", pa.string()),
])

NODE_COMMUNICATION = pa.schema([
    ("src_node", pa.string()),
    ("dst_node", pa.string()),
    ("src_index", pa.int32()),
    ("dst_index", pa.int32()),
    ("transport", pa.string()),
    ("links", pa.int64()),
    ("transit_bytes", pa.int64()),
    ("transit_ns", pa.int64()),
    ("bandwidth_gbps", pa.float64()),
    ("collectives", pa.int64()),
    ("assumed", pa.bool_()),
])

NODE_LINKS = pa.schema([("src_node", pa.string()), ("dst_node", pa.string()), *collectives.COMMUNICATION_PAIRS])


def rank_nodes(job: Job) -> pa.Table:
    """Per rank of the job (schema ``RANK_NODES``): its ``node`` (module docstring), the node's
    ``node_index``, ``assumed`` and the ``source`` of the node (``FROM_MANIFEST``, ``FROM_HOST_INFO``,
    ``FROM_ASSUMPTION``). Sorted by rank."""
    hosts = dict(job.connect().sql("SELECT rank, host FROM rank_facts").fetchall())
    named = {row["rank"]: row["host_name"] for row in computed(cluster_outputs.cluster_rank_devices, job).to_pylist()}
    rows = []
    for rank in sorted(hosts):
        if hosts[rank]:
            node, source = hosts[rank], FROM_MANIFEST
        elif named.get(rank):
            node, source = named[rank], FROM_HOST_INFO
        else:
            node, source = ASSUMED_NODE.format(index=rank // RANKS_PER_NODE), FROM_ASSUMPTION
        rows.append({"rank": rank, "node": node, "assumed": source == FROM_ASSUMPTION, "source": source})
    order: dict[str, int] = {}
    for row in rows:
        row["node_index"] = order.setdefault(row["node"], len(order))
    return pa.Table.from_pylist(rows, schema=RANK_NODES)


def _connection(job: Job):
    con = job.connect()
    con.register("pairs", computed(collectives.communication_pairs, job))
    con.register("nodes", computed(rank_nodes, job))
    return con


_BY_NODE_SQL = """
SELECT s.node AS src_node, d.node AS dst_node, s.node_index AS src_index, d.node_index AS dst_index,
       CASE WHEN count(DISTINCT p.transport) > 1 THEN 'MIXED' ELSE any_value(p.transport) END AS transport,
       count(*) AS links, sum(p.transit_bytes)::BIGINT AS transit_bytes,
       CASE WHEN count(p.transit_ns) = count(*) THEN sum(p.transit_ns)::BIGINT END AS transit_ns,
       CASE WHEN count(p.transit_ns) = count(*) AND sum(p.transit_ns) <> 0 THEN sum(p.transit_bytes) / sum(p.transit_ns)
       END AS bandwidth_gbps,
       sum(p.collectives)::BIGINT AS collectives, bool_or(s.assumed) OR coalesce(bool_or(d.assumed), false) AS assumed
FROM pairs p JOIN nodes s ON s.rank = p.src_rank LEFT JOIN nodes d ON d.rank = p.dst_rank
GROUP BY ALL ORDER BY src_index, dst_index NULLS LAST
"""


def communication_by_node(job: Job) -> pa.Table:
    """Per (src node, dst node) (schema ``NODE_COMMUNICATION``; module docstring): the nodes and their
    indices (``dst_node`` null: peers not recorded, or a peer rank that is not in the job), the
    ``transport`` (``MIXED`` when several), the rank pairs summed (``links``), their ``transit_bytes``,
    ``transit_ns`` (null unless every pair has one), ``bandwidth_gbps`` = bytes / ns of the sums, the
    ``collectives`` counted and ``assumed`` (either node assumed). Sorted by src index, dst index (null
    last)."""
    return _connection(job).sql(_BY_NODE_SQL).to_arrow_table().cast(NODE_COMMUNICATION)


_LINKS_SQL = """
SELECT s.node AS src_node, d.node AS dst_node, p.*
FROM pairs p JOIN nodes s ON s.rank = p.src_rank LEFT JOIN nodes d ON d.rank = p.dst_rank
WHERE s.node = $src AND d.node IS NOT DISTINCT FROM $dst
ORDER BY p.src_rank, p.dst_rank NULLS LAST
"""


def node_links(job: Job, src_node: str, dst_node: str | None) -> pa.Table:
    """The rank pairs of ``communication_pairs`` from ranks of ``src_node`` to ranks of ``dst_node`` (None:
    the traffic whose peer is not recorded), with both nodes (schema ``NODE_LINKS``); sorted by src, dst.
    Their sums are ``communication_by_node``'s row of the pair."""
    return _connection(job).sql(_LINKS_SQL, params={"src": src_node, "dst": dst_node}).to_arrow_table().cast(
        NODE_LINKS)
