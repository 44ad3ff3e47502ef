"""perfsight compare on every Ascend format it reads: torch_npu's text export against its database export of the
same training (two sessions of level1's rank 0: every host operator and every kernel type aligns by name, none
new or vanished), and an msprof PROF_ directory and MindSpore's legacy folder (a job of ranks 0, 1 and 10),
each compared with itself: no difference, every row on both sides and equal."""
from __future__ import annotations

import pytest

import perfsight


def test_torch_npu_text_against_its_database_export(shared_data):
    comparison = perfsight.compare(shared_data / "ascend/torch_npu/text/level1/rank0_ascend_pt",
                                   shared_data / "ascend/torch_npu/db/level1/rank0_ascend_pt")
    operators, kernels = comparison.operators(), comparison.kernels()
    assert operators.num_rows > 100 and kernels.num_rows > 30
    assert set(operators["status"].to_pylist()) == set(kernels["status"].to_pylist()) == {"both"}
    assert {"MatMulV2", "Conv2D", "TransData"} <= set(kernels["name"].to_pylist())   # by type, not instance
    assert comparison.verdict() == "noise unknown"                                    # one step each


@pytest.mark.parametrize("path", ["ascend/mindspore_legacy/profiler/PROF_000001_20230818142704322_COJGGGCANRMICFBC",
                                  "ascend/mindspore_legacy/profiler"])
def test_msprof_and_mindspore_compared_with_themselves(shared_data, path):
    comparison = perfsight.compare(shared_data / path, shared_data / path)
    assert comparison.verdict() == "no difference"
    kernels = comparison.kernels()
    assert kernels.num_rows and set(kernels["status"].to_pylist()) == {"both"}
    assert set(kernels["difference_per_step_ns"].to_pylist()) == {0}
