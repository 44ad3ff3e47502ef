"""A planted N-rank job whose cluster store is written directly: the Cluster page's test and benchmark data at
any rank count, made in seconds (no trace of 10 MB per rank is read or written).

    python bench/clusterstore.py --ranks 1024 --out DIR [--steps 5] [--hosts]

``write_job(folder, ranks, ...)`` (``import clusterstore`` with bench/ on sys.path) writes, per rank, a tiny
Kineto trace ``rank{R}.pt.trace.json`` (its ``distributedInfo`` rank, one ``ProfilerStep#s`` and one kernel per
step: what opening the rank alone shows) and its summaries (``analysis/job_summaries.SUMMARY_SCHEMAS``) straight
into the job's store (``perfsight.mapreduce``: ``<folder>/perfsight_cluster/``) under the fingerprint the map
would give it (``mapreduce.map``: its batches, their stamps and outcomes), so ``analyse_job`` finds every rank
``cached`` and reads no trace. The
summaries are planted, not read from the traces: they are the job below, and the answers are known.

**Layout** (as bench/jobgen.py's): ``ranks_per_node`` ranks per node (node = rank // ranks_per_node); groups
``world`` (every rank), ``tp{n}`` (node n's ranks), ``dp{i}`` (local index i on every node) and ``p2p{r}`` (rank r
sends to r + ranks_per_node). Per step (``STEP_NS`` apart, true time): a TP, a DP and a world all-reduce of
``ALLREDUCE_BYTES`` at ``BASES_NS`` into the step, then the sends; each rank arrives at base + its jitter (under
``JITTER_NS``), the slow rank ``SLOW_DELAY_NS`` late; every member of an instance ends at its last arrival +
``TRANSIT_NS``; a send and its recv take ``P2P_TRANSIT_NS`` (the slow link ``SLOW_LINK_FACTOR`` times that).
Each node's clock reads ``node x NODE_OFFSET_NS`` ahead of true time. With ``hosts`` every rank's facts name
its node's host (``host{n}``); without, no rank names one (nodes are then assumed). Each rank's step is
``STEP_NS`` plus a jitter, the slow rank's ``SLOW_DELAY_NS`` longer; compute 60% of it, exposed communication
30%, the rest idle. Answers (``write_job``'s return): slow_rank, slow_link (src, dst), offsets per rank,
nodes, ranks per node, steps.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pyarrow as pa

from perfsight import ingest
from perfsight.analysis.breakdown import CATEGORIES
from perfsight.analysis.job_summaries import SUMMARY_SCHEMAS
from perfsight.mapreduce import store_of
from perfsight.mapreduce.map import DONE, batches, outcome_row, store_batch

STEP_NS = 100_000_000
BASES_NS = {"tp": 20_000_000, "dp": 40_000_000, "world": 60_000_000}
P2P_BASE_NS = 80_000_000
ALLREDUCE_BYTES, P2P_BYTES = 64 << 20, 16 << 20
TRANSIT_NS = 1_000_000
#: a send's transit: the all-reduces' bandwidth, so that every link but the slow one has one bandwidth
P2P_TRANSIT_NS = TRANSIT_NS * P2P_BYTES // ALLREDUCE_BYTES
SLOW_DELAY_NS, SLOW_LINK_FACTOR = 3_000_000, 10
JITTER_NS = 11_000
NODE_OFFSET_NS = 1_000_003
T0_NS = 1_700_000_000_000_000_000


def _jitter(rank: int, salt: int) -> int:
    return (rank * 37 + salt * 11) % 11 * 1000


def _trace(rank: int, ranks: int, steps: int) -> dict:
    """The rank's own tiny trace (times in us on its clock)."""
    pid, events = 100 + rank, [{"ph": "M", "name": "process_name", "pid": 100 + rank, "tid": 0,
                                "args": {"name": "python"}}]
    for step in range(steps):
        start = (step * STEP_NS) / 1000 + 1_000_000
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": pid, "tid": 1,
                       "ts": start, "dur": STEP_NS / 1000, "args": {}})
        events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": rank, "tid": 7, "ts": start + 10,
                       "dur": STEP_NS * 6 / 10 / 1000, "args": {"device": rank, "stream": 7}})
    return {"traceEvents": events, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": ranks}}


class _Plan:
    def __init__(self, ranks: int, steps: int, ranks_per_node: int, slow_rank: int, slow_link: tuple[int, int]):
        self.ranks, self.steps, self.per_node = ranks, steps, ranks_per_node
        self.slow_rank, self.slow_link = slow_rank, slow_link
        nodes = (ranks + ranks_per_node - 1) // ranks_per_node
        self.groups = {"world": list(range(ranks))}
        self.groups |= {f"tp{n}": [r for r in range(ranks) if r // ranks_per_node == n] for n in range(nodes)}
        self.groups |= {f"dp{i}": [r for r in range(ranks) if r % ranks_per_node == i] for i in range(ranks_per_node)}

    def delay(self, rank: int, salt: int) -> int:
        return SLOW_DELAY_NS if rank == self.slow_rank else _jitter(rank, salt)

    def offset(self, rank: int) -> int:
        return rank // self.per_node * NODE_OFFSET_NS

    def operations(self, rank: int) -> list[dict]:
        rows, slice_id = [], 0
        offset = self.offset(rank)
        mine = {"tp": f"tp{rank // self.per_node}", "dp": f"dp{rank % self.per_node}", "world": "world"}
        for step in range(self.steps):
            begin = T0_NS + step * STEP_NS
            for layer, group in mine.items():
                members = self.groups[group]
                if len(members) < 2:
                    continue
                base = begin + BASES_NS[layer]
                salt = step * 3 + len(layer)
                end = base + max(self.delay(r, salt) for r in members) + TRANSIT_NS
                start = base + self.delay(rank, salt)
                rows.append(self._op(rank, slice_id, step, "allreduce", group, members, step, None, None, None,
                                     ALLREDUCE_BYTES, start + offset, end - start))
                slice_id += 1
            for kind, src, dst in (("send", rank, rank + self.per_node), ("recv", rank - self.per_node, rank)):
                if not 0 <= src < self.ranks or not 0 <= dst < self.ranks:
                    continue
                transit = P2P_TRANSIT_NS * (SLOW_LINK_FACTOR if (src, dst) == self.slow_link else 1)
                base = begin + P2P_BASE_NS
                start = base + (0 if kind == "send" else _jitter(rank, step) // 2)
                end = base + max(0, _jitter(dst, step) // 2) + transit
                peer = dst if kind == "send" else src
                rows.append(self._op(rank, slice_id, step, kind, f"p2p{src}", [src, dst], step, peer,
                                     -1 if kind == "send" else src, dst if kind == "send" else -1, P2P_BYTES,
                                     start + offset, end - start))
                slice_id += 1
        return rows

    @staticmethod
    def _op(rank, slice_id, step, kind, group, members, sequence, peer, src, dst, size, start, dur) -> dict:
        name = {"allreduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL"}.get(kind, "ncclDevKernel_SendRecv")
        return {"rank": rank, "slice_id": slice_id, "step": step, "source": "device", "op_name": name,
                "collective": kind, "process_group": group, "group_ranks": members, "ranks_global": True,
                "sequence": sequence, "peer": peer, "kind": kind, "group_name": group.rstrip("0123456789"),
                "src_rank": src, "dst_rank": dst, "dtype": "Float", "in_bytes": size, "out_bytes": size,
                "bytes": size, "group_size": len(members), "ranks": len(members), "start_ns": start, "dur_ns": dur,
                "end_ns": start + dur, "reported": False, "links_reported": False, "figures_from": "computed"}

    def step_ns(self, rank: int, step: int) -> int:
        return STEP_NS + (rank * 13 + step * 7) % 17 * 10_000 + (SLOW_DELAY_NS if rank == self.slow_rank else 0)

    def steps_table(self, rank: int) -> pa.Table:
        rows = []
        for step in range(self.steps):
            total = self.step_ns(rank, step)
            start = T0_NS + step * STEP_NS + self.offset(rank)
            parts = {f"{c}_ns": 0 for c in CATEGORIES} | {"compute_ns": total * 6 // 10,
                                                           "communication_ns": total * 3 // 10}
            rows.append({"rank": rank, "step": step, "start_ns": start, "end_ns": start + total, "step_ns": total,
                         **parts, "idle_ns": total - sum(parts.values()), "source": "trace"})
        return pa.Table.from_pylist(rows, schema=SUMMARY_SCHEMAS["steps"])


def write_job(folder: Path, ranks: int, *, steps: int = 5, ranks_per_node: int = 8, hosts: bool = False,
              slow_rank: int | None = None, slow_link: tuple[int, int] | None = None) -> dict:
    """The planted job in ``folder`` (module docstring): its traces and its store; returns the answers."""
    folder.mkdir(parents=True, exist_ok=True)
    slow_rank = ranks // 2 + 3 if slow_rank is None else slow_rank
    slow_link = (1, 1 + ranks_per_node) if slow_link is None else slow_link
    plan = _Plan(ranks, steps, ranks_per_node, slow_rank, slow_link)
    for rank in range(ranks):
        (folder / f"rank{rank}.pt.trace.json").write_text(json.dumps(_trace(rank, ranks, steps)))
    store = store_of(folder)
    for batch in batches(ingest.find_runs(folder)):
        parts, outcomes = [], []
        for source in batch:
            rank = int(source.path.name.removeprefix("rank").split(".")[0])
            facts = {"rank": rank, "host": f"host{rank // ranks_per_node}" if hosts else None,
                     "meta": json.dumps({"source": str(source.path)})}
            summaries = {name: schema.empty_table() for name, schema in SUMMARY_SCHEMAS.items()}
            summaries |= {"operations": pa.Table.from_pylist(plan.operations(rank),
                                                             schema=SUMMARY_SCHEMAS["operations"]),
                          "steps": plan.steps_table(rank),
                          "rank_facts": pa.Table.from_pylist([facts], schema=SUMMARY_SCHEMAS["rank_facts"])}
            parts.append(summaries)
            outcomes.append(outcome_row(source, rank, DONE))
        tables = {name: pa.concat_tables([part[name] for part in parts]) for name in SUMMARY_SCHEMAS}
        if not store_batch(store, batch, tables, outcomes):
            raise SystemExit(f"could not write the batch of {batch[0].path} into {store}")
    return {"ranks": ranks, "steps": steps, "ranks_per_node": ranks_per_node,
            "nodes": (ranks + ranks_per_node - 1) // ranks_per_node, "slow_rank": slow_rank,
            "slow_link": list(slow_link), "offsets_ns": [plan.offset(r) for r in range(ranks)]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--hosts", action="store_true", help="every rank's facts name its node's host")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    answers = write_job(args.out, args.ranks, steps=args.steps, hosts=args.hosts)
    print(json.dumps({**answers, "offsets_ns": None, "seconds": round(time.perf_counter() - began, 1)}))


if __name__ == "__main__":
    main()
