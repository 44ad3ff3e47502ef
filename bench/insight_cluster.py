"""Benchmark: `perfsight insight`'s Cluster page of a job of 1,024 ranks (issue 17): how long the server takes to
make the job ready (map: every rank found in its store; reduce: the page's analyses into the Job's memo), each
of the page's API routes (first call and warm), and each view drawn in headless Chromium (API + draw: from the
navigation, or the click, until the chart says it is drawn).

The job is bench/clusterstore.py's planted job (``--ranks``, default 1,024: tiny traces and their summaries
written straight into the store, so the map reads no trace; the figures are computed from the summaries as for a
real job). A fresh `perfsight insight` child process serves it; its peak RSS is sampled throughout.

    PYTHONPATH=src python bench/insight_cluster.py [--ranks 1024] [--steps 5] [--warm 5] [--markdown]
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import clusterstore  # bench/ siblings
from insight_serve import Server, get, machine

#: the routes of the page (api_cluster.py), as pages/cluster_job.js asks for them
ROUTES = ["/cluster/job", "/cluster/heatmap?value=step", "/cluster/heatmap?value=compute", "/cluster/nodes",
          "/cluster/top?n=10", "/cluster/offsets"]
#: the charts of the page, by element id
CHARTS = ["rank-step-heatmap", "node-matrix", "offsets-chart"]
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


def sampled_peak(server: Server, stop: threading.Event, peak: list[float]) -> None:
    while not stop.is_set():
        try:
            peak[0] = max(peak[0], server.rss_mib())
        except Exception:  # noqa: BLE001 - the process may be gone at the end
            return
        stop.wait(0.05)


def api_times(server: Server, run_id: str, warm: int, pair: tuple[str, str]) -> dict:
    api = f"{server.url}/api/runs/{run_id}"
    src, dst = pair
    routes = [*ROUTES, "/cluster/nodes/links?" + urllib.parse.urlencode({"src": src, "dst": dst})]
    out = {}
    for route in routes:
        status, first, size = get(api + route)
        if status != 200:
            raise RuntimeError(f"{route}: {status}")
        out[route] = {"first_s": first, "warm_s": statistics.median(get(api + route)[1] for _ in range(warm)),
                      "bytes": size}
    return out


def draw_times(url: str) -> dict:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        began = time.perf_counter()
        page.goto(url)                        # a fresh browser: the shell, its scripts and Plotly loaded first
        page.wait_for_selector("body[data-state=ready]", state="attached", timeout=120_000)
        out = {"first_load_s": time.perf_counter() - began}
        page.goto(url.split("#")[0] + "#/")   # the run list, then the page as a click on the job opens it
        page.wait_for_selector("body[data-state=ready]", state="attached", timeout=120_000)
        began = time.perf_counter()
        page.goto(url)
        page.wait_for_selector("body[data-state=ready]", state="attached", timeout=120_000)
        out["page_s"] = time.perf_counter() - began
        for chart in CHARTS:
            page.wait_for_selector(f"#{chart}[data-state=ready]", state="attached", timeout=120_000)
            out[f"{chart}_s"] = time.perf_counter() - began
        began = time.perf_counter()
        page.locator("select#heatmap-value").select_option("communication")
        page.wait_for_selector("#rank-step-holder[data-state=ready] #rank-step-heatmap[data-state=ready]",
                               state="attached", timeout=120_000)
        out["heatmap_category_s"] = time.perf_counter() - began
        page.locator("#node-matrix").scroll_into_view_if_needed()
        spot = page.locator("#node-matrix").evaluate("""el => {
            const box = el.getBoundingClientRect(), xa = el._fullLayout.xaxis, ya = el._fullLayout.yaxis;
            return {x: box.left + xa._offset + xa.l2p(1), y: box.top + ya._offset + ya.l2p(0)}; }""")
        began = time.perf_counter()
        page.mouse.move(spot["x"], spot["y"])
        page.mouse.click(spot["x"], spot["y"])
        page.wait_for_selector("#node-pair[data-state=ready] #node-pair-matrix[data-state=ready]", state="attached",
                               timeout=120_000)
        out["node_drill_down_s"] = time.perf_counter() - began
        began = time.perf_counter()
        page.locator("#top-ranks a.rank-link").first.click()
        page.wait_for_selector("#back-to-job", state="attached", timeout=120_000)   # the rank's own entry shown
        out["rank_link_to_its_entry_s"] = time.perf_counter() - began
        browser.close()
    return out


def measure(ranks: int, steps: int, warm: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="perfsight-bench-cluster-") as tmp:
        base = Path(tmp) / "runs"
        began = time.perf_counter()
        answers = clusterstore.write_job(base / "job", ranks, steps=steps)
        written = time.perf_counter() - began
        server = Server(base)
        peak, stop = [server.rss_mib()], threading.Event()
        sampler = threading.Thread(target=sampled_peak, args=(server, stop, peak), daemon=True)
        sampler.start()
        try:
            began = time.perf_counter()
            while True:
                runs = server.runs()
                if runs and runs[0]["status"] in ("ready", "error"):
                    break
                time.sleep(0.2)
            if runs[0]["status"] != "ready":
                raise RuntimeError(runs[0]["error"])
            ready = time.perf_counter() - began
            run_id = runs[0]["id"]
            api = api_times(server, run_id, warm, ("node 0 (assumed)", "node 1 (assumed)"))
            draw = draw_times(f"{server.url}/#/run/{run_id}/cluster")
            rss_after = server.rss_mib()
        finally:
            stop.set()
            sampler.join()
            server.close()
    return {"ranks": ranks, "steps": steps, "nodes": answers["nodes"], "store_written_s": written,
            "ready_s": ready, "map_and_reduce_s": runs[0]["parse_seconds"], "api": api, "draw": draw,
            "server_peak_rss_mib": peak[0], "server_rss_after_mib": rss_after}


def markdown(data: dict, warm: int) -> str:
    lines = [
        f"## insight: the Cluster page of {data['ranks']:,} ranks (issue 17)",
        "",
        f"bench/clusterstore.py's planted job: {data['ranks']:,} ranks, {data['nodes']} nodes (8 ranks each, "
        f"assumed), {data['steps']} steps, world / TP / DP all-reduces and sends (the world group's, "
        f"beyond collectives.PAIRED_GROUP_RANKS ranks, not by rank pair); its store written directly "
        f"({data['store_written_s']:.1f} s), so the map finds every rank stored. A fresh `perfsight insight` child "
        f"process; API routes by urllib (first call, then the median of {warm}); views in headless Chromium "
        f"(API + draw, from navigation or click until drawn). Machine: {machine()}. Produced by "
        f"`PYTHONPATH=src python bench/insight_cluster.py --ranks {data['ranks']} --markdown`.",
        "",
        "| measurement | seconds |",
        "|---|---:|",
        f"| job ready (found, mapped: every rank stored, reduced: the page's analyses) | {data['ready_s']:.2f} |",
    ]
    for route, t in data["api"].items():
        lines.append(f"| API `{route}` first / warm ({t['bytes'] / 1e3:,.0f} kB) | {t['first_s']:.3f} / "
                     f"{t['warm_s']:.3f} |")
    labels = {"first_load_s": "first load in a fresh browser (shell, scripts, Plotly, then every section)",
              "page_s": "the page opened from the run list: every section's API and draw",
              "rank-step-heatmap_s": "  rank x step heatmap drawn (same clock)",
              "node-matrix_s": "  node matrix drawn (same clock)",
              "offsets-chart_s": "  clock offsets drawn (same clock)",
              "heatmap_category_s": "heatmap: another category (API + draw)",
              "node_drill_down_s": "node pair drill-down (API + table + rank-pair heatmap)",
              "rank_link_to_its_entry_s": "a rank's link to its own entry (shell shows it; its parse follows)"}
    for key, label in labels.items():
        lines.append(f"| view: {label} | {data['draw'][key]:.2f} |")
    lines += [f"| server peak RSS (MiB) | {data['server_peak_rss_mib']:,.0f} |",
              f"| server RSS after (MiB) | {data['server_rss_after_mib']:,.0f} |", ""]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warm", type=int, default=5)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    data = measure(args.ranks, args.steps, args.warm)
    print(markdown(data, args.warm) if args.markdown else json.dumps(data, indent=1))


if __name__ == "__main__":
    sys.exit(main())
