"""The HTTP routes behind insight's run pages: each returns what analysis functions compute, as JSON.

No analysis logic here: a route calls functions of ``perfsight.analysis`` on the run's tables (memoised
per run with ``LoadedRun.memo`` so a page computes once) and encodes the result (Arrow tables become
lists of row objects, see ``views.json_report.plain``).
"""
from __future__ import annotations

from typing import Callable

import orjson
from fastapi import APIRouter, Depends, Response

from ..analysis.summary import run_summary
from ..views.json_report import plain
from .library import LoadedRun


def json_response(value) -> Response:
    return Response(orjson.dumps(plain(value), default=str), media_type="application/json")


def router(get_run: Callable[[str], LoadedRun]) -> APIRouter:
    api = APIRouter(prefix="/api/runs/{run_id}")

    @api.get("/summary")
    def summary(loaded: LoadedRun = Depends(get_run)) -> Response:
        return json_response(loaded.memo("summary", lambda: run_summary(loaded.tables)))

    return api
