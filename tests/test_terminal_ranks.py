"""The terminal report of a job reads at any rank count: planted jobs of 8, 16, 17, 64 and 128 ranks
(tests/analysis/planted_ranks.py, built as tables) printed at COLUMNS=80 and 120. Up to MAX_RANK_ROWS ranks
each per-rank table has a row per rank; beyond, a summary across ranks (min, median, max, the slowest and
fastest rank) and a line naming where every rank's rows are. No line is wider than the terminal and no cell
is cut ("…")."""
from __future__ import annotations

import functools
import re
from io import StringIO

import pyarrow as pa
import pytest
from rich.console import Console

from perfsight.analysis.breakdown import CATEGORIES, STEP_BREAKDOWN_AVERAGE
from perfsight.analysis.summary import run_summary
from perfsight.views.terminal import MAX_RANK_ROWS, _print_breakdown, print_summary
from tests.analysis.planted_ranks import COMPUTE_NS, many_ranks, slow_rank, step_ns
from tests.terminal_tables import cells

TITLE = "/jobs/big job"


@functools.cache
def _summary(ranks: int) -> dict:
    return run_summary(many_ranks(ranks))


def _report(ranks: int, columns: int, monkeypatch) -> list[str]:
    """The report at a terminal of ``columns`` (rich takes its width from COLUMNS), its lines checked: none
    wider than the terminal but the title (a path is never cut), no cell cut."""
    monkeypatch.setenv("COLUMNS", str(columns))
    out = StringIO()
    print_summary(TITLE, _summary(ranks), Console(file=out))
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert max(len(line) for line in lines[1:]) <= columns
    assert "…" not in out.getvalue()
    return lines


@pytest.mark.parametrize("columns", [80, 120])
def test_8_ranks_show_the_breakdown_with_ranks_as_rows(columns, monkeypatch):
    """Each rank's step (ms) and compute and idle (% of the step: 5 ms of compute a step); the slow rank 2
    takes 20 ms. Until now the ranks were columns, cut to "r…" cells at 80 columns."""
    lines = _report(8, columns, monkeypatch)
    header = next(line for line in lines if line.lstrip().startswith("rank"))
    assert header.split() == ["rank", "step", "ms", "compute", "idle"]
    assert cells(lines, "Mean step breakdown by rank") == [
        [str(r), f"{step_ns(r, 8) / 1e6:.3f}", f"{100 * COMPUTE_NS / step_ns(r, 8):.1f}",
         f"{100 * (step_ns(r, 8) - COMPUTE_NS) / step_ns(r, 8):.1f}"] for r in range(8)]
    assert [r[:3] for r in cells(lines, "Mean step breakdown by rank")][2] == ["2", "20.000", "25.0"]
    assert sum("median step" in line and "of rank" in line for line in lines) == 8
    assert not any("summarised across ranks" in line for line in lines)


def test_16_ranks_are_rows_and_17_a_summary(monkeypatch):
    """MAX_RANK_ROWS is the last count shown rank by rank; of 17 the median step is the 9th of the sorted
    steps: rank 9's 10.018 ms (the slow rank 5 is last)."""
    assert MAX_RANK_ROWS == 16
    assert len(cells(_report(16, 80, monkeypatch), "Mean step breakdown by rank")) == 16
    lines = _report(17, 80, monkeypatch)
    assert not any(line.startswith("Mean step breakdown by rank") for line in lines)
    assert cells(lines, "Mean step breakdown across 17 ranks")[1] == ["step", "10.000", "10.018", "20.000", "5 (max)",
                                                                       "0 (min)"]


@pytest.mark.parametrize("ranks, median", [(64, "10.065"), (128, "10.129")])
@pytest.mark.parametrize("columns", [80, 120])
def test_beyond_a_screenful_each_per_rank_table_is_summarised_across_ranks(ranks, median, columns, monkeypatch):
    """Steps of 10 ms + 2 us x rank and the slow rank's 20 ms: the median of the per-rank means is the mean of
    the middle two (64 ranks: ranks 32 and 33 once the slow rank 21 is last: 10.064 and 10.066 ms; 128: ranks
    64 and 65: 10.128 and 10.130 ms). The slowest is the slow rank at the max, the fastest rank 0. (A job
    merged whole at more ranks reads the same; the CLI and insight map such a job rather than merge it.)"""
    lines = _report(ranks, columns, monkeypatch)
    slow = f"{slow_rank(ranks)} (max)"
    text = " ".join(" ".join(lines).split())
    assert (f"{ranks:,} ranks: each per-rank table is summarised across ranks (min, median, max, the slowest and "
            f"fastest rank); every rank's rows: perfsight analyse '{TITLE}' --json; the mean step breakdown of every "
            f"rank as CSV: perfsight cluster -d '{TITLE}' writes cluster_analysis_output/rank_breakdown.csv") in text
    assert (f"median step {median} ms (the median over {ranks:,} ranks of each rank's median step; fastest rank 0 "
            f"10.000 ms, slowest rank {slow_rank(ranks)} 20.000 ms)") in text
    assert cells(lines, f"Mean step breakdown across {ranks:,} ranks (ms)") == [
        ["median step", "10.000", median, "20.000", slow, "0 (min)"],
        ["step", "10.000", median, "20.000", slow, "0 (min)"],
        ["compute", "5.000", "5.000", "5.000", "0 (max)", "1 (min)"],           # all equal: ranks 0 and 1
        ["idle", "5.000", f"{float(median) - 5:.3f}", "15.000", slow, "0 (min)"]]   # categories no rank has: left out
    assert cells(lines, f"Profiled steps: each rank's mean, across {ranks:,} ranks")[0] == [
        "iteration", "10.000", median, "20.000", slow, "0 (min)"]
    assert cells(lines, "Memory peak of each rank's cuda device") == [
        ["allocated", "1.0 GiB", "1.0 GiB", "2.0 GiB", slow, "0 (min)"],
        ["reserved", "4.0 GiB", "4.0 GiB", "4.0 GiB", "0 (max)", "1 (min)"]]
    assert cells(lines, f"{ranks:,} ranks compared (ms)")[1] == [
        "step", "10.000", median, "20.000", slow, "0 (min)"]
    assert not [line for line in lines if re.search(r"of rank \d+;|\(rank \d+[,)]", line)]   # no line per rank
    assert len(lines) < 130                                                    # the same few screens at any count


def test_the_breakdown_by_rank_shows_every_category_of_the_analysis():
    """Two ranks with time in every category: a column each, the long names shortened and said below."""
    parts = (*CATEGORIES, "idle")
    rows = [{"rank": r, "steps": 1, "step_ns": 1_000_000 * len(parts), "median_step_ns": 1_000_000 * len(parts),
             **{f"{c}_ns": 1_000_000 for c in parts}, **{f"{c}_pct": 100 / len(parts) for c in parts}} for r in (0, 1)]
    out = StringIO()
    _print_breakdown(pa.Table.from_pylist(rows, schema=STEP_BREAKDOWN_AVERAGE), Console(file=out, width=80))
    lines = out.getvalue().splitlines()
    assert lines[2].split() == ["rank", "step", "ms", "compute", "comm.", "memory", "runtime", "data", "host", "python",
                                "idle"]
    assert lines[4].split() == ["0", "8.000"] + ["12.5"] * 8
    assert " ".join(" ".join(lines[6:]).split()) == ("(each category in % of the step, comm. = communication, data = "
                                                     "dataloader, host = host ops)")
    assert max(len(line.rstrip()) for line in lines) <= 80


def test_a_long_list_of_slow_ranks_or_links_shows_the_first_16_and_how_many_more():
    from perfsight.views.terminal import _listed

    assert _listed([f"rank {r}" for r in range(20)]) == "; ".join(f"rank {r}" for r in range(16)) + (
        "; ... and 4 more (every one: analyse --json)")
    assert _listed(["rank 3"]) == "rank 3" and _listed([]) == "none"
