"""analysis/cluster_outputs.py and views/export/cluster_analysis.py on small tables of collectives' schemas
(collective_figures, link_bandwidth, communication_matrix, communication_groups): an
HCCL all-reduce group whose ranks are group-local (two of its eight ranks profiled) and a Kineto p2p group with
global ranks. Every expected figure is worked out by hand in the comments; the JSON and the database rows are
compared whole."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from perfsight.analysis import cluster_outputs as co
from perfsight.analysis import collectives
from perfsight.analysis.cluster import RANK_BREAKDOWN
from perfsight.analysis.job_summaries import job_of
from perfsight.core.tables import RunTables
from perfsight.views.export import cluster_analysis as view

FIGURES, LINKS = collectives.COLLECTIVE_FIGURES, collectives.LINK_BANDWIDTH
MATRIX, GROUPS = collectives.COMMUNICATION_MATRIX, collectives.COMMUNICATION_GROUPS

HCCL, PP = "123", "pg_pp"
OP0, OP1 = "hcom_allReduce__1_0_1", "hcom_allReduce__1_1_1"


def _figure(rank, slice_id, op, collective, group, seq, start, elapse, transit, wait, sync, idle, wait_r, sync_r,
            source):
    return {"rank": rank, "slice_id": slice_id, "step": 5, "source": "hccl", "op_name": op, "collective": collective,
            "process_group": group, "group_ranks": None, "ranks_global": group == PP, "sequence": seq, "peer": None,
            "dtype": None, "bytes": None, "start_ns": start, "aligned_start_ns": start, "elapse_ns": elapse,
            "transit_ns": transit, "wait_ns": wait, "sync_ns": sync, "idle_ns": idle, "wait_ratio": wait_r,
            "sync_ratio": sync_r, "algbw_gbps": None, "busbw_gbps": None, "figures_from": source}


FIGURE_ROWS = [
    _figure(0, 10, OP0, "allreduce", HCCL, 0, 1_000_000, 10_000, 2_000, 3_000, 1_000, 5_000, 0.6, 0.3333,
            "communication.json"),
    _figure(0, 11, OP1, "allreduce", HCCL, 1, 2_000_000, 4_000, 2_000, 0, 0, 2_000, 0.0, 0.0, "communication.json"),
    _figure(0, 12, "ncclDevKernel_SendRecv", "send", PP, 0, 3_000_000, 7_000, 6_000, 1_000, 0, 0, 0.1429, 0.0,
            "computed"),
    _figure(0, 13, "ncclDevKernel_SendRecv", "send", PP, 1, 4_000_000, 7_000, 6_000, 1_000, 0, 0, 0.1429, 0.0,
            "computed"),
    _figure(1, 20, OP0, "allreduce", HCCL, 0, 1_002_000, 8_000, 2_000, 1_000, 0, 5_000, 0.3333, 0.0,
            "communication.json"),
    _figure(1, 21, OP1, "allreduce", HCCL, 1, 2_000_500, 3_500, 3_000, 0, 0, 500, 0.0, 0.0, "communication.json"),
    _figure(1, 22, "ncclDevKernel_SendRecv", "recv", PP, 0, 2_999_000, 9_000, 6_000, 3_000, 0, 0, 0.3333, 0.0,
            "computed"),
    _figure(1, 23, "ncclDevKernel_SendRecv", "recv", PP, 1, 3_999_000, 9_000, 6_000, 3_000, 0, 0, 0.3333, 0.0,
            "computed"),
]


def _packets(*rows):
    return [{"packet_bytes": b, "count": c, "dur_ns": d} for b, c, d in rows]


def _link(rank, slice_id, op, link_type, nbytes, ns, bandwidth, packets=(), large_packet_ratio=0.0):
    return {"rank": rank, "slice_id": slice_id, "step": 5, "op_name": op, "process_group": HCCL,
            "link_type": link_type, "transit_bytes": nbytes, "transit_ns": ns, "bandwidth_gbps": bandwidth,
            "large_packet_ratio": large_packet_ratio, "size_distribution": _packets(*packets)}


LINK_ROWS = [
    _link(0, 10, OP0, "RDMA", 0, 0, 0.0),
    _link(0, 10, OP0, "HCCS", 28_647_232, 1_816_836, 15.7676, [(2_064_384, 12, 1_578_892), (1_937_312, 2, 237_944)]),
    _link(0, 10, OP0, "SDMA", 28_647_232, 1_816_836, 15.7676),
    _link(0, 11, OP1, "RDMA", 0, 0, 0.0),
    _link(0, 11, OP1, "HCCS", 1_000_000, 100_000, 10.0, [(500_000, 2, 100_000)], large_packet_ratio=0.5),
    _link(0, 11, OP1, "SDMA", 1_000_000, 100_000, 10.0),
]


def _cell(rank, group, key, op, src, dst, transport, nbytes, ns):
    return {"rank": rank, "step": 5, "process_group": group, "key": key, "op_name": op, "src_rank": src,
            "dst_rank": dst, "transport": transport, "transit_bytes": nbytes, "transit_ns": ns,
            "bandwidth_gbps": nbytes / ns, "collectives": 1, "source": "communication_matrix.json"}


MATRIX_ROWS = [
    _cell(0, HCCL, "allreduce-top1", OP0, 0, 0, "LOCAL", 4_000_000, 8_000),
    _cell(0, HCCL, "allreduce-top1", OP1, 0, 1, "HCCS", 37_000_000, 2_000_000),
    _cell(0, HCCL, "allreduce-top1", OP1, 0, 7, "HCCS", 37_000_000, 2_100_000),     # rank 7 not profiled: out
    _cell(0, HCCL, "allreduce-total", "", 0, 1, "HCCS", 61_000_000, 3_000_000),
    _cell(0, PP, "send", "ncclDevKernel_SendRecv", 0, 1, "HCCS", 1_000, 10),
    _cell(1, HCCL, "allreduce-top1", OP0, 1, 1, "LOCAL", 4_000_000, 8_100),
    _cell(1, HCCL, "allreduce-top1", OP1, 1, 0, "HCCS", 37_000_000, 2_200_000),
    _cell(1, HCCL, "allreduce-total", "", 1, 0, "HCCS", 61_000_000, 3_100_000),
    _cell(1, PP, "send", "ncclDevKernel_SendRecv", 0, 1, "RDMA", 1_000, 10),       # the same link, both ranks
]

GROUP_ROWS = [
    {"process_group": HCCL, "group_name": None, "kind": "collective", "ranks": list(range(8)), "ranks_global": False,
     "source": "communication_matrix (group-local ranks)"},
    {"process_group": PP, "group_name": "pp", "kind": "p2p", "ranks": [1, 0], "ranks_global": True,
     "source": "Process Group Ranks"},
]

#: msprof-analyze's name of pg_pp: its hash as msprof_group_name computes it (checked against msprof-analyze's
#: own output in test_group_names_are_msprof_analyzes)
PP_NAME = co.msprof_group_name(PP)


@pytest.fixture(scope="module")
def outputs() -> view.ClusterOutputs:
    figures, links = pa.Table.from_pylist(FIGURE_ROWS, FIGURES), pa.Table.from_pylist(LINK_ROWS, LINKS)
    matrix, groups = pa.Table.from_pylist(MATRIX_ROWS, MATRIX), pa.Table.from_pylist(GROUP_ROWS, GROUPS)
    keys = co.group_map(figures, matrix, groups)
    return view.ClusterOutputs(co.CLUSTER_STEP_TRACE.empty_table(), keys, co.communication_time(figures, keys),
                               co.communication_bandwidth(links, figures, keys), co.matrix_links(matrix, groups, keys),
                               co.CLUSTER_RANK_DEVICES.empty_table(), RANK_BREAKDOWN.empty_table())


def test_group_names_are_msprof_analyzes():
    # msprof-analyze 26.2.0 on ../shared/data/ascend/torch_npu/db/level1 names the HCCL group
    # 90.91.105.46%enp189s0f0_60000_0_1736410538306028 (cluster_analysis.db, CommunicationGroupMapping)
    assert co.msprof_group_name("90.91.105.46%enp189s0f0_60000_0_1736410538306028") == "17148521525495523210"
    assert co.msprof_group_name("17522688603477080586") == "17522688603477080586"     # already hashed: kept
    assert PP_NAME.isdigit() and PP_NAME != PP


def test_groups_keyed_by_the_ranks_that_recorded_them(outputs):
    assert outputs.groups.to_pylist() == [
        # group-local ranks: the rank set is the profiled ranks that recorded it (as msprof-analyze without
        # parallel_group_info), not the 8 local positions
        {"kind": "collective", "process_group": HCCL, "group_name": HCCL, "group_id": "", "pg_name": "",
         "rank_set": [0, 1], "recorded_ranks": [0, 1]},
        {"kind": "p2p", "process_group": PP, "group_name": PP_NAME, "group_id": "", "pg_name": "pp",
         "rank_set": [0, 1], "recorded_ranks": [0, 1]},
    ]
    assert view.group_json(outputs) == {
        "collective": [[0, 1]], "p2p": [[0, 1]],
        "comm_group_parallel_info": [
            {"type": "collective", "rank_set": [0, 1], "group_name": HCCL, "group_id": "", "pg_name": ""},
            {"type": "p2p", "rank_set": [0, 1], "group_name": PP_NAME, "group_id": "", "pg_name": "pp"}]}


def test_communication_json_with_total_op_info(outputs):
    def time(start, elapse, transit, wait, sync, idle, wait_r, sync_r):
        info = {} if start is None else {"Start Timestamp(us)": start}
        return {**info, "Elapse Time(ms)": elapse, "Transit Time(ms)": transit, "Wait Time(ms)": wait,
                "Synchronization Time(ms)": sync, "Idle Time(ms)": idle, "Wait Time Ratio": wait_r,
                "Synchronization Time Ratio": sync_r}

    def link(size, ms, bandwidth, packets, ratio=0.0):
        info = {"Transit Size(MB)": size, "Transit Time(ms)": ms, "Bandwidth(GB/s)": bandwidth}
        return {**info, **({} if ratio is None else {"Large Packet Ratio": ratio}), "Size Distribution": packets}

    zero = link(0.0, 0.0, 0.0, {})
    step = json.loads("".join(view.communication_json(outputs)))["(0, 1)"]["step5"]
    assert list(step) == [f"{OP0}@{HCCL}", f"{OP1}@{HCCL}", f"ncclDevKernel_SendRecv_0@{PP_NAME}",
                          f"ncclDevKernel_SendRecv_1@{PP_NAME}", f"{TOTAL}@{HCCL}", f"{TOTAL}@{PP_NAME}"]
    assert step[f"{OP0}@{HCCL}"] == {
        "0": {"Communication Time Info": time(1000.0, 0.01, 0.002, 0.003, 0.001, 0.005, 0.6, 0.3333),
              "Communication Bandwidth Info": {
                  "RDMA": zero,
                  "HCCS": link(28.647232, 1.816836, 15.7676, {"2.064384": [12, 1.578892], "1.937312": [2, 0.237944]}),
                  "SDMA": link(28.647232, 1.816836, 15.7676, {})}},
        "1": {"Communication Time Info": time(1002.0, 0.008, 0.002, 0.001, 0.0, 0.005, 0.3333, 0.0)}}
    # Total: rank 0 elapse 10000 + 4000, transit 2000 + 2000, wait 3000, sync 1000, idle 5000 + 2000 ns;
    # wait ratio 3000 / (3000 + 4000) = 0.4286, sync ratio 1000 / (1000 + 4000) = 0.2
    assert step[f"{TOTAL}@{HCCL}"] == {
        "0": {"Communication Time Info": time(None, 0.014, 0.004, 0.003, 0.001, 0.007, 0.4286, 0.2),
              "Communication Bandwidth Info": {
                  "RDMA": link(0.0, 0.0, 0.0, {}, None),
                  # 29647232 bytes in 1916836 ns = 15.4668 GB/s; packets merged, by size
                  "HCCS": link(29.647232, 1.916836, 15.4668, {"0.5": [2, 0.1], "1.937312": [2, 0.237944],
                                                              "2.064384": [12, 1.578892]}, None),
                  "SDMA": link(29.647232, 1.916836, 15.4668, {}, None)}},
        # rank 1: wait 1000 / (1000 + 5000) = 0.1667
        "1": {"Communication Time Info": time(None, 0.0115, 0.005, 0.001, 0.0, 0.0055, 0.1667, 0.0)}}
    # a name two operations of a rank share takes the instance number in the group, the same on both ranks
    assert set(step[f"ncclDevKernel_SendRecv_0@{PP_NAME}"]) == set(step[f"ncclDevKernel_SendRecv_1@{PP_NAME}"]) == {
        "0", "1"}
    # Total: rank 1's two receives: elapse 18000, transit 12000, wait 6000 ns: wait ratio 6000 / 18000
    assert step[f"{TOTAL}@{PP_NAME}"]["1"]["Communication Time Info"]["Wait Time Ratio"] == 0.3333


TOTAL = co.TOTAL_OP_INFO


def test_matrix_merged_mapped_and_totalled(outputs):
    def link(transport, ms, size, op, bandwidth):
        return {"Transport Type": transport, "Transit Time(ms)": ms, "Transit Size(MB)": size, "Op Name": op,
                "Bandwidth(GB/s)": bandwidth}

    assert json.loads("".join(view.matrix_json(outputs))) == {"(0, 1)": {"step5": {
        f"allreduce-top1@{HCCL}": {"0-0": link("LOCAL", 0.008, 4.0, OP0, 500.0),
                                   "0-1": link("HCCS", 2.0, 37.0, OP1, 18.5),      # 0-7: rank 7 unprofiled
                                   "1-1": link("LOCAL", 0.0081, 4.0, OP0, 493.8272),
                                   "1-0": link("HCCS", 2.2, 37.0, OP1, 16.8182)},
        f"allreduce-total@{HCCL}": {"0-1": link("HCCS", 3.0, 61.0, "", 20.3333),
                                    "1-0": link("HCCS", 3.1, 61.0, "", 19.6774)},
        # global ranks: the link both ranks recorded is summed, the transport is the last rank's
        f"send@{PP_NAME}": {"0-1": link("RDMA", 2e-05, 0.002, "ncclDevKernel_SendRecv", 100.0)},
        # Total Op Info adds allreduce-total, not the per-size statistics (top1)
        f"{TOTAL}@{HCCL}": {"0-1": link("HCCS", 3.0, 61.0, "", 20.3333), "1-0": link("HCCS", 3.1, 61.0, "", 19.6774)},
        f"{TOTAL}@{PP_NAME}": {"0-1": link("RDMA", 2e-05, 0.002, "ncclDevKernel_SendRecv", 100.0)},
    }}}


def test_database_rows(outputs):
    rows = view.database_rows(outputs)
    assert rows["CommunicationGroupMapping"] == [("collective", "(0,1)", HCCL, "", ""),
                                                 ("p2p", "(0,1)", PP_NAME, "", "pp")]
    time = [r for r in rows["ClusterCommunicationTime"] if r[3] == HCCL]
    assert time == [
        ("step5", 0, OP0, HCCL, 1000.0, 0.01, 0.002, 0.003, 0.001, 0.005, 0.3333, 0.6),
        ("step5", 1, OP0, HCCL, 1002.0, 0.008, 0.002, 0.001, 0.0, 0.005, 0.0, 0.3333),
        ("step5", 0, OP1, HCCL, 2000.0, 0.004, 0.002, 0.0, 0.0, 0.002, 0.0, 0.0),
        ("step5", 1, OP1, HCCL, 2000.5, 0.0035, 0.003, 0.0, 0.0, 0.0005, 0.0, 0.0),
        ("step5", 0, TOTAL, HCCL, 0.0, 0.014, 0.004, 0.003, 0.001, 0.007, 0.2, 0.4286),
        ("step5", 1, TOTAL, HCCL, 0.0, 0.0115, 0.005, 0.001, 0.0, 0.0055, 0.0, 0.1667)]
    # one row per packet size; a link type that carried nothing is left out, one without packets has a 0 row
    assert rows["ClusterCommunicationBandwidth"] == [
        ("step5", 0, OP0, HCCL, "HCCS", 28.647232, 1.816836, 15.7676, 0, 2.064384, 12, 1.578892),
        ("step5", 0, OP0, HCCL, "HCCS", 28.647232, 1.816836, 15.7676, 0, 1.937312, 2, 0.237944),
        ("step5", 0, OP0, HCCL, "SDMA", 28.647232, 1.816836, 15.7676, 0, 0.0, 0, 0.0),
        ("step5", 0, OP1, HCCL, "HCCS", 1.0, 0.1, 10.0, 0.5, 0.5, 2, 0.1),     # a ratio, never truncated
        ("step5", 0, OP1, HCCL, "SDMA", 1.0, 0.1, 10.0, 0, 0.0, 0, 0.0),
        ("step5", 0, TOTAL, HCCL, "HCCS", 29.647232, 1.916836, 15.4668, 0, 0.5, 2, 0.1),
        ("step5", 0, TOTAL, HCCL, "HCCS", 29.647232, 1.916836, 15.4668, 0, 1.937312, 2, 0.237944),
        ("step5", 0, TOTAL, HCCL, "HCCS", 29.647232, 1.916836, 15.4668, 0, 2.064384, 12, 1.578892),
        ("step5", 0, TOTAL, HCCL, "SDMA", 29.647232, 1.916836, 15.4668, 0, 0.0, 0, 0.0)]
    matrix = list(rows["ClusterCommunicationMatrix"])
    assert matrix[0] == ("step5", "allreduce-top1", HCCL, 0.0, 0.0, "LOCAL", OP0, 4.0, 0.008, 500.0)
    assert matrix[3] == ("step5", "allreduce-top1", HCCL, 1.0, 0.0, "HCCS", OP1, 37.0, 2.2, 37_000_000 / 2_200_000)
    assert len(matrix) == 4 + 2 + 1 + 2 + 1


def test_reported_step_rows_stand_for_ranks_without_trace_steps():
    """A rank whose steps came from kernel_details' Step Id keeps torch_npu's own step_trace_time.csv rows."""
    reported = [{"Step": 7, "Computing": 8873.756, "Communication(Not Overlapped)": 101963.203,
                 "Overlapped": 4028.675, "Communication": 105991.878, "Free": 25744.05, "Stage": 136581.0,
                 "Bubble": 0.0, "Communication(Not Overlapped and Exclude Receive)": 101963.203, "Preparing": 17902.5}]
    tables = RunTables().with_meta({"rank_meta": json.dumps({"3": {
        "step_source": "kernel_details Step Id", "step_trace_time": json.dumps(reported)}})})
    assert co.cluster_step_trace(job_of(tables)).to_pylist() == [{
        "rank": 3, "step": 7, "computing_ns": 8873756, "communication_not_overlapped_ns": 101963203,
        "overlapped_ns": 4028675, "communication_ns": 105991878, "free_ns": 25744050, "stage_ns": 136581000,
        "bubble_ns": 0, "communication_not_overlapped_exclude_receive_ns": 101963203, "preparing_ns": 17902500,
        "source": "step_trace_time.csv"}]


def test_nested_json_is_written_piece_by_piece():
    """The matrix file's writer: nested objects from path-sorted members, whatever the depth at which paths
    part, the same JSON as a dict of dicts."""
    members = [(("(0, 1)", "step"), '"0-1": {"a": 1}'), (("(0, 1)", "step"), '"1-0": null'),
               (("(0, 1)", "step5"), '"0-1": 2.5'), (("(0, 2)", "step5"), '"2-0": "x"')]
    text = "".join(view._nested_json(members))
    assert json.loads(text) == {"(0, 1)": {"step": {"0-1": {"a": 1}, "1-0": None}, "step5": {"0-1": 2.5}},
                                "(0, 2)": {"step5": {"2-0": "x"}}}
    assert "".join(view._nested_json([])) == "{}"
