"""The Timeline page inside the insight shell, on a real GPU trace: tracks drawn from the server's windows,
zoom through the test hook, search across the trace, a slice's details, an evidence link's window, and
leaving the page releasing the component."""
from __future__ import annotations

import pytest

from perfsight.analysis.summary import run_start_ns

from .harness import open_view, wait_rendered
from .shown import page_url, tables_of

pytestmark = pytest.mark.browser


def test_timeline_page_draws_searches_and_selects(server, page):
    open_view(page, page_url(server, "gpu/", "timeline"))
    state = page.evaluate("window.__perfsightTimelineTest.ready()")
    assert state["error"] is None
    assert state["drawn"]["slices"] + state["drawn"]["buckets"] > 0

    tables = tables_of(server, "gpu/")
    slices, origin = tables.slices, run_start_ns(tables)
    kernel = slices.filter(slices.column("kind").to_numpy(zero_copy_only=False) == "kernel").slice(0, 1).to_pylist()[0]
    start = kernel["start_ns"] - origin
    state = page.evaluate(f"window.__perfsightTimelineTest.zoomTo({start - 1000}, {start + kernel['dur_ns'] + 1000})")
    assert state["t0"] == start - 1000

    found = page.evaluate(f"window.__perfsightTimelineTest.search({kernel['name'][:30]!r})")
    assert found["search"]["total"] >= 1
    selected = page.evaluate(f"window.__perfsightTimelineTest.select({kernel['id']})")
    assert selected["selected"] == kernel["id"]
    assert kernel["name"] in page.locator(".pst-details").inner_text()

    page.goto(page_url(server, "gpu/", "timeline", str(start), str(start + 5000)))
    wait_rendered(page)
    state = page.evaluate("window.__perfsightTimelineTest.ready()")
    assert (state["t0"], state["t1"]) == (start, start + 5000)

    page.goto(page_url(server, "gpu/", "overview"))
    wait_rendered(page)
    assert page.locator(".pst").count() == 0
    assert page.external_requests == []
    assert page.console_errors == []
