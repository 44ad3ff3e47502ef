"""perfsight compare against msprof-analyze 26.2.0's ``compare`` on the same pair (torch_npu text level1: rank 1
as the base, rank 0 as the comparison; its workbook in ascend/msprof_analyze_reference/compare_rank0_vs_rank1_
text_level1, read with openpyxl).

* KernelCompare (a row per kernel type and input shape): summed per type, every type's calls on both sides equal
  perfsight's kernel rows (aligned by type), and its total durations within the workbook's rounding (0.01 us a
  row). perfsight also counts the MEMCPY_ASYNC tasks, which the workbook leaves out.
* ApiCompare (a row per host API): every API that is a framework operator has perfsight's calls on both sides
  and its total time within the workbook's rounding (0.01 ms). The workbook's two others are the DataLoader's
  iteration and the collective's host call, which perfsight's operators (``cpu_op``) leave out."""
from __future__ import annotations

from collections import defaultdict

import openpyxl
import pytest

import perfsight

WORKBOOK = ("ascend/msprof_analyze_reference/compare_rank0_vs_rank1_text_level1/"
            "performance_comparison_result_20261121220042.xlsx")
RANKS = "ascend/torch_npu/text/level1"


@pytest.fixture(scope="module")
def sheets(shared_data):
    book = openpyxl.load_workbook(shared_data / WORKBOOK, read_only=True)
    return {name: list(book[name].iter_rows(values_only=True))[3:] for name in ("KernelCompare", "ApiCompare")}


@pytest.fixture(scope="module")
def comparison(shared_data):
    return perfsight.compare(shared_data / RANKS / "rank1_ascend_pt", shared_data / RANKS / "rank0_ascend_pt")


def test_kernel_types_as_msprof_analyze_sums_them(sheets, comparison):
    theirs: dict[str, list] = defaultdict(lambda: [0, 0.0, 0, 0.0])
    for row in sheets["KernelCompare"]:
        if row[1] is not None:       # Kernel, Input Shape, base total/avg/max/min, calls, comparison ..., calls
            totals = theirs[row[1]]
            totals[0] += row[7] or 0
            totals[1] += row[3] or 0
            totals[2] += row[12] or 0
            totals[3] += row[8] or 0
    ours = {row["name"]: row for row in comparison.kernels().to_pylist()}
    assert len(theirs) == 34 and set(ours) - set(theirs) == {"MEMCPY_ASYNC"}
    for kind, (base_calls, base_us, new_calls, new_us) in theirs.items():
        row = ours[kind]
        assert (row["base_calls"], row["new_calls"]) == (base_calls, new_calls), kind
        assert row["base_total_ns"] / 1000 == pytest.approx(base_us, abs=0.005 * base_calls + 1e-9), kind
        assert row["new_total_ns"] / 1000 == pytest.approx(new_us, abs=0.005 * new_calls + 1e-9), kind


def test_host_apis_as_msprof_analyze_counts_them(sheets, comparison):
    ours = {row["name"]: row for row in comparison.operators().to_pylist()}
    theirs = {row[1]: row for row in sheets["ApiCompare"] if row[1]}
    assert set(theirs) - set(ours) == {"enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                                       "c10d::allreduce_"}
    assert set(ours) <= set(theirs)
    for name, row in ours.items():       # api name, base total/self/avg (ms), calls, comparison ..., calls
        mine = theirs[name]
        assert (row["base_calls"], row["new_calls"]) == (mine[5] or 0, mine[9] or 0), name
        assert row["base_total_ns"] / 1e6 == pytest.approx(mine[2] or 0, abs=0.0051), name
        assert row["new_total_ns"] / 1e6 == pytest.approx(mine[6] or 0, abs=0.0051), name
