"""The Cluster page's communication in a real browser: the real 2-rank Ascend job (communication.json's
figures, communication_matrix.json's links, HCCS/SDMA bandwidth with packet sizes, group-local ranks, what
each rank read around) and a planted 2-rank NCCL job with known answers (tests/analysis/planted_nccl_job.py:
rank 1's clock 7,000,123 ns ahead, rank 1 the slow rank of pg0)."""
from __future__ import annotations

import pytest
from playwright.sync_api import expect

from perfsight.analysis.waiting import STRAGGLER_THRESHOLD
from tests.analysis.planted_nccl_job import write_nccl_job
from tests.conftest import copy_shared

from .harness import open_view
from .shown import cells, fmt_ns, page_url, ready, traces

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def cluster_server(tmp_path_factory, shared_data):
    from .harness import InsightServer

    base = tmp_path_factory.mktemp("cluster_runs")
    copy_shared(shared_data / "ascend" / "torch_npu" / "text" / "level1", base / "npu_job")
    for path in [base, *base.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    write_nccl_job(base / "nccl_job")
    with InsightServer(base) as server:
        server.wait_parsed()
        yield server


def test_cluster_page_of_the_ascend_job(cluster_server, page):
    open_view(page, page_url(cluster_server, "npu_job", "cluster"))
    assert page.locator("body").get_attribute("data-state") == "ready"
    # the matrix: 2 recording ranks x 8 peers, bytes first, then bandwidth
    assert traces(page, "comm-matrix") == [{"type": "heatmap", "name": None, "points": 2}]
    z = page.locator("#comm-matrix").evaluate("el => el.data[0].z[0][1]")
    assert z == 61_210_624
    page.locator("select#matrix-value").select_option("bandwidth")
    expect(page.locator("#comm-matrix .colorbar .cbtitle")).to_have_text("GB/s")
    assert page.locator("#comm-matrix").evaluate("el => el.data[0].z[0][1]") == pytest.approx(61_210_624 / 3_883_938)
    # the collectives per rank and group, longest wait first
    ready(page, "#comm-totals")
    assert cells(page, "#comm-totals", 0) == ["0", "1"]
    assert cells(page, "#comm-totals", 7) == [fmt_ns(5_940_619), fmt_ns(191_384)]        # wait
    assert cells(page, "#comm-totals", 12) == ["116.119", "110.814"]                      # busbw GB/s
    page.locator("#comm-totals th", has_text="wait").first.click()                     # ascending
    expect(page.locator("#comm-totals tbody tr").first.locator("td").first).to_have_text("1")
    # every operation, longest wait first, 20 a page
    ready(page, "#comm-operations")
    expect(page.locator("#comm-operations .page-info")).to_have_text("page 1 of 1 (8 rows)")
    assert cells(page, "#comm-operations", 1)[:2] == ["hcom_allReduce__586_0_1", "hcom_allReduce__586_2_1"]
    assert set(cells(page, "#comm-operations", 14)) == {"communication.json"}
    # link types with the packet sizes of HCCS
    links = page.locator("#comm-links").inner_text()
    assert "HCCS" in links and "SDMA" in links and "407.8 MiB" in links        # 427,596,096 bytes
    assert {t["name"] for t in traces(page, "link-packets")} == {"rank 0 HCCS", "rank 1 HCCS"}
    # verdicts with their rules
    verdict = page.locator("#slow-rank-verdict").inner_text()
    assert (f"rank 1 is the straggler of group 17522688603477080586: the others wait {fmt_ns(3_480_846)} per step "
            "for it, last at 3 of 4") in verdict
    assert f"Threshold: {STRAGGLER_THRESHOLD}." in verdict
    # the links between the two profiled ranks: their other peers are group-local positions (no global rank)
    assert "No slow link among 2 links." in page.locator("#slow-link-verdict").inner_text()
    # clock offsets, groups, what each rank read around
    assert cells(page, "#clock-offsets", 1) == [fmt_ns(0), fmt_ns(-8136)]
    assert cells(page, "#clock-offsets", 4) == ["4", "4"]
    assert "group-local (no mapping found)" in page.locator("#comm-groups").inner_text()
    lacks = page.locator("#rank-lacks").inner_text()
    assert "171 times a slice started inside another of its track" in lacks
    assert page.external_requests == [] and page.console_errors == []


def test_cluster_page_of_a_planted_nccl_job(cluster_server, page):
    open_view(page, page_url(cluster_server, "nccl_job", "cluster"))
    ready(page, "#comm-matrix")
    assert page.locator("#comm-matrix").evaluate("el => el.data[0].z") == [[None, 12_004_000], [12_000_000, None]]
    page.locator("select#matrix-value").select_option("time")
    expect(page.locator("#comm-matrix .colorbar .cbtitle")).to_have_text("ms")
    assert page.locator("#comm-matrix").evaluate("el => el.data[0].z") == [[None, 1.55], [1.5, None]]
    ready(page, "#comm-totals")
    assert cells(page, "#comm-totals", 2) == ["allreduce", "send", "allreduce", "recv"]
    assert cells(page, "#comm-totals", 7) == [fmt_ns(900_000), fmt_ns(50_000), "0 ns", "0 ns"]
    assert cells(page, "#comm-totals", 12) == ["8.000", "0.080", "8.000", "0.080"]
    assert "rank 1 is the straggler of group pg0: the others wait 900.00 µs per step for it, last at 3 of 3" in \
        page.locator("#slow-rank-verdict").inner_text()
    assert "No slow link among 2 links." in page.locator("#slow-link-verdict").inner_text()
    assert cells(page, "#clock-offsets", 1) == ["0 ns", fmt_ns(7_000_123)]
    assert cells(page, "#comm-groups", 1) == ["dp", "pp"]
    expect(page.locator("#rank-lacks tbody tr")).to_have_count(2)
    assert page.external_requests == [] and page.console_errors == []
