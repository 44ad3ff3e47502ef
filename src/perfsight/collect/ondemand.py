"""An armed job (option ``on_demand``): training runs with the profiler off, each step's time recorded, and
captures taken when ``perfsight capture`` asks or the slow-step trigger fires.

``Armed`` is what ``Profiler(on_demand=True)`` (and the boot hook with ``on_demand`` or ``trigger`` set)
runs instead of collecting. Per step it adds one line to the buffer of the rank's steps file and looks at what
it was asked (``step``: microseconds, no system call); a thread looks for requests and flushes the steps file
every ``livefiles.POLL_S``, and rewrites the rank's status every ``livefiles.HEARTBEAT_S`` (the files and the
protocol: ``collect/livefiles.py``). A
request is answered at once (accepted, refused with the reason, or missed when the rank is already past its
start step); an accepted one, or a trigger firing (``collect/trigger.py``), becomes a capture: at the boundary
before its first step a Profiler (made by the ``make_profiler`` the caller gives) collects its steps into a run
directory of its own in the capture's folder, with the steps numbered as the job numbers them and the reason
in its manifest (``capture``); after its last step that run is closed and the rank is armed again.

Nothing here stops the training: a failure of the armed process's own work (its steps file on a full disk)
disarms it (logged in ``rank{R}.log`` of the live folder), and a capture that fails (its Profiler's
failsafe) is reported failed while the rank stays armed.
"""
from __future__ import annotations

import os
import socket
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from perfsight import options as options_mod
from perfsight.collect import livefiles
from perfsight.collect.failsafe import Failsafe
from perfsight.collect.rundir import distributed_identity, resolve_output_root
from perfsight.collect.steps import DataLoaderTimer, StepRecorder
from perfsight.collect.trigger import Firing, SlowStepTrigger
from perfsight.core.errors import OptionError, OutputError, PerfsightError
from perfsight.core.files import read_regular
from perfsight.core.jsonfile import write_json_atomic
from perfsight.options.specs import KEYS

#: the armed options a capture's own profiler does not take (they say how to arm, not what to collect)
ARMING_OPTIONS = ("output", "start", "steps", "epochs", "on_demand", "trigger", "capture_steps", "trigger_warmup",
                  "trigger_window", "trigger_cooldown", "trigger_max")
#: the recent steps whose median is a rank's pace in its status (the requester's estimate of its next steps)
PACE_STEPS = 9
#: set by ``perfsight run`` for the processes of the job it launches (``job_id``)
JOB_ID_ENV = "PERFSIGHT_JOB_ID"


class CaptureProfiler(Protocol):
    """What an armed rank needs of a capture's profiler (``Profiler``): its run directory, step, close."""

    run: Any

    def step(self) -> None: ...

    def close(self) -> None: ...


#: makes the profiler of a capture: (its options, its first step number) -> a started Profiler
MakeProfiler = Callable[["options_mod.Options", int], CaptureProfiler]


@dataclass
class Capture:
    """A capture planned or running on this rank: its steps, folder, why, and (once begun) its profiler."""

    start: int
    last: int
    folder: Path
    reason: str
    options: "options_mod.Options"
    request_id: str | None = None
    firing: Firing | None = None
    profiler: CaptureProfiler | None = None


def job_id(environ=os.environ) -> str:
    """What names this job in the folders of its trigger's captures, alike on its every rank: ``perfsight
    run``'s id (``JOB_ID_ENV``), else torchrun's run id, else its rendezvous port, else this process's id."""
    if environ.get(JOB_ID_ENV):
        return environ[JOB_ID_ENV]
    if environ.get("TORCHELASTIC_RUN_ID", "none") not in ("", "none"):
        return environ["TORCHELASTIC_RUN_ID"]
    if environ.get("MASTER_PORT"):
        return f"port{environ['MASTER_PORT']}"
    return f"pid{os.getpid()}"


def open_live_dir(root: Path) -> Path:
    """The live folder of output folder ``root``, made with its marker when missing; an OutputError when a
    folder of that name is not perfsight's."""
    live = livefiles.live_dir(root)
    marker = live / livefiles.LIVE_MARKER
    if live.exists() and not marker.is_file():
        raise OutputError(f"{live} is not a folder perfsight made (it has no {livefiles.LIVE_MARKER}); perfsight "
                          "will not write into it: move it, or give another output folder")
    live.mkdir(parents=True, exist_ok=True)
    if not marker.is_file():
        write_json_atomic(marker, {"made_by": "perfsight", "holds": "armed jobs' status, steps and requests"})
    return live


class Armed:
    """One armed process (module docstring). ``arm()`` starts watching; ``step()`` at the end of every step;
    ``close()`` at the end of training."""

    def __init__(self, options: "options_mod.Options", make_profiler: MakeProfiler, environ=os.environ):
        self.options = options
        self._make_profiler = make_profiler
        self.root = resolve_output_root(options.output, environ)
        identity = distributed_identity(environ)
        self.rank, self.world_size = identity["rank"], identity["world_size"]
        self.job = job_id(environ)
        self.live = open_live_dir(self.root)
        self._refuse_if_taken()
        self.failsafe = Failsafe(on_failure=self._disarm)
        self.failsafe.log_path = self.live / f"rank{self.rank}.log"
        newer, older = livefiles.steps_paths(self.live, self.rank)
        for stale in (newer, older):          # a previous job's steps of this rank (perfsight's own files)
            stale.unlink(missing_ok=True)
        self._recorder = StepRecorder(newer, rolling=(livefiles.ROLLING_STEPS, older), buffered=True)
        self._timer: DataLoaderTimer | None = None
        self._trigger = SlowStepTrigger(options.trigger[1], warmup=options.trigger_warmup,
                                        window=options.trigger_window, cooldown=options.trigger_cooldown,
                                        most=options.trigger_max) if options.trigger else None
        self._pace: deque[int] = deque(maxlen=PACE_STEPS)
        self._last_end_ns: int | None = None
        self._capture: Capture | None = None
        self._captures: list[dict] = []
        self._answered: set[str] = set()
        #: answers that could not be written (a full disk), by request id: tried again at each heartbeat while
        #: their request is the one asked, so that the requester is not left waiting on a rank that answered
        self._unsent: dict[str, tuple[str, str, dict]] = {}
        self._lock = threading.Lock()             # the capture planned, between the watcher and the steps
        self._status_lock = threading.Lock()      # one writer of the status at a time, each from the state now
        self._wake = threading.Event()            # the status changed: rewrite it now
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self._state = livefiles.ARMED
        self._started_ns = time.time_ns()
        self._step_pending = False
        self._flush_failed = False

    # --- the training thread ------------------------------------------------------------------

    def arm(self) -> None:
        """Start watching for requests (once)."""
        if self._watcher is not None or self.failsafe.failed:
            return
        if self.options.data_process:
            self._timer = DataLoaderTimer(self._recorder, before_fetch=self.take_pending_step)
            self._timer.install()
        self._write_status()
        self._watcher = threading.Thread(target=self._watch, name="perfsight-armed", daemon=True)
        self._watcher.start()

    def step(self) -> None:
        """The end of a step: record it, and begin, continue or end a capture."""
        if not self.failsafe.failed:
            self.failsafe.run("recording a step", self._step)

    def step_soon(self) -> None:
        """As ``Profiler.step_soon``: the step is taken at the next safe point."""
        self._step_pending = True

    def take_pending_step(self) -> None:
        if self._step_pending:
            self._step_pending = False
            self.step()

    def close(self) -> None:
        """End the armed state: a running capture is closed with the steps it has, the rank said ended."""
        self.take_pending_step()
        capture = self._capture
        if capture is not None and capture.profiler is not None:
            self._finish(capture)
        self._state = livefiles.ENDED
        self._stop_watching()
        if self._timer is not None:
            self._timer.uninstall()
            self._timer = None
        try:
            self._recorder.close()
            self._write_status()
        except OSError as error:
            self.failsafe.note(f"closing the armed rank's files failed: {error}")

    @property
    def capturing(self) -> bool:
        return self._capture is not None and self._capture.profiler is not None

    def _step(self) -> None:
        closed = self._recorder.finish_step()
        start_ns, end_ns = self._recorder.last_span or (0, 0)
        capture = self._capture
        if capture is not None and capture.profiler is not None:
            capture.profiler.step()
            if closed >= capture.last:
                self._finish(capture)
            return                                      # a profiled step counts in neither pace nor trigger
        self._pace.append(end_ns - start_ns)
        self._last_end_ns = end_ns
        if capture is not None:
            if closed + 1 == capture.start:
                self._begin(capture)
            elif closed + 1 > capture.start:
                self._drop(capture, livefiles.MISSED, f"rank {self.rank} was past step {capture.start} when it "
                                                      "came to begin", **self._where())
        elif self._trigger is not None and (firing := self._trigger.observe(closed, end_ns - start_ns)):
            folder = livefiles.capture_folder(self.root, slow_step=closed, job=self.job)
            options = self._capture_options({}, closed + 1, closed + self.options.capture_steps, folder)
            capture = Capture(closed + 1, closed + self.options.capture_steps, folder, firing.reason, options,
                              firing=firing)
            with self._lock:
                self._capture = capture
            self._begin(capture)

    def _begin(self, capture: Capture) -> None:
        """Start the capture's profiler at the boundary before its first step."""
        try:
            capture.folder.mkdir(parents=True, exist_ok=True)
            profiler = self._make_profiler(capture.options, capture.start)
        except (PerfsightError, OSError) as error:
            self._drop(capture, livefiles.FAILED, f"its profiler could not start: {error}")
            return
        capture.profiler = profiler
        if profiler.run is not None:
            profiler.run.update(capture=self._capture_facts(capture))
        self._state = livefiles.CAPTURING
        self._wake.set()

    def _finish(self, capture: Capture) -> None:
        """Close the capture's run, record it and answer its request; armed again."""
        profiler = capture.profiler
        assert profiler is not None, "a capture is finished only once begun"
        profiler.close()
        run = profiler.run
        manifest = run.manifest if run is not None else {}
        status = manifest.get("status", "failed")
        record = {**self._capture_facts(capture), "run": str(run.path) if run is not None else None,
                  "status": status, "steps_collected": manifest.get("steps_collected", []),
                  "errors": manifest.get("errors", [])}
        self._captures.append(record)
        if self._trigger is not None:
            self._trigger.capture_ended(capture.last)
        with self._lock:
            self._capture = None
        self._state = livefiles.ARMED
        self._write_status()                    # armed again before the answer: a next request finds it so
        whole = status == "complete" and self._recorder.step > capture.last
        said = (f"captured steps {capture.start}-{capture.last}" if whole else
                f"the capture of steps {capture.start}-{capture.last} {status}: {'; '.join(record['errors'])}"
                if status != "complete" else
                f"the job ended after step {self._recorder.step - 1}, before the capture's last step "
                f"{capture.last}; the steps it took are kept")
        if capture.request_id is not None:
            self._answer(capture.request_id, livefiles.DONE if whole else livefiles.FAILED,
                         f"{said} in {record['run']}", **record)
        print(f"perfsight: rank {self.rank} {said} in {record['run']} ({capture.reason})", file=sys.stderr)
        self._wake.set()

    def _where(self) -> dict:
        """Where the rank is (a missed request's answer, from which the requester asks again further ahead):
        its last finished step, when, and its pace."""
        return {"step": self._recorder.step - 1, "step_end_ns": self._last_end_ns,
                "step_ns": int(statistics.median(self._pace)) if self._pace else None}

    def _drop(self, capture: Capture, state: str, why: str, **facts) -> None:
        with self._lock:
            if self._capture is capture:
                self._capture = None
        if capture.request_id is not None:
            self._answer(capture.request_id, state, why, start_step=capture.start, last_step=capture.last, **facts)
        else:
            self.failsafe.note(f"the capture of steps {capture.start}-{capture.last} ({capture.reason}): {why}")
        self._state = livefiles.ARMED
        self._wake.set()

    def _capture_facts(self, capture: Capture) -> dict:
        return {"folder": str(capture.folder), "start_step": capture.start, "last_step": capture.last,
                "reason": capture.reason, "request": capture.request_id,
                "trigger": capture.firing.as_dict() if capture.firing else None}

    def _capture_options(self, asked: dict, start: int, last: int, folder: Path) -> "options_mod.Options":
        """The options of a capture's profiler: the armed process's own (without ``ARMING_OPTIONS``), those the
        request ``asked`` for over them, its folder and its steps. OptionError when they do not resolve."""
        own = {key: value for key, value in self.options.given.items()
               if KEYS[key][0].name not in ARMING_OPTIONS}
        for key in asked:
            if key in KEYS and KEYS[key][0].name in ARMING_OPTIONS:
                raise OptionError(f"{key}: not an option of a capture (it says how the job is armed); a request "
                                  "may give profiling options only")
        asked_names = {KEYS[key][0].name for key in asked if key in KEYS}
        own = {key: value for key, value in own.items() if KEYS[key][0].name not in asked_names}
        return options_mod.resolve({**own, **asked, "output": str(folder), "steps": [start, last],
                                    "on_demand": False}, source="api")

    # --- the watcher thread -------------------------------------------------------------------

    def _watch(self) -> None:
        """The watcher thread's loop; a failure of its own (a bug) disarms the rank through the failsafe, and the
        training goes on."""
        state: dict = {"seen": None, "next_beat": 0.0}
        while not self._stopping.is_set() and not self.failsafe.failed:
            self.failsafe.run("watching for requests", self._watch_once, state)
            self._wake.wait(livefiles.POLL_S)

    def _watch_once(self, state: dict) -> None:
        state["seen"] = self._look_for_request(state["seen"])
        self._flush_steps()
        if self._wake.is_set() or time.monotonic() >= state["next_beat"]:
            self._wake.clear()
            self._write_status()
            if self._unsent:
                self._send_unsent(livefiles.current_request_id(self.live))
            state["next_beat"] = time.monotonic() + livefiles.HEARTBEAT_S

    def _look_for_request(self, seen: tuple | None) -> tuple | None:
        """Answer request.json when it changed since ``seen`` (its identity); a withdrawn request's capture that
        has not begun is dropped. Returns what was seen."""
        path = self.live / livefiles.REQUEST
        try:
            info = os.stat(path)
        except OSError:
            self._withdrawn(None)
            return None
        identity = (info.st_ino, info.st_mtime_ns, info.st_size)
        if identity == seen:
            return seen
        try:
            text = read_regular(path)
        except OSError:
            return None
        try:
            request = livefiles.parse_request(text)
        except livefiles.BadRequest as error:
            self._refuse_unreadable(text, str(error))
            return identity
        self._withdrawn(request.id)
        if request.id not in self._answered and request.wants(self.rank):
            self._answered.add(request.id)
            self._consider(request)
        return identity

    def _consider(self, request: livefiles.Request) -> None:
        steps = request.steps if request.steps is not None else self.options.capture_steps
        start, last = request.start_step, request.start_step + steps - 1
        folder = livefiles.capture_folder(self.root, request_id=request.id)
        try:
            options = self._capture_options(request.options, start, last, folder)
        except OptionError as error:
            self._answer(request.id, livefiles.REFUSED, f"rank {self.rank} cannot take these options: {error}")
            return
        with self._lock:
            busy = self._capture
            if busy is None and self._recorder.step < start:
                self._capture = Capture(start, last, folder, f"requested by perfsight capture (pid {request.pid})",
                                        options, request_id=request.id)
        if busy is not None:
            self._answer(request.id, livefiles.REFUSED, f"rank {self.rank} is busy with the capture of steps "
                                                        f"{busy.start}-{busy.last} ({busy.reason})")
        elif self._capture is None or self._capture.request_id != request.id:
            self._answer(request.id, livefiles.MISSED, f"rank {self.rank} was already at step "
                                                       f"{self._recorder.step}", **self._where())
        else:
            self._answer(request.id, livefiles.ACCEPTED, f"rank {self.rank} will capture steps {start}-{last}",
                         start_step=start, last_step=last, folder=str(folder))

    def _withdrawn(self, current: str | None) -> None:
        """Drop a capture planned for a request that is no longer the one asked (it has not begun)."""
        with self._lock:
            capture = self._capture
            if (capture is not None and capture.request_id is not None and capture.request_id != current
                    and capture.profiler is None):
                self._capture = None

    def _refuse_unreadable(self, text: bytes, why: str) -> None:
        """Answer a request that cannot be parsed, under its id when it has a usable one."""
        try:
            request_id = livefiles.parse_request_id(text)
        except livefiles.BadRequest:
            request_id = livefiles.UNREADABLE
        if request_id not in self._answered:
            self._answered.add(request_id)
            self._answer(request_id, livefiles.REFUSED, f"rank {self.rank} cannot read the request: {why}")

    def _answer(self, request_id: str, state: str, message: str, **facts) -> None:
        self._unsent[request_id] = (state, message, facts)
        self._send(request_id)

    def _send(self, request_id: str) -> None:
        """Write the answer to ``request_id`` kept unsent; a failure is noted and it stays to be tried again."""
        state, message, facts = self._unsent[request_id]
        try:
            livefiles.write_response(self.live, request_id, self.rank, state, message, **facts)
        except OSError as error:
            self.failsafe.note(f"answering request {request_id} failed: {error}")
        else:
            self._unsent.pop(request_id, None)

    def _send_unsent(self, current: str | None) -> None:
        """Try again the answers not written yet to the request asked now; drop those to any other."""
        for request_id in list(self._unsent):
            if request_id == current:
                self._send(request_id)
            else:
                self._unsent.pop(request_id, None)

    def _write_status(self) -> None:
        with self._status_lock:
            self._write_status_now()

    def _write_status_now(self) -> None:
        capture = self._capture
        where = self._where()
        status = {
            "format": livefiles.STATUS_FORMAT, "rank": self.rank, "world_size": self.world_size, "job": self.job,
            "pid": os.getpid(), "host": socket.gethostname(), "state": self._state, "argv": list(sys.argv),
            "started_ns": self._started_ns, "heartbeat_ns": time.time_ns(),
            **where, "step": where["step"] if where["step"] >= 0 else None,
            "capture_steps": self.options.capture_steps,
            "trigger": list(self.options.trigger) if self.options.trigger else None,
            "capture": self._capture_facts(capture) if capture is not None else None,
            "captures": list(self._captures),
        }
        try:
            write_json_atomic(livefiles.status_path(self.live, self.rank), status, durable=False)
        except OSError as error:
            self.failsafe.note(f"writing the rank's status failed: {error}")

    def _flush_steps(self) -> None:
        """Write the buffered step lines (a failure is noted once; the training thread's next full buffer meets
        it again and disarms the rank)."""
        try:
            self._recorder.flush()
        except ValueError:                          # closed by close() meanwhile
            pass
        except OSError as error:
            if not self._flush_failed:
                self._flush_failed = True
                self.failsafe.note(f"writing the rank's steps file failed: {error}")

    def _stop_watching(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=5 * livefiles.POLL_S + 1)

    def _disarm(self) -> None:
        """After a failure of the armed process's own work: stop watching and say the rank ended."""
        self._state = livefiles.ENDED
        self._stop_watching()
        if self._timer is not None:
            self._timer.uninstall()
            self._timer = None
        self._write_status()

    def _refuse_if_taken(self) -> None:
        """A PerfsightError when another live process on this output folder is armed as this rank."""
        path = livefiles.status_path(self.live, self.rank)
        holder = next((status for status in livefiles.read_statuses(self.live) if status.path == path), None)
        if holder is not None and holder.alive(time.time_ns()) and holder.pid != os.getpid():
            raise PerfsightError(f"{self.live}: rank {self.rank} is armed already by process {holder.pid} on "
                                 f"{holder.host}; give this job another output folder")
