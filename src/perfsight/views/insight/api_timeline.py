"""The timeline's HTTP routes, under ``/api/runs/{run_id}/timeline/``: the track tree, windows at screen
resolution, search, one slice's details, area sums (all answered by the run's ``TimelineIndex``, built
once per run through the run's memo, ``core.memo.computed``), the slices on the critical path (to highlight),
and the download of the run's timeline JSON
for Perfetto or chrome://tracing (perfsight.views.export's timeline file, written to a temporary directory
that is removed once sent; never into the run's folder).

Times in queries and answers are integer ns relative to the run's ``origin_ns`` (``tracks``), as
analysis/timeline_index.py explains, within its ``MAX_TIME_NS``. Bad parameters get 400 (or FastAPI's 422 for a
wrong type or for a width or limit out of range) with a message naming the parameter; an unknown run or
slice, 404.
"""
from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

import orjson
from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import FileResponse, Response
from starlette.background import BackgroundTask

from perfsight.analysis.timeline_index import MAX_TIME_NS, TimelineIndex
from perfsight.core.memo import computed
from perfsight.views.export import export_timeline
from perfsight.views.insight.results import INT64_MAX, bounded


def _json(data) -> Response:
    return Response(orjson.dumps(data), media_type="application/json")


def _time(name: str, ns: int) -> int:
    """A time parameter (ns relative to the run's origin) within the index's ``MAX_TIME_NS``."""
    return bounded(name, ns, -MAX_TIME_NS, MAX_TIME_NS)


def _track_ids(text: str | None) -> list[int] | None:
    if text is None or not text.strip():
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise HTTPException(400, f"tracks: expected comma-separated track ids, got {text!r}") from None


def router(get_run: Callable) -> APIRouter:
    """The timeline routes; ``get_run(run_id)`` returns an object with the run's ``.tables``, or raises
    HTTPException(404)."""
    api = APIRouter(prefix="/api/runs/{run_id}/timeline")

    def index(run_id: str) -> TimelineIndex:
        run = get_run(run_id)
        return computed(TimelineIndex, run.tables)

    def answer(call, *args, **kwargs) -> Response:
        try:
            return _json(call(*args, **kwargs))
        except ValueError as error:
            raise HTTPException(400, str(error)) from None

    @api.get("/tracks")
    def tracks(run_id: str) -> Response:
        return _json(index(run_id).tracks())

    @api.get("/window")
    def window(run_id: str, t0: int, t1: int, width: int = Query(ge=1, le=10000),
               tracks: str | None = None) -> Response:
        return answer(index(run_id).window, _time("t0", t0), _time("t1", t1), width, _track_ids(tracks))

    @api.get("/search")
    def search(run_id: str, q: str = Query(min_length=1, max_length=1000), after: int = 0,
               after_id: int | None = None, direction: str = Query("next", pattern="^(next|prev)$"),
               limit: int = Query(1, ge=1, le=1000)) -> Response:
        if after_id is not None:
            bounded("after_id", after_id, -INT64_MAX - 1)
        return answer(index(run_id).search, q, _time("after", after), direction, limit, after_id)

    @api.get("/slice/{slice_id}")
    def slice_detail(run_id: str, slice_id: int) -> Response:
        try:
            return _json(index(run_id).slice_detail(bounded("slice_id", slice_id, -INT64_MAX - 1)))
        except KeyError:
            raise HTTPException(404, f"no slice with id {slice_id} in run {run_id!r}") from None

    @api.get("/area")
    def area(run_id: str, t0: int, t1: int, tracks: str = Query(min_length=1),
             limit: int = Query(1000, ge=1, le=10000)) -> Response:
        return answer(index(run_id).area_summary, _track_ids(tracks) or [], _time("t0", t0), _time("t1", t1), limit)

    @api.get("/critical_path")
    def critical_path(run_id: str, step: int | None = None, rank: int | None = None) -> Response:
        """The slices on the critical path of the run's windows (``critical_path.critical_path``; ``step``,
        ``rank`` only those) and the windows, times relative to the run's origin."""
        from perfsight.analysis.critical_path import critical_path, windows

        run, origin = get_run(run_id), index(run_id).origin_ns
        path = computed(critical_path, run.tables, step=step, rank=rank)
        on_path = sorted({i for i in path.column("slice_id").to_pylist() if i is not None})
        found = computed(windows, run.tables, step=step, rank=rank)
        return _json({"slice_ids": on_path,
                      "windows": [{"rank": w.rank, "step": w.step, "label": w.label, "start_ns": w.start_ns - origin,
                                   "end_ns": w.end_ns - origin} for w in found]})

    @api.get("/download")
    def download(run_id: str) -> FileResponse:
        run = get_run(run_id)
        folder = Path(tempfile.mkdtemp(prefix="perfsight-timeline-"))
        try:
            stamp = time.strftime("%Y%m%d%H%M%S")
            written = [p for p in export_timeline(run.tables, folder, stamp=stamp) if p.name.startswith("msprof_")]
            if not written:
                raise HTTPException(404, f"run {run_id!r} has nothing to put on a timeline")
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("._") or "run"
        return FileResponse(written[0], media_type="application/json", filename=f"{name}_timeline_{stamp}.json",
                            background=BackgroundTask(shutil.rmtree, folder, ignore_errors=True))

    return api
