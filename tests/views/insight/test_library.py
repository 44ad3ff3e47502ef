"""The run library: background parsing with progress and errors per run, rescans, bounded open runs."""
from __future__ import annotations

import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from perfsight.analysis.summary import run_start_ns
from perfsight.core.memo import computed
from perfsight.ingest import cache
from perfsight.views.insight.library import RunLibrary, RunNotReady

TRACES = {"cpu": "kineto/hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
          "amd": "kineto/hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
          "ns_resolution": "kineto/hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"}


def settled(library: RunLibrary, count: int, timeout: float = 60) -> dict[str, dict]:
    """The run list once it has ``count`` runs, none queued or parsing."""
    deadline = time.monotonic() + timeout
    while True:
        library.scan()
        runs = library.entries()
        if len(runs) == count and all(r["status"] in ("ready", "error") for r in runs):
            return {r["path"]: r for r in runs}
        assert time.monotonic() < deadline, runs
        time.sleep(0.05)


@pytest.fixture
def library(tmp_path):
    library = RunLibrary(tmp_path, workers=2, max_open=1)
    yield library
    library.close()


def copy(shared_data: Path, key: str, to: Path) -> Path:
    to.parent.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(shared_data / TRACES[key], to))


def test_runs_parse_in_the_background_and_a_broken_one_keeps_its_error(library, tmp_path, shared_data):
    copy(shared_data, "cpu", tmp_path / "cpu" / "cpu.pt.trace.json.gz")
    (tmp_path / "bad.pt.trace.json").write_text('{"traceEvents": 42}')
    runs = settled(library, 2)
    cpu, bad = runs["cpu/cpu.pt.trace.json.gz"], runs["bad.pt.trace.json"]
    assert (cpu["status"], cpu["steps"], cpu["ranks"], cpu["slices"], cpu["progress"]) == (
        "ready", [551], [34], 16, 1.0)
    assert cpu["size_bytes"] == (shared_data / TRACES["cpu"]).stat().st_size
    assert bad["status"] == "error" and "bad.pt.trace.json" in bad["error"]
    with pytest.raises(RunNotReady) as raised:
        library.get(bad["id"])
    assert raised.value.entry.error == bad["error"]
    assert library.get("0123456789ab") is None
    cache.wait()                                           # the cache is written in the background
    assert (tmp_path / "cpu" / "cpu.pt.trace.json.gz.perfsight_cache").is_dir()     # cached beside the run


def test_a_gzip_bomb_dropped_into_the_folder_is_an_error_on_its_row(library, tmp_path, monkeypatch):
    """insight parses what lands in its folder on its own: a bomb gets the reader's bound, not the memory."""
    from perfsight.ingest.common.chrome_json import MAX_INFLATED_ENV
    from tests.ingest.test_kineto_hostile import whitespace_bomb

    monkeypatch.setenv(MAX_INFLATED_ENV, "2")
    whitespace_bomb(tmp_path / "bomb.pt.trace.json.gz", 8 << 20)
    bomb = settled(library, 1)["bomb.pt.trace.json.gz"]
    assert bomb["status"] == "error" and "inflates beyond 2 MB of JSON text" in bomb["error"]


def test_new_changed_and_vanished_runs_are_noticed(library, tmp_path, shared_data):
    first = copy(shared_data, "cpu", tmp_path / "a.pt.trace.json.gz")
    settled(library, 1)
    copy(shared_data, "amd", tmp_path / "later" / "b.json.gz")
    runs = settled(library, 2)
    assert runs["later/b.json.gz"]["status"] == "ready" and runs["later/b.json.gz"]["steps"] == [1, 2]
    shutil.copy(shared_data / TRACES["ns_resolution"], first)                   # the file is replaced: parsed again
    runs = settled(library, 2)
    assert runs["a.pt.trace.json.gz"]["ranks"] == [0] and runs["a.pt.trace.json.gz"]["steps"] != [551]
    first.unlink()
    assert list(settled(library, 1)) == ["later/b.json.gz"]


def test_open_runs_are_bounded_and_reopened_from_the_cache(library, tmp_path, shared_data):
    copy(shared_data, "cpu", tmp_path / "a.pt.trace.json.gz")
    copy(shared_data, "amd", tmp_path / "b.json.gz")
    runs = settled(library, 2)
    a, b = runs["a.pt.trace.json.gz"]["id"], runs["b.json.gz"]["id"]
    first = library.get(a)
    assert computed(run_start_ns, first.tables) > 0 and len(first.tables.memo) == 1
    library.get(b)                                   # max_open=1: a is closed
    again = library.get(a)
    assert again is not first and again.tables.slices.num_rows == first.tables.slices.num_rows
    assert len(again.tables.memo) == 0               # a reopened run starts with an empty memo


def test_concurrent_requests_for_a_closed_run_open_and_analyse_it_once(library, tmp_path, shared_data, monkeypatch):
    """Twenty overview requests at once for a run that is not open: one open, one analysis, one answer."""
    from fastapi.testclient import TestClient

    from perfsight.views.insight import api_overview
    from perfsight.views.insight import library as library_module
    from perfsight.views.insight.server import create_app

    copy(shared_data, "cpu", tmp_path / "a.pt.trace.json.gz")
    copy(shared_data, "amd", tmp_path / "b.json.gz")
    runs = settled(library, 2)
    a, b = runs["a.pt.trace.json.gz"]["id"], runs["b.json.gz"]["id"]
    library.get(b)                                   # max_open=1: a is closed
    opened, analysed, waiting, release = [], [], [], threading.Event()

    def slow_open(*args, **kwargs):                  # holds every opener until all requests are in
        opened.append(args)
        release.wait(120)
        return real_open(*args, **kwargs)

    class Waited(library_module.Future):             # the opening that requests wait for, its waiters counted
        def result(self, timeout=None):
            waiting.append(threading.get_ident())
            return super().result(timeout)

    def counted_summary(*args, **kwargs):
        analysed.append(args)
        return real_summary(*args, **kwargs)

    real_open, real_summary = library_module.open_sources, api_overview.run_summary
    monkeypatch.setattr(library_module, "open_sources", slow_open)
    monkeypatch.setattr(api_overview, "run_summary", counted_summary)
    monkeypatch.setattr(library_module, "Future", Waited)
    with TestClient(create_app(library), base_url="http://127.0.0.1") as client:
        started = threading.Barrier(21)

        def request():
            started.wait()
            return client.get(f"/api/runs/{a}/overview")

        with ThreadPoolExecutor(max_workers=20) as pool:
            answers = [pool.submit(request) for _ in range(20)]
            started.wait()
            deadline = time.monotonic() + 60
            while len(waiting) < 19:                     # one request opens the run, every other one waits for it
                assert time.monotonic() < deadline, (opened, waiting)
                time.sleep(0.01)
            release.set()
            responses = [answer.result() for answer in answers]
    assert [r.status_code for r in responses] == [200] * 20
    assert len({r.content for r in responses}) == 1
    assert len(opened) == 1 and len(analysed) == 1


def test_rank_named_traces_without_distributed_info_are_one_ready_job(library, tmp_path):
    from tests.test_run import _step_trace

    (tmp_path / "job").mkdir()
    for rank in (0, 1):
        _step_trace(tmp_path / "job" / f"rank{rank}.pt.trace.json", op=f"op_of_rank_{rank}")
    (job,) = settled(library, 1).values()
    assert (job["path"], job["kind"], job["status"], job["ranks"]) == ("job", "torch.profiler job", "ready", [0, 1])


def test_every_page_of_a_run_computes_each_analysis_once(tmp_path, shared_data, monkeypatch):
    """The pages share the analyses through the run's memo (the Cluster page's step_breakdown, the overview's
    and the operator pages' op_instances, the Step trace page's and the advisor's step_trace), however often
    they are asked for."""
    from tests.analysis_counts import count_analyses, repeated
    from tests.views.insight.conftest import Served

    shutil.copy(shared_data / "kineto/hta/trace_filter/sampled_rank-0.json.gz", tmp_path)
    calls = count_analyses(monkeypatch)
    with Served(tmp_path) as served:
        for _ in range(2):
            for route, params in (("overview", {}), ("steps", {}), ("cluster", {}), ("cluster/communication", {}),
                                  ("operators", {}), ("operators", {"view": "host"}), ("dynamic", {}),
                                  ("operators/shapes", {"op_type": "aten::mm"}), ("flops", {}), ("data", {}),
                                  ("memory", {}), ("resources/host", {})):
                served.get("sampled", route, **params)
            served.client.get(f"/api/runs/{served.id('sampled')}/timeline/tracks").raise_for_status()
    assert repeated(calls) == {}
    assert [len(calls[name]) for name in ("breakdown.step_breakdown", "steps.step_trace", "summary.run_summary",
                                          "breakdown.overlap_intervals", "summary.run_start_ns")] == [1, 1, 1, 1, 1]
    assert calls["ops.op_instances"].count((("kinds", None),)) == 1
