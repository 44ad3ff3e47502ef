"""Benchmark: opening a trace and computing its temporal and kernel breakdowns, perfsight against
Holistic Trace Analysis (HTA), on the same files in one run; wall time and peak RSS.

Measured, each in a fresh subprocess:

- perfsight, first open: ``perfsight.open(DIR)`` on a fresh temp dir holding only a symlink to the trace
  (no cache yet: parse, canonical tables, Parquet cache written beside the link), then
  ``analysis.breakdown.temporal_breakdown`` and ``analysis.kernels.kernel_breakdown``;
- perfsight, re-open: a second process on the same dir, the cache now present: ``perfsight.open(DIR)``,
  then the same two breakdowns;
- HTA: ``TraceAnalysis(trace_dir=DIR)`` (HTA reads every trace file in a directory), then
  ``get_temporal_breakdown(visualize=False)`` and ``get_gpu_kernel_breakdown(visualize=False)``. HTA has no
  cache: every open parses the file again, so its re-open costs what its first open costs.

HTA runs in its own virtual environment (``--peer-venv``, made if missing with
``pip install traceinsight "pandas<3"``: HTA 0.6.1, import name ``hta``); perfsight runs with this
interpreter and ``src/`` on the path. Rounds interleave the tools (perfsight, HTA, then HTA, perfsight, ...).
Each child runs under a memory limit (``RLIMIT_AS``, ``--mem-limit-gb``) and a timeout, so a tool that
runs out of memory is recorded as failed instead of taking the machine down. Wall time is the whole
process as the parent sees it (interpreter start, imports, work, exit) and, inside the child, the work
after imports; peak RSS is the child's maximum resident set (``ru_maxrss`` from ``wait4``, which also
covers any worker processes it waited for; the child's own ``getrusage`` is kept in the JSON).

Two traces: ``--trace`` (default: the largest real one, HTA's df_index_resolver, 53.7 MB of JSON in
3.0 MB gzip), ``--rounds`` times; and a ~1 GB uncompressed trace made from it by bench/make_big_trace.py
(its ProfilerSteps replicated) in a scratch dir (``--scratch``, deleted afterwards unless ``--keep-big``),
``--big-rounds`` times (default once: one round takes minutes). ``--big PATH`` uses an existing big
trace instead, ``--no-big`` skips it.

    PYTHONPATH=src python bench/hta_compare.py [--rounds 10] [--markdown] [--json raw.json]
    PYTHONPATH=src python bench/hta_compare.py --perfsight-only --rounds 1 --trace PATH --no-big
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from stats import load_average, spread  # bench/stats.py (scripts here import their siblings)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "kineto" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
DEFAULT_VENV = Path(tempfile.gettempdir()) / "perfsight-bench-hta-venv"
PEER_REQUIREMENTS = ["traceinsight", "pandas<3"]
CACHE_SUFFIX = ".perfsight_cache"

PERFSIGHT_CHILD = r"""
import json, resource, sys, time
t_start = time.perf_counter()
from pathlib import Path
import perfsight
from perfsight import run as _run          # perfsight.open's module, imported here so its import is not timed
try:
    from perfsight.analysis.breakdown import temporal_breakdown
    from perfsight.analysis.kernels import kernel_breakdown
    analyses = "temporal_breakdown + kernel_breakdown"
except ImportError:                        # the breakdown modules are not there yet: op_statistic in their place
    from perfsight.analysis.ops import op_statistic as temporal_breakdown, op_statistic as kernel_breakdown
    analyses = "op_statistic (x2, stand-in)"
imported = time.perf_counter()
rss_imports = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
folder = Path(sys.argv[1])
had_cache = any(p.name.endswith(".perfsight_cache") for p in folder.iterdir())
t0 = time.perf_counter()
run = perfsight.open(folder)
t1 = time.perf_counter()
temporal = temporal_breakdown(run.tables)
t2 = time.perf_counter()
kernels = kernel_breakdown(run.tables)
t3 = time.perf_counter()
from perfsight.ingest import cache
cache.wait()                               # the background cache write (the interpreter would wait at exit)
compute_pct = None
if "compute_pct" in temporal.column_names and temporal.num_rows:
    compute_pct = temporal.column("compute_pct")[0].as_py()
print(json.dumps({"import_s": imported - t_start, "open_s": t1 - t0, "temporal_s": t2 - t1, "kernel_s": t3 - t2,
                  "work_s": t3 - t0, "analyses": analyses, "had_cache": had_cache,
                  "cache_written": any(p.name.endswith(".perfsight_cache") for p in folder.iterdir()),
                  "slices": run.tables.slices.num_rows, "steps": len(run.steps), "kernel_rows": kernels.num_rows,
                  "compute_pct": compute_pct, "rss_imports_mib": rss_imports,
                  "self_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

HTA_CHILD = r"""
import json, logging, resource, sys, time, warnings
t_start = time.perf_counter()
warnings.simplefilter("ignore")
from hta.trace_analysis import TraceAnalysis
imported = time.perf_counter()
rss_imports = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t0 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
temporal = analysis.get_temporal_breakdown(visualize=False)
t2 = time.perf_counter()
kernel_types, kernels = analysis.get_gpu_kernel_breakdown(visualize=False)
t3 = time.perf_counter()
print(json.dumps({"import_s": imported - t_start, "open_s": t1 - t0, "temporal_s": t2 - t1, "kernel_s": t3 - t2,
                  "work_s": t3 - t0, "steps": len(analysis.get_profiler_steps()),
                  "kernel_rows": len(kernels), "compute_pct": float(temporal["compute_time_pctg"].iloc[0]),
                  "rss_imports_mib": rss_imports,
                  "self_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "children_peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


# ---------------------------------------------------------------------------------------------- children

def run_child(argv: list[str], env: dict, *, mem_limit_gb: float, timeout_s: float) -> dict:
    """Run one measurement; returns its JSON plus wall_s, peak_rss_mib (wait4) and status ("ok", "timeout",
    "failed: ..."). Never raises for a failing child."""
    limit = int(mem_limit_gb * 2**30)

    def preexec():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=out, stderr=err, env=env, preexec_fn=preexec, start_new_session=True)
        timed_out = threading.Event()

        def kill():
            timed_out.set()
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        timer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    result = {"wall_s": wall, "peak_rss_mib": usage.ru_maxrss / 1024, "status": "ok"}
    if timed_out.is_set():
        result["status"] = f"timeout after {timeout_s:.0f} s"
    elif child.returncode != 0:
        tail = [line for line in stderr.strip().splitlines() if line.strip()][-1:] or [f"exit {child.returncode}"]
        if child.returncode < 0:
            tail = [f"killed by signal {-child.returncode}"] + tail
        result["status"] = "failed: " + "; ".join(tail)[:300]
    else:
        try:
            result.update(json.loads(stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            result["status"] = "failed: no result printed"
    return result


def perfsight_env() -> dict:
    paths = [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def peer_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def peer_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_peer(venv: Path, quiet: bool) -> dict:
    """The peer's venv (made if missing) and its versions."""
    python = peer_python(venv)
    probe = ("import importlib.metadata as m, json, platform; import hta.trace_analysis; "
             "print(json.dumps({n: m.version(n) for n in ('traceinsight', 'pandas', 'numpy')}"
             " | {'python': platform.python_version()}))")

    def check():
        return subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=peer_env())

    done = check() if python.exists() else None
    if done is None or done.returncode != 0:
        if not quiet:
            print(f"making the peer's venv at {venv}: pip install {' '.join(PEER_REQUIREMENTS)}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PEER_REQUIREMENTS], check=True,
                       env=peer_env())
        done = check()
        if done.returncode != 0:
            raise SystemExit(f"the peer does not import in {venv}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


# -------------------------------------------------------------------------------------------- measuring

def fresh_dir(scratch: Path, trace: Path) -> Path:
    """A new temp dir holding only a symlink to the trace (perfsight's cache then goes into this dir)."""
    folder = Path(tempfile.mkdtemp(prefix="hta_compare_", dir=scratch))
    (folder / trace.name).symlink_to(trace.resolve())
    return folder


def measure(trace: Path, rounds: int, args, log) -> list[dict]:
    """``rounds`` rounds; each: {"perfsight": first open, "reopen": re-open, "hta": HTA} (HTA absent when
    --perfsight-only), tools interleaved with the order alternating."""
    limits = {"mem_limit_gb": args.mem_limit_gb, "timeout_s": args.timeout}
    out = []
    for r in range(rounds):
        order = ["perfsight", "hta"] if r % 2 == 0 else ["hta", "perfsight"]
        if args.perfsight_only:
            order = ["perfsight"]
        result = {}
        for tool in order:
            folder = fresh_dir(args.scratch, trace)
            try:
                if tool == "perfsight":
                    argv = [sys.executable, "-c", PERFSIGHT_CHILD, str(folder)]
                    result["perfsight"] = run_child(argv, perfsight_env(), **limits)
                    result["reopen"] = run_child(argv, perfsight_env(), **limits)
                    log(f"  round {r + 1}: perfsight {result['perfsight']['status']} "
                        f"{result['perfsight']['wall_s']:.2f} s, re-open {result['reopen']['wall_s']:.2f} s")
                else:
                    argv = [str(peer_python(args.peer_venv)), "-c", HTA_CHILD, str(folder)]
                    result["hta"] = run_child(argv, peer_env(), **limits)
                    log(f"  round {r + 1}: HTA {result['hta']['status']} {result['hta']['wall_s']:.2f} s")
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        out.append(result)
    return out


def make_big(args, log) -> tuple[Path, dict, Path | None]:
    """The big trace: --big, or made by make_big_trace.py in a scratch dir (returned for deletion)."""
    if args.big:
        return args.big, {"path": str(args.big), "bytes": args.big.stat().st_size}, None
    folder = Path(tempfile.mkdtemp(prefix="hta_compare_big_", dir=args.scratch))
    log(f"making a ~{args.big_gb:g} GB trace in {folder}")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "make_big_trace.py"), str(folder),
                           "--size-gb", str(args.big_gb), "--trace", str(args.trace)],
                          capture_output=True, text=True, check=True)
    info = json.loads(done.stdout.strip().splitlines()[-1])
    info["make_s"] = time.perf_counter() - start
    return Path(info["path"]), info, folder


def warm(path: Path) -> dict:
    """Read the file once, so every measurement finds it in the page cache (none pays the disk alone);
    returns its size on disk and uncompressed."""
    import gzip

    raw = 0
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
        while f.read(1 << 24):
            pass
    if gzipped:
        with gzip.open(path, "rb") as f:
            while chunk := f.read(1 << 24):
                raw += len(chunk)
    else:
        raw = path.stat().st_size
    return {"path": str(path), "bytes": path.stat().st_size, "raw_bytes": raw}


# ------------------------------------------------------------------------------------------- reporting

def samples(rounds: list[dict], tool: str, key: str) -> list[float]:
    return [r[tool][key] for r in rounds if tool in r and r[tool]["status"] == "ok" and r[tool].get(key) is not None]


def cell(values: list[float], unit: str = "s", digits: int = 2, single: bool = False) -> tuple[str, str]:
    """(median, p10-p90) cells; one value when a single round."""
    if not values:
        return "-", "-"
    med, lo, hi = spread(values)
    if single or len(values) == 1:
        return f"{med:.{digits}f} {unit}", "(1 round)"
    return f"{med:.{digits}f} {unit}", f"{lo:.{digits}f}-{hi:.{digits}f}"


def ratios(rounds: list[dict], a: tuple[str, str], b: tuple[str, str]) -> list[float]:
    """Per round, a over b (both ok)."""
    out = []
    for r in rounds:
        if a[0] in r and b[0] in r and r[a[0]]["status"] == r[b[0]]["status"] == "ok":
            out.append(r[a[0]][a[1]] / r[b[0]][b[1]])
    return out


def ratio_cell(values: list[float], digits: int = 1) -> str:
    if not values:
        return "-"
    med, lo, hi = spread(values)
    return f"{med:.{digits}f}x" if len(values) == 1 else f"{med:.{digits}f}x [{lo:.{digits}f}-{hi:.{digits}f}]"


def status_note(rounds: list[dict], tool: str) -> str:
    bad = [r[tool]["status"] for r in rounds if tool in r and r[tool]["status"] != "ok"]
    return f"{len(bad)} of {len(rounds)} runs failed ({bad[0]})" if bad else ""


def table(rounds: list[dict], perfsight_only: bool) -> list[str]:
    single = len(rounds) == 1
    lines = ["| measurement | perfsight | p10-p90 | HTA | p10-p90 | HTA / perfsight, paired |",
             "|---|---:|---:|---:|---:|---:|"]

    def row(label, key, unit="s", digits=2, ps="perfsight", paired=True, rss=False):
        p = cell(samples(rounds, ps, key), unit, digits, single)
        h = ("-", "-") if perfsight_only or ps == "reopen" else cell(samples(rounds, "hta", key), unit, digits, single)
        r = ratio_cell(ratios(rounds, ("hta", key), (ps, key))) if paired and not perfsight_only else "-"
        lines.append(f"| {label} | {p[0]} | {p[1]} | {h[0]} | {h[1]} | {r} |")

    row("first open + both breakdowns, whole process (start to exit)", "wall_s")
    row("&nbsp;&nbsp;imports", "import_s", paired=False)
    row("&nbsp;&nbsp;open + both breakdowns (after imports)", "work_s")
    row("&nbsp;&nbsp;&nbsp;&nbsp;open (parse, tables; perfsight also writes its cache)", "open_s")
    row("&nbsp;&nbsp;&nbsp;&nbsp;temporal breakdown", "temporal_s", digits=3)
    row("&nbsp;&nbsp;&nbsp;&nbsp;kernel breakdown", "kernel_s", digits=3)
    row("peak RSS, first open + both breakdowns", "peak_rss_mib", "MiB", 0)
    row("&nbsp;&nbsp;peak RSS after imports only", "rss_imports_mib", "MiB", 0, paired=False)
    row("re-open from cache + both breakdowns, whole process", "wall_s", ps="reopen", paired=False)
    row("&nbsp;&nbsp;re-open from the Parquet cache (perfsight.open)", "open_s", ps="reopen", digits=3, paired=False)
    row("&nbsp;&nbsp;re-open + both breakdowns (after imports)", "work_s", ps="reopen", digits=3, paired=False)
    row("peak RSS, re-open + both breakdowns", "peak_rss_mib", "MiB", 0, ps="reopen", paired=False)
    return lines


def targets(small: list[dict], big: list[dict] | None, perfsight_only: bool) -> list[str]:
    def med(values):
        return statistics.median(values) if values else None

    def verdict(ok):
        return "-" if ok is None else ("yes" if ok else "**no**")

    lines = ["| target | measured | met |", "|---|---|---|"]
    if not perfsight_only:
        speed_work = med(ratios(small, ("hta", "work_s"), ("perfsight", "work_s")))
        speed_wall = med(ratios(small, ("hta", "wall_s"), ("perfsight", "wall_s")))
        memory = med(ratios(small, ("perfsight", "peak_rss_mib"), ("hta", "peak_rss_mib")))
        if speed_work is not None:
            lines.append(f"| first open >= 5x faster than HTA (54 MB; after imports / whole process) | "
                         f"{speed_work:.1f}x / {speed_wall:.1f}x | {verdict(speed_work >= 5)} / "
                         f"{verdict(speed_wall >= 5)} |")
        if memory is not None:
            lines.append(f"| first open peak RSS < 1/3 of HTA's (54 MB) | {memory:.2f} of HTA's | "
                         f"{verdict(memory < 1 / 3)} |")
        if big:
            b_work = med(ratios(big, ("hta", "work_s"), ("perfsight", "work_s")))
            b_mem = med(ratios(big, ("perfsight", "peak_rss_mib"), ("hta", "peak_rss_mib")))
            if b_work is not None and b_mem is not None:
                lines.append(f"| the same on the 1 GB trace (speed-up after imports; RSS share) | {b_work:.1f}x; "
                             f"{b_mem:.2f} of HTA's | {verdict(b_work >= 5)}; {verdict(b_mem < 1 / 3)} |")
    reopen = med(samples(small, "reopen", "open_s"))
    if reopen is not None:
        lines.append(f"| re-open from cache < 0.5 s (54 MB; perfsight.open) | {reopen:.3f} s | "
                     f"{verdict(reopen < 0.5)} |")
    if big:
        ok = all(r["perfsight"]["status"] == "ok" for r in big)
        peak = med(samples(big, "perfsight", "peak_rss_mib"))
        measured = f"peak RSS {peak / 1024:.2f} GiB" if peak is not None else status_note(big, "perfsight")
        lines.append(f"| the 1 GB trace opens on this 24 GB machine | {measured} | {verdict(ok)} |")
    return lines


def versions_line(peer: dict | None) -> str:
    import importlib.metadata as m

    def v(name):
        try:
            return m.version(name)
        except m.PackageNotFoundError:
            return "?"

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip() or "?"
    except OSError:
        commit = "?"
    text = (f"perfsight at {commit} (pyarrow {v('pyarrow')}, duckdb {v('duckdb')}, msgspec {v('msgspec')}, "
            f"Python {platform.python_version()})")
    if peer:
        text += (f"; HTA = traceinsight {peer['traceinsight']} with pandas {peer['pandas']}, numpy {peer['numpy']} "
                 f"(Python {peer['python']}, own venv)")
    return text


def rounds_text(n: int) -> str:
    return f"{n} round{'s' if n != 1 else ''}"


def size(info: dict) -> str:
    if info["raw_bytes"] != info["bytes"]:
        return f"{info['raw_bytes'] / 1e6:.1f} MB of JSON, {info['bytes'] / 1e6:.1f} MB gzip"
    return f"{info['bytes'] / 1e6:.1f} MB of JSON"


def markdown(data: dict) -> str:
    args = data["args"]
    small, big = data["small"], data.get("big")
    perfsight_only = args["perfsight_only"]
    first = next((r["perfsight"] for r in small if r["perfsight"]["status"] == "ok"), {})
    hta_first = next((r["hta"] for r in small if "hta" in r and r["hta"]["status"] == "ok"), {})
    trace = Path(args["trace"])
    lines = [
        "## Open and breakdowns vs Holistic Trace Analysis (issue 3)",
        "",
        f"What opening a trace and getting its temporal and kernel breakdowns costs in perfsight and in HTA, "
        f"on the same files in one run. Produced by `{data['command']}` (bench/hta_compare.py; its docstring "
        "has the details).",
        "",
        "Method: every measurement is a fresh subprocess; rounds interleave the tools (perfsight then HTA, "
        "then HTA then perfsight, ...). *perfsight first open*: `perfsight.open(DIR)` on a fresh temp dir "
        "holding only a symlink to the trace (no cache: parse, canonical tables, Parquet cache written), then "
        f"`{first.get('analyses', 'temporal_breakdown + kernel_breakdown')}`. *perfsight re-open*: a second "
        "process on the same dir, now with the cache, doing the same. *HTA*: `TraceAnalysis(trace_dir=DIR)`, "
        "`get_temporal_breakdown(visualize=False)`, `get_gpu_kernel_breakdown(visualize=False)`; HTA has no "
        "cache, so its re-open costs what its first open costs. Whole-process wall time is measured by the "
        "parent (interpreter start to exit); the phases inside the child exclude imports. Peak RSS is the "
        "child's `ru_maxrss` (from `wait4`). Children run under `RLIMIT_AS` = "
        f"{args['mem_limit_gb']:g} GiB and a {args['timeout']:.0f} s timeout. The trace files are read once "
        "before the rounds, so all runs find them in the page cache. Medians, p10-p90 over rounds; the ratio "
        "column is HTA over perfsight per round (median [p10-p90]).",
        "",
        f"### {trace.name} ({size(data['small_info'])}, "
        f"{first.get('slices', 0):,} perfsight slices, {first.get('steps', '?')} steps), {rounds_text(len(small))}",
        "",
        *table(small, perfsight_only),
        "",
    ]
    if hta_first and first.get("compute_pct") is not None:
        lines += [f"Both computed the same thing: GPU compute share of the window {first['compute_pct']:.2f}% "
                  f"(perfsight, exact ns) and {hta_first['compute_pct']:.2f}% (HTA, last step dropped, us).", ""]
    for tool, label in (("perfsight", "perfsight"), ("reopen", "perfsight re-open"), ("hta", "HTA")):
        if status_note(small, tool):
            lines += [f"{label}: {status_note(small, tool)}.", ""]
    if big is not None:
        info = data["big_info"]
        bfirst = next((r["perfsight"] for r in big if r["perfsight"]["status"] == "ok"), {})
        made = (f"made by `python bench/make_big_trace.py DIR --size-gb {args['big_gb']:g}` in "
                f"{info['make_s']:.0f} s: {info['copies']} copies of the source's 5 ProfilerSteps, "
                f"{info['events']:,} events" if "copies" in info else "given with --big")
        lines += [
            f"### Replicated trace: {Path(info['path']).name} ({info['bytes'] / 1e9:.2f} GB of JSON, "
            f"{bfirst.get('slices', 0):,} perfsight slices, {bfirst.get('steps', '?')} steps), "
            f"{rounds_text(len(big))}",
            "",
            f"The trace was {made}. "
            + ("One round each, as a round takes minutes." if len(big) == 1 else ""),
            "",
            *table(big, perfsight_only),
            "",
        ]
        for tool, label in (("perfsight", "perfsight"), ("reopen", "perfsight re-open"), ("hta", "HTA")):
            if status_note(big, tool):
                lines += [f"{label}: {status_note(big, tool)}.", ""]
    lines += ["### Targets (issue 3)", "", *targets(small, big, perfsight_only), ""]
    lines += [
        f"Versions: {versions_line(data.get('peer'))}. Machine: {os.cpu_count()} cores, "
        f"{data['mem_total_gib']:.0f} GiB RAM, {platform.platform()}. Load average (1, 5, 15 min) before / "
        f"after: {data['load_before']} / {data['load_after']}. Benchmark wall time: {data['total_s']:.0f} s.",
        "",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- main

def mem_total_gib() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        return 0.0


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="the trace measured --rounds times")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--big", type=Path, help="an existing big trace (else one is made with make_big_trace.py)")
    parser.add_argument("--big-gb", type=float, default=1.0, help="size of the big trace to make, GB")
    parser.add_argument("--big-rounds", type=int, default=1)
    parser.add_argument("--no-big", action="store_true", help="skip the big trace")
    parser.add_argument("--keep-big", action="store_true", help="keep the big trace that was made")
    parser.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()),
                        help="where temp dirs and the big trace go (default: the system temp dir)")
    parser.add_argument("--peer-venv", type=Path, default=DEFAULT_VENV,
                        help="HTA's virtual environment, made if missing (default: %(default)s)")
    parser.add_argument("--perfsight-only", action="store_true", help="measure perfsight alone (no venv needed)")
    parser.add_argument("--mem-limit-gb", type=float, default=20.0, help="RLIMIT_AS of every child, GiB")
    parser.add_argument("--timeout", type=float, default=900.0, help="per child, seconds")
    parser.add_argument("--markdown", action="store_true", help="print the bench/RESULTS.md section")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = parser.parse_args(argv)
    log = (lambda *a: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))

    started = time.perf_counter()
    command = "PYTHONPATH=src python bench/hta_compare.py " + " ".join(argv if argv is not None else sys.argv[1:])
    data = {"command": command.strip(), "load_before": load_average(), "mem_total_gib": mem_total_gib()}
    args.scratch.mkdir(parents=True, exist_ok=True)
    data["peer"] = None if args.perfsight_only else ensure_peer(args.peer_venv, args.quiet)
    big_folder = None
    try:
        data["small_info"] = warm(args.trace)
        log(f"{args.trace.name}: {args.rounds} rounds")
        data["small"] = measure(args.trace, args.rounds, args, log)
        if not args.no_big:
            big, data["big_info"], big_folder = make_big(args, log)
            data["big_info"]["raw_bytes"] = warm(big)["raw_bytes"]
            log(f"{big.name}: {args.big_rounds} round(s)")
            data["big"] = measure(big, args.big_rounds, args, log)
    finally:
        if big_folder is not None and not args.keep_big:
            shutil.rmtree(big_folder, ignore_errors=True)
    data["load_after"] = load_average()
    data["total_s"] = time.perf_counter() - started
    data["args"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    print(markdown(data) if args.markdown else json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
