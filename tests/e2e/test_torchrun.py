"""A torchrun job of 2 CPU ranks (gloo): one run directory per rank, never clobbering each other."""
import sys

import pytest

from .conftest import manifest, perfsight, run_dirs, script

pytestmark = pytest.mark.e2e


def test_two_rank_torchrun_job(tmp_path):
    launcher = [sys.executable, "-m", "torch.distributed.run"]    # torchrun of this interpreter, not PATH's
    result = perfsight("run", "-o", tmp_path, "--steps", "1-2", "--", *launcher, "--nproc-per-node=2",
                       "--master-port=29517", script("train_tiny.py"), "4", "--ddp", timeout=300)
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
    result = perfsight("export", "summary", "-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    for run in runs:
        assert list((run / "perfsight_output").glob("op_statistic_*.csv"))
