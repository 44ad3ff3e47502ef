"""The Data preparation, Resources and Cluster pages in a real browser, on real runs: a perfsight run
(DataLoader, host sampling, memory), a torch.profiler CPU trace with memory events, the ResNet-50 trace
that waits on its loader, a large GPU trace with none of these, and a two-rank NCCL job."""
from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.conftest import copy_shared

from .harness import open_view
from .shown import page_url, ready

pytestmark = pytest.mark.browser


def test_data_preparation_page(server, page):
    open_view(page, page_url(server, "perfsight/", "data"))
    assert page.locator("body").get_attribute("data-state") == "ready"
    verdict = page.locator(".verdict")
    expect(verdict).to_have_count(1)
    assert re.search(r"(highly|moderately|not) input-bound", verdict.inner_text())
    assert "Suggestions:" in verdict.inner_text()
    ready(page, "#data-wait-chart")
    expect(page.locator("#data-steps tbody tr")).to_have_count(4)
    assert "No input-queue series were recorded" in page.locator("main").inner_text()

    open_view(page, page_url(server, "resnet50/", "data"))
    assert "highly input-bound" in page.locator(".verdict").inner_text()
    expect(page.locator("#data-steps tbody tr")).to_have_count(6)
    assert page.external_requests == [] and page.console_errors == []


def test_resources_page_host_series_memory_curve_click_and_pages(server, page):
    open_view(page, page_url(server, "perfsight/", "resources"))
    ready(page, "#cpu-chart")
    ready(page, "#host-memory-chart")
    assert "process CPU" in page.locator("#host-summary").inner_text()
    ready(page, "#memory-curve")
    breakdown = ready(page, "#memory-breakdown")
    assert "(the peak)" in breakdown.inner_text()
    assert page.locator("#alive-tensors tbody tr").count() >= 1
    assert page.locator("#memory-by-op tbody tr").count() >= 1
    expect(page.locator("#memory-allocations .page-info")).to_contain_text(" rows)")

    # a click on the curve shows what is allocated at that event
    drag = page.locator("#memory-curve .nsewdrag").first
    box = drag.bounding_box()
    where = {"x": box["width"] * 0.3, "y": box["height"] / 2}
    drag.hover(position=where)                # Plotly clicks the point it hovers: wait for the hover label
    expect(page.locator("#memory-curve .hoverlayer .hovertext").first).to_be_attached()
    drag.click(position=where)
    expect(page.locator("#memory-breakdown h3")).to_contain_text(re.compile(r"\(event \d+\)"), timeout=30_000)
    ready(page, "#memory-breakdown")

    # the allocations, 50 a page
    pages = page.locator("#memory-allocations")
    expect(pages.locator(".page-info")).to_contain_text("page 1 of ")
    pages.locator("button.next").click()                 # 4 steps of the MLP allocate more than 50 times
    expect(pages.locator(".page-info")).to_contain_text("page 2 of ")
    expect(pages).to_have_attribute("data-state", "ready")
    assert pages.locator("tbody tr").count() >= 1
    assert page.external_requests == [] and page.console_errors == []


def test_resources_page_of_a_large_gpu_trace_thins_the_curve_and_switches_devices(server, page):
    open_view(page, page_url(server, "gpu/", "resources"))
    assert "No host usage samples in this run" in page.locator("main").inner_text()
    select = page.locator("select#memory-select")
    assert select.locator("option").all_text_contents() == ["rank 1, cpu", "rank 1, cuda:1"]
    select.select_option(label="rank 1, cuda:1")
    expect(page.locator("#memory-device")).to_contain_text("of 26,770 events drawn", timeout=30_000)
    ready(page, "#memory-curve")
    ready(page, "#memory-breakdown")
    assert page.external_requests == [] and page.console_errors == []


def test_cluster_page_of_a_two_rank_job(serve, page, shared_data, tmp_path):
    job = tmp_path / "job"
    copy_shared(shared_data / "kineto" / "hta" / "trace_filter", job)
    server = serve(tmp_path)
    (run,) = server.wait_parsed()
    assert run["ranks"] == [0, 1]
    open_view(page, f"{server.url}/#/run/{run['id']}/overview")
    expect(page.locator("#run-nav a", has_text="Cluster")).to_have_count(1)
    open_view(page, f"{server.url}/#/run/{run['id']}/cluster")
    cards = page.locator("#slowest-rank").inner_text()
    # two sampled ranks of a 128-rank job: their steps even, no straggler between the two
    assert "ranks are even" in cards and "straggler" in cards and "2 ranks, 1 step" in cards
    ready(page, "#rank-breakdown-chart")
    ready(page, "#rank-steps-chart")
    expect(page.locator("#rank-breakdown tbody tr")).to_have_count(2)
    assert "(slowest)" not in page.locator("#rank-breakdown").inner_text()
    ready(page, "#comm-matrix")
    cells = page.locator("#comm-cells").inner_text()
    assert cells.count("peers not recorded") == 2
    assert "all_to_all" in page.locator("#comm-collectives").inner_text()
    open_view(page, f"{server.url}/#/run/{run['id']}/resources")
    assert "No memory events in this run" in page.locator("main").inner_text()
    assert page.external_requests == [] and page.console_errors == []
