"""Benchmark: `perfsight insight` serving the largest real trace: first parse, the Overview page's API
calls cold (first after the parse) and warm, and the server process's memory.

Each round starts a fresh server (`python -m perfsight.cli insight`, a child process) on an empty temporary
summary-base-dir and measures its RSS at idle; then copies the trace in (the server finds it at its next
rescan and parses it: the *first parse*, timed by the server as the run entry's ``parse_seconds``, Parquet
cache written), takes the RSS after the parse, loads the Overview page's API calls (the shell's run
entry, then what pages/overview.js fetches, as the browser does) once cold and ``--warm`` times warm, and
finally requests every page's routes (each parameterless GET route of every router, with typical
parameters: the whole timeline at 1500 px, the busiest allocator at its peak) while sampling the server's
RSS every 10 ms (its peak *while serving all pages*). Rounds run one after another, each on its own server;
latencies are reported as p50/p95 over all rounds.

    PYTHONPATH=src python bench/insight_serve.py [--rounds 5] [--warm 20] [--trace PATH] [--markdown]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
from stats import load_average, quantile  # bench/stats.py (scripts here import their siblings)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "kineto" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
OVERVIEW_JS = ROOT / "src" / "perfsight" / "views" / "insight" / "static" / "pages" / "overview.js"
MIB = 1024 * 1024


def overview_routes() -> list[str]:
    """The routes pages/overview.js fetches (``ctx.api + "/x"`` or `` `${ctx.api}/x` ``), in its order."""
    text = OVERVIEW_JS.read_text(encoding="utf-8")
    found = re.findall(r'ctx\.api\s*\+\s*["\'](/[^"\'?]*)|\$\{ctx\.api\}(/[^`?$]*)', text)
    routes = list(dict.fromkeys(a or b for a, b in found))
    if not routes:
        raise SystemExit(f"found no API calls in {OVERVIEW_JS}; update overview_routes()")
    return routes


def page_routes() -> list[str]:
    """Every parameterless GET route under /api/runs/{run_id}/ of insight's routers (relative paths)."""
    sys.path.insert(0, str(ROOT / "src"))
    from perfsight.views.insight import api_operators, api_overview, api_resources, api_timeline

    routes = []
    for module in (api_overview, api_operators, api_resources, api_timeline):
        for route in module.router(lambda run_id: None).routes:
            if "GET" in route.methods and route.path.count("{") == 1 and not route.path.endswith("/download"):
                routes.append(route.path.removeprefix("/api/runs/{run_id}"))
    return routes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> tuple[int, float, int]:
    """(status, seconds, bytes) of one GET."""
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=300) as response:
            body, status = response.read(), response.status
    except urllib.error.HTTPError as error:
        body, status = error.read(), error.code
    return status, time.perf_counter() - start, len(body)


class Server:
    """`perfsight insight` in a child process on ``base``."""

    def __init__(self, base: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        self.child = subprocess.Popen([sys.executable, "-m", "perfsight.cli", "insight", "--summary-base-dir",
                                       str(base), "--port", str(self.port)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.process = psutil.Process(self.child.pid)
        deadline = time.monotonic() + 60
        while True:
            try:
                if get(self.url + "/api/runs")[0] == 200:
                    break
            except OSError:
                pass
            if self.child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"insight did not start: {self.child.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
        self.started = time.monotonic()

    def rss_mib(self) -> float:
        return self.process.memory_info().rss / MIB

    def runs(self) -> list[dict]:
        with urllib.request.urlopen(self.url + "/api/runs", timeout=60) as response:
            return json.loads(response.read())["runs"]

    def close(self) -> None:
        self.child.terminate()
        try:
            self.child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()


def peak_rss_while(server: Server, work) -> tuple[float, object]:
    """Run ``work()`` while sampling the server's RSS every 10 ms; (peak MiB, work's result)."""
    peak, stop = [server.rss_mib()], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], server.rss_mib())
            stop.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = work()
    finally:
        stop.set()
        sampler.join()
    return max(peak[0], server.rss_mib()), result


def load_overview(server: Server, run_id: str, routes: list[str]) -> dict:
    """The shell's run-entry request, then the Overview page's requests (together, as Promise.all)."""
    start = time.perf_counter()
    timings = {"run entry": get(f"{server.url}/api/runs/{run_id}")}
    with_threads = []
    for route in routes:
        thread = threading.Thread(
            target=lambda r=route: timings.__setitem__(r, get(f"{server.url}/api/runs/{run_id}{r}")))
        thread.start()
        with_threads.append(thread)
    for thread in with_threads:
        thread.join()
    total = time.perf_counter() - start
    bad = {name: t[0] for name, t in timings.items() if t[0] != 200}
    if bad:
        raise RuntimeError(f"overview requests failed: {bad}")
    return {"total_s": total, **{name: t[1] for name, t in timings.items()}}


def serve_all_pages(server: Server, run_id: str, routes: list[str]) -> dict:
    api = f"{server.url}/api/runs/{run_id}"
    def body(route: str):
        with urllib.request.urlopen(api + route, timeout=300) as response:
            return json.loads(response.read())

    end = body("/timeline/tracks").get("end_ns", 1_000_000)           # the timeline's extent
    devices = sorted(body("/memory")["devices"], key=lambda d: -d["events"])   # the busiest allocator
    device = urllib.parse.urlencode({"rank": devices[0]["rank"], "device": devices[0]["device"],
                                     "t_ns": devices[0]["peak_ts_ns"]} if devices else {"t_ns": end // 2})
    params = f"?t0=0&t1={end}&width=1500&q=nccl&{device}"
    start, results = time.perf_counter(), {}
    for route in routes:
        results[route] = get(api + route + params)[0]
    return {"seconds": time.perf_counter() - start, "statuses": results}


def one_round(trace: Path, warm: int, overview: list[str], pages: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="perfsight-bench-insight-") as tmp:
        base = Path(tmp) / "runs"
        base.mkdir()
        server = Server(base)
        try:
            time.sleep(1.0)
            idle = server.rss_mib()
            (base / "gpu").mkdir()
            shutil.copy(trace, base / "gpu" / trace.name)
            while True:                                  # found at the next rescan (every 5 s), then parsed
                runs = server.runs()
                if runs and runs[0]["status"] in ("ready", "error"):
                    break
                time.sleep(0.05)
            (run,) = runs
            if run["status"] != "ready":
                raise RuntimeError(f"the trace failed to parse: {run['error']}")
            after_parse = server.rss_mib()
            cold = load_overview(server, run["id"], overview)
            warm_loads = [load_overview(server, run["id"], overview) for _ in range(warm)]
            after_overview = server.rss_mib()
            serving_peak, sweep = peak_rss_while(server, lambda: serve_all_pages(server, run["id"], pages))
            return {"parse_s": run["parse_seconds"], "slices": run["slices"], "idle_rss_mib": idle,
                    "after_parse_rss_mib": after_parse, "after_overview_rss_mib": after_overview,
                    "serving_all_pages_peak_rss_mib": serving_peak, "after_all_pages_rss_mib": server.rss_mib(),
                    "all_pages_s": sweep["seconds"], "all_pages_statuses": sweep["statuses"],
                    "cold": cold, "warm": warm_loads}
        finally:
            server.close()


def measure(trace: Path, rounds: int, warm: int) -> dict:
    overview, pages = overview_routes(), page_routes()
    results = [one_round(trace, warm, overview, pages) for _ in range(rounds)]
    return {"trace": str(trace), "overview_routes": overview, "page_routes": pages, "rounds": results}


def _pcts(values, unit="ms", scale=1000.0) -> str:
    digits = 2 if unit == "s" else 1
    return f"{quantile(values, 0.5) * scale:.{digits}f} {unit} | {quantile(values, 0.95) * scale:.{digits}f} {unit}"


def machine() -> str:
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor() or "unknown CPU"
    return (f"{os.cpu_count()} cores ({model}), {psutil.virtual_memory().total / 2**30:.1f} GiB RAM, "
            f"Python {platform.python_version()}, {platform.system()} {platform.release()}, "
            f"load average {load_average()} at the end")


def markdown(data: dict, warm: int) -> str:
    rounds = data["rounds"]
    trace = Path(data["trace"])
    routes = ["run entry", *data["overview_routes"]]
    lines = [
        "## insight: serving the largest real trace (issue 5)",
        "",
        f"Trace: `{trace.name}` ({trace.stat().st_size / 1e6:.1f} MB gzip, {rounds[0]['slices']:,} slices). "
        f"{len(rounds)} rounds, each on a fresh `perfsight insight` server (a child process) over an empty "
        "temporary summary-base-dir into which the trace is copied; per round 1 cold and "
        f"{warm} warm loads of the Overview page's API calls ({', '.join(f'`{r}`' for r in routes)}: the "
        "shell's run entry, then the page's requests together), then every page's routes once "
        f"({len(data['page_routes'])} routes). Machine: {machine()}. Produced by "
        f"`PYTHONPATH=src python bench/insight_serve.py --rounds {len(rounds)} --warm {warm} --markdown`.",
        "",
        "| measurement | p50 | p95 |",
        "|---|---:|---:|",
        f"| first parse (server's `parse_seconds`: read, tables, Parquet cache) | "
        f"{_pcts([r['parse_s'] for r in rounds], 's', 1.0)} |",
        f"| Overview load, cold (first after the parse) | {_pcts([r['cold']['total_s'] for r in rounds])} |",
        f"| Overview load, warm | {_pcts([w['total_s'] for r in rounds for w in r['warm']])} |",
    ]
    for route in routes:
        lines.append(f"| &nbsp;&nbsp;`{route}` cold | {_pcts([r['cold'][route] for r in rounds])} |")
        lines.append(f"| &nbsp;&nbsp;`{route}` warm | {_pcts([w[route] for r in rounds for w in r['warm']])} |")
    lines.append(f"| every page's routes once, after the Overview | "
                 f"{_pcts([r['all_pages_s'] for r in rounds], 's', 1.0)} |")
    for key, label in (("idle_rss_mib", "server RSS at idle (no run)"), ("after_parse_rss_mib", "RSS after the parse"),
                       ("after_overview_rss_mib", "RSS after the Overview loads"),
                       ("serving_all_pages_peak_rss_mib", "peak RSS while serving all pages"),
                       ("after_all_pages_rss_mib", "RSS after serving all pages")):
        lines.append(f"| {label} | {_pcts([r[key] for r in rounds], 'MiB', 1.0)} |")
    statuses = {route: code for r in rounds for route, code in r["all_pages_statuses"].items()}
    failing = {route: code for route, code in statuses.items() if code >= 500}
    lines += ["", "All-pages routes answered: " + ", ".join(f"`{r}` {c}" for r, c in statuses.items())
              + (f". **Server errors: {failing}**" if failing else "."), ""]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warm", type=int, default=20, help="warm Overview loads per round")
    parser.add_argument("--markdown", action="store_true", help="print the bench/RESULTS.md section")
    parser.add_argument("--json", type=Path, help="also write the raw measurements here")
    args = parser.parse_args(argv)
    data = measure(args.trace, args.rounds, args.warm)
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    print(markdown(data, args.warm) if args.markdown else json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
