"""Benchmark: the cluster step-trace and communication summary of a real Ascend job, perfsight against
msprof-analyze, on the same files in one run; wall time and peak memory.

Input: the torch_npu text export of a 2-rank job (../shared/data/ascend/torch_npu/text/level1 by default),
copied afresh into a scratch folder for every measurement (both tools write beside it: msprof-analyze its
cluster_analysis_output/, perfsight its Parquet cache).

- msprof-analyze (PyPI ``msprof-analyze``, in its own virtual environment, ``--peer-venv``, made if missing):
  ``msprof-analyze cluster -d COPY -m all``: parses every rank, writes cluster_step_trace_time.csv,
  the communication summaries and matrix (and its other cluster outputs).
- perfsight, first open (no cache): ``perfsight.open(COPY)`` (both ranks, one job), then per-rank step
  overlap (``breakdown.overlap``: computing, communication, overlapped, free per step), the per-rank step
  breakdown (``cluster.rank_breakdown``), the collective summary and the communication matrix, each written
  as CSV; and a re-open in a second process, the cache now present.

Each measurement is a fresh process; rounds interleave the tools. Wall time is the whole process as the
parent sees it. Peak memory is the largest sum of RSS over the process and all its descendants, sampled
every 10 ms with psutil (msprof-analyze works in a process pool, so one process's ru_maxrss would
understate it).

    python bench/msprof_analyze_compare.py [--rounds 5] [--markdown]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from stats import load_average, median_cell  # bench/stats.py (scripts here import their siblings)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JOB = ROOT.parent / "shared" / "data" / "ascend" / "torch_npu" / "text" / "level1"
DEFAULT_VENV = Path(tempfile.gettempdir()) / "perfsight-bench-msprof-venv"

PERFSIGHT_CHILD = r"""
import sys, time
from pathlib import Path
import perfsight
from perfsight.analysis.breakdown import overlap
from perfsight.analysis.cluster import rank_breakdown
from perfsight.analysis.collectives import collective_summary, communication_matrix
import pyarrow.csv as csv
job, out = Path(sys.argv[1]), Path(sys.argv[2])
run = perfsight.open(job)
out.mkdir(parents=True, exist_ok=True)
for name, table in (("step_overlap", overlap(run.tables)), ("rank_breakdown", rank_breakdown(run.tables)),
                    ("collectives", collective_summary(run.tables)),
                    ("communication_matrix", communication_matrix(run.tables))):
    csv.write_csv(table, out / f"{name}.csv")
print(run.ranks)
"""


def measure(argv: list[str], env: dict, timeout_s: float) -> dict:
    """Run ``argv``; wall time, the peak RSS summed over the process tree (``peak_mib``), of the process itself
    (``root_peak_mib``) and of its largest child (``child_peak_mib``), sampled by psutil every 10 ms."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    root, peak, root_peak, child_peak = psutil.Process(child.pid), 0, 0, 0
    while child.poll() is None:
        try:
            sizes = {p.pid: p.memory_info().rss for p in [root, *root.children(recursive=True)] if p.is_running()}
            peak = max(peak, sum(sizes.values()))
            root_peak = max(root_peak, sizes.get(root.pid, 0))
            child_peak = max([child_peak, *(rss for pid, rss in sizes.items() if pid != root.pid)])
        except psutil.Error:
            pass
        if time.perf_counter() - start > timeout_s:
            child.kill()
        time.sleep(0.01)
    wall = time.perf_counter() - start
    out, err = child.communicate()
    status = "ok" if child.returncode == 0 else f"failed ({child.returncode}): {err.strip()[-300:]}"
    return {"wall_s": wall, "peak_mib": peak / 2**20, "root_peak_mib": root_peak / 2**20,
            "child_peak_mib": child_peak / 2**20, "status": status, "stdout": out.strip()[-200:]}


def ensure_peer(venv: Path, requirement: str = "msprof-analyze") -> Path:
    """msprof-analyze's executable in ``venv``, made with ``pip install requirement`` when missing."""
    exe = venv / "bin" / "msprof-analyze"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", requirement], check=True)
    return exe


def fresh_copy(job: Path, scratch: Path) -> Path:
    target = Path(tempfile.mkdtemp(dir=scratch)) / job.name
    shutil.copytree(job, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)       # the samples are read-only
    return target


def run_rounds(args) -> list[dict]:
    peer = ensure_peer(args.peer_venv)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    rounds = []
    for index in range(args.rounds):
        record = {}
        order = ("perfsight", "peer") if index % 2 == 0 else ("peer", "perfsight")
        for tool in order:
            copy = fresh_copy(args.job, args.scratch)
            if tool == "peer":
                record["peer"] = measure([str(peer), "cluster", "-d", str(copy), "-m", "all"], dict(os.environ),
                                         args.timeout)
            else:
                argv = [sys.executable, "-c", PERFSIGHT_CHILD, str(copy), str(copy.parent / "perfsight_out")]
                record["perfsight_first"] = measure(argv, env, args.timeout)
                record["perfsight_reopen"] = measure(argv, env, args.timeout)
            shutil.rmtree(copy.parent, ignore_errors=True)
        if not args.quiet:
            print(f"round {index + 1}: " + ", ".join(f"{k} {v['wall_s']:.2f} s {v['peak_mib']:.0f} MiB {v['status']}"
                                                   for k, v in record.items()), file=sys.stderr)
        rounds.append(record)
    return rounds


def markdown(rounds: list[dict], args) -> str:
    def cell(key: str, field: str, unit: str, digits: int) -> str:
        return median_cell([r[key][field] for r in rounds if r[key]["status"] == "ok"], unit, digits)

    ok = [r for r in rounds if r["peer"]["status"] == r["perfsight_first"]["status"] == "ok"]
    speedup = [r["peer"]["wall_s"] / r["perfsight_first"]["wall_s"] for r in ok]
    memory = [r["perfsight_first"]["peak_mib"] / r["peer"]["peak_mib"] for r in ok]
    lines = [
        f"### {args.job.relative_to(ROOT.parent) if args.job.is_relative_to(ROOT.parent) else args.job}, "
        f"{len(rounds)} rounds",
        "",
        "| measurement | wall time, median (p10-p90) | peak memory of the process tree, median (p10-p90) |",
        "|---|---:|---:|",
        f"| msprof-analyze `cluster -m all` | {cell('peer', 'wall_s', 's', 2)} | "
        f"{cell('peer', 'peak_mib', 'MiB', 0)} |",
        f"| perfsight, first open + step overlap, rank breakdown, collectives, matrix (CSV) | "
        f"{cell('perfsight_first', 'wall_s', 's', 2)} | {cell('perfsight_first', 'peak_mib', 'MiB', 0)} |",
        f"| perfsight, the same from its cache | {cell('perfsight_reopen', 'wall_s', 's', 2)} | "
        f"{cell('perfsight_reopen', 'peak_mib', 'MiB', 0)} |",
        "",
        f"Paired per round: msprof-analyze / perfsight first open = "
        f"{statistics.median(speedup):.1f}x faster (min {min(speedup):.1f}x); perfsight's peak memory is "
        f"{statistics.median(memory):.2f} of msprof-analyze's." if ok else "No round where both tools succeeded.",
        "",
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, {platform.platform()}. "
        f"Load average at the end: {load_average()}.",
    ]
    return "\n".join(lines)


def bench_main(doc: str, add_arguments, run, report, default_venv: Path, argv=None) -> None:
    """A peer benchmark's command line: ``add_arguments(parser)`` adds its own options, ``run(args)`` measures,
    ``report(results, args)`` makes the RESULTS.md section (--markdown); the raw results go to --json."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--peer-venv", type=Path, default=default_venv)
    parser.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--timeout", type=float, default=600.0, help="per process, seconds")
    parser.add_argument("--markdown", action="store_true", help="print the bench/RESULTS.md section")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    results = run(args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.markdown:
        print(report(results, args))


def main(argv=None) -> None:
    bench_main(__doc__, lambda parser: parser.add_argument(
        "--job", type=Path, default=DEFAULT_JOB, help="a torch_npu job folder (one dir per rank)"),
               run_rounds, markdown, DEFAULT_VENV, argv)


if __name__ == "__main__":
    main()
