"""The cluster section of the terminal report (``perfsight analyse``, the demo) and of ``analyse --json``: a
planted two-rank NCCL job with known answers (tests/analysis/planted_nccl_job.py), the real 2-rank Ascend job
with one rank cut to msprof-analyze's cluster files (what it lacks), and no section for one rank. At many
ranks and steps: a generated 20-rank GPU job (bench/jobgen.py) whose collectives are summarised across ranks
as the other per-rank tables are, ``perfsight cluster`` and ``analyse`` reports within 80 columns (on the real
Ascend jobs too), and a run of 150 steps summarised, not listed."""
from __future__ import annotations

import json
import re
from io import StringIO

import numpy as np
import pytest
from rich.console import Console

import perfsight
from perfsight.analysis.summary import run_summary
from perfsight.analysis.waiting import STRAGGLER_THRESHOLD
from perfsight.cli import main
from perfsight.views.terminal import MAX_RANK_ROWS, print_summary
from tests.analysis import planted_pair
from tests.analysis.planted_nccl_job import write_nccl_job
from tests.bench.test_jobgen import jobgen
from tests.ingest.test_ascend_partial import CLUSTER_FILES, TEXT, rank_copy
from tests.terminal_tables import cells

NCCL_SECTION = """\
Ranks (median step from step end to step end; mean exposed
communication; the others' wait each causes per step; ms)
┏━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━━┓
┃ rank ┃  step ┃ exposed comm. ┃ others wait ┃ last at ┃           ┃
┡━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━━┩
│    0 │ 5.000 │         2.500 │       0.000 │       0 │           │
│    1 │ 5.000 │         1.550 │       0.950 │       4 │ straggler │
└──────┴───────┴───────────────┴─────────────┴─────────┴───────────┘
slowest rank: ranks are even: step by step, rank 0 takes at most 0.000 ms longer
than rank 1 (median), within the noise (0.100 ms); median steps (each step's own
span) 5.000 ms to 5.000 ms; rank 1 is the straggler: its late arrival makes the
others wait 0.950 ms per step in all (on average 1 other rank per collective),
last at 4 of its 4 collectives
Collectives with the longest wait (ms; bus bandwidth GB/s)
┏━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━┳━━━━━┳━━━━━━━━━┳━━━━━━━┳━━━━━━━┓
┃ rank ┃ group ┃ collective    ┃ ops ┃    size ┃  wait ┃ busbw ┃
┡━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━╇━━━━━╇━━━━━━━━━╇━━━━━━━╇━━━━━━━┩
│    0 │ pg0   │ allreduce     │   3 │ 3.8 MiB │ 0.900 │ 8.000 │
│    0 │ pg1   │ send          │   1 │ 3.9 KiB │ 0.050 │ 0.080 │
│    1 │ pg0   │ allreduce     │   3 │ 3.8 MiB │ 0.000 │ 8.000 │
│    1 │ pg1   │ recv          │   1 │ 3.9 KiB │ 0.000 │ 0.080 │
└──────┴───────┴───────────────┴─────┴─────────┴───────┴───────┘
stragglers by group (4 checked): rank 1 in group pg0 (the others wait 0.900 ms
per step for it, last at 3 of 3)
    rule: the rank whose late arrival at collectives causes the most wait of the
    others per step (the part of their wait its longer work since the previous
    collective explains)
    threshold: the others' wait it causes per step >= 0.1 ms and >= 2% of the
    median step, and >= 2 x the next rank's
slow links (2 checked): none
    rule: a link (src, dst) whose bandwidth (transit bytes / transit time over
    its operations) is below the share of the median bandwidth of the links of
    its transport that move enough bytes per operation to be bandwidth-bound
    threshold: bandwidth < 80% of the median of its transport's links, with at
    least 2 links; only links whose operations move 1 MB or more on average are
    judged
clock of rank 1: +7,000,123 ns from rank 0's (estimate +7,000,123 ns, spread 0
ns over 3 collectives; median of (end - reference end) over shared symmetric
collective instances)
"""


def _report(path) -> str:
    out = StringIO()
    print_summary(str(path), run_summary(perfsight.open(path).tables), Console(file=out, width=80))
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


def _section(text: str) -> str:
    """The cluster section: from the ranks table to the trace health section that follows it."""
    return text[text.index("Ranks (median step"):re.search(r"^(Trace health$|trace health: )", text, re.M).start()]


def test_the_cluster_section_of_a_planted_nccl_job(tmp_path):
    assert _section(_report(write_nccl_job(tmp_path / "job"))) == NCCL_SECTION


def test_analyse_json_holds_the_cluster_section(tmp_path, capsys):
    assert main(["analyse", str(write_nccl_job(tmp_path / "job")), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    cluster = report["cluster"]
    # one step each: its own span on the common boundary; rank 1 arrives 300 us late at each all-reduce and
    # 50 us late at the recv of rank 0's send: it makes rank 0 wait 0.95 ms per step
    assert [(r["rank"], r["boundary_step_ns"], r["communication_ns"], r["caused_wait_ns"], r["last_arrivals"],
             r["slowest"], r["straggler"]) for r in cluster["ranks"]] == [
        (0, 5_000_000, 2_500_000, 0, 0, False, False), (1, 5_000_000, 1_550_000, 950_000, 4, False, True)]
    assert (cluster["slowest"]["even"], cluster["slowest"]["straggler_rank"],
            cluster["slowest"]["straggler_wait_ns"]) == (True, 1, 950_000)
    assert [(c["rank"], c["process_group"], c["collective"], c["wait_ns"], c["transit_ns"], c["busbw_gbps"])
            for c in cluster["top_collectives"]] == [(0, "pg0", "allreduce", 900_000, 1_500_000, 8.0),
                                                     (0, "pg1", "send", 50_000, 50_000, 0.08),
                                                     (1, "pg0", "allreduce", 0, 1_500_000, 8.0),
                                                     (1, "pg1", "recv", 0, 50_000, 0.08)]
    assert [(r["process_group"], r["rank"], r["caused_per_step_ns"], r["waited_per_step_ns"])
            for r in cluster["slow_ranks"]] == [("pg0", 1, 900_000, 0)]       # pg1's 50 us: below the floor
    assert (cluster["rank_verdicts"], cluster["slow_links"], cluster["link_verdicts"]) == (4, [], 2)
    assert cluster["slow_rank_threshold"] == STRAGGLER_THRESHOLD
    assert [(o["rank"], o["offset_ns"], o["collectives_used"]) for o in cluster["clock_offsets"]] == [(1, 7_000_123, 3)]
    assert cluster["lacks"] == []
    # the summaries across ranks too (the terminal shows them beyond 16 ranks); every rank's rows stay
    spreads = cluster["spreads"]
    assert spreads["ranks"] == 2 and [r["rank"] for r in report["breakdown"]] == [0, 1]
    assert [(r["figure"], r["median"]) for r in report["rank_spreads"]["breakdown"]][:2] == [
        ("median_step_ns", 5e6), ("step_ns", 5e6)]
    assert [(r["figure"], r["min"], r["median"], r["max"], r["slowest_rank"], r["fastest_rank"])
            for r in spreads["ranks_compared"]] == [("boundary_step_ns", 5e6, 5e6, 5e6, 0, 1),
                                                   ("step_ns", 5e6, 5e6, 5e6, 0, 1),
                                                   ("communication_ns", 1.55e6, 2.025e6, 2.5e6, 0, 1),
                                                   ("caused_wait_ns", 0, 4.75e5, 9.5e5, 1, 0)]
    assert [(r["figure"], r["ranks"], r["median"], r["slowest_rank"], r["slowest_value"])
            for r in spreads["clock_offsets"]] == [("offset_ns", 1, 7_000_123, 1, 7_000_123)]


@pytest.mark.skipif(not TEXT.is_dir(), reason=f"the Ascend samples are not at {TEXT}")
def test_a_rank_that_lacks_files_says_so(tmp_path):
    """Rank 1 keeps only msprof-analyze's cluster files: the report says what it lacks and where its steps
    came from; the clock of rank 1 against rank 0 from the ends of their four all-reduces."""
    rank_copy(tmp_path / "job" / "rank0_ascend_pt", 0)
    rank_copy(tmp_path / "job" / "rank1_ascend_pt", 1, keep=CLUSTER_FILES)
    text = " ".join(_report(tmp_path / "job").split())
    assert ("rank 1 lacks trace_view.json, kernel_details.csv, memory_record.csv, operator_memory.csv, "
            "npu_module_mem.csv; steps from step_trace_time.csv") in text
    assert ("clock of rank 1: -8,161 ns from rank 0's (estimate -8,161 ns, spread 8,214 ns over 4 collectives; "
            "median of (end - reference end) over shared symmetric collective instances)") in text
    assert "rank 0 lacks" not in text


def test_one_rank_has_no_cluster_section(tmp_path):
    write_nccl_job(tmp_path / "job")
    trace = tmp_path / "job" / "rank0.pt.trace.json"
    assert run_summary(perfsight.open(trace).tables)["cluster"] is None
    assert "Ranks (median step" not in _report(trace) and "stragglers by group" not in _report(trace)


def _lines(capsys, *, title: bool = False) -> list[str]:
    """What the command printed, each line checked to fit the 80 columns it was printed in (but with ``title``
    its first: a run's report names it whole)."""
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines[title:] if len(line) > 80] == []
    return lines


@pytest.mark.parametrize("job", ["ascend/torch_npu/text/level1", "ascend/torch_npu/db/level1"])
def test_the_cluster_report_of_a_real_job_fits_80_columns(job, shared_data, tmp_path, capsys, monkeypatch):
    """The real 2-rank torch_npu jobs (HCCL group hashes, warnings, long paths): every line within 80 columns,
    the paths folded; the files written listed under their folder."""
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["cluster", "-d", str(shared_data / job), "-o", str(tmp_path / "out"), "--workers", "1"]) == 0
    lines = _lines(capsys)
    assert "cluster_step_trace_time.csv" in [line.strip() for line in lines]
    assert any(line.startswith("Collectives with the longest wait") for line in lines)       # 2 ranks: a row each


@pytest.fixture(scope="module")
def job_of_20(tmp_path_factory, shared_data):
    """A generated 20-rank GPU job (more than MAX_RANK_ROWS ranks) and its planted answers."""
    folder = tmp_path_factory.mktemp("job_of_20")
    return folder, jobgen.generate("gpu", 20, folder, seed=3, ranks_per_node=4, lean=True, steps=1,
                                   data=shared_data)


def test_beyond_16_ranks_the_collectives_are_summarised_across_ranks(job_of_20, capsys, monkeypatch):
    """``perfsight analyse`` of 20 ranks (mapped rank by rank): each rank's collectives summed, summarised
    across ranks as the other per-rank tables are (min, median, max, slowest and fastest rank): the slowest
    rank is the planted slow rank, which waits least (the others wait for it), instead of 5 rows of some ranks;
    the report ends with the slowest rank's command, not with files it was never to write; 80 columns."""
    folder, answers = job_of_20
    assert answers["world_size"] > MAX_RANK_ROWS
    slow = answers["slow_ranks"][0]
    assert main(["analyse", str(folder), "--json"]) == 0
    cluster = json.loads(capsys.readouterr().out)["cluster"]
    assert [(row["figure"], row["ranks"], row["slowest_rank"], row["min"]) for row in cluster["spreads"]["collectives"]
            ][0] == ("wait_ns", 20, slow, 0)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["analyse", str(folder)]) == 0
    lines = _lines(capsys)
    assert not any(line.startswith("Collectives with the longest wait") for line in lines)
    assert cells(lines, "Each rank's collectives, summed, across 20 ranks (ms)")[0][0] == "wait"
    wait = cells(lines, "Each rank's collectives, summed, across 20 ranks (ms)")[0]
    assert (wait[1], wait[4]) == ("0.000", f"{slow} (min)")
    assert "no step or communication data to write" not in "\n".join(lines)
    last = lines.index("the slowest rank alone (every analysis of its own tables):")   # then its command, folded
    slowest = folder / f"rank{cluster['slowest']['slowest_rank']}.pt.trace.json"
    assert "".join("".join(lines[last + 1:]).split()) == f"perfsightanalyse{slowest}"
    assert main(["cluster", "-d", str(folder), "-o", str(folder / "out")]) == 0
    assert "rank_breakdown.csv" in [line.strip() for line in _lines(capsys)]


#: the planted run of 150 steps: step i lasts 10 ms + JITTER_US[i] us, between 9.95 and 10.05 ms but the first
#: (15 ms: warm-up), the 77th (30 ms) and the 101st (18 ms); the fastest are 9.95 ms: steps 12, 23, 34, ...
JITTER_US = [10 * ((i * 7) % 11) - 50 for i in range(150)]
JITTER_US[0], JITTER_US[76], JITTER_US[100] = 5_000, 20_000, 8_000


def test_a_run_of_150_steps_is_summarised_not_listed(tmp_path, capsys, monkeypatch):
    """``perfsight analyse`` of one rank's 150 steps: a line with their count, median, p10-p90 band (numpy's
    percentiles of the planted steps), mean, min and max, and only the steps that tell the rest: the first 3,
    the 3 slowest and the 3 fastest, each once with why (step 1 is both first and slowest)."""
    monkeypatch.setitem(planted_pair.JITTER_US, "base", JITTER_US)
    trace = planted_pair.write_trace(tmp_path / "run.pt.trace.json", "base", steps=150)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["analyse", str(trace)]) == 0
    lines = _lines(capsys, title=True)
    steps = np.array([10_000 + jitter for jitter in JITTER_US]) / 1000
    p10, p90 = np.percentile(steps, [10, 90])
    text = " ".join(" ".join(lines).split())
    assert (f"150 profiled steps: median {np.median(steps):.3f} ms, p10-p90 {p10:.3f}-{p90:.3f} ms, mean "
            f"{steps.mean():.3f} ms, min 9.950 ms, max 30.000 ms") in text
    start = lines.index(next(line for line in lines if line.startswith("The first, slowest and fastest of 150")))
    rows = [line.strip("│ ").split("│") for line in lines[start + 4:start + 12]]
    assert [(cells[0].strip(), cells[1].strip(), cells[-1].strip()) for cells in rows] == [
        ("1", "15.000", "first, slowest"), ("2", "10.020", "first"), ("3", "9.980", "first"),
        ("12", "9.950", "fastest"), ("23", "9.950", "fastest"), ("34", "9.950", "fastest"),
        ("77", "30.000", "slowest"), ("101", "18.000", "slowest")]
    assert lines[start + 12].startswith("└")
