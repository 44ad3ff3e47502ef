"""The cluster section of the terminal report (``perfsight analyse``, the demo) and of ``analyse --json``: a
planted two-rank NCCL job with known answers (tests/analysis/planted_nccl_job.py), the real 2-rank Ascend job
with one rank cut to msprof-analyze's cluster files (what it lacks), and no section for one rank."""
from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from rich.console import Console

import perfsight
from perfsight.analysis.summary import run_summary
from perfsight.cli import main
from perfsight.views.terminal import print_summary
from tests.analysis.planted_nccl_job import write_nccl_job
from tests.ingest.test_ascend_partial import CLUSTER_FILES, TEXT, rank_copy

NCCL_SECTION = """\
Ranks (mean step over the steps compared, ms)
┏━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━┳━━━━━━━━━━━┓
┃ rank ┃  step ┃ exposed comm. ┃ outside comm. ┃           ┃
┡━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━╇━━━━━━━━━━━┩
│    0 │ 5.000 │         2.500 │         2.500 │ slowest   │
│    1 │ 5.000 │         1.550 │         3.450 │ straggler │
└──────┴───────┴───────────────┴───────────────┴───────────┘
slowest rank: rank 0 has the longest mean step (5.000 ms, 0.0% over rank 1's);
rank 1 spends the most time outside exposed communication (3.450 ms per step)
and 1.550 ms communicating against 2.500 ms at most on the others, which wait
for it in their collectives
Collectives with the longest wait (ms; bus bandwidth GB/s)
┏━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━┳━━━━━┳━━━━━━━━━┳━━━━━━━┳━━━━━━━┓
┃ rank ┃ group ┃ collective    ┃ ops ┃    size ┃  wait ┃ busbw ┃
┡━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━╇━━━━━╇━━━━━━━━━╇━━━━━━━╇━━━━━━━┩
│    0 │ pg0   │ allreduce     │   3 │ 3.8 MiB │ 0.900 │ 8.000 │
│    0 │ pg1   │ send          │   1 │ 3.9 KiB │ 0.050 │ 0.080 │
│    1 │ pg0   │ allreduce     │   3 │ 3.8 MiB │ 0.000 │ 8.000 │
│    1 │ pg1   │ recv          │   1 │ 3.9 KiB │ 0.000 │ 0.080 │
└──────┴───────┴───────────────┴─────┴─────────┴───────┴───────┘
slow ranks (4 checked): rank 1 in group pg0 (the others wait 0.300 ms on
average, it 0.000 ms)
    rule: the rank of a group with the least mean wait (arrival skew) over the
    group's instances, while the other members' mean wait is at least the factor
    times and the gap longer: they wait for it
    threshold: others' mean wait >= 2 x the rank's and >= 0.1 ms longer
slow links (2 checked): none
    rule: a link (src, dst) whose bandwidth (transit bytes / transit time over
    its operations) is below the share of the median bandwidth of the links of
    its transport
    threshold: bandwidth < 80% of the median of its transport's links, with at
    least 2 links
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
    return text[text.index("Ranks (mean step"):re.search(r"^(Trace health$|trace health: )", text, re.M).start()]


def test_the_cluster_section_of_a_planted_nccl_job(tmp_path):
    assert _section(_report(write_nccl_job(tmp_path / "job"))) == NCCL_SECTION


def test_analyse_json_holds_the_cluster_section(tmp_path, capsys):
    assert main(["analyse", str(write_nccl_job(tmp_path / "job")), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    cluster = report["cluster"]
    assert [(r["rank"], r["step_ns"], r["communication_ns"], r["non_communication_ns"], r["slowest"], r["straggler"])
            for r in cluster["ranks"]] == [(0, 5_000_000, 2_500_000, 2_500_000, True, False),
                                           (1, 5_000_000, 1_550_000, 3_450_000, False, True)]
    assert (cluster["slowest"]["slowest_rank"], cluster["slowest"]["fastest_rank"],
            cluster["slowest"]["straggler_rank"]) == (0, 1, 1)
    assert [(c["rank"], c["process_group"], c["collective"], c["wait_ns"], c["transit_ns"], c["busbw_gbps"])
            for c in cluster["top_collectives"]] == [(0, "pg0", "allreduce", 900_000, 1_500_000, 8.0),
                                                     (0, "pg1", "send", 50_000, 50_000, 0.08),
                                                     (1, "pg0", "allreduce", 0, 1_500_000, 8.0),
                                                     (1, "pg1", "recv", 0, 50_000, 0.08)]
    assert [(r["process_group"], r["rank"], r["mean_wait_ns"], r["others_mean_wait_ns"])
            for r in cluster["slow_ranks"]] == [("pg0", 1, 0, 300_000)]
    assert (cluster["rank_verdicts"], cluster["slow_links"], cluster["link_verdicts"]) == (4, [], 2)
    assert cluster["slow_rank_threshold"] == "others' mean wait >= 2 x the rank's and >= 0.1 ms longer"
    assert [(o["rank"], o["offset_ns"], o["collectives_used"]) for o in cluster["clock_offsets"]] == [(1, 7_000_123, 3)]
    assert cluster["lacks"] == []
    # the summaries across ranks too (the terminal shows them beyond 16 ranks); every rank's rows stay
    spreads = cluster["spreads"]
    assert spreads["ranks"] == 2 and [r["rank"] for r in report["breakdown"]] == [0, 1]
    assert [(r["figure"], r["median"]) for r in report["rank_spreads"]["breakdown"]][:2] == [
        ("median_step_ns", 5e6), ("step_ns", 5e6)]
    assert [(r["figure"], r["min"], r["median"], r["max"], r["slowest_rank"], r["fastest_rank"])
            for r in spreads["ranks_compared"]] == [("step_ns", 5e6, 5e6, 5e6, 0, 1),
                                                   ("communication_ns", 1.55e6, 2.025e6, 2.5e6, 0, 1),
                                                   ("non_communication_ns", 2.5e6, 2.975e6, 3.45e6, 1, 0)]
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
    assert "Ranks (mean step" not in _report(trace) and "slow ranks" not in _report(trace)
