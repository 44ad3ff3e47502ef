"""Benchmark: ``perfsight cluster`` (map-reduce over ranks) at scale, on jobs made by ``jobgen.py``.

Three measurements, each a fresh ``perfsight cluster`` process as a user runs it (wall time as the parent sees
it; peak RSS sampled every 10 ms: of the driver process alone, of its largest worker, and summed over the tree,
``msprof_analyze_compare.measure``):

* ``scale``: the GPU job (about 8.6 MB of Kineto JSON per rank) at each ``--ranks`` count with each
  ``--workers`` count, first analysis (no summaries stored, no run cache: both removed before each round,
  perfsight's own folders only), then the re-run after one rank's file changed (one rank read again).
  Rounds interleave the worker counts.
* ``peer``: the generated torch_npu job at each ``--peer-ranks`` count, ``perfsight cluster`` (each rank read
  whole, and read light: ``--light``, the files msprof-analyze reads) against msprof-analyze 26.2.0
  ``cluster -m all`` on fresh copies, interleaved (the order rotates each round).
* ``ray``: the GPU job at ``--ray-ranks`` ranks on a local two-node Ray cluster (``ray start --head`` plus a
  second ``ray start --address``, one CPU each, started and stopped here) against the local pool of 2
  workers, interleaved.

    python bench/cluster_scale.py scale [--ranks 8,64,256,1024] [--workers 1,2] [--rounds 1] [--lean]
    python bench/cluster_scale.py peer [--peer-ranks 64,256] [--rounds 3]
    python bench/cluster_scale.py ray [--ray-ranks 256] [--rounds 2]

Jobs are generated once into ``--scratch`` (default /tmp/perfsight-cluster-bench) and kept for the rounds.
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
import time
from pathlib import Path

from jobgen import generate  # bench/ siblings
from msprof_analyze_compare import ensure_peer, fresh_copy, measure
from stats import load_average, median_cell

ROOT = Path(__file__).resolve().parents[1]
PEER_VERSION = "26.2.0"
RAY_PORT = 6391
#: Ray 2.60 turns token authentication on for a head that finds ~/.ray/auth_token, and a second node (or a
#: driver) without the token cannot join: the local cluster here runs without it (README's command pair)
RAY_ENV = {"RAY_AUTH_MODE": "disabled"}
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
TIMEOUT_S = 3600.0
#: the tools of ``peer``, in the first round's order
PEER_TOOLS = ("perfsight", "light", "peer")


def job(kind: str, ranks: int, scratch: Path, lean: bool = False) -> Path:
    """The generated job of ``kind`` and ``ranks`` in ``scratch`` (made once); ``lean``: the GPU job's device
    events and steps only (``jobgen.py --lean``)."""
    folder = scratch / f"{kind}{ranks}{'-lean' if lean else ''}"
    if not (folder / "answers.json").exists():
        shutil.rmtree(folder, ignore_errors=True)
        began = time.perf_counter()
        generate(kind, ranks, folder, workers=2, lean=lean)
        print(f"generated {folder} in {time.perf_counter() - began:.0f} s", file=sys.stderr)
    return folder


def forget(folder: Path, output: Path) -> None:
    """Remove what perfsight stored for the job: its summaries in ``output`` and every rank's run cache (only
    folders perfsight proves it wrote: ``ingest.cache.clear``)."""
    sys.path.insert(0, str(ROOT / "src"))
    from perfsight.ingest import cache, find_runs

    shutil.rmtree(output, ignore_errors=True)
    for run in find_runs(folder):
        cache.clear(run.cache_dir)


def cluster(folder: Path, output: Path, *options: str) -> dict:
    return measure([sys.executable, "-m", "perfsight", "cluster", "-d", str(folder), "-o", str(output), *options],
                   {**ENV, **RAY_ENV}, TIMEOUT_S)


def touch_one_rank(folder: Path) -> None:
    """Change rank 1's file (one byte more: a new size, so a new fingerprint; the same trace)."""
    trace = folder / "rank1.pt.trace.json"
    with open(trace, "a", encoding="utf-8") as file:
        file.write(" ")


def run_scale(args) -> list[dict]:
    rows = []
    for ranks in args.ranks:
        folder = job("gpu", ranks, args.scratch, args.lean)
        for index in range(args.rounds):
            for workers in (args.workers if index % 2 == 0 else list(reversed(args.workers))):
                output = args.scratch / f"out-gpu{ranks}-{workers}"
                forget(folder, output)
                first = cluster(folder, output, "--workers", str(workers))
                touch_one_rank(folder)
                again = cluster(folder, output, "--workers", str(workers))
                rows.append({"ranks": ranks, "workers": workers, "first": first, "again": again})
                print(f"gpu {ranks} ranks, {workers} workers: {first['wall_s']:.1f} s (driver "
                      f"{first['root_peak_mib']:.0f} MiB, worker {first['child_peak_mib']:.0f} MiB, "
                      f"{first['status']}); one rank changed: {again['wall_s']:.1f} s", file=sys.stderr)
    return rows


def run_peer(args) -> list[dict]:
    peer = ensure_peer(args.peer_venv, f"msprof-analyze=={PEER_VERSION}")
    rows = []
    for ranks in args.peer_ranks:
        folder = job("npu", ranks, args.scratch)
        for index in range(args.rounds):
            record = {"ranks": ranks}
            for tool in PEER_TOOLS[index % 3:] + PEER_TOOLS[:index % 3]:
                copy = fresh_copy(folder, args.scratch)
                perfsight = [sys.executable, "-m", "perfsight", "cluster", "-d", str(copy), "--workers", "2"]
                argv = {"peer": [str(peer), "cluster", "-d", str(copy), "-m", "all"], "perfsight": perfsight,
                        "light": [*perfsight, "--light"]}[tool]
                record[tool] = measure(argv, dict(os.environ) if tool == "peer" else ENV, TIMEOUT_S)
                shutil.rmtree(copy.parent, ignore_errors=True)
            rows.append(record)
            print(f"npu {ranks} ranks: " + ", ".join(f"{k} {v['wall_s']:.1f} s {v['peak_mib']:.0f} MiB {v['status']}"
                                                      for k, v in record.items() if k != "ranks"), file=sys.stderr)
    return rows


def _ray(*argv: str, temp: Path) -> None:
    done = subprocess.run(["ray", *argv], capture_output=True, text=True,
                          env={**os.environ, **RAY_ENV, "RAY_TMPDIR": str(temp)})
    if done.returncode:
        raise RuntimeError(f"ray {' '.join(argv)}: {done.stdout[-500:]} {done.stderr[-500:]}")


def run_ray(args) -> list[dict]:
    ray_bin = Path(sys.executable).parent
    os.environ["PATH"] = f"{ray_bin}{os.pathsep}{os.environ['PATH']}"
    temp = args.scratch / "ray"
    temp.mkdir(parents=True, exist_ok=True)
    address = f"127.0.0.1:{RAY_PORT}"
    _ray("start", "--head", f"--port={RAY_PORT}", "--num-cpus=1", "--include-dashboard=false",
         f"--temp-dir={temp}", temp=temp)
    rows = []
    try:
        _ray("start", f"--address={address}", "--num-cpus=1", temp=temp)
        for ranks in args.ray_ranks:
            folder = job("gpu", ranks, args.scratch, args.lean)
            for index in range(args.rounds):
                record = {"ranks": ranks}
                for engine in (("pool", "ray") if index % 2 == 0 else ("ray", "pool")):
                    output = args.scratch / f"out-ray-{engine}"
                    forget(folder, output)
                    options = ("--ray", address) if engine == "ray" else ("--workers", "2")
                    record[engine] = cluster(folder, output, *options)
                rows.append(record)
                print(f"gpu {ranks} ranks: " + ", ".join(f"{k} {v['wall_s']:.1f} s {v['status']}"
                                                          for k, v in record.items() if k != "ranks"), file=sys.stderr)
    finally:
        subprocess.run(["ray", "stop", "--force"], capture_output=True)
    return rows


def markdown(kind: str, rows: list[dict], args) -> str:
    lines = []
    if kind == "scale":
        lines += ["| ranks | workers | wall time | ranks/s per core | driver peak RSS | largest worker peak RSS | "
                  "re-run, one rank changed |", "|---:|---:|---:|---:|---:|---:|---:|"]
        for ranks in args.ranks:
            for workers in args.workers:
                mine = [r for r in rows
                        if r["ranks"] == ranks and r["workers"] == workers and r["first"]["status"] == "ok"]
                walls = [r["first"]["wall_s"] for r in mine]
                lines.append(f"| {ranks:,} | {workers} | {median_cell(walls, 's', 1)} | "
                             f"{ranks / statistics.median(walls) / workers:.2f} | "
                             f"{median_cell([r['first']['root_peak_mib'] for r in mine], 'MiB', 0)} | "
                             f"{median_cell([r['first']['child_peak_mib'] for r in mine], 'MiB', 0)} | "
                             f"{median_cell([r['again']['wall_s'] for r in mine], 's', 1)} |" if walls else
                             f"| {ranks:,} | {workers} | failed | | | | |")
    elif kind == "peer":
        lines += [f"| ranks | msprof-analyze {PEER_VERSION} `cluster -m all` | perfsight | wall time, memory "
                  "(process tree) | speed-up | perfsight's memory / msprof-analyze's |",
                  "|---:|---:|---|---:|---:|---:|"]
        for ranks in args.peer_ranks:
            for tool, label in (("perfsight", "`--workers 2` (whole)"), ("light", "`--workers 2 --light`")):
                ok = [r for r in rows if r["ranks"] == ranks and r["peer"]["status"] == r[tool]["status"] == "ok"]
                if not ok:
                    lines.append(f"| {ranks} | failed | {label} | failed | | |")
                    continue
                lines.append(
                    f"| {ranks} | {median_cell([r['peer']['wall_s'] for r in ok], 's', 1)}, "
                    f"{median_cell([r['peer']['peak_mib'] for r in ok], 'MiB', 0)} | {label} | "
                    f"{median_cell([r[tool]['wall_s'] for r in ok], 's', 1)}, "
                    f"{median_cell([r[tool]['peak_mib'] for r in ok], 'MiB', 0)} | "
                    f"{statistics.median(r['peer']['wall_s'] / r[tool]['wall_s'] for r in ok):.1f}x | "
                    f"{statistics.median(r[tool]['peak_mib'] / r['peer']['peak_mib'] for r in ok):.2f} |")
    else:
        lines += ["| ranks | local pool, 2 workers | Ray, two local nodes of 1 CPU | Ray's overhead |",
                  "|---:|---:|---:|---:|"]
        for ranks in args.ray_ranks:
            ok = [r for r in rows if r["ranks"] == ranks and r["pool"]["status"] == r["ray"]["status"] == "ok"]
            if ok:
                pool, ray = ([r[k]["wall_s"] for r in ok] for k in ("pool", "ray"))
                lines.append(f"| {ranks} | {median_cell(pool, 's', 1)} | {median_cell(ray, 's', 1)} | "
                             f"{statistics.median(r['ray']['wall_s'] / r['pool']['wall_s'] for r in ok):.2f}x |")
    lines += ["", f"{args.rounds} round(s); machine: {os.cpu_count()} cores, Python {platform.python_version()}; "
              f"load average at the end: {load_average()}."]
    return "\n".join(lines)


def _counts(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=("scale", "peer", "ray"))
    parser.add_argument("--ranks", type=_counts, default=[8, 64, 256, 1024])
    parser.add_argument("--workers", type=_counts, default=[1, 2])
    parser.add_argument("--peer-ranks", type=_counts, default=[64, 256])
    parser.add_argument("--ray-ranks", type=_counts, default=[256])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--lean", action="store_true", help="scale, ray: the lean GPU job (device events and steps)")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/perfsight-cluster-bench"))
    parser.add_argument("--peer-venv", type=Path, default=Path("/tmp/msa"))
    parser.add_argument("--json", type=Path, help="also write the raw measurements here")
    args = parser.parse_args(argv)
    args.scratch.mkdir(parents=True, exist_ok=True)
    rows = {"scale": run_scale, "peer": run_peer, "ray": run_ray}[args.kind](args)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(markdown(args.kind, rows, args))


if __name__ == "__main__":
    main()
