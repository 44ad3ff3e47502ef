"""A hostile trace in a real browser: a two-rank job whose op, kernel, thread, process, counter and
collective names and args carry <script>, <img onerror> and "><svg onload> payloads, beside a trace whose
folder name is one. Every page of the job (and the run list) must show those names as text: no element
made from them, no dialog, no console error from injected script, no request leaving the machine; path
traversal in the page's URLs gets an error, not a file; and a malformed %-escape in the address a message."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from .harness import open_view, wait_rendered

pytestmark = pytest.mark.browser

SCRIPT = "<script>alert('s')</script>"
IMG = "<img src=x onerror=alert('i')>"
SVG = '"><svg onload=alert("v")>'
PAGES = ("overview", "steps", "operators", "flops", "data", "timeline", "dynamic", "resources", "cluster")


def _x(cat, name, pid, tid, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def hostile_trace(rank: int) -> dict:
    host, dev = 100 + rank, rank
    events = [
        {"ph": "M", "name": "process_name", "pid": host, "args": {"name": SVG}},
        {"ph": "M", "name": "thread_name", "pid": host, "tid": 1, "args": {"name": IMG}},
        {"ph": "M", "name": "process_name", "pid": dev, "args": {"name": SCRIPT}},
    ]
    for step, t0 in ((1, 0), (2, 1000)):
        corr = 10 * step + rank * 100
        events += [
            _x("user_annotation", f"ProfilerStep#{step}", host, 1, t0, 1000),
            _x("user_annotation", "enumerate(DataLoader)#" + SCRIPT, host, 1, t0 + 10, 90),
            _x("cpu_op", SCRIPT if step == 1 else IMG, host, 1, t0 + 200, 400, **{
                "External id": corr, "Input Dims": [[4, 4]], "Input type": [IMG], SVG: SCRIPT}),
            _x("cpu_op", IMG, host, 1, t0 + 250, 300, **{"External id": corr + 1, "Input Dims": [[2]],
                                                           "Input type": ["float"]}),
            _x("cuda_runtime", "cudaLaunchKernel", host, 1, t0 + 300, 10, correlation=corr, **{"External id": corr}),
            _x("kernel", SVG, dev, 7, t0 + 320, 180, correlation=corr, device=dev, stream=7, **{"External id": corr}),
            _x("kernel", "ncclKernel_" + SCRIPT, dev, 8, t0 + 600, 100, device=dev, stream=8, **{
                "Collective name": SCRIPT, "dtype": "Float", "In msg nelems": 100, "Out msg nelems": 100,
                "Group size": 2, "Process Group Ranks": "[0, 1]", "Process Group Name": IMG}),
            {"ph": "C", "name": "queue " + IMG, "pid": host, "ts": t0 + 100, "args": {SCRIPT + " queue": step - 1}},
        ]
        for ts, addr, nbytes, total in ((t0 + 260, 1000 + step, 512, 512), (t0 + 540, 1000 + step, -512, 0)):
            events.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": host, "tid": 1,
                           "ts": ts, "args": {"Device Type": 0, "Device Id": -1, "Addr": addr, "Bytes": nbytes,
                                              "Total Allocated": total, "Total Reserved": 1024}})
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
            "traceEvents": events}


def write_runs(base: Path) -> None:
    job = base / "hostile_job"
    job.mkdir()
    for rank in (0, 1):
        (job / f"rank{rank}.pt.trace.json").write_text(json.dumps(hostile_trace(rank)))
    named = base / SVG.replace("/", "_")
    named.mkdir()
    (named / "t.pt.trace.json").write_text(json.dumps(hostile_trace(0)))


def assert_nothing_injected(page, dialogs) -> None:
    assert page.locator("img[src='x']").count() == 0
    assert page.locator("[onerror], [onload]").count() == 0
    scripts = page.locator("script").evaluate_all("nodes => nodes.map(n => n.getAttribute('src'))")
    assert all(src and src.startswith(("/static/", "/vendor/")) for src in scripts), scripts
    assert dialogs == []
    assert page.console_errors == [], page.console_errors
    assert page.external_requests == []


def test_hostile_names_render_as_text_on_every_page(serve, page, tmp_path):
    write_runs(tmp_path)
    server = serve(tmp_path)
    runs = {r["path"]: r for r in server.wait_parsed()}
    job = runs["hostile_job"]
    assert job["status"] == "ready" and job["ranks"] == [0, 1], job
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))

    open_view(page, server.url + "/#/")
    assert SVG.replace("/", "_") in page.locator("#run-list").inner_text()
    assert_nothing_injected(page, dialogs)

    shown = {}
    for name in PAGES:
        open_view(page, f"{server.url}/#/run/{job['id']}/{name}")
        expect(page.locator("[data-state=loading]")).to_have_count(0)    # every chart and table drawn
        if name == "timeline":                                            # its tracks and first window drawn
            page.evaluate("() => window.__perfsightTimelineTest.ready()")
        assert page.locator("body").get_attribute("data-state") == "ready", (name, page.locator("main").inner_text())
        shown[name] = page.locator("main").inner_text()
        assert_nothing_injected(page, dialogs)
    # the pages of this work show the names, as text
    assert SCRIPT in shown["data"]                                   # the queue series
    assert IMG in shown["resources"]                                 # the allocating operator
    assert SCRIPT in shown["cluster"]                                # the collective's name
    assert page.title() == "perfsight insight"

    # path traversal through the page's own URLs: an error message, nothing served
    open_view(page, f"{server.url}/#/run/..%2F..%2Fhostile_job/overview")
    assert page.locator("body").get_attribute("data-state") == "error"
    assert page.locator("main").inner_text() in (
        "Not Found", "no run with id '../../hostile_job' under the summary-base-dir")
    for target in ("/static/%2e%2e/server.py", "/api/runs/..%2Fhostile_job/data", "/static/..%2F..%2Fcli.py"):
        assert page.goto(server.url + target).status in (400, 404), target
    page.console_errors.clear()               # the refused loads above log their 404s
    assert_nothing_injected(page, dialogs)


@pytest.mark.parametrize("name", ["__proto__", "constructor", "hasOwnProperty", "toString"])
def test_page_and_run_names_from_objects_prototype_are_unknown_names(server, page, name):
    """``#/run/<id>/__proto__`` is a page that does not exist (the run's pages are looked up as own
    properties), ``#/run/__proto__/...`` a run that does not exist."""
    from .shown import page_url

    open_view(page, page_url(server, "cpu/", name))
    assert page.locator("body").get_attribute("data-state") == "ready"
    assert page.locator("main").inner_text() == f'No page named "{name}".'
    assert page.locator("#run-nav a").count() > 0
    open_view(page, f"{server.url}/#/run/{name}/overview")
    assert page.locator("body").get_attribute("data-state") == "error"
    assert page.locator("main").inner_text() == f"no run with id '{name}' under the summary-base-dir"
    assert page.console_errors == [] or all("404" in e for e in page.console_errors), page.console_errors
    assert page.external_requests == []


@pytest.mark.parametrize("hash_", ["#/run/%E0%A4%A", "#%zz", "#/run/{id}/operators/%E0%A4", "#/compare/%/%"])
def test_a_malformed_address_says_so_and_leaves_no_page_behind(serve, page, tmp_path, hash_):
    """A %-escape that does not decode (cut, or typed by hand) makes no uncaught URIError: the page says the
    address is malformed, with the way back to the run list, instead of leaving the page before it under the
    new address; and so on a first load."""
    (tmp_path / "t.pt.trace.json").write_text(json.dumps(hostile_trace(0)))
    server = serve(tmp_path)
    [run] = server.wait_parsed()
    address = f"{server.url}/{hash_.format(id=run['id'])}"
    open_view(page, f"{server.url}/#/run/{run['id']}/overview")
    assert page.locator("body").get_attribute("data-state") == "ready"
    for load in ("after a page", "first"):
        if load == "first":
            page.goto("about:blank")
        page.goto(address)
        expect(page.locator("body")).to_have_attribute("data-state", "error")
        expect(page.locator("main")).to_have_text(re.compile(r"^This address is malformed: its %-escapes do not "
                                                             r"decode .*Open the page from the run list\.$"))
        expect(page.locator("#run-nav a")).to_have_text(["← runs"])
        expect(page.locator("#run-title")).to_have_text("")
        assert page.console_errors == [], (load, page.console_errors)
    page.locator("#run-nav a").click()
    wait_rendered(page)
    expect(page.locator("#run-list tbody tr")).to_have_count(1)
    assert page.console_errors == [] and page.external_requests == []
