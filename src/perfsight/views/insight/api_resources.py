"""The HTTP routes of the Data preparation, Resources and Cluster pages, under ``/api/runs/{run_id}/``:

* ``data``: the data-preparation verdict per rank, each step's data wait, the input queues' summary and
  their series;
* ``resources/host``: the host CPU and memory series (machine and process) and their summary;
* ``memory``, ``memory/curve``, ``memory/alive``, ``memory/allocations``: the allocator's peak per rank
  and device, its curve (thinned for drawing), what is alive at a point of it, and every allocation;
* ``cluster``: per-rank step breakdown, slowest rank and straggler, every rank's steps, and what each rank
  lacks;
* ``cluster/communication``: the communication matrix by (src, dst) pair, the collectives per rank, group
  and kind (``collective_totals``) and as recorded (``collective_summary``), the bandwidth per link type,
  the clock offsets, the groups, and the slow rank and slow link verdicts with their rules;
* ``cluster/operations``: one page of ``collective_figures`` (every operation's figures), sorted on any
  column (default: the longest wait first), of one rank, group or collective kind.

Every number comes from a ``perfsight.analysis`` function through the run's memo (``core.memo.computed``:
once per run and arguments, what depends on the query too, within the memo's bound). Times go out as
integer ns relative to the run's start and come in the same way (``results.relative``: a browser's numbers
cannot hold ns since the epoch). Series go out columnar (``{"t_ns": [...], "value": [...]}``). Bad query
parameters get 400 with a message naming the parameter and what it allows.
"""
from __future__ import annotations

from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Depends, HTTPException

from perfsight.analysis import cluster, collectives, data, memory, resources, waiting
from perfsight.analysis.breakdown import CATEGORIES, step_breakdown
from perfsight.analysis.job_summaries import job_of
from perfsight.analysis.ops import instance_page
from perfsight.analysis.summary import run_start_ns
from perfsight.core.memo import computed
from perfsight.views.insight.library import LoadedRun
from perfsight.views.insight.responses import json_response
from perfsight.views.insight.results import INT32_MAX, INT64_MAX, choice, integer, relative

#: points of the memory curve by default (``memory.memory_curve_sampled``), and at most
CURVE_POINTS, MAX_CURVE_POINTS = 4000, 100_000
#: rows of a page of tensors or allocations: default and most
PAGE, MAX_PAGE = 100, 1000
#: rows of a page of communication operations: default and most
OPERATIONS_PAGE, MAX_OPERATIONS_PAGE = 20, 500


def _series(table: pa.Table, keys: tuple[str, ...], columns: dict[str, str]) -> list[dict]:
    """One dict per distinct ``keys`` of a long table (in the order the groups first appear), with
    ``columns`` (output name: table column) as lists."""
    out: list[dict] = []
    for group in table.group_by(list(keys), use_threads=False).aggregate([]).to_pylist():
        mask = None
        for key in keys:
            match = pc.equal(table[key], group[key]) if group[key] is not None else pc.is_null(table[key])
            mask = match if mask is None else pc.and_(mask, match)
        part = table.filter(mask)
        out.append({**group, **{name: part.column(column).to_pylist() for name, column in columns.items()}})
    return out


def _memory_point(loaded: LoadedRun, rank: str | None, device: str | None) -> tuple[int, str]:
    """The (rank, device) asked for among those with memory events (a sole rank or device is the
    default), or 400 listing them."""
    pairs = [(r["rank"], r["device"]) for r in computed(memory.memory_peak, loaded.tables).to_pylist()]
    listing = ", ".join(f"rank {r} device {d}" for r, d in pairs) or "none: this run recorded no memory events"
    ranks = sorted({r for r, _ in pairs})
    number = integer("rank", rank, ranks[0] if len(ranks) == 1 else None, low=0, high=INT32_MAX)
    devices = [d for r, d in pairs if r == number]
    device = device if device or len(devices) != 1 else devices[0]
    if (number, device) not in pairs:
        raise HTTPException(400, f"rank={number}, device={device!r}: no memory events there; expected one of: "
                                 f"{listing}")
    return number, device


def _of(table: pa.Table, rank: int, device: str) -> pa.Table:
    return table.filter(pc.and_(pc.equal(table["rank"], rank), pc.equal(table["device"], device)))


def router(get_run: Callable[[str], LoadedRun]) -> APIRouter:
    api = APIRouter(prefix="/api/runs/{run_id}")

    @api.get("/data")
    def data_preparation(loaded: LoadedRun = Depends(get_run)):
        """Verdict per rank, data wait per step, queue summary and queue series."""
        queues = relative(loaded, computed(data.queue_sizes, loaded.tables))
        return json_response({
            "verdict": computed(data.data_verdict, loaded.tables),
            "steps": relative(loaded, computed(data.data_wait, loaded.tables)),
            "queue_summary": computed(data.queue_summary, loaded.tables),
            "queues": _series(queues, ("rank", "series", "queue"), {"t_ns": "ts_ns", "value": "value"}),
        })

    @api.get("/resources/host")
    def host(loaded: LoadedRun = Depends(get_run)):
        """Host CPU and memory series (machine and process) with their summary."""
        usage = relative(loaded, computed(resources.host_usage, loaded.tables))
        return json_response({
            "summary": relative(loaded, computed(resources.host_usage_summary, loaded.tables)),
            "units": resources.HOST_USAGE_SERIES,
            "series": _series(usage, ("rank", "series"), {"t_ns": "ts_ns", "value": "value"}),
        })

    @api.get("/memory")
    def memory_overview(loaded: LoadedRun = Depends(get_run)):
        """The peak of every rank and device with memory events, and allocations per operator type."""
        return json_response({"devices": relative(loaded, computed(memory.memory_peak, loaded.tables)),
                              "by_op": computed(memory.allocations_by_op, loaded.tables)})

    @api.get("/memory/curve")
    def memory_curve(loaded: LoadedRun = Depends(get_run), rank: str | None = None, device: str | None = None,
                     max_points: str | None = None):
        """The allocated/reserved curve of one rank and device, at most ``max_points`` points."""
        number, device = _memory_point(loaded, rank, device)
        points = integer("max_points", max_points, CURVE_POINTS, low=10, high=MAX_CURVE_POINTS)
        events = _of(computed(memory.memory_peak, loaded.tables), number, device)["events"][0].as_py()
        thin = computed(memory.memory_curve_sampled, loaded.tables, max_points=points)
        curve = relative(loaded, _of(thin, number, device))
        names = ("seq", "ts_ns", "bytes", "allocated_bytes", "reserved_bytes", "op_type", "step")
        return json_response({
            "rank": number, "device": device, "events": events, "sampled": curve.num_rows < events,
            "points": {("t_ns" if n == "ts_ns" else n): curve.column(n).to_pylist() for n in names}})

    @api.get("/memory/alive")
    def memory_alive(loaded: LoadedRun = Depends(get_run), rank: str | None = None, device: str | None = None,
                     t_ns: str | None = None, limit: str | None = None):
        """What is allocated at relative time ``t_ns``: per operator type, and the largest tensors."""
        number, device = _memory_point(loaded, rank, device)
        origin = computed(run_start_ns, loaded.tables)
        relative_ns = integer("t_ns", t_ns, None, low=0, high=INT64_MAX - origin)   # absolute, it fits int64
        if relative_ns is None:
            raise HTTPException(400, "t_ns is required: an integer >= 0, ns since the run's start")
        count = integer("limit", limit, PAGE, low=1, high=MAX_PAGE)
        at = relative_ns + origin
        tensors = computed(memory.alive_at, loaded.tables, at, rank=number, device=device)
        return json_response({
            "rank": number, "device": device, "t_ns": relative_ns, "tensor_count": tensors.num_rows,
            "by_op": computed(memory.alive_by_op_at, loaded.tables, at, rank=number, device=device),
            "tensors": relative(loaded, tensors.slice(0, count)),
        })

    @api.get("/memory/allocations")
    def memory_allocations(loaded: LoadedRun = Depends(get_run), rank: str | None = None,
                           device: str | None = None, offset: str | None = None, limit: str | None = None):
        """A page of the rank and device's allocations (tensor lifetimes), in allocation order."""
        number, device = _memory_point(loaded, rank, device)
        lifetimes = _of(computed(memory.tensor_lifetimes, loaded.tables), number, device)
        start = integer("offset", offset, 0, low=0, high=lifetimes.num_rows)
        count = integer("limit", limit, PAGE, low=1, high=MAX_PAGE)
        return json_response({"rank": number, "device": device, "total": lifetimes.num_rows, "offset": start,
                              "rows": relative(loaded, lifetimes.slice(start, count))})

    @api.get("/cluster")
    def cluster_steps(loaded: LoadedRun = Depends(get_run)):
        """Per-rank mean breakdown with the slowest rank and straggler, every rank's steps, and what each
        rank lacks."""
        job = computed(job_of, loaded.tables)
        slowest = computed(cluster.slowest_rank, job).to_pylist()
        steps = computed(step_breakdown, loaded.tables).drop_columns(["start_ns", "end_ns"])
        return json_response({"categories": [*CATEGORIES, "idle"],
                              "ranks": computed(cluster.rank_breakdown, job),
                              "slowest": slowest[0] if slowest else None,
                              "steps": {name: steps.column(name).to_pylist() for name in steps.column_names},
                              "lacks": computed(cluster.rank_lacks, job)})

    @api.get("/cluster/communication")
    def communication(loaded: LoadedRun = Depends(get_run)):
        """The communication matrix by (src, dst) pair (dst null: peers not recorded), the collectives per
        rank, group and kind and as recorded, bandwidth per link type, clock offsets, groups and verdicts."""
        job = computed(job_of, loaded.tables)
        return json_response({
            "matrix": computed(collectives.communication_pairs, job),
            "totals": computed(collectives.collective_totals, job),
            "collectives": computed(collectives.collective_summary, loaded.tables),
            "links": computed(collectives.link_totals, job),
            "offsets": computed(collectives.clock_offsets, job),
            "groups": computed(collectives.communication_groups, job),
            "slow_ranks": computed(waiting.slow_ranks, job),
            "slow_links": computed(collectives.slow_links, job),
            "rules": {"slow_rank": {"rule": waiting.STRAGGLER_RULE, "threshold": waiting.STRAGGLER_THRESHOLD},
                      "slow_link": {"rule": collectives.SLOW_LINK_RULE, "threshold": collectives.SLOW_LINK_THRESHOLD}},
        })

    @api.get("/cluster/operations")
    def operations(loaded: LoadedRun = Depends(get_run), rank: str | None = None, process_group: str | None = None,
                   collective: str | None = None, sort: str | None = None, order: str | None = None,
                   page: str | None = None, page_size: str | None = None):
        """One page of every communication operation's figures, longest wait first by default."""
        figures = computed(collectives.collective_figures, computed(job_of, loaded.tables))
        sort = choice("sort", sort, collectives.COLLECTIVE_FIGURES.names, "wait_ns")
        order = choice("order", order, ("asc", "desc"), "desc")
        size = integer("page_size", page_size, OPERATIONS_PAGE, 1, MAX_OPERATIONS_PAGE)
        number = integer("page", page, 1, 1, INT64_MAX // MAX_OPERATIONS_PAGE)
        where: dict = {"process_group": process_group} if process_group else {}
        if collective:
            where["collective"] = collective
        if rank:
            where["rank"] = integer("rank", rank, 0, 0, INT32_MAX)
        rows, total = instance_page(figures, where=where, sort=sort, descending=order == "desc",
                                    offset=(number - 1) * size, limit=size)
        return json_response({"total": total, "page": number, "page_size": size, "sort": sort, "order": order,
                              "rows": relative(loaded, rows)})

    return api
