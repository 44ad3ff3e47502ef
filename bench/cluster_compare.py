"""Benchmark: ``perfsight cluster`` against ``msprof-analyze cluster -m all`` on the shared 2-rank torch_npu
jobs (text and .db exports of level1), the same files in one run: wall time and peak memory.

Each measurement is a fresh process on a fresh copy of the job (both tools write beside it: msprof-analyze
its cluster_analysis_output/, perfsight the same folder and its Parquet cache, so perfsight reads the raw files
every time); rounds interleave the tools A, B, A, B. Wall time is the whole process as the parent sees it;
peak memory the largest sum of RSS over the process tree, sampled every 10 ms (``msprof_analyze_compare.measure``:
msprof-analyze works in a process pool). msprof-analyze 26.2.0 runs from its own virtual environment
(``--peer-venv``, made with pip if missing).

    python bench/cluster_compare.py [--rounds 5] [--markdown]
"""
from __future__ import annotations

import os
import platform
import shutil
import statistics
import sys
from pathlib import Path

from msprof_analyze_compare import bench_main, ensure_peer, fresh_copy, measure  # bench/ siblings
from stats import load_average, median_cell

ROOT = Path(__file__).resolve().parents[1]
ASCEND = ROOT.parent / "shared" / "data" / "ascend" / "torch_npu"
JOBS = {"text level1": ASCEND / "text" / "level1", "db level1": ASCEND / "db" / "level1"}
PEER_VERSION = "26.2.0"
DEFAULT_VENV = Path("/tmp/msa")


def run_rounds(args) -> dict[str, list[dict]]:
    peer = ensure_peer(args.peer_venv, f"msprof-analyze=={PEER_VERSION}")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    results: dict[str, list[dict]] = {name: [] for name in JOBS}
    for index in range(args.rounds):
        for name, job in JOBS.items():
            record = {}
            for tool in (("perfsight", "peer") if index % 2 == 0 else ("peer", "perfsight")):
                copy = fresh_copy(job, args.scratch)
                argv = ([str(peer), "cluster", "-d", str(copy), "-m", "all"] if tool == "peer" else
                        [sys.executable, "-m", "perfsight", "cluster", "-d", str(copy)])
                record[tool] = measure(argv, env if tool == "perfsight" else dict(os.environ), args.timeout)
                record[tool]["files"] = sorted(p.name for p in (copy / "cluster_analysis_output").glob("*")
                                               if not p.name.startswith("."))
                shutil.rmtree(copy.parent, ignore_errors=True)
            if not args.quiet:
                print(f"round {index + 1} {name}: " + ", ".join(
                    f"{k} {v['wall_s']:.2f} s {v['peak_mib']:.0f} MiB {v['status']}" for k, v in record.items()),
                      file=sys.stderr)
            results[name].append(record)
    return results


def markdown(results: dict[str, list[dict]], args) -> str:
    def cell(rounds, key: str, field: str, unit: str, digits: int) -> str:
        return median_cell([r[key][field] for r in rounds if r[key]["status"] == "ok"], unit, digits)

    lines = [f"### shared torch_npu 2-rank jobs, {args.rounds} rounds (A, B interleaved)", "",
             "| job | tool | wall time, median (p10-p90) | peak memory of the process tree, median (p10-p90) | files |",
             "|---|---|---:|---:|---|"]
    paired = []
    for name, rounds in results.items():
        for key, label in (("peer", f"msprof-analyze {PEER_VERSION} `cluster -m all`"),
                           ("perfsight", "`perfsight cluster` (first open, no cache)")):
            files = ", ".join(rounds[-1][key]["files"])
            lines.append(f"| {name} | {label} | {cell(rounds, key, 'wall_s', 's', 2)} | "
                         f"{cell(rounds, key, 'peak_mib', 'MiB', 0)} | {files} |")
        ok = [r for r in rounds if r["peer"]["status"] == r["perfsight"]["status"] == "ok"]
        if ok:
            paired.append(f"{name}: msprof-analyze / perfsight wall time "
                          f"{statistics.median(r['peer']['wall_s'] / r['perfsight']['wall_s'] for r in ok):.1f}x, "
                          f"perfsight's peak memory "
                          f"{statistics.median(r['perfsight']['peak_mib'] / r['peer']['peak_mib'] for r in ok):.2f} "
                          "of msprof-analyze's")
    lines += ["", "Paired per round (medians): " + "; ".join(paired) + ".", "",
              f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, {platform.platform()}. "
              f"Load average at the end: {load_average()}."]
    return "\n".join(lines)


def main(argv=None) -> None:
    bench_main(__doc__, lambda parser: None, run_rounds, markdown, DEFAULT_VENV, argv)


if __name__ == "__main__":
    main()
