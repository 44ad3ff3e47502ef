"""Check by hand that msprof-analyze reads a generated torch_npu job (bench/jobgen.py) and that its outputs
agree with the planted answers: the peer tool needs its own virtual environment, so this is a bench script,
not a test.

Generates an N-rank npu job (default 8 ranks, 4 per node) into a scratch folder, runs msprof-analyze 26.2.0
``cluster -d JOB -m all`` (``--peer-venv``, made with pip when missing: ``msprof_analyze_compare.ensure_peer``)
and compares its cluster_analysis_output/ with answers.json:

* communication_group.json: the collective rank sets are the answers' groups;
* cluster_step_trace_time.csv: one row per rank;
* cluster_communication.json: per op, each rank's ``Wait Time(ms)``: in a group holding the slow rank, the
  slow rank waits 0 and every other member longer than the jitter bound; in the other groups, every wait is
  under the jitter bound;
* cluster_communication_matrix.json: the slow link's ``-total`` bandwidth is the planted one, the other
  links of its transport the others'.

Prints one JSON object (the checks, each true or false, and the figures behind them); exits 1 when a
check fails.

    python bench/jobgen_msprof_check.py [--ranks 8] [--ranks-per-node 4] [--seed 0] [--peer-venv /tmp/msa] [--keep]
"""
from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jobgen  # bench/ siblings
from msprof_analyze_compare import ensure_peer

PEER = "msprof-analyze==26.2.0"


def _waits(communication: dict) -> dict[str, list[dict[int, float]]]:
    """Group hash -> per op, rank -> its ``Wait Time(ms)``, from cluster_communication.json."""
    waits: dict[str, list[dict[int, float]]] = {}
    for steps in communication.values():
        for ops in steps.values():
            for op, ranks in ops.items():
                if not op.startswith("Total Op Info@"):
                    waits.setdefault(op.split("@")[1], []).append(
                        {int(rank): info["Communication Time Info"]["Wait Time(ms)"] for rank, info in ranks.items()})
    return waits


def _link_bandwidths(matrix: dict, transport: str) -> dict[tuple[int, int], float]:
    """(src, dst) -> bandwidth (GB/s) of the ``-total`` links of ``transport``, from the merged matrix."""
    links = {}
    for steps in matrix.values():
        for ops in steps.values():
            for op, pairs in ops.items():
                if "-total@" not in op:
                    continue
                for pair, info in pairs.items():
                    if info.get("Transport Type") == transport:
                        src, dst = (int(x) for x in pair.split("-"))
                        links[(src, dst)] = info["Bandwidth(GB/s)"]
    return links


def check(output: Path, answers: dict) -> dict:
    groups = json.loads((output / "communication_group.json").read_text())
    planted_sets = sorted(g["ranks"] for g in answers["groups"].values())
    with open(output / "cluster_step_trace_time.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["Type"] == "rank"]
    waits = _waits(json.loads((output / "cluster_communication.json").read_text()))
    slow, jitter_ms = answers["slow_ranks"][0], answers["jitter_ns"] / 1e6
    with_slow = {g: ops for g, ops in waits.items() if slow in ops[0]}
    others = [op for ops in waits.values() if slow not in ops[0] for op in ops]
    link = answers["slow_link"]
    bandwidths = _link_bandwidths(json.loads((output / "cluster_communication_matrix.json").read_text()),
                                  link["transport"])
    rest = [bw for pair, bw in bandwidths.items() if pair != (link["src"], link["dst"])]
    checks = {
        "groups": sorted(sorted(ranks) for ranks in groups["collective"]) == planted_sets,
        "step_trace_ranks": sorted(int(row["Index"]) for row in rows) == list(range(answers["world_size"])),
        "slow_rank_waits_least": bool(with_slow) and all(
            op[slow] == 0 and min(v for r, v in op.items() if r != slow) > jitter_ms
            for ops in with_slow.values() for op in ops),
        "no_other_group_waits": all(max(op.values()) < jitter_ms for op in others),
        "slow_link_bandwidth": abs(bandwidths.get((link["src"], link["dst"]), -1) - link["bandwidth_gbps"]) < 0.01,
        "other_links_bandwidth": bool(rest) and all(abs(bw - link["others_gbps"]) < 0.01 for bw in rest),
    }
    return {"checks": checks, "slow_rank": slow, "slow_rank_group_waits_ms": with_slow,
            "largest_wait_elsewhere_ms": max((max(op.values()) for op in others), default=None),
            "slow_link": link, "slow_link_found_gbps": bandwidths.get((link["src"], link["dst"])),
            "other_links": len(rest)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--ranks-per-node", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peer-venv", type=Path, default=Path("/tmp/msa"))
    parser.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--keep", action="store_true", help="keep the generated job (its path is printed)")
    args = parser.parse_args()
    peer = ensure_peer(args.peer_venv, PEER)
    job = Path(tempfile.mkdtemp(prefix="jobgen-npu-", dir=args.scratch))
    answers = jobgen.generate("npu", args.ranks, job, seed=args.seed, ranks_per_node=args.ranks_per_node)
    done = subprocess.run([str(peer), "cluster", "-d", str(job), "-m", "all"], capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        return 1
    report = {"job": str(job) if args.keep else None, **check(job / "cluster_analysis_output", answers)}
    if not args.keep:
        shutil.rmtree(job)
    print(json.dumps(report, indent=1))
    return 0 if all(report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
