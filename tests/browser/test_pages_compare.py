"""The Compare page in a real browser over the planted pair (tests/analysis/planted_pair.py): two runs picked
in the run list, the verdict, the step distributions and the breakdown drawn, the operators and kernels that
grew and shrank most with the analysis's figures, a row's link opening the run's timeline at that
operator; and bytes and counts per step written in their units and grouped."""
from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from tests.analysis.planted_pair import T0, trace_events, write_pair

from .harness import open_view, wait_rendered
from .shown import cells, fmt_ns, traces

pytestmark = pytest.mark.browser


@pytest.fixture
def pair_server(serve, tmp_path):
    write_pair(tmp_path)
    server = serve(tmp_path)
    server.wait_parsed()
    return server


def test_two_runs_picked_and_compared(pair_server, page):
    open_view(page, pair_server.url + "/#/")
    link = page.locator("#compare-link")
    expect(link).to_have_class("button disabled")
    base = page.locator("#run-list tr", has_text="base.pt.trace.json")
    new = page.locator("#run-list tr", has_text="new.pt.trace.json")
    base.locator("input[data-side=base]").check()
    new.locator("input[data-side=new]").check()
    expect(link).to_have_class("button")
    link.click()
    page.wait_for_selector(".page-compare")
    wait_rendered(page)
    expect(page.locator("#compare-verdict")).to_have_text(
        "NEW is 3.0% slower (95% CI +2.6% to +3.4%, step-to-step noise; run-to-run noise is not covered): 10.000 -> "
        "10.300 ms per step")
    assert traces(page, "chart-compare-steps") == [{"type": "box", "name": "BASE", "points": 5},
                                                   {"type": "box", "name": "NEW", "points": 5}]
    assert [t["name"] for t in traces(page, "chart-compare-breakdown")] == ["BASE", "NEW"]
    assert cells(page, "#compare-operators-grown", 0) == ["aten::mm", "aten::relu", "aten::gelu"]
    assert cells(page, "#compare-operators-grown", 1) == ["", "", "new"]
    assert cells(page, "#compare-operators-grown", 2) == ["4 → 4", "3 → 6", "0 → 1"]
    assert cells(page, "#compare-operators-grown", 4) == [fmt_ns(600_000), fmt_ns(120_000), fmt_ns(40_000)]
    assert cells(page, "#compare-operators-shrunk", 0) == ["aten::dropout"]
    assert cells(page, "#compare-kernels-shrunk", 0) == ["matmul"]
    assert cells(page, "#compare-kernels-shrunk", 1) == ["family"]
    assert page.external_requests == [] and page.console_errors == []


def test_a_rows_link_opens_the_runs_timeline_at_that_operator(pair_server, page):
    ids = {r["path"]: r["id"] for r in pair_server.library.entries()}
    open_view(page, f"{pair_server.url}/#/compare/{ids['base.pt.trace.json']}/{ids['new.pt.trace.json']}")
    page.locator("#compare-kernels-shrunk a.timeline-link", has_text="NEW").click()
    page.wait_for_selector(".page-timeline")
    wait_rendered(page)
    state = page.evaluate("window.__perfsightTimelineTest.ready()")
    assert state["search"]["text"] == "ampere_sgemm_64x64_tn"            # the family's NEW member
    assert state["search"]["total"] == 20 and state["detail"]["name"] == "ampere_sgemm_64x64_tn"
    assert page.external_requests == [] and page.console_errors == []


def memory_event(ts_us: float, addr: int, nbytes: int, total: int) -> dict:
    return {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts_us,
            "args": {"Device Type": 1, "Device Id": 0, "Addr": addr, "Bytes": nbytes, "Total Allocated": total,
                     "Total Reserved": 1 << 30}}


def test_bytes_and_counts_per_step_are_written_in_their_units(serve, page, tmp_path):
    """The planted pair's first 3 steps, with memory: BASE allocates 4 bytes once in aten::mm (1.333... B and
    0.333... allocations per step), NEW 1,034 times 1 KiB in every step's first aten::mm (1,034 allocations,
    1,058,816 bytes per step). Bytes under 1 KiB were written with every digit ("1.3333333333333333 B")
    and counts without grouping ("1034")."""
    base = trace_events("base", 3) + [memory_event(T0 + 50, 1, 4, 4)]
    new = trace_events("new", 3)
    for start in [e["ts"] for e in new if e["name"].startswith("ProfilerStep#")]:
        new += [memory_event(start + 20 + k / 10, 10_000 + k, 1024, 1024 * (k + 1)) for k in range(1034)]
    for side, events in (("base", base), ("new", new)):
        (tmp_path / f"{side}.pt.trace.json").write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    server = serve(tmp_path)
    ids = {r["path"]: r["id"] for r in server.wait_parsed()}
    open_view(page, f"{server.url}/#/compare/{ids['base.pt.trace.json']}/{ids['new.pt.trace.json']}")
    expect(page.locator("#compare-memory tbody tr").first.locator("td")).to_have_text(
        ["aten::mm", "both", "0.33 → 1,034", "1.3 B", "1.0 MiB"])
    assert page.external_requests == [] and page.console_errors == []
