"""insight over Ascend output: a torch_npu job (two rank directories) and MindSpore's folder are listed as
one run each and every page's routes answer with the analysis results of the merged job."""
from __future__ import annotations

import shutil

import pytest

from perfsight.analysis.cluster import rank_breakdown
from perfsight.analysis.collectives import communication_pairs

from .conftest import Served, expected

ROUTES = ["overview", "steps", "operators", "flops", "dynamic", "data", "resources/host", "memory", "cluster",
          "cluster/communication", "timeline/tracks"]


@pytest.fixture(scope="module")
def served_ascend(tmp_path_factory, shared_data):
    base = tmp_path_factory.mktemp("ascend_runs")
    shutil.copytree(shared_data / "ascend" / "torch_npu" / "text" / "level1", base / "npu_job")
    shutil.copytree(shared_data / "ascend" / "mindspore_legacy" / "profiler", base / "mindspore")
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
    assert sorted({row["rank"] for row in rank_breakdown(tables).to_pylist()}) == [0, 1]
    assert len(cluster["ranks"]) == 2
    matrix = served_ascend.client.get(f"/api/runs/{run_id}/cluster/communication").json()["matrix"]
    assert matrix == expected(communication_pairs(tables))
