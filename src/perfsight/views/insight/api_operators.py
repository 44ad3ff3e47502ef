"""Routes of the Operators, FLOPs and Dynamic shape pages: analysis results as JSON, times relative to
the run start. ``view`` picks the executions (``results.VIEWS``: ``device`` tasks or ``host`` operators;
default the run's first).

* ``GET /operators?view``: ``views``, ``view``, ``shares`` (``ops.type_shares``, top 20 and the rest) and
  ``types`` (``ops.op_statistic`` per op type and task type).
* ``GET /operators/instances?view&op_type&rank&search&sort&order&page&page_size``: one page of
  ``ops.op_instances`` (``ops.instance_page``: fuzzy search on name/type, sort on any column):
  ``total``, ``page``, ``page_size``, ``sort``, ``order``, ``rows``.
* ``GET /operators/shapes?view&op_type``: ``op_statistic(by=["op_type", "input_shapes"])`` of one type.
* ``GET /operators/stack/{slice_id}``: ``ops.call_stack`` of one execution.
* ``GET /flops?level&precision``: ``flops.op_flops``, ``scope_flops`` at ``level``, ``model_flops`` and
  ``model_flops_total``, each operator against its own precision's peak (``precision`` = ``auto``, the
  default) or every one against the named precision's; and ``roofline.roofline``.
* ``GET /dynamic?view``: ``dynamic_shape.op_time_by_step``, ``op_shapes_by_step`` and the op type ranking
  (``types``, as ``/operators``).
* ``GET /dynamic/instances?view&op_type&instances=0,1,..``: ``op_instance_time_by_step`` of some instances
  (ordinals; default the first five) of one op type.
"""
from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException

from perfsight.analysis.dynamic_shape import op_instance_time_by_step, op_shapes_by_step, op_time_by_step
from perfsight.analysis.flops import model_flops, model_flops_total, op_flops, scope_flops
from perfsight.analysis.ops import OP_INSTANCES, call_stack, instance_page, op_statistic, type_shares
from perfsight.analysis.peaks import PRECISIONS
from perfsight.analysis.roofline import roofline
from perfsight.core.memo import computed
from perfsight.views.insight.library import LoadedRun
from perfsight.views.insight.responses import json_response
from perfsight.views.insight.results import (
    INT32_MAX,
    INT64_MAX,
    choice,
    executions,
    integer,
    relative,
    view_kinds,
    view_param,
    views,
)

#: the ``precision`` of /flops that measures each operator against its own precision's peak
EACH_OPS_OWN = "auto"
#: operator types in the pie and bar of the operators page (MindSpore's "统计前20个")
TOP_TYPES = 20
MAX_PAGE_SIZE = 500
MAX_SCOPE_LEVEL = 64
#: instances of one op type drawn by default on the dynamic shape page, and at most
DEFAULT_INSTANCES, MAX_INSTANCES = 5, 50
#: op_statistic's grouping by input shape
_BY_SHAPE = ("op_type", "input_shapes")


def _statistic(loaded: LoadedRun, view: str, by: str | tuple[str, ...] = "op_type"):
    """``op_statistic`` of the view's executions grouped ``by``."""
    return computed(op_statistic, loaded.tables, by=by, kinds=view_kinds(view))


def _required(name: str, value: str | None) -> str:
    if not value:
        raise HTTPException(400, f"{name} is required")
    return value


def router(get_run) -> APIRouter:
    api = APIRouter(prefix="/api/runs/{run_id}")

    @api.get("/operators")
    def operators(view: str | None = None, loaded: LoadedRun = Depends(get_run)):
        view = view_param(loaded, view)
        shares = type_shares(executions(loaded, view), top=TOP_TYPES)
        return json_response({"views": views(loaded), "view": view, "shares": shares,
                              "types": _statistic(loaded, view)})

    @api.get("/operators/instances")
    def instances(view: str | None = None, op_type: str | None = None, rank: str | None = None,
                  search: str | None = None, sort: str | None = None, order: str | None = None,
                  page: str | None = None, page_size: str | None = None, loaded: LoadedRun = Depends(get_run)):
        view = view_param(loaded, view)
        sort = choice("sort", sort, OP_INSTANCES.names, "dur_ns")
        order = choice("order", order, ("asc", "desc"), "desc")
        page_number = integer("page", page, 1, 1, INT64_MAX // MAX_PAGE_SIZE)    # its offset fits int64
        size = integer("page_size", page_size, 50, 1, MAX_PAGE_SIZE)
        where = {"op_type": op_type} if op_type else {}
        if rank:
            where["rank"] = integer("rank", rank, 0, 0, INT32_MAX)
        rows, total = instance_page(executions(loaded, view), where=where, search=search, sort=sort,
                                    descending=order == "desc", offset=(page_number - 1) * size, limit=size)
        return json_response({"view": view, "total": total, "page": page_number, "page_size": size, "sort": sort,
                              "order": order, "rows": relative(loaded, rows)})

    @api.get("/operators/shapes")
    def shapes(view: str | None = None, op_type: str | None = None, loaded: LoadedRun = Depends(get_run)):
        view = view_param(loaded, view)
        rows, total = instance_page(_statistic(loaded, view, _BY_SHAPE),
                                    where={"op_type": _required("op_type", op_type)}, sort="total_ns",
                                    limit=MAX_PAGE_SIZE)
        return json_response({"view": view, "op_type": op_type, "total": total, "rows": rows})

    @api.get("/operators/stack/{slice_id}")
    def stack(slice_id: str, loaded: LoadedRun = Depends(get_run)):
        number = integer("slice_id", slice_id, 0, 0)
        frames = computed(call_stack, loaded.tables, number)
        if not frames.num_rows:
            raise HTTPException(404, f"no slice with id {number} in this run")
        return json_response({"id": number, "frames": relative(loaded, frames)})

    @api.get("/flops")
    def flops(level: str | None = None, precision: str | None = None, loaded: LoadedRun = Depends(get_run)):
        level_number = integer("level", level, 1, 1, MAX_SCOPE_LEVEL)
        precision = choice("precision", precision, (EACH_OPS_OWN, *PRECISIONS), EACH_OPS_OWN)
        peak_at = None if precision == EACH_OPS_OWN else precision
        model = computed(model_flops, loaded.tables, precision=peak_at)
        return json_response({
            "level": level_number, "precision": precision, "precisions": [EACH_OPS_OWN, *PRECISIONS],
            "ops": computed(op_flops, loaded.tables, precision=peak_at),
            "scopes": computed(scope_flops, loaded.tables, level=level_number, precision=peak_at),
            "model": model, "total": model_flops_total(model), "roofline": computed(roofline, loaded.tables)})

    @api.get("/dynamic")
    def dynamic(view: str | None = None, loaded: LoadedRun = Depends(get_run)):
        view = view_param(loaded, view)
        kinds = view_kinds(view)
        return json_response({"views": views(loaded), "view": view, "types": _statistic(loaded, view),
                              "time_by_step": computed(op_time_by_step, loaded.tables, kinds=kinds),
                              "shapes": computed(op_shapes_by_step, loaded.tables, kinds=kinds)})

    @api.get("/dynamic/instances")
    def dynamic_instances(view: str | None = None, op_type: str | None = None, instances: str | None = None,
                          loaded: LoadedRun = Depends(get_run)):
        view = view_param(loaded, view)
        wanted = ([integer("instances", i.strip(), 0, 0) for i in instances.split(",")] if instances
                  else list(range(DEFAULT_INSTANCES)))
        if len(wanted) > MAX_INSTANCES:
            raise HTTPException(400, f"instances: {len(wanted)} ordinals; expected at most {MAX_INSTANCES}")
        table = computed(op_instance_time_by_step, loaded.tables, kinds=view_kinds(view))
        rows, _ = instance_page(table, where={"op_type": _required("op_type", op_type), "instance": wanted},
                                sort="start_ns", descending=False, limit=MAX_PAGE_SIZE * len(wanted))
        return json_response({"view": view, "op_type": op_type, "instances": wanted, "rows": relative(loaded, rows)})

    return api
