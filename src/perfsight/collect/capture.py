"""``perfsight capture RUN_DIR``: ask an armed job to profile some steps, and wait until they are captured.

The requester's half of the protocol of ``collect/livefiles.py``. It holds the live folder's ``capture.lock``
(a second ``perfsight capture`` on the same job is refused, naming the first), finds the ranks armed (alive:
heard from within ``livefiles.STALE_S``), picks the first step every asked rank can still reach
(``livefiles.first_common_step``), writes the request and follows the ranks' answers: a rank that was too far
along (``missed``) makes it ask again further ahead (``MAX_ASKS`` times at most, the lead doubled each time);
a refusal, a failed capture, or an asked rank that ends or falls silent first is a CaptureError saying which
rank and why. It always withdraws its request and removes the answers to it (its own files in perfsight's
live folder) before it returns. The clock and the pause between looks are injected for the tests.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from perfsight import options as options_mod
from perfsight.collect import livefiles
from perfsight.core import pidlock
from perfsight.core.errors import PerfsightError

#: how many times a capture is asked for before the ranks' missing it is an error
MAX_ASKS = 4
#: how often the requester reads the ranks' answers and statuses
LOOK_S = 0.1


class CaptureError(PerfsightError):
    """A capture could not be taken: no armed job, a capture already running, a refusal, or the job ended."""


@dataclass(frozen=True)
class Captured:
    """A capture taken: its folder, its steps, and each rank's run directory."""

    folder: Path
    start_step: int
    last_step: int
    runs: dict[int, Path]


@dataclass(frozen=True)
class Progress:
    """Where a capture stands, for a progress display: the steps asked for and each asked rank's last step."""

    start_step: int
    last_step: int | None
    ranks_at: dict[int, int | None]
    answers: dict[int, str]


def capture(root: Path, *, steps: int | None = None, ranks: list[int] | None = None,
            options: dict | None = None, on_progress: Callable[[Progress], None] | None = None,
            clock: Callable[[], int] = time.time_ns, pause: Callable[[float], None] = time.sleep) -> Captured:
    """Ask the job armed in output folder ``root`` to capture ``steps`` steps (None: its ``capture_steps``) on
    ``ranks`` (None: every rank armed) with profiling ``options``, and wait for it (module docstring)."""
    live = livefiles.live_dir(root)
    if not live.is_dir():
        raise CaptureError(f"{root}: no armed job here (no {live.name}/ folder); arm one with perfsight run "
                           "--on-demand -- python train.py")
    options = dict(options or {})
    _check_options(options)
    try:
        return _asked_and_followed(live, steps, ranks, options, on_progress, clock, pause)
    except OSError as error:
        raise CaptureError(f"{live}: cannot write the request or read the answers ({error.strerror or error})") \
            from None


def _asked_and_followed(live: Path, steps, ranks, options, on_progress, clock, pause) -> Captured:
    with _held(live):
        asked = _asked_ranks(live, ranks, clock())
        lead = livefiles.LEAD_S
        for _ in range(MAX_ASKS):
            request = livefiles.Request(livefiles.new_request_id(clock()),
                                        livefiles.first_common_step(asked, clock(), lead), steps,
                                        None if ranks is None else tuple(sorted(set(ranks))), options, clock(),
                                        os.getpid())
            try:
                livefiles.write_request(live, request)
                result = _follow(live, request, [status.rank for status in asked], on_progress, clock, pause)
            finally:
                _withdraw(live, request, [status.rank for status in asked])
            if isinstance(result, Captured):
                return result
            lead *= 2
            asked = _further_along(_asked_ranks(live, ranks, clock()), result)
    raise CaptureError(f"the ranks were past the start step each of {MAX_ASKS} times they were asked (their steps "
                       "are faster than the request travels?); try again")


def _check_options(options: dict) -> None:
    """The request's options resolve (a CaptureError naming the bad key before anything is asked)."""
    try:
        options_mod.resolve(options, source="cli")
    except options_mod.OptionError as error:
        raise CaptureError(f"the capture's options: {error}") from None


@contextmanager
def _held(live: Path) -> Iterator[None]:
    """The live folder's capture lock, held for a block (a CaptureError when another capture holds it)."""
    try:
        with pidlock.holding(live / livefiles.LOCK, wait=False):
            yield
    except pidlock.LockHeld as held:
        raise CaptureError(f"{live.parent}: a capture is already running (perfsight capture, pid {held.holder}); "
                           "wait for it to finish") from None


def _asked_ranks(live: Path, ranks: list[int] | None, now_ns: int) -> list[livefiles.RankStatus]:
    """The statuses of the ranks asked (every rank alive when ``ranks`` is None); a CaptureError when none is
    armed, an asked rank is not, or one is capturing already."""
    statuses = livefiles.read_statuses(live)
    alive = [status for status in statuses if status.alive(now_ns)]
    if not alive:
        seen = "; ".join(status.described(now_ns) for status in statuses) or "no rank has armed here"
        raise CaptureError(f"{live.parent}: no armed job is running ({seen})")
    by_rank = {status.rank: status for status in alive}
    if ranks is not None:
        missing = sorted(set(ranks) - set(by_rank))
        if missing:
            raise CaptureError(f"{live.parent}: rank {', '.join(map(str, missing))} not armed (armed: "
                               f"{', '.join(map(str, sorted(by_rank)))})")
    asked = [by_rank[rank] for rank in sorted(set(ranks))] if ranks is not None else alive
    busy = [status for status in asked if status.state == livefiles.CAPTURING]
    if busy:
        raise CaptureError(f"{live.parent}: a capture is already running on rank {busy[0].rank}; wait for it to "
                           "finish")
    return asked


def _further_along(statuses: list[livefiles.RankStatus], missed: dict[int, dict]) -> list[livefiles.RankStatus]:
    """``statuses`` with where the ranks that missed a request said they were (their answers are newer than
    their status: a status is rewritten once a second)."""
    updated = []
    for status in statuses:
        said = missed.get(status.rank)
        if said is not None and isinstance(said.get("step"), int):
            status = replace(status, step=said["step"], step_end_ns=said.get("step_end_ns") or status.step_end_ns,
                             step_ns=said.get("step_ns") or status.step_ns)
        updated.append(status)
    return updated


def _follow(live: Path, request: livefiles.Request, ranks: list[int], on_progress, clock,
            pause) -> Captured | dict[int, dict]:
    """Follow the ranks' answers to ``request`` until each has captured (the Captured), some missed it (their
    answers, by rank), or a CaptureError."""
    while True:
        answers = {rank: answer for rank in ranks if (answer := livefiles.read_response(live, request.id, rank))}
        states = {rank: answer["state"] for rank, answer in answers.items()}
        for rank, answer in answers.items():
            if answer["state"] in (livefiles.REFUSED, livefiles.FAILED):
                raise CaptureError(f"rank {rank} {answer['state']} the capture: {answer.get('message')}")
        if livefiles.MISSED in states.values():
            return {rank: answer for rank, answer in answers.items() if answer["state"] == livefiles.MISSED}
        last = next((answer["last_step"] for answer in answers.values() if isinstance(answer.get("last_step"), int)),
                    None)
        if len(states) == len(ranks) and set(states.values()) == {livefiles.DONE}:
            first = next(iter(answers.values()))
            return Captured(Path(first["folder"]), request.start_step, first["last_step"],
                            {rank: Path(answer["run"]) for rank, answer in answers.items()})
        now = clock()
        statuses = {status.rank: status for status in livefiles.read_statuses(live)}
        for rank in ranks:
            status = statuses.get(rank)
            if states.get(rank) != livefiles.DONE and (status is None or not status.alive(now)):
                said = status.described(now) if status is not None else f"rank {rank}: its status is gone"
                raise CaptureError(f"the job ended before the capture was taken ({said})")
        if on_progress is not None:
            on_progress(Progress(request.start_step, last,
                                 {rank: statuses[rank].step if rank in statuses else None for rank in ranks}, states))
        pause(LOOK_S)


def _withdraw(live: Path, request: livefiles.Request, ranks: list[int]) -> None:
    """Remove the request (when it is still this one) and the ranks' answers to it."""
    path = live / livefiles.REQUEST
    try:
        if livefiles.parse_request(path.read_bytes()).id == request.id:
            path.unlink()
    except (OSError, livefiles.BadRequest):
        pass
    for rank in ranks:
        livefiles.response_path(live, request.id, rank).unlink(missing_ok=True)
