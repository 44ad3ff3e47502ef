"""The Data preparation, Resources and Cluster routes (api_resources.router) on planted runs with known
answers, through a small app with a fake run lookup: JSON shapes, times relative to the run's first
instant, the memo, and parameter validation naming the parameter."""
from __future__ import annotations

from types import SimpleNamespace

import pyarrow.compute as pc
import pytest
from fastapi import FastAPI, HTTPException
from fastapi.testclient import TestClient

from perfsight.analysis import cluster, collectives
from perfsight.analysis.breakdown import step_breakdown
from perfsight.analysis.job_summaries import job_of
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables
from perfsight.views.insight import api_resources
from perfsight.views.insight.library import LoadedRun
from tests.analysis.test_cluster import job
from tests.analysis.test_data import queue_run
from tests.analysis.test_memory import B, C, planted


def loaded(tables) -> LoadedRun:
    """A LoadedRun (the server's) over planted tables (with their memo)."""
    return LoadedRun(None, SimpleNamespace(tables=tables))


@pytest.fixture(scope="module")
def runs():
    return {"mem": loaded(planted()), "queues": loaded(queue_run([0, 0, 3, 5], host_queue=[8, 8, 7, 8])),
            "job": loaded(job()), "empty": loaded(RunTables())}


@pytest.fixture(scope="module")
def client(runs):
    def get_run(run_id: str):
        if run_id not in runs:
            raise HTTPException(404, f"no run with id {run_id!r}")
        return runs[run_id]

    app = FastAPI()
    app.include_router(api_resources.router(get_run))
    return TestClient(app)


def ok(client, url, **params):
    response = client.get(url, params=params)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()


def bad(client, url, **params):
    response = client.get(url, params=params)
    assert response.status_code == 400, response.text
    return response.json()["detail"]


def test_data_preparation(client):
    body = ok(client, "/api/runs/mem/data")
    assert [(s["step"], s["start_ns"], s["data_wait_ns"], s["step_ns"]) for s in body["steps"]] == [
        (1, 0, 1000, 10000), (2, 10000, 500, 10000)]                    # start relative to BASE
    (verdict,) = body["verdict"]
    assert verdict["verdict"] == "not" and verdict["bottleneck_steps"] == 1 and verdict["suggestions"]
    assert body["queues"] == [] and body["queue_summary"] == []
    queues = ok(client, "/api/runs/queues/data")
    series = {q["queue"]: q for q in queues["queues"]}
    assert series["data"]["value"] == [0, 0, 3, 5] and series["data"]["t_ns"] == [0, 1, 2, 3]
    assert series["host"]["series"] == "host_queue_size" and series["host"]["value"] == [8, 8, 7, 8]
    assert {q["queue"]: q["empty_samples"] for q in queues["queue_summary"]} == {"data": 2, "host": 0}


def test_host_series_and_summary(client):
    body = ok(client, "/api/runs/mem/resources/host")
    (series,) = body["series"]
    assert (series["rank"], series["series"], series["t_ns"], series["value"]) == (
        0, "host.cpu_percent.process", [5000, 15000], [50.0, 75.5])
    (summary,) = body["summary"]
    assert (summary["first_ts_ns"], summary["last_ts_ns"], summary["max"], summary["unit"]) == (
        5000, 15000, 75.5, "percent")
    assert body["units"]["host.memory_rss_bytes.process"] == "bytes"


def test_memory_overview_curve_alive_and_allocations(client):
    body = ok(client, "/api/runs/mem/memory")
    peaks = {d["device"]: d for d in body["devices"]}
    assert (peaks["cuda:0"]["peak_allocated_bytes"], peaks["cuda:0"]["peak_ts_ns"]) == (3500, 11500)
    assert {r["op_type"] for r in body["by_op"]} >= {"aten::linear", "AddmmBackward0"}

    curve = ok(client, "/api/runs/mem/memory/curve", rank=0, device="cuda:0")
    assert (curve["events"], curve["sampled"]) == (6, False)
    assert curve["points"]["t_ns"] == [1650, 3300, 3300, 11500, 14500, 15000]
    assert curve["points"]["allocated_bytes"] == [1000, 1500, 500, 3500, 500, 600]
    thin = ok(client, "/api/runs/mem/memory/curve", rank=0, device="cuda:0", max_points=10)
    assert thin["points"]["seq"] == [1, 2, 3, 4, 5, 6]

    alive = ok(client, "/api/runs/mem/memory/alive", rank=0, device="cuda:0", t_ns=12000)
    assert (alive["t_ns"], alive["tensor_count"]) == (12000, 2)
    assert [(t["addr"], t["bytes"], t["alloc_ts_ns"], t["age_ns"]) for t in alive["tensors"]] == [
        (C, 3000, 11500, 500), (B, 500, 3300, 8700)]
    assert [(r["op_type"], r["bytes"]) for r in alive["by_op"]] == [("aten::linear", 3000), ("aten::relu", 500)]
    assert ok(client, "/api/runs/mem/memory/alive", rank=0, device="cuda:0", t_ns=12000, limit=1)["tensors"][0][
        "addr"] == C

    page = ok(client, "/api/runs/mem/memory/allocations", rank=0, device="cuda:0", offset=1, limit=2)
    assert (page["total"], page["offset"]) == (4, 1)
    assert [(r["addr"], r["alloc_ts_ns"], r["free_ts_ns"]) for r in page["rows"]] == [(B, 3300, None),
                                                                                      (C, 11500, 14500)]


def test_memory_parameters_are_validated_by_name(client):
    assert "rank=0, device='cuda:7': no memory events" in bad(client, "/api/runs/mem/memory/curve", rank=0,
                                                              device="cuda:7")
    assert "rank 0 device cpu" in bad(client, "/api/runs/mem/memory/curve", rank=0, device="cuda:7")
    assert bad(client, "/api/runs/mem/memory/curve", rank="x", device="cpu").startswith("rank='x': expected an integer")
    assert "max_points=5: expected an integer from 10 to 100000" in bad(client, "/api/runs/mem/memory/curve", rank=0,
                                                                        device="cpu", max_points=5)
    assert bad(client, "/api/runs/mem/memory/alive", rank=0, device="cpu").startswith("t_ns is required")
    refused = bad(client, "/api/runs/mem/memory/alive", rank=0, device="cpu", t_ns=-1)
    assert "t_ns=-1: expected an integer from 0 to " in refused
    assert "limit=1000000" in bad(client, "/api/runs/mem/memory/allocations", rank=0, device="cpu", limit=10**6)
    assert "offset=99" in bad(client, "/api/runs/mem/memory/allocations", rank=0, device="cpu", offset=99)
    assert "no memory events" in bad(client, "/api/runs/empty/memory/curve", rank=0, device="cpu")
    assert client.get("/api/runs/nope/memory").status_code == 404


def test_one_device_is_the_default():
    tables = planted()
    tables.memory = tables.memory.filter(pc.equal(tables.memory["device"], "cpu"))
    app = FastAPI()
    app.include_router(api_resources.router(lambda run_id: loaded(tables)))
    curve = ok(TestClient(app), "/api/runs/x/memory/curve")
    assert (curve["rank"], curve["device"], curve["events"]) == (0, "cpu", 1)


def test_cluster_and_communication(client):
    body = ok(client, "/api/runs/job/cluster")
    assert body["categories"][-1] == "idle" and body["categories"][0] == "compute"
    ranks = {r["rank"]: r for r in body["ranks"]}            # tests/analysis/test_cluster.py's job: even
    assert not any(r["slowest"] or r["straggler"] for r in ranks.values())
    assert (body["slowest"]["even"], body["slowest"]["straggler_rank"]) == (True, None)
    steps = body["steps"]
    assert list(zip(steps["rank"], steps["step"], steps["step_ns"])) == [
        (0, 1, 10000), (0, 2, 10000), (0, 3, 10000), (1, 1, 9800), (1, 2, 9800)]
    assert "start_ns" not in steps
    comm = ok(client, "/api/runs/job/cluster/communication")
    cells = {(c["src_rank"], c["dst_rank"]): c["transit_bytes"] for c in comm["matrix"]}
    assert cells[(0, 1)] == 4020 and cells[(2, None)] == 12
    assert {(c["rank"], c["collective"]) for c in comm["collectives"]} >= {(0, "send"), (2, "broadcast")}


def test_empty_run_answers_every_page_route(client):
    for url in ("data", "resources/host", "memory", "cluster", "cluster/communication"):
        body = ok(client, f"/api/runs/empty/{url}")
        assert body is not None
    assert ok(client, "/api/runs/empty/cluster")["slowest"] is None


def test_page_results_are_computed_once_per_run(client, runs):
    """The run's results in its memo, the cross-rank ones in its job's (``job_of``: one job per run)."""
    tables = runs["job"].tables
    ok(client, "/api/runs/job/cluster")
    ok(client, "/api/runs/job/cluster/communication")
    job = computed(job_of, tables)
    kept = (len(tables.memo), len(job.memo))
    cached = [(fn, of, computed(fn, of)) for fn, of in (
        (cluster.rank_breakdown, job), (cluster.slowest_rank, job), (step_breakdown, tables),
        (collectives.communication_pairs, job), (collectives.collective_summary, tables),
        (collectives.collectives, tables))]
    assert (len(tables.memo), len(job.memo)) == kept         # the requests kept each of them
    for _ in range(2):
        ok(client, "/api/runs/job/cluster")
        ok(client, "/api/runs/job/cluster/communication")
    assert computed(job_of, tables) is job and (len(tables.memo), len(job.memo)) == kept
    assert all(computed(fn, of) is value for fn, of, value in cached)
