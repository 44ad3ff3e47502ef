"""A job of more ranks than insight merges (``cluster.WHOLE_JOB_RANKS``) is mapped rank by rank in the background
and its Cluster page reads its ranks' summaries (api_cluster.py): the planted 64-rank job of
bench/clusterstore.py (its store written beside it: every rank found stored, none read) with its known answers,
the progress shown while the job is mapped and reduced (the server answers meanwhile), pages that need merged
tables refused with the reason, each rank opened alone; and a job mapped for real (the planted 2-rank NCCL job,
``cluster_ranks=1``) gives the figures of the same job merged."""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from perfsight.analysis import collectives
from perfsight.mapreduce import WHOLE_JOB_RANKS
from tests.analysis.planted_nccl_job import write_nccl_job

from .conftest import Served

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import clusterstore  # noqa: E402  (bench/ is scripts, imported as a sibling)

RANKS = 64


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    base = tmp_path_factory.mktemp("cluster_base")
    answers = clusterstore.write_job(base / "big", RANKS)
    with Served(base) as served:
        yield served, answers


def test_a_large_job_is_mapped_not_merged_and_its_store_reused(planted):
    served, answers = planted
    (entry,) = served.library.entries()
    assert RANKS > WHOLE_JOB_RANKS
    assert (entry["mode"], entry["ranks_done"], entry["ranks_total"], entry["ranks"]) == (
        "cluster", RANKS, RANKS, list(range(RANKS)))
    assert entry["ranks_as_ranges"] == "0-63"                                # as the run list writes them
    job = served.get("big", "cluster/job")
    assert job["mapped"]["counts"] == {"done": 0, "cached": RANKS, "failed": 0}     # the store beside it, fresh
    assert [r["rank"] for r in job["rank_runs"]] == list(range(RANKS))
    # every step ends STEP_NS after the last on every rank: even; rank 35 arrives late at every collective
    assert job["slowest"]["even"] and job["slowest"]["straggler_rank"] == answers["slow_rank"] == 35
    detail = served.refused("big", "overview", 409)
    assert detail == ("big is a job of 64 ranks, analysed rank by rank (its ranks are never merged): its Cluster "
                      "page shows the job, and each rank opens alone, with its own pages, from there")


def test_the_heatmap_nodes_top_and_offsets_of_the_planted_job(planted):
    served, answers = planted
    heat = served.get("big", "cluster/heatmap", value="compute")
    assert (heat["ranks"], heat["steps"]) == (list(range(RANKS)), [0, 1, 2, 3, 4])
    assert heat["z"][35][2] == (100_000_000 + (35 * 13 + 2 * 7) % 17 * 10_000 + 3_000_000) * 6 // 10
    assert served.refused("big", "cluster/heatmap", value="gpu").startswith("value='gpu': expected one of step,")
    nodes = served.get("big", "cluster/nodes")
    assert nodes["nodes"]["node"][8:10] == ["node 1 (assumed)", "node 1 (assumed)"]
    matrix = nodes["matrix"]
    assert len(matrix["src_node"]) == 64                                     # 8 x 8 nodes, no unknown peer
    cell = matrix["src_node"].index("node 0 (assumed)") + matrix["dst_index"][:8].index(1)
    # node 0 -> node 1: 64 rank pairs, each 5 steps of the world all-reduce; the 8 DP pairs add 5 DP all-reduces
    # and 5 sends each
    assert (matrix["links"][cell], matrix["collectives"][cell]) == (64, 64 * 5 + 8 * 10)
    assert matrix["transit_bytes"][cell] == \
        (64 * 5 + 8 * 5) * clusterstore.ALLREDUCE_BYTES + 8 * 5 * clusterstore.P2P_BYTES
    links = served.get("big", "cluster/nodes/links", src="node 0 (assumed)", dst="node 1 (assumed)")["links"]
    assert len(links) == 64 and sum(link["transit_bytes"] for link in links) == matrix["transit_bytes"][cell]
    assert served.refused("big", "cluster/nodes/links", src="node 99") == "src='node 99': not a node of this job"
    top = served.get("big", "cluster/top", n="3")
    assert [r["rank"] for r in top["ranks"]["rows"]][0] == 35
    assert [(r["rank"], r["slow"]) for r in top["slow_ranks"]["rows"]] == [(35, True)] * 3
    assert top["slow_ranks"]["slow"] == 3                                   # its TP, DP and world groups
    assert [(r["src_rank"], r["dst_rank"], r["slow"]) for r in top["slow_links"]["rows"]][0] == (1, 9, True)
    assert top["slow_links"]["slow"] == 1 and top["slow_links"]["rows"][0]["threshold"] == \
        collectives.SLOW_LINK_THRESHOLD
    assert served.get("big", "cluster/offsets")["offset_ns"] == answers["offsets_ns"]


def test_each_rank_opens_alone(planted):
    served, _ = planted
    rank_id = served.get("big", "cluster/job")["rank_runs"][35]["id"]
    deadline = time.monotonic() + 60
    while (entry := served.client.get(f"/api/runs/{rank_id}").json())["status"] not in ("ready", "error"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert (entry["path"], entry["ranks"], entry["job"], entry["mode"]) == ("big#rank35", [35], served.id("big"),
                                                                            "merged")
    overview = served.client.get(f"/api/runs/{rank_id}/overview")
    assert overview.status_code == 200
    assert [entry["path"] for entry in served.library.entries()] == ["big"]      # ranks are not listed


def test_the_map_and_reduce_run_in_the_background_with_progress(tmp_path):
    clusterstore.write_job(tmp_path / "big", 40)
    release, reducing = threading.Event(), threading.Event()
    from fastapi.testclient import TestClient

    from perfsight.views.insight.library import RunLibrary
    from perfsight.views.insight.server import create_app

    library = RunLibrary(tmp_path)
    app = create_app(library)
    prepare = library.prepare_job

    def held(job):
        reducing.set()
        release.wait(60)
        prepare(job)

    library.prepare_job = held
    with TestClient(app, base_url="http://127.0.0.1") as client:
        assert reducing.wait(60)
        (entry,) = client.get("/api/runs").json()["runs"]            # the server answers while the job reduces
        assert (entry["status"], entry["phase"], entry["ranks_done"], entry["ranks_total"]) == (
            "parsing", "reducing", 40, 40)
        refused = client.get(f"/api/runs/{entry['id']}/cluster/job")
        assert refused.status_code == 409 and "is parsing" in refused.json()["detail"]
        release.set()
        deadline = time.monotonic() + 60
        while client.get(f"/api/runs/{entry['id']}").json()["status"] != "ready":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert client.get(f"/api/runs/{entry['id']}/cluster/job").json()["mapped"]["counts"]["cached"] == 40


def test_a_job_mapped_for_real_gives_the_merged_jobs_figures(tmp_path):
    write_nccl_job(tmp_path / "nccl")
    with Served(tmp_path, cluster_ranks=1) as mapped, Served(tmp_path) as merged:
        assert [r["mode"] for r in mapped.library.entries()] == ["cluster"]
        assert mapped.get("nccl", "cluster/job")["mapped"]["counts"] == {"done": 2, "cached": 0, "failed": 0}
        for route in ("cluster/top", "cluster/offsets", "cluster/nodes", "cluster/heatmap"):
            assert mapped.get("nccl", route) == merged.get("nccl", route), route
        slow = mapped.get("nccl", "cluster/top")["slow_ranks"]["rows"]
        assert [(r["process_group"], r["rank"], r["slow"]) for r in slow][0] == ("pg0", 1, True)
