"""The route of the Compare page: two runs of the run list side by side (``analysis/compare.py``), as JSON.

``GET /api/compare/{base_id}/{new_id}?top=N``: ``base`` and ``new`` (their run list entries), ``steps`` (the
``step_comparison`` row) with ``verdict_text`` (``views.wording.verdict_sentence``), ``step_times`` (each
side's job step times per step, ns: the distributions the verdict weighs), ``breakdown``, ``operators`` and
``kernels`` and ``modules`` (of each, the ``top`` rows that grew most and the ``top`` that shrank most per step,
and how many rows there are in all), ``communication``, ``memory`` (its ``top`` rows), ``ranks`` (rank by rank)
and ``figures``. Both runs must be parsed and merged (a job analysed
rank by rank has no merged tables: 409, as for its other pages); one run compared with itself is allowed.
"""
from __future__ import annotations

from fastapi import APIRouter, HTTPException

from perfsight.analysis import compare
from perfsight.core.memo import computed
from perfsight.views.insight.responses import json_response
from perfsight.views.wording import verdict_sentence

#: rows of each operator and kernel table sent by default (grown most, and shrunk most), and at most
DEFAULT_TOP, MAX_TOP = 15, 200


def _extremes(table, top: int) -> dict:
    """The ``top`` rows that grew most and the ``top`` that shrank most per step (``compare.largest_changes``),
    and the count of all."""
    rows = table.to_pylist()
    grown, shrunk = compare.largest_changes(rows, top)
    return {"grown": grown, "shrunk": shrunk, "total": len(rows)}


def router(get_run) -> APIRouter:
    api = APIRouter(prefix="/api/compare")

    @api.get("/{base_id}/{new_id}")
    def compare_route(base_id: str, new_id: str, top: int = DEFAULT_TOP):
        if not 1 <= top <= MAX_TOP:
            raise HTTPException(400, f"top={top}: expected 1 to {MAX_TOP}")
        base, new = get_run(base_id), get_run(new_id)
        before, after = base.tables, new.tables
        steps = compare.step_comparison(before, after).to_pylist()[0]
        return json_response({
            "base": base.entry.as_dict(), "new": new.entry.as_dict(),
            "steps": {**steps, "verdict_text": verdict_sentence(steps)},
            "step_times": {side: computed(compare.job_step_times, tables).column("step_ns").to_pylist()
                           for side, tables in (("base", before), ("new", after))},
            "breakdown": compare.breakdown_comparison(before, after),
            "operators": _extremes(compare.operator_comparison(before, after), top),
            "kernels": _extremes(compare.operator_comparison(before, after, executions=compare.DEVICE), top),
            "modules": _extremes(compare.operator_comparison(before, after, executions=compare.MODULES), top),
            "communication": compare.communication_comparison(before, after),
            "memory": compare.memory_comparison(before, after).slice(0, top),
            "ranks": compare.rank_comparison(base.job, new.job),
            "figures": compare.figure_comparison(before, after),
        })

    return api
