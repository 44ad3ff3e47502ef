"""analysis/collectives.py on planted jobs with exact answers (clock shift, arrival skew, bandwidths, gloo on
CPU, a reported matrix), on the real multi-rank Kineto traces and on the Ascend 2-rank job, whose figures
must be communication.json's (and msprof-analyze's cluster_communication.json's) per operation."""
import gzip
import json
import shutil

import pyarrow as pa
import pytest

import perfsight
from perfsight.analysis import breakdown, collectives, waiting
from perfsight.analysis.job_summaries import job_of
from perfsight.core.tables import new_connection

from .planted import BASE, tables_from_rows
from .test_cluster import job

LEVEL1 = ("ascend", "torch_npu", "text", "level1")
REFERENCE = ("ascend", "msprof_analyze_reference", "cluster_all__ascend-msinsight_pytorch_text_level1")


def test_collectives_take_each_ranks_best_source():
    rows = collectives.collectives(job()).to_pylist()
    by_rank = {r: [row for row in rows if row["rank"] == r] for r in (0, 1, 2)}
    # rank 0: the two kernels with metadata (the record_param_comms and the bare kernels are not used)
    assert [(c["source"], c["collective"], c["dur_ns"], c["in_bytes"], c["group_ranks"], c["peer"])
            for c in by_rank[0]] == [("device", "allreduce", 4000, 4000, [0, 1, 2, 3], None),
                                     ("device", "send", 500, 20, [0, 1], 1)]
    # rank 1: its record (not the wait, not the annotation); the cut rank list rebuilt from start/stride
    (gather,) = by_rank[1]
    assert (gather["source"], gather["collective"], gather["dur_ns"], gather["in_bytes"], gather["out_bytes"],
            gather["group_ranks"], gather["group_size"]) == ("host record", "allgather", None, 64, 192, [1, 2, 3], 3)
    # rank 2: the backend's annotations; elements of the shapes; an unknown dtype has no bytes; gloo's range
    # is the collective's own time (it runs on that thread), NCCL's only enqueues it
    assert [(c["source"], c["collective"], c["in_nelems"], c["dtype"], c["in_bytes"], c["group_ranks"], c["dur_ns"])
            for c in by_rank[2]] == [("host annotation", "all_reduce", 6, "c10::BFloat16", 12, None, None),
                                     ("host annotation", "broadcast", 5, "mystery", None, None, 100)]


def test_a_kernels_cut_rank_list_takes_its_groups_ranks_from_the_ranks_record():
    """Kineto's NCCL kernels carry ``Process Group Ranks`` cut past 30 ranks without start and stride; the
    rank's record_param_comms of the same group carries them: the kernel's group is those 40 ranks (not
    unknown, which would leave its matrix cells without peers). A record of another size is not taken."""
    from .test_cluster import TRACKS, s

    wide = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 100, "Out msg nelems": 100,
            "Process Group Name": "dp", "Process Group Ranks": "[0, 2, 4, ..., 78]"}
    slices = [s("comm", "ncclKernel_AllReduce", 0, 1000, 2000, stream=True, args={**wide, "Group size": 40}),
              s("comm", "record_param_comms", 0, 900, 950,
                args={**wide, "Group size": 40, "Global rank start": 0, "Global rank stride": 2}),
              s("comm", "ncclKernel_AllReduce", 1, 1000, 2000, stream=True, args={**wide, "Group size": 41}),
              s("comm", "record_param_comms", 1, 900, 950,
                args={**wide, "Group size": 40, "Global rank start": 1, "Global rank stride": 2})]
    rows = collectives.collectives(tables_from_rows(slices=slices, tracks=TRACKS)).to_pylist()
    assert [(r["rank"], r["source"], r["group_ranks"]) for r in rows] == [
        (0, "device", list(range(0, 80, 2))), (1, "device", None)]


def test_a_group_beyond_paired_group_ranks_is_one_row_without_peers():
    """A group of PAIRED_GROUP_RANKS ranks is a cell per other member; one rank more is one row of the
    recording rank with no destination (its data moves between neighbours no trace records)."""
    from .test_cluster import TRACKS, s

    def allreduce(rank, group, size):
        ranks = list(range(size))
        args = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 10, "Out msg nelems": 10,
                "Group size": size, "Process Group Name": group, "Process Group Ranks": json.dumps(ranks)}
        return s("comm", "ncclKernel_AllReduce", rank, 0, 100, stream=True, args=args)

    paired = collectives.PAIRED_GROUP_RANKS
    tables = tables_from_rows(slices=[allreduce(0, "small", paired), allreduce(0, "big", paired + 1)],
                              tracks=TRACKS)
    cells = collectives.communication_matrix(job_of(tables)).to_pylist()
    assert sorted({(c["process_group"], c["dst_rank"] is None) for c in cells}) == [("big", True), ("small", False)]
    assert [len([c for c in cells if c["process_group"] == group]) for group in ("small", "big")] == [paired - 1, 1]


def test_communication_pairs_of_the_planted_job():
    cells = {(r["src_rank"], r["dst_rank"]): (r["collectives"], r["transit_bytes"], r["transit_ns"])
             for r in collectives.communication_pairs(job_of(job())).to_pylist()}
    # rank 0's all-reduce (group [0..3], 4000 bytes) and its send to 1 (20 bytes): no other member traced on
    # the device, so no wait and no transit time; rank 1's all-gather (192 bytes out) with 2 and 3
    assert cells == {
        (0, 1): (2, 4020, None), (0, 2): (1, 4000, None), (0, 3): (1, 4000, None),
        (1, 2): (1, 192, None), (1, 3): (1, 192, None),
        (2, None): (2, 12, None),
    }


def test_collective_summary():
    rows = {(r["rank"], r["collective"]): r for r in collectives.collective_summary(job()).to_pylist()}
    assert set(rows) == {(0, "allreduce"), (0, "send"), (1, "allgather"), (2, "all_reduce"), (2, "broadcast")}
    send = rows[(0, "send")]
    assert (send["count"], send["in_bytes"], send["dur_ns"], send["with_peers"], send["source"]) == (
        1, 20, 500, 1, "device")
    assert rows[(2, "all_reduce")]["with_peers"] == 0


@pytest.mark.parametrize("name, kind", [
    ("allreduce", "allreduce"), ("all_reduce", "allreduce"), ("allreduce_coalesced", "allreduce"),
    ("_allgather_base", "allgather"), ("all_gather_into_tensor_coalesced", "allgather"),
    ("reduce_scatter_tensor_coalesced", "reducescatter"), ("_reduce_scatter_base", "reducescatter"),
    ("all_to_all", "alltoall"), ("alltoall_base", "alltoall"), ("broadcast", "broadcast"), ("reduce", "reduce"),
    ("send", "send"), ("recv", "recv"), ("recv_anysource", "recv"), ("barrier", "barrier"), ("gather", "other"),
    ("batch_send_recv", "sendrecv"), (None, "other")])
def test_collective_kinds(name, kind):
    assert collectives.collective_kind(name) == kind


def test_bus_factors_are_nccl_tests():
    def factor(kind, ranks):
        sql = collectives._bus_factor_sql(f"'{kind}'", "NULL" if ranks is None else str(ranks))
        return new_connection().sql(f"SELECT {sql}").fetchall()[0][0]

    assert (factor("allreduce", 8), factor("allgather", 8), factor("reducescatter", 4), factor("alltoall", 2)) == (
        2 * 7 / 8, 7 / 8, 3 / 4, 1 / 2)
    assert (factor("broadcast", 8), factor("reduce", 3), factor("send", 2), factor("recv", None)) == (1, 1, 1, None)
    assert (factor("barrier", 8), factor("other", 8), factor("allreduce", None)) == (None, None, None)


# --- two NCCL ranks, rank 1's clock D ahead -----------------------------------------------------------------

D = 7_000_123
TRACKS = [row for r in (0, 1) for row in (
    {"track_id": 10 * r + 1, "rank": r, "pid": str(100 + r), "tid": "1", "device": "cpu", "kind": "thread",
     "name": f"thread 1 rank {r}", "sort_index": 0},
    {"track_id": 10 * r + 2, "rank": r, "pid": str(r), "tid": "7", "device": f"cuda:{r}", "kind": "stream",
     "name": f"cuda:{r} stream 7", "sort_index": 7})]
ALLREDUCE = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1_000_000, "Out msg nelems": 1_000_000,
             "Group size": 4, "Process Group Name": "pg0", "Process Group Desc": "dp",
             "Process Group Ranks": "[0, 1, 2, 3]"}
P2P = {"dtype": "Float", "In msg nelems": 1000, "Out msg nelems": 1000, "Group size": 2, "Process Group Name": "pg1",
       "Process Group Desc": "pp", "Process Group Ranks": "[0, 1]"}


def _slice(id, kind, name, rank, start, end, *, stream, args=None, step=1, shapes=None, dtypes=None, track=None):
    shift = D if rank == 1 else 0
    return {"id": id, "kind": kind, "name": name, "op_type": name,
            "track_id": track if track is not None else 10 * rank + (2 if stream else 1),
            "start_ns": BASE + shift + start, "dur_ns": end - start, "depth": 0, "step": step,
            "task_type": "COMM" if stream else None, "args": json.dumps(args) if args else None,
            "input_shapes": shapes, "input_dtypes": dtypes}


def shifted_job():
    """Three all-reduces: rank 0 starts at 10000 + i * 1e6, rank 1 300 us later, both end 800 us after rank 0's
    start (true time); a send 0 -> 1 [3.5 ms, 3.6 ms) and its recv [3.55 ms, 3.6 ms). Rank 1's clock reads D
    more."""
    slices = [_slice(1, "step", "ProfilerStep#1", 0, 0, 5_000_000, stream=False),
              _slice(2, "step", "ProfilerStep#1", 1, 0, 5_000_000, stream=False)]
    for i in range(3):
        start = 10_000 + i * 1_000_000
        slices += [_slice(10 + i, "comm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0, start, start + 800_000,
                          stream=True, args=ALLREDUCE),
                   _slice(20 + i, "comm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1, start + 300_000,
                          start + 800_000, stream=True, args=ALLREDUCE)]
    slices += [_slice(30, "comm", "ncclDevKernel_SendRecv", 0, 3_500_000, 3_600_000, stream=True,
                      args={**P2P, "Collective name": "send", "Dst Rank": 1}),
               _slice(31, "comm", "ncclDevKernel_SendRecv", 1, 3_550_000, 3_600_000, stream=True,
                      args={**P2P, "Collective name": "recv", "Src Rank": 0})]
    return tables_from_rows(slices=slices, tracks=TRACKS)


def test_a_shifted_clock_comes_back_exactly():
    assert collectives.clock_offsets(job_of(shifted_job())).to_pylist() == [
        {"rank": 0, "offset_ns": 0, "reference_rank": 0, "collectives_used": 3, "spread_ns": 0,
         "method": "reference rank", "estimate_ns": 0},
        {"rank": 1, "offset_ns": D, "reference_rank": 0, "collectives_used": 3, "spread_ns": 0,
         "method": "median of (end - reference end) over shared symmetric collective instances", "estimate_ns": D}]


def test_wait_is_arrival_skew_on_aligned_clocks():
    rows = collectives.collective_figures(job_of(shifted_job())).to_pylist()
    figures = [(r["rank"], r["collective"], r["sequence"], r["bytes"], r["aligned_start_ns"] - BASE, r["elapse_ns"],
                r["wait_ns"], r["transit_ns"], r["sync_ns"], r["idle_ns"], r["members"]) for r in rows]
    assert figures == [
        (0, "allreduce", 0, 4_000_000, 10_000, 800_000, 300_000, 500_000, 300_000, 0, 2),
        (0, "allreduce", 1, 4_000_000, 1_010_000, 800_000, 300_000, 500_000, 300_000, 0, 2),
        (0, "allreduce", 2, 4_000_000, 2_010_000, 800_000, 300_000, 500_000, 300_000, 0, 2),
        (0, "send", 0, 4000, 3_500_000, 100_000, 50_000, 50_000, 50_000, 0, 2),
        (1, "allreduce", 0, 4_000_000, 310_000, 500_000, 0, 500_000, 0, 0, 2),
        (1, "allreduce", 1, 4_000_000, 1_310_000, 500_000, 0, 500_000, 0, 0, 2),
        (1, "allreduce", 2, 4_000_000, 2_310_000, 500_000, 0, 500_000, 0, 0, 2),
        (1, "recv", 0, 4000, 3_550_000, 50_000, 0, 50_000, 0, 0, 2)]
    first = rows[0]
    assert (first["start_ns"], first["source"], first["process_group"], first["group_ranks"], first["figures_from"],
            first["op_name"]) == (BASE + 10_000, "device", "pg0", [0, 1, 2, 3], "computed",
                                  "ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    assert (first["wait_ratio"], first["sync_ratio"]) == (300_000 / 800_000, 300_000 / 800_000)
    # 4 MB over 500 us = 8 GB/s; bus bandwidth x 2 (4 - 1) / 4 for the group of 4
    assert (first["algbw_gbps"], first["busbw_gbps"]) == (8.0, 12.0)
    assert (rows[3]["algbw_gbps"], rows[3]["busbw_gbps"]) == (0.08, 0.08)
    assert rows[4]["aligned_start_ns"] == rows[4]["start_ns"] - D


def test_matrix_pairs_groups_and_slow_rank_of_the_shifted_job():
    tables = shifted_job()
    matrix = [(r["rank"], r["step"], r["process_group"], r["key"], r["src_rank"], r["dst_rank"], r["transit_bytes"],
               r["transit_ns"], r["collectives"], r["source"], r["total"])
              for r in collectives.communication_matrix(job_of(tables)).to_pylist()]
    assert matrix == [
        (0, 1, "pg0", "allreduce", 0, 1, 12_000_000, 1_500_000, 3, "computed", True),
        (0, 1, "pg0", "allreduce", 0, 2, 12_000_000, 1_500_000, 3, "computed", True),
        (0, 1, "pg0", "allreduce", 0, 3, 12_000_000, 1_500_000, 3, "computed", True),
        (0, 1, "pg1", "send", 0, 1, 4000, 50_000, 1, "computed", True),
        (1, 1, "pg0", "allreduce", 1, 0, 12_000_000, 1_500_000, 3, "computed", True),
        (1, 1, "pg0", "allreduce", 1, 2, 12_000_000, 1_500_000, 3, "computed", True),
        (1, 1, "pg0", "allreduce", 1, 3, 12_000_000, 1_500_000, 3, "computed", True),
        (1, 1, "pg1", "recv", 0, 1, 4000, 50_000, 1, "computed", True)]
    pairs = {(r["src_rank"], r["dst_rank"]): (r["transit_bytes"], r["transit_ns"], r["collectives"])
             for r in collectives.communication_pairs(job_of(tables)).to_pylist()}
    # the link 0 -> 1 counted once, by its sender (rank 1's recv row is the same traffic)
    assert pairs == {(0, 1): (12_004_000, 1_550_000, 4), (0, 2): (12_000_000, 1_500_000, 3),
                     (0, 3): (12_000_000, 1_500_000, 3), (1, 0): (12_000_000, 1_500_000, 3),
                     (1, 2): (12_000_000, 1_500_000, 3), (1, 3): (12_000_000, 1_500_000, 3)}
    assert collectives.communication_groups(job_of(tables)).to_pylist() == [
        {"process_group": "pg0", "group_name": "dp", "kind": "collective", "ranks": [0, 1, 2, 3],
         "ranks_global": True, "source": "Process Group Ranks"},
        {"process_group": "pg1", "group_name": "pp", "kind": "p2p", "ranks": [0, 1], "ranks_global": True,
         "source": "Process Group Ranks"}]
    slow = [(r["process_group"], r["rank"], r["instances"], r["last_arrivals"], r["caused_per_step_ns"],
             r["waited_per_step_ns"], r["slow"]) for r in waiting.slow_ranks(job_of(tables)).to_pylist()]
    # rank 1 arrives 300 us late at every all-reduce, rank 0 waits 900 us in all: each 300 us is rank 1's longer
    # work since its previous all-reduce (the first: since the step began). On pg1 the 50 us are below the floor
    assert slow == [("pg0", 0, 3, 0, 0, 900_000, False), ("pg0", 1, 3, 3, 900_000, 0, True),
                    ("pg1", 0, 1, 0, 0, 50_000, False), ("pg1", 1, 1, 1, 50_000, 0, False)]
    row = waiting.slow_ranks(job_of(tables)).to_pylist()[1]
    assert row["threshold"] == waiting.STRAGGLER_THRESHOLD and "late arrival" in row["rule"]
    links = collectives.slow_links(job_of(tables)).to_pylist()
    assert [(r["src_rank"], r["dst_rank"], r["transport"], r["median_gbps"], r["links"], r["slow"]) for r in links] == [
        (0, 1, "UNKNOWN", 8.0, 6, False), (0, 2, "UNKNOWN", 8.0, 6, False), (0, 3, "UNKNOWN", 8.0, 6, False),
        (1, 0, "UNKNOWN", 8.0, 6, False), (1, 2, "UNKNOWN", 8.0, 6, False), (1, 3, "UNKNOWN", 8.0, 6, False)]
    bandwidth = collectives.link_bandwidth(job_of(tables)).to_pylist()
    assert {(r["link_type"], r["bandwidth_gbps"]) for r in bandwidth} == {("UNKNOWN", 8.0), ("UNKNOWN", 0.08)}


def test_a_rank_on_the_reference_host_keeps_its_clock():
    """Ranks whose perfsight manifests name one host share one clock: offset 0, the ends' skew still shown."""
    tables = shifted_job()
    manifest = json.dumps({"host": "node7"})
    tables = tables.with_meta({"rank_meta": json.dumps({"0": {"manifest": manifest}, "1": {"manifest": manifest}})})
    rows = collectives.clock_offsets(job_of(tables)).to_pylist()
    assert (rows[1]["offset_ns"], rows[1]["estimate_ns"], rows[1]["method"]) == (
        0, D, "same host as the reference rank (node7): one clock")


# --- gloo on CPU --------------------------------------------------------------------------------------------

def cpu_gloo_job():
    """Two CPU ranks on gloo, one clock: rank r's main thread runs aten::mm [500, 1800) and calls
    c10d::allreduce_ at 1900 + 1000 r for 200 ns; its gloo worker thread runs gloo:all_reduce from
    2000 + 1000 r to 6000 (1000 floats). Step 1 is [0, 10000) on both."""
    tracks = [row for r in (0, 1) for row in (
        {"track_id": 10 * r + 1, "rank": r, "pid": str(100 + r), "tid": "1", "device": "cpu", "kind": "thread",
         "name": "main", "sort_index": 0},
        {"track_id": 10 * r + 3, "rank": r, "pid": str(100 + r), "tid": "3", "device": "cpu", "kind": "thread",
         "name": "gloo worker", "sort_index": 1})]
    slices = []
    for r in (0, 1):
        base = 100 * r
        slices += [
            {"id": base + 1, "kind": "step", "name": "ProfilerStep#1", "track_id": 10 * r + 1, "start_ns": BASE,
             "dur_ns": 10_000, "depth": 0, "step": 1},
            {"id": base + 2, "kind": "cpu_op", "name": "aten::mm", "track_id": 10 * r + 1, "start_ns": BASE + 500,
             "dur_ns": 1300, "depth": 1, "step": 1},
            {"id": base + 3, "kind": "comm", "name": "c10d::allreduce_", "track_id": 10 * r + 1,
             "start_ns": BASE + 1900 + 1000 * r, "dur_ns": 200, "depth": 1, "step": 1},
            {"id": base + 4, "kind": "comm", "name": "gloo:all_reduce", "track_id": 10 * r + 3,
             "start_ns": BASE + 2000 + 1000 * r, "dur_ns": 4000 - 1000 * r, "depth": 0, "step": 1,
             "input_shapes": "[[1000]]", "input_dtypes": '["float"]'}]
    return tables_from_rows(slices=[{**s, "op_type": s["name"]} for s in slices], tracks=tracks)


def test_gloo_on_cpu_is_communication():
    """The CPU DDP defect: host gloo/c10d work was host_ops and communication 0 ns."""
    tables = cpu_gloo_job()
    rows = [(r["rank"], r["step_ns"], r["communication_ns"], r["host_ops_ns"], r["idle_ns"])
            for r in breakdown.step_breakdown(tables).to_pylist()]
    # rank 0: c10d::allreduce_ and gloo:all_reduce cover [1900, 6000); rank 1 [2900, 6000)
    assert rows == [(0, 10_000, 4100, 1300, 4600), (1, 10_000, 3100, 1300, 5600)]
    figures = [(r["rank"], r["source"], r["collective"], r["bytes"], r["elapse_ns"], r["wait_ns"], r["transit_ns"])
               for r in collectives.collective_figures(job_of(tables)).to_pylist()]
    assert figures == [(0, "host annotation", "allreduce", 4000, 4000, 1000, 3000),
                       (1, "host annotation", "allreduce", 4000, 3000, 0, 3000)]
    pairs = [(r["src_rank"], r["dst_rank"], r["transit_bytes"], r["transit_ns"])
             for r in collectives.communication_pairs(job_of(tables)).to_pylist()]
    # the group is not recorded: each all-reduce pairs with the other rank traced in its instance
    assert pairs == [(0, 1, 4000, 3000), (1, 0, 4000, 3000)]


def test_host_communication_of_a_rank_whose_device_communicates_stays_host_ops():
    """Counted once: with NCCL kernels on the device, the host's nccl:all_reduce range only enqueues them."""
    from .test_cluster import job as gpu_job

    rows = {r["rank"]: r for r in breakdown.step_breakdown(gpu_job()).to_pylist()}
    assert (rows[0]["communication_ns"], rows[1]["communication_ns"]) == (4000, 1000)


# --- Ascend: a reported matrix, and the real 2-rank job -----------------------------------------------------

def test_a_reported_matrix_is_converted_and_its_slow_link_found():
    links = [{"step": 50, "kind": "collective", "key": "allreduce-total", "group": "g", "src": 0, "dst": dst,
              "local": False, "transport": "HCCS", "transit_size_mb": 37.781504, "transit_time_ms": time,
              "bandwidth_gbps": round(37.781504 / time, 4), "op_name": "hcom_allReduce__586_2_1"}
             for dst, time in ((1, 2.153383), (2, 2.20602409375), (3, 7.5))]
    links.append({**links[0], "key": "allreduce-top1", "dst": 0, "transport": "LOCAL", "transit_time_ms": 0.00822})
    tables = tables_from_rows(slices=[], tracks=TRACKS, meta={
        "rank_meta": json.dumps({"0": {"communication_matrix": json.dumps(links)}, "1": {}})})
    rows = collectives.communication_matrix(job_of(tables)).to_pylist()
    first = rows[0]
    assert (first["rank"], first["step"], first["process_group"], first["key"], first["src_rank"], first["dst_rank"],
            first["transit_bytes"], first["transit_ns"], first["bandwidth_gbps"], first["source"], first["total"]) == (
        0, 50, "g", "allreduce-top1", 0, 0, 37_781_504, 8220, round(37.781504 / 2.153383, 4),
        "communication_matrix.json", False)
    assert [(r["dst_rank"], r["transit_ns"], r["total"]) for r in rows[1:]] == [
        (1, 2_153_383, True), (2, 2_206_024, True), (3, 7_500_000, True)]
    slow = {r["dst_rank"]: (r["slow"], r["links"]) for r in collectives.slow_links(job_of(tables)).to_pylist()}
    # 37.78 MB / 7.5 ms = 5.04 GB/s against the median 17.13 GB/s of the three HCCS links: below 80%
    assert slow == {1: (False, 3), 2: (False, 3), 3: (True, 3)}


@pytest.fixture(scope="module")
def ascend_job(shared_data):
    return perfsight.open(shared_data.joinpath(*LEVEL1))


def _ms(value):
    return round(value * 1_000_000)


def test_ascend_figures_are_communication_json_per_operation(ascend_job, shared_data):
    rows = {(r["rank"], r["op_name"]): r for r in ascend_job.collective_figures().to_pylist()}
    assert len(rows) == 8
    for rank in (0, 1):
        path = shared_data.joinpath(*LEVEL1, f"rank{rank}_ascend_pt", "ASCEND_PROFILER_OUTPUT", "communication.json")
        for key, entry in json.loads(path.read_text())["step50"]["collective"].items():
            if "@" not in key:      # "Total Op Info"
                continue
            op_name, group = key.split("@")
            row, info = rows[(rank, op_name)], entry["Communication Time Info"]
            assert (row["elapse_ns"], row["transit_ns"], row["wait_ns"], row["sync_ns"], row["idle_ns"]) == (
                _ms(info["Elapse Time(ms)"]), _ms(info["Transit Time(ms)"]), _ms(info["Wait Time(ms)"]),
                _ms(info["Synchronization Time(ms)"]), _ms(info["Idle Time(ms)"]))
            assert (row["wait_ratio"], row["sync_ratio"]) == (
                info["Wait Time Ratio"], info["Synchronization Time Ratio"])
            assert (row["source"], row["process_group"], row["figures_from"], row["step"]) == (
                "hccl", group, "communication.json", 50)
            bandwidth = {(r["link_type"]): r for r in ascend_job.link_bandwidth().to_pylist()
                         if r["slice_id"] == row["slice_id"]}
            for link, reported in entry["Communication Bandwidth Info"].items():
                mine = bandwidth[link]
                assert (mine["transit_bytes"], mine["transit_ns"], mine["bandwidth_gbps"]) == (
                    round(reported["Transit Size(MB)"] * 1e6), _ms(reported["Transit Time(ms)"]),
                    reported["Bandwidth(GB/s)"])
                assert [(p["packet_bytes"], p["count"], p["dur_ns"]) for p in mine["size_distribution"]] == sorted(
                    (round(float(size) * 1e6), count, _ms(ms)) for size, (count, ms)
                    in reported["Size Distribution"].items())
    # hcom_allReduce__586_0_1 on rank 0: 4097000 float32 = 16388000 bytes over its 0.239184781 ms transit
    first = rows[(0, "hcom_allReduce__586_0_1")]
    assert (first["bytes"], first["transit_ns"], first["group_size"]) == (16_388_000, 239_185, 8)
    assert first["algbw_gbps"] == 16_388_000 / 239_185 and first["busbw_gbps"] == first["algbw_gbps"] * 2 * 7 / 8


def test_ascend_figures_match_msprof_analyze_cluster_communication(ascend_job, shared_data):
    reference = json.loads(shared_data.joinpath(*REFERENCE, "cluster_communication.json").read_text())
    rows = {(r["rank"], r["op_name"]): r for r in ascend_job.collective_figures().to_pylist()}
    checked = 0
    for key, ranks in reference["(0, 1)"]["step50"].items():
        op_name = key.split("@")[0]
        if op_name == "Total Op Info":
            continue
        for rank, entry in ranks.items():
            info = entry["Communication Time Info"]
            assert (rows[(int(rank), op_name)]["elapse_ns"], rows[(int(rank), op_name)]["wait_ns"]) == (
                _ms(info["Elapse Time(ms)"]), _ms(info["Wait Time(ms)"]))
            checked += 1
    assert checked == 8


def test_real_job_without_recorded_peers(shared_data, tmp_path):
    """trace_filter: ranks 0 and 1 of a 128-rank job, PyTorch without collective metadata: every operation is a
    host annotation (``nccl:all_reduce`` ...), peers not recorded; bytes from the Input Dims, the time from the
    NCCL kernels each range launched (its cudaLaunchKernel's correlation), checked here from the raw events."""
    folder = shared_data / "kineto" / "hta" / "trace_filter"
    for path in folder.glob("*.json.gz"):
        shutil.copy(path, tmp_path / path.name)
    run = perfsight.open(tmp_path)
    assert run.ranks == [0, 1]
    size = {"float": 4, "int": 4, "long": 8, "signed char": 1, "unsigned char": 1}
    # the group is not recorded: an operation pairs with the other rank traced in its instance (the same
    # sequence and kind: 8 of the 10; the 7th and 8th differ between the ranks); the job's other 126 ranks were
    # not traced
    cells = run.communication_pairs().to_pylist()
    assert {(r["src_rank"], r["dst_rank"]): r["collectives"] for r in cells} == {
        (0, 1): 8, (0, None): 2, (1, 0): 8, (1, None): 2}
    pairs = {rank: {"collectives": sum(r["collectives"] for r in cells if r["src_rank"] == rank),
                    "transit_bytes": sum(r["transit_bytes"] for r in cells if r["src_rank"] == rank)}
             for rank in (0, 1)}
    figures = run.collective_figures().to_pylist()
    for rank in (0, 1):
        with gzip.open(folder / f"sampled_rank-{rank}.json.gz", "rt") as f:
            every = json.load(f)["traceEvents"]
        events = sorted((e for e in every if e.get("name", "").startswith("nccl:")), key=lambda e: e["ts"])
        expected = sum(math_prod(dims) * size[dtype] for e in events
                       for dims, dtype in zip(e["args"]["Input Dims"], e["args"]["Input type"]) if dims)
        assert pairs[rank]["collectives"] == len(events) == 10
        assert pairs[rank]["transit_bytes"] == expected
        kernels = {e["args"]["correlation"]: e for e in every if e.get("cat") == "kernel" and "correlation" in e.get(
            "args", {}) and e["name"].startswith("ncclKernel")}
        launches = [e for e in every if e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation")
                    in kernels]
        elapse = []
        for event in events:
            mine = [kernels[c["args"]["correlation"]] for c in launches
                    if c["tid"] == event["tid"] and event["ts"] <= c["ts"] < event["ts"] + event["dur"]]
            elapse.append(round(1000 * (max(k["ts"] + k["dur"] for k in mine) - min(k["ts"] for k in mine))))
        assert [r["elapse_ns"] for r in figures if r["rank"] == rank] == elapse
    assert all(r["wait_ns"] is not None for r in figures if r["members"] == 2)
    assert [r["method"] for r in run.clock_offsets().to_pylist()] == [
        "reference rank", "median of (end - reference end) over shared symmetric collective instances"]


def math_prod(dims):
    n = 1
    for d in dims:
        n *= d
    return n


def test_real_trace_with_recorded_peers(shared_data, tmp_path):
    """nccl_data: rank 0 of 2, PyTorch 2.1-era: NCCL kernels carry the metadata and the group [0, 1]; rank 1
    is not traced, so there is no wait and no transit time."""
    path = shared_data / "kineto" / "hta" / "nccl_parser_config" / "nccl_data.json.gz"
    shutil.copy(path, tmp_path / path.name)
    run = perfsight.open(tmp_path / path.name)
    with gzip.open(path, "rt") as f:
        kernels = [e for e in json.load(f)["traceEvents"]
                   if e.get("cat") == "kernel" and "Collective name" in e.get("args", {})]
    size = {"Float": 4, "Long": 8, "Int": 4}
    expected = sum(max(e["args"]["In msg nelems"], e["args"]["Out msg nelems"]) * size[e["args"]["dtype"]]
                   for e in kernels)
    (cell,) = run.communication_pairs().to_pylist()
    assert (cell["src_rank"], cell["dst_rank"], cell["collectives"], cell["transit_bytes"], cell["transit_ns"]) == (
        0, 1, len(kernels), expected, None)
    found = run.collectives().to_pylist()
    assert {r["source"] for r in found} == {"device"}
    assert sum(r["dur_ns"] for r in found) == pytest.approx(sum(e["dur"] for e in kernels) * 1000, abs=len(kernels))
    assert run.communication_groups().to_pylist() == [
        {"process_group": "0", "group_name": "default_pg", "kind": "collective", "ranks": [0, 1],
         "ranks_global": True, "source": "Process Group Ranks"}]


# --- totals per rank, group and kind; per link type --------------------------------------------------------

def test_totals_of_the_shifted_job():
    """shifted_job: rank 0 waits 300 us at each of 3 all-reduces of 4 MB (transit 500 us) and 50 us at its
    send of 4000 bytes (transit 50 us); rank 1 never waits. Longest wait first."""
    rows = [(r["rank"], r["process_group"], r["collective"], r["operations"], r["timed"], r["bytes"], r["mean_bytes"],
             r["elapse_ns"], r["transit_ns"], r["wait_ns"], r["sync_ns"], r["idle_ns"], r["wait_ratio"],
             r["algbw_gbps"], r["busbw_gbps"])
            for r in collectives.collective_totals(job_of(shifted_job())).to_pylist()]
    assert rows == [
        (0, "pg0", "allreduce", 3, 3, 12_000_000, 4_000_000, 2_400_000, 1_500_000, 900_000, 900_000, 0, 0.375, 8.0,
         12.0),
        (0, "pg1", "send", 1, 1, 4000, 4000, 100_000, 50_000, 50_000, 50_000, 0, 0.5, 0.08, 0.08),
        (1, "pg0", "allreduce", 3, 3, 12_000_000, 4_000_000, 1_500_000, 1_500_000, 0, 0, 0, 0.0, 8.0, 12.0),
        (1, "pg1", "recv", 1, 1, 4000, 4000, 50_000, 50_000, 0, 0, 0, 0.0, 0.08, 0.08)]


def test_totals_of_operations_without_figures():
    """The planted job's rank 0: its all-reduce and send have device time but no other member traced (no
    wait, no transit: no bandwidth); rank 2's host annotations have neither time nor (one of them) bytes."""
    rows = {(r["rank"], r["collective"]): r for r in collectives.collective_totals(job_of(job())).to_pylist()}
    send = rows[(0, "send")]
    assert (send["operations"], send["timed"], send["bytes"], send["elapse_ns"], send["transit_ns"], send["wait_ns"],
            send["wait_ratio"], send["algbw_gbps"], send["busbw_gbps"]) == (1, 0, 20, 500, None, None, None, None, None)
    broadcast = rows[(2, "broadcast")]
    assert (broadcast["bytes"], broadcast["mean_bytes"], broadcast["elapse_ns"]) == (None, None, 100)


def test_ascend_totals_are_msprof_analyze_total_op_info(ascend_job, shared_data):
    """cluster_communication.json's "Total Op Info" per rank: the time figures summed over the rank's four
    all-reduces, the ratios of the sums, and the bandwidth per link type over the summed size and time."""
    reference = json.loads(shared_data.joinpath(*REFERENCE, "cluster_communication.json").read_text())
    (total,) = [v for k, v in reference["(0, 1)"]["step50"].items() if k.startswith("Total Op Info@")]
    totals = {r["rank"]: r for r in ascend_job.collective_totals().to_pylist()}
    links = {(r["rank"], r["link_type"]): r for r in ascend_job.link_totals().to_pylist()}
    for rank in (0, 1):
        info, mine = total[str(rank)]["Communication Time Info"], totals[rank]
        assert (mine["operations"], mine["collective"]) == (4, "allreduce")
        for column, name in (("elapse_ns", "Elapse Time(ms)"), ("transit_ns", "Transit Time(ms)"),
                             ("wait_ns", "Wait Time(ms)"), ("sync_ns", "Synchronization Time(ms)"),
                             ("idle_ns", "Idle Time(ms)")):
            assert abs(mine[column] - info[name] * 1e6) <= 4, column     # 4 operations, each rounded to the ns
        assert round(mine["wait_ratio"], 4) == info["Wait Time Ratio"]
        assert round(mine["sync_ratio"], 4) == info["Synchronization Time Ratio"]
        for link, reported in total[str(rank)]["Communication Bandwidth Info"].items():
            row = links[(rank, link)]
            assert row["transit_bytes"] == round(reported["Transit Size(MB)"] * 1e6)
            assert abs(row["transit_ns"] - reported["Transit Time(ms)"] * 1e6) <= 4
            assert (round(row["bandwidth_gbps"], 4) if row["bandwidth_gbps"] else 0) == reported["Bandwidth(GB/s)"]
            assert {p["packet_bytes"]: p["count"] for p in row["size_distribution"]} == {
                round(float(size) * 1e6): count for size, (count, _ms) in reported["Size Distribution"].items()}
    # rank 0, HCCS: 427.596096 MB in 27.315706 ms
    hccs = links[(0, "HCCS")]
    assert (hccs["operations"], hccs["transit_bytes"], hccs["transit_ns"]) == (4, 427_596_096, 27_315_706)
    assert hccs["bandwidth_gbps"] == 427_596_096 / 27_315_706
    assert links[(0, "PCIE")]["bandwidth_gbps"] is None          # no traffic, no bandwidth


def test_link_totals_of_a_trace_without_link_figures():
    rows = [(r["rank"], r["link_type"], r["operations"], r["transit_bytes"], r["transit_ns"], r["bandwidth_gbps"],
             r["size_distribution"]) for r in collectives.link_totals(job_of(shifted_job())).to_pylist()]
    assert rows == [(0, "UNKNOWN", 4, 12_004_000, 1_550_000, 12_004_000 / 1_550_000, None),
                    (1, "UNKNOWN", 4, 12_004_000, 1_550_000, 12_004_000 / 1_550_000, None)]


def test_links_of_small_transfers_are_not_judged_nor_set_the_median():
    """Four HCCS links move 1 GB each (2 at 20 GB/s, one at 19, one at 10: slow), two move 96-byte sends at
    0.02 GB/s (latency-bound: not judged, slow null): the median is the large links' 19.5 GB/s, not dragged down
    to 14.5 GB/s by the small ones, and the 19 GB/s link is not slow."""
    def pair(src, dst, nbytes, gbps, operations):
        return {"src_rank": src, "dst_rank": dst, "transport": "HCCS", "transit_bytes": nbytes,
                "transit_ns": round(nbytes / gbps), "bandwidth_gbps": gbps, "collectives": operations}

    pairs = pa.Table.from_pylist([pair(0, 1, 10**9, 20.0, 8), pair(1, 0, 10**9, 20.0, 8), pair(2, 3, 10**9, 19.0, 8),
                                  pair(3, 2, 10**9, 10.0, 8), pair(0, 2, 96 * 5, 0.02, 5), pair(2, 0, 120, 0.08, 1)],
                                 schema=collectives.COMMUNICATION_PAIRS)
    links = collectives.judged_links(pairs).to_pylist()
    assert [(r["src_rank"], r["dst_rank"], r["median_gbps"], r["links"], r["slow"]) for r in links] == [
        (0, 1, 19.5, 4, False), (0, 2, 19.5, 4, None), (1, 0, 19.5, 4, False), (2, 0, 19.5, 4, None),
        (2, 3, 19.5, 4, False), (3, 2, 19.5, 4, True)]
    assert links[0]["threshold"].endswith("only links whose operations move 1 MB or more on average are judged")
