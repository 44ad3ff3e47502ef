"""The Cluster page of a job analysed rank by rank, in a real browser: the planted 64-rank job of
bench/clusterstore.py (8 nodes assumed, rank 35 slow by 3 ms per collective, link 1 -> 9 ten times slower,
node n's clock n x 1,000,003 ns ahead): the rank x step heatmap and its categories, the node matrix with the
rank pairs of a clicked node pair, the slow rank and link with their evidence, the clock offsets, and a rank's
link opening that rank alone (and back to the job)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from playwright.sync_api import expect

from perfsight.analysis import waiting
from perfsight.core.memo import computed

from .harness import open_view, wait_rendered
from .shown import cells, fmt_ns, luminance, page_url, pixel, ready, traces

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import clusterstore  # noqa: E402  (bench/ is scripts, imported as a sibling)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def job_server(tmp_path_factory):
    from .harness import InsightServer

    base = tmp_path_factory.mktemp("cluster_job")
    clusterstore.write_job(base / "big", 64)
    with InsightServer(base) as server:
        server.wait_parsed()
        yield server


def test_the_cluster_page_of_64_ranks(job_server, page):
    open_view(page, page_url(job_server, "big", "overview"))         # the job's only page is its Cluster page
    assert page.locator("body").get_attribute("data-state") == "ready"
    assert page.locator("#run-nav a").all_inner_texts() == ["Cluster"]
    # the rank x step heatmap: 64 ranks x 5 steps, step time then compute
    assert traces(page, "rank-step-heatmap") == [{"type": "heatmap", "name": None, "points": 64}]
    step_ns = clusterstore.STEP_NS + (35 * 13 + 2 * 7) % 17 * 10_000 + clusterstore.SLOW_DELAY_NS
    assert page.locator("#rank-step-heatmap").evaluate("el => el.data[0].z[35][2]") == step_ns / 1e6
    page.locator("select#heatmap-value").select_option("compute")
    expect(page.locator("#rank-step-holder[data-state=ready] #rank-step-heatmap")).to_have_count(1)
    ready(page, "#rank-step-heatmap")
    assert page.locator("#rank-step-heatmap").evaluate("el => el.data[0].z[35][2]") == step_ns * 6 // 10 / 1e6
    # the node matrix: 8 x 8 assumed nodes; a click on node 0 -> node 1 lists its 64 rank pairs
    expect(page.locator("#node-count")).to_have_text("8 nodes, 64 ranks.")
    ready(page, "#node-matrix")
    assert page.locator("#node-matrix").evaluate("el => [el.data[0].y.length, el.data[0].x.length]") == [8, 8]
    page.locator("#node-matrix").scroll_into_view_if_needed()
    spot = page.locator("#node-matrix").evaluate("""el => {
        const box = el.getBoundingClientRect(), xa = el._fullLayout.xaxis, ya = el._fullLayout.yaxis;
        return {x: box.left + xa._offset + xa.l2p(1), y: box.top + ya._offset + ya.l2p(0)}; }""")
    page.mouse.move(spot["x"], spot["y"])
    page.mouse.click(spot["x"], spot["y"])
    ready(page, "#node-pair")
    expect(page.locator("#node-pair h3")).to_have_text("node 0 (assumed) to node 1 (assumed): 64 rank pairs")
    expect(page.locator("#node-pair-links tbody tr")).to_have_count(64)
    assert traces(page, "node-pair-matrix") == [{"type": "heatmap", "name": None, "points": 8}]
    # the slow rank and the slow link with their evidence
    assert cells(page, "#top-ranks", 0)[0] == "rank 35"
    top = cells(page, "#top-slow-ranks", 0)
    assert top[:3] == ["rank 35"] * 3 and top[3] != "rank 35"                  # its TP, DP and world groups
    assert cells(page, "#top-slow-ranks", 6)[:4] == ["straggler: the others wait for it"] * 3 + ["–"]
    job = job_server.library.get(job_server.library.entries()[0]["id"]).job
    verdicts = [r for r in computed(waiting.slow_ranks, job).to_pylist() if r["slow"]]
    assert sorted(cells(page, "#top-slow-ranks", 4)[:3]) == sorted(fmt_ns(r["caused_per_step_ns"]) for r in verdicts)
    assert cells(page, "#top-slow-links", 0)[0] == "rank 1" and cells(page, "#top-slow-links", 1)[0] == "rank 9"
    assert cells(page, "#top-slow-links", 6)[:2] == ["slow", "–"]
    assert "Threshold: bandwidth < 80% of the median" in page.locator(".page-cluster").inner_text()
    # clock offsets: node 7's ranks the largest
    assert cells(page, "#offsets-top", 1)[0] == fmt_ns(7 * clusterstore.NODE_OFFSET_NS)
    # a rank's link opens that rank alone, which links back to the job
    page.locator("#top-ranks a.rank-link", has_text="rank 35").click()
    wait_rendered(page)
    expect(page.locator("#run-title")).to_have_text("big#rank35")
    expect(page).to_have_url(re.compile(r"#/run/[0-9a-f]+/overview$"))
    page.locator("#back-to-job").click()
    wait_rendered(page)
    expect(page.locator("#run-title")).to_have_text("big")
    assert page.external_requests == [] and page.console_errors == []


def test_open_a_rank_by_number(job_server, page):
    open_view(page, page_url(job_server, "big", "cluster"))
    page.locator("#open-rank-number").fill("63")
    page.locator("#open-rank").click()
    wait_rendered(page)
    expect(page.locator("#run-title")).to_have_text("big#rank63")
    assert page.external_requests == [] and page.console_errors == []


#: a heatmap's cells holding its largest and its smallest value, and the viewport point of each cell's centre
EXTREME_CELLS = """el => {
    const z = el.data[0].z, box = el.getBoundingClientRect(), xa = el._fullLayout.xaxis, ya = el._fullLayout.yaxis;
    const cells = z.flatMap((row, i) => row.map((v, j) => ({v, i, j}))).filter(c => c.v !== null);
    const at = c => ({value: c.v, x: box.left + xa._offset + xa.l2p(c.j), y: box.top + ya._offset + ya.l2p(c.i)});
    const order = [...cells].sort((a, b) => a.v - b.v);
    return {largest: at(order[order.length - 1]), smallest: at(order[0])};
}"""


def test_the_node_matrix_draws_its_largest_amounts_darkest(job_server, page):
    """The cell of the largest bytes between two nodes is drawn dark (it was Plotly's "Blues" unreversed: light
    grey on the white page), the smallest light; so for every value the matrix shows."""
    open_view(page, page_url(job_server, "big", "cluster"))
    for metric in ("bytes", "time", "bandwidth"):
        page.locator("select#node-matrix-value").select_option(metric)
        ready(page, "#node-matrix").scroll_into_view_if_needed()
        extremes = page.locator("#node-matrix").evaluate(EXTREME_CELLS)
        assert extremes["largest"]["value"] > extremes["smallest"]["value"], metric
        page.mouse.move(0, 0)                                     # no hover label over the cells
        largest, smallest = (luminance(pixel(page, extremes[end]["x"], extremes[end]["y"]))
                             for end in ("largest", "smallest"))
        assert largest < 100 < smallest, (metric, largest, smallest)
    assert page.external_requests == [] and page.console_errors == []


def test_the_clock_offsets_are_drawn_without_webgl(job_server, page):
    """The offsets chart is SVG (a scattergl chart is blank where the browser has no WebGL: no GPU, as
    here with --disable-gpu): one marker per rank, at its offset."""
    open_view(page, page_url(job_server, "big", "cluster"))
    assert traces(page, "offsets-chart") == [{"type": "scatter", "name": None, "points": 64}]
    markers = page.locator("#offsets-chart .scatterlayer .point")
    expect(markers).to_have_count(64)
    tops = markers.evaluate_all("points => points.map(p => Math.round(p.getBoundingClientRect().top))")
    by_node = [set(tops[8 * node:8 * node + 8]) for node in range(8)]      # 8 ranks to a node, one clock each
    assert all(len(node) == 1 for node in by_node), by_node
    assert [min(node) for node in by_node] == sorted({min(node) for node in by_node}, reverse=True)  # n ms ahead
    assert page.external_requests == [] and page.console_errors == []


def test_the_run_list_writes_the_job_s_ranks_as_a_range(job_server, page):
    open_view(page, job_server.url + "/#/")
    row = page.locator("#run-list tbody tr", has_text="big")
    expect(row.locator("td").nth(3)).to_have_text("0-63")          # not the 64 numbers
    assert page.external_requests == [] and page.console_errors == []
