"""perfsight compare against Holistic Trace Analysis' TraceDiff (HTA 0.6.1, ``traceinsight`` on PyPI, in its own
venv: ``hta_compare.ensure_peer``). Two jobs:

* ``reference``: HTA's ``TraceDiff.compare_traces`` on HTA's own trace_diff pair (../shared/data/kineto/hta/
  trace_diff: control vs test), every iteration, CPU operators and GPU kernels apart, written to
  ``tests/data/hta_trace_diff/{cpu,gpu}.csv`` (name, control and test counts and total duration in us): the
  recorded answers tests/analysis/test_compare_hta.py checks perfsight's per-operator figures against.
* ``speed``: comparing two 54 MB traces (HTA's df_index_resolver, the largest shared trace, against a copy
  whose kernels last 5% longer, made once in ``--scratch``), each tool in a fresh process on fresh folders
  holding links to the two traces: perfsight's ``perfsight.compare(BASE, NEW)`` with its steps, operators
  and kernels (first run: no cache; then the re-run, its Parquet caches present), HTA's two
  ``LabeledTrace`` and ``compare_traces`` over every iteration. Rounds interleave the tools (perfsight, HTA,
  then HTA, perfsight, ...); wall time of the whole process and its peak RSS (``hta_compare.run_child``).

    PYTHONPATH=src python bench/compare_peer.py reference
    PYTHONPATH=src python bench/compare_peer.py speed [--rounds 5] [--markdown]
"""
from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import tempfile
from pathlib import Path

from hta_compare import DEFAULT_TRACE, DEFAULT_VENV, ensure_peer, peer_env, peer_python
from peer_rounds import interleaved, table

ROOT = Path(__file__).resolve().parents[1]
TRACE_DIFF = ROOT.parent / "shared" / "data" / "kineto" / "hta" / "trace_diff"
REFERENCE = ROOT / "tests" / "data" / "hta_trace_diff"
#: how much longer NEW's kernels last than BASE's in the speed pair
KERNEL_FACTOR = 1.05

HTA_REFERENCE = r"""
import sys, warnings
warnings.simplefilter("ignore")
from hta.trace_diff import DeviceType, LabeledTrace, TraceDiff
control, test = LabeledTrace("control", trace_dir=sys.argv[1]), LabeledTrace("test", trace_dir=sys.argv[2])
out = sys.argv[3]
for device in (DeviceType.CPU, DeviceType.GPU):
    table = TraceDiff.compare_traces(control, test, control_iteration=control.iterations(),
                                     test_iteration=test.iterations(), device_type=device)
    table[["control_counts", "control_total_duration", "test_counts", "test_total_duration"]].sort_index().to_csv(
        f"{out}/{device.name.lower()}.csv")
"""

PERFSIGHT_CHILD = r"""
import json, resource, sys, time
began = time.perf_counter()
import perfsight
from perfsight import comparison
from perfsight.ingest import cache
imported = time.perf_counter()
result = perfsight.compare(sys.argv[1], sys.argv[2])
steps, operators, kernels = result.steps(), result.operators(), result.kernels()
cache.wait()
done = time.perf_counter()
print(json.dumps({"import_s": imported - began, "work_s": done - imported, "verdict": steps["verdict"][0].as_py(),
                  "operators": operators.num_rows, "kernels": kernels.num_rows,
                  "self_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

HTA_CHILD = r"""
import json, resource, sys, time, warnings
began = time.perf_counter()
warnings.simplefilter("ignore")
from hta.trace_diff import DeviceType, LabeledTrace, TraceDiff
imported = time.perf_counter()
control, test = LabeledTrace("control", trace_dir=sys.argv[1]), LabeledTrace("test", trace_dir=sys.argv[2])
table = TraceDiff.compare_traces(control, test, control_iteration=control.iterations(),
                                 test_iteration=test.iterations(), device_type=DeviceType.ALL)
done = time.perf_counter()
print(json.dumps({"import_s": imported - began, "work_s": done - imported, "rows": len(table),
                  "self_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def reference(args) -> None:
    ensure_peer(args.peer_venv, quiet=False)
    REFERENCE.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(peer_python(args.peer_venv)), "-c", HTA_REFERENCE, str(TRACE_DIFF / "control"),
                    str(TRACE_DIFF / "test"), str(REFERENCE)], check=True, env=peer_env())
    print(f"wrote {', '.join(str(path) for path in sorted(REFERENCE.glob('*.csv')))}")


def slower_copy(trace: Path, scratch: Path) -> Path:
    """``trace`` with every kernel ``KERNEL_FACTOR`` times longer, in ``scratch`` (made once)."""
    target = scratch / f"slower_{trace.name}"
    if not target.exists():
        with gzip.open(trace, "rt") as file:
            document = json.load(file)
        for event in document["traceEvents"]:
            if event.get("cat") == "kernel" and "dur" in event:
                event["dur"] = round(event["dur"] * KERNEL_FACTOR, 3)
        with gzip.open(target, "wt") as file:
            json.dump(document, file)
    return target


def speed(args) -> list[dict]:
    versions = ensure_peer(args.peer_venv, quiet=True)
    args.scratch.mkdir(parents=True, exist_ok=True)
    base, new = args.trace, slower_copy(args.trace, args.scratch)
    rounds = interleaved(args.rounds, args.scratch, [base, new], PERFSIGHT_CHILD, HTA_CHILD, args.peer_venv)
    if args.markdown:
        size = base.stat().st_size / 2**20
        print(table(rounds, f"BASE {base.name} ({size:.1f} MiB gzip), NEW the same with every kernel "
                            f"{KERNEL_FACTOR:g}x longer; HTA {versions.get('traceinsight')} (pandas "
                            f"{versions.get('pandas')})", "HTA TraceDiff"))
    return rounds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("job", choices=("reference", "speed"))
    parser.add_argument("--peer-venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()) / "perfsight-compare-bench")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the raw measurements here")
    args = parser.parse_args(argv)
    if args.job == "reference":
        reference(args)
    else:
        rounds = speed(args)
        if args.json:
            args.json.write_text(json.dumps(rounds, indent=1))


if __name__ == "__main__":
    main()
