"""Benchmark: `perfsight export` (timeline + summary) of the largest real trace, beside the floor.

The floor is what any tool pays just to look at the file: gzip + json.loads of the whole trace (the
figure ../shared/ARCHITECTURE.md quotes). Each round runs, in fresh subprocesses and interleaved
(perfsight, floor, perfsight, floor, ... with the order alternating), perfsight's phases timed inside
the process (read into tables without cache, timeline export, summary export, re-read from the
Parquet cache) and its peak RSS, and the floor's time and peak RSS. Reports medians and p10-p90.

    PYTHONPATH=src python bench/export_largest.py [--rounds 7] [--trace PATH] [--markdown]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from stats import spread  # bench/stats.py (scripts here import their siblings)

DEFAULT_TRACE = (Path(__file__).resolve().parents[2] / "shared" / "data" / "kineto" / "hta" / "df_index_resolver"
                 / "df_index_resolver.json.gz")

PERFSIGHT_CHILD = r"""
import json, resource, shutil, sys, time
from pathlib import Path
start = time.perf_counter()
from perfsight import ingest
from perfsight.views.export import export_summary, export_timeline
imported = time.perf_counter()
trace, out = Path(sys.argv[1]), Path(sys.argv[2])
copy = out / trace.name                       # a writable copy, so the Parquet cache can be written beside it
shutil.copy(trace, copy)
run = ingest.find_runs(copy)[0]
t0 = time.perf_counter(); tables = ingest.load(run, use_cache=False); t1 = time.perf_counter()
export_timeline(tables, out / "o", stamp="bench"); t2 = time.perf_counter()
export_summary(tables, out / "o", stamp="bench"); t3 = time.perf_counter()
ingest.cache.write(run.cache_dir, ingest.cache.fingerprint(run.sources()), tables); t4 = time.perf_counter()
ingest.load(run); t5 = time.perf_counter()
print(json.dumps({"import_s": imported - start, "read_s": t1 - t0, "timeline_s": t2 - t1, "summary_s": t3 - t2,
                  "cache_write_s": t4 - t3, "reopen_s": t5 - t4, "total_s": t3 - t0,
                  "slices": tables.slices.num_rows,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

FLOOR_CHILD = r"""
import gzip, json, resource, sys, time
t0 = time.perf_counter()
with gzip.open(sys.argv[1], "rb") as f:
    trace = json.loads(f.read())
t1 = time.perf_counter()
print(json.dumps({"total_s": t1 - t0, "events": len(trace["traceEvents"]),
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run_child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(trace: Path, rounds: int) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {"perfsight": [], "floor": []}
    for r in range(rounds):
        order = ("perfsight", "floor") if r % 2 == 0 else ("floor", "perfsight")
        for name in order:
            if name == "perfsight":
                with tempfile.TemporaryDirectory() as tmp:
                    results[name].append(run_child(PERFSIGHT_CHILD, str(trace), tmp))
            else:
                results[name].append(run_child(FLOOR_CHILD, str(trace)))
    return results


def markdown(trace: Path, rounds: int, results: dict[str, list[dict]]) -> str:
    def row(label, samples, key, unit="s", scale=1.0):
        med, lo, hi = spread([s[key] * scale for s in samples])
        return f"| {label} | {med:.2f} {unit} | {lo:.2f}-{hi:.2f} |"

    ps, floor = results["perfsight"], results["floor"]
    size_mb = trace.stat().st_size / 1e6
    lines = [
        "## Export of the largest real trace (issue 2)",
        "",
        f"Trace: `{trace.name}` ({size_mb:.1f} MB gzip, {floor[0]['events']:,} events, "
        f"{ps[0]['slices']:,} slices). {rounds} rounds, perfsight and the floor interleaved, each run a fresh "
        f"subprocess. Machine: {os.cpu_count()} cores, Python {platform.python_version()}. Produced by "
        "`PYTHONPATH=src python bench/export_largest.py --markdown`.",
        "",
        "| phase | median | p10-p90 |",
        "|---|---:|---:|",
        row("perfsight: read into tables (no cache)", ps, "read_s"),
        row("perfsight: timeline export (msprof_*.json)", ps, "timeline_s"),
        row("perfsight: summary export (step_trace, op_summary, op_statistic, ...)", ps, "summary_s"),
        row("perfsight: read + timeline + summary", ps, "total_s"),
        row("perfsight: re-open from the Parquet cache", ps, "reopen_s"),
        row("perfsight: peak RSS of the whole process", ps, "peak_rss_mib", "MiB"),
        row("floor: gzip + json.loads of the whole trace", floor, "total_s"),
        row("floor: peak RSS", floor, "peak_rss_mib", "MiB"),
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--markdown", action="store_true", help="print the bench/RESULTS.md section")
    args = parser.parse_args(argv)
    results = measure(args.trace, args.rounds)
    if args.markdown:
        print(markdown(args.trace, args.rounds, results))
    else:
        print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
