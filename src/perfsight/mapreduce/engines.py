"""The engines the cluster map runs on: where ``function(item)`` runs for every item, with each result handed
back to the caller as it completes, and what happens when a worker dies.

``LocalPool`` (the default, no set-up) runs the items in a pool of worker processes on this machine;
``RayEngine`` runs each item as a Ray task on a Ray cluster (``perfsight[ray]``; Ray is imported only when
this engine is chosen). Both keep a bounded number of tasks in flight (thousands of ranks never become
thousands of pending results in the driver), deliver every index exactly once, and retry a task whose
worker died (killed, out of memory) on a fresh worker up to ``MAX_ATTEMPTS`` times, then deliver a
``TaskLost`` for it while the other tasks complete. An exception raised by the function is not retried (the
cluster map returns its failures and never raises; an engine must still not hang): it comes back as a
``TaskLost`` with the exception's text. ``engine_for`` picks the engine from ``--ray``/``RAY_ADDRESS`` and
``--workers``.
"""
from __future__ import annotations

import multiprocessing
import os
import socket
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, TypeVar

import psutil

from perfsight.core.errors import InputError
from perfsight.core.process import usable_cores

T = TypeVar("T")
R = TypeVar("R")

#: how many times a task is started before it is given up as lost (its worker died each time)
MAX_ATTEMPTS = 3
#: the local pool's tasks in flight per worker: one running and one queued, so no worker waits for the driver
IN_FLIGHT_PER_WORKER = 2
#: the local pool's start method: a fresh interpreter per worker, never a fork of a driver that may run
#: DuckDB's and Arrow's threads (a fork copies their locks in whatever state they are); the fork server
#: starts once per driver and forks each worker from a clean process (spawn where there is no fork server)
START_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
INSTALL_RAY = "pip install 'perfsight[ray]'"
#: why a task whose worker never started it is lost (and every task, when no worker of a map ever starts one)
NEVER_STARTED = (f"its worker process died before the task started, {MAX_ATTEMPTS} times (the task cannot be "
                 "unpickled there, or the calling script lacks `if __name__ == \"__main__\":`)")
#: how long a Ray cluster's "host:port" may take to accept a connection (ray.init itself waits for minutes)
CONNECT_TIMEOUT_S = 5
#: the local pool's workers per usable core at most: the map is CPU-bound (it parses local files), so more
#: workers than a few per core only add memory
WORKERS_PER_CORE = 4
#: the memory one local worker is counted to need: its interpreter with DuckDB and Arrow (~200 MB measured with
#: a rank of 8.6 MB of trace), before the rank it reads; the pool never has more workers than the memory
#: available holds at this much each
WORKER_MEMORY_BYTES = 256 * 1024 * 1024
#: the largest --workers accepted (a number beyond it is a mistake, not a machine)
MAX_WORKERS = 1 << 16


@dataclass(frozen=True)
class TaskLost:
    """Delivered instead of a result when a task could not be run: its worker died ``attempts`` times, or
    the function raised (``attempts`` then counts the one run that raised)."""
    index: int
    attempts: int
    why: str


class Engine(Protocol):
    description: str   # "local pool, 2 workers" / "Ray at 127.0.0.1:6379, 4 CPUs on 2 nodes"
    workers: int

    def map(self, function: Callable[[T], R], items: Sequence[T],
            on_result: Callable[[int, R | TaskLost], None]) -> None:
        """Run ``function(item)`` for every item and call ``on_result(index, result or TaskLost)`` in the
        calling thread as each completes (any order), exactly once per index."""


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


# --- the local pool -------------------------------------------------------------------------------------

_started: Any = None   # in a pool worker: the map's shared flags, one byte per item, set when its task starts


def _remember(started: Any) -> None:
    global _started
    _started = started


def _run_flagged(function: Callable[[T], R], index: int, item: T) -> R:
    _started[index] = 1
    return function(item)


class LocalPool:
    """Worker processes on this machine (``START_METHOD``), ``workers`` of them; a pool of one still runs
    apart from the driver, so a task that kills its process never kills the caller.

    A worker that dies breaks a ``ProcessPoolExecutor`` for every task in it. The pool is then rebuilt and
    the unfinished tasks resubmitted: those that had not started, as they were; those that had (each marks
    a shared flag as it starts), one at a time with nothing else running, so a later death is charged to
    the task that caused it and a task that ran out of memory beside the others gets the machine to itself.
    """

    def __init__(self, workers: int) -> None:
        self.workers = min(workers, machine_workers())
        capped = f" ({workers:,} asked: capped at what this machine holds)" if self.workers < workers else ""
        self.description = f"local pool, {self.workers} worker{'s' if self.workers != 1 else ''}{capped}"
        self._context = multiprocessing.get_context(START_METHOD)

    def map(self, function: Callable[[T], R], items: Sequence[T],
            on_result: Callable[[int, R | TaskLost], None]) -> None:
        started = self._context.RawArray("b", len(items))
        attempts = [0] * len(items)
        waiting = deque(range(len(items)))
        alone: deque[int] = deque()   # tasks whose worker died: each is retried with nothing else running
        ran = [False]                 # whether any task of this map ever started

        def delivered(index: int, result: R | TaskLost) -> None:
            ran[0] = ran[0] or not isinstance(result, TaskLost) or bool(started[index])
            on_result(index, result)

        pools = 0
        while waiting or alone:
            if pools >= MAX_ATTEMPTS and not ran[0]:    # no worker ever started a task: none ever will
                for index in [*alone, *waiting]:
                    on_result(index, TaskLost(index, pools, NEVER_STARTED))
                return
            pools += 1
            pool = ProcessPoolExecutor(max(1, min(self.workers, len(items))), mp_context=self._context,
                                       initializer=_remember,
                                       initargs=(started,))
            try:
                self._until_done_or_broken(pool, function, items, delivered, started, attempts, waiting, alone)
            finally:
                pool.shutdown(wait=True, cancel_futures=True)

    def _until_done_or_broken(self, pool: ProcessPoolExecutor, function: Callable[[T], R], items: Sequence[T],
                              on_result: Callable[[int, R | TaskLost], None], started: Any, attempts: list[int],
                              waiting: deque[int], alone: deque[int]) -> None:
        running: dict[Future, int] = {}
        while waiting or alone or running:
            broken = False
            queue, limit = (alone, 1) if alone else (waiting, self.workers * IN_FLIGHT_PER_WORKER)
            while queue and len(running) < limit and not broken:
                index = queue.popleft()
                started[index] = 0
                try:
                    running[pool.submit(_run_flagged, function, index, items[index])] = index
                except BrokenProcessPool:   # it broke since the last wait: the task goes back, unstarted
                    queue.appendleft(index)
                    broken = True
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            if broken or any(isinstance(future.exception(), BrokenProcessPool) for future in done):
                wait(running)   # a broken pool fails every task in it: collect them all
                done, broken = set(running), True
            lost = []
            for future in done:
                index = running.pop(future)
                error = future.exception()
                if error is None:
                    on_result(index, future.result())
                elif isinstance(error, BrokenProcessPool):
                    lost.append(index)
                else:
                    on_result(index, TaskLost(index, attempts[index] + 1, _one_line(error)))
            if broken:
                _charge(lost, started, attempts, waiting, alone, on_result)
                return


def _charge(lost: list[int], started: Any, attempts: list[int], waiting: deque[int], alone: deque[int],
            on_result: Callable[[int, Any], None]) -> None:
    """Share out a worker's death among the tasks it took down: one that had started is charged an attempt
    and retried alone (or lost at ``MAX_ATTEMPTS``); one that had not goes back to the front of the line.
    A death before any of them started charges them all, so a task that kills its worker before it can
    start (it cannot be unpickled there; a calling script without a main guard) ends too."""
    blamed = {index for index in lost if started[index]}
    why = f"its worker process died on each of {MAX_ATTEMPTS} attempts (killed, or out of memory)"
    if not blamed:
        blamed, why = set(lost), NEVER_STARTED
    for index in lost:
        if index not in blamed:
            waiting.appendleft(index)
            continue
        attempts[index] += 1
        if attempts[index] < MAX_ATTEMPTS:
            alone.append(index)
        else:
            on_result(index, TaskLost(index, attempts[index], why))


# --- Ray ------------------------------------------------------------------------------------------------

def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        asked = f"RAY_ADDRESS={os.environ['RAY_ADDRESS']} asks" if os.environ.get("RAY_ADDRESS") else "--ray asks"
        raise InputError(f"{asked} for a Ray cluster, but Ray is not installed: {INSTALL_RAY} "
                         "(or leave out --ray and RAY_ADDRESS for the local pool)") from None
    return ray


class RayEngine:
    """Each item a Ray task (one CPU, retried by Ray on a fresh worker when its worker dies), at most
    ``workers`` in flight (default: the cluster's CPUs), completions collected with ``ray.wait``.

    Attaches to the Ray session this process already has, else ``ray.init(address)``: an address
    ("host:port", "auto", "ray://..."); None finds one the way Ray does (``RAY_ADDRESS``, then a cluster
    started on this machine by ``ray start``, else a new local Ray instance). The function is shipped by
    reference: it must be a module-level function of an installed package (the cluster map is
    ``perfsight.mapreduce.map.map_batch``), so every node needs the same perfsight installed, and the job's
    folder (its traces and the Parquet store the map writes) must be on a filesystem every node shares at the
    same path.
    """

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        ray = _import_ray()
        if not ray.is_initialized():
            from_environment = not address and os.environ.get("RAY_ADDRESS")
            address = address or from_environment or None
            given = f"RAY_ADDRESS={address}" if from_environment else f"--ray {address or ''}".strip()
            _check_answers(address, given)
            try:
                ray.init(address=address, log_to_driver=False)
            except ConnectionError as error:
                raise InputError(f"{given}: no Ray cluster found ({_one_line(error)}); start one with "
                                 "`ray start --head` or give the address it printed") from None
        cpus = int(ray.cluster_resources().get("CPU", 0))
        nodes = sum(1 for node in ray.nodes() if node["Alive"])
        self.workers = workers or max(cpus, 1)
        self.description = (f"Ray at {ray.get_runtime_context().gcs_address}, {cpus} CPUs on {nodes} "
                            f"node{'s' if nodes != 1 else ''}")

    def map(self, function: Callable[[T], R], items: Sequence[T],
            on_result: Callable[[int, R | TaskLost], None]) -> None:
        ray = _import_ray()
        remote = ray.remote(num_cpus=1, max_retries=MAX_ATTEMPTS - 1)(function)
        waiting = deque(range(len(items)))
        running: dict[Any, int] = {}
        while waiting or running:
            while waiting and len(running) < self.workers:
                index = waiting.popleft()
                running[remote.remote(items[index])] = index
            ready, _ = ray.wait(list(running), num_returns=1)
            for ref in ready:
                index = running.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayTaskError as error:   # the function raised: not retried
                    on_result(index, TaskLost(index, 1, _one_line(error.cause)))
                except ray.exceptions.RayError as error:       # its worker or node died on every attempt
                    on_result(index, TaskLost(index, MAX_ATTEMPTS, _one_line(error)))
                else:
                    on_result(index, result)


def _check_answers(address: str | None, given: str) -> None:
    """Fail fast when a "host:port" address does not accept a connection (Ray's own ``ray.init`` waits
    for minutes); other addresses ("auto", "ray://...") are left to Ray."""
    host, colon, port = (address or "").rpartition(":")
    if not colon or not port.isdigit() or "/" in host:
        return
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        raise InputError(f"{given}: no Ray cluster answers at {address} ({error.strerror or error}); start one "
                         "with `ray start --head` or give the address it printed") from None


def machine_workers() -> int:
    """The most local workers this machine holds: ``WORKERS_PER_CORE`` per usable core, and no more than the
    memory available holds at ``WORKER_MEMORY_BYTES`` each (at least 1)."""
    by_memory = psutil.virtual_memory().available // WORKER_MEMORY_BYTES
    return max(1, min(WORKERS_PER_CORE * usable_cores(), by_memory))


def engine_for(ray: str | bool | None = None, workers: int | None = None) -> Engine:
    """The engine ``perfsight cluster`` runs on: ``ray`` None (no ``--ray``) is Ray when ``RAY_ADDRESS`` is
    set, else the local pool of ``workers`` processes (default: the cores this process may use); True
    (``--ray`` alone) or an address is Ray (see ``RayEngine``); False is the local pool whatever the
    environment says. With Ray, ``workers`` caps the tasks in flight."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or not 1 <= workers <= MAX_WORKERS):
        raise InputError(f"--workers {workers!r}: the number of worker processes must be a whole number from 1 "
                         f"to {MAX_WORKERS:,} (the local pool takes at most what this machine holds: "
                         f"{machine_workers()} here)")
    if ray is None:
        ray = bool(os.environ.get("RAY_ADDRESS"))
    if ray is False:
        return LocalPool(workers or usable_cores())
    return RayEngine(ray if isinstance(ray, str) else None, workers)
