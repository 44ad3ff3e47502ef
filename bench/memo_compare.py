"""Benchmark: `perfsight export summary`, `perfsight analyse` and the insight pages before and after the
per-run result memo.

"Before" is perfsight at commit 6cca409 (extracted with `git archive` into a temporary folder, no worktree);
"after" is this checkout's src/. Each runs in fresh subprocesses (PYTHONPATH to its src) on its own copy of
the trace, whose Parquet cache is warmed first, so every timed run reads its tables from the cache and
what differs is the analysis. "insight pages" asks the web server (FastAPI's TestClient over a RunLibrary of
the copy's folder, once the run is parsed) for every page's routes once (``PAGES``). Rounds are interleaved
(before, after, after, before, ...; the order alternates) and each command's wall time inside the child
(from calling the CLI, or the first route, to the return; the interpreter's start and the imports left
out) is reported as the median and p10-p90 over the rounds, and as the median of the per-round ratio.

Counting: one more child per version and command wraps every analysis (a public function of a module of
``perfsight.analysis`` whose first parameter is ``tables``) with a counter, in every perfsight module that
holds a reference to it (tests/analysis_counts.py, which the tests use too; not the product), and reports how
often each was computed and with how many distinct arguments. The wrapper keeps the function's name
(``functools.wraps``), so after the memo it counts computations (what the memo does not find), before it
every call.

    .venv/bin/python bench/memo_compare.py [--rounds 7] [--trace PATH] [--before 6cca409] [--markdown]
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from stats import load_average, spread  # bench/stats.py (scripts here import their siblings)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "kineto" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
COMMANDS = ("export summary", "analyse", "insight pages")
#: how the results name each command
LABELS = {"export summary": "`perfsight export summary`", "analyse": "`perfsight analyse`",
          "insight pages": "insight: every page once"}
#: the insight API routes "insight pages" asks for, in order (every page of the web UI once, the timeline's tracks)
PAGES = ("overview", "steps", "operators", "operators?view=host", "operators/shapes?view=host&op_type=aten::mm",
         "dynamic", "flops", "data", "resources/host", "memory", "cluster", "cluster/communication", "timeline/tracks")

CHILD = r"""
import contextlib, io, json, resource, sys, time
from types import SimpleNamespace
import perfsight.cli
from tests.analysis_counts import count_analyses

command, trace, output, count, pages = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "count", sys.argv[5:]
calls = count_analyses(SimpleNamespace(setattr=setattr)) if count else {}
if command == "insight pages":             # the web server's routes, once the run is parsed (from its cache)
    from pathlib import Path
    from fastapi.testclient import TestClient
    from perfsight.views.insight.library import RunLibrary
    from perfsight.views.insight.server import create_app
    library = RunLibrary(Path(trace).parent)
    with TestClient(create_app(library), base_url="http://127.0.0.1") as client:
        while library.entries()[0]["status"] != "ready":
            assert library.entries()[0]["status"] != "error", library.entries()
            time.sleep(0.05)
        run_id = library.entries()[0]["id"]
        start = time.perf_counter()
        for page in pages:
            client.get(f"/api/runs/{run_id}/{page}").raise_for_status()
        seconds = time.perf_counter() - start
else:
    argv = (["export", "summary", "-dir", trace, "--output", output] if command == "export summary"
            else ["analyse", trace])
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = perfsight.cli.main(argv)
    seconds = time.perf_counter() - start
    assert code == 0, code
print(json.dumps({"seconds": seconds, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "counts": {name: [len(args), len(set(args))] for name, args in calls.items() if args}}))
"""


def child(src: Path, command: str, trace: Path, output: Path, *, count: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)])}   # ROOT: tests.analysis_counts
    env.pop("PERFSIGHT_FP_START", None), env.pop("PERFSIGHT_BP_END", None)
    done = subprocess.run([sys.executable, "-c", CHILD, command, str(trace), str(output), "count" if count else "time",
                           *PAGES], capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"{command} with {src} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def extract(commit: str, into: Path) -> Path:
    """``src/`` of ``commit`` under ``into`` (git archive: no worktree, no change to the repository)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "src"], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def measure(trace: Path, before: str, rounds: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="perfsight-memo-bench-") as tmp:
        tmp = Path(tmp)
        versions = {"before": extract(before, tmp / "before"), "after": ROOT / "src"}
        copies = {}
        for name in versions:                      # each version its own copy, so its own Parquet cache
            (tmp / name / "data").mkdir(parents=True, exist_ok=True)
            copies[name] = tmp / name / "data" / trace.name
            shutil.copy(trace, copies[name])
        output = tmp / "out"

        def run(name: str, command: str, *, count: bool = False) -> dict:
            result = child(versions[name], command, copies[name], output, count=count)
            shutil.rmtree(output, ignore_errors=True)
            return result

        for name in versions:                      # warm: the first open writes the cache
            run(name, "analyse")
        counts = {(name, command): run(name, command, count=True)["counts"]
                  for name in versions for command in COMMANDS}
        seconds: dict = {(name, command): [] for name in versions for command in COMMANDS}
        rss: dict = {(name, command): [] for name in versions for command in COMMANDS}
        load = load_average()
        started = time.perf_counter()
        for r in range(rounds):
            for command in COMMANDS:
                for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
                    result = run(name, command)
                    seconds[(name, command)].append(result["seconds"])
                    rss[(name, command)].append(result["peak_rss_mib"])
        return {"counts": counts, "seconds": seconds, "rss": rss, "load": (load, load_average()),
                "wall_s": time.perf_counter() - started}


def markdown(trace: Path, before: str, rounds: int, results: dict) -> str:
    lines = [f"Trace: `{trace.name}` ({trace.stat().st_size / 1e6:.1f} MB on disk). Before: perfsight at {before}; "
             f"after: this branch. {rounds} rounds, interleaved; the Parquet cache warm. Wall time of the command "
             "inside a fresh process (imports excluded), median and p10-p90 over the rounds, and the process's "
             "median peak RSS:", "",
             "| command | before s | p10-p90 | after s | p10-p90 | after / before, paired [p10-p90] "
             "| peak RSS MiB before / after |", "|---|---:|---:|---:|---:|---:|---:|"]
    for command in COMMANDS:
        before, after = results["seconds"][("before", command)], results["seconds"][("after", command)]
        b, a, ratio = spread(before), spread(after), spread([y / x for x, y in zip(before, after)])
        rss = [statistics.median(results["rss"][(v, command)]) for v in ("before", "after")]
        lines.append(f"| {LABELS[command]} | {b[0]:.2f} | {b[1]:.2f}-{b[2]:.2f} | {a[0]:.2f} | "
                     f"{a[1]:.2f}-{a[2]:.2f} | {ratio[0]:.2f} [{ratio[1]:.2f}-{ratio[2]:.2f}] "
                     f"| {rss[0]:.0f} / {rss[1]:.0f} |")
    lines += ["", "How often each analysis was computed (before: every call; after: the memo's misses), and in "
              "brackets for how many distinct argument sets (defaults applied):", "",
              "| analysis | " + " | ".join(f"{c} before | {c} after" for c in COMMANDS) + " |",
              "|---|" + "---:|" * (2 * len(COMMANDS))]
    names = sorted({n for counts in results["counts"].values() for n in counts})
    for n in names:
        cells = []
        for c in COMMANDS:
            for v in ("before", "after"):
                calls, distinct = results["counts"][(v, c)].get(n, (0, 0))
                cells.append(f"{calls} ({distinct})" if calls else "-")
        lines.append(f"| `{n}` | " + " | ".join(cells) + " |")
    lines += ["", f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
              f"{platform.python_version()}. Load average before / after: {results['load'][0]} / {results['load'][1]}. "
              f"Timed rounds took {results['wall_s']:.0f} s."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--before", default="6cca409", help="the commit measured as 'before'")
    parser.add_argument("--markdown", action="store_true", help="print the RESULTS.md section")
    args = parser.parse_args()
    results = measure(args.trace, args.before, args.rounds)
    if args.markdown:
        print(markdown(args.trace, args.before, args.rounds, results))
    else:
        print(json.dumps({key: {f"{v} {c}": x for (v, c), x in results[key].items()}
                          for key in ("counts", "seconds", "rss")}, indent=1))


if __name__ == "__main__":
    main()
