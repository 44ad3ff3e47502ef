"""A torchrun job of 2 CPU ranks (gloo) under ``perfsight run``: one run directory per rank, never clobbering
each other, and its gloo communication, wait and matrix."""
import sys

import pytest

from tests.ports import free_port

from .conftest import manifest, perfsight, run_dirs, script

pytestmark = pytest.mark.e2e


def test_two_rank_torchrun_job(tmp_path):
    launcher = [sys.executable, "-m", "torch.distributed.run"]    # torchrun of this interpreter, not PATH's
    result = perfsight("run", "-o", tmp_path, "--steps", "1-2", "--", *launcher, "--nproc-per-node=2",
                       f"--master-port={free_port()}", script("train_tiny.py"), "4", "--ddp", timeout=300)
    assert result.returncode == 0, result.stderr
    runs = run_dirs(tmp_path)
    assert len(runs) == 2, f"expected one run per rank, got {runs}"
    ranks = sorted(manifest(r)["rank"] for r in runs)
    assert ranks == [0, 1]
    for run in runs:
        m = manifest(run)
        assert m["world_size"] == 2 and m["status"] == "complete" and m["steps_collected"] == [1, 2]
    import perfsight as ps

    job = ps.open(tmp_path)                                 # the two PROF_ directories open as one job
    assert job.ranks == [0, 1] and sorted(set(job.step_trace()["rank"].to_pylist())) == [0, 1]
    # DDP's gradient all-reduces run on gloo's host threads: communication, not host operators
    for row in job.step_breakdown().to_pylist():
        assert row["communication_ns"] > 0, row
    figures = job.collective_figures().to_pylist()
    assert {(r["source"], r["collective"]) for r in figures} >= {("host annotation", "allreduce")}
    assert {r["rank"] for r in figures} == {0, 1} and all(r["members"] == 2 for r in figures)
    assert all(r["elapse_ns"] > 0 and 0 <= r["wait_ns"] <= r["elapse_ns"] for r in figures)
    assert sum(r["wait_ns"] for r in figures) > 0                 # someone waits for the other
    pairs = job.communication_pairs().to_pylist()
    assert {r["src_rank"] for r in pairs} == {0, 1} and all(r["transit_bytes"] > 0 for r in pairs)
    offsets = job.clock_offsets().to_pylist()
    assert [r["offset_ns"] for r in offsets] == [0, 0] and "one clock" in offsets[1]["method"]
    result = perfsight("export", "summary", "-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    for run in runs:
        assert list((run / "perfsight_output").glob("op_statistic_*.csv"))
