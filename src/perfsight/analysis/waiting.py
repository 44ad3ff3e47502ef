"""Who waits for whom: the one definition of which rank holds the others up, and by how much, that the
cluster report, ``--json``, the cluster files, the Cluster page and the uneven-ranks advice all read.

**Arrivals** (``collective_arrivals``): every member of every collective instance (``collectives``: the
operations of one group with one sequence number on the ranks that recorded it, matched by group and
sequence) whose time is known, on aligned clocks (``collectives.clock_offsets``): its ``arrival_ns`` (its
start), ``end_ns``, ``wait_ns`` (last arrival minus its own, ``collective_figures``' wait) and
``transit_ns``. The instance's *last arriver* is the member with the latest arrival (ties: the lowest rank).
An instance's step (``instance_step``) is its last arriver's (a pipeline rank may enter its recv before its
own step boundary, in its previous step). A member's ``work_ns`` is the time from its previous exit (the
latest end of its own timed communication before this arrival; for its first, the start of its step) to
this arrival: what the rank did between collectives. A waiting member's wait (last arrival - its own) is
(the last arriver's previous exit - its own) + (the last arriver's work - its own), and is split so:

* ``caused_ns``, the part the last arriver's longer work explains: its wait, capped to [0, last arriver's
  work - the member's work]; the last arriver caused it. Null where a work is unknown (a rank's first timed
  operation outside any step).
* ``carried_ns``, the rest, which came from leaving previous collectives at different times. When the two
  left different instances, the last arriver's previous instance ended late because of its own last arriver
  (``carried_rank``: often the same rank, late there too, whose lateness every collective after it carries
  on): that rank caused it. When both left the same instance, it ended for them at different moments (gloo's
  ring releases its ranks up to milliseconds apart): no rank's work caused it, and it is not counted.

**Straggler** (``rank_waits``, ``straggler``): per rank, the wait its late arrivals cause the others,
summed over the waiting members, per step: the mean over the counted steps, the steps with instances but a
warm-up step (``rank_pace``: the ranks start at different moments, and the first collective's wait is the
start-up's) and a step holding a member's first timed operation (``first``: its work measured from its
step's start, and the ranks' step starts are no common boundary); all of them when that leaves none;
operations outside any step count only in a job without steps, as one step. Not a median: with two ranks
taking turns to arrive last, each would be last in half the steps and one median would come out 0. Beside
it, its number of ``last_arrivals`` out of the ``instances`` it took part in, and the wait it suffered
itself. The straggler is the rank whose caused wait per step is largest, named only when it is at least
``NOISE_FLOOR_NS`` and ``NOISE_STEP_SHARE`` of the median step, and at least ``STRAGGLER_DOMINANCE`` times
the next rank's (ranks that take turns arriving last are noise, not one rank holding the others up):
``STRAGGLER_THRESHOLD``. The same rule per process group is ``slow_ranks``.

**Ranks' pace** (``rank_pace``, ``slowest_rank`` in ``analysis/cluster.py``): ranks are compared on a
common boundary, the end of their steps (every rank leaves step N's last collective together, whereas a
rank that waits starts its step early): a step's ``boundary_ns`` is its end minus the end of the rank's
previous step (consecutive step numbers), or its own span where there is none (a rank's first step, a
reported step without times). Per rank, over the step numbers every rank has (its steps measured end to
end; its own spans only when it has none such): the median step, its ``excess_ns`` = the median over its
steps of its step minus that step's median across the ranks (ranks leave a step's last collective a few
milliseconds apart, one first in one step and another in the next: a per-step comparison cancels that
jitter, a comparison of two ranks' own medians does not), and the ``outlier_steps`` longer than
``OUTLIER_STEP_FACTOR`` times its median (its first step among them is its ``warm-up``), reported, never
folded into a mean. The slowest rank has the largest excess; the ranks are *even* when it exceeds the
fastest rank's by less than the noise: ``NOISE_FLOOR_NS``, ``NOISE_STEP_SHARE`` of the median step, and
``PACE_STANDARD_ERRORS`` standard errors of the two excesses (``excess_error_ns``: ``MEDIAN_ERROR_PER_MAD``
times the median absolute deviation of the rank's per-step differences over the square root of their
number), so that the jitter of a few steps is not a verdict.

msprof-analyze splits an operator's time into transit, wait and synchronisation per rank and names no
straggler; HTA's ``get_comm_comp_overlap`` and queue lengths show each rank alone. Both are per-rank: this is
the cross-rank attribution.
"""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.analysis.breakdown import median
from perfsight.analysis.collectives import collective_figures
from perfsight.analysis.job import Job
from perfsight.core.memo import computed

#: below this a wait or a gap between ranks is noise (ns) ...
NOISE_FLOOR_NS = 100_000
#: ... and below this share of the median step
NOISE_STEP_SHARE = 0.02
#: a straggler causes at least this many times the wait per step of the rank that causes the next most
STRAGGLER_DOMINANCE = 2.0
#: a step longer than this many times its rank's median step is an outlier (the first: a warm-up)
OUTLIER_STEP_FACTOR = 2.0
#: a rank is slower than another only by more than this many standard errors of their excess (steps jitter:
#: five steps of 110 ms under load differ by milliseconds either way)
PACE_STANDARD_ERRORS = 2.0
#: the standard error of a median, per median absolute deviation and per 1 / sqrt(n): the MAD of a normal
#: sample is 1 / 1.4826 of its standard deviation, and a median's error is sqrt(pi / 2) times a mean's
MEDIAN_ERROR_PER_MAD = 1.4826 * math.sqrt(math.pi / 2)

NOISE_THRESHOLD = f">= {NOISE_FLOOR_NS / 1e6:g} ms and >= {NOISE_STEP_SHARE:.0%} of the median step"
PACE_THRESHOLD = f"{NOISE_THRESHOLD}, and >= {PACE_STANDARD_ERRORS:g} standard errors of the two ranks' medians"
STRAGGLER_THRESHOLD = (f"the others' wait it causes per step {NOISE_THRESHOLD}, and >= {STRAGGLER_DOMINANCE:g} x "
                       "the next rank's")
STRAGGLER_RULE = ("the rank whose late arrival at collectives causes the most wait of the others per step (the "
                  "part of their wait its longer work since the previous collective explains)")

ARRIVALS = pa.schema([
    ("process_group", pa.string()),
    ("sequence", pa.int64()),
    ("step", pa.int32()),
    ("instance_step", pa.int32()),
    ("collective", pa.string()),
    ("rank", pa.int32()),
    ("slice_id", pa.int64()),
    ("arrival_ns", pa.int64()),
    ("end_ns", pa.int64()),
    ("wait_ns", pa.int64()),
    ("transit_ns", pa.int64()),
    ("work_ns", pa.int64()),
    ("first", pa.bool_()),
    ("members", pa.int64()),
    ("last", pa.bool_()),
    ("last_rank", pa.int32()),
    ("caused_ns", pa.int64()),
    ("carried_rank", pa.int32()),
    ("carried_ns", pa.int64()),
])

RANK_WAITS = pa.schema([
    ("process_group", pa.string()),
    ("rank", pa.int32()),
    ("instances", pa.int64()),
    ("last_arrivals", pa.int64()),
    ("steps", pa.int64()),
    ("caused_ns", pa.int64()),
    ("caused_per_step_ns", pa.int64()),
    ("waited_ns", pa.int64()),
    ("waited_per_step_ns", pa.int64()),
    ("straggler", pa.bool_()),
])

STRAGGLER = pa.schema([
    ("straggler_rank", pa.int32()),
    ("caused_per_step_ns", pa.int64()),
    ("waiting_ranks", pa.int64()),
    ("last_arrivals", pa.int64()),
    ("instances", pa.int64()),
    ("next_rank", pa.int32()),
    ("next_caused_per_step_ns", pa.int64()),
    ("median_step_ns", pa.int64()),
    ("rule", pa.string()),
    ("threshold", pa.string()),
])

RANK_PACE = pa.schema([
    ("rank", pa.int32()),
    ("steps", pa.int64()),
    ("common_steps", pa.bool_()),
    ("median_step_ns", pa.int64()),
    ("excess_ns", pa.int64()),
    ("excess_error_ns", pa.int64()),
    ("boundary", pa.string()),
    ("outlier_steps", pa.list_(pa.int32())),
    ("warmup_step", pa.int32()),
])

_ARRIVALS_SQL = """
WITH timed AS (
    SELECT process_group, sequence, step, collective, rank, slice_id, aligned_start_ns AS arrival_ns,
           aligned_start_ns + elapse_ns AS end_ns, wait_ns, transit_ns, members,
           start_ns - aligned_start_ns AS offset_ns
    FROM figures WHERE elapse_ns IS NOT NULL
), exits AS (SELECT rank, end_ns AS exit_ns, process_group AS previous_group, sequence AS previous_sequence FROM timed),
worked AS (
    SELECT t.* EXCLUDE (offset_ns), e.previous_group, e.previous_sequence, e.exit_ns IS NULL AS first,
           t.arrival_ns - coalesce(e.exit_ns, CASE WHEN s.start_ns - t.offset_ns <= t.arrival_ns
                                                    THEN s.start_ns - t.offset_ns END) AS work_ns
    FROM (SELECT * FROM timed WHERE members > 1 AND wait_ns IS NOT NULL) t
    ASOF LEFT JOIN exits e ON t.rank = e.rank AND t.arrival_ns >= e.exit_ns
    LEFT JOIN steps s ON s.rank = t.rank AND s.step = t.step
), instances AS (
    SELECT process_group, sequence, count(*) AS timed_members, arg_max(rank, (arrival_ns, -rank)) AS last_rank,
           arg_max(work_ns, (arrival_ns, -rank)) AS last_work_ns, arg_max(step, (arrival_ns, -rank)) AS instance_step,
           arg_max(previous_group, (arrival_ns, -rank)) AS last_previous_group,
           arg_max(previous_sequence, (arrival_ns, -rank)) AS last_previous_sequence
    FROM worked GROUP BY ALL HAVING count(*) > 1
), split AS (
    SELECT w.*, i.instance_step, i.timed_members AS members, w.rank = i.last_rank AS last, i.last_rank,
           CASE WHEN w.rank <> i.last_rank AND i.last_work_ns IS NOT NULL AND w.work_ns IS NOT NULL
                THEN least(greatest(i.last_work_ns - w.work_ns, 0), w.wait_ns) END AS caused_ns,
           CASE WHEN i.last_previous_group IS DISTINCT FROM w.previous_group
                  OR i.last_previous_sequence IS DISTINCT FROM w.previous_sequence THEN p.last_rank END AS carried_rank
    FROM worked w JOIN instances i ON i.process_group IS NOT DISTINCT FROM w.process_group AND i.sequence = w.sequence
    LEFT JOIN instances p ON p.process_group IS NOT DISTINCT FROM i.last_previous_group
                         AND p.sequence = i.last_previous_sequence
)
SELECT process_group, sequence, step, instance_step, collective, rank, slice_id, arrival_ns, end_ns, wait_ns,
       transit_ns, work_ns, first, members, last, last_rank, caused_ns,
       CASE WHEN NOT last THEN carried_rank END AS carried_rank,
       CASE WHEN NOT last AND carried_rank IS NOT NULL THEN wait_ns - caused_ns END AS carried_ns
FROM split
ORDER BY process_group NULLS FIRST, sequence, rank
"""


def collective_arrivals(job: Job) -> pa.Table:
    """Every timed member of every collective instance with at least two timed members (schema
    ``ARRIVALS``; module docstring): arrival, end, wait, transit and work on aligned clocks, whether it
    arrived last, the instance's last arriver and the part of this member's wait that arriver caused, and the
    part carried from a previous instance with the rank that caused it. Sorted by group, sequence, rank."""
    con = job.connect()
    con.register("figures", computed(collective_figures, job))
    return con.sql(_ARRIVALS_SQL).to_arrow_table().cast(ARRIVALS)


def _middle(values: list) -> float:
    """``breakdown.median`` of a non-empty list of numbers."""
    middle = median(np.asarray(values, dtype=np.float64))
    assert middle is not None, "a median of no values"
    return middle


def _counted_steps(rows: list[dict], warmups: set) -> list:
    """The steps the per-step figures of ``rows`` (arrivals) average over (module docstring): those with
    instances (operations outside any step only in a job without steps), but a warm-up step and a step holding
    a member's first timed operation; all of them when that leaves none."""
    steps = {row["instance_step"] for row in rows}
    if steps != {None}:
        steps.discard(None)
    unknown = {row["instance_step"] for row in rows if row["first"]}
    return sorted(steps - unknown - warmups or steps, key=lambda step: (step is None, step))


def _waits(rows: list[dict], group, warmups: set) -> list[dict]:
    """Per rank, the RANK_WAITS figures of ``rows`` (arrivals of one group, or of the whole job: ``group``
    None) without the straggler flag."""
    steps = _counted_steps(rows, warmups)
    counted = set(steps)
    caused: dict[int, int] = defaultdict(int)
    waited: dict[int, int] = defaultdict(int)
    instances: dict[int, int] = defaultdict(int)
    last: dict[int, int] = defaultdict(int)
    for row in rows:
        instances[row["rank"]] += 1
        last[row["rank"]] += row["last"]
        if row["instance_step"] in counted:
            waited[row["rank"]] += row["wait_ns"]
            caused[row["last_rank"]] += row["caused_ns"] or 0
            if row["carried_rank"] is not None:
                caused[row["carried_rank"]] += row["carried_ns"] or 0
    return [{"process_group": group, "rank": rank, "instances": instances[rank], "last_arrivals": last[rank],
             "steps": len(steps), "caused_ns": caused[rank], "caused_per_step_ns": round(caused[rank] / len(steps)),
             "waited_ns": waited[rank], "waited_per_step_ns": round(waited[rank] / len(steps))}
            for rank in sorted(instances)]


def noise_ns(median_step_ns: int | None) -> float:
    """The least wait or gap that is not noise (``NOISE_FLOOR_NS``, ``NOISE_STEP_SHARE`` of the median step)."""
    return max(NOISE_FLOOR_NS, NOISE_STEP_SHARE * (median_step_ns or 0))


def _straggler_of(ranks: list[dict], median_step_ns: int | None) -> tuple[dict | None, dict | None]:
    """The straggler of per-rank wait figures by the module's rule (None when no rank is one), and the rank
    that causes the next most wait (None for one rank)."""
    ordered = sorted(ranks, key=lambda row: (-row["caused_per_step_ns"], row["rank"]))
    if not ordered:
        return None, None
    top, following = ordered[0], (ordered[1] if len(ordered) > 1 else None)
    beyond_noise = top["caused_per_step_ns"] >= noise_ns(median_step_ns)
    dominant = top["caused_per_step_ns"] >= STRAGGLER_DOMINANCE * (following["caused_per_step_ns"] if following else 0)
    return (top if beyond_noise and dominant else None), following


def _group_key(group):
    return (group is None, group or "")


def rank_waits(job: Job) -> pa.Table:
    """Per process group and rank, then per rank over the whole job (``process_group`` null; schema
    ``RANK_WAITS``): the instances it took part in, how often it arrived last, the steps counted, the wait its
    late arrivals caused the others (in all and the mean per counted step), the wait it suffered itself,
    and whether it is the straggler of the group (or of the job). A group with one timed member has no rows.
    Sorted: the job's rows first, then by group and rank."""
    arrivals = computed(collective_arrivals, job).to_pylist()
    median_step = computed(median_step_ns, job)
    warmups = {step for step in computed(rank_pace, job).column("warmup_step").to_pylist() if step is not None}
    by_group: dict = defaultdict(list)
    for row in arrivals:
        by_group[row["process_group"]].append(row)
    out = []
    for group, rows in [(None, arrivals)] + sorted(by_group.items(), key=lambda item: _group_key(item[0])):
        waits = _waits(rows, group, warmups)
        straggler, _ = _straggler_of(waits, median_step)
        out += [{**row, "straggler": straggler is not None and row["rank"] == straggler["rank"]} for row in waits]
    return pa.Table.from_pylist(out, schema=RANK_WAITS)


def straggler(job: Job) -> pa.Table:
    """The job's straggler verdict (schema ``STRAGGLER``; one row, empty without two timed members of any
    instance): the straggler (null when no rank is one, module docstring) with the wait per step it causes
    the others and how many of them wait (``waiting_ranks``: the mean number of other members), its last
    arrivals among its instances, the rank that causes the next most wait, the median step the noise is
    measured against, and the rule and threshold."""
    waits = [row for row in computed(rank_waits, job).to_pylist() if row["process_group"] is None]
    if not waits:
        return STRAGGLER.empty_table()
    median_step = computed(median_step_ns, job)
    chosen, following = _straggler_of(waits, median_step)
    top = chosen or min(waits, key=lambda row: (-row["caused_per_step_ns"], row["rank"]))
    arrivals = computed(collective_arrivals, job)
    members = pc.mean(arrivals["members"].filter(pc.equal(arrivals["rank"], top["rank"]))).as_py()
    return pa.Table.from_pylist([{
        "straggler_rank": chosen["rank"] if chosen else None,
        "caused_per_step_ns": top["caused_per_step_ns"],
        "waiting_ranks": round(members) - 1 if members is not None else None,
        "last_arrivals": top["last_arrivals"], "instances": top["instances"],
        "next_rank": following["rank"] if following else None,
        "next_caused_per_step_ns": following["caused_per_step_ns"] if following else None,
        "median_step_ns": median_step, "rule": STRAGGLER_RULE, "threshold": STRAGGLER_THRESHOLD}], schema=STRAGGLER)


SLOW_RANKS = pa.schema([field for field in RANK_WAITS if field.name != "straggler"] + [
    ("slow", pa.bool_()), ("rule", pa.string()), ("threshold", pa.string())])


def slow_ranks(job: Job) -> pa.Table:
    """``rank_waits``' rows of each process group (schema ``SLOW_RANKS``): the straggler rule applied to a
    group's instances alone, ``slow`` the group's straggler (it holds up the others of that group), with the
    ``rule`` and ``threshold`` in every row. Sorted by group, rank."""
    rows = [{**row, "slow": row["straggler"], "rule": STRAGGLER_RULE, "threshold": STRAGGLER_THRESHOLD}
            for row in computed(rank_waits, job).to_pylist() if row["process_group"] is not None]
    return pa.Table.from_pylist(rows, schema=SLOW_RANKS)


# ---- the ranks' pace on a common boundary

_BOUNDARY_SQL = """
SELECT rank, step,
       CASE WHEN lag(step) OVER w = step - 1 AND end_ns IS NOT NULL AND lag(end_ns) OVER w IS NOT NULL
            THEN end_ns - lag(end_ns) OVER w ELSE step_ns END AS boundary_ns,
       lag(step) OVER w = step - 1 AND end_ns IS NOT NULL AND lag(end_ns) OVER w IS NOT NULL AS end_to_end
FROM steps WHERE step IS NOT NULL
WINDOW w AS (PARTITION BY rank ORDER BY step)
ORDER BY rank, step
"""


def boundary_steps(job: Job) -> tuple[dict[int, list[tuple[int, int, bool]]], bool]:
    """Per rank, its compared steps as (step, boundary_ns, end_to_end) (module docstring): the step numbers
    every rank has, or each rank's own when they share none; and whether they share some."""
    rows = job.sql(_BOUNDARY_SQL).to_pylist()
    by_rank: dict[int, list] = defaultdict(list)
    for row in rows:
        by_rank[row["rank"]].append((row["step"], row["boundary_ns"], bool(row["end_to_end"])))
    shared = set.intersection(*({step for step, _, _ in steps} for steps in by_rank.values())) if by_rank else set()
    if not shared:
        return dict(by_rank), False
    return {rank: [s for s in steps if s[0] in shared] for rank, steps in by_rank.items()}, True


def rank_pace(job: Job) -> pa.Table:
    """Per rank (schema ``RANK_PACE``; module docstring): the steps compared, whether they are the step numbers
    every rank has, the median step on the common boundary, its ``excess_ns`` over the ranks' pace, which
    ``boundary`` measured it (``end to end``: the steps that follow one of the rank's own; ``own span`` for a
    rank that has none such), the outlier steps and the warm-up step (the rank's first step when it is an
    outlier; null else). Sorted by rank; empty without steps."""
    compared, common = computed(boundary_steps, job)
    measured: dict[int, list[tuple[int, int]]] = {}
    by_step: dict[int, list[int]] = defaultdict(list)
    for rank, steps in compared.items():
        end_to_end = any(flag for _, _, flag in steps)
        measured[rank] = [(step, ns) for step, ns, flag in steps if flag == end_to_end and ns is not None]
        for step, ns in measured[rank]:
            by_step[step].append(ns)
    step_medians = {step: _middle(durations) for step, durations in by_step.items()}
    rows = []
    for rank, steps in sorted(compared.items()):
        if not measured[rank]:
            continue
        middle = round(_middle([ns for _, ns in measured[rank]]))
        outliers = [step for step, ns, _ in steps if ns is not None and ns > OUTLIER_STEP_FACTOR * middle]
        first = steps[0][0]
        excess = [ns - step_medians[step] for step, ns in measured[rank]]
        center = _middle(excess)
        spread = _middle([abs(value - center) for value in excess])
        rows.append({"rank": rank, "steps": len(measured[rank]), "common_steps": common, "median_step_ns": middle,
                     "excess_ns": round(center),
                     "excess_error_ns": round(MEDIAN_ERROR_PER_MAD * spread / math.sqrt(len(excess))),
                     "boundary": "end to end" if any(flag for _, _, flag in steps) else "own span",
                     "outlier_steps": outliers, "warmup_step": first if first in outliers else None})
    return pa.Table.from_pylist(rows, schema=RANK_PACE)


def median_step_ns(job: Job) -> int | None:
    """The median of the ranks' median steps on the common boundary (``rank_pace``); None without steps."""
    medians = computed(rank_pace, job).column("median_step_ns").to_pylist()
    return round(_middle(medians)) if medians else None


def pace_noise_ns(slow: dict, fast: dict, median_ns: int | None) -> float:
    """The least gap between two ranks' excess (``rank_pace`` rows) that is not noise: ``noise_ns``, and
    ``PACE_STANDARD_ERRORS`` standard errors of the two medians (their steps' jitter, over their number)."""
    return max(noise_ns(median_ns), PACE_STANDARD_ERRORS * (slow["excess_error_ns"] + fast["excess_error_ns"]))
