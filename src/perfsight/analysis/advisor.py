"""The advisor: rules over the analyses, each giving evidence, its threshold and what to try.

``advise(tables)`` returns one row per piece of advice (columns: rule, severity, title, finding,
evidence (JSON text: the steps, ops, ranks and times behind it), threshold, suggestion, and the estimated
gain: ``what_if`` (what the advice would change, in words), ``gain_ns`` and ``gain_pct``), most severe
first; ``export summary`` writes it as prof_rule_0.json and ``perfsight analyse`` prints it. A rule is
a small function of a ``Facts`` object (the analyses, from the run's memo, and facts derived from them)
that returns an ``Advice`` or None; a new rule is one function added to ``RULES``.

The estimated gain of a piece of advice comes from the critical path's what-if
(``critical_path.what_if``): the rule names the change its suggestion would make (a scenario of
``critical_path.SCENARIOS``: communication overlapped, launches free, no synchronisation waits, ...; or its own,
e.g. the fp32 matmul kernels it found twice as fast), the steps are replayed with it, and ``gain_ns`` is
the mean time saved per step (over every rank's profiled steps; the whole trace without steps),
``gain_pct`` its share of the mean step. A rule with no such change (memory, recompilations, layouts) has no
gain.

The severity of advice with a what-if follows its gain (``rated_by_gain``): high from ``HIGH_GAIN_PCT`` of the
mean step, medium from ``MEDIUM_GAIN_PCT``, low below, so advice that would save nothing, or whose gain is unknown,
is never rated on gain it does not have; a rule without a what-if rates its advice itself.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.memo import computed
from perfsight.core.tables import RunTables

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}
ADVICE = pa.schema([("rule", pa.string()), ("severity", pa.string()), ("title", pa.string()),
                    ("finding", pa.string()), ("evidence", pa.string()), ("threshold", pa.string()),
                    ("suggestion", pa.string()), ("what_if", pa.string()), ("gain_ns", pa.int64()),
                    ("gain_pct", pa.float64())])

UNEVEN_RANKS_RATIO = 0.10         # the straggler's wait, or the slowest rank's excess, >= 10% of the median step
SYNC_SHARE = 0.05                 # time in device synchronisation >= 5% of the profiled steps
FP32_MATMUL_SHARE = 0.20          # fp32 matmul/conv kernels >= 20% of device kernel time
CONV_SHARE = 0.10                 # NCHW convolutions >= 10% of device kernel time (CPU: of the profiled time)
LOW_UTILISATION_IDLE_PCT = 30.0   # device idle >= 30% of its active span
SHORT_KERNEL_SHARE = 0.30         # >= 30% of launches are short kernels whose launch outlasts them
HOST_WAIT_SHARE = 0.50            # >= 50% of device idle time is waiting for the host
UNOVERLAPPED_COMM_SHARE = 0.10    # communication not hidden behind compute >= 10% of the device span
MEMORY_CAPACITY_SHARE = 0.90      # peak reserved memory >= 90% of the device's memory
#: advice with a what-if is rated by its estimated gain's share of the mean step: high from HIGH_GAIN_PCT, medium
#: from MEDIUM_GAIN_PCT, low below (a gain of 0, or none known: no steps to replay the change on)
HIGH_GAIN_PCT = 10.0
MEDIUM_GAIN_PCT = 2.0


@dataclass(frozen=True)
class WhatIf:
    """The change a piece of advice would make, for ``critical_path.what_if``: what it is, in words, and its
    changes (a category or slice name -> how many times faster)."""
    label: str
    changes: dict[str, float]


def _scenario(name: str) -> WhatIf:
    """One of ``critical_path.SCENARIOS``."""
    from perfsight.analysis.critical_path import SCENARIOS

    changes, label = SCENARIOS[name]
    return WhatIf(label, changes)


@dataclass(frozen=True)
class Advice:
    """What a rule found. Advice with a ``what_if`` is rated by the gain the what-if estimates
    (``rated_by_gain``); a rule whose change cannot be replayed on the steps (memory, recompilations, layouts)
    gives its advice's ``severity`` itself. One of the two, never both."""
    rule: str
    title: str
    finding: str
    evidence: dict
    threshold: str
    suggestion: str
    what_if: WhatIf | None = None
    severity: str | None = None

    def __post_init__(self):
        if (self.what_if is None) == (self.severity is None):
            raise ValueError(f"advice {self.rule!r}: rated by its what-if's gain or by its own severity, not "
                             f"{'both' if self.severity else 'neither'}")


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _duration(ns: float) -> str:
    """A duration in ns as text with its unit: ``1.234 ms``."""
    return f"{ns / 1e6:.3f} ms"


class Facts:
    """What the rules read: the tables, the analyses (``get``: from the run's memo, so computed once for the
    rules, the run summary and every other caller) and facts the rules derive from them (once per advice)."""

    def __init__(self, tables: RunTables):
        self.tables = tables
        self.con = tables.connect()

    def get(self, analysis: Callable[..., pa.Table], **kwargs) -> pa.Table:
        """``analysis(tables, **kwargs)``, from the run's memo."""
        return computed(analysis, self.tables, **kwargs)

    def of_job(self, analysis: Callable[..., pa.Table]) -> pa.Table:
        """A cross-rank ``analysis`` of the run's job (``job_summaries.job_of``), from the job's memo."""
        from perfsight.analysis.job_summaries import job_of

        return computed(analysis, computed(job_of, self.tables))

    def rows(self, query: str, params: dict | None = None) -> list[dict]:
        return self.con.sql(query, params=params).to_arrow_table().to_pylist()

    @property
    def steps(self) -> pa.Table:
        from perfsight.analysis.steps import step_trace

        return self.get(step_trace)

    @cached_property
    def profiled_ns(self) -> int:
        """Summed duration of the profiled steps (all ranks), or the run's span when it has no steps."""
        if self.steps.num_rows:
            return int(pc.sum(self.steps.column("iteration_ns")).as_py())
        row = self.rows("SELECT max(start_ns + dur_ns) - min(start_ns) AS span FROM slices")[0]
        return int(row["span"] or 0)

    @cached_property
    def device_kernels(self) -> pa.Table:
        """The device's kernels (``op_instances``: name, launching op, duration, the launching op's dtypes)
        with what their names and launching operators say about them (``_DEVICE_KERNELS_SQL``)."""
        from perfsight.analysis.ops import op_instances

        con = self.con.cursor()
        con.register("instances", self.get(op_instances))
        return con.sql(_DEVICE_KERNELS_SQL, params={
            "matmuls": list(_MATMUL_CONV), "fp32_names": FP32_KERNEL_NAMES,
            "tensor_core_names": TENSOR_CORE_KERNEL_NAMES, "transpose_names": LAYOUT_TRANSPOSE_NAMES,
        }).to_arrow_table()

    @cached_property
    def graph_kernels(self) -> int:
        """The kernels CUDA/HIP graph launches replayed (``kernels.launch_summary``): graphs are in use."""
        from perfsight.analysis.kernels import launch_stats, launch_summary

        return sum(row["graph_kernels"] for row in launch_summary(self.get(launch_stats)).to_pylist())

    def graphs_or(self, suggestion: str) -> str:
        """``suggestion`` (which names CUDA graphs) for a run that replays none; for one that does, what is left
        to try: the kernels still launched one by one."""
        if not self.graph_kernels:
            return suggestion
        return (f"The run already replays CUDA graphs ({self.graph_kernels:,} kernels): capture what still runs "
                "outside them (torch.compile(mode='reduce-overhead') or torch.cuda.graphs around the remaining "
                "steps' work), fuse the operations launched one by one (torch.compile, fused optimizers: "
                "foreach=True / fused=True), or batch more work per launch.")

    @cached_property
    def has_device(self) -> bool:
        return bool(self.rows("SELECT count(*) AS n FROM tracks WHERE kind = 'stream'")[0]["n"])


def _uneven_ranks(facts: Facts) -> Advice | None:
    """The ranks compared as the Cluster page and the cluster report compare them (``cluster.slowest_rank``:
    the straggler the others wait for, or the slowest median step when the ranks are not even)."""
    from perfsight.analysis.cluster import slowest_rank

    verdict = next(iter(facts.of_job(slowest_rank).to_pylist()), None)
    if verdict is None or verdict["ranks"] < 2 or not verdict["fastest_step_ns"]:
        return None
    waited = verdict["straggler_wait_ns"] or 0
    slow = not verdict["even"] and verdict["gap_ns"] >= UNEVEN_RANKS_RATIO * verdict["fastest_step_ns"]
    if waited < UNEVEN_RANKS_RATIO * verdict["fastest_step_ns"] and not slow:
        return None
    said = []
    if waited:
        said.append(f"the others wait {_duration(waited)} per step for rank {verdict['straggler_rank']}, which "
                    f"arrives last at {verdict['straggler_last_arrivals']} of its {verdict['straggler_instances']} "
                    "collectives")
    if slow:
        said.append(f"rank {verdict['slowest_rank']}'s median step ({_duration(verdict['slowest_step_ns'])}) is "
                    f"{verdict['gap_pct']:.0f}% over rank {verdict['fastest_rank']}'s")
    return Advice(
        "uneven_ranks", "Ranks are uneven", "; ".join(said),
        {"straggler_rank": verdict["straggler_rank"], "straggler_wait_ns": verdict["straggler_wait_ns"],
         "slowest_rank": verdict["slowest_rank"] if slow else None, "gap_ns": verdict["gap_ns"],
         "median_step_ns": verdict["fastest_step_ns"]},
        f"the others' wait for the straggler, or the slowest rank's median step over the fastest's, >= "
        f"{UNEVEN_RANKS_RATIO:.0%} of the fastest rank's median step",
        "Compare the straggler's step breakdown with the others: uneven data shards or sequence lengths, a slower "
        "device or host, or extra work on one rank (logging, checkpointing on rank 0) are the usual causes.",
        _scenario("no_rank_waits"))


#: what the synchronisation rule calls the calls no framework operator encloses
NO_OPERATOR = "(no operator)"


def _sync_figures(row: dict) -> dict:
    return {"count": row["calls"], "total_ns": row["total_ns"], "device_idle_after_ns": row["idle_after_ns"]}


def _excessive_sync(facts: Facts) -> Advice | None:
    from perfsight.analysis.syncs import synchronisations

    facts.con.register("syncs", facts.get(synchronisations))
    rows = facts.rows("""
        SELECT coalesce(host_op, $none) AS host_op, count(*) AS calls, sum(dur_ns)::BIGINT AS total_ns,
               sum(device_idle_after_ns)::BIGINT AS idle_after_ns, list(DISTINCT call ORDER BY call) AS calls_made
        FROM syncs GROUP BY ALL ORDER BY total_ns DESC, host_op""", {"none": NO_OPERATOR})
    total = sum(r["total_ns"] for r in rows)
    if not facts.profiled_ns or total < SYNC_SHARE * facts.profiled_ns:
        return None
    top = rows[0]
    in_operators = [row for row in rows if row["host_op"] != NO_OPERATOR][:5]
    outside = next((row for row in rows if row["host_op"] == NO_OPERATOR), None)
    evidence = {"host_ops": {row["host_op"]: _sync_figures(row) for row in in_operators}} if in_operators else {}
    if outside is not None:
        evidence["outside_operators"] = _sync_figures(outside)
    return Advice(
        "excessive_synchronisation", "Excessive synchronisation",
        f"{sum(r['calls'] for r in rows)} synchronisations (synchronise calls and blocking copies) keep the host "
        f"waiting {_duration(total)}, {total / facts.profiled_ns:.0%} of the profiled time; most in {top['host_op']} "
        f"({top['calls']} calls: {', '.join(top['calls_made'])}; {_duration(top['total_ns'])}, then the device "
        f"idle {_duration(top['idle_after_ns'] or 0)} until the host launches again)",
        evidence,
        f"synchronisation >= {SYNC_SHARE:.0%} of the profiled steps",
        "Remove host reads of device values inside the step (.item(), .cpu(), .tolist(), printing losses, "
        "torch.nonzero, boolean masks) and copies to pageable memory (pin_memory=True, non_blocking=True); "
        "accumulate metrics on the device and read them every N steps.", _scenario("no_sync_waits"))


def _recompilations(facts: Facts) -> Advice | None:
    rows = facts.rows("""
        SELECT regexp_extract(name, 'Torch-Compiled Region: (\\d+)/(\\d+)', 1) AS frame,
               max(CAST(regexp_extract(name, 'Torch-Compiled Region: (\\d+)/(\\d+)', 2) AS INTEGER)) AS last_compile,
               count(*) AS executions
        FROM slices WHERE name LIKE 'Torch-Compiled Region: %/%' GROUP BY frame HAVING last_compile > 0
        ORDER BY frame""")
    if not rows:
        return None
    return Advice(
        "recompilations", "torch.compile recompiled",
        "compiled frame(s) " + ", ".join(f"{r['frame']} ({r['last_compile']} recompile(s))" for r in rows)
        + " were compiled again during the run",
        {"frames": {r["frame"]: {"recompiles": r["last_compile"], "executions": r["executions"]} for r in rows}},
        "any region 'Torch-Compiled Region: F/C' with C > 0",
        "Run with TORCH_LOGS=recompiles to see the guard that failed; mark varying sizes dynamic "
        "(torch._dynamo.mark_dynamic), avoid Python scalars that change every step, or pad shapes to buckets.",
        severity="medium")


_MATMUL_CONV = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
                "aten::_scaled_dot_product_efficient_attention")
#: kernel names of fp32 matrix products and convolutions on the CUDA cores (cuBLAS SGEMM, cuDNN fp32)
FP32_KERNEL_NAMES = r"sgemm|scudnn|implicit_convolve_sgemm"
#: kernel names that run on Tensor Cores (TF32, fp16, bf16, int8 MMA): those already use them
TENSOR_CORE_KERNEL_NAMES = r"s1688|s16816|tf32|tensorop|h884|h1688|h16816|hmma|xmma|i8816|bf16"
#: NCHW <-> NHWC layout transposes cuDNN inserts around convolutions of the other layout
LAYOUT_TRANSPOSE_NAMES = r"nchwtonhwc|nhwctonchw"
TOP_KERNELS = 5                   # kernels named in an advice's evidence
#: how much faster the AMP advice's estimate assumes its fp32 kernels get on Tensor Cores: deliberately low
#: (dense bf16/fp16 Tensor Core peaks are 8-16x fp32's; memory-bound kernels gain far less)
FP32_KERNEL_SPEEDUP = 2.0

_DEVICE_KERNELS_SQL = """
SELECT name, launch_op, dur_ns, input_dtypes,
       (launch_op LIKE '%conv%' AND launch_op NOT LIKE '%transpose%') AS is_conv,
       (list_contains($matmuls, launch_op) OR launch_op LIKE '%conv%') AS is_matmul_or_conv,
       regexp_matches(name, $fp32_names, 'i') AS fp32_by_name,
       regexp_matches(name, $tensor_core_names, 'i') AS on_tensor_cores,
       regexp_matches(name, $transpose_names, 'i') AS is_layout_transpose
FROM instances WHERE category = 'device' AND kind = 'kernel'
"""


def _top_kernels(kernels: pa.Table) -> dict[str, int]:
    """The TOP_KERNELS kernel names with the most time, and their time (evidence keys are sorted by name)."""
    totals: dict[str, int] = {}
    for name, dur in zip(kernels.column("name").to_pylist(), kernels.column("dur_ns").to_pylist()):
        totals[name] = totals.get(name, 0) + dur
    return dict(sorted(totals.items(), key=lambda item: -item[1])[:TOP_KERNELS])


def _amp_unused(facts: Facts) -> Advice | None:
    """fp32 matrix products and convolutions on the CUDA cores: launched by a matmul/conv operator with
    float inputs, or named as cuBLAS/cuDNN fp32 kernels (traces without dtypes); not Tensor Core kernels."""
    if not facts.has_device:
        return None
    kernels = facts.device_kernels
    total = pc.sum(kernels.column("dur_ns")).as_py() or 0
    dtypes = pc.fill_null(kernels.column("input_dtypes"), "")
    fp32_by_dtype = pc.and_(pc.and_(pc.fill_null(kernels.column("is_matmul_or_conv"), False),
                                    pc.match_substring(dtypes, '"float"')),
                            pc.invert(pc.match_substring_regex(dtypes, "Half|BFloat16")))
    fp32 = kernels.filter(pc.and_(pc.or_(fp32_by_dtype, kernels.column("fp32_by_name")),
                                  pc.invert(kernels.column("on_tensor_cores"))))
    fp32_ns = pc.sum(fp32.column("dur_ns")).as_py() or 0
    if not total or fp32_ns < FP32_MATMUL_SHARE * total:
        return None
    share = fp32_ns / total
    ops: dict[str, dict] = {}
    for op, dur in zip(fp32.column("launch_op").to_pylist(), fp32.column("dur_ns").to_pylist()):
        entry = ops.setdefault(op or "(launching op unknown)", {"kernels": 0, "kernel_ns": 0})
        entry["kernels"] += 1
        entry["kernel_ns"] += dur
    return Advice(
        "amp_unused", "Matmuls and convolutions run in fp32",
        f"fp32 matmul/convolution kernels on the CUDA cores take {share:.0%} of device kernel time "
        f"({_duration(fp32_ns)}); Tensor Cores run them several times faster in fp16/bf16 (or TF32)",
        {"ops": ops, "top_kernels": _top_kernels(fp32)},
        f"fp32 matmul/conv kernels >= {FP32_MATMUL_SHARE:.0%} of device kernel time",
        "Wrap the forward pass in torch.autocast('cuda', dtype=torch.bfloat16) (or float16 with a GradScaler); "
        "at least set torch.backends.cuda.matmul.allow_tf32 = True / torch.set_float32_matmul_precision('high').",
        WhatIf("its fp32 matmul and convolution kernels twice as fast",
               dict.fromkeys(sorted(set(fp32.column("name").to_pylist())), FP32_KERNEL_SPEEDUP)))


_CHANNELS_LAST_SUGGESTION = (
    "Try model = model.to(memory_format=torch.channels_last) and the same for the input batch; cuDNN and "
    "oneDNN convolutions are usually faster in NHWC (measure: depthwise convolutions gain most).")


def _channels_last(facts: Facts) -> Advice | None:
    return _channels_last_on_device(facts) if facts.has_device else _channels_last_on_host(facts)


def _channels_last_on_device(facts: Facts) -> Advice | None:
    """Convolution kernels (launched by a convolution operator) >= CONV_SHARE of device kernel time in an
    NCHW model: cuDNN transposes its layout (``nchwToNhwc``/``nhwcToNchw`` kernels), or NHWC kernels
    (``nhwc`` in the name) are under half of the convolution time."""
    kernels = facts.device_kernels
    total = pc.sum(kernels.column("dur_ns")).as_py() or 0
    conv = kernels.filter(pc.fill_null(kernels.column("is_conv"), False))
    conv_ns = pc.sum(conv.column("dur_ns")).as_py() or 0
    nhwc = conv.filter(pc.and_(pc.match_substring(pc.utf8_lower(conv.column("name")), "nhwc"),
                               pc.invert(conv.column("is_layout_transpose"))))
    nhwc_ns = pc.sum(nhwc.column("dur_ns")).as_py() or 0
    transposes = kernels.filter(kernels.column("is_layout_transpose"))
    transpose_ns = pc.sum(transposes.column("dur_ns")).as_py() or 0
    if not total or conv_ns < CONV_SHARE * total or (not transpose_ns and nhwc_ns >= conv_ns / 2):
        return None
    return Advice(
        "channels_last", "Convolutions use NCHW memory layout",
        f"{conv.num_rows} convolution kernels take {_duration(conv_ns)}, {conv_ns / total:.0%} of device kernel time, "
        f"{nhwc_ns / conv_ns:.0%} of it in NHWC kernels"
        + (f"; NCHW/NHWC layout transposes take {_duration(transpose_ns)}" if transpose_ns else ""),
        {"convolutions": conv.num_rows, "conv_ns": conv_ns, "nhwc_ns": nhwc_ns, "layout_transpose_ns": transpose_ns,
         "top_kernels": _top_kernels(conv)},
        f"NCHW convolution kernels >= {CONV_SHARE:.0%} of device kernel time", _CHANNELS_LAST_SUGGESTION,
        severity="medium")


def _channels_last_on_host(facts: Facts) -> Advice | None:
    """CPU runs: 2-D convolutions whose input strides are NCHW-contiguous >= CONV_SHARE of the profiled time."""
    rows = facts.rows("""
        WITH candidates AS (
            SELECT s.name, s.depth, s.dur_ns, json_extract(s.args, '$."Input Strides"[0]') AS strides,
                   json_extract(s.input_shapes, '$[0]') AS shape
            FROM slices s
            WHERE s.kind = 'cpu_op' AND s.name IN ('aten::conv2d', 'aten::convolution', 'aten::cudnn_convolution')),
        outermost AS (SELECT name FROM candidates GROUP BY name ORDER BY min(depth), name LIMIT 1)
        SELECT count(*) AS convs, sum(dur_ns)::BIGINT AS conv_ns
        FROM candidates JOIN outermost USING (name)   -- conv2d wraps convolution: count each call once
        WHERE json_array_length(shape) = 4
          AND CAST(strides->>'$[1]' AS BIGINT) = CAST(shape->>'$[2]' AS BIGINT) * CAST(shape->>'$[3]' AS BIGINT)""")
    convs, conv_ns = rows[0]["convs"], rows[0]["conv_ns"] or 0
    if not convs or not facts.profiled_ns or conv_ns < CONV_SHARE * facts.profiled_ns:
        return None
    return Advice(
        "channels_last", "Convolutions use NCHW memory layout",
        f"{convs} 2-D convolutions on NCHW-contiguous inputs take {_duration(conv_ns)}, "
        f"{conv_ns / facts.profiled_ns:.0%} of the profiled time",
        {"convolutions": convs, "conv_ns": conv_ns},
        f"NCHW convolutions >= {CONV_SHARE:.0%} of the profiled time", _CHANNELS_LAST_SUGGESTION, severity="medium")


def _data_loader_bound(facts: Facts) -> Advice | None:
    from perfsight.analysis.data import data_verdict

    bound = [r for r in facts.get(data_verdict).to_pylist() if r["verdict"] in ("highly", "moderately")]
    if not bound:
        return None
    worst = max(bound, key=lambda r: r["wait_percent"] or 0.0)   # a queue-only verdict has no wait share
    return Advice(
        "data_loader_bound", "Training waits for data",
        f"rank {worst['rank']}: {worst['reason']} ({worst['verdict']} input-bound)",
        {"ranks": {str(r["rank"]): {"wait_percent": _rounded(r["wait_percent"]), "steps": r["steps"],
                                    "bottleneck_steps": r["bottleneck_steps"]} for r in bound}},
        f"data wait >= {worst['moderately_threshold_percent']:.0f}% of step time (moderately), "
        f">= {worst['highly_threshold_percent']:.0f}% (highly)",
        worst["suggestions"], _scenario("no_data_wait"))


def _low_device_utilisation(facts: Facts) -> Advice | None:
    from perfsight.analysis.breakdown import temporal_breakdown

    idle = [r for r in facts.get(temporal_breakdown).to_pylist() if r["idle_pct"] >= LOW_UTILISATION_IDLE_PCT]
    if not idle:
        return None
    worst = max(idle, key=lambda r: r["idle_pct"])
    return Advice(
        "low_device_utilisation", "The device is often idle",
        f"rank {worst['rank']}: the device is idle {worst['idle_pct']:.0f}% of its active span "
        f"({_duration(worst['idle_ns'])} of {_duration(worst['kernel_time_ns'])}); "
        f"compute is {worst['compute_pct']:.0f}%",
        {"idle_pct_by_rank": {str(r["rank"]): round(r["idle_pct"], 2) for r in idle}},
        f"device idle >= {LOW_UTILISATION_IDLE_PCT:.0f}% of the span from its first to its last task",
        "See the idle-time breakdown: kernel-wait gaps point at synchronisation; host-wait gaps need less "
        "Python/CPU work per step. " + facts.graphs_or("Larger batches, torch.compile or CUDA graphs, fewer small "
                                                        "ops."), _scenario("host_twice_as_fast"))


def _launch_bound(facts: Facts) -> Advice | None:
    from perfsight.analysis.kernels import launch_stats, launch_summary

    if not facts.has_device:
        return None
    def direct(row: dict) -> int:       # launched one by one: a graph launch's kernels share its one call
        return row["launches"] - row["graph_kernels"]

    rows = [r for r in launch_summary(facts.get(launch_stats)).to_pylist()
            if direct(r) and r["short_kernels"] / direct(r) >= SHORT_KERNEL_SHARE]
    if not rows:
        return None
    worst = max(rows, key=lambda r: r["short_kernels"] / direct(r))
    share = worst["short_kernels"] / direct(worst)
    replayed = f" ({worst['graph_kernels']:,} more replayed by CUDA graphs)" if worst["graph_kernels"] else ""
    return Advice(
        "launch_bound", "Many small kernels: launch-bound",
        f"rank {worst['rank']}: {worst['short_kernels']} of {direct(worst)} kernels launched one by one{replayed} "
        f"({share:.0%}) run shorter than their launch call ({_duration(worst['short_kernel_gpu_ns'])} of kernel "
        f"time for {_duration(worst['short_kernel_cpu_ns'])} of launch time)",
        {"ranks": {str(r["rank"]): {"launches": direct(r), "graph_kernels": r["graph_kernels"],
                                    "short_kernels": r["short_kernels"]} for r in rows}},
        f"short kernels (launch <= 50 us and longer than the kernel) >= {SHORT_KERNEL_SHARE:.0%} of the kernels "
        "launched one by one",
        facts.graphs_or("Fuse small operations: torch.compile (mode='reduce-overhead' adds CUDA graphs), fused "
                        "optimizers (foreach=True / fused=True), larger batches, or torch.cuda.graphs for static "
                        "steps."), _scenario("no_launch_overhead"))


def _host_bound_gaps(facts: Facts) -> Advice | None:
    from perfsight.analysis.kernels import idle_time_breakdown

    if not facts.has_device:
        return None
    facts.con.register("idle_breakdown", facts.get(idle_time_breakdown))
    rows = facts.rows("""
        SELECT rank, sum(idle_ns) FILTER (WHERE idle_category = 'host_wait')::BIGINT AS host_wait_ns,
               sum(idle_ns)::BIGINT AS idle_ns
        FROM idle_breakdown GROUP BY rank HAVING sum(idle_ns) > 0 ORDER BY rank""")
    bound = [r for r in rows if (r["host_wait_ns"] or 0) >= HOST_WAIT_SHARE * r["idle_ns"]]
    if not bound:
        return None
    worst = max(bound, key=lambda r: r["host_wait_ns"])
    return Advice(
        "host_bound_gaps", "Device gaps wait for the host",
        f"rank {worst['rank']}: {_duration(worst['host_wait_ns'])} of {_duration(worst['idle_ns'])} device idle time "
        f"({worst['host_wait_ns'] / worst['idle_ns']:.0%}, summed over streams) is the device waiting for "
        "the host to launch work",
        {"ranks": {str(r["rank"]): {"host_wait_ns": r["host_wait_ns"], "idle_ns": r["idle_ns"]} for r in bound}},
        f"host-wait >= {HOST_WAIT_SHARE:.0%} of device idle time",
        "Reduce host work between launches: move preprocessing to the data loader (num_workers), avoid Python "
        "loops over tensors. " + facts.graphs_or("Use torch.compile or CUDA graphs."), _scenario("host_twice_as_fast"))


def _communication_not_overlapped(facts: Facts) -> Advice | None:
    from perfsight.analysis.breakdown import overlap

    totals = [r for r in facts.get(overlap).to_pylist() if r["step"] is None and r["span_ns"]
              and r["pure_communication_ns"] >= UNOVERLAPPED_COMM_SHARE * r["span_ns"]]
    if not totals:
        return None
    worst = max(totals, key=lambda r: r["pure_communication_ns"] / r["span_ns"])
    return Advice(
        "communication_not_overlapped", "Communication is not overlapped with compute",
        f"rank {worst['rank']}: {_duration(worst['pure_communication_ns'])} of communication "
        f"({worst['pure_communication_ns'] / worst['span_ns']:.0%} of the device span) runs with no compute beside it; "
        f"{worst['comm_comp_overlap_pct'] or 0:.0f}% of communication is overlapped",
        {"ranks": {str(r["rank"]): {"pure_communication_ns": r["pure_communication_ns"], "span_ns": r["span_ns"]}
                   for r in totals}},
        f"pure communication >= {UNOVERLAPPED_COMM_SHARE:.0%} of the device span",
        "Let DDP overlap gradient all-reduce with backward (bucket_cap_mb, gradient_as_bucket_view=True, no "
        "find_unused_parameters), use FSDP prefetching, or compress gradients; check for a slow rank first.",
        _scenario("overlap_communication"))


def _memory_near_capacity(facts: Facts) -> Advice | None:
    from perfsight.analysis.memory import memory_peak

    capacity = _device_memory(facts)
    near = [r for r in facts.get(memory_peak).to_pylist() if capacity.get(r["device"])
            and max(r["peak_reserved_bytes"] or 0, r["peak_allocated_bytes"] or 0)
            >= MEMORY_CAPACITY_SHARE * capacity[r["device"]]]
    if not near:
        return None
    worst = near[0]
    used = max(worst["peak_reserved_bytes"] or 0, worst["peak_allocated_bytes"] or 0)
    return Advice(
        "memory_near_capacity", "Device memory is nearly full",
        f"{worst['device']} peaks at {used / 2**30:.2f} GiB of {capacity[worst['device']] / 2**30:.2f} GiB "
        f"({used / capacity[worst['device']]:.0%}) in step {worst['step']} during {worst['op_type']}",
        {"devices": {r["device"]: {"peak_allocated_bytes": r["peak_allocated_bytes"],
                                   "peak_reserved_bytes": r["peak_reserved_bytes"], "step": r["step"],
                                   "op_type": r["op_type"]} for r in near}},
        f"peak memory >= {MEMORY_CAPACITY_SHARE:.0%} of the device's memory",
        "Near capacity the allocator frees and retries, and a larger batch will not fit: use activation "
        "checkpointing, bf16/fp16, smaller micro-batches with gradient accumulation, or set "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation.", severity="medium")


def _device_memory(facts: Facts) -> dict[str, int]:
    """Device memory in bytes by device name, from Kineto's deviceProperties or perfsight's manifest."""
    from perfsight.analysis.peaks import device_properties

    meta = facts.tables.meta_dict()
    capacity = {}
    for props in device_properties(meta):
        if type(props.get("totalGlobalMem")) is int and props["totalGlobalMem"] > 0:
            capacity[f"cuda:{props.get('id', 0)}"] = props["totalGlobalMem"]
    device = json.loads(meta.get("manifest") or "{}").get("device", {})
    if device.get("device", "").startswith("cuda") and device.get("total_memory_bytes"):
        capacity[device["device"]] = int(device["total_memory_bytes"])
    return capacity


BELOW_ROOF_PERCENT = 50.0        # an operator type reaching under 50% of its roofline ...
BELOW_ROOF_SHARE = 0.10           # ... and such types' time beyond their roof >= 10% of the profiled steps
TOP_BELOW_ROOF = 5                # operator types named


def _below_roof(facts: Facts) -> Advice | None:
    """Operator types far below their roofline (``roofline.roofline``: under ``BELOW_ROOF_PERCENT`` of it), when
    the time they spend beyond their roof's adds up to ``BELOW_ROOF_SHARE`` of the profiled time; names the
    ``TOP_BELOW_ROOF`` furthest below (most time beyond the roof). Copies are left out: one between host and
    device is bound by the link, not the roof."""
    from perfsight.analysis.roofline import COPIES, IN_PLACE_COPIES, roofline

    rows = [r for r in facts.get(roofline).to_pylist() if r["roof_percent"] is not None
            and r["roof_percent"] < BELOW_ROOF_PERCENT and r["op_type"] not in COPIES + IN_PLACE_COPIES]
    beyond = sum(r["below_roof_ns"] for r in rows)
    if not facts.profiled_ns or beyond < BELOW_ROOF_SHARE * facts.profiled_ns:
        return None
    top = sorted(rows, key=lambda r: (-r["below_roof_ns"], r["op_type"]))[:TOP_BELOW_ROOF]
    share = beyond / facts.profiled_ns
    named = ", ".join(f"{r['op_type']} ({r['precision']}, {r['bound']}-bound, {r['roof_percent']:.0f}% of its roof)"
                      for r in top)
    return Advice(
        "below_roofline", "Operators run far below their roofline",
        f"{len(rows)} operator types reach under {BELOW_ROOF_PERCENT:.0f}% of their roofline and spend "
        f"{_duration(beyond)} ({share:.0%} of the profiled time) beyond the time at their roof; furthest below: "
        f"{named}",
        {"ops": {r["op_type"]: {"precision": r["precision"], "bound": r["bound"], "op_ns": r["op_ns"],
                                "roof_ns": r["roof_ns"], "below_roof_ns": r["below_roof_ns"],
                                "roof_percent": _rounded(r["roof_percent"])} for r in top}},
        f"operator types under {BELOW_ROOF_PERCENT:.0f}% of their roofline with their time beyond it >= "
        f"{BELOW_ROOF_SHARE:.0%} of the profiled steps",
        "Memory-bound operators move more bytes than their work needs: fuse element-wise and normalisation "
        "chains (torch.compile), keep activations in bf16/fp16 (half the bytes), avoid layout copies. "
        "Compute-bound ones under their roof: give matrix products Tensor-Core-friendly shapes (multiples of "
        "8/16, larger batches), use bf16/TF32, and check that small kernels are not launch-bound.",
        WhatIf("the named operators at their roofline", _at_roof(facts, top)))


def _at_roof(facts: Facts, rows: list[dict]) -> dict[str, float]:
    """The what-if of operator types run at their roof: each type (by the slices' name) made op_ns / roof_ns
    times faster over the given roofline rows (a type's precisions together)."""
    op_ns: dict[str, int] = {}
    roof_ns: dict[str, int] = {}
    for row in rows:
        if row["roof_ns"]:
            op_ns[row["op_type"]] = op_ns.get(row["op_type"], 0) + row["op_ns"]
            roof_ns[row["op_type"]] = roof_ns.get(row["op_type"], 0) + row["roof_ns"]
    named = {r["name"] for r in facts.rows("SELECT DISTINCT name FROM slices WHERE list_contains($types, name)",
                                           {"types": list(op_ns)})}
    return {op: op_ns[op] / roof_ns[op] for op in sorted(named)}


RULES: list[Callable[[Facts], Advice | None]] = [
    _data_loader_bound, _low_device_utilisation, _launch_bound, _host_bound_gaps, _communication_not_overlapped,
    _uneven_ranks, _memory_near_capacity, _amp_unused, _channels_last, _excessive_sync, _recompilations,
    _below_roof,
]


def advise(tables: RunTables) -> pa.Table:
    """Every rule's advice for this run, most severe first (schema ``ADVICE``), each with its estimated gain
    (module docstring)."""
    facts = Facts(tables)
    rows = []
    for rule in RULES:
        advice = rule(facts)
        if advice is None:
            continue
        gain = _gain(tables, advice.what_if)
        rows.append({**advice.__dict__, "evidence": json.dumps(advice.evidence, sort_keys=True), **gain,
                     "severity": advice.severity or rated_by_gain(gain["gain_pct"])})
    rows.sort(key=lambda row: SEVERITY_ORDER[row["severity"]])
    return pa.Table.from_pylist(rows, schema=ADVICE)


def rated_by_gain(gain_pct: float | None) -> str:
    """The severity of advice with a what-if: its estimated gain (share of the mean step) against
    ``HIGH_GAIN_PCT`` and ``MEDIUM_GAIN_PCT``; low when it saves nothing or its gain is unknown."""
    if gain_pct is None or gain_pct < MEDIUM_GAIN_PCT:
        return "low"
    return "high" if gain_pct >= HIGH_GAIN_PCT else "medium"


def _gain(tables: RunTables, change: WhatIf | None) -> dict:
    """``what_if``, ``gain_ns`` and ``gain_pct`` of a piece of advice (module docstring)."""
    from perfsight.analysis.critical_path import what_if

    if change is None:
        return {"what_if": None, "gain_ns": None, "gain_pct": None}
    rows = computed(what_if, tables, change.changes).to_pylist()
    if not rows:
        return {"what_if": change.label, "gain_ns": None, "gain_pct": None}
    saved = sum(r["saved_ns"] for r in rows) // len(rows)
    baseline = sum(r["baseline_ns"] for r in rows) / len(rows)
    return {"what_if": change.label, "gain_ns": saved, "gain_pct": 100.0 * saved / baseline if baseline else None}


EVIDENCE_REFS = pa.schema([("rule", pa.string()), ("kind", pa.string()), ("value", pa.string())])

#: evidence keys whose mapping keys name things, and the kind of thing: ``rank``, ``device``, ``host_op``
#: (a framework operator type), ``frame`` (a compiled frame)
_EVIDENCE_KEYS = {"ranks": "rank", "idle_pct_by_rank": "rank", "mean_step_ns_by_rank": "rank", "devices": "device",
                  "ops": "host_op", "host_ops": "host_op", "frames": "frame"}
#: fields inside an evidence entry (or at the top level) whose value names a thing
_EVIDENCE_FIELDS = {"slowest_rank": "rank", "straggler_rank": "rank", "step": "step", "op_type": "host_op"}


def evidence_refs(advice: pa.Table) -> pa.Table:
    """What each piece of advice's evidence names, for links to where it is shown (schema
    ``EVIDENCE_REFS``): one row per distinct (rule, kind, value), in the order of the advice and of its
    evidence; ``kind`` is ``rank``, ``step``, ``device``, ``host_op`` (a framework operator type) or
    ``frame`` (a torch.compile frame); ``value`` as text."""
    rows: list[dict] = []
    for advice_row in advice.to_pylist():
        found: list[tuple[str, str]] = []

        def named(mapping: dict) -> None:
            for field, kind in _EVIDENCE_FIELDS.items():
                if mapping.get(field) is not None:
                    found.append((kind, str(mapping[field])))

        evidence = json.loads(advice_row["evidence"] or "{}")
        named(evidence)
        for key, kind in _EVIDENCE_KEYS.items():
            for name, entry in (evidence.get(key) or {}).items():
                found.append((kind, str(name)))
                if isinstance(entry, dict):
                    named(entry)
        for kind, value in dict.fromkeys(found):
            rows.append({"rule": advice_row["rule"], "kind": kind, "value": value})
    return pa.Table.from_pylist(rows, schema=EVIDENCE_REFS)
