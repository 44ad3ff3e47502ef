"""insight's security and robustness promises, tested from outside: it serves only what is under the
summary-base-dir (path traversal, encoded or raw, absolute paths, symlinks out of it: refused or never
listed), unknown runs are 404, other Host headers 400, every response carries the CSP, serving every
page writes nothing beside the runs except the Parquet cache, a broken run keeps its error on its own
row, and the CLI binds to loopback unless told --allow-remote (with a warning)."""
from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from perfsight import cli
from perfsight.views.insight import api_operators, api_overview, api_resources, api_timeline
from perfsight.views.insight import server as insight_server
from perfsight.views.insight.discovery import run_id
from perfsight.views.insight.library import RunLibrary
from perfsight.views.insight.server import create_app
from tests.views.insight.conftest import Served

CPU_ONLY = "kineto/hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
CPU_MEMORY = "kineto/generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz"
SECRET = "top secret: outside the base dir"


@pytest.fixture
def tree(tmp_path, shared_data) -> tuple[Path, Path]:
    """(base, outside): base holds two real traces, a broken one and symlinks to ``outside``, which holds
    a trace and a secret file."""
    base, outside = tmp_path / "base", tmp_path / "outside"
    (base / "cpu").mkdir(parents=True)
    (base / "mem").mkdir()
    outside.mkdir()
    shutil.copy(shared_data / CPU_ONLY, base / "cpu")
    shutil.copy(shared_data / CPU_MEMORY, base / "mem")
    (base / "broken").mkdir()
    (base / "broken" / "bad.pt.trace.json").write_text("this is not json")
    shutil.copy(shared_data / CPU_ONLY, outside / "outside_only.pt.trace.json.gz")
    (outside / "secret.txt").write_text(SECRET)
    os.symlink(outside, base / "linked_dir")
    os.symlink(outside / "outside_only.pt.trace.json.gz", base / "linked_file.pt.trace.json.gz")
    os.symlink(outside / "secret.txt", base / "secret.txt")
    return base, outside


def test_only_runs_inside_the_base_dir_are_listed_and_a_broken_one_keeps_its_error(tree):
    base, _ = tree
    with Served(base) as served:
        client, runs = served.client, {r["path"]: r for r in served.library.entries()}
        assert set(runs) == {"broken/bad.pt.trace.json", "cpu/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
                             "mem/cpu_mlp_rs_mem_stack.pt.trace.json.gz"}
        assert runs["broken/bad.pt.trace.json"]["status"] == "error"
        assert runs["broken/bad.pt.trace.json"]["error"]
        assert all(r["status"] == "ready" for p, r in runs.items() if not p.startswith("broken"))
        body = client.get("/api/runs").text
        assert "outside_only" not in body and "linked" not in body and "secret" not in body
        for relpath in ("linked_dir/outside_only.pt.trace.json.gz", "linked_file.pt.trace.json.gz", "linked_dir"):
            assert client.get(f"/api/runs/{run_id(relpath)}").status_code == 404
            assert client.get(f"/api/runs/{run_id(relpath)}/data").status_code == 404
        broken = client.get(f"/api/runs/{runs['broken/bad.pt.trace.json']['id']}/data")
        assert broken.status_code == 409 and "failed to parse" in broken.json()["detail"]


@pytest.mark.parametrize("url", [
    "/static/%2e%2e/%2e%2e/server.py", "/static/%2e%2e/server.py", "/static/..%2F..%2Fserver.py",
    "/static/%2e%2e%2f%2e%2e%2f%2e%2e%2fsecret.txt", "/static//etc/passwd", "/static/%2Fetc%2Fpasswd",
    "/api/runs/..%2F..", "/api/runs/%2e%2e/data", "/api/runs/%2Fetc%2Fpasswd", "/api/runs/..%2F..%2Fsecret.txt/data",
    "/secret.txt", "/base/secret.txt", "/vendor/..%2F..%2Fsecret.txt", "/api/runs/nope", "/api/runs/nope/memory",
    "/api/runs/nope/cluster", "/api/runs/nope/timeline/tracks",
])
def test_traversal_absolute_and_unknown_paths_are_refused(tree, url):
    base, _ = tree
    with TestClient(create_app(RunLibrary(base)), base_url="http://127.0.0.1") as client:
        response = client.get(url)
    assert response.status_code in (400, 404), (url, response.status_code)
    assert SECRET not in response.text and "def create_app" not in response.text and "root:" not in response.text
    assert "Content-Security-Policy" in response.headers


def test_raw_dot_segments_on_the_wire_are_refused(tree):
    """Browsers and httpx drop literal ``..`` segments; a raw socket does not."""
    from tests.browser.harness import InsightServer

    base, _ = tree
    with InsightServer(base) as server:
        for target in ("/static/../server.py", "/static/../../../secret.txt", "/api/runs/../../secret.txt",
                       "/static/../../insight/server.py"):
            port = int(server.url.rsplit(":", 1)[1])
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
                answer = b""
                while chunk := s.recv(65536):
                    answer += chunk
            status = int(answer.split(b" ", 2)[1])
            assert status in (400, 404), (target, answer[:200])
            assert SECRET.encode() not in answer and b"def create_app" not in answer


def test_other_host_headers_are_refused_and_every_answer_has_the_csp(tree):
    base, _ = tree
    with TestClient(create_app(RunLibrary(base)), base_url="http://127.0.0.1") as client:
        assert client.get("/api/runs", headers={"Host": "evil.example"}).status_code == 400
        assert client.get("/", headers={"Host": "127.0.0.1.evil.example:8080"}).status_code == 400
        version = insight_server.asset_version()
        for url in ("/", "/api/runs", f"/static/{version}/app.js", f"/static/{version}/pages/resources.js",
                    f"/vendor/{version}/plotly.min.js", "/api/runs/nope", f"/static/{version}/nope.js"):
            response = client.get(url)
            csp = response.headers["Content-Security-Policy"]
            assert "script-src 'self'" in csp and "default-src 'self'" in csp and "'unsafe-eval'" not in csp
            assert response.headers["X-Content-Type-Options"] == "nosniff"


def _served(monkeypatch, capsys, base: Path, *options: str) -> tuple[TestClient, str]:
    """``perfsight insight`` with ``options`` (uvicorn not started): a client of its app and what it printed."""
    import uvicorn

    apps = []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, **kw: apps.append(app))
    assert cli.main(["insight", "--summary-base-dir", str(base), *options]) == 0
    return TestClient(apps[0]), capsys.readouterr().out


@pytest.mark.parametrize("host, url, called", [
    ("::1", "http://[::1]:8125/", ["[::1]:8125", "[::1]", "localhost:8125", "127.0.0.1:8125", "[0:0::1]:8125"]),
    ("[::1]", "http://[::1]:8125/", ["[::1]:8125"]),
    ("127.0.0.2", "http://127.0.0.2:8125/", ["127.0.0.2:8125", "localhost:8125", "LOCALHOST"]),
    ("localhost", "http://localhost:8125/", ["localhost:8125", "127.0.0.1:8125", "[::1]:8125"]),
])
def test_a_loopback_host_is_served_by_its_names_at_a_valid_url(tmp_path, monkeypatch, capsys, host, url, called):
    client, out = _served(monkeypatch, capsys, tmp_path, "--host", host, "--port", "8125")
    assert f" at {url} " in out
    with client:
        for name in called:
            assert client.get("/api/runs", headers={"Host": name}).status_code == 200, name
        for name in ("evil.example", "evil.example:8125", "[::2]:8125", "127.0.0.1.evil.example", "[::1", ""):
            assert client.get("/api/runs", headers={"Host": name}).status_code == 400, name


def test_allow_remote_pins_the_host_check_to_the_served_names(tmp_path, monkeypatch, capsys):
    client, out = _served(monkeypatch, capsys, tmp_path, "--host", "0.0.0.0", "--allow-remote",
                          "--allowed-host", "insight.lab.example")
    assert " at http://127.0.0.1:8080/ " in out and "insight.lab.example" in out
    with client:
        for name in ("insight.lab.example:8080", "127.0.0.1:8080", "localhost", socket.gethostname()):
            assert client.get("/api/runs", headers={"Host": name}).status_code == 200, name
        assert client.get("/api/runs", headers={"Host": "evil.example:8080"}).status_code == 400
    client, out = _served(monkeypatch, capsys, tmp_path, "--host", "192.0.2.7", "--allow-remote")
    with client:
        assert client.get("/api/runs", headers={"Host": "192.0.2.7:8080"}).status_code == 200
        for name in ("evil.example", "localhost", "127.0.0.1"):           # not where it listens
            assert client.get("/api/runs", headers={"Host": name}).status_code == 400, name
    assert cli.main(["insight", "--summary-base-dir", str(tmp_path), "--allowed-host", "[bad"]) == 2
    assert "--allowed-host '[bad': not a host name or address" in capsys.readouterr().err


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root (symlinks not followed) -> (size, mtime_ns)."""
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder, name)
            st = path.lstat()
            out[path.relative_to(root).as_posix()] = (st.st_size, st.st_mtime_ns)
    return out


def _in_cache(relpath: str) -> bool:
    return any(part == "perfsight_cache" or part.endswith(".perfsight_cache") for part in relpath.split("/"))


def test_serving_every_page_writes_only_the_parquet_cache(tree):
    base, outside = tree
    before, outside_before = _snapshot(base), _snapshot(outside)
    with Served(base) as served:
        client, runs = served.client, {r["path"]: r for r in served.library.entries()}
        routes = [r.path for module in (api_overview, api_operators, api_resources, api_timeline)
                  for r in module.router(lambda run_id: None).routes
                  if "GET" in r.methods and r.path.count("{") == 1]
        assert "/api/runs/{run_id}/memory/alive" in routes and len(routes) >= 8
        ready = [r for r in runs.values() if r["status"] == "ready"]
        for run in ready:
            for path in routes:
                response = client.get(path.replace("{run_id}", run["id"]), params={"t_ns": 0, "t0": 0, "t1": 1000,
                                                                                     "width": 10, "q": "aten"})
                assert response.status_code < 500, (path, response.text[:300])
    after = _snapshot(base)
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    assert changed and all(_in_cache(p) for p in changed), sorted(p for p in changed if not _in_cache(p))
    assert _snapshot(outside) == outside_before


def test_cli_binds_to_loopback_unless_allow_remote(tmp_path, monkeypatch, capsys):
    import uvicorn

    started = []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, **kw: started.append((app, host, port)))
    assert cli.main(["insight", "--summary-base-dir", str(tmp_path), "--host", "0.0.0.0"]) == 2
    assert "--allow-remote" in capsys.readouterr().err and started == []
    assert cli.main(["insight", "--summary-base-dir", str(tmp_path), "--host", "192.168.1.5", "--port", "8123"]) == 2
    assert started == []

    assert cli.main(["insight", "--summary-base-dir", str(tmp_path), "--port", "8124"]) == 0
    assert started[-1][1:] == ("127.0.0.1", 8124)
    assert "WARNING" not in capsys.readouterr().out

    assert cli.main(["insight", "--summary-base-dir", str(tmp_path), "--host", "0.0.0.0", "--allow-remote"]) == 0
    assert started[-1][1] == "0.0.0.0"
    out = capsys.readouterr().out
    assert "WARNING" in out and "anyone who can reach it can read the runs" in out
    assert insight_server.is_loopback("::1") and insight_server.is_loopback("localhost")
    assert not insight_server.is_loopback("0.0.0.0")


def _trace(path: Path, rank: int, op: str) -> Path:
    from tests.test_run import _step_trace

    _step_trace(path, rank=rank, op=op)
    return path


def test_links_inside_runs_that_leave_the_base_dir_are_never_read(tmp_path):
    """A trace linked into a perfsight run, a rank linked into a job folder, a cache folder linked out: the
    linked data never reaches a page (no slice of it found), and nothing is written outside."""
    base, outside = tmp_path / "base", tmp_path / "outside"
    outside.mkdir()
    (outside / "cache").mkdir()
    stolen = _trace(outside / "rank2.pt.trace.json", 2, "outside_op")
    run = base / "PROF_20260101000000000_1_aa"
    (run / "host" / "data").mkdir(parents=True)
    (run / "manifest.json").write_text('{"rank": 0}')
    _trace(run / "host" / "data" / "trace_1.pt.trace.json", 0, "inside_op")
    os.symlink(stolen, run / "host" / "data" / "trace_2.pt.trace.json")          # a file link inside a run
    (base / "job").mkdir()
    for rank in (0, 1):
        _trace(base / "job" / f"rank{rank}.pt.trace.json", rank, "inside_op")
    os.symlink(stolen, base / "job" / "rank2.pt.trace.json")                      # a rank linked into a job
    _trace(base / "cached.pt.trace.json", 0, "inside_op")
    os.symlink(outside / "cache", base / "cached.pt.trace.json.perfsight_cache")  # its cache folder, linked out
    before = _snapshot(outside)
    with Served(base) as served:
        runs = {r["path"]: r for r in served.library.entries()}
        assert set(runs) == {"PROF_20260101000000000_1_aa", "job", "cached.pt.trace.json"}
        prof, cached, job = runs["PROF_20260101000000000_1_aa"], runs["cached.pt.trace.json"], runs["job"]
        assert prof["status"] == "error" and prof["error"].startswith(
            "PROF_20260101000000000_1_aa/host/data/trace_2.pt.trace.json: symbolic link leading outside "
            "--summary-base-dir")
        assert cached["status"] == "error" and cached["error"].startswith("cached.pt.trace.json.perfsight_cache:")
        assert prof["size_bytes"] == cached["size_bytes"] == 0           # their files are not even looked at
        assert str(outside) not in prof["error"] + cached["error"]
        assert job["status"] == "ready" and job["ranks"] == [0, 1]
        found = served.get("job", "timeline/search", q="outside_op")
        assert found["total"] == 0 and served.get("job", "timeline/search", q="inside_op")["total"] == 2
        for run_id in (prof["id"], cached["id"]):
            assert served.client.get(f"/api/runs/{run_id}/timeline/search", params={"q": "op"}).status_code == 409
    assert _snapshot(outside) == before


def _prof_run(folder: Path, op: str) -> Path:
    (folder / "host" / "data").mkdir(parents=True)
    (folder / "manifest.json").write_text('{"rank": 0}')
    _trace(folder / "host" / "data" / "trace_1.pt.trace.json", 0, op)
    return folder


def test_a_link_added_to_a_closed_run_is_refused_when_it_is_reopened(tmp_path):
    base, outside = tmp_path / "base", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    a = _prof_run(base / "PROF_20260101000000000_1_aa", "inside_op")
    _trace(base / "b.pt.trace.json", 0, "inside_op")
    with Served(base, max_open=1) as served:
        first, second = served.id("PROF_"), served.id("b.pt")
        assert served.client.get(f"/api/runs/{first}/overview").status_code == 200
        assert served.client.get(f"/api/runs/{second}/overview").status_code == 200   # max_open=1: a is closed
        os.symlink(outside / "secret.txt", a / "host" / "data" / "notes.txt")
        refused = served.client.get(f"/api/runs/{first}/overview")
        assert refused.status_code == 409, refused.text
        assert "PROF_20260101000000000_1_aa/host/data/notes.txt: symbolic link leading outside" in refused.text
        assert served.library.entry(first).status == "error" and SECRET not in refused.text


HUGE = str(10**30)
INT64_MAX = 2**63 - 1


@pytest.mark.parametrize("route, params, name", [
    ("operators/instances", {"page": HUGE}, "page"),
    ("operators/instances", {"page": str(2**62)}, "page"),          # fits, but its offset would not
    ("operators/instances", {"rank": str(2**40)}, "rank"),
    ("operators/stack/" + HUGE, {}, "slice_id"),
    ("dynamic/instances", {"op_type": "aten::mm", "instances": f"0,{HUGE}"}, "instances"),
    ("memory/alive", {"t_ns": HUGE}, "t_ns"),
    ("memory/alive", {"t_ns": str(INT64_MAX - 10)}, "t_ns"),        # fits, but not once the run's start is added
    ("memory/curve", {"rank": HUGE}, "rank"),
    ("timeline/window", {"t0": "-" + HUGE, "t1": "10", "width": "5"}, "t0"),
    ("timeline/window", {"t0": "0", "t1": str(2**63), "width": "5"}, "t1"),
    ("timeline/area", {"t0": "0", "t1": HUGE, "tracks": "1"}, "t1"),
    ("timeline/search", {"q": "aten", "after": HUGE}, "after"),
    ("timeline/search", {"q": "aten", "after": "0", "after_id": HUGE}, "after_id"),
    ("timeline/slice/" + HUGE, {}, "slice_id"),
])
def test_out_of_range_integers_are_400_naming_the_parameter(served_runs, route, params, name):
    detail = served_runs.refused("perfsight/", route, **params)
    assert detail.startswith(f"{name}=") and "expected an integer from" in detail, detail


def test_a_window_as_wide_as_int64_allows_is_cut_into_pixels_exactly(served_runs):
    """t0 = -2^62 and a span of ~1.5 x 2^62 ns over 3 pixels: the second pixel edge (t0 + 2 x span / 3) falls in
    the middle of the run, so slices start on both sides of it; computed without overflowing int64."""
    end = served_runs.get("perfsight/", "timeline/tracks")["end_ns"]
    t0 = -2**62
    t1 = t0 + 3 * (end // 2 - t0) // 2
    edge = t0 + 2 * (t1 - t0) // 3
    assert 0 < edge < end and t1 - t0 < 2**63 <= 2 * (t1 - t0)
    body = served_runs.get("perfsight/", "timeline/window", t0=t0, t1=t1, width=3)
    sides = [[start >= edge for start in lane["buckets"]["start"]] for lane in body["lanes"]]
    assert all(side == sorted(set(side)) for side in sides) and [False, True] in sides
