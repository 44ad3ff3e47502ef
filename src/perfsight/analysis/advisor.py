"""The advisor: rules over the analyses, each giving evidence, its threshold and what to try.

``advise(tables)`` returns one row per piece of advice (columns: rule, severity, title, finding,
evidence (JSON text: the steps, ops, ranks and times behind it), threshold, suggestion), most severe
first; ``export summary`` writes it as prof_rule_0.json and ``perfsight analyse`` prints it. A rule is
a small function of a ``Facts`` object (the analyses, computed once and shared between rules) that
returns an ``Advice`` or None; a new rule is one function added to ``RULES``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc

from ..tables import RunTables

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}
ADVICE = pa.schema([("rule", pa.string()), ("severity", pa.string()), ("title", pa.string()),
                    ("finding", pa.string()), ("evidence", pa.string()), ("threshold", pa.string()),
                    ("suggestion", pa.string())])

UNEVEN_RANKS_RATIO = 0.10         # slowest rank's mean step >= 10% above the fastest's
SYNC_SHARE = 0.05                 # time in device synchronisation >= 5% of the profiled steps
FP32_MATMUL_SHARE = 0.20          # fp32 matmul/conv kernels >= 20% of device kernel time
CONV_SHARE = 0.10                 # NCHW convolutions >= 10% of the operator time considered


@dataclass(frozen=True)
class Advice:
    rule: str
    severity: str
    title: str
    finding: str
    evidence: dict
    threshold: str
    suggestion: str


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


class Facts:
    """The tables and the analyses the rules read, each computed at most once."""

    def __init__(self, tables: RunTables):
        self.tables = tables
        self.con = tables.connect()

    def rows(self, query: str, params: dict | None = None) -> list[dict]:
        return self.con.sql(query, params=params).to_arrow_table().to_pylist()

    @cached_property
    def steps(self) -> pa.Table:
        from .steps import step_trace

        return step_trace(self.tables)

    @cached_property
    def profiled_ns(self) -> int:
        """Summed duration of the profiled steps (all ranks), or the run's span when it has no steps."""
        if self.steps.num_rows:
            return int(pc.sum(self.steps.column("iteration_ns")).as_py())
        row = self.rows("SELECT max(start_ns + dur_ns) - min(start_ns) AS span FROM slices")[0]
        return int(row["span"] or 0)

    @cached_property
    def has_device(self) -> bool:
        return bool(self.rows("SELECT count(*) AS n FROM tracks WHERE kind = 'stream'")[0]["n"])


def _uneven_ranks(facts: Facts) -> Advice | None:
    if not facts.steps.num_rows:
        return None
    facts.con.register("profiled_steps", facts.steps)
    per_rank = facts.rows("SELECT rank, avg(iteration_ns)::DOUBLE AS mean_ns, count(*) AS steps FROM profiled_steps "
                          "GROUP BY rank ORDER BY mean_ns")
    if len(per_rank) < 2:
        return None
    fastest, slowest = per_rank[0], per_rank[-1]
    excess = slowest["mean_ns"] / fastest["mean_ns"] - 1
    if excess < UNEVEN_RANKS_RATIO:
        return None
    return Advice(
        "uneven_ranks", "high" if excess >= 0.25 else "medium", "Ranks are uneven",
        f"rank {slowest['rank']} takes {_ms(slowest['mean_ns'])} per step, {excess:.0%} more than rank "
        f"{fastest['rank']} ({_ms(fastest['mean_ns'])}); every rank waits for the slowest at each collective",
        {"mean_step_ns_by_rank": {str(r["rank"]): round(r["mean_ns"]) for r in per_rank},
         "slowest_rank": slowest["rank"]},
        f"slowest rank's mean step >= {UNEVEN_RANKS_RATIO:.0%} above the fastest's",
        "Compare the slow rank's step breakdown with the others: uneven data shards or sequence lengths, a slower "
        "device or host, or extra work on rank 0 (logging, checkpointing) are the usual causes.")


def _excessive_sync(facts: Facts) -> Advice | None:
    rows = facts.rows("""
        SELECT name, count(*) AS calls, sum(dur_ns)::BIGINT AS total_ns FROM slices
        WHERE kind = 'sync' OR (kind IN ('runtime', 'driver') AND name ILIKE '%synchronize%')
        GROUP BY name ORDER BY total_ns DESC""")
    total = sum(r["total_ns"] for r in rows)
    if not facts.profiled_ns or total < SYNC_SHARE * facts.profiled_ns:
        return None
    return Advice(
        "excessive_synchronisation", "medium", "Excessive synchronisation",
        f"{sum(r['calls'] for r in rows)} synchronisations take {_ms(total)}, "
        f"{total / facts.profiled_ns:.0%} of the profiled time",
        {"calls": {r["name"]: {"count": r["calls"], "total_ns": r["total_ns"]} for r in rows[:5]}},
        f"synchronisation >= {SYNC_SHARE:.0%} of the profiled steps",
        "Remove host reads of device values inside the step (.item(), .cpu(), printing losses, torch.nonzero, "
        "boolean masks); accumulate metrics on the device and read them every N steps.")


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
        "recompilations", "medium", "torch.compile recompiled",
        "compiled frame(s) " + ", ".join(f"{r['frame']} ({r['last_compile']} recompile(s))" for r in rows)
        + " were compiled again during the run",
        {"frames": {r["frame"]: {"recompiles": r["last_compile"], "executions": r["executions"]} for r in rows}},
        "any region 'Torch-Compiled Region: F/C' with C > 0",
        "Run with TORCH_LOGS=recompiles to see the guard that failed; mark varying sizes dynamic "
        "(torch._dynamo.mark_dynamic), avoid Python scalars that change every step, or pad shapes to buckets.")


_MATMUL_CONV = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
                "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution", "aten::_convolution",
                "aten::cudnn_convolution", "aten::_scaled_dot_product_efficient_attention")


def _amp_unused(facts: Facts) -> Advice | None:
    if not facts.has_device:
        return None
    rows = facts.rows("""
        WITH eligible AS (
            SELECT DISTINCT s.external_id, s.name FROM slices s
            WHERE s.kind = 'cpu_op' AND list_contains($names, s.name) AND s.external_id IS NOT NULL
              AND s.input_dtypes LIKE '%"float"%' AND s.input_dtypes NOT LIKE '%Half%'
              AND s.input_dtypes NOT LIKE '%BFloat16%'),
        device AS (SELECT s.external_id, s.dur_ns FROM slices s JOIN tracks t USING (track_id)
                   WHERE t.kind = 'stream' AND s.kind = 'kernel')
        SELECT e.name, count(*) AS kernels, sum(d.dur_ns)::BIGINT AS kernel_ns,
               (SELECT sum(dur_ns)::BIGINT FROM device) AS all_kernel_ns
        FROM eligible e JOIN device d USING (external_id) GROUP BY e.name ORDER BY kernel_ns DESC""",
                      {"names": list(_MATMUL_CONV)})
    if not rows or not rows[0]["all_kernel_ns"]:
        return None
    fp32 = sum(r["kernel_ns"] for r in rows)
    share = fp32 / rows[0]["all_kernel_ns"]
    if share < FP32_MATMUL_SHARE:
        return None
    return Advice(
        "amp_unused", "high" if share >= 0.5 else "medium", "Matmuls and convolutions run in fp32",
        f"fp32 matmul/convolution kernels take {share:.0%} of device kernel time ({_ms(fp32)}); Tensor Cores "
        "run them several times faster in fp16/bf16",
        {"ops": {r["name"]: {"kernels": r["kernels"], "kernel_ns": r["kernel_ns"]} for r in rows}},
        f"fp32 matmul/conv kernels >= {FP32_MATMUL_SHARE:.0%} of device kernel time",
        "Wrap the forward pass in torch.autocast('cuda', dtype=torch.bfloat16) (or float16 with a GradScaler); "
        "at least set torch.backends.cuda.matmul.allow_tf32 = True / torch.set_float32_matmul_precision('high').")


def _channels_last(facts: Facts) -> Advice | None:
    rows = facts.rows("""
        WITH conv AS (
            SELECT s.dur_ns, json_extract(s.args, '$."Input Strides"[0]') AS strides,
                   json_extract(s.input_shapes, '$[0]') AS shape
            FROM slices s
            WHERE s.kind = 'cpu_op' AND s.name IN ('aten::conv2d', 'aten::cudnn_convolution', 'aten::convolution')
              AND s.depth = (SELECT min(depth) FROM slices c WHERE c.kind = 'cpu_op' AND c.name = s.name))
        SELECT count(*) AS convs, sum(dur_ns)::BIGINT AS conv_ns
        FROM conv
        WHERE json_array_length(shape) = 4
          AND CAST(strides->>'$[1]' AS BIGINT) = CAST(shape->>'$[2]' AS BIGINT) * CAST(shape->>'$[3]' AS BIGINT)""")
    convs, conv_ns = rows[0]["convs"], rows[0]["conv_ns"] or 0
    if not convs or not facts.profiled_ns or conv_ns < CONV_SHARE * facts.profiled_ns:
        return None
    return Advice(
        "channels_last", "medium", "Convolutions use NCHW memory layout",
        f"{convs} 2-D convolutions on NCHW-contiguous inputs take {_ms(conv_ns)}, "
        f"{conv_ns / facts.profiled_ns:.0%} of the profiled time",
        {"convolutions": convs, "conv_ns": conv_ns},
        f"NCHW convolutions >= {CONV_SHARE:.0%} of the profiled time",
        "Try model = model.to(memory_format=torch.channels_last) and the same for the input batch; cuDNN and "
        "oneDNN convolutions are usually faster in NHWC (measure: depthwise convolutions gain most).")


RULES: list[Callable[[Facts], Advice | None]] = [
    _uneven_ranks, _excessive_sync, _recompilations, _amp_unused, _channels_last,
]


def advise(tables: RunTables) -> pa.Table:
    """Every rule's advice for this run, most severe first (schema ``ADVICE``)."""
    facts = Facts(tables)
    found = [advice for rule in RULES if (advice := rule(facts)) is not None]
    found.sort(key=lambda a: SEVERITY_ORDER[a.severity])
    return pa.Table.from_pylist(
        [{**a.__dict__, "evidence": json.dumps(a.evidence, sort_keys=True)} for a in found], schema=ADVICE)
