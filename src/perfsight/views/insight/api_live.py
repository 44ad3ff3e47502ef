"""The Live page's route, ``/api/live``: every armed job under the base dir (``discovery.live_folders``), each
rank's state, pace and recent step times (``livefiles.step_times``, columnar), and every capture its ranks
took or are taking, each with the run-list entry that opens it: its folder when the folder is a job (ranks
side by side), else its rank's run; null until the library has found it. Read from the live files at each
request: a job's captures appear as they land."""
from __future__ import annotations

import time
from pathlib import Path

from fastapi import APIRouter

from perfsight.collect import livefiles
from perfsight.views.insight.discovery import live_folders, run_id
from perfsight.views.insight.library import RunLibrary
from perfsight.views.insight.responses import json_response


def router(library: RunLibrary) -> APIRouter:
    routes = APIRouter()
    base = library.base.resolve()

    @routes.get("/api/live")
    def live():
        now = time.time_ns()
        listed = {entry["id"] for entry in library.entries()}
        return json_response({"jobs": [_job(base, folder, now, listed) for folder in live_folders(base)]})

    return routes


def _job(base: Path, folder: Path, now_ns: int, listed: set[str]) -> dict:
    ranks, captures = [], []
    for status in livefiles.read_statuses(folder):
        ranks.append({"rank": status.rank, "state": status.state, "alive": status.alive(now_ns),
                      "described": status.described(now_ns), "step": status.step, "step_ns": status.step_ns,
                      "host": status.host, "pid": status.pid, "job": status.job,
                      "steps": livefiles.step_times(folder, status.rank)})
        running = [{**status.capture, "status": "capturing"}] if status.capture else []
        captures += [{**capture, "rank": status.rank, "entry": _entry(base, capture, listed)}
                     for capture in [*status.captures, *running]]
    return {"path": _relative(base, folder.parent) or ".", "ranks": ranks,
            "captures": sorted(captures, key=lambda c: (c.get("start_step") or 0, c["rank"]))}


def _relative(base: Path, path: Path) -> str | None:
    try:
        return path.resolve().relative_to(base).as_posix()
    except (OSError, ValueError):
        return None


def _entry(base: Path, capture: dict, listed: set[str]) -> str | None:
    """The run-list id of a capture: its folder's (a job), else its run's; None when neither is listed."""
    for path in (capture.get("folder"), capture.get("run")):
        relative = _relative(base, Path(path)) if isinstance(path, str) else None
        if relative and run_id(relative) in listed:
            return run_id(relative)
    return None
