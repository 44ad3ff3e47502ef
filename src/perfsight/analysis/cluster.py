"""Several ranks of one job (MindSpore Insight's cluster pages): each rank's step breakdown side by side,
the slowest rank and the straggler.

**Ranks compared** (``mean_step_by_rank``, ``rank_breakdown``, ``slowest_rank``): each rank's mean step
(``mean_step_by_rank``, which the advisor's uneven-ranks rule quotes too) and mean step breakdown
(``breakdown.step_breakdown`` averaged by ``breakdown.step_breakdown_average``) over the step numbers
every rank has (``common_steps`` true); when the ranks share no step number, over each rank's own steps.

* The *slowest* rank has the largest mean ``step_ns``; ``gap_ns`` / ``gap_pct`` compare a rank's mean
  step with the fastest rank's.
* In synchronous training every rank waits for the others in its collectives, so the step times come
  out alike and the rank that holds the others up is the one that spends the least time in exposed
  communication: the *straggler* has the largest ``non_communication_ns`` = ``step_ns`` -
  ``communication_ns`` (communication while no compute runs, breakdown's category); the others show
  that difference as communication time, waiting for it.
* Ties go to the lowest rank; the fastest rank is another than the slowest when there are several.

**What each rank lacks** (``rank_lacks``): per rank, the files its reader said its folder lacks (meta
``lacking_files``), where its steps came from (meta ``step_source``) and its reader's warnings (meta
``parse_warnings``: what it read around or lacks).

Every function here reads a job's summaries (``analysis/job.py``): the ranks' step breakdowns and facts.

Who communicates with whom, and how fast, is ``analysis/collectives.py``'s.
"""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from perfsight.analysis.breakdown import STEP_BREAKDOWN, STEP_BREAKDOWN_AVERAGE, step_breakdown_average
from perfsight.analysis.job import Job
from perfsight.analysis.rank_facts import job_rank_meta
from perfsight.core.memo import computed

RANK_BREAKDOWN = pa.schema(list(STEP_BREAKDOWN_AVERAGE) + [
    ("common_steps", pa.bool_()),
    ("non_communication_ns", pa.int64()),
    ("gap_ns", pa.int64()),
    ("gap_pct", pa.float64()),
    ("slowest", pa.bool_()),
    ("straggler", pa.bool_()),
])

SLOWEST_RANK = pa.schema([
    ("ranks", pa.int64()),
    ("steps", pa.int64()),
    ("common_steps", pa.bool_()),
    ("slowest_rank", pa.int32()),
    ("slowest_step_ns", pa.int64()),
    ("fastest_rank", pa.int32()),
    ("fastest_step_ns", pa.int64()),
    ("gap_ns", pa.int64()),
    ("gap_pct", pa.float64()),
    ("straggler_rank", pa.int32()),
    ("straggler_non_communication_ns", pa.int64()),
    ("reason", pa.string()),
])
RANK_LACKS = pa.schema([
    ("rank", pa.int32()),
    ("step_source", pa.string()),
    ("lacking_files", pa.list_(pa.string())),
    ("warnings", pa.list_(pa.string())),
])


def _compared(steps: pa.Table) -> tuple[pa.Table, bool]:
    """The rows (one per rank and step) of the step numbers every rank has, or all rows when they share none;
    and whether they share some."""
    ranks = pc.unique(steps["rank"]).to_pylist()
    shared = None
    for r in ranks:
        numbers = set(steps.filter(pc.equal(steps["rank"], r))["step"].to_pylist())
        shared = numbers if shared is None else shared & numbers
    if not shared:
        return steps, False
    return steps.filter(pc.is_in(steps["step"], pa.array(sorted(shared), pa.int32()))), True


MEAN_STEP = pa.schema([("rank", pa.int32()), ("steps", pa.int64()), ("step_ns", pa.int64()),
                       ("common_steps", pa.bool_())])



def _steps(job: Job) -> pa.Table:
    """Every rank's ``breakdown.step_breakdown`` (the job's ``steps`` summary), by rank and step."""
    return job.sql("SELECT * FROM steps ORDER BY rank, step").cast(STEP_BREAKDOWN)


def mean_step_by_rank(job: Job) -> pa.Table:
    """Per rank, its mean step over the compared steps (schema ``MEAN_STEP``): the step numbers every rank
    has (``common_steps`` true), or each rank's own steps when the ranks share none; ``steps`` compared,
    ``step_ns`` their mean duration rounded to the ns (the steps of ``breakdown.step_breakdown``). Sorted by rank;
    empty without steps.

    Over shared steps, because ranks are compared: in synchronous training step N of every rank ends at the
    same collectives, so the ranks' step N are one stretch of the job seen from each rank; a step only some
    ranks recorded (a profiler window started a step later on one rank, the first step's warm-up) would
    measure the window, not the rank. The Cluster page and the advisor's uneven-ranks rule quote this."""
    steps, common = _compared(computed(_steps, job).select(["rank", "step", "step_ns"]))
    ranks = steps.column("rank").to_numpy()
    durations = steps.column("step_ns").to_numpy()
    rows = []
    for r in sorted(set(ranks.tolist())):
        mine = durations[ranks == r]
        rows.append({"rank": r, "steps": int(mine.size), "step_ns": round(int(mine.sum()) / mine.size),
                     "common_steps": common})
    return pa.Table.from_pylist(rows, schema=MEAN_STEP)


def rank_breakdown(job: Job) -> pa.Table:
    """Per rank, its mean step breakdown over the compared steps (module docstring; schema
    ``RANK_BREAKDOWN``: ``breakdown.STEP_BREAKDOWN_AVERAGE``'s columns, then ``common_steps``,
    ``non_communication_ns`` = step_ns - communication_ns, ``gap_ns`` and ``gap_pct`` (mean step over the
    fastest rank's, in ns and percent of the fastest), and the ``slowest`` and ``straggler`` flags). Sorted
    by rank; empty without steps. ``step_ns`` is ``mean_step_by_rank``'s."""
    compared, common = _compared(computed(_steps, job))
    rows = step_breakdown_average(compared).to_pylist()
    if not rows:
        return RANK_BREAKDOWN.empty_table()
    means = {m["rank"]: m for m in computed(mean_step_by_rank, job).to_pylist()}
    for r in rows:      # the mean step is mean_step_by_rank's (the average's own, over the same steps, is equal)
        r.update(steps=means[r["rank"]]["steps"], step_ns=means[r["rank"]]["step_ns"])
    fastest = min(r["step_ns"] for r in rows)
    slowest = max(rows, key=lambda r: r["step_ns"])["rank"]
    straggler = max(rows, key=lambda r: r["step_ns"] - r["communication_ns"])["rank"]
    for r in rows:
        r.update(common_steps=common, non_communication_ns=r["step_ns"] - r["communication_ns"],
                 gap_ns=r["step_ns"] - fastest, gap_pct=100.0 * (r["step_ns"] - fastest) / fastest if fastest else None,
                 slowest=r["rank"] == slowest, straggler=r["rank"] == straggler)
    return pa.Table.from_pylist(rows, schema=RANK_BREAKDOWN)


def slowest_rank(job: Job) -> pa.Table:
    """One row (schema ``SLOWEST_RANK``; empty without steps) from ``rank_breakdown``: the number of
    ``ranks`` and of ``steps`` compared, the slowest and the fastest rank with their mean step, the gap
    between them, the straggler with its ``non_communication_ns``, and a ``reason`` text."""
    rows = computed(rank_breakdown, job).to_pylist()
    if not rows:
        return SLOWEST_RANK.empty_table()
    slow = next(r for r in rows if r["slowest"])
    fast = min((r for r in rows if r is not slow), key=lambda r: r["step_ns"], default=slow)
    lag = next(r for r in rows if r["straggler"])
    others = [r["communication_ns"] for r in rows if r is not lag]
    reason = (f"rank {slow['rank']} has the longest mean step ({slow['step_ns'] / 1e6:.3f} ms, "
              f"{slow['gap_pct']:.1f}% over rank {fast['rank']}'s); rank {lag['rank']} spends the most time "
              f"outside exposed communication ({lag['non_communication_ns'] / 1e6:.3f} ms per step)")
    if others:
        reason += (f" and {lag['communication_ns'] / 1e6:.3f} ms communicating against "
                   f"{max(others) / 1e6:.3f} ms at most on the others, which wait for it in their collectives")
    incomplete = sorted({slow["rank"], lag["rank"]} & set(incomplete_ranks(job)))
    if incomplete:
        said = " and ".join(f"rank {rank}" for rank in incomplete)
        reason += (f"; the data of {said} is incomplete (read around damage, or files lacking: see the "
                   "warnings), so these figures may come from what is missing")
    return pa.Table.from_pylist([{
        "ranks": len(rows), "steps": slow["steps"], "common_steps": slow["common_steps"],
        "slowest_rank": slow["rank"], "slowest_step_ns": slow["step_ns"], "fastest_rank": fast["rank"],
        "fastest_step_ns": fast["step_ns"], "gap_ns": slow["gap_ns"], "gap_pct": slow["gap_pct"],
        "straggler_rank": lag["rank"], "straggler_non_communication_ns": lag["non_communication_ns"],
        "reason": reason}], schema=SLOWEST_RANK)


def rank_lacks(job: Job) -> pa.Table:
    """Per rank (schema ``RANK_LACKS``): ``step_source`` (meta ``step_source``: ``trace``, ``kernel_details
    Step Id``, ``step_trace_time.csv``, ``none``; null when its reader does not say), ``lacking_files``
    (meta ``lacking_files``; empty when it lacks none or its reader does not say) and ``warnings``: the
    rank's own ``parse_warnings`` (what its reader read around or lacks), in their order. Sorted by rank."""
    rows = []
    for rank, meta in sorted(computed(job_rank_meta, job).items()):
        lacking = json.loads(meta.get("lacking_files") or "[]")
        warnings = json.loads(meta.get("parse_warnings") or "[]")
        rows.append({"rank": rank, "step_source": meta.get("step_source") or None,
                     "lacking_files": [str(name) for name in lacking] if isinstance(lacking, list) else [],
                     "warnings": [w for w in warnings if isinstance(w, str)] if isinstance(warnings, list) else []})
    return pa.Table.from_pylist(rows, schema=RANK_LACKS)


def incomplete_ranks(job: Job) -> list[int]:
    """The ranks whose reader read around damage or found files lacking (``rank_lacks``: any warning or lacking
    file): their figures cover only what was read, and a verdict naming them says so."""
    return [row["rank"] for row in computed(rank_lacks, job).to_pylist() if row["warnings"] or row["lacking_files"]]


def rank_steps(job: Job) -> pa.Table:
    """Every rank's steps (schema ``breakdown.STEP_BREAKDOWN``: the job's ``steps`` summary, each rank's
    ``breakdown.step_breakdown``), sorted by rank and step: the Cluster page's rank x step heatmap."""
    return computed(_steps, job)
