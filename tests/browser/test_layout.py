"""The pages at the two common screen widths (1280 and 1920 px): no word broken inside a table column or a
card (only cells holding a word too long for any column, kernel signatures, may be cut), the Overview's
donut keeps its labels off its title; and the Timeline opens on the profiled steps with its counters in
their units."""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from perfsight.analysis.breakdown import step_breakdown
from perfsight.analysis.summary import run_start_ns

from .harness import open_view
from .shown import page_url, ready, tables_of

pytestmark = pytest.mark.browser

WIDTHS = (1280, 1920)
PAGES = ("overview", "steps", "operators", "flops", "data", "timeline", "dynamic", "resources")

#: the words (between spaces; a hyphen may end a line) of table cells and cards that a line break cuts
BROKEN_WORDS = """() => {
  const broken = [];
  for (const box of document.querySelectorAll("main th, main td:not(.long), main .card")) {
    const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const word of node.textContent.matchAll(/[^\\s-]+-?/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        const lines = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (lines.size > 1) broken.push(word[0]);
      }
    }
  }
  return broken;
}"""

#: the boxes of a Plotly chart's title, slice labels and legend
CHART_BOXES = """chart => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  return {title: [...chart.querySelectorAll(".gtitle")].map(box),
          labels: [...chart.querySelectorAll(".slicetext, .legend")].filter(e => e.getBoundingClientRect().width)
                                                                      .map(box)};
}"""


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("prefix", ["perfsight/", "gpu/"])
def test_no_word_is_broken_and_the_donut_keeps_off_its_title(server, page, prefix, width):
    page.set_viewport_size({"width": width, "height": 900})
    broken = {}
    for name in PAGES:
        open_view(page, page_url(server, prefix, name))
        expect(page.locator("[data-state=loading]")).to_have_count(0)     # every chart and table drawn
        broken[name] = page.evaluate(BROKEN_WORDS)
        if name == "overview":
            boxes = ready(page, "#chart-step-average").evaluate(CHART_BOXES)
            assert len(boxes["title"]) == 1 and boxes["labels"]
            assert [b for b in boxes["labels"] if _overlap(b, boxes["title"][0])] == []
    assert {name: words for name, words in broken.items() if words} == {}
    assert page.external_requests == [] and page.console_errors == []


def test_the_timeline_opens_on_the_profiled_steps_with_counters_in_their_units(server, page):
    tables = tables_of(server, "perfsight/")
    steps, origin = step_breakdown(tables), run_start_ns(tables)
    first, last = min(steps.column("start_ns").to_pylist()), max(steps.column("end_ns").to_pylist())
    open_view(page, page_url(server, "perfsight/", "timeline"))
    state = page.evaluate("window.__perfsightTimelineTest.ready()")
    assert (state["t0"], state["t1"]) == pytest.approx((first - origin, last - origin))
    assert state["t1"] - state["t0"] < state["extent"]["end"] - state["extent"]["start"]
    scales = {r["name"]: r["scale"] for r in state["rows"] if r.get("scale")}
    assert re.fullmatch(r"\d+\.\d%", scales["host.cpu_percent.process"])
    for name in ("host.memory_rss_bytes.process", "Memory allocated (cpu)"):
        assert re.fullmatch(r"\d+(\.\d)? (B|KiB|MiB|GiB)", scales[name]), scales
    assert re.fullmatch(r"\d+\.\d{3} (ms|s)", scales["host.step_time_ns"])
    page.get_by_role("button", name="Whole run").click()
    state = page.evaluate("window.__perfsightTimelineTest.ready()")
    assert (state["t0"], state["t1"]) == (state["extent"]["start"], state["extent"]["end"])
    page.get_by_role("button", name="Profiled steps").click()
    state = page.evaluate("window.__perfsightTimelineTest.ready()")
    assert (state["t0"], state["t1"]) == pytest.approx((first - origin, last - origin))
    assert page.external_requests == [] and page.console_errors == []
