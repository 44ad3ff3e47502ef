"""The cluster map's engines (perfsight.mapreduce.engines): the local pool and Ray (a local instance the tests
start, and a two-node local cluster made with `ray start --head` plus `ray start --address`) each deliver
every item's result exactly once, retry a task whose worker process was killed, give up on a task that
kills its worker every time (TaskLost, the others complete) and report a task that raised; engine_for picks
the engine and rejects what it cannot run.

The tasks are tests/mapreduce/engine_tasks.py, imported by name in the workers: the local pool's workers
(forkserver) get the driver's sys.path, Ray's workers get the driver's working directory (the checkout's
root, where pytest runs) on theirs - so the same module-level functions serve both, as perfsight's installed
map function does in real use."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from perfsight.core.errors import InputError
from perfsight.core.process import usable_cores
from perfsight.mapreduce import engines
from perfsight.mapreduce.engines import (
    CONNECT_TIMEOUT_S,
    IN_FLIGHT_PER_WORKER,
    MAX_ATTEMPTS,
    LocalPool,
    RayEngine,
    TaskLost,
    engine_for,
    machine_workers,
)
from tests.mapreduce.engine_tasks import Item, Unpicklable, square

ROOT = Path(__file__).resolve().parents[2]
KILLER = 13   # the item whose task kills its worker
RAISER = 7    # the item whose task raises


def run(engine, items) -> dict:
    """Every item's result by index; each index delivered exactly once."""
    delivered = []
    results = {}

    def on_result(index, result):
        delivered.append(index)
        results[index] = result

    engine.map(square, items, on_result)
    assert sorted(delivered) == list(range(len(items)))
    return results


def squares(results: dict, but: set[int] = frozenset()) -> dict[int, int]:
    return {index: result.square for index, result in results.items() if index not in but}


def starts(log: Path) -> list[int]:
    """The pids of the worker processes a task started in, in order."""
    return [int(pid) for pid in log.read_text().split()]


def killer_among(tmp_path: Path, kills: int, sleep: float = 0.0) -> tuple[list[Item], Path]:
    """50 items, the one at KILLER killing its worker on its first ``kills`` starts; each takes ``sleep`` s so
    other tasks are running beside it when it kills."""
    log = tmp_path / "killer.log"
    items = [Item(n, sleep=sleep) for n in range(50)]
    items[KILLER] = Item(KILLER, log=str(log), kills=kills, sleep=sleep)
    return items, log


def check_plain(engine) -> dict:
    results = run(engine, [Item(n) for n in range(50)])
    assert squares(results) == {n: n * n for n in range(50)}
    return results


def check_killed_once(engine, tmp_path: Path, sleep: float = 0.0) -> None:
    items, log = killer_among(tmp_path, kills=1, sleep=sleep)
    results = run(engine, items)
    assert squares(results) == {n: n * n for n in range(50)}
    first, second = starts(log)          # retried once, in a fresh worker
    assert first != second == results[KILLER].pid


def check_killed_always(engine, tmp_path: Path, why: str, sleep: float = 0.0) -> None:
    items, log = killer_among(tmp_path, kills=99, sleep=sleep)
    results = run(engine, items)
    assert results[KILLER] == TaskLost(KILLER, MAX_ATTEMPTS, why)
    assert len(starts(log)) == MAX_ATTEMPTS == 3
    assert squares(results, but={KILLER}) == {n: n * n for n in range(50) if n != KILLER}


def check_raises(engine) -> None:
    items = [Item(n, raises=n == RAISER) for n in range(50)]
    results = run(engine, items)
    assert results[RAISER] == TaskLost(RAISER, 1, f"ValueError: bad item {RAISER}")   # its first line, not retried
    assert squares(results, but={RAISER}) == {n: n * n for n in range(50) if n != RAISER}


# --- the local pool -------------------------------------------------------------------------------------

POOL_LOST = f"its worker process died on each of {MAX_ATTEMPTS} attempts (killed, or out of memory)"


@pytest.fixture
def pool():
    return LocalPool(2)


def test_pool_runs_every_item_in_worker_processes(pool):
    results = check_plain(pool)
    assert os.getpid() not in {result.pid for result in results.values()}
    assert {result.node for result in results.values()} == {None}


def test_pool_retries_a_task_whose_worker_was_killed(pool, tmp_path):
    check_killed_once(pool, tmp_path, sleep=0.02)


def test_pool_gives_up_on_a_task_that_kills_its_worker_every_time_and_finishes_the_others(pool, tmp_path):
    """The tasks running beside it when it kills are retried too, alone, and complete: the deaths are
    charged to the killer only."""
    check_killed_always(pool, tmp_path, POOL_LOST, sleep=0.02)


def test_pool_retries_a_killed_task_alone(pool, tmp_path):
    """Tasks that die whenever another runs beside them (as a rank too big to share the memory would) complete
    on their retry, which runs alone."""
    items = [Item(n, crowd=str(tmp_path), greedy=n in (5, 30), sleep=0.02) for n in range(40)]
    results = run(pool, items)
    assert squares(results) == {n: n * n for n in range(40)}


def test_pool_reports_a_task_that_raised(pool):
    check_raises(pool)


def test_a_pool_of_one_survives_its_worker_being_killed(tmp_path):
    engine = LocalPool(1)
    assert engine.description == "local pool, 1 worker"
    check_killed_once(engine, tmp_path)


def test_pool_gives_up_on_a_task_whose_worker_dies_before_it_starts(pool):
    """Unpickling item 3 ends the worker before the task starts: no task is seen starting, so every task in
    flight is charged an attempt (else the pool would be rebuilt forever); the others still complete."""
    items = [Item(n) for n in range(10)]
    items[3] = Unpicklable()
    results = run(pool, items)
    assert results[3] == TaskLost(3, MAX_ATTEMPTS, "its worker process died before the task started, 3 times (the "
                                                   "task cannot be unpickled there, or the calling script lacks "
                                                   '`if __name__ == "__main__":`)')
    assert squares(results, but={3}) == {n: n * n for n in range(10) if n != 3}


def test_a_pool_that_never_starts_a_task_gives_up_on_them_all(pool, monkeypatch):
    """Every item kills its worker before its task starts (as a calling script without a main guard does):
    after MAX_ATTEMPTS pools in which no task ever started, every task left is lost at once, not each after
    pools of its own (1,024 ranks took over an hour that way)."""
    built = []
    original = engines.ProcessPoolExecutor

    def counted(*args, **kwargs):
        built.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(engines, "ProcessPoolExecutor", counted)
    results = run(pool, [Unpicklable() for _ in range(100)])
    assert len(built) == MAX_ATTEMPTS
    assert {type(result) for result in results.values()} == {TaskLost}
    assert {result.why for result in results.values()} == {engines.NEVER_STARTED}


class Watched(list):
    """Items that record which ones the engine has taken."""

    def __init__(self, items):
        super().__init__(items)
        self.taken: set[int] = set()

    def __getitem__(self, index):
        self.taken.add(index)
        return super().__getitem__(index)


def test_pool_keeps_a_bounded_number_of_tasks_in_flight(pool):
    items = Watched(Item(n, sleep=0.002) for n in range(200))
    delivered: set[int] = set()
    most_in_flight = 0

    def on_result(index, result):
        nonlocal most_in_flight
        most_in_flight = max(most_in_flight, len(items.taken - delivered))
        delivered.add(index)

    pool.map(square, items, on_result)
    assert delivered == set(range(200))
    assert most_in_flight == pool.workers * IN_FLIGHT_PER_WORKER == 4


# --- engine_for -----------------------------------------------------------------------------------------

@pytest.fixture
def no_ray_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def test_the_local_pool_is_the_default(no_ray_address):
    engine = engine_for()
    assert isinstance(engine, LocalPool)
    assert engine.workers == usable_cores()
    assert engine.description == f"local pool, {usable_cores()} worker{'s' if usable_cores() > 1 else ''}"
    assert engine_for(workers=3).description == "local pool, 3 workers"


def test_ray_false_is_the_local_pool_even_with_ray_address_set(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")
    assert isinstance(engine_for(ray=False, workers=2), LocalPool)


@pytest.mark.parametrize("workers", [0, -2, "3", 2.5, True, 10 ** 30])
def test_a_bad_workers_value_is_an_input_error(no_ray_address, workers):
    with pytest.raises(InputError) as error:
        engine_for(workers=workers)
    assert str(error.value) == (f"--workers {workers!r}: the number of worker processes must be a whole number "
                                f"from 1 to 65,536 (the local pool takes at most what this machine holds: "
                                f"{machine_workers()} here)")


def test_ray_asked_for_but_not_installed(monkeypatch, no_ray_address):
    monkeypatch.setitem(sys.modules, "ray", None)   # `import ray` raises ImportError
    with pytest.raises(InputError, match=r"^--ray asks for a Ray cluster, but Ray is not installed: "
                                         r"pip install 'perfsight\[ray\]' \(or leave out --ray"):
        engine_for(ray=True)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    with pytest.raises(InputError, match=r"^RAY_ADDRESS=10.0.0.1:6379 asks for a Ray cluster, but Ray is not "
                                         r"installed: pip install 'perfsight\[ray\]'"):
        engine_for()


def test_a_ray_address_where_nothing_answers_is_an_input_error_at_once(no_ray_address, monkeypatch):
    with socket.socket() as unused:          # a port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    asked = []
    connect = socket.create_connection

    def probe(address, timeout=None, **kwargs):
        asked.append((address, timeout))
        return connect(address, timeout=timeout, **kwargs)
    monkeypatch.setattr(socket, "create_connection", probe)
    with pytest.raises(InputError, match=rf"^--ray 127.0.0.1:{port}: no Ray cluster answers at 127.0.0.1:{port} "
                                         r"\(Connection refused\); start one with `ray start --head`"):
        engine_for(ray=f"127.0.0.1:{port}")
    # one probe, bounded by CONNECT_TIMEOUT_S, before Ray (whose ray.init alone waits for minutes) is started
    assert asked == [(("127.0.0.1", port), CONNECT_TIMEOUT_S)]


def test_choosing_the_local_pool_does_not_import_ray():
    code = ("import sys; from perfsight.mapreduce.engines import engine_for; "
            "engine_for(workers=1); print('ray' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("RAY_ADDRESS", None)
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout == "False\n"


# --- Ray: a local instance ------------------------------------------------------------------------------

RAY_LOST = ("WorkerCrashedError: The worker died unexpectedly while executing this task. Check "
            "python-core-worker-*.log files for more information.")


@pytest.fixture(scope="class")
def ray_engine():
    import ray

    environment = dict(os.environ)   # a new local instance turns token authentication on in os.environ
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield RayEngine()        # attaches to the session this process has
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(environment)


@pytest.mark.slow
class TestRayLocal:
    def test_description(self, ray_engine):
        import ray

        assert ray_engine.workers == 2
        assert ray_engine.description == f"Ray at {ray.get_runtime_context().gcs_address}, 2 CPUs on 1 node"

    def test_runs_every_item_in_ray_workers(self, ray_engine):
        import ray

        results = check_plain(ray_engine)
        assert {result.node for result in results.values()} == {ray.get_runtime_context().get_node_id()}

    def test_retries_a_task_whose_worker_was_killed(self, ray_engine, tmp_path):
        check_killed_once(ray_engine, tmp_path)

    def test_gives_up_on_a_task_that_kills_its_worker_every_time(self, ray_engine, tmp_path):
        check_killed_always(ray_engine, tmp_path, RAY_LOST)

    def test_reports_a_task_that_raised(self, ray_engine):
        check_raises(ray_engine)


@pytest.mark.slow
class TestRayTwoNodes:
    def test_tasks_run_on_both_nodes_attached_by_ray_address(self, two_nodes, monkeypatch, tmp_path):
        import ray

        monkeypatch.setenv("RAY_ADDRESS", two_nodes)
        engine = engine_for()
        assert isinstance(engine, RayEngine)
        assert engine.description == f"Ray at {ray.get_runtime_context().gcs_address}, 2 CPUs on 2 nodes"
        items, log = killer_among(tmp_path, kills=1, sleep=0.3)
        results = run(engine, items[:20])
        assert squares(results) == {n: n * n for n in range(20)}
        assert len(starts(log)) == 2
        nodes = {node["NodeID"] for node in ray.nodes() if node["Alive"]}
        assert len(nodes) == 2
        assert {result.node for result in results.values()} == nodes
