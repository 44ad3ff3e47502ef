"""rank_spread on planted per-rank tables with known answers: min, median (the mean of the middle two for an
even count), max, and the slowest and fastest ranks with their values, the end that is slowest said per
figure, ties to the lowest rank, nulls left out."""
from __future__ import annotations

import pyarrow as pa
import pytest

from perfsight.analysis.rank_spread import HIGHER, LOWER, RANK_SPREAD, rank_spread

#: six ranks, out of order: step_ns has ties at both ends and one rank without a value; flops_per_s is a rate
PLANTED = pa.table({"rank": pa.array([3, 0, 5, 2, 1, 4], pa.int32()),
                    "step_ns": pa.array([25, 40, 10, 40, 10, None], pa.int64()),
                    "flops_per_s": [2.5, 5.0, 6.0, 2.5, 7.5, 9.0]})


def _rows(table: pa.Table) -> list[tuple]:
    return [tuple(row.values()) for row in table.to_pylist()]


def test_min_median_max_and_the_slowest_and_fastest_ranks_of_a_planted_table():
    spread = rank_spread(PLANTED, {"step_ns": HIGHER, "flops_per_s": LOWER})
    assert spread.schema == RANK_SPREAD
    assert _rows(spread) == [
        # 10, 10, 25, 40, 40 (rank 4 has none): the largest is the slowest, ranks 0 and 2 tie -> 0; 1 and 5 -> 1
        ("step_ns", "higher", 5, 10.0, 25.0, 40.0, 0, 40.0, 1, 10.0),
        # a rate: the smallest is the slowest (ranks 2 and 3 tie -> 2); median (5.0 + 6.0) / 2
        ("flops_per_s", "lower", 6, 2.5, 5.5, 9.0, 2, 2.5, 4, 9.0)]


def test_equal_ranks_give_the_lowest_as_slowest_and_another_as_fastest():
    """As cluster.slowest_rank: two ranks of equal steps are slowest 0 and fastest 1; one rank is both."""
    equal = pa.table({"rank": [1, 0], "step_ns": [5_000_000, 5_000_000]})
    assert _rows(rank_spread(equal, {"step_ns": HIGHER})) == [
        ("step_ns", "higher", 2, 5e6, 5e6, 5e6, 0, 5e6, 1, 5e6)]
    one = pa.table({"rank": [7], "step_ns": [3]})
    assert _rows(rank_spread(one, {"step_ns": LOWER})) == [("step_ns", "lower", 1, 3.0, 3.0, 3.0, 7, 3.0, 7, 3.0)]


def test_a_figure_no_rank_has_gives_nulls():
    table = pa.table({"rank": [0, 1], "utilization_percent": pa.array([None, None], pa.float64())})
    assert _rows(rank_spread(table, {"utilization_percent": LOWER})) == [
        ("utilization_percent", "lower", 0, None, None, None, None, None, None, None)]


def test_1024_ranks():
    """Rank r's step is 1,000 + r ns, rank 700 the slow one at 9,000: median of 1,000..1,023 without 1,700
    and with 9,000 -> the middle two of the sorted 1,024 values are 1,511 and 1,512."""
    steps = [1_000 + r for r in range(1024)]
    steps[700] = 9_000
    table = pa.table({"rank": pa.array(range(1024), pa.int32()), "step_ns": steps})
    assert _rows(rank_spread(table, {"step_ns": HIGHER})) == [
        ("step_ns", "higher", 1024, 1000.0, 1511.5, 9000.0, 700, 9000.0, 0, 1000.0)]


@pytest.mark.parametrize("table, figures, said", [
    (pa.table({"rank": [0, 0], "step_ns": [1, 2]}), {"step_ns": HIGHER}, "several rows of one rank"),
    (PLANTED, {"step_ns": "slower"}, "slower is 'slower'; allowed: 'higher', 'lower'"),
    (PLANTED, {"wait_ns": HIGHER}, "no column 'wait_ns'"),
])
def test_bad_arguments_say_what_is_allowed(table, figures, said):
    with pytest.raises(ValueError, match=said):
        rank_spread(table, figures)
