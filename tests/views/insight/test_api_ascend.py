"""insight over Ascend output: a torch_npu job (two rank directories) and MindSpore's folder are listed as
one run each and every page's routes answer with the analysis results of the merged job; the Cluster
page's communication routes on the Ascend job and on a planted two-rank NCCL job (Kineto traces) send
the collectives' figures, the matrix, link bandwidth, verdicts, clock offsets, groups and lacks exactly."""
from __future__ import annotations

import pytest

from perfsight.analysis.cluster import rank_breakdown
from perfsight.analysis.collectives import communication_pairs
from perfsight.analysis.job_summaries import job_of
from tests.analysis.planted_nccl_job import SHIFT_NS, write_nccl_job
from tests.conftest import copy_shared

from .conftest import Served, expected

ROUTES = ["overview", "steps", "operators", "flops", "dynamic", "data", "resources/host", "memory", "cluster",
          "cluster/communication", "cluster/operations", "timeline/tracks"]


@pytest.fixture(scope="module")
def served_ascend(tmp_path_factory, shared_data):
    base = tmp_path_factory.mktemp("ascend_runs")
    copy_shared(shared_data / "ascend" / "torch_npu" / "text" / "level1", base / "npu_job")
    copy_shared(shared_data / "ascend" / "mindspore_legacy" / "profiler", base / "mindspore")
    write_nccl_job(base / "nccl_job")
    for path in [base, *base.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    with Served(base) as served:
        yield served


def test_ascend_runs_are_listed_as_jobs(served_ascend):
    runs = {r["path"]: r for r in served_ascend.library.entries()}
    assert runs["npu_job"]["kind"] == "torch_npu job" and runs["npu_job"]["ranks"] == [0, 1]
    assert runs["npu_job"]["steps"] == [50] and runs["npu_job"]["status"] == "ready"
    assert runs["mindspore"]["kind"] == "mindspore run" and runs["mindspore"]["ranks"] == [0, 1, 10]


@pytest.mark.parametrize("prefix", ["npu_job", "mindspore"])
def test_every_page_answers(served_ascend, prefix):
    run_id = served_ascend.id(prefix)
    for route in ROUTES:
        response = served_ascend.client.get(f"/api/runs/{run_id}/{route}")
        assert response.status_code == 200, (route, response.text[:300])


def test_cluster_page_holds_the_job_analyses(served_ascend):
    run_id = served_ascend.id("npu_job")
    tables = served_ascend.library.get(run_id).tables
    cluster = served_ascend.client.get(f"/api/runs/{run_id}/cluster").json()
    assert sorted({row["rank"] for row in rank_breakdown(job_of(tables)).to_pylist()}) == [0, 1]
    assert len(cluster["ranks"]) == 2
    matrix = served_ascend.client.get(f"/api/runs/{run_id}/cluster/communication").json()["matrix"]
    assert matrix == expected(communication_pairs(job_of(tables)))


def test_cluster_communication_of_the_ascend_job(served_ascend):
    """Figures of text/level1 (2 of 8 ranks, 4 all-reduces each; communication.json's and
    communication_matrix.json's as reported, msprof-analyze's Total Op Info summed)."""
    comm = served_ascend.get("npu_job", "cluster/communication")
    group = "17522688603477080586"
    totals = [(t["rank"], t["process_group"], t["collective"], t["operations"], t["bytes"], t["elapse_ns"],
               t["transit_ns"], t["wait_ns"], t["sync_ns"], t["idle_ns"]) for t in comm["totals"]]
    assert totals == [(0, group, "allreduce", 4, 244_403_360, 105_991_878, 3_683_353, 5_940_619, 5_615_712, 96_367_906),
                      (1, group, "allreduce", 4, 244_403_360, 100_375_286, 3_859_677, 191_384, 20_900, 96_324_225)]
    assert comm["totals"][0]["busbw_gbps"] == 244_403_360 / 3_683_353 * 2 * 7 / 8
    hccs = [(r["rank"], r["operations"], r["transit_bytes"], r["transit_ns"], len(r["size_distribution"]))
            for r in comm["links"] if r["link_type"] == "HCCS"]
    assert hccs == [(0, 4, 427_596_096, 27_315_706, 8), (1, 4, 427_596_096, 27_583_971, 8)]
    assert sorted({r["link_type"] for r in comm["links"]}) == ["HCCS", "PCIE", "RDMA", "SDMA", "SIO"]
    assert [(o["rank"], o["offset_ns"], o["collectives_used"], o["spread_ns"]) for o in comm["offsets"]] == [
        (0, 0, 4, 0), (1, -8136, 4, 8160)]
    # rank 0 waits 5.94 ms over the step's 4 all-reduces, rank 1 0.19 ms; rank 1's longer work before them
    # explains 3.48 ms of rank 0's wait: it is the straggler
    assert [(r["rank"], r["last_arrivals"], r["caused_per_step_ns"], r["waited_per_step_ns"], r["slow"])
            for r in comm["slow_ranks"]] == [(0, 1, 100, 5_940_619, False), (1, 3, 3_480_846, 191_384, True)]
    # the 8-rank group is unmapped (no parallel_group_info): only the links between the two profiled ranks are
    # global; the other six peers of each are group-local positions, summed under an unknown peer (dst null)
    assert [(c["src_rank"], c["dst_rank"], c["transit_bytes"]) for c in comm["matrix"]] == [
        (0, 0, 61_210_656), (0, 1, 61_210_624), (0, None, 366_385_472),
        (1, 0, 61_210_624), (1, 1, 61_210_656), (1, None, 366_385_472)]
    assert len(comm["slow_links"]) == 2 and not any(link["slow"] for link in comm["slow_links"])
    assert comm["rules"]["slow_link"]["threshold"] == ("bandwidth < 80% of the median of its transport's links, "
                                                       "with at least 2 links; only links whose operations move 1 "
                                                       "MB or more on average are judged")
    assert comm["groups"] == [{"process_group": group, "group_name": None, "kind": "collective",
                               "ranks": [0, 1, 2, 3, 4, 5, 6, 7], "ranks_global": False,
                               "source": "Process Group Ranks"}]
    cell = next(c for c in comm["matrix"] if (c["src_rank"], c["dst_rank"]) == (0, 1))
    assert (cell["transport"], cell["transit_bytes"], cell["transit_ns"]) == ("HCCS", 61_210_624, 3_883_938)
    lacks = served_ascend.get("npu_job", "cluster")["lacks"]
    assert [(r["rank"], r["step_source"], r["lacking_files"], len(r["warnings"])) for r in lacks] == [
        (0, "trace", [], 3), (1, "trace", [], 3)]
    assert lacks[1]["warnings"][2] == "171 times a slice started inside another of its track and ended after it " \
                                      "(made siblings)"


def test_cluster_operations_page_of_the_ascend_job(served_ascend):
    page = served_ascend.get("npu_job", "cluster/operations", page_size="3")
    assert (page["total"], page["sort"], page["order"]) == (8, "wait_ns", "desc")
    assert [(r["rank"], r["op_name"], r["wait_ns"]) for r in page["rows"]] == [
        (0, "hcom_allReduce__586_0_1", 5_646_633), (0, "hcom_allReduce__586_2_1", 188_424),
        (1, "hcom_allReduce__586_2_1", 96_642)]
    one = served_ascend.get("npu_job", "cluster/operations", rank="1", sort="busbw_gbps", order="asc", page="2",
                            page_size="3")
    assert (one["total"], len(one["rows"]), {r["rank"] for r in one["rows"]}) == (4, 1, {1})
    assert "sort='nope': expected one of rank, slice_id" in served_ascend.refused("npu_job", "cluster/operations",
                                                                                   sort="nope")
    assert "page_size=0: expected an integer from 1 to 500" in served_ascend.refused(
        "npu_job", "cluster/operations", page_size="0")


def test_cluster_routes_of_a_planted_nccl_job(served_ascend):
    """tests/analysis/planted_nccl_job.py's known answers, as the page gets them."""
    comm = served_ascend.get("nccl_job", "cluster/communication")
    assert [(t["rank"], t["process_group"], t["collective"], t["operations"], t["mean_bytes"], t["elapse_ns"],
             t["transit_ns"], t["wait_ns"], t["wait_ratio"], t["algbw_gbps"], t["busbw_gbps"])
            for t in comm["totals"]] == [
        (0, "pg0", "allreduce", 3, 4_000_000, 2_400_000, 1_500_000, 900_000, 0.375, 8.0, 8.0),
        (0, "pg1", "send", 1, 4000, 100_000, 50_000, 50_000, 0.5, 0.08, 0.08),
        (1, "pg0", "allreduce", 3, 4_000_000, 1_500_000, 1_500_000, 0, 0.0, 8.0, 8.0),
        (1, "pg1", "recv", 1, 4000, 50_000, 50_000, 0, 0.0, 0.08, 0.08)]
    assert [(m["src_rank"], m["dst_rank"], m["transit_bytes"], m["transit_ns"], m["collectives"])
            for m in comm["matrix"]] == [(0, 1, 12_004_000, 1_550_000, 4), (1, 0, 12_000_000, 1_500_000, 3)]
    assert [(o["rank"], o["offset_ns"], o["estimate_ns"], o["collectives_used"], o["spread_ns"])
            for o in comm["offsets"]] == [(0, 0, 0, 3, 0), (1, SHIFT_NS, SHIFT_NS, 3, 0)]
    assert [(r["process_group"], r["rank"], r["slow"]) for r in comm["slow_ranks"]] == [
        ("pg0", 0, False), ("pg0", 1, True), ("pg1", 0, False), ("pg1", 1, False)]
    assert [(r["src_rank"], r["dst_rank"], r["median_gbps"], r["slow"]) for r in comm["slow_links"]] == [
        (0, 1, (12_004_000 / 1_550_000 + 8.0) / 2, False), (1, 0, (12_004_000 / 1_550_000 + 8.0) / 2, False)]
    assert [(g["process_group"], g["group_name"], g["kind"], g["ranks"]) for g in comm["groups"]] == [
        ("pg0", "dp", "collective", [0, 1]), ("pg1", "pp", "p2p", [0, 1])]
    assert [(r["rank"], r["link_type"], r["transit_bytes"], r["transit_ns"]) for r in comm["links"]] == [
        (0, "UNKNOWN", 12_004_000, 1_550_000), (1, "UNKNOWN", 12_004_000, 1_550_000)]
    # times relative to the run's first instant (rank 0's step start); rank 1's clock reads SHIFT_NS more
    page = served_ascend.get("nccl_job", "cluster/operations", sort="start_ns", order="asc")
    assert [(r["rank"], r["collective"], r["sequence"], r["start_ns"], r["aligned_start_ns"], r["wait_ns"])
            for r in page["rows"]] == [
        (0, "allreduce", 0, 10_000, 10_000, 300_000), (0, "allreduce", 1, 1_010_000, 1_010_000, 300_000),
        (0, "allreduce", 2, 2_010_000, 2_010_000, 300_000), (0, "send", 0, 3_500_000, 3_500_000, 50_000),
        (1, "allreduce", 0, 310_000 + SHIFT_NS, 310_000, 0), (1, "allreduce", 1, 1_310_000 + SHIFT_NS, 1_310_000, 0),
        (1, "allreduce", 2, 2_310_000 + SHIFT_NS, 2_310_000, 0), (1, "recv", 0, 3_550_000 + SHIFT_NS, 3_550_000, 0)]
    lacks = served_ascend.get("nccl_job", "cluster")["lacks"]
    assert [(r["rank"], r["step_source"], r["lacking_files"], r["warnings"]) for r in lacks] == [
        (0, None, [], []), (1, None, [], [])]
