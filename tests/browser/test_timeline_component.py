"""The canvas timeline (static/timeline.js) in headless Chromium, through its test hook and real input:
loading, zoom and pan by keys, wheel and drag, stale answers dropped, click for details, shift-drag area
sums, search with next/previous, flow arrows, group collapse, the critical path outlined, and trace names
that are HTML staying text.

The page is tests/views/insight/fixtures/timeline_page.html, served with the real static files and the timeline
routes over a fake run by uvicorn on loopback."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from perfsight.views.insight import api_timeline
from tests.analysis.test_timeline_index import AUTOGRAD, STREAM, THREAD, run, s
from tests.views.insight.test_timeline_api import FakeRun

from .harness import AppServer

pytestmark = pytest.mark.browser

STATIC = Path(api_timeline.__file__).parent / "static"
FIXTURES = Path(__file__).resolve().parents[1] / "views" / "insight" / "fixtures"
EVIL = ['<img src=x onerror="window.__xss=1">', "<script>window.__xss=2</script>"]


class SlowRun(FakeRun):
    """A fake run whose next lookup, once ``held`` is set to (release, arrived), sets ``arrived`` and waits for
    ``release`` (to make a window answer arrive as late as the test wants)."""

    held: tuple[threading.Event, threading.Event] | None = None
    lock = threading.Lock()


@pytest.fixture(scope="module")
def server():
    fake = SlowRun(run(extra=[s(900, EVIL[0], AUTOGRAD, 37000, 2000), s(901, EVIL[1], AUTOGRAD, 39000, 500)]))

    def get_run(run_id):
        if run_id != "r1":
            raise HTTPException(404, "no such run")
        with SlowRun.lock:
            held, SlowRun.held = SlowRun.held, None
        if held is not None:
            release, arrived = held
            arrived.set()
            release.wait(120)
        return fake

    app = FastAPI()
    app.include_router(api_timeline.router(get_run))
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.mount("/fixtures", StaticFiles(directory=FIXTURES), name="fixtures")
    app.get("/")(lambda: FileResponse(FIXTURES / "timeline_page.html"))
    with AppServer(app) as server:
        yield server.url + "/"


@pytest.fixture
def page(browser, server):  # this module's page: the fixture page, loaded
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(server)
    page.wait_for_function("window.__perfsightTimelineTest !== undefined")
    hook(page, "ready")
    yield page
    page.close()
    assert not errors, errors


def hook(page, method, *args):
    return page.evaluate(f"(args) => window.__perfsightTimelineTest.{method}(...args)", list(args))


def span(state):
    return state["t1"] - state["t0"]


def point(page, state, track, depth, t):
    """Page coordinates of time t on a track's lane."""
    box = page.locator("canvas.pst-canvas").bounding_box()
    row = next(r for r in state["rows"] if r["kind"] == "track" and r["id"] == track)
    x = state["labelWidth"] + (t - state["t0"]) / span(state) * state["plotWidth"]
    return box["x"] + x, box["y"] + row["y"] + depth * 18 + 9


def test_loads_the_tree_and_the_whole_run(page):
    state = hook(page, "state")
    assert (state["t0"], state["t1"]) == (0, 40000) and state["error"] is None
    groups = [r["name"] for r in state["rows"] if r["kind"] == "group"]
    assert groups == ["host threads", "device streams", "communication", "overlap analysis", "counters"]
    assert state["window"]["t0"] < 0 < 40000 < state["window"]["t1"]             # a margin beyond the view
    assert state["drawn"]["slices"] > 0 and state["drawn"]["buckets"] > 0 and state["drawn"]["counters"] > 0
    download = page.locator("a.pst-download")
    assert download.get_attribute("href") == "/api/runs/r1/timeline/download"


def test_keys_wheel_and_drag(page):
    page.locator(".pst").focus()
    page.keyboard.press("w")
    state = hook(page, "ready")
    assert span(state) == pytest.approx(32000)
    page.keyboard.press("s")
    page.keyboard.press("d")
    state = hook(page, "ready")
    assert span(state) == pytest.approx(40000) and state["t0"] == pytest.approx(4000)
    page.keyboard.press("a")
    state = hook(page, "ready")
    assert state["t0"] == pytest.approx(0, abs=1e-6)

    x, y = point(page, state, THREAD, 1, 20000)
    page.mouse.move(x, y)
    page.mouse.wheel(0, -300)                                                   # zoom in around the mouse
    state = hook(page, "ready")
    assert span(state) < 40000 and state["t0"] < 20000 < state["t1"]
    assert (20000 - state["t0"]) / span(state) == pytest.approx(0.5, abs=0.01)

    before = hook(page, "state")
    x, y = point(page, before, THREAD, 1, before["t0"] + span(before) / 2)
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x - 100, y, steps=5)
    page.mouse.up()
    after = hook(page, "ready")
    assert after["t0"] - before["t0"] == pytest.approx(100 * span(before) / before["plotWidth"], rel=0.02)
    assert after["selected"] is None                                             # a drag is not a click


def test_stale_window_answers_are_dropped(page):
    before = hook(page, "state")
    requests, dropped = before["requests"], before["dropped"]
    page.evaluate("() => { for (let k = 0; k < 5; k++) window.__perfsightTimelineTest.zoomTo(k * 100, 20000); }")
    assert hook(page, "ready")["requests"] == requests + 1                       # within the debounce: one request
    release, arrived = threading.Event(), threading.Event()
    SlowRun.held = (release, arrived)
    try:
        page.evaluate("() => { window.__perfsightTimelineTest.zoomTo(0, 10000); }")
        assert arrived.wait(60)                                                  # the request is out, its answer held
        page.evaluate("() => { window.__perfsightTimelineTest.zoomTo(30000, 40000); }")
        page.wait_for_function("n => window.__perfsightTimelineTest.state().requests >= n", arg=requests + 3)
    finally:                                                                     # a newer one went out: let it answer
        SlowRun.held = None
        release.set()
    state = hook(page, "ready")
    assert (state["requests"], state["dropped"]) == (requests + 3, dropped + 1)  # the held answer came too late
    assert state["window"]["t0"] < 30000 and state["window"]["t1"] > 40000       # the newer view's answer


def test_click_selects_and_shows_details(page):
    state = hook(page, "zoomTo", 19000, 31000)
    x, y = point(page, state, THREAD, 1, 25000)
    page.mouse.click(x, y)
    state = hook(page, "ready")
    assert state["selected"] == 200 and state["detail"]["name"] == "aten::LINEAR"
    details = page.locator(".pst-details")
    assert details.locator(".pst-title").text_content() == "aten::LINEAR"
    assert "ProfilerStep#1" in details.locator(".pst-scope").text_content()
    assert "fwdbwd" in details.text_content() and "LinearBackward0" in details.text_content()
    details.get_by_text("LinearBackward0").click()                                # follow the flow
    state = hook(page, "ready")
    assert state["selected"] == 300 and state["t0"] <= 32000 and state["t1"] >= 36000


def test_shift_drag_sums_the_area(page):
    state = hook(page, "zoomTo", 20000, 40000)
    x0, y0 = point(page, state, THREAD, 0, 25000)
    x1, y1 = point(page, state, STREAM, 0, 32000)
    page.keyboard.down("Shift")
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move(x1, y1, steps=5)
    page.mouse.up()
    page.keyboard.up("Shift")
    state = hook(page, "ready")
    assert state["areaRange"]["tracks"] == [THREAD, AUTOGRAD, STREAM]
    assert state["areaRange"]["t0"] == pytest.approx(25000, abs=40)
    assert state["areaRange"]["t1"] == pytest.approx(32000, abs=40)
    sums = {r["name"]: r["dur_ns"] for r in state["area"]["rows"]}
    assert sums["aten::LINEAR"] == pytest.approx(5000, abs=40) and sums["gemm"] == pytest.approx(1000, abs=40)
    assert "aten::LINEAR" in page.locator(".pst-area").text_content()
    exact = hook(page, "areaSelect", 25000, 32000, [THREAD, STREAM])["area"]
    assert [(r["name"], r["dur_ns"]) for r in exact["rows"]] == [("ProfilerStep#1", 7000), ("aten::LINEAR", 5000),
                                                                  ("gemm", 1000)]


def test_search_next_and_previous(page):
    state = hook(page, "search", "n1")
    assert state["search"]["total"] == 33 and state["search"]["index"] == 0 and state["selected"] == 1
    assert state["search"]["label"] == "1 of 33"
    assert state["t0"] <= 100 and state["t1"] >= 111
    state = hook(page, "next")
    assert (state["search"]["index"], state["selected"]) == (1, 4)
    state = hook(page, "prev")
    assert (state["search"]["index"], state["selected"]) == (0, 1)
    state = hook(page, "prev")                                                   # round to the last one
    assert (state["search"]["index"], state["selected"], state["search"]["wrapped"]) == (32, 97, True)
    page.locator(".pst-search").fill("no such thing")
    page.locator(".pst-search").press("Enter")
    state = hook(page, "ready")
    assert state["search"]["total"] == 0 and state["search"]["label"] == "no match"


def test_flow_arrows_toggle_and_group_collapse(page):
    state = hook(page, "zoomTo", 19000, 37000)
    assert state["drawn"]["flows"] == 2 and state["window"]["flows"] == 2
    page.locator("input.pst-flows").uncheck()
    assert hook(page, "state")["drawn"]["flows"] == 0
    page.locator("input.pst-flows").check()

    group = next(r for r in state["rows"] if r["kind"] == "group" and r["name"] == "device streams")
    box = page.locator("canvas.pst-canvas").bounding_box()
    page.mouse.click(box["x"] + 40, box["y"] + group["y"] + 10)
    state = hook(page, "ready")
    assert state["collapsed"] == [group["id"]]
    assert STREAM not in [r["id"] for r in state["rows"] if r["kind"] == "track"]
    assert state["drawn"]["flows"] == 1                                           # the launch's kernel is hidden


def test_critical_path_outlines_its_slices(page, server):
    from perfsight.analysis.critical_path import critical_path

    fake = SlowRun(run(extra=[s(900, EVIL[0], AUTOGRAD, 37000, 2000), s(901, EVIL[1], AUTOGRAD, 39000, 500)]))
    on_path = {i for i in critical_path(fake.tables).column("slice_id").to_pylist() if i is not None}
    state = hook(page, "ready")
    assert state["criticalPath"] is None and state["drawn"]["onPath"] == 0
    page.locator("input.pst-critical").check()
    state = hook(page, "ready")
    assert state["criticalPath"]["slices"] == len(on_path) > 0 and state["drawn"]["onPath"] > 0
    state = hook(page, "criticalPath", False)
    assert state["criticalPath"] is None and state["drawn"]["onPath"] == 0


def test_a_counter_is_labelled_with_its_largest_value_in_view(page):
    """The counter host.cpu_percent.process (samples 10% at 1,000 ns, 30% at 1,500, 20% at 1,700, 50% at 9,000):
    its label is the largest value the view shows, not the track's maximum (50%) wherever the view is."""
    def label(state):
        [row] = [r for r in state["rows"] if r["name"] == "host.cpu_percent.process"]
        return row["scale"]

    assert label(hook(page, "state")) == "50.0%"                          # the whole run
    assert label(hook(page, "zoomTo", 0, 1600)) == "30.0%"                # 10% then 30%
    assert label(hook(page, "zoomTo", 2000, 8000)) == "20.0%"             # 20% held from 1,700 ns
    assert label(hook(page, "zoomTo", 8500, 20000)) == "50.0%"            # 20% held, then 50%


def test_html_names_stay_text(page):
    state = hook(page, "select", 900)
    assert state["detail"]["name"] == EVIL[0]
    assert page.locator(".pst-details .pst-title").text_content() == EVIL[0]
    hook(page, "select", 901)
    assert page.locator(".pst-details .pst-title").text_content() == EVIL[1]
    state = hook(page, "zoomTo", 36000, 40000)
    x, y = point(page, state, AUTOGRAD, 0, 38000)
    page.mouse.move(x, y)
    assert page.locator(".pst-tooltip").text_content().startswith(EVIL[0])
    hook(page, "search", "<script>")
    assert page.evaluate("window.__xss") is None
    assert page.locator(".pst img, .pst script").count() == 0


def test_screenshot(page, tmp_path):
    """Not an assertion on pixels: a picture to look at when changing the drawing (kept in tmp_path)."""
    hook(page, "zoomTo", 0, 40000)
    hook(page, "select", 200)
    path = tmp_path / "timeline.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
