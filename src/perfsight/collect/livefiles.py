"""The files of an armed job and the protocol between its ranks and ``perfsight capture``: the one definition
both sides read and write.

An armed process (``collect/ondemand.py``) keeps, in ``<output>/perfsight_live/`` (``layout.LIVE_DIR``)::

    perfsight_live.json       says the folder is perfsight's (``LIVE_MARKER``)
    rank{R}.json              its status (``STATUS_FORMAT``): pid, host, rank, world size, job, state (armed,
                              capturing, ended), its last finished step, when it ended and the recent steps'
                              median time, a heartbeat, the trigger's settings and every capture it took
    rank{R}.steps.csv         its recent steps, one line per step as a run's steps.csv (``steps.HEADER``), rolled
    rank{R}.steps.1.csv       over to this file every ``ROLLING_STEPS`` lines (two files: bounded, and never
                              empty of the last steps)
    rank{R}.log               what went wrong with its own files (the training never stops for it)
    request.json              the capture asked for (``REQUEST_FORMAT``), written whole by ``perfsight capture``
    responses/{id}.rank{R}.json   rank R's answers to request {id}: accepted, refused, missed, done, failed
    capture.lock              held (``flock``) by the ``perfsight capture`` running

A request names its ``id``, the ``start_step`` every rank begins at, how many ``steps``, the ``ranks`` (null:
every rank armed) and profiling ``options``. ``perfsight capture`` picks the start (``first_common_step``): the
first step every rank can still reach once it has seen the request, from each rank's last step and pace; a
rank that sees it too late answers ``missed`` and the capture asks again, further ahead. A rank that cannot
parse a request answers ``refused`` with the reason, and trains on. Each capture is an ordinary run directory,
one per rank, in a folder of the output folder named for the capture (``capture_folder``): ``capture_{id}`` on
request, ``slow_step_{S}_{job}`` when the trigger fired on step S; the ranks of one capture share it, so the
folder is a job ``perfsight cluster`` reads.

Nothing here travels over a network port or outside the output folder. Status, request and answers are JSON
files replaced whole (``write_json_atomic``): a reader never sees half of one.
"""
from __future__ import annotations

import json
import math
import re
import secrets
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from perfsight.collect.steps import HEADER as STEPS_HEADER
from perfsight.core import layout
from perfsight.core.files import read_regular
from perfsight.core.json_depth import loads_bounded
from perfsight.core.jsonfile import write_json_atomic

STATUS_FORMAT = "perfsight-live"
REQUEST_FORMAT = "perfsight-capture-request"
#: says the live folder is perfsight's (nothing in a folder of that name without it is ever replaced)
LIVE_MARKER = "perfsight_live.json"
REQUEST = "request.json"
RESPONSES = "responses"
LOCK = "capture.lock"
#: an armed rank's states
ARMED, CAPTURING, ENDED = "armed", "capturing", "ended"
#: a rank's answers to a request: accepted, refused or missed before any profiling; done or failed after it
ACCEPTED, REFUSED, MISSED, DONE, FAILED = "accepted", "refused", "missed", "done", "failed"
#: how often an armed process looks for a request (and writes out its step lines), and rewrites its status at
#: least (its heartbeat). Twice a second: each wake-up of the watcher takes a core from a training that uses
#: them all (at 10 a second, 2-thread steps ran 1-2% slower armed; bench/RESULTS.md)
POLL_S = 0.5
HEARTBEAT_S = 1.0
#: a rank whose heartbeat is older than this is gone (its process died without saying so)
STALE_S = 10.0
#: the time a request is given to reach every rank before the start step (a rank looks every POLL_S)
LEAD_S = 1.5
#: lines of a rank's steps file before it rolls over (two files of at most this many lines)
ROLLING_STEPS = 1000
#: the folder of a capture taken on request
REQUESTED_PREFIX = "capture_"
_REQUEST_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")
#: the id a rank answers under when a request has none it can use
UNREADABLE = "unreadable"


def live_dir(root: Path) -> Path:
    return Path(root) / layout.LIVE_DIR


def status_path(live: Path, rank: int) -> Path:
    return live / f"rank{rank}.json"


def steps_paths(live: Path, rank: int) -> tuple[Path, Path]:
    """A rank's steps file and the one it rolled over to (older steps)."""
    return live / f"rank{rank}.steps.csv", live / f"rank{rank}.steps.1.csv"


def response_path(live: Path, request_id: str, rank: int) -> Path:
    return live / RESPONSES / f"{request_id}.rank{rank}.json"


def new_request_id(now_ns: int | None = None) -> str:
    """``YYYYmmdd-HHMMSS-<hex>``: sortable, unique, and a folder name."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(now_ns // 1_000_000_000)) + "-" + secrets.token_hex(3)


def capture_folder(root: Path, *, request_id: str | None = None, slow_step: int | None = None,
                   job: str = "") -> Path:
    """The folder of a capture's runs (module docstring)."""
    if request_id is not None:
        return Path(root) / f"{REQUESTED_PREFIX}{request_id}"
    return Path(root) / f"slow_step_{slow_step}_{job}"


@dataclass(frozen=True)
class Request:
    """A capture asked of an armed job (module docstring)."""

    id: str
    start_step: int
    steps: int | None               # None: as many as the rank's capture_steps option
    ranks: tuple[int, ...] | None
    options: dict = field(default_factory=dict)
    requested_ns: int = 0
    pid: int = 0

    def wants(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    def as_dict(self) -> dict:
        return {"format": REQUEST_FORMAT, "id": self.id, "start_step": self.start_step, "steps": self.steps,
                "ranks": None if self.ranks is None else list(self.ranks), "options": self.options,
                "requested_ns": self.requested_ns, "pid": self.pid}


class BadRequest(ValueError):
    """A request a rank cannot parse: the message names the key, the value and what is allowed."""


def _request_object(text: str | bytes) -> dict:
    try:
        data = loads_bounded(text, REQUEST)
    except ValueError as error:
        raise BadRequest(f"{REQUEST}: not readable JSON ({error})") from None
    if not isinstance(data, dict) or data.get("format") != REQUEST_FORMAT:
        raise BadRequest(f"{REQUEST}: not a capture request (expected an object with \"format\": "
                         f"\"{REQUEST_FORMAT}\")")
    return data


def _request_id(data: dict) -> str:
    request_id = data.get("id")
    if not isinstance(request_id, str) or not _REQUEST_ID.fullmatch(request_id):
        raise BadRequest(f"{REQUEST}: id {json.dumps(request_id)} is not allowed; allowed: 1-64 letters, digits, "
                         "'-' or '_'")
    return request_id


def parse_request_id(text: str | bytes) -> str:
    """The id of a request that may not parse as a whole (to answer it under); BadRequest when it has none."""
    return _request_id(_request_object(text))


def current_request_id(live: Path) -> str | None:
    """The id of the request asked now (``REQUEST``); None when there is none or it has no usable id."""
    try:
        return parse_request_id(read_regular(live / REQUEST))
    except (OSError, BadRequest):
        return None


def parse_request(text: str | bytes) -> Request:
    """A request file's text as a Request; BadRequest saying what is wrong."""
    data = _request_object(text)

    def integer(key: str, low: int) -> int:
        value = data.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise BadRequest(f"{REQUEST}: {key} {json.dumps(value)} is not allowed; allowed: an integer >= {low}")
        return value

    request_id = _request_id(data)
    ranks = data.get("ranks")
    if ranks is not None and not (isinstance(ranks, list) and ranks and all(
            isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0 for rank in ranks)):
        raise BadRequest(f"{REQUEST}: ranks {json.dumps(ranks)} is not allowed; allowed: null (every rank) or a "
                         "non-empty list of ranks >= 0")
    options = data.get("options", {})
    if not isinstance(options, dict):
        raise BadRequest(f"{REQUEST}: options {json.dumps(options)} is not allowed; allowed: an object of "
                         "profiling options")
    return Request(request_id, integer("start_step", 0), None if data.get("steps") is None else integer("steps", 1),
                   None if ranks is None else tuple(sorted(set(ranks))), options,
                   _int_or_zero(data.get("requested_ns")), _int_or_zero(data.get("pid")))


def _int_or_zero(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def write_request(live: Path, request: Request) -> None:
    write_json_atomic(live / REQUEST, request.as_dict())


@dataclass(frozen=True)
class RankStatus:
    """An armed rank as its status file says (module docstring); ``step`` is its last finished step (None
    before its first), ``step_ns`` the median time of its recent steps (None before it has any)."""

    rank: int
    state: str
    pid: int
    host: str
    job: str
    step: int | None
    step_end_ns: int | None
    step_ns: int | None
    heartbeat_ns: int
    path: Path
    started_ns: int = 0
    captures: tuple[dict, ...] = ()
    capture: dict | None = None       # the capture planned or running

    def alive(self, now_ns: int) -> bool:
        """Armed or capturing, heard from within STALE_S, and (on this host) its process still there."""
        return (self.state in (ARMED, CAPTURING) and now_ns - self.heartbeat_ns <= STALE_S * 1e9
                and not (self.host == socket.gethostname() and not psutil.pid_exists(self.pid)))

    def described(self, now_ns: int) -> str:
        """``rank 1: armed, at step 57`` / ``rank 1: ended after step 99`` / ``rank 1: silent for 42 s``."""
        where = "before its first step" if self.step is None else f"at step {self.step}"
        if self.state == ENDED:
            return f"rank {self.rank}: ended {where.replace('at', 'after')}"
        if not self.alive(now_ns):
            return (f"rank {self.rank}: gone {where} (its process {self.pid} on {self.host} is not running, or has "
                    f"not been heard from for {(now_ns - self.heartbeat_ns) / 1e9:.0f} s)")
        return f"rank {self.rank}: {self.state}, {where}"


def read_statuses(live: Path) -> list[RankStatus]:
    """Every rank status file in ``live`` that reads as one, by rank (a damaged one is skipped: a rank's file
    is replaced whole, so only a stranger's file can be damaged)."""
    found = []
    for path in sorted(live.glob("rank*.json")):
        try:
            data = loads_bounded(read_regular(path), str(path))
            found.append(RankStatus(int(data["rank"]), str(data["state"]), int(data["pid"]), str(data["host"]),
                                    str(data.get("job", "")), _optional_int(data.get("step")),
                                    _optional_int(data.get("step_end_ns")), _optional_int(data.get("step_ns")),
                                    int(data["heartbeat_ns"]), path, int(data.get("started_ns") or 0),
                                    tuple(data.get("captures") or ()), data.get("capture") or None))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(found, key=lambda status: status.rank)


def _optional_int(value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{value!r} is not an integer")
    return value


def first_common_step(ranks: list[RankStatus], now_ns: int, lead_s: float = LEAD_S) -> int:
    """The first step every rank of ``ranks`` can still begin after ``lead_s`` from ``now_ns``: each rank's
    last finished step, plus the steps its pace (``step_ns``) finishes in the time since and the lead, plus the
    one it is then in; the largest over the ranks."""
    reach = []
    for status in ranks:
        last = -1 if status.step is None else status.step
        ahead = 0
        if status.step_ns and status.step_end_ns is not None:
            ahead = max(0, math.floor((now_ns + lead_s * 1e9 - status.step_end_ns) / status.step_ns))
        reach.append(last + 2 + ahead)
    return max(reach)


def write_response(live: Path, request_id: str, rank: int, state: str, message: str, **facts) -> None:
    """Rank ``rank``'s answer to request ``request_id`` (module docstring)."""
    (live / RESPONSES).mkdir(exist_ok=True)
    write_json_atomic(response_path(live, request_id, rank),
                      {"request": request_id, "rank": rank, "state": state, "message": message, **facts})


def read_response(live: Path, request_id: str, rank: int) -> dict | None:
    """Rank ``rank``'s latest answer to ``request_id``; None before it answers."""
    try:
        data = loads_bounded(read_regular(response_path(live, request_id, rank)), "response")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("request") == request_id else None


def step_times(live: Path, rank: int) -> dict[str, list[int]]:
    """Rank ``rank``'s recent steps, columnar: ``step``, ``end_ns`` and ``step_ns`` (its wall time), oldest
    first."""
    rows = read_steps(live, rank)
    return {"step": [row[0] for row in rows], "end_ns": [row[2] for row in rows],
            "step_ns": [row[2] - row[1] for row in rows]}


def read_steps(live: Path, rank: int) -> list[tuple[int, int, int, int]]:
    """Rank ``rank``'s recent steps as (step, start_ns, end_ns, data_wait_ns), oldest first (both files; a line
    being written, or damaged, is skipped)."""
    rows = []
    newer, older = steps_paths(live, rank)
    for path in (older, newer):
        try:
            text = read_regular(path).decode("utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if line.strip() == STEPS_HEADER.strip():
                continue
            fields = line.split(",")
            try:
                rows.append((int(fields[0]), int(fields[1]), int(fields[2]), int(fields[3])))
            except (ValueError, IndexError):
                continue
    return rows
