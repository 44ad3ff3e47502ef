"""The Operators, FLOPs and Dynamic shape pages in a real browser on real runs (the large GPU trace, a
perfsight run, the CPU trace given torch's FLOPs, a trace whose names are HTML): charts drawn with the
expected traces, tables holding the analysis numbers, and the interactions (chart kind, search, sort,
pages, a clicked type, its shapes, a call stack, the scope level and precision, op types and instances
per step, a clicked point)."""
from __future__ import annotations

import pyarrow.compute as pc
import pytest
from playwright.sync_api import expect

from perfsight.analysis.dynamic_shape import op_instance_time_by_step, op_shapes_by_step, op_time_by_step
from perfsight.analysis.flops import model_flops, model_flops_total, op_flops, scope_flops
from perfsight.analysis.ops import call_stack, instance_page, op_instances, op_statistic, type_shares
from perfsight.analysis.roofline import roofline
from perfsight.analysis.summary import run_start_ns

from .harness import InsightServer, open_view
from .shown import cells, fmt_ns, fmt_num, fmt_pct, page_url, ready, tables_of, traces
from .test_hostile import IMG, SCRIPT, write_runs

pytestmark = pytest.mark.browser
HOST = ("cpu_op",)


def page_info(page) -> str:
    return ready(page, "#op-instances").locator(".page-info").inner_text()


def test_operators_of_the_gpu_trace(server, page):
    tables = tables_of(server, "gpu/")
    instances = op_instances(tables)
    origin = run_start_ns(tables)
    open_view(page, page_url(server, "gpu/", "operators"))
    shares = type_shares(instances, top=20)
    assert traces(page, "chart-op-types") == [{"type": "pie", "name": None, "points": shares.num_rows}]
    page.select_option("#op-chart-kind", "bar")
    ready(page, "#op-chart")
    assert traces(page, "chart-op-types") == [{"type": "bar", "name": None, "points": shares.num_rows}]
    stats = op_statistic(tables).to_pylist()
    assert cells(page, "#op-types", 3) == [fmt_ns(r["total_ns"]) for r in stats]
    assert cells(page, "#op-types", 8) == [fmt_pct(r["ratio"]) for r in stats]

    # every execution, 20 a page, longest first
    assert page_info(page) == f"page 1 of {-(-instances.num_rows // 20):,} ({instances.num_rows:,} rows)"
    first, _ = instance_page(instances, limit=40)
    durations = [fmt_ns(d) for d in first["dur_ns"].to_pylist()]
    assert cells(page, "#op-instances", 5) == durations[:20]
    page.locator("#op-instances button.next").click()
    assert page_info(page).startswith("page 2 of")
    assert cells(page, "#op-instances", 5) == durations[20:]
    page.locator("#op-instances th", has_text="starts at").click()     # a new column sorts descending
    page.locator("#op-instances th", has_text="starts at").click()     # and again ascending
    expect(page.locator("#op-instances th[data-sort=start_ns]")).to_contain_text("▲")
    earliest = pc.min(instances["start_ns"]).as_py() - origin
    assert page_info(page).startswith("page 1 of") and cells(page, "#op-instances", 4)[0] == fmt_ns(earliest)

    # fuzzy search, then a type clicked in the statistics: its executions and their input shapes
    page.fill("#op-search", "SGEMM volta")
    found, total = instance_page(instances, search="SGEMM volta")
    expect(page.locator("#op-instances .page-info")).to_contain_text(f"({total:,} rows)")
    kind = "volta_sgemm_128x64_nn"
    page.locator("#op-types tbody tr", has_text=kind).click()
    count = pc.sum(pc.equal(instances["op_type"], kind).cast("int64")).as_py()
    expect(page.locator("#op-instances .page-info")).to_contain_text(f"({count:,} rows)")
    expect(page.locator("#op-type-filter")).to_contain_text(kind)
    assert page.url.endswith(f"/operators/{kind}/device")
    shapes = ready(page, "#op-shapes-holder")
    expect(shapes.locator("tbody tr")).to_have_count(1)                # the trace recorded no shapes
    assert cells(page, "#op-shapes", 2) == [fmt_num(count)]

    # a call stack: the launching host call's enclosing slices, then the kernel
    ready(page, "#op-instances").locator("tbody tr").first.click()
    row_id = instance_page(instances, where={"op_type": kind}, search="SGEMM volta", sort="start_ns",
                           descending=False, limit=1)[0]["id"][0].as_py()
    stack = call_stack(tables, row_id).to_pylist()
    ready(page, "#op-stack")
    assert cells(page, "#op-stack-table", 2) == [r["name"] for r in stack]
    assert stack[-1]["name"] == kind and stack[-2]["kind"] == "runtime"

    page.locator("#op-type-clear").click()
    expect(page.locator("#op-instances .page-info")).to_contain_text(f"({total:,} rows)")
    page.select_option("#op-view", "host")                            # the host operators
    counts = page.locator("#op-types tbody td:nth-child(3)")
    expect(counts).to_have_text([fmt_num(r["count"]) for r in op_statistic(tables, kinds=HOST).to_pylist()])
    assert page.url.endswith("/operators//host")
    assert page.external_requests == [] and page.console_errors == []


def test_operators_of_a_perfsight_run_open_on_a_type(server, page):
    tables = tables_of(server, "perfsight/")
    open_view(page, page_url(server, "perfsight/", "operators", "aten::addmm"))
    assert page.locator("#op-view").count() == 0                      # host operators only
    assert page_info(page) == "page 1 of 1 (8 rows)"
    stats = op_statistic(tables, by=["op_type", "input_shapes"], kinds=HOST)
    addmm = stats.filter(pc.equal(stats["op_type"], "aten::addmm")).to_pylist()
    ready(page, "#op-shapes-holder")
    assert cells(page, "#op-shapes", 0) == [r["input_shapes"] for r in addmm]
    assert cells(page, "#op-shapes", 3) == [fmt_ns(r["total_ns"]) for r in addmm]
    assert page.external_requests == [] and page.console_errors == []


def test_flops(flops_dir, page):
    with InsightServer(flops_dir) as served:
        served.wait_parsed()
        tables = tables_of(served, "cpu_flops/")
        open_view(page, page_url(served, "cpu_flops/", "flops"))
        ops, model = op_flops(tables).to_pylist(), model_flops(tables).to_pylist()
        assert [t["points"] for t in traces(page, "chart-flops-model")] == [len(model)]
        assert [t["points"] for t in traces(page, "chart-flops-ops")] == [len(ops)]
        assert [t["points"] for t in traces(page, "chart-flops-scopes")] == [1]
        assert cells(page, "#flops-ops", 0) == [r["op_type"] for r in ops]
        assert cells(page, "#flops-ops", 6) == [fmt_pct(r["utilization_percent"]) for r in ops]
        assert cells(page, "#flops-model", 2) == [fmt_ns(r["step_ns"]) for r in model]
        (total,) = model_flops_total(model_flops(tables)).to_pylist()
        expect(page.locator("#flops-cards .card-value").nth(2)).to_have_text(fmt_pct(total["utilization_percent"]))
        roof = roofline(tables).to_pylist()
        assert cells(page, "#flops-roofline", 0) == [r["op_type"] for r in roof]
        shown = traces(page, "chart-roofline")
        assert sum(t["points"] for t in shown if t["name"].endswith("-bound")) == len(
            [r for r in roof if r["intensity"] and r["flops_per_s"]])
        assert {t["name"] for t in shown if t["name"].endswith(" roof")} == {f"{r['precision']} roof" for r in roof}

        page.fill("#flops-level", "3")
        page.locator("#flops-level").dispatch_event("change")
        ready(page, "#flops-body")
        assert cells(page, "#flops-scopes", 0) == [r["scope"] for r in scope_flops(tables, level=3).to_pylist()]
        page.select_option("#flops-precision", "bf16")
        ready(page, "#flops-body")
        bf16 = op_flops(tables, precision="bf16").to_pylist()
        assert cells(page, "#flops-ops", 6) == [fmt_pct(r["utilization_percent"]) for r in bf16]
        assert page.external_requests == [] and page.console_errors == []


def test_flops_of_a_run_without(server, page):
    open_view(page, page_url(server, "gpu/", "flops"))
    expect(page.locator("#flops-body")).to_contain_text("No FLOPs were counted")
    assert page.external_requests == [] and page.console_errors == []


@pytest.mark.parametrize("prefix, kinds", [("perfsight/", HOST), ("gpu/", None)])
def test_dynamic_shape(server, page, prefix, kinds):
    tables = tables_of(server, prefix)
    by_step = op_time_by_step(tables, kinds=kinds)
    in_steps = set(by_step["op_type"].to_pylist())
    types = [t for t in dict.fromkeys(op_statistic(tables, kinds=kinds)["op_type"].to_pylist()) if t in in_steps]
    open_view(page, page_url(server, prefix, "dynamic"))
    steps = len(set(by_step["step"].to_pylist()))
    drawn = traces(page, "chart-dyn-types")
    assert len(drawn) == min(5, len(types)) and {t["points"] for t in drawn} == {steps}
    page.select_option("#dyn-types", types[:2])
    ready(page, "#dyn-types-chart")
    assert len(traces(page, "chart-dyn-types")) == 2

    instances = op_instance_time_by_step(tables, kinds=kinds)
    first = instances.filter(pc.equal(instances["op_type"], types[0]))
    assert len(traces(page, "chart-dyn-instances")) == min(5, len(set(first["instance"].to_pylist())))
    page.select_option("#dyn-instances", ["0"])
    ready(page, "#dyn-instances-chart")
    zeroth = first.filter(pc.equal(first["instance"], 0))
    assert [t["points"] for t in traces(page, "chart-dyn-instances")] == [zeroth.num_rows]
    page.locator("#chart-dyn-instances").scroll_into_view_if_needed()
    box = page.locator("#chart-dyn-instances .scatterlayer .point").first.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)                                              # Plotly clicks what it hovers
    expect(page.locator("#chart-dyn-instances .hoverlayer .hovertext")).to_have_count(1)
    page.mouse.click(x, y)
    zero = zeroth.to_pylist()[0]
    expect(page.locator("#dyn-point")).to_contain_text(f"in step {zero['step']}: {fmt_ns(zero['dur_ns'])}")
    expect(page.locator("#dyn-point code")).to_have_text(zero["input_shapes"] or "(not recorded)")

    shapes = op_shapes_by_step(tables, kinds=kinds).to_pylist()
    if shapes:
        assert cells(page, "#dyn-shapes", 2) == ["; ".join(r["shapes"]) for r in shapes]
        page.check("#dyn-only")
        ready(page, "#dyn-shapes-holder")
        assert page.locator("#dyn-shapes tbody tr").count() == sum(r["dynamic"] for r in shapes)
    else:
        expect(page.locator("#dyn-shapes-holder")).to_contain_text("No input shapes were recorded")
    assert page.external_requests == [] and page.console_errors == []


def test_names_from_a_trace_are_text(serve, page, tmp_path):
    write_runs(tmp_path)
    served = serve(tmp_path)
    served.wait_parsed()
    open_view(page, page_url(served, "hostile_job", "operators", "", "host"))
    page.select_option("#op-chart-kind", "bar")
    ready(page, "#op-chart")
    for selector in ("#op-types", "#op-instances"):
        expect(page.locator(selector)).to_contain_text(IMG)
    expect(page.locator("#op-types")).to_contain_text(SCRIPT)
    ticks = page.locator("#chart-op-types .ytick")                                   # the bar's labels, once drawn
    expect(ticks.filter(has_text=IMG).first).to_be_attached()
    expect(ticks.filter(has_text=SCRIPT).first).to_be_attached()
    open_view(page, page_url(served, "hostile_job", "overview"))
    legend = page.locator("#chart-top-ops .legendtext")                            # waits until drawn
    expect(legend.filter(has_text=IMG).or_(legend.filter(has_text=SCRIPT)).first).to_be_attached()
    open_view(page, page_url(served, "hostile_job", "dynamic", "", "host"))
    ready(page, "#dyn-types-chart")
    legend = page.locator("#chart-dyn-types .legendtext")
    expect(legend.filter(has_text=IMG).or_(legend.filter(has_text=SCRIPT)).first).to_be_attached()
    assert page.locator("img").count() == 0
    assert page.external_requests == [] and page.console_errors == []
