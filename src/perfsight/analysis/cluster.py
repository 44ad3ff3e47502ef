"""Several ranks of one job (MindSpore Insight's cluster pages): each rank's step breakdown side by side,
the slowest rank and the straggler.

**Ranks compared** (``rank_breakdown``, ``slowest_rank``): each rank's mean step breakdown
(``breakdown.step_breakdown`` averaged by ``breakdown.step_breakdown_average``) over the step numbers
every rank has (``common_steps`` true; when the ranks share no step number, over each rank's own steps),
beside the verdicts of ``analysis/waiting.py``, the one definition of who waits for whom:

* the *slowest* rank takes longest step by step on the common boundary (``waiting.rank_pace``: step end to
  step end, its excess over each step's median across the ranks), ``gap_ns`` / ``gap_pct`` its excess over
  the fastest rank's; when that is within the noise the ranks are *even* and no rank is the slowest.
  Outlier and warm-up steps are named, not averaged.
* the *straggler* is the rank whose late arrival at collectives causes the most wait of the others
  (``waiting.straggler``), with the wait per step it causes and how often it arrived last; none when no
  rank stands out beyond the noise.

``mean_step_by_rank`` is each rank's mean step over the same steps: ``compare``'s ranks side by side.

**What each rank lacks** (``rank_lacks``): per rank, the files its reader said its folder lacks (meta
``lacking_files``), where its steps came from (meta ``step_source``) and its reader's warnings (meta
``parse_warnings``: what it read around or lacks).

Every function here reads a job's summaries (``analysis/job.py``): the ranks' step breakdowns and facts.

Who communicates with whom, and how fast, is ``analysis/collectives.py``'s.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from perfsight.analysis.breakdown import STEP_BREAKDOWN, STEP_BREAKDOWN_AVERAGE, step_breakdown_average
from perfsight.analysis.job import Job
from perfsight.analysis.rank_facts import job_rank_meta, meta_items
from perfsight.analysis.waiting import (
    OUTLIER_STEP_FACTOR,
    PACE_THRESHOLD,
    STRAGGLER_THRESHOLD,
    median_step_ns,
    pace_noise_ns,
    rank_pace,
    rank_waits,
    straggler,
)
from perfsight.core.memo import computed
from perfsight.core.numbers import number_runs

#: ranks named in a verdict's list of outlier steps, the rest counted
MAX_NAMED = 8

RANK_BREAKDOWN = pa.schema(list(STEP_BREAKDOWN_AVERAGE) + [
    ("common_steps", pa.bool_()),
    ("boundary_step_ns", pa.int64()),
    ("gap_ns", pa.int64()),
    ("gap_pct", pa.float64()),
    ("outlier_steps", pa.list_(pa.int32())),
    ("caused_wait_ns", pa.int64()),
    ("last_arrivals", pa.int64()),
    ("slowest", pa.bool_()),
    ("straggler", pa.bool_()),
])

SLOWEST_RANK = pa.schema([
    ("ranks", pa.int64()),
    ("steps", pa.int64()),
    ("common_steps", pa.bool_()),
    ("even", pa.bool_()),
    ("slowest_rank", pa.int32()),
    ("slowest_step_ns", pa.int64()),
    ("fastest_rank", pa.int32()),
    ("fastest_step_ns", pa.int64()),
    ("gap_ns", pa.int64()),
    ("gap_pct", pa.float64()),
    ("straggler_rank", pa.int32()),
    ("straggler_wait_ns", pa.int64()),
    ("straggler_last_arrivals", pa.int64()),
    ("straggler_instances", pa.int64()),
    ("threshold", pa.string()),
    ("reason", pa.string()),
])
RANK_LACKS = pa.schema([
    ("rank", pa.int32()),
    ("step_source", pa.string()),
    ("lacking_files", pa.list_(pa.string())),
    ("warnings", pa.list_(pa.string())),
    ("damage", pa.list_(pa.string())),
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
    measure the window, not the rank. ``compare`` sets two jobs' ranks side by side with it; which rank is
    slowest is ``slowest_rank``'s (medians on a common boundary)."""
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
    ``boundary_step_ns`` its median step on the common boundary (``waiting.rank_pace``), ``gap_ns`` and
    ``gap_pct`` (its excess over the fastest rank's, step by step: in ns and percent of the fastest rank's
    median step), its
    ``outlier_steps``, the wait per step its late arrivals cause the others (``caused_wait_ns``) and its
    ``last_arrivals`` (``waiting.rank_waits``), and the ``slowest`` and ``straggler`` flags of
    ``slowest_rank``). Sorted by rank; empty without steps. ``step_ns`` is ``mean_step_by_rank``'s."""
    compared, common = _compared(computed(_steps, job))
    rows = step_breakdown_average(compared).to_pylist()
    if not rows:
        return RANK_BREAKDOWN.empty_table()
    means = {m["rank"]: m for m in computed(mean_step_by_rank, job).to_pylist()}
    pace = {p["rank"]: p for p in computed(rank_pace, job).to_pylist()}
    waits = {w["rank"]: w for w in computed(rank_waits, job).to_pylist() if w["process_group"] is None}
    verdict: dict = next(iter(computed(slowest_rank, job).to_pylist()), {})
    fastest: dict = min(pace.values(), key=lambda p: (p["excess_ns"], p["median_step_ns"], p["rank"]), default={})
    for r in rows:      # the mean step is mean_step_by_rank's (the average's own, over the same steps, is equal)
        mine: dict = pace.get(r["rank"], {})
        waited = waits.get(r["rank"], {})
        gap = mine["excess_ns"] - fastest["excess_ns"] if mine else None
        r.update(steps=means[r["rank"]]["steps"], step_ns=means[r["rank"]]["step_ns"], common_steps=common,
                 boundary_step_ns=mine.get("median_step_ns"), outlier_steps=mine.get("outlier_steps") or [],
                 gap_ns=gap, gap_pct=100.0 * gap / fastest["median_step_ns"]
                 if gap is not None and fastest["median_step_ns"] else None,
                 caused_wait_ns=waited.get("caused_per_step_ns"), last_arrivals=waited.get("last_arrivals"),
                 slowest=r["rank"] == verdict.get("slowest_rank") and not verdict.get("even"),
                 straggler=r["rank"] == verdict.get("straggler_rank"))
    return pa.Table.from_pylist(rows, schema=RANK_BREAKDOWN)


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f} ms"


def _pace_reason(pace: list[dict], slow: dict, fast: dict, gap: int, even: bool, noise: float) -> str:
    """What ``slowest_rank`` says of the ranks' steps: slowest or even, and the warm-up and outlier steps."""
    boundary = {p["boundary"] for p in pace}
    measured = ("step end to step end" if boundary == {"end to end"} else "each step's own span"
                if boundary == {"own span"} else "step end to step end, or own spans on a rank without")
    spread = (f"median steps ({measured}) {_ms(min(p['median_step_ns'] for p in pace))} to "
              f"{_ms(max(p['median_step_ns'] for p in pace))}")
    if even:
        reason = (f"ranks are even: step by step, rank {slow['rank']} takes at most {_ms(gap)} longer than rank "
                  f"{fast['rank']} (median), within the noise ({_ms(round(noise))}); {spread}")
    else:
        reason = (f"rank {slow['rank']} is slowest: step by step it takes {_ms(gap)} longer than rank "
                  f"{fast['rank']} (median, {100.0 * gap / fast['median_step_ns']:.1f}% of its step); {spread}")
    warmups: dict[int, list[int]] = {}
    for p in pace:
        if p["warmup_step"] is not None:
            warmups.setdefault(p["warmup_step"], []).append(p["rank"])
    for step, ranks in sorted(warmups.items()):
        reason += (f"; step {step} a warm-up (over {OUTLIER_STEP_FACTOR:g} x the rank's median) on "
                   f"{'every rank' if len(ranks) == len(pace) else 'rank ' + number_runs(ranks)}")
    outliers = [(p["rank"], [s for s in p["outlier_steps"] if s != p["warmup_step"]]) for p in pace]
    named = [f"rank {rank}: {number_runs(steps)}" for rank, steps in outliers if steps]
    if named:
        reason += (f"; outlier steps (over {OUTLIER_STEP_FACTOR:g} x the rank's median) "
                   + "; ".join(named[:MAX_NAMED]) + (f" and {len(named) - MAX_NAMED} more ranks"
                                                     if len(named) > MAX_NAMED else ""))
    if warmups or named:
        reason += ": medians, not means, so they move nothing"
    return reason


def _straggler_reason(verdict: dict | None) -> str:
    """What ``slowest_rank`` says of the straggler (``waiting.straggler``'s row), or why there is none."""
    if verdict is None:
        return "no collective with two timed members: who waits for whom is unknown"
    rank = verdict["straggler_rank"]
    if rank is not None:
        others = verdict["waiting_ranks"]
        return (f"rank {rank} is the straggler: its late arrival makes the others wait "
                f"{_ms(verdict['caused_per_step_ns'])} per step in all (on average {others} other "
                f"rank{'s' if others != 1 else ''} per collective), last at {verdict['last_arrivals']} of its "
                f"{verdict['instances']} collectives")
    following = verdict["next_rank"]
    return (f"no straggler: the ranks arrive at their collectives together within the noise (the most wait one "
            f"rank causes is {_ms(verdict['caused_per_step_ns'])} per step"
            + (f", rank {following}'s {_ms(verdict['next_caused_per_step_ns'])}" if following is not None else "")
            + ")")


def slowest_rank(job: Job) -> pa.Table:
    """One row (schema ``SLOWEST_RANK``; empty without steps): the number of ``ranks`` and of ``steps``
    compared, whether the ranks are ``even``, the slowest and the fastest rank with their median step on
    the common boundary and the gap between them (the slowest's excess over the fastest's, step by step:
    ``waiting.rank_pace``; the slowest is named when not even),
    the straggler with the wait per step it causes the others, its last arrivals and instances
    (``waiting.straggler``; null when none), the noise ``threshold`` and a ``reason`` text."""
    pace = computed(rank_pace, job).to_pylist()
    if not pace:
        return SLOWEST_RANK.empty_table()
    slow = min(pace, key=lambda p: (-p["excess_ns"], -p["median_step_ns"], p["rank"]))
    fast = min((p for p in pace if p is not slow), key=lambda p: (p["excess_ns"], p["median_step_ns"], p["rank"]),
               default=slow)
    gap = slow["excess_ns"] - fast["excess_ns"]
    noise = pace_noise_ns(slow, fast, computed(median_step_ns, job))
    even = gap < noise
    lag = next(iter(computed(straggler, job).to_pylist()), None)
    reason = _pace_reason(pace, slow, fast, gap, even, noise) + "; " + _straggler_reason(lag)
    incomplete = incomplete_ranks(job)
    if incomplete:      # a rank that lost its late arrivals or its long steps would hide from both verdicts
        reason += (f"; the data of {'rank' if len(incomplete) == 1 else 'ranks'} {number_runs(incomplete)} is "
                   "incomplete (read around damage, or files lacking: see the warnings): the ranks are compared on "
                   "what was read")
    named_lag = lag or {}
    return pa.Table.from_pylist([{
        "ranks": len(pace), "steps": slow["steps"], "common_steps": slow["common_steps"], "even": even,
        "slowest_rank": slow["rank"], "slowest_step_ns": slow["median_step_ns"], "fastest_rank": fast["rank"],
        "fastest_step_ns": fast["median_step_ns"], "gap_ns": gap,
        "gap_pct": 100.0 * gap / fast["median_step_ns"] if fast["median_step_ns"] else None,
        "straggler_rank": named_lag.get("straggler_rank"),
        "straggler_wait_ns": named_lag.get("caused_per_step_ns") if named_lag.get("straggler_rank") is not None
        else None,
        "straggler_last_arrivals": named_lag.get("last_arrivals") if named_lag.get("straggler_rank") is not None
        else None,
        "straggler_instances": named_lag.get("instances") if named_lag.get("straggler_rank") is not None else None,
        "threshold": f"ranks: {PACE_THRESHOLD}; straggler: {STRAGGLER_THRESHOLD}",
        "reason": reason}], schema=SLOWEST_RANK)


def rank_lacks(job: Job) -> pa.Table:
    """Per rank (schema ``RANK_LACKS``): ``step_source`` (meta ``step_source``: ``trace``, ``kernel_details
    Step Id``, ``step_trace_time.csv``, ``none``; null when its reader does not say), ``lacking_files``
    (meta ``lacking_files``; empty when it lacks none or its reader does not say), ``warnings``: the
    rank's own ``parse_warnings`` (what its reader read around, repaired or lacks), in their order, and
    ``damage``: those that say its input was damaged and read around (meta ``damage``: a cut or malformed
    trace). Sorted by rank."""
    return pa.Table.from_pylist([
        {"rank": rank, "step_source": meta.get("step_source") or None,
         "lacking_files": meta_items(meta.get("lacking_files"), str),
         "warnings": meta_items(meta.get("parse_warnings"), str), "damage": meta_items(meta.get("damage"), str)}
        for rank, meta in sorted(computed(job_rank_meta, job).items())], schema=RANK_LACKS)


def incomplete_ranks(job: Job) -> list[int]:
    """The ranks whose data is incomplete (``rank_lacks``: files lacking, or input damaged and read around):
    their figures cover only what was read, and the verdicts comparing ranks say so."""
    return [row["rank"] for row in computed(rank_lacks, job).to_pylist() if row["lacking_files"] or row["damage"]]


def rank_steps(job: Job) -> pa.Table:
    """Every rank's steps (schema ``breakdown.STEP_BREAKDOWN``: the job's ``steps`` summary, each rank's
    ``breakdown.step_breakdown``), sorted by rank and step: the Cluster page's rank x step heatmap."""
    return computed(_steps, job)
