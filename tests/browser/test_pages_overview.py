"""The Overview and Step trace pages in a real browser on real runs (a perfsight run, the large GPU trace,
the ResNet-50 trace for advice naming operators) and a planted 30-step trace: the charts drawn with the expected
traces, and their legends clear of their labels, the numbers of the analysis functions in the cards and tables,
the timeline summary's threads, the advice's evidence links and the step selector."""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from perfsight.analysis.advisor import advise
from perfsight.analysis.breakdown import CATEGORIES, step_breakdown, step_breakdown_average
from perfsight.analysis.ops import op_instances, type_shares
from perfsight.analysis.steps import step_phases, step_trace
from perfsight.analysis.summary import timeline_summary

from .harness import InsightServer, open_view, wait_rendered
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


#: the planted trace's steps: 1 ms each from T0 us, with Kineto's trace span around them (T0 - 50 us to the end)
STEPS, T0 = 30, 1_000_000


def thirty_steps() -> dict:
    """A Kineto trace of ``STEPS`` 1 ms ProfilerSteps back to back on the main thread, each with a data
    loader fetch, an aten::mm launching a 400 us kernel and a Python frame; and the trace span (``PyTorch
    Profiler (0)``, cat Trace) that Kineto writes on a row of its own, pid ``Spans``."""
    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
              {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
              {"ph": "M", "name": "process_name", "pid": "Spans", "args": {"name": "Spans"}},
              {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
               "ts": T0 - 50, "dur": STEPS * 1000 + 100, "args": {"Op count": 0}}]
    for step in range(STEPS):
        start, corr = T0 + step * 1000, step + 1
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 1}", "pid": 1, "tid": 1, "ts": start,
             "dur": 1000, "args": {}},
            {"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
             "pid": 1, "tid": 1, "ts": start + 10, "dur": 90, "args": {}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": start + 200, "dur": 200,
             "args": {"External id": corr}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": start + 250,
             "dur": 10, "args": {"correlation": corr, "External id": corr}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": start + 300, "dur": 400,
             "args": {"correlation": corr, "External id": corr, "device": 0, "stream": 7}},
            {"ph": "X", "cat": "python_function", "name": "train.py(10): step", "pid": 1, "tid": 1, "ts": start + 500,
             "dur": 300, "args": {}},
        ]
    return {"schemaVersion": 1, "traceEvents": events}


@pytest.fixture(scope="module")
def steps_server(tmp_path_factory):
    import json

    base = tmp_path_factory.mktemp("thirty_steps")
    (base / "steps.pt.trace.json").write_text(json.dumps(thirty_steps()))
    with InsightServer(base) as server:
        server.wait_parsed()
        yield server


#: the boxes of a Plotly chart's legend and x axis labels
LEGEND_AND_LABELS = """chart => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  return {legend: box(chart.querySelector(".legend")), labels: [...chart.querySelectorAll(".xtick text")].map(box)};
}"""


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_per_step_legend_keeps_off_the_step_labels(steps_server, page, width):
    """30 steps: their labels are rotated under the bars, and the legend (it was laid across them, under the
    chart) is beside the chart, at both common screen widths."""
    page.set_viewport_size({"width": width, "height": 900})
    open_view(page, page_url(steps_server, "steps", "overview"))
    assert {t["points"] for t in traces(page, "chart-step-breakdown")} == {STEPS}
    boxes = page.locator("#chart-step-breakdown").evaluate(LEGEND_AND_LABELS)
    assert boxes["labels"]                                          # every step's, or every other one's
    legend = boxes["legend"]
    overlapping = [b for b in boxes["labels"] if b[0] < legend[2] and legend[0] < b[2] and b[1] < legend[3]
                   and legend[1] < b[3]]
    assert overlapping == []
    assert page.external_requests == [] and page.console_errors == []


def test_the_timeline_summary_counts_the_threads_not_kineto_s_trace_span(steps_server, page):
    """The trace span on its own Spans row covers the whole capture: it is not a thread, and its time is not
    busy time (it made 2 threads, busy twice the window)."""
    open_view(page, page_url(steps_server, "steps", "overview"))
    host = page.locator("#overview-timeline tbody tr", has_text="thread")
    expect(host.locator("td")).to_have_text(["cpu", "1 thread", fmt_num(STEPS * 5), str(STEPS + 4),
                                             fmt_ns(STEPS * 1_000_000), fmt_ns(50_000), fmt_ns(50_000 + STEPS * 1e6)])
    assert page.external_requests == [] and page.console_errors == []
