"""analysis/cluster_nodes.py on a planted job of six ranks with known answers: ranks 0 and 1 on host "a" and
rank 2 on "b" (their run manifests), rank 3 on "c" (torch_npu's HOST_INFO), ranks 9 and 17 naming no host
(assumed on nodes 9 // 8 = 1 and 17 // 8 = 2); one all-reduce of 1,000 bytes among all six (every member arrives
at once and takes 100 ns: 1,000 bytes over 100 ns per rank pair), and rank 17's all-reduce of 500 bytes in a
group whose members are not recorded."""
from __future__ import annotations

import json

import pyarrow as pa

from perfsight.analysis.cluster_nodes import (
    FROM_ASSUMPTION,
    FROM_HOST_INFO,
    FROM_MANIFEST,
    communication_by_node,
    node_links,
    rank_nodes,
)
from perfsight.analysis.job import Job
from perfsight.analysis.job_summaries import SUMMARY_SCHEMAS
from perfsight.core.memo import computed

RANKS = [0, 1, 2, 3, 9, 17]


def _op(rank: int, group: str, members: list[int], size: int, dur: int) -> dict:
    return {"rank": rank, "slice_id": 1 if group == "world" else 2, "step": 1, "source": "device",
            "op_name": "allreduce", "collective": "allreduce", "process_group": group, "group_ranks": members,
            "ranks_global": True, "sequence": 0, "kind": "allreduce", "dtype": "Float", "in_bytes": size,
            "out_bytes": size, "bytes": size, "group_size": len(members) or None, "ranks": len(members) or None,
            "start_ns": 1000, "dur_ns": dur, "end_ns": 1000 + dur, "reported": False, "links_reported": False,
            "figures_from": "computed"}


def planted_job() -> Job:
    hosts = {0: "a", 1: "a", 2: "b"}
    facts = [{"rank": r, "host": hosts.get(r), "meta": json.dumps(
        {"host_info": json.dumps([{"host_uid": "7", "host_name": "c"}])} if r == 3 else {})} for r in RANKS]
    operations = [_op(r, "world", RANKS, 1000, 100) for r in RANKS] + [_op(17, "unrecorded", [], 500, 50)]
    tables = {name: schema.empty_table() for name, schema in SUMMARY_SCHEMAS.items()}
    tables |= {"rank_facts": pa.Table.from_pylist(facts, schema=SUMMARY_SCHEMAS["rank_facts"]),
               "operations": pa.Table.from_pylist(operations, schema=SUMMARY_SCHEMAS["operations"])}
    return Job.of_tables(tables)


def test_each_ranks_node_from_its_host_else_assumed():
    rows = computed(rank_nodes, planted_job()).to_pylist()
    assert [(r["rank"], r["node"], r["node_index"], r["assumed"], r["source"]) for r in rows] == [
        (0, "a", 0, False, FROM_MANIFEST), (1, "a", 0, False, FROM_MANIFEST), (2, "b", 1, False, FROM_MANIFEST),
        (3, "c", 2, False, FROM_HOST_INFO), (9, "node 1 (assumed)", 3, True, FROM_ASSUMPTION),
        (17, "node 2 (assumed)", 4, True, FROM_ASSUMPTION)]
    assert FROM_ASSUMPTION == "assumed: 8 ranks per node"


def test_the_traffic_between_nodes_sums_the_rank_pairs():
    job = planted_job()
    rows = {(r["src_node"], r["dst_node"]): r for r in computed(communication_by_node, job).to_pylist()}
    # 5 nodes x 5 nodes (a -> a: ranks 0 and 1 to each other; b, c and the assumed nodes hold one rank: no
    # pair to themselves) and rank 17's unrecorded peers
    assert len(rows) == 5 * 5 - 4 + 1
    assert rows[("a", "a")] == {"src_node": "a", "dst_node": "a", "src_index": 0, "dst_index": 0,
                                "transport": "UNKNOWN", "links": 2, "transit_bytes": 2000, "transit_ns": 200,
                                "bandwidth_gbps": 10.0, "collectives": 2, "assumed": False}
    assert (rows[("a", "b")]["links"], rows[("b", "a")]["links"], rows[("c", "node 1 (assumed)")]["links"]) == (2, 2, 1)
    assert rows[("c", "node 1 (assumed)")]["assumed"] and not rows[("b", "c")]["assumed"]
    unknown = rows[("node 2 (assumed)", None)]
    assert (unknown["src_index"], unknown["dst_index"], unknown["links"], unknown["transit_bytes"],
            unknown["transit_ns"], unknown["bandwidth_gbps"], unknown["assumed"]) == (4, None, 1, 500, None, None, True)
    assert [list(k) for k in rows][:5] == [["a", "a"], ["a", "b"], ["a", "c"], ["a", "node 1 (assumed)"],
                                           ["a", "node 2 (assumed)"]]


def test_a_node_pairs_rank_pairs():
    job = planted_job()
    links = computed(node_links, job, "a", "b").to_pylist()
    assert [(r["src_node"], r["dst_node"], r["src_rank"], r["dst_rank"], r["transit_bytes"]) for r in links] == [
        ("a", "b", 0, 2, 1000), ("a", "b", 1, 2, 1000)]
    unknown = computed(node_links, job, "node 2 (assumed)", None).to_pylist()
    assert [(r["src_rank"], r["dst_rank"], r["transit_bytes"]) for r in unknown] == [(17, None, 500)]
    assert computed(node_links, job, "b", "b").num_rows == 0
