"""Two runs side by side (BASE and NEW): how much slower or faster NEW's steps are beyond the step-to-step
noise, and where the difference comes from. Pure functions of the two runs' tables, each reading the
single-run analyses of either side through its memo; ``perfsight.compare`` is their front door.

* **Steps** (``step_comparison``): a job's step lasts as long as its slowest rank's (``job_step_times``: per
  step, the longest ``breakdown.step_breakdown`` step of any rank). The difference is NEW's mean step minus
  BASE's, with Welch's ``CONFIDENCE`` interval (unequal variances: ``_welch_half_width``), both as percent
  of BASE's mean. Verdict: ``slower`` / ``faster`` when the interval lies above / below 0, ``no difference``
  when it holds 0 (or both sides' steps are all equal and equal to each other), ``noise unknown`` when a side
  has one step (the difference is still given), ``no steps`` when a side has none. ``slower_than`` is the CI
  gate's test.
* **Breakdown** (``breakdown_comparison``): each category of ``breakdown.step_breakdown`` (idle included), its
  mean per rank and step on either side and the difference, as a share of the step difference.
* **Operators and kernels** (``operator_comparison``): host operators (``cpu_op``) or device tasks, aligned by
  name (an Ascend task by its type: ``ALIGNED_BY``), then across frameworks by family (``FAMILIES_FILE``:
  ``aten::mm`` / ``aten::addmm`` / a GEMM kernel <-> ``MatMul`` / ``MatMulV2``, convolution, attention, norms,
  pooling, activations, optimizer, ...). Counted: the executions inside the profiled steps (a slice's
  ``step``; every execution of a run without steps, which counts as one step), as HTA's TraceDiff counts them
  over all iterations. Per operator: calls and time per rank and step, total, mean per call, ``status``
  ``both`` / ``new`` (only NEW has it) / ``vanished`` (only BASE), the difference per step and its share of
  the step difference; largest difference first.
  The model's modules (``nn.Module: Linear_0``, recorded with torch.profiler's ``with_modules``) compare the
  same way, by name.
* **Memory** (``memory_comparison``): per operator type allocating, allocations and bytes allocated per rank
  and step on either side (``memory.allocations_by_op``).
* **Ranks** (``rank_comparison``): two jobs rank by rank, each rank's mean step (``cluster.mean_step_by_rank``)
  on either side.
* **Communication** (``communication_comparison``): per collective and group size, calls, bytes and device
  time per rank and step.
* **Figures** (``figure_comparison``): one row per scalar of either run: kernels launched per step (and of
  them replayed from CUDA graphs), mean kernel time, mean launch call and delay (of the kernels launched one
  by one), peak allocated and reserved memory, model FLOPs per step and utilisation.
"""
from __future__ import annotations

import functools
import math
from pathlib import Path

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

JOB_STEP_TIMES = pa.schema([("step", pa.int32()), ("step_ns", pa.int64())])

STEP_COMPARISON = pa.schema([
    ("base_steps", pa.int64()), ("new_steps", pa.int64()),
    ("base_mean_ns", pa.float64()), ("new_mean_ns", pa.float64()),
    ("base_stddev_ns", pa.float64()), ("new_stddev_ns", pa.float64()),
    ("difference_ns", pa.float64()), ("difference_pct", pa.float64()),
    ("ci_low_pct", pa.float64()), ("ci_high_pct", pa.float64()), ("confidence", pa.float64()),
    ("verdict", pa.string()),
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
    ("difference_per_step_ns", pa.float64()), ("share_pct", pa.float64()),
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


def step_comparison(base: RunTables, new: RunTables) -> pa.Table:
    """One row (schema ``STEP_COMPARISON``): both sides' steps, mean and standard deviation (ns), NEW - BASE
    in ns and as percent of BASE's mean with its ``CONFIDENCE`` interval, and the verdict (module
    docstring)."""
    before = computed(job_step_times, base).column("step_ns").to_numpy().astype(float)
    after = computed(job_step_times, new).column("step_ns").to_numpy().astype(float)
    row: dict = {"base_steps": len(before), "new_steps": len(after), "confidence": CONFIDENCE}
    if not len(before) or not len(after):
        return pa.Table.from_pylist([{**row, "verdict": NO_STEPS}], schema=STEP_COMPARISON)
    base_mean, new_mean = float(before.mean()), float(after.mean())
    difference = new_mean - base_mean
    row.update(base_mean_ns=base_mean, new_mean_ns=new_mean, difference_ns=difference,
               base_stddev_ns=float(before.std(ddof=1)) if len(before) > 1 else None,
               new_stddev_ns=float(after.std(ddof=1)) if len(after) > 1 else None,
               difference_pct=100 * difference / base_mean)
    if len(before) < 2 or len(after) < 2:
        verdict = NOISE_UNKNOWN
    elif row["base_stddev_ns"] == row["new_stddev_ns"] == 0:       # exact: no noise to weigh
        row.update(ci_low_pct=row["difference_pct"], ci_high_pct=row["difference_pct"])
        verdict = NO_DIFFERENCE if difference == 0 else SLOWER if difference > 0 else FASTER
    else:
        half = _welch_half_width(before, after)
        low, high = 100 * (difference - half) / base_mean, 100 * (difference + half) / base_mean
        row.update(ci_low_pct=low, ci_high_pct=high)
        verdict = SLOWER if low > 0 else FASTER if high < 0 else NO_DIFFERENCE
    return pa.Table.from_pylist([{**row, "verdict": verdict}], schema=STEP_COMPARISON)


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
    step beyond the noise: its interval's low end above ``percent`` (``noise unknown``: the difference itself
    above it). ``no steps`` is an InputError: there is nothing to judge, and a gate must not pass on it."""
    row = steps.to_pylist()[0]
    if row["verdict"] == NO_STEPS:
        side = "BASE" if not row["base_steps"] else "NEW"
        raise InputError(f"{side} has no steps: the step time cannot be compared (profile at least one step: "
                         "torch.profiler's ProfilerStep, perfsight's steps, or torch_npu's step_trace_time.csv)")
    bound = row["difference_pct"] if row["verdict"] == NOISE_UNKNOWN else row["ci_low_pct"]
    return bound > percent


def _step_difference_ns(base: RunTables, new: RunTables) -> float | None:
    """NEW's mean step minus BASE's, what the shares are of (None without steps on a side, or no difference to
    share): the means alone, not ``step_comparison``'s interval."""
    before, after = (computed(job_step_times, tables).column("step_ns").to_numpy() for tables in (base, new))
    if not len(before) or not len(after):
        return None
    difference = float(after.mean()) - float(before.mean())
    return difference if difference else None


def _share(difference: float | None, whole: float | None) -> float | None:
    return None if difference is None or not whole else 100 * difference / whole


def breakdown_comparison(base: RunTables, new: RunTables) -> pa.Table:
    """Per category of ``step_breakdown`` (``CATEGORIES`` and idle), its mean per rank and step on either
    side, NEW - BASE, and that as percent of the step difference (schema ``BREAKDOWN_COMPARISON``)."""
    whole = _step_difference_ns(base, new)
    rows = []
    for category in (*CATEGORIES, "idle"):
        before, after = (computed(step_breakdown, tables).column(f"{category}_ns").to_numpy() for tables in (base, new))
        base_ns = float(before.mean()) if len(before) else None
        new_ns = float(after.mean()) if len(after) else None
        difference = None if base_ns is None or new_ns is None else new_ns - base_ns
        rows.append({"category": category, "base_ns": base_ns, "new_ns": new_ns, "difference_ns": difference,
                     "share_pct": _share(difference, whole)})
    return pa.Table.from_pylist(rows, schema=BREAKDOWN_COMPARISON)


def _named_statistic(tables: RunTables, executions: str) -> pa.Table:
    """Per operator (its type where the format records one, else its name: ``ALIGNED_BY``), calls and total ns
    over every rank, of the executions inside the profiled steps (all of them in a run without steps): the
    run's ``executions`` (``EXECUTIONS``)."""
    if executions == DEVICE and not computed(has_device_tasks, tables):
        return pa.table({"name": pa.array([], pa.string()), "calls": pa.array([], pa.int64()),
                         "total_ns": pa.array([], pa.int64())})
    kinds, names = EXECUTIONS[executions]
    in_steps = "step IS NOT NULL" if computed(step_breakdown, tables).num_rows else "true"
    con = new_connection()
    con.register("s", computed(execution_totals, tables, kinds=kinds))
    return con.sql(f"SELECT {ALIGNED_BY} AS name, sum(count)::BIGINT AS calls, sum(total_ns)::BIGINT AS total_ns "
                   f"FROM s WHERE {in_steps} AND name LIKE $names GROUP BY ALL", params={"names": names}) \
        .to_arrow_table()


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
    try:
        table = csv.read_csv(path, convert_options=csv.ConvertOptions(column_types={
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


_ALIGNED_SQL = """
WITH joined AS (
    SELECT coalesce(b.name, n.name) AS name, b.calls AS bc, b.total_ns AS bt, n.calls AS nc, n.total_ns AS nt
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
           NULL AS base_names, NULL AS new_names, bc, bt, nc, nt
    FROM labelled WHERE family IS NULL OR family NOT IN (SELECT family FROM paired)
    UNION ALL
    SELECT family, 'family', list(name ORDER BY name) FILTER (WHERE bc IS NOT NULL),
           list(name ORDER BY name) FILTER (WHERE nc IS NOT NULL), sum(bc), sum(bt), sum(nc), sum(nt)
    FROM labelled WHERE family IN (SELECT family FROM paired) GROUP BY family
)
SELECT name, CASE WHEN bc IS NULL THEN 'new' WHEN nc IS NULL THEN 'vanished' ELSE 'both' END AS status,
       matched_by, base_names, new_names,
       coalesce(bc, 0) AS base_calls, coalesce(nc, 0) AS new_calls,
       coalesce(bc, 0) / $base_steps AS base_calls_per_step, coalesce(nc, 0) / $new_steps AS new_calls_per_step,
       coalesce(bt, 0) AS base_total_ns, coalesce(nt, 0) AS new_total_ns,
       bt / bc AS base_mean_ns, nt / nc AS new_mean_ns,
       coalesce(bt, 0) / $base_steps AS base_per_step_ns, coalesce(nt, 0) / $new_steps AS new_per_step_ns,
       new_per_step_ns - base_per_step_ns AS difference_per_step_ns,
       100 * difference_per_step_ns / $whole AS share_pct
FROM aligned
ORDER BY abs(difference_per_step_ns) DESC, name
"""


def operator_comparison(base: RunTables, new: RunTables, *, executions: str = HOST,
                        families: str | Path | None = None) -> pa.Table:
    """The host operators, device tasks or modules (``executions``: ``EXECUTIONS``) of both runs aligned (schema
    ``OPERATOR_COMPARISON``): by name, then what is left on both sides by family (``operator_families``,
    ``families`` a CSV file of more tried first): a family with operators only BASE has and operators only NEW
    has is one row named after the family (``matched_by`` "family", the members in ``base_names`` /
    ``new_names``). Figures per rank and step (module docstring); ``share_pct``: the difference per step as
    percent of the step difference (null without one). Largest difference first."""
    con = new_connection()
    if executions not in EXECUTIONS:
        raise InputError(f"executions={executions!r}: expected one of {', '.join(EXECUTIONS)}")
    con.register("b", _named_statistic(base, executions))
    con.register("n", _named_statistic(new, executions))
    con.register("families", operator_families(families))
    params = {"base_steps": rank_steps(base), "new_steps": rank_steps(new),
              "whole": _step_difference_ns(base, new) or math.nan}
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


def communication_comparison(base: RunTables, new: RunTables) -> pa.Table:
    """Per collective name and group size, both runs' calls, input bytes and device time per rank and step
    (null time: not recorded), NEW - BASE time per step (schema ``COMMUNICATION_COMPARISON``)."""
    con = new_connection()
    con.register("b", _communication(base))
    con.register("n", _communication(new))
    query = """
        SELECT coalesce(b.collective, n.collective) AS collective, coalesce(b.group_size, n.group_size) AS group_size,
               CASE WHEN b.collective IS NULL THEN 'new' WHEN n.collective IS NULL THEN 'vanished' ELSE 'both' END
                   AS status,
               coalesce(b.calls, 0) / $base_steps AS base_calls_per_step,
               coalesce(n.calls, 0) / $new_steps AS new_calls_per_step,
               coalesce(b.bytes, 0) / $base_steps AS base_bytes_per_step,
               coalesce(n.bytes, 0) / $new_steps AS new_bytes_per_step,
               b.dur_ns / $base_steps AS base_per_step_ns, n.dur_ns / $new_steps AS new_per_step_ns,
               coalesce(new_per_step_ns, 0) - coalesce(base_per_step_ns, 0) AS difference_per_step_ns
        FROM b FULL OUTER JOIN n ON b.collective = n.collective AND b.group_size IS NOT DISTINCT FROM n.group_size
        ORDER BY abs(difference_per_step_ns) DESC, collective, group_size
    """
    params = {"base_steps": rank_steps(base), "new_steps": rank_steps(new)}
    return con.sql(query, params=params).to_arrow_table().cast(COMMUNICATION_COMPARISON)


def memory_comparison(base: RunTables, new: RunTables) -> pa.Table:
    """Per operator type allocating (null: none running), both runs' allocations and bytes allocated per rank and
    step (``memory.allocations_by_op``), NEW - BASE bytes; largest difference first (schema
    ``MEMORY_COMPARISON``)."""
    con = new_connection()
    con.register("b", computed(allocations_by_op, base))
    con.register("n", computed(allocations_by_op, new))
    query = """
        WITH b AS (SELECT op_type, sum(alloc_count) AS calls, sum(alloc_bytes) AS bytes FROM b GROUP BY ALL),
             n AS (SELECT op_type, sum(alloc_count) AS calls, sum(alloc_bytes) AS bytes FROM n GROUP BY ALL)
        SELECT coalesce(b.op_type, n.op_type) AS op_type,
               CASE WHEN b.calls IS NULL THEN 'new' WHEN n.calls IS NULL THEN 'vanished' ELSE 'both' END AS status,
               coalesce(b.calls, 0) / $base_steps AS base_allocations_per_step,
               coalesce(n.calls, 0) / $new_steps AS new_allocations_per_step,
               coalesce(b.bytes, 0) / $base_steps AS base_bytes_per_step,
               coalesce(n.bytes, 0) / $new_steps AS new_bytes_per_step,
               new_bytes_per_step - base_bytes_per_step AS difference_bytes_per_step
        FROM b FULL OUTER JOIN n ON b.op_type IS NOT DISTINCT FROM n.op_type
        ORDER BY abs(difference_bytes_per_step) DESC, op_type
    """
    params = {"base_steps": rank_steps(base), "new_steps": rank_steps(new)}
    return con.sql(query, params=params).to_arrow_table().cast(MEMORY_COMPARISON)


def rank_comparison(base: Job, new: Job) -> pa.Table:
    """Two jobs rank by rank: each rank's mean step on either side (``cluster.mean_step_by_rank``; null where a
    side lacks the rank), NEW - BASE in ns and as percent of BASE's (schema ``RANK_COMPARISON``)."""
    con = new_connection()
    con.register("b", computed(mean_step_by_rank, base))
    con.register("n", computed(mean_step_by_rank, new))
    query = """
        SELECT coalesce(b.rank, n.rank) AS rank, b.step_ns AS base_step_ns, n.step_ns AS new_step_ns,
               n.step_ns - b.step_ns AS difference_ns, 100.0 * (n.step_ns - b.step_ns) / b.step_ns AS difference_pct
        FROM b FULL OUTER JOIN n ON b.rank = n.rank ORDER BY rank
    """
    return con.sql(query).to_arrow_table().cast(RANK_COMPARISON)


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


def figure_comparison(base: RunTables, new: RunTables) -> pa.Table:
    """One row per scalar figure either run records (module docstring; schema ``FIGURE_COMPARISON``): its
    unit, both values (null where a run does not record it), NEW - BASE and that as percent of BASE."""
    before, after = _figures(base), _figures(new)
    rows = []
    for name, (unit, value) in before.items():
        other = after[name][1]
        if value is None and other is None:
            continue
        difference = None if value is None or other is None else other - value
        rows.append({"figure": name, "unit": unit, "base": value, "new": other, "difference": difference,
                     "difference_pct": _share(difference, value)})
    return pa.Table.from_pylist(rows, schema=FIGURE_COMPARISON)
