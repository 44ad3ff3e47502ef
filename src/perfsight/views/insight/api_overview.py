"""Routes of the Overview and Step trace pages: analysis results as JSON, times relative to the run start.

``GET /api/runs/{id}/overview``: everything the overview draws, from ``summary.run_summary`` (the mean
step breakdown with the profiled steps' median, the headline; overlap, memory peak, data verdict, advice,
warnings) and the per-step breakdown, the device's temporal breakdown, the model FLOPS over the steps, host
usage, the top operator types (``ops.type_shares`` of the run's first operator view), the timeline summary,
the advice's evidence references (``advisor.evidence_refs``) and the trace health findings (``health``, with
``health_checks``: what each check finds).

``GET /api/runs/{id}/steps``: the step trace (``steps.step_trace``), its phases per step and on average
(``steps.step_phases``) and, for a run without steps, why (``steps.no_steps_reason``).
"""
from __future__ import annotations

from fastapi import APIRouter, Depends

from perfsight.analysis.advisor import evidence_refs
from perfsight.analysis.breakdown import CATEGORIES, step_breakdown, temporal_breakdown
from perfsight.analysis.flops import model_flops, model_flops_total
from perfsight.analysis.health import CHECKS
from perfsight.analysis.ops import type_shares
from perfsight.analysis.resources import host_usage_summary
from perfsight.analysis.steps import no_steps_reason, step_phases, step_trace
from perfsight.analysis.summary import run_summary, timeline_summary
from perfsight.core.memo import computed
from perfsight.views.insight.library import LoadedRun
from perfsight.views.insight.responses import json_response
from perfsight.views.insight.results import executions, relative, views

#: operator types in the overview's pie (the rest are one "other" slice)
OVERVIEW_TOP_TYPES = 10


def overview(loaded: LoadedRun) -> dict:
    summary = computed(run_summary, loaded.tables)
    view = views(loaded)[0]
    return {
        "categories": [*CATEGORIES, "idle"],
        "warnings": summary["warnings"],
        "no_steps_reason": summary["no_steps_reason"],
        "step_breakdown": relative(loaded, computed(step_breakdown, loaded.tables)),
        "step_breakdown_average": summary["breakdown"],
        "temporal": relative(loaded, computed(temporal_breakdown, loaded.tables)),
        "overlap": relative(loaded, summary["overlap"]),
        "flops": model_flops_total(computed(model_flops, loaded.tables)),
        "memory_peak": relative(loaded, summary["memory_peak"]),
        "host_usage": relative(loaded, computed(host_usage_summary, loaded.tables)),
        "ops_view": view,
        "top_ops": type_shares(executions(loaded, view), top=OVERVIEW_TOP_TYPES),
        "data": summary["data"],
        "timeline": relative(loaded, computed(timeline_summary, loaded.tables)),
        "advice": summary["advice"],
        "evidence": evidence_refs(summary["advice"]),
        "health": summary["health"],
        "health_checks": {check: what for check, (what, _) in CHECKS.items()},
    }


def router(get_run) -> APIRouter:
    api = APIRouter(prefix="/api/runs/{run_id}")

    @api.get("/overview")
    def overview_route(loaded: LoadedRun = Depends(get_run)):
        return json_response(overview(loaded))

    @api.get("/steps")
    def steps_route(loaded: LoadedRun = Depends(get_run)):
        trace = computed(step_trace, loaded.tables)
        return json_response({"steps": relative(loaded, trace), "phases": step_phases(trace),
                              "no_steps_reason": computed(no_steps_reason, loaded.tables)})

    return api
