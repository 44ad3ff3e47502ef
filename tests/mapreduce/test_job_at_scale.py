"""A generated 64-rank GPU job (``bench/jobgen.py``: NCCL collectives matched across ranks, a planted slow
rank, slow link and clock offsets) analysed rank by rank: the planted answers found by the local pool and by
Ray on a two-node cluster, with equal figures; a worker killed mid-job still gives the full result; a re-run
after one rank's file changed reads that rank only and gives the same figures."""
from __future__ import annotations

import signal

import psutil
import pytest

from perfsight.core.memo import computed
from perfsight.mapreduce import analyse_job
from perfsight.mapreduce.engines import LocalPool, engine_for
from perfsight.run import Run
from tests.bench.test_jobgen import _check, jobgen

RANKS = 64
#: the cross-rank analyses compared between runs (every figure the planted answers are checked on, and more)
COMPARED = ("clock_offsets", "collective_figures", "collective_totals", "communication_pairs", "slow_ranks",
            "slow_links", "communication_groups", "rank_breakdown", "cluster_step_trace")


class Mapped:
    """A mapped job as ``test_jobgen._check`` reads a Run: its cross-rank analyses by name, its ranks."""

    def __init__(self, analysed):
        self.analysed, self.ranks = analysed, analysed.ranks

    def __getattr__(self, name: str):
        return lambda: computed(getattr(Run, name), self.analysed.job)

    def figures(self) -> dict:
        return {name: getattr(self, name)().to_pylist() for name in COMPARED}


@pytest.fixture(scope="module")
def job(tmp_path_factory, shared_data):
    folder = tmp_path_factory.mktemp("gpu64")
    answers = jobgen.generate("gpu", RANKS, folder, seed=7, lean=True, steps=1, data=shared_data)
    return folder, answers


@pytest.fixture(scope="module")
def pool_figures(job, tmp_path_factory):
    """The local pool's figures of the job (its first analysis, every rank read)."""
    folder, answers = job
    analysed = analyse_job(folder, engine=LocalPool(2), output=tmp_path_factory.mktemp("pool"))
    assert analysed.counts == {"done": RANKS, "cached": 0, "failed": 0}
    _check(answers, Mapped(analysed))
    return Mapped(analysed).figures()


@pytest.mark.slow
def test_the_local_pool_finds_the_planted_answers(pool_figures):
    assert len(pool_figures["clock_offsets"]) == RANKS


def _cmdline(process: psutil.Process) -> list[str]:
    """A child's command line; [] for one that is gone or a zombie (another test's process this worker has not
    reaped yet)."""
    try:
        return process.cmdline()
    except (psutil.ZombieProcess, psutil.NoSuchProcess, psutil.AccessDenied):
        return []


@pytest.mark.slow
def test_a_worker_killed_mid_job_still_gives_the_full_result(job, pool_figures, tmp_path):
    """Once 8 ranks are in, one worker of the pool is killed (SIGKILL, as the kernel's OOM killer does): the
    ranks it held are read again by a fresh worker, and the job is whole."""
    folder, answers = job
    seen, killed = [], []

    def arrived(outcome) -> None:
        seen.append(outcome)
        if len(seen) == 8:
            server = next(p for p in psutil.Process().children() if "forkserver" in " ".join(_cmdline(p)))
            worker = next(p for p in server.children() if p.is_running())
            worker.send_signal(signal.SIGKILL)
            killed.append(worker.pid)

    analysed = analyse_job(folder, engine=LocalPool(2), output=tmp_path, on_outcome=arrived)
    # the rank the killed worker was reading may have been stored before the kill (then its fresh worker finds it
    # stored) or not; the task it held queued had not started
    assert killed and analysed.counts["failed"] == 0 and analysed.counts["cached"] in (0, 1)
    assert analysed.counts["done"] + analysed.counts["cached"] == RANKS
    assert Mapped(analysed).figures() == pool_figures


@pytest.mark.slow
def test_a_rerun_reads_only_the_rank_that_changed(job, pool_figures, tmp_path):
    folder, answers = job
    analyse_job(folder, engine=LocalPool(2), output=tmp_path)
    with open(folder / "rank9.pt.trace.json", "a", encoding="utf-8") as trace:
        trace.write("\n")                           # a new size: a new fingerprint, the same trace
    again = analyse_job(folder, engine=LocalPool(2), output=tmp_path)
    assert {o.rank: o.status for o in again.outcomes if o.status != "cached"} == {9: "done"}
    assert again.counts == {"done": 1, "cached": RANKS - 1, "failed": 0}
    assert Mapped(again).figures() == pool_figures


@pytest.mark.slow
def test_ray_on_two_nodes_finds_the_same(job, pool_figures, two_nodes, tmp_path):
    """The same job on a local two-node Ray cluster (``conftest.two_nodes``): every rank a Ray task, the same
    planted answers and the same figures as the local pool."""
    import ray

    folder, answers = job
    analysed = analyse_job(folder, engine=engine_for(ray=two_nodes), output=tmp_path)
    assert analysed.engine.endswith("2 CPUs on 2 nodes")
    assert analysed.counts == {"done": RANKS, "cached": 0, "failed": 0}
    _check(answers, Mapped(analysed))
    assert Mapped(analysed).figures() == pool_figures
    ray.shutdown()
