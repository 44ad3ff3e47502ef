"""perfsight compare against Holistic Trace Analysis' TraceDiff on HTA's own trace_diff pair (control vs test:
eager vs torch.compile of a recommendation model's training), HTA's answers recorded in tests/data/
hta_trace_diff by ``bench/compare_peer.py reference`` (HTA 0.6.1, every iteration, CPU and GPU apart).

Every kernel and host operator perfsight aligns has HTA's count and total duration on both sides, exactly:
HTA counts the events of its iterations (a kernel in its launch's), perfsight the executions inside the
profiled steps, the same set. A family row (kernels only one side has, paired across names) holds the sum
of its members' figures in HTA's table. HTA's CPU table also holds runtime calls, annotations and Python
functions, which perfsight's operator comparison (``cpu_op`` only) leaves out."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

import perfsight

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "hta_trace_diff"


def hta(device: str) -> dict[str, tuple[int, int, int, int]]:
    """HTA's rows: name -> (control count, control us, test count, test us)."""
    with open(REFERENCE / f"{device}.csv", newline="") as file:
        return {row["name"]: tuple(round(float(row[key])) for key in (
            "control_counts", "control_total_duration", "test_counts", "test_total_duration"))
            for row in csv.DictReader(file)}


@pytest.fixture(scope="module")
def comparison(shared_data):
    folder = shared_data / "kineto" / "hta" / "trace_diff"
    return perfsight.compare(folder / "control", folder / "test")


def _check(table, reference: dict) -> set[str]:
    """Each row's figures against HTA's (a family row: its members' sums); the names covered."""
    covered = set()
    for row in table.to_pylist():
        if row["matched_by"] == "family":
            base, new = row["base_names"], row["new_names"]
            expected = (sum(reference[n][0] for n in base), sum(reference[n][1] for n in base),
                        sum(reference[n][2] for n in new), sum(reference[n][3] for n in new))
            covered |= {*base, *new}
        else:
            expected = reference[row["name"]]
            covered.add(row["name"])
        ours = (row["base_calls"], row["base_total_ns"] / 1000, row["new_calls"], row["new_total_ns"] / 1000)
        assert ours == expected, row["name"]
    return covered


def test_every_kernel_has_htas_counts_and_durations(comparison):
    reference = hta("gpu")
    covered = _check(comparison.kernels(), reference)
    assert covered == set(reference)                       # and every kernel HTA counts is there
    families = [row for row in comparison.kernels().to_pylist() if row["matched_by"] == "family"]
    assert {row["name"] for row in families} >= {"matmul"}   # torch.compile's own GEMM kernels vs eager's


def test_every_host_operator_has_htas_counts_and_durations(comparison):
    reference = hta("cpu")
    covered = _check(comparison.operators(), reference)
    assert len(covered) > 150
    left_out = set(reference) - covered                      # runtime calls, annotations: not operators
    assert {"cudaLaunchKernel", "ProfilerStep#1009"} <= left_out
    assert not any(name.startswith("aten::") for name in left_out)
