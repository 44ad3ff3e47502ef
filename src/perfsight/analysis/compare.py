"""Two runs side by side (BASE and NEW), or two sets of runs of the same code: how much slower or faster NEW's
steps are beyond the noise, and where the difference comes from. Pure functions of the runs' tables, each
reading the single-run analyses of a run through its memo; ``perfsight.compare`` is their front door.

A side (``Side``) is one run's tables or several runs' (the same code run again). Every figure
"per rank and step" of a side is the mean over its runs of each run's figure per rank and step, each run
weighing the same whatever its length (``_per_step``); a scalar figure the mean of the runs that record it.

* **Steps** (``step_comparison``): a job's step lasts as long as its slowest rank's (``job_step_times``: per
  step, the longest ``breakdown.step_breakdown`` step of any rank); a side's mean step is the mean of its
  runs' mean steps (``_mean_step``). The difference is NEW's mean step minus BASE's, with Welch's
  ``CONFIDENCE`` interval (unequal variances: ``_welch_half_width``), both as percent of BASE's mean. The
  interval weighs one of two noises (``noise``, said in words in ``rule``):

  - ``RUN_TO_RUN`` when both sides have at least ``MIN_RUNS`` runs with steps: Welch's t on the runs' mean
    steps, each run one sample, so the variance is the variance between runs: the step-to-step noise of each
    run and what changes from run to run (data order, placement, clocks, the machine's other load);
  - ``STEP_TO_STEP`` otherwise: Welch's t on the steps of each side, each step one sample. One run a side
    cannot show how much runs differ, and this interval does not cover it: two runs of the same code can
    differ beyond it (a run's steps share its placement and warm-up), so it says so.

  Verdict: ``slower`` / ``faster`` when the interval lies above / below 0, ``no difference`` when it holds 0
  (or every sample of both sides is equal and equal to each other's), ``noise unknown`` when a side has one
  sample (one step, or one run's mean: the difference is still given), ``no steps`` when no run of a side has
  steps (a run without steps is left out of the samples). ``slower_than`` is the CI gate's test: the
  interval's low end, so with several runs a side the gate judges beyond the run-to-run noise.
* **Breakdown** (``breakdown_comparison``): each category of ``breakdown.step_breakdown`` (idle included), its
  mean per rank and step on either side and the difference, as a share of the step difference.
* **Operators and kernels** (``operator_comparison``): host operators (``cpu_op``) or device tasks, aligned by
  name (an Ascend task by its type: ``ALIGNED_BY``), then across frameworks by family (``FAMILIES_FILE``:
  ``aten::mm`` / ``aten::addmm`` / a GEMM kernel <-> ``MatMul`` / ``MatMulV2``, convolution, attention, norms,
  pooling, activations, optimizer, ...). Counted: the executions inside the profiled steps (a slice's
  ``step``; every execution of a run without steps, which counts as one step), as HTA's TraceDiff counts them
  over all iterations. Per operator: calls and time per rank and step, total, mean per call, ``status``
  ``both`` / ``new`` (only NEW has it) / ``vanished`` (only BASE), the difference per step; largest
  difference first. Its share of the step difference is of its self time (``ops.execution_totals``: the
  time in none of its nested slices): an operator's time includes the operators nested in it, so shares of
  that time count nested work once per level (``aten::to`` > ``aten::copy_``), while self times never
  overlap and the shares of all rows add up to the operators' part of the step difference.
  The model's modules (``nn.Module: Linear_0``, recorded with torch.profiler's ``with_modules``) compare the
  same way, by name.
* **Memory** (``memory_comparison``): per operator type allocating, allocations and bytes allocated per rank
  and step on either side (``memory.allocations_by_op``).
* **Ranks** (``rank_comparison``): two jobs rank by rank, each rank's mean step (``cluster.mean_step_by_rank``)
  on either side (of several runs: the mean of the runs').
* **Communication** (``communication_comparison``): per collective and group size, calls, bytes and device
  time per rank and step.
* **Figures** (``figure_comparison``): one row per scalar of either run: kernels launched per step (and of
  them replayed from CUDA graphs), mean kernel time, mean launch call and delay (of the kernels launched one
  by one), peak allocated and reserved memory, model FLOPs per step and utilisation.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar, Union

import numpy as np
import pyarrow as pa
from pyarrow import csv

from perfsight.analysis.breakdown import CATEGORIES, step_breakdown
from perfsight.analysis.cluster import mean_step_by_rank
from perfsight.analysis.collectives import collectives
from perfsight.analysis.flops import model_flops, model_flops_total
from perfsight.analysis.job import Job
from perfsight.analysis.kernels import launch_stats, launch_summary
from perfsight.analysis.memory import allocations_by_op, memory_peak
from perfsight.analysis.ops import execution_totals, has_device_tasks
from perfsight.core.errors import InputError
from perfsight.core.files import read_regular
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables, new_connection

#: the operator families shipped: docs/compare.md says how to add more
FAMILIES_FILE = Path(__file__).with_name("data") / "op_families.csv"
#: what operators are aligned by: the operator type where the format records one (Ascend's device tasks, whose
#: names tell each instance apart: ``trans_TransData_12`` is a ``TransData``), else the name (a Kineto event's
#: type is its name)
ALIGNED_BY = "coalesce(op_type, name)"
#: what ``operator_comparison`` compares: name -> (the slice kinds, ``ops.op_instances``' ``kinds``: None for
#: the device tasks; a LIKE pattern of the names kept): host operators, device tasks (kernels, copies,
#: collectives), and the model's modules (torch.profiler's ``with_modules``: ``nn.Module: Linear_0``)
HOST, DEVICE, MODULES = "host", "device", "modules"
EXECUTIONS: dict[str, tuple[tuple[str, ...] | None, str]] = {
    HOST: (("cpu_op",), "%"), DEVICE: (None, "%"), MODULES: (("python",), "nn.Module: %")}
#: the confidence of the step difference's interval
CONFIDENCE = 0.95
#: the verdicts of ``step_comparison``
SLOWER, FASTER, NO_DIFFERENCE, NOISE_UNKNOWN, NO_STEPS = "slower", "faster", "no difference", "noise unknown", \
    "no steps"
#: the noise the step difference's interval weighs (module docstring): the variance between a side's runs, or
#: between its steps
RUN_TO_RUN, STEP_TO_STEP = "run-to-run", "step-to-step"
#: the runs with steps each side needs for the interval to weigh the variance between runs
MIN_RUNS = 2
#: the names of the sides in the tables and the rules
BASE, NEW = "BASE", "NEW"

#: one side of a comparison: one run's tables, or several runs'
Side = Union[RunTables, Sequence[RunTables]]

JOB_STEP_TIMES = pa.schema([("step", pa.int32()), ("step_ns", pa.int64())])

STEP_COMPARISON = pa.schema([
    ("base_runs", pa.int64()), ("new_runs", pa.int64()),
    ("base_steps", pa.int64()), ("new_steps", pa.int64()),
    ("base_mean_ns", pa.float64()), ("new_mean_ns", pa.float64()),
    ("base_stddev_ns", pa.float64()), ("new_stddev_ns", pa.float64()),
    ("difference_ns", pa.float64()), ("difference_pct", pa.float64()),
    ("ci_low_pct", pa.float64()), ("ci_high_pct", pa.float64()), ("confidence", pa.float64()),
    ("noise", pa.string()), ("rule", pa.string()), ("verdict", pa.string()),
])

RUN_STEPS = pa.schema([
    ("side", pa.string()), ("run", pa.int32()), ("steps", pa.int64()), ("mean_step_ns", pa.float64()),
])

BREAKDOWN_COMPARISON = pa.schema([
    ("category", pa.string()), ("base_ns", pa.float64()), ("new_ns", pa.float64()),
    ("difference_ns", pa.float64()), ("share_pct", pa.float64()),
])

OPERATOR_COMPARISON = pa.schema([
    ("name", pa.string()), ("status", pa.string()), ("matched_by", pa.string()),
    ("base_names", pa.list_(pa.string())), ("new_names", pa.list_(pa.string())),
    ("base_calls", pa.int64()), ("new_calls", pa.int64()),
    ("base_calls_per_step", pa.float64()), ("new_calls_per_step", pa.float64()),
    ("base_total_ns", pa.int64()), ("new_total_ns", pa.int64()),
    ("base_mean_ns", pa.float64()), ("new_mean_ns", pa.float64()),
    ("base_per_step_ns", pa.float64()), ("new_per_step_ns", pa.float64()),
    ("difference_per_step_ns", pa.float64()),
    ("base_self_per_step_ns", pa.float64()), ("new_self_per_step_ns", pa.float64()),
    ("self_difference_per_step_ns", pa.float64()), ("share_pct", pa.float64()),
])

COMMUNICATION_COMPARISON = pa.schema([
    ("collective", pa.string()), ("group_size", pa.int64()), ("status", pa.string()),
    ("base_calls_per_step", pa.float64()), ("new_calls_per_step", pa.float64()),
    ("base_bytes_per_step", pa.float64()), ("new_bytes_per_step", pa.float64()),
    ("base_per_step_ns", pa.float64()), ("new_per_step_ns", pa.float64()),
    ("difference_per_step_ns", pa.float64()),
])

MEMORY_COMPARISON = pa.schema([
    ("op_type", pa.string()), ("status", pa.string()),
    ("base_allocations_per_step", pa.float64()), ("new_allocations_per_step", pa.float64()),
    ("base_bytes_per_step", pa.float64()), ("new_bytes_per_step", pa.float64()),
    ("difference_bytes_per_step", pa.float64()),
])

RANK_COMPARISON = pa.schema([
    ("rank", pa.int32()), ("base_step_ns", pa.int64()), ("new_step_ns", pa.int64()),
    ("difference_ns", pa.int64()), ("difference_pct", pa.float64()),
])

FIGURE_COMPARISON = pa.schema([
    ("figure", pa.string()), ("unit", pa.string()), ("base", pa.float64()), ("new", pa.float64()),
    ("difference", pa.float64()), ("difference_pct", pa.float64()),
])


T = TypeVar("T")


def _each(side, one: type[T]) -> tuple[T, ...]:
    """A side as a tuple of its runs (or jobs): itself alone when it is one ``one``, else its items."""
    return (side,) if isinstance(side, one) else tuple(side)


def job_step_times(tables: RunTables) -> pa.Table:
    """Per step, the job's step time: the longest ``step_breakdown`` step of any rank (schema
    ``JOB_STEP_TIMES``); empty without steps."""
    con = new_connection()
    con.register("b", computed(step_breakdown, tables))
    return con.sql("SELECT step, max(step_ns) AS step_ns FROM b GROUP BY step ORDER BY step").to_arrow_table() \
        .cast(JOB_STEP_TIMES)


def rank_steps(tables: RunTables) -> int:
    """The (rank, step) pairs of a run's ``step_breakdown``, at least 1: what per-step figures divide by (a
    run without steps counts as one step)."""
    return max(1, computed(step_breakdown, tables).num_rows)


def _step_times(side: Side) -> list[np.ndarray]:
    """The job step times (ns) of each run of a side, in the order given (empty for a run without steps)."""
    return [computed(job_step_times, run).column("step_ns").to_numpy().astype(float)
            for run in _each(side, RunTables)]


def _runs_with_steps(side: Side) -> list[np.ndarray]:
    """The job step times of each run of a side that has steps (a run without is no sample of the noise)."""
    return [steps for steps in _step_times(side) if len(steps)]


def _mean_step(runs: list[np.ndarray]) -> float:
    """A side's mean step: the mean of its runs' mean steps (each of ``runs`` a run's step times, none empty)."""
    return float(np.mean([steps.mean() for steps in runs]))


def runs_compared(base: Side, new: Side) -> pa.Table:
    """Each run of either side, in the order given (schema ``RUN_STEPS``): its ``side`` (``BASE``, ``NEW``),
    its place ``run`` among the side's runs (from 0), its job ``steps`` and their mean (null without steps):
    the samples ``step_comparison`` weighs between runs."""
    rows = [{"side": name, "run": place, "steps": len(steps), "mean_step_ns": float(steps.mean()) if len(steps)
             else None}
            for name, side in ((BASE, base), (NEW, new)) for place, steps in enumerate(_step_times(side))]
    return pa.Table.from_pylist(rows, schema=RUN_STEPS)


def step_comparison(base: Side, new: Side) -> pa.Table:
    """One row (schema ``STEP_COMPARISON``): both sides' runs with steps and their steps, the mean step
    (``_mean_step``) and the standard deviation of the samples weighed (each run's mean step, or each step; ns),
    NEW - BASE in ns and as percent of BASE's mean with its ``CONFIDENCE`` interval, the ``noise`` it weighs
    (``RUN_TO_RUN`` or ``STEP_TO_STEP``) and its ``rule`` in words (null for ``noise unknown``: nothing was
    weighed), and the verdict (module docstring)."""
    before, after = _runs_with_steps(base), _runs_with_steps(new)
    row: dict = {"base_runs": len(before), "new_runs": len(after), "base_steps": sum(map(len, before)),
                 "new_steps": sum(map(len, after)), "confidence": CONFIDENCE}
    if not before or not after:
        return pa.Table.from_pylist([{**row, "verdict": NO_STEPS}], schema=STEP_COMPARISON)
    noise = RUN_TO_RUN if min(len(before), len(after)) >= MIN_RUNS else STEP_TO_STEP
    samples = [np.array([steps.mean() for steps in runs]) if noise == RUN_TO_RUN else np.concatenate(runs)
               for runs in (before, after)]
    base_mean, new_mean = _mean_step(before), _mean_step(after)
    difference = new_mean - base_mean
    row.update(base_mean_ns=base_mean, new_mean_ns=new_mean, difference_ns=difference,
               base_stddev_ns=float(samples[0].std(ddof=1)) if len(samples[0]) > 1 else None,
               new_stddev_ns=float(samples[1].std(ddof=1)) if len(samples[1]) > 1 else None,
               difference_pct=100 * difference / base_mean, noise=noise)
    weighed = min(map(len, samples)) >= 2                          # else nothing to weigh: no rule to say
    row["rule"] = _rule(noise, before, after) if weighed else None
    if not weighed:
        verdict = NOISE_UNKNOWN
    elif row["base_stddev_ns"] == row["new_stddev_ns"] == 0:       # exact: no noise to weigh
        row.update(ci_low_pct=row["difference_pct"], ci_high_pct=row["difference_pct"])
        verdict = NO_DIFFERENCE if difference == 0 else SLOWER if difference > 0 else FASTER
    else:
        half = _welch_half_width(*samples)
        low, high = 100 * (difference - half) / base_mean, 100 * (difference + half) / base_mean
        row.update(ci_low_pct=low, ci_high_pct=high)
        verdict = SLOWER if low > 0 else FASTER if high < 0 else NO_DIFFERENCE
    return pa.Table.from_pylist([{**row, "verdict": verdict}], schema=STEP_COMPARISON)


def _rule(noise: str, before: list[np.ndarray], after: list[np.ndarray]) -> str:
    """How ``step_comparison`` weighed the noise, in words (``before`` / ``after``: each run's step times)."""
    if noise == RUN_TO_RUN:
        return (f"Welch's t on each run's mean step ({len(before)} {BASE} runs, {len(after)} {NEW} runs): the "
                f"interval weighs the variance between runs")
    single = [name for name, runs in ((BASE, before), (NEW, after)) if len(runs) < MIN_RUNS]
    runs = "one run a side" if len(single) == 2 else f"one run of {single[0]}"
    return (f"Welch's t on every step ({sum(map(len, before)):,} of {BASE}, {sum(map(len, after)):,} of {NEW}), "
            f"with {runs}: the interval weighs the variance between steps, not between runs")


def _welch_half_width(before, after) -> float:
    """Half the width of Welch's ``CONFIDENCE`` interval of the difference of two samples' means (unequal
    variances; the Welch-Satterthwaite degrees of freedom; what ``scipy.stats.ttest_ind(equal_var=False)``'s
    ``confidence_interval`` gives), the t quantile from ``scipy.special.stdtrit`` (scipy.stats takes ~0.7 s to
    import, scipy.special ~0.2 s)."""
    from scipy.special import stdtrit  # imported here: only when runs are compared

    base_term, new_term = before.var(ddof=1) / len(before), after.var(ddof=1) / len(after)
    freedom = (base_term + new_term) ** 2 / (base_term ** 2 / (len(before) - 1) + new_term ** 2 / (len(after) - 1))
    return float(stdtrit(freedom, (1 + CONFIDENCE) / 2) * math.sqrt(base_term + new_term))


def slower_than(steps: pa.Table, percent: float) -> bool:
    """Whether a ``step_comparison`` row says NEW is slower than BASE by more than ``percent`` of BASE's mean
    step beyond the noise its interval weighs (the variance between runs with several runs a side): its
    interval's low end above ``percent`` (``noise unknown``: the difference itself above it). ``no steps`` is
    an InputError: there is nothing to judge, and a gate must not pass on it."""
    row = steps.to_pylist()[0]
    if row["verdict"] == NO_STEPS:
        side = BASE if not row["base_steps"] else NEW
        raise InputError(f"{side} has no steps: the step time cannot be compared (profile at least one step: "
                         "torch.profiler's ProfilerStep, perfsight's steps, or torch_npu's step_trace_time.csv)")
    bound = row["difference_pct"] if row["verdict"] == NOISE_UNKNOWN else row["ci_low_pct"]
    return bound > percent


def _step_difference_ns(base: Side, new: Side) -> float | None:
    """NEW's mean step minus BASE's (``_mean_step``), what the shares are of (None without steps on a side, or
    no difference to share): the means alone, not ``step_comparison``'s interval."""
    before, after = _runs_with_steps(base), _runs_with_steps(new)
    if not before or not after:
        return None
    difference = _mean_step(after) - _mean_step(before)
    return difference if difference else None


def _share(difference: float | None, whole: float | None) -> float | None:
    return None if difference is None or not whole else 100 * difference / whole


def _mean(values: Sequence[float | None]) -> float | None:
    """The mean of the values that are known (a run that does not record a figure is left out); None for none."""
    known = [value for value in values if value is not None]
    return sum(known) / len(known) if known else None


def _per_step(side: Side, per_run: Callable[[RunTables], pa.Table], keys: str, sums: Sequence[str]) -> pa.Table:
    """``per_run`` of each run of ``side`` (a table of the ``keys`` columns and the ``sums`` columns) summed per
    ``keys`` (a null key is a key): each of ``sums`` over every run, and ``<sum>_per_step``: the mean over the
    runs of each run's sum per rank and step (``rank_steps``; module docstring)."""
    runs = _each(side, RunTables)
    parts = []
    for run in runs:
        table = per_run(run)
        weight = 1 / (len(runs) * rank_steps(run))
        parts.append(table.append_column("weight", pa.array(np.full(table.num_rows, weight))))
    con = new_connection()
    con.register("runs", pa.concat_tables(parts))
    figures = ", ".join(f"sum({name})::BIGINT AS {name}, sum({name} * weight) AS {name}_per_step" for name in sums)
    return con.sql(f"SELECT {keys}, {figures} FROM runs GROUP BY {keys}").to_arrow_table()


def breakdown_comparison(base: Side, new: Side) -> pa.Table:
    """Per category of ``step_breakdown`` (``CATEGORIES`` and idle), its mean per rank and step on either
    side (of several runs: the mean of the runs'), NEW - BASE, and that as percent of the step difference
    (schema ``BREAKDOWN_COMPARISON``)."""
    whole = _step_difference_ns(base, new)
    rows = []
    for category in (*CATEGORIES, "idle"):
        base_ns, new_ns = (_mean([_mean(computed(step_breakdown, run).column(f"{category}_ns").to_pylist())
                                  for run in _each(side, RunTables)]) for side in (base, new))
        difference = None if base_ns is None or new_ns is None else new_ns - base_ns
        rows.append({"category": category, "base_ns": base_ns, "new_ns": new_ns, "difference_ns": difference,
                     "share_pct": _share(difference, whole)})
    return pa.Table.from_pylist(rows, schema=BREAKDOWN_COMPARISON)


def _named_statistic(tables: RunTables, executions: str) -> pa.Table:
    """Per operator (its type where the format records one, else its name: ``ALIGNED_BY``), calls, total ns and
    self ns over every rank, of the executions inside the profiled steps (all of them in a run without steps):
    the run's ``executions`` (``EXECUTIONS``)."""
    if executions == DEVICE and not computed(has_device_tasks, tables):
        return pa.table({"name": pa.array([], pa.string()), **{name: pa.array([], pa.int64())
                                                              for name in ("calls", "total_ns", "self_ns")}})
    kinds, names = EXECUTIONS[executions]
    in_steps = "step IS NOT NULL" if computed(step_breakdown, tables).num_rows else "true"
    con = new_connection()
    con.register("s", computed(execution_totals, tables, kinds=kinds))
    return con.sql(f"SELECT {ALIGNED_BY} AS name, sum(count)::BIGINT AS calls, sum(total_ns)::BIGINT AS total_ns, "
                   f"sum(self_ns)::BIGINT AS self_ns FROM s WHERE {in_steps} AND name LIKE $names GROUP BY ALL",
                   params={"names": names}).to_arrow_table()


def operator_families(extra: str | Path | None = None) -> pa.Table:
    """The family patterns operators are aligned by across frameworks (``FAMILIES_FILE``, after the rows of
    the CSV file ``extra`` when given: its rows are tried first), with their ``position``: family, pattern
    (an RE2 regular expression searched in what an operator is aligned by, ``ALIGNED_BY``), what it matches."""
    tables = [_families_file(*_file_key(Path(extra)))] if extra is not None else []
    tables.append(_families_file(*_file_key(FAMILIES_FILE)))
    families = pa.concat_tables(tables)
    return families.append_column("position", pa.array(range(families.num_rows), pa.int64()))


def _file_key(path: Path) -> tuple[Path, int, int]:
    """A file with its size and mtime (-1 when it cannot be seen: the read says why): a read kept until the file
    changes."""
    try:
        status = path.stat()
    except OSError:
        return path, -1, -1
    return path, status.st_size, status.st_mtime_ns


@functools.lru_cache(maxsize=8)
def _families_file(path: Path, size: int, mtime_ns: int) -> pa.Table:
    """The families of one CSV file (``operator_families``), read once per version of the file (``size`` and
    ``mtime_ns`` key the cache); its patterns checked with one query, and row by row only to name a bad one."""
    data = read_regular(path)   # a FIFO or a device is an InputError naming it, never waited on
    try:
        table = csv.read_csv(pa.py_buffer(data), convert_options=csv.ConvertOptions(column_types={
            name: pa.string() for name in ("family", "pattern", "matches")}))
    except (OSError, pa.ArrowInvalid) as error:
        raise InputError(f"{path}: not a readable CSV of operator families ({error})") from None
    missing = [name for name in ("family", "pattern") if name not in table.column_names]
    if missing:
        raise InputError(f"{path}: operator families need the columns family and pattern (and optionally "
                         f"matches); it lacks {', '.join(missing)}")
    matches = table["matches"] if "matches" in table.column_names else pa.nulls(table.num_rows, pa.string())
    families = pa.table({"family": table["family"], "pattern": table["pattern"], "matches": matches})
    con = new_connection()
    con.register("families", families)
    try:
        con.execute("SELECT bool_or(regexp_matches('', coalesce(pattern, ''))) FROM families").fetchall()
    except Exception:  # noqa: BLE001 - a bad pattern: found row by row below, said with its line
        for row, pattern in enumerate(table["pattern"].to_pylist(), start=2):
            try:
                con.execute("SELECT regexp_matches('', $pattern)", {"pattern": pattern or ""})
            except Exception as error:  # noqa: BLE001 - DuckDB's error for the pattern
                raise InputError(f"{path}: line {row}: pattern {pattern!r} is not a regular expression: "
                                 f"{str(error).splitlines()[0]}") from None
    return families


#: per side (b, n) each operator's calls (c), total ns (t), and calls, total ns and self ns per rank and step (cs,
#: ts, ss: ``_per_step``)
_ALIGNED_SQL = """
WITH joined AS (
    SELECT coalesce(b.name, n.name) AS name, b.calls AS bc, b.total_ns AS bt, b.calls_per_step AS bcs,
           b.total_ns_per_step AS bts, b.self_ns_per_step AS bss, n.calls AS nc, n.total_ns AS nt,
           n.calls_per_step AS ncs, n.total_ns_per_step AS nts, n.self_ns_per_step AS nss
    FROM b FULL OUTER JOIN n ON b.name = n.name
), labelled AS (
    SELECT j.*, CASE WHEN bc IS NULL OR nc IS NULL THEN (
        SELECT f.family FROM families f WHERE regexp_matches(j.name, f.pattern) ORDER BY f.position LIMIT 1)
        END AS family
    FROM joined j
), paired AS (
    SELECT family FROM labelled WHERE family IS NOT NULL GROUP BY family HAVING count(bc) > 0 AND count(nc) > 0
), aligned AS (
    SELECT name, CASE WHEN bc IS NOT NULL AND nc IS NOT NULL THEN 'name' END AS matched_by,
           NULL AS base_names, NULL AS new_names, bc, bt, bcs, bts, bss, nc, nt, ncs, nts, nss
    FROM labelled WHERE family IS NULL OR family NOT IN (SELECT family FROM paired)
    UNION ALL
    SELECT family, 'family', list(name ORDER BY name) FILTER (WHERE bc IS NOT NULL),
           list(name ORDER BY name) FILTER (WHERE nc IS NOT NULL), sum(bc), sum(bt), sum(bcs), sum(bts), sum(bss),
           sum(nc), sum(nt), sum(ncs), sum(nts), sum(nss)
    FROM labelled WHERE family IN (SELECT family FROM paired) GROUP BY family
)
SELECT name, CASE WHEN bc IS NULL THEN 'new' WHEN nc IS NULL THEN 'vanished' ELSE 'both' END AS status,
       matched_by, base_names, new_names,
       coalesce(bc, 0) AS base_calls, coalesce(nc, 0) AS new_calls,
       coalesce(bcs, 0) AS base_calls_per_step, coalesce(ncs, 0) AS new_calls_per_step,
       coalesce(bt, 0) AS base_total_ns, coalesce(nt, 0) AS new_total_ns,
       bt / bc AS base_mean_ns, nt / nc AS new_mean_ns,
       coalesce(bts, 0) AS base_per_step_ns, coalesce(nts, 0) AS new_per_step_ns,
       new_per_step_ns - base_per_step_ns AS difference_per_step_ns,
       coalesce(bss, 0) AS base_self_per_step_ns, coalesce(nss, 0) AS new_self_per_step_ns,
       new_self_per_step_ns - base_self_per_step_ns AS self_difference_per_step_ns,
       100 * self_difference_per_step_ns / $whole AS share_pct
FROM aligned
ORDER BY abs(difference_per_step_ns) DESC, name
"""


def operator_comparison(base: Side, new: Side, *, executions: str = HOST,
                        families: str | Path | None = None) -> pa.Table:
    """The host operators, device tasks or modules (``executions``: ``EXECUTIONS``) of both sides aligned (schema
    ``OPERATOR_COMPARISON``): by name, then what is left on both sides by family (``operator_families``,
    ``families`` a CSV file of more tried first): a family with operators only BASE has and operators only NEW
    has is one row named after the family (``matched_by`` "family", the members in ``base_names`` /
    ``new_names``). Figures per rank and step (module docstring): calls, time and self time, and their
    differences; ``share_pct``: the self time's difference per step as percent of the step difference (null
    without one), so the shares of all rows add up. Largest difference first."""
    con = new_connection()
    if executions not in EXECUTIONS:
        raise InputError(f"executions={executions!r}: expected one of {', '.join(EXECUTIONS)}")
    for name, side in (("b", base), ("n", new)):
        con.register(name, _per_step(side, lambda run: _named_statistic(run, executions), "name",
                                     ("calls", "total_ns", "self_ns")))
    con.register("families", operator_families(families))
    params = {"whole": _step_difference_ns(base, new) or math.nan}
    return con.sql(_ALIGNED_SQL, params=params).to_arrow_table().cast(OPERATOR_COMPARISON)


def largest_changes(rows: list[dict], top: int) -> tuple[list[dict], list[dict]]:
    """Of an ``operator_comparison`` table's rows (largest difference first), the ``top`` that grew most per
    step and the ``top`` that shrank most: what the terminal report and the Compare page list."""
    return ([row for row in rows if row["difference_per_step_ns"] > 0][:top],
            [row for row in rows if row["difference_per_step_ns"] < 0][:top])


def _communication(tables: RunTables) -> pa.Table:
    con = new_connection()
    con.register("c", computed(collectives, tables))
    return con.sql("SELECT collective, group_size, count(*) AS calls, sum(coalesce(in_bytes, 0))::BIGINT AS bytes, "
                   "sum(dur_ns)::BIGINT AS dur_ns FROM c GROUP BY ALL").to_arrow_table()


def communication_comparison(base: Side, new: Side) -> pa.Table:
    """Per collective name and group size, both sides' calls, input bytes and device time per rank and step
    (null time: not recorded), NEW - BASE time per step (schema ``COMMUNICATION_COMPARISON``)."""
    con = new_connection()
    for name, side in (("b", base), ("n", new)):
        con.register(name, _per_step(side, _communication, "collective, group_size", ("calls", "bytes", "dur_ns")))
    query = """
        SELECT coalesce(b.collective, n.collective) AS collective, coalesce(b.group_size, n.group_size) AS group_size,
               CASE WHEN b.collective IS NULL THEN 'new' WHEN n.collective IS NULL THEN 'vanished' ELSE 'both' END
                   AS status,
               coalesce(b.calls_per_step, 0) AS base_calls_per_step,
               coalesce(n.calls_per_step, 0) AS new_calls_per_step,
               coalesce(b.bytes_per_step, 0) AS base_bytes_per_step,
               coalesce(n.bytes_per_step, 0) AS new_bytes_per_step,
               b.dur_ns_per_step AS base_per_step_ns, n.dur_ns_per_step AS new_per_step_ns,
               coalesce(new_per_step_ns, 0) - coalesce(base_per_step_ns, 0) AS difference_per_step_ns
        FROM b FULL OUTER JOIN n ON b.collective = n.collective AND b.group_size IS NOT DISTINCT FROM n.group_size
        ORDER BY abs(difference_per_step_ns) DESC, collective, group_size
    """
    return con.sql(query).to_arrow_table().cast(COMMUNICATION_COMPARISON)


def _allocations(tables: RunTables) -> pa.Table:
    con = new_connection()
    con.register("a", computed(allocations_by_op, tables))
    return con.sql("SELECT op_type, sum(alloc_count)::BIGINT AS calls, sum(alloc_bytes)::BIGINT AS bytes FROM a "
                   "GROUP BY ALL").to_arrow_table()


def memory_comparison(base: Side, new: Side) -> pa.Table:
    """Per operator type allocating (null: none running), both sides' allocations and bytes allocated per rank and
    step (``memory.allocations_by_op``), NEW - BASE bytes; largest difference first (schema
    ``MEMORY_COMPARISON``)."""
    con = new_connection()
    for name, side in (("b", base), ("n", new)):
        con.register(name, _per_step(side, _allocations, "op_type", ("calls", "bytes")))
    query = """
        SELECT coalesce(b.op_type, n.op_type) AS op_type,
               CASE WHEN b.calls IS NULL THEN 'new' WHEN n.calls IS NULL THEN 'vanished' ELSE 'both' END AS status,
               coalesce(b.calls_per_step, 0) AS base_allocations_per_step,
               coalesce(n.calls_per_step, 0) AS new_allocations_per_step,
               coalesce(b.bytes_per_step, 0) AS base_bytes_per_step,
               coalesce(n.bytes_per_step, 0) AS new_bytes_per_step,
               new_bytes_per_step - base_bytes_per_step AS difference_bytes_per_step
        FROM b FULL OUTER JOIN n ON b.op_type IS NOT DISTINCT FROM n.op_type
        ORDER BY abs(difference_bytes_per_step) DESC, op_type
    """
    return con.sql(query).to_arrow_table().cast(MEMORY_COMPARISON)


def _rank_means(side: Job | Sequence[Job]) -> pa.Table:
    """Per rank, its mean step (``cluster.mean_step_by_rank``) over the jobs of a side that have the rank."""
    con = new_connection()
    con.register("r", pa.concat_tables([computed(mean_step_by_rank, job).select(["rank", "step_ns"])
                                        for job in _each(side, Job)]))
    return con.sql("SELECT rank, round(avg(step_ns))::BIGINT AS step_ns FROM r GROUP BY rank").to_arrow_table()


def rank_comparison(base: Job | Sequence[Job], new: Job | Sequence[Job]) -> pa.Table:
    """Two jobs (or two sides of several) rank by rank: each rank's mean step on either side
    (``cluster.mean_step_by_rank``, of several jobs the mean of theirs; null where a side lacks the rank), NEW -
    BASE in ns and as percent of BASE's (schema ``RANK_COMPARISON``)."""
    con = new_connection()
    con.register("b", _rank_means(base))
    con.register("n", _rank_means(new))
    query = """
        SELECT coalesce(b.rank, n.rank) AS rank, b.step_ns AS base_step_ns, n.step_ns AS new_step_ns,
               n.step_ns - b.step_ns AS difference_ns, 100.0 * (n.step_ns - b.step_ns) / b.step_ns AS difference_pct
        FROM b FULL OUTER JOIN n ON b.rank = n.rank ORDER BY rank
    """
    return con.sql(query).to_arrow_table().cast(RANK_COMPARISON)


def ranks_slowed_most(rows: list[dict], top: int) -> list[dict]:
    """Of a ``rank_comparison`` table's rows, the ``top`` ranks whose mean step grew most (a difference above 0),
    most first: what the terminal report lists of a job of more ranks than it shows."""
    slowed = [row for row in rows if row["difference_ns"] is not None and row["difference_ns"] > 0]
    return sorted(slowed, key=lambda row: (-row["difference_ns"], row["rank"]))[:top]


def _figures(tables: RunTables) -> dict[str, tuple[str, float | None]]:
    """A run's scalar figures: name -> (unit, value; None when the run does not record it)."""
    launches = computed(launch_stats, tables)
    summary = launch_summary(launches).to_pylist() if launches.num_rows else []
    peaks = computed(memory_peak, tables).to_pylist()
    flops = model_flops_total(computed(model_flops, tables)).to_pylist()
    steps = rank_steps(tables)

    def mean(rows: list[dict], key: str) -> float | None:
        values = [row[key] for row in rows if row[key] is not None]
        return sum(values) / len(values) if values else None

    def maximum(rows: list[dict], key: str) -> float | None:
        values = [row[key] for row in rows if row[key] is not None]
        return float(max(values)) if values else None

    return {
        "kernels per step": ("", launches.num_rows / steps if launches.num_rows else None),
        "mean kernel time": ("ns", mean(summary, "mean_gpu_dur_ns")),
        "kernels replayed from graphs per step": (
            "", sum(row["graph_kernels"] for row in summary) / steps if any(r["graph_kernels"] for r in summary)
            else None),
        "mean launch call": ("ns", mean(summary, "mean_cpu_dur_ns")),
        "mean launch delay": ("ns", mean(summary, "mean_launch_delay_ns")),
        "peak memory allocated": ("bytes", maximum(peaks, "peak_allocated_bytes")),
        "peak memory reserved": ("bytes", maximum(peaks, "peak_reserved_bytes")),
        "model FLOPs per step": ("FLOP", mean(flops, "flops_per_step") if any(r["flops"] for r in flops) else None),
        "utilisation": ("%", mean(flops, "utilization_percent")),
    }


def _side_figures(side: Side) -> dict[str, tuple[str, float | None]]:
    """A side's scalar figures (``_figures``): of several runs, the mean of the runs that record each."""
    runs = [_figures(run) for run in _each(side, RunTables)]
    return {name: (unit, _mean([figures[name][1] for figures in runs])) for name, (unit, _) in runs[0].items()}


def figure_comparison(base: Side, new: Side) -> pa.Table:
    """One row per scalar figure either side records (module docstring; schema ``FIGURE_COMPARISON``): its
    unit, both values (null where a side does not record it), NEW - BASE and that as percent of BASE."""
    before, after = _side_figures(base), _side_figures(new)
    rows = []
    for name, (unit, value) in before.items():
        other = after[name][1]
        if value is None and other is None:
            continue
        difference = None if value is None or other is None else other - value
        rows.append({"figure": name, "unit": unit, "base": value, "new": other, "difference": difference,
                     "difference_pct": _share(difference, value)})
    return pa.Table.from_pylist(rows, schema=FIGURE_COMPARISON)
