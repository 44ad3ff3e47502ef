"""The timeline routes (api_timeline.router) on a small app with a fake run lookup: answers, parameter
validation naming the parameter, 404s, the index built once per run, and the download's temp files."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from fastapi import FastAPI, HTTPException
from fastapi.testclient import TestClient

from perfsight.views.insight import api_timeline
from tests.analysis.test_timeline_index import BASE, STREAM, THREAD, run

EVIL = '<img src=x onerror="alert(1)">'


class FakeRun:
    def __init__(self, tables):
        self.tables = tables


@pytest.fixture(scope="module")
def fake():
    return FakeRun(run())


@pytest.fixture(scope="module")
def client(fake):
    def get_run(run_id):
        if run_id != "r1":
            raise HTTPException(404, f"no run with id {run_id!r}")
        return fake

    app = FastAPI()
    app.include_router(api_timeline.router(get_run))
    return TestClient(app)


def test_tracks_window_and_the_index_built_once(client, fake, monkeypatch):
    built, build = [], api_timeline.TimelineIndex.__init__
    monkeypatch.setattr(api_timeline.TimelineIndex, "__init__", lambda index, tables: built.append(tables) or
                        build(index, tables))
    fake.tables.memo.clear()
    tree = client.get("/api/runs/r1/timeline/tracks").json()
    assert tree["origin_ns"] == BASE and tree["end_ns"] == 40000
    w = client.get("/api/runs/r1/timeline/window", params={"t0": 0, "t1": 40000, "width": 40,
                                                           "tracks": f"{THREAD},{STREAM}"})
    assert w.status_code == 200 and w.headers["content-type"] == "application/json"
    body = w.json()
    assert {lane["track"] for lane in body["lanes"]} == {THREAD, STREAM}
    assert [lane["buckets"]["count"] for lane in body["lanes"] if lane["depth"] == 1] == [[10] * 10]
    all_tracks = client.get("/api/runs/r1/timeline/window?t0=0&t1=40000&width=400").json()
    assert len(all_tracks["lanes"]) > len(body["lanes"]) and all_tracks["counters"]
    assert len(built) == 1 and built[0] is fake.tables


@pytest.mark.parametrize("params, status, name", [
    ({"t0": 10, "t1": 10, "width": 10}, 400, "t1"),
    ({"t0": 0, "t1": 10, "width": 0}, 422, "width"),
    ({"t0": 0, "t1": 10, "width": 10001}, 422, "width"),
    ({"t0": 0, "t1": 10}, 422, "width"),
    ({"t0": "x", "t1": 10, "width": 5}, 422, "t0"),
    ({"t0": 0, "t1": 10, "width": 5, "tracks": "1,a"}, 400, "tracks"),
    ({"t0": 0, "t1": 10, "width": 5, "tracks": "99"}, 400, "tracks"),
])
def test_window_validation_names_the_parameter(client, params, status, name):
    response = client.get("/api/runs/r1/timeline/window", params=params)
    assert response.status_code == status, response.text
    assert name in json.dumps(response.json()["detail"])


def test_search(client):
    found = client.get("/api/runs/r1/timeline/search", params={"q": "n1", "after": 9700, "after_id": 97,
                                                               "limit": 2}).json()
    assert found["total"] == 33 and found["wrapped"] and [m["id"] for m in found["matches"]] == [1, 4]
    back = client.get("/api/runs/r1/timeline/search?q=n1&after=400&direction=prev").json()
    assert [m["id"] for m in back["matches"]] == [1]
    for params, name in (({"q": ""}, "q"), ({"q": "a", "limit": 0}, "limit"), ({"q": "a", "limit": 1001}, "limit"),
                         ({"q": "a", "direction": "sideways"}, "direction"), ({}, "q")):
        response = client.get("/api/runs/r1/timeline/search", params=params)
        assert response.status_code == 422 and name in json.dumps(response.json()["detail"]), params


def test_slice_and_area(client):
    detail = client.get("/api/runs/r1/timeline/slice/201").json()
    assert detail["name"] == "cudaLaunchKernel" and [p["id"] for p in detail["parents"]] == [1000, 200]
    assert client.get("/api/runs/r1/timeline/slice/999999").status_code == 404
    assert client.get("/api/runs/r1/timeline/slice/abc").status_code == 422
    area = client.get("/api/runs/r1/timeline/area", params={"t0": 25000, "t1": 32000,
                                                            "tracks": f"{THREAD},{STREAM}"}).json()
    assert [(r["name"], r["dur_ns"]) for r in area["rows"]] == [("ProfilerStep#1", 7000), ("aten::LINEAR", 5000),
                                                                ("gemm", 1000)]
    assert client.get("/api/runs/r1/timeline/area?t0=0&t1=10").status_code == 422
    bad = client.get("/api/runs/r1/timeline/area?t0=10&t1=0&tracks=1")
    assert bad.status_code == 400 and "t1" in bad.json()["detail"]


def test_unknown_run_is_404(client):
    for path in ("tracks", "window?t0=0&t1=1&width=1", "search?q=a", "slice/1", "area?t0=0&t1=1&tracks=1",
                 "download"):
        assert client.get(f"/api/runs/nope/timeline/{path}").status_code == 404, path


def test_download_streams_the_timeline_and_removes_its_temp_dir(tmp_path, monkeypatch):
    from analysis.planted import tables_from_rows

    from tests.analysis.test_timeline_index import TRACKS, s

    made = []
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(**kwargs):
        made.append(Path(real_mkdtemp(dir=tmp_path, **kwargs)))
        return str(made[-1])

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    tables = tables_from_rows(slices=[s(1, EVIL, THREAD, 0, 100), s(2, "ok", THREAD, 200, 100)], tracks=TRACKS[:1])
    app = FastAPI()
    app.include_router(api_timeline.router(lambda run_id: FakeRun(tables)))
    response = TestClient(app).get("/api/runs/my%20run/timeline/download")
    assert response.status_code == 200
    assert response.headers["content-disposition"].startswith('attachment; filename="my_run_timeline_')
    trace = response.json()
    assert EVIL in [e.get("name") for e in trace["traceEvents"]]                 # kept verbatim, as JSON text
    assert [e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"] == [EVIL, "ok"]
    assert len(made) == 1 and not made[0].exists()                               # removed once sent


def test_critical_path_names_the_slices_on_it_and_its_windows(client, fake):
    from perfsight.analysis.critical_path import critical_path, windows

    body = client.get("/api/runs/r1/timeline/critical_path").json()
    expected = {i for i in critical_path(fake.tables).column("slice_id").to_pylist() if i is not None}
    assert body["slice_ids"] == sorted(expected) and expected
    assert [(w["label"], w["start_ns"], w["end_ns"]) for w in body["windows"]] == [
        (w.label, w.start_ns - BASE, w.end_ns - BASE) for w in windows(fake.tables)]
    assert client.get("/api/runs/r1/timeline/critical_path?step=999").json() == {"slice_ids": [], "windows": []}
