"""The Overview and Step trace pages in a real browser on real runs (a perfsight run, the large GPU trace,
the ResNet-50 trace for advice naming operators): the charts drawn with the expected traces, the numbers
of the analysis functions in the cards and tables, the advice's evidence links and the step selector."""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from perfsight.analysis.advisor import advise
from perfsight.analysis.breakdown import CATEGORIES, step_breakdown, step_breakdown_average
from perfsight.analysis.ops import op_instances, type_shares
from perfsight.analysis.steps import step_phases, step_trace
from perfsight.analysis.summary import timeline_summary

from .harness import open_view, wait_rendered
from .shown import cells, fmt_ns, fmt_num, fmt_pct, page_url, ready, tables_of, traces

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("prefix, view", [("perfsight/", "host"), ("gpu/", "device")])
def test_overview(server, page, prefix, view):
    tables = tables_of(server, prefix)
    open_view(page, page_url(server, prefix, "overview"))
    breakdown = step_breakdown(tables).to_pylist()
    used = [c for c in (*CATEGORIES, "idle") if any(r[c + "_ns"] for r in breakdown)]
    per_step = traces(page, "chart-step-breakdown")
    assert len(per_step) == len(used) and {t["points"] for t in per_step} == {len(breakdown)}
    assert [t["points"] for t in traces(page, "chart-step-average")] == [len(used)]
    (average,) = step_breakdown_average(step_breakdown(tables)).to_pylist()
    assert cells(page, "#step-average-table", 1) == [fmt_ns(average[c + "_ns"]) for c in used]
    assert cells(page, "#step-average-table", 2) == [fmt_pct(average[c + "_pct"]) for c in used]
    kinds = None if view == "device" else ("cpu_op",)
    shares = type_shares(op_instances(tables, kinds=kinds), top=10)
    assert [t["points"] for t in traces(page, "chart-top-ops")] == [shares.num_rows]

    headline = page.locator("#overview-cards .card").first
    expect(headline.locator(".card-label")).to_have_text("median step")
    expect(headline.locator(".card-value")).to_have_text(fmt_ns(average["median_step_ns"]))
    expect(headline.locator(".card-note")).to_have_text(
        f"median of {len(breakdown)} profiled steps (mean {fmt_ns(average['step_ns'])})")
    summary = timeline_summary(tables).to_pylist()
    assert cells(page, "#overview-timeline", 2) == [fmt_num(r["executions"]) for r in summary]
    advice = advise(tables).to_pylist()
    titles = page.locator("#overview-advice h3")
    expect(titles).to_have_text([f"{a['severity']} {a['title']}" for a in advice])
    assert page.external_requests == [] and page.console_errors == []


def test_advice_links_to_its_evidence(server, page):
    open_view(page, page_url(server, "resnet50/", "overview"))
    advice = page.locator("#overview-advice .advice").filter(has_text="Matmuls and convolutions run in fp32")
    links = advice.locator(".evidence a")
    expect(links).to_have_text(["Operators", "aten::addmm", "aten::cudnn_convolution",
                                "aten::cudnn_convolution_backward_input", "aten::cudnn_convolution_backward_weight",
                                "aten::mm"])
    loader = page.locator("#overview-advice .advice").filter(has_text="Training waits for data").locator(".evidence a")
    expect(loader).to_have_text(["Data preparation"])
    links.nth(2).click()
    wait_rendered(page)
    assert re.search(r"/operators/aten%3A%3Acudnn_convolution/host$", page.url)
    expect(page.locator("#op-type-filter")).to_contain_text("aten::cudnn_convolution")
    ready(page, "#op-instances")
    assert set(cells(page, "#op-instances", 1)) == {"aten::cudnn_convolution"}
    assert page.external_requests == [] and page.console_errors == []


@pytest.mark.parametrize("prefix", ["perfsight/", "gpu/"])
def test_step_trace_and_its_selector(server, page, prefix):
    tables = tables_of(server, prefix)
    trace = step_trace(tables).to_pylist()
    phases = step_phases(step_trace(tables)).to_pylist()
    open_view(page, page_url(server, prefix, "steps"))
    assert [t["name"] for t in traces(page, "chart-step-phases")] == ["iteration gap", "forward+backward", "tail"]
    curves = traces(page, "chart-step-curves")
    assert [t["name"] for t in curves] == ["step", "iteration gap", "forward+backward", "tail"]
    assert {t["points"] for t in curves} == {len(trace)}
    assert cells(page, "#step-table", 0) == [str(r["step"]) for r in trace]
    assert cells(page, "#step-table", 2) == [fmt_ns(r["iteration_ns"]) for r in trace]

    def shown(phase):
        detail = ready(page, "#step-detail")
        title = f"Average of {phase['steps']} steps" if phase["step"] is None else f"Step {phase['step']}"
        expect(detail.locator("h2")).to_have_text(title)
        values = [fmt_ns(phase[k]) for k in ("iteration_ns", "gap_ns", "fp_bp_ns", "tail_ns")]
        assert detail.locator(".card-value").all_inner_texts() == values

    shown(phases[0])                                          # the average by default
    last = phases[-1]
    page.select_option("#step-select", str(last["step"]))
    shown(last)
    assert page.url.endswith(f"/steps/{last['step']}")
    page.locator("#step-table tbody tr").first.click()        # a row selects its step
    shown(phases[1])
    open_view(page, page_url(server, prefix, "steps", str(last["step"])))
    shown(last)
    assert page.locator("#step-select").input_value() == str(last["step"])
    assert page.external_requests == [] and page.console_errors == []


def test_a_run_without_steps_says_why_on_the_overview_and_step_trace(serve, page, tmp_path):
    import json

    from perfsight.analysis.steps import no_steps_reason

    (tmp_path / "t.pt.trace.json").write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 5}]}))
    server = serve(tmp_path)
    server.wait_parsed()
    reason = no_steps_reason(tables_of(server, "t.pt"))
    said = reason[0].upper() + reason[1:] + "."
    for name in ("overview", "steps"):
        open_view(page, page_url(server, "t.pt", name))
        expect(page.get_by_text(said)).to_be_visible()
    assert page.console_errors == []
