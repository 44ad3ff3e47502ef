"""The Live page's route over a real armed job (tests/live_job.py): each rank's state and recent step times as
its steps file holds them, and each capture with its steps, reason and the run-list entry of its folder."""
from __future__ import annotations

from tests.live_job import armed_training

from .conftest import Served


def test_the_live_route_gives_the_ranks_steps_and_captures_as_the_files_hold_them(tmp_path):
    job = tmp_path / "job"
    first, second = armed_training(job, captures=2, steps=3)
    with Served(tmp_path) as served:
        [live] = served.client.get("/api/live").json()["jobs"]
        entries = {r["path"]: r["id"] for r in served.library.entries()}
    assert live["path"] == "job"
    [rank] = live["ranks"]
    assert (rank["rank"], rank["state"], rank["alive"]) == (0, "ended", False)
    # the oracle: the steps file itself
    rows = [line.split(",") for line in (job / "perfsight_live" / "rank0.steps.csv").read_text().splitlines()[1:]]
    assert rank["steps"]["step"] == [int(r[0]) for r in rows]
    assert rank["steps"]["step_ns"] == [int(r[2]) - int(r[1]) for r in rows]
    assert rank["step"] == int(rows[-1][0])
    captures = live["captures"]
    assert [(c["start_step"], c["last_step"], c["status"]) for c in captures] == [
        (first.start_step, first.last_step, "complete"), (second.start_step, second.last_step, "complete")]
    for capture, taken in zip(captures, (first, second)):
        assert capture["rank"] == 0 and capture["reason"].startswith("requested by perfsight capture")
        [run] = taken.runs.values()                   # one rank: its run is the capture's entry in the run list
        assert capture["entry"] == entries[f"job/{taken.folder.name}/{run.name}"]


def test_no_armed_job_no_live_jobs(tmp_path):
    (tmp_path / "empty").mkdir()
    with Served(tmp_path) as served:
        assert served.client.get("/api/live").json() == {"jobs": []}
