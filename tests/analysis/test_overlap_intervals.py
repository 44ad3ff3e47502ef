"""overlap_intervals: the interval sets behind overlap()'s whole-span row, on planted runs and against a
brute-force timeline; intervals.difference against brute force."""
import numpy as np

from perfsight.analysis import breakdown, intervals

from .planted import BASE, training_run
from .planted_gpu import cpu_only_run, gpu_run
from .test_breakdown import _brute as _line


def test_difference_matches_brute_force():
    rng = np.random.default_rng(11)
    for _ in range(50):
        sets = []
        for _ in range(2):
            n = int(rng.integers(0, 30))
            s = rng.integers(0, 500, n)
            sets.append((s, s + rng.integers(0, 60, n)))
        starts, ends = intervals.difference(*sets)
        assert np.all(starts < ends) and np.all(starts[1:] > ends[:-1])       # sorted, disjoint, not touching
        expected = _line(*sets[0], 600) & ~_line(*sets[1], 600)
        assert np.array_equal(_line(starts, ends, 600), expected)


def _rows(tables):
    out = {}
    for r in breakdown.overlap_intervals(tables).to_pylist():
        out.setdefault((r["rank"], r["row"]), []).append((r["start_ns"] - BASE, r["end_ns"] - BASE))
    return out


def test_planted_gpu_step():
    rows = _rows(gpu_run())
    assert rows == {
        (0, "merged computation"): [(2000, 3500), (7150, 7160)],         # gemm + relu, tiny
        (0, "merged communication"): [(2500, 4500)],                     # the all-reduce
        (0, "pure communication"): [(3500, 4500)],
        (0, "free time"): [(4500, 7150)],                                # memset/memcpy count as free
    }


def test_lengths_equal_overlap_whole_span_row():
    for tables in (gpu_run(), training_run()):
        table = breakdown.overlap_intervals(tables)
        assert table.schema == breakdown.OVERLAP_INTERVALS
        lengths = {}
        for r in table.to_pylist():
            key = (r["rank"], r["row"])
            lengths[key] = lengths.get(key, 0) + r["end_ns"] - r["start_ns"]
        for total in (r for r in breakdown.overlap(tables).to_pylist() if r["step"] is None):
            rank = total["rank"]
            assert lengths.get((rank, "merged computation"), 0) == total["computation_ns"]
            assert lengths.get((rank, "merged communication"), 0) == total["communication_ns"]
            assert lengths.get((rank, "pure communication"), 0) == total["pure_communication_ns"]
            assert lengths.get((rank, "free time"), 0) == total["free_ns"]


def test_sorted_by_rank_row_start_and_a_cpu_run_has_its_hosts():
    rows = breakdown.overlap_intervals(gpu_run()).to_pylist()
    keys = [(r["rank"], breakdown.OVERLAP_ROWS.index(r["row"]), r["start_ns"]) for r in rows]
    assert keys == sorted(keys)
    cpu = breakdown.overlap_intervals(cpu_only_run())
    assert cpu.schema == breakdown.OVERLAP_INTERVALS
    assert [(r["row"], r["start_ns"] - BASE, r["end_ns"] - BASE) for r in cpu.to_pylist()] == [
        ("merged computation", 1500, 3000), ("merged computation", 6500, 8000), ("free time", 3000, 6500)]


def test_run_method():
    from perfsight.run import Run

    assert Run.overlap_intervals is breakdown.overlap_intervals


def test_real_multi_rank_trace_with_communication(shared_data):
    from . import hta_conventions as hta

    tables = hta.load(shared_data, "nccl_data")
    lengths = {}
    for r in breakdown.overlap_intervals(tables).to_pylist():
        key = (r["rank"], r["row"])
        lengths[key] = lengths.get(key, 0) + r["end_ns"] - r["start_ns"]
    totals = [r for r in breakdown.overlap(tables).to_pylist() if r["step"] is None]
    assert totals and any(r["communication_ns"] for r in totals)
    for total in totals:
        got = [lengths.get((total["rank"], row), 0) for row in breakdown.OVERLAP_ROWS]
        assert got == [total["computation_ns"], total["communication_ns"], total["pure_communication_ns"],
                       total["free_ns"]]
