"""perfsight's critical path against Holistic Trace Analysis' critical path analysis (HTA 0.6.1, ``traceinsight`` on
PyPI, in its own venv: ``hta_compare.ensure_peer``). Two jobs:

* ``reference``: HTA's ``critical_path_analysis`` on the shared traces it supports (``CASES``: its own
  critical_path folder's traces and the largest shared trace), written to
  ``tests/data/hta_critical_path/<case>.json``: the window HTA chose (rank, annotation, instance), its path's
  first and last node times and summed weight (us), the weight by ``bound_by`` and by edge ``type``, and every
  edge of the path (type, duration, event name, stream): the recorded answers
  tests/analysis/test_critical_path_hta.py checks perfsight's path against.
* ``speed``: the critical path of one step of the largest shared trace (HTA's df_index_resolver, 53.7 MB),
  each tool in a fresh process on a fresh folder holding a link to the trace: perfsight's
  ``perfsight.open(DIR).critical_path_breakdown(step=...)`` (first run: no cache; then the re-run, its Parquet
  cache present) and HTA's ``TraceAnalysis`` + ``critical_path_analysis`` on the same ProfilerStep. Rounds
  interleave the tools (``peer_rounds.interleaved``); wall time of the whole process, time after imports and
  peak RSS.

    PYTHONPATH=src python bench/critical_path_peer.py reference
    PYTHONPATH=src python bench/critical_path_peer.py speed [--rounds 5] [--markdown]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from hta_compare import DEFAULT_TRACE, DEFAULT_VENV, ensure_peer, peer_env, peer_python
from peer_rounds import interleaved, table

ROOT = Path(__file__).resolve().parents[1]
HTA_TRACES = ROOT.parent / "shared" / "data" / "kineto" / "hta"
REFERENCE = ROOT / "tests" / "data" / "hta_critical_path"
ALEXNET_MEASURE = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"

#: case name -> (trace folder under HTA_TRACES, rank, annotation ("" the whole trace), instance)
CASES = {
    "alexnet": ("critical_path/alexnet", 0, ALEXNET_MEASURE, 1),
    "simple_add": ("critical_path/simple_add", 0, ALEXNET_MEASURE, 1),
    "event_sync": ("critical_path/cuda_event_sync", 0, "ProfilerStep", 0),
    "event_sync_multi_stream": ("critical_path/cuda_event_sync_multi_stream", 0, "", 0),
    "df_index_resolver": ("df_index_resolver", 1, "ProfilerStep", 0),
}
#: the step of df_index_resolver the speed job analyses (HTA's ProfilerStep instance 0 is ProfilerStep#2)
SPEED_STEP, SPEED_RANK = 2, 1

HTA_REFERENCE = r"""
import json, logging, sys, warnings
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
folder, rank, annotation, instance, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
graph, ok = TraceAnalysis(trace_dir=folder).critical_path_analysis(rank=rank, annotation=annotation,
                                                                     instance_id=instance)
edges = graph.get_critical_path_breakdown()
nodes = graph.critical_path_nodes
with open(out, "w") as file:
    json.dump({"rank": rank, "annotation": annotation, "instance": instance, "ok": bool(ok),
               "first_us": int(graph.node_list[nodes[0]].ts), "last_us": int(graph.node_list[nodes[-1]].ts),
               "weight_us": int(edges.duration.sum()),
               "bound_by_us": {k or "(dependency)": int(v)
                               for k, v in edges.groupby("bound_by").duration.sum().items()},
               "type_us": {k: int(v) for k, v in edges.groupby("type").duration.sum().items()},
               "device_edges": sorted(({"type": t, "duration_us": int(d), "name": None if n != n else str(n),
                                 "stream": None if s != s else int(s)}
                                for t, d, n, s in zip(edges.type, edges.duration, edges.s_name, edges.stream)
                                if s == s and s >= 0),
                               key=lambda e: (e["type"], e["name"] or "", e["duration_us"]))},
              file, indent=1, sort_keys=True)
"""

PERFSIGHT_CHILD = r"""
import json, resource, sys, time
began = time.perf_counter()
import perfsight
from perfsight.ingest import cache
imported = time.perf_counter()
run = perfsight.open(sys.argv[1])
breakdown = run.critical_path_breakdown(step=int(sys.argv[2]), rank=int(sys.argv[3]))
cache.wait()
done = time.perf_counter()
print(json.dumps({"import_s": imported - began, "work_s": done - imported,
                  "path_ms": breakdown["path_ns"][0].as_py() / 1e6,
                  "self_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

HTA_CHILD = r"""
import json, logging, resource, sys, time, warnings
began = time.perf_counter()
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
imported = time.perf_counter()
graph, ok = TraceAnalysis(trace_dir=sys.argv[1]).critical_path_analysis(rank=int(sys.argv[2]),
                                                                         annotation="ProfilerStep", instance_id=0)
edges = graph.get_critical_path_breakdown()
done = time.perf_counter()
print(json.dumps({"import_s": imported - began, "work_s": done - imported, "ok": bool(ok),
                  "path_ms": float(edges.duration.sum()) / 1e3,
                  "self_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def reference(args) -> None:
    ensure_peer(args.peer_venv, quiet=False)
    REFERENCE.mkdir(parents=True, exist_ok=True)
    for case, (folder, rank, annotation, instance) in CASES.items():
        out = REFERENCE / f"{case}.json"
        subprocess.run([str(peer_python(args.peer_venv)), "-c", HTA_REFERENCE, str(HTA_TRACES / folder), str(rank),
                        annotation, str(instance), str(out)], check=True, env=peer_env())
        print(f"wrote {out}")


def speed(args) -> list[dict]:
    versions = ensure_peer(args.peer_venv, quiet=True)
    rounds = interleaved(args.rounds, args.scratch, [args.trace], PERFSIGHT_CHILD, HTA_CHILD, args.peer_venv,
                         extra=(str(SPEED_STEP), str(SPEED_RANK)), hta_extra=(str(SPEED_RANK),))
    if args.markdown:
        size = args.trace.stat().st_size / 2**20
        print(table(rounds, f"{args.trace.name} ({size:.1f} MiB gzip), rank {SPEED_RANK}, ProfilerStep#{SPEED_STEP}; "
                            f"HTA {versions.get('traceinsight')} (pandas {versions.get('pandas')})",
                    "HTA critical_path_analysis"))
    return rounds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("job", choices=("reference", "speed"))
    parser.add_argument("--peer-venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()) / "perfsight-critical-path-bench")
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
