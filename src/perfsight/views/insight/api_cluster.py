"""The HTTP routes of the Cluster page at any rank count, under ``/api/runs/{run_id}/cluster/``, read from the
job's ranks' summaries (``LoadedRun.job``: a job mapped rank by rank, or one merged):

* ``job``: the ranks, each rank's own entry (its pages: drill-down), how the job was mapped (engine, ranks
  done / found stored / failed and why), the slowest rank and the breakdown's categories;
* ``heatmap?value=step|<category>``: every rank's time per step (``cluster.rank_steps``) as a rank x step grid;
* ``nodes``: each rank's node (``cluster_nodes.rank_nodes``) and the traffic between nodes
  (``cluster_nodes.communication_by_node``), columnar;
* ``nodes/links?src=&dst=``: the rank pairs of one node pair (``cluster_nodes.node_links``; dst empty: the
  traffic whose peers are not recorded);
* ``top?n=``: the ``n`` ranks that hold the others up most (``cluster.rank_breakdown``: the wait they cause
  per step, then their step on the common boundary), the
  stragglers by group (``waiting.slow_ranks``: slow first, then the ranks that make the others wait longest)
  and the slowest links
  (``collectives.slow_links``: slow first, then the lowest bandwidth), each row with its figures, rule and
  threshold, and how many rows each has;
* ``offsets``: every rank's clock offset (``collectives.clock_offsets``).

Every number is an analysis result through the Job's memo; ``prepare(job)`` computes the ones these routes
read (``ANALYSES``) ahead, once (the library runs it when a job has been mapped, before the job is ready), and
the top-N lists in their order (``ordered``: a million links sorted once, not per request), so every route
answers from the memo. Tables of a rank's count of rows go out columnar.
"""
from __future__ import annotations

from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Depends, HTTPException

from perfsight.analysis import cluster, cluster_nodes, collectives, waiting
from perfsight.analysis.breakdown import CATEGORIES
from perfsight.analysis.job import Job
from perfsight.core.memo import computed
from perfsight.views.insight.library import LoadedRun
from perfsight.views.insight.responses import json_response
from perfsight.views.insight.results import choice, integer

#: what the routes read of a job, computed ahead by ``prepare``
ANALYSES = (cluster.rank_steps, cluster.rank_breakdown, cluster.slowest_rank, cluster_nodes.rank_nodes,
            cluster_nodes.communication_by_node, waiting.slow_ranks, collectives.slow_links,
            collectives.clock_offsets)
#: the heatmap's values: the step, or a category of its breakdown
HEATMAP_VALUES = ("step", *CATEGORIES, "idle")
#: rows of each top-N list: default and most
TOP, MAX_TOP = 10, 1000


#: the top-N lists: the analysis, and the order its rows are listed in
ORDERS: dict[str, tuple[Callable[[Job], pa.Table], list[tuple[str, str]]]] = {
    "ranks": (cluster.rank_breakdown, [("caused_wait_ns", "descending"), ("boundary_step_ns", "descending"),
                                       ("rank", "ascending")]),
    "slow_ranks": (waiting.slow_ranks, [("slow", "descending"), ("caused_per_step_ns", "descending"),
                                        ("waited_per_step_ns", "ascending"), ("rank", "ascending")]),
    "slow_links": (collectives.slow_links, [("slow", "descending"), ("bandwidth_gbps", "ascending"),
                                            ("src_rank", "ascending"), ("dst_rank", "ascending")]),
}


def ordered(job: Job, name: str) -> pa.Table:
    """The rows of the top-N list ``name`` (``ORDERS``) in its order (kept in the job's memo: a million links
    are sorted once, not per request)."""
    analysis, keys = ORDERS[name]
    return computed(analysis, job).sort_by(keys)


def prepare(job: Job) -> None:
    """Compute every analysis the routes read (``ANALYSES``, and the top-N lists' order) into the job's memo."""
    for analysis in ANALYSES:
        computed(analysis, job)
    for name in ORDERS:
        computed(ordered, job, name)


def _columns(table: pa.Table) -> dict[str, list]:
    return {name: table.column(name).to_pylist() for name in table.column_names}


def _top(job: Job, name: str, count: int) -> dict:
    rows = computed(ordered, job, name)
    return {"rows": rows.slice(0, count), "total": rows.num_rows,
            "slow": int(pc.sum(rows["slow"]).as_py() or 0) if "slow" in rows.column_names else None}


def router(get_run: Callable[[str], LoadedRun]) -> APIRouter:
    api = APIRouter(prefix="/api/runs/{run_id}/cluster")

    @api.get("/job")
    def job(loaded: LoadedRun = Depends(get_run)):
        """The ranks with their own entries, how the job was mapped, the slowest rank."""
        slowest = computed(cluster.slowest_rank, loaded.job).to_pylist()
        mapped = loaded.cluster
        return json_response({
            "mode": loaded.entry.mode, "ranks": computed(cluster_nodes.rank_nodes, loaded.job)["rank"].to_pylist(),
            "rank_runs": [{"rank": rank, "id": run_id} for rank, run_id in sorted(loaded.entry.rank_ids.items())],
            "mapped": None if mapped is None else {"engine": mapped.engine, "seconds": mapped.seconds,
                                                   "counts": mapped.counts, "store": str(mapped.store)},
            "failed": loaded.entry.as_dict()["failed_ranks"],
            "slowest": slowest[0] if slowest else None, "categories": [*CATEGORIES, "idle"], "top": TOP})

    @api.get("/heatmap")
    def heatmap(loaded: LoadedRun = Depends(get_run), value: str | None = None):
        """Every rank's ``value`` (the step, or a category) per step: ``z[i][j]`` ns of ``ranks[i]`` at
        ``steps[j]`` (null: the rank has no such step)."""
        value = choice("value", value, HEATMAP_VALUES, "step")
        steps = computed(cluster.rank_steps, loaded.job)
        ranks = sorted(set(steps["rank"].to_pylist()))
        numbers = sorted(set(steps["step"].to_pylist()))
        row, column = {r: i for i, r in enumerate(ranks)}, {s: j for j, s in enumerate(numbers)}
        z: list[list] = [[None] * len(numbers) for _ in ranks]
        for r, s, v in zip(steps["rank"].to_pylist(), steps["step"].to_pylist(), steps[f"{value}_ns"].to_pylist()):
            z[row[r]][column[s]] = v
        return json_response({"value": value, "ranks": ranks, "steps": numbers, "z": z})

    @api.get("/nodes")
    def nodes(loaded: LoadedRun = Depends(get_run)):
        """Each rank's node and the traffic between nodes, columnar."""
        return json_response({"ranks_per_node": cluster_nodes.RANKS_PER_NODE,
                              "nodes": _columns(computed(cluster_nodes.rank_nodes, loaded.job)),
                              "matrix": _columns(computed(cluster_nodes.communication_by_node, loaded.job))})

    @api.get("/nodes/links")
    def node_pair(loaded: LoadedRun = Depends(get_run), src: str | None = None, dst: str | None = None):
        """The rank pairs from node ``src`` to node ``dst`` (empty: peers not recorded)."""
        if not src:
            raise HTTPException(400, "src is required: a node of the job (GET .../cluster/nodes lists them)")
        known = set(computed(cluster_nodes.rank_nodes, loaded.job)["node"].to_pylist())
        for name, node in (("src", src), ("dst", dst)):
            if node and node not in known:
                raise HTTPException(400, f"{name}={node[:60]!r}: not a node of this job")
        return json_response({"src": src, "dst": dst or None,
                              "links": computed(cluster_nodes.node_links, loaded.job, src, dst or None)})

    @api.get("/top")
    def top(loaded: LoadedRun = Depends(get_run), n: str | None = None):
        """The ``n`` slowest ranks, slow-rank verdicts and slowest links, with their evidence."""
        count = integer("n", n, TOP, low=1, high=MAX_TOP)
        return json_response({
            **{name: _top(loaded.job, name, count) for name in ORDERS},
            "rules": {"slow_rank": {"rule": waiting.STRAGGLER_RULE, "threshold": waiting.STRAGGLER_THRESHOLD},
                      "slow_link": {"rule": collectives.SLOW_LINK_RULE, "threshold": collectives.SLOW_LINK_THRESHOLD}},
        })

    @api.get("/offsets")
    def offsets(loaded: LoadedRun = Depends(get_run)):
        """Every rank's clock offset from the reference rank's, columnar."""
        return json_response(_columns(computed(collectives.clock_offsets, loaded.job)))

    return api
