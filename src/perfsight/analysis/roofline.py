"""The roofline: per operator, the bytes it moves next to its FLOPs, its arithmetic intensity, whether the
device's memory bandwidth or its compute bounds it, and how close it came to that roof.

One performance model per operator family (``FAMILIES``, looked up by operator name), each giving the
FLOPs and the bytes of one execution from its input shapes and dtypes. |T| is the number of elements of
tensor T (an input shape ``[]``, a scalar or a non-tensor argument, counts 0; a list of shapes, the sum of
theirs), s(T) its element size in bytes (``DTYPE_BYTES``; a dtype the trace does not give takes the size of
the operator's precision, ``PRECISION_BYTES``), "inputs" the sum of |T| x s(T) over the tensor inputs:

* matmul (``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``): A [..., m, k] x B [..., k, n]: FLOPs 2 x |A| x n
  (``flops_shapes``); bytes: inputs (A, B and an ``addmm`` bias) + the output, |A| / k x n at s(A).
* conv (``aten::convolution``): X [N, C, *in], W [C_out, C / groups, *k]: FLOPs as ``flops_shapes``; bytes:
  inputs (X, W, bias) + Y [N, C_out, *out] at s(X), out = (in + 2 x padding - dilation x (k - 1) - 1) //
  stride + 1; transposed: out = (in - 1) x stride - 2 x padding + dilation x (k - 1) + output_padding + 1 and
  C_out = W[1] x groups. ``aten::convolution_backward``: per gradient its ``output_mask`` asks for,
  |dY| s(dY) + |X| s(X) + |W| s(W) (one read of the output gradient and of the other operand, one write).
* attention (``aten::_scaled_dot_product_{flash,efficient,cudnn}_attention``, with ``_for_cpu``): Q
  [..., sq, d], K and V [..., sk, d(v)], O [..., sq, dv]: FLOPs as ``flops_shapes``; bytes (|Q| + |K| + |V|
  + |O|) x s(Q), the scores staying on chip; ``_backward``: 2 x (|Q| + |K| + |V| + |O|) x s(Q) (reads dO,
  O, Q, K, V; writes dQ, dK, dV).
* normalisation (layer, batch, group and RMS norm, softmax and log-softmax, and their backward): FLOPs
  ``NORM_FLOPS_PER_ELEMENT`` x |X|, X the largest input; bytes: inputs + an output like X.
* elementwise (arithmetic, activations and their backward; copies): FLOPs 1 per output element (copies 0),
  the output like the largest input (what broadcasting gives); bytes: inputs + the output, except the
  in-place copies (``copy_``, ``fill_``, ``zero_``: the destination is an input, written once): inputs.
* reductions (sum, mean, max, min, norms, var, std, ...): FLOPs 1 per element of the largest input; bytes:
  inputs (the output, at most as large and usually far smaller, is not counted).
* embedding (``aten::embedding``: W [V, D], indices I): FLOPs 0; bytes |I| s(I) + 2 x |I| x D x s(W) (the
  rows read, the output written).
* collectives (``c10d::``, ``nccl:``, ``hccl`` operators): FLOPs 0; bytes: inputs, the tensors they send.
  Their roof is the network's, which the peak table does not hold: ``bound`` = ``communication``, no roof.

FLOPs the trace recorded (``slices.flops``) replace the model's. A shape that does not fit its model leaves
the operator out, and operators nested in a modelled one are not counted again (the outermost modelled
operator counts: ``flops_shapes.inside_counted``). Time (``op_ns``, ``time_source``), precision and the
peak FLOP/s are ``flops``' (device total time, else host time; ``precision.op_precisions``;
``peaks.device_peak``, or the ``peak_flops`` argument); the memory bandwidth is ``peaks.device_bandwidth``
(or the ``peak_bandwidth`` argument; a CPU's is not estimated).

``roofline`` gives per rank, operator type and precision (schema ``ROOFLINE``): ``intensity`` = flops /
bytes (FLOP/byte); ``ridge`` = peak_flops / peak_bandwidth; ``bound`` = ``memory`` below the ridge, else
``compute``; ``attainable_flops_per_s`` = min(peak_flops, intensity x peak_bandwidth); ``roof_ns``: the
time its executions would take at their roof, the sum of max(flops / peak_flops, bytes / peak_bandwidth)
(x 1e9 ns/s), so ``roof_percent`` = 100 x roof_ns / op_ns is the achieved share of the roofline (for one
shape: achieved FLOP/s over attainable, or achieved bytes/s over the bandwidth under the ridge); and
``below_roof_ns`` = op_ns - roof_ns, the time spent beyond the roof's, by which the rows are ordered,
largest first. The roof figures (roof_ns, roof_percent, below_roof_ns) count only the executions that ran
under that roof: in a run with device tasks, those timed on the device (one that launched no task ran on
the host, whose roof is not the device's); and none of a collective. Figures needing an unknown peak or
bandwidth are null. A share above 100% keeps its number and ``peak_note`` names the row
(``OVER_ROOF_NOTE``). A copy between host and device is bound by the link, not the device memory: it shows
far below its roof.
"""
from __future__ import annotations

import math
import re

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.analysis.flops import OP_TIME_SQL, register_operator_facts
from perfsight.analysis.flops_shapes import (
    ATTENTION_OPS,
    CONVOLUTION,
    CONVOLUTION_BACKWARD,
    MATMUL_OPS,
    backward_gradients,
    flops_of,
    inside_counted,
)
from perfsight.analysis.ops import has_device_tasks
from perfsight.analysis.peaks import device_bandwidth
from perfsight.analysis.precision import FP8_DTYPE, op_precisions
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables

#: FLOPs per element of a normalisation: its statistics (a sum and a sum of squares) and the scaling and
#: shift of each element; a model of the work, as the kernels' instruction counts vary
NORM_FLOPS_PER_ELEMENT = 5

_NORMALISATION = ("aten::native_layer_norm", "aten::layer_norm", "aten::native_batch_norm", "aten::batch_norm",
                  "aten::_batch_norm_impl_index", "aten::cudnn_batch_norm", "aten::miopen_batch_norm",
                  "aten::native_group_norm", "aten::group_norm", "aten::rms_norm", "aten::_fused_rms_norm",
                  "aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax",
                  "aten::native_layer_norm_backward", "aten::native_batch_norm_backward",
                  "aten::cudnn_batch_norm_backward", "aten::native_group_norm_backward",
                  "aten::_softmax_backward_data", "aten::_log_softmax_backward_data")
_ARITHMETIC = ("add", "sub", "mul", "div", "neg", "exp", "log", "pow", "sqrt", "rsqrt", "reciprocal", "abs",
               "relu", "gelu", "silu", "sigmoid", "tanh", "hardtanh", "leaky_relu", "elu", "clamp", "clamp_min",
               "clamp_max", "where", "addcmul", "addcdiv", "lerp", "threshold", "sign", "maximum", "minimum",
               "masked_fill")
_ELEMENTWISE = tuple(f"aten::{op}{suffix}" for op in _ARITHMETIC for suffix in ("", "_")) + (
    "aten::threshold_backward", "aten::gelu_backward", "aten::silu_backward", "aten::sigmoid_backward",
    "aten::tanh_backward", "aten::hardtanh_backward", "aten::leaky_relu_backward", "aten::native_dropout",
    "aten::native_dropout_backward")
#: element-wise operators that only move data (0 FLOPs); the in-place ones write their first input
COPIES = ("aten::clone", "aten::_to_copy")
IN_PLACE_COPIES = ("aten::copy_", "aten::fill_", "aten::zero_")
_REDUCTIONS = ("aten::sum", "aten::mean", "aten::amax", "aten::amin", "aten::max", "aten::min", "aten::argmax",
               "aten::argmin", "aten::prod", "aten::norm", "aten::linalg_vector_norm", "aten::var", "aten::std",
               "aten::var_mean", "aten::std_mean", "aten::any", "aten::all", "aten::logsumexp")
#: collective operators, by name
COLLECTIVE_OPS = re.compile(r"^(c10d::|nccl:|hccl|HcclAll|HcclBroadcast|HcclReduce)")

#: operator name -> family (attention and collectives are known by ``ATTENTION_OPS`` and ``COLLECTIVE_OPS``)
FAMILIES: dict[str, str] = {
    **dict.fromkeys(MATMUL_OPS, "matmul"),
    CONVOLUTION: "conv", CONVOLUTION_BACKWARD: "conv",
    **dict.fromkeys(_NORMALISATION, "normalisation"),
    **dict.fromkeys(_ELEMENTWISE + COPIES + IN_PLACE_COPIES, "elementwise"),
    **dict.fromkeys(_REDUCTIONS, "reduction"),
    "aten::embedding": "embedding",
}

#: element size in bytes of a dtype as Kineto or the Ascend readers name it (``precision.FP8_DTYPE``: 1)
DTYPE_BYTES = {
    **dict.fromkeys(("double", "DOUBLE", "DT_DOUBLE", "long int", "long", "INT64", "DT_INT64", "c10::complex<float>",
                     "unsigned long", "UINT64"), 8),
    **dict.fromkeys(("float", "FLOAT", "DT_FLOAT", "int", "INT32", "DT_INT32", "unsigned int", "UINT32"), 4),
    **dict.fromkeys(("c10::Half", "c10::BFloat16", "FLOAT16", "DT_FLOAT16", "BF16", "DT_BF16", "short", "INT16",
                     "UINT16", "unsigned short"), 2),
    **dict.fromkeys(("signed char", "unsigned char", "bool", "BOOL", "INT8", "UINT8", "DT_INT8", "DT_UINT8",
                     "c10::qint8", "c10::quint8"), 1),
}
#: element size of a precision, for a tensor whose dtype the trace does not give
PRECISION_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}

#: what ``peak_note`` says after naming a row above 100% of its roof
OVER_ROOF_NOTE = ("above 100% of its roof: the peak or bandwidth entry is likely too low, or the bytes model "
                  "counts traffic the caches saved")

OP_WORK = pa.schema([("id", pa.int64()), ("family", pa.string()), ("flops", pa.int64()), ("bytes", pa.int64())])

ROOFLINE = pa.schema([
    ("rank", pa.int32()),
    ("op_type", pa.string()),
    ("family", pa.string()),
    ("precision", pa.string()),
    ("count", pa.int64()),
    ("flops", pa.int64()),
    ("bytes", pa.int64()),
    ("op_ns", pa.int64()),
    ("time_source", pa.string()),
    ("intensity", pa.float64()),
    ("flops_per_s", pa.float64()),
    ("bytes_per_s", pa.float64()),
    ("peak_flops", pa.float64()),
    ("peak_bandwidth", pa.float64()),
    ("ridge", pa.float64()),
    ("bound", pa.string()),
    ("attainable_flops_per_s", pa.float64()),
    ("roof_ns", pa.int64()),
    ("roof_percent", pa.float64()),
    ("below_roof_ns", pa.int64()),
    ("peak_source", pa.string()),
    ("bandwidth_source", pa.string()),
    ("peak_note", pa.string()),
])


def family_of(name: str) -> str | None:
    """The operator family whose model counts the operator called ``name``; None for the others."""
    if name in FAMILIES:
        return FAMILIES[name]
    if ATTENTION_OPS.match(name):
        return "attention"
    return "collective" if COLLECTIVE_OPS.match(name) else None


def _elements(shape) -> int:
    """|T| of an input shape: the product of its sizes; ``[]`` 0; a list of shapes, the sum of theirs."""
    if not isinstance(shape, list) or not shape:
        return 0
    if all(isinstance(size, int) for size in shape):
        return math.prod(shape)
    return sum(_elements(inner) for inner in shape)


def _size(dtype, default: int) -> int:
    if isinstance(dtype, str) and FP8_DTYPE.search(dtype):
        return 1
    return DTYPE_BYTES.get(dtype, default) if isinstance(dtype, str) else default


def work_of(name: str, input_shapes: str, input_dtypes: str | None, args: str | None,
            precision: str = "fp32") -> tuple[float, float]:
    """(FLOPs, bytes) of one execution of the operator ``name`` (module docstring); both nan where the shapes do
    not fit its family's model or it has none. ``precision`` sizes the tensors whose dtype is not given."""
    flops, moved = _work(name, input_shapes, input_dtypes, args, precision)
    return (math.nan, math.nan) if math.isnan(flops) or math.isnan(moved) else (flops, moved)


def _work(name: str, input_shapes: str, input_dtypes: str | None, args: str | None,
          precision: str) -> tuple[float, float]:
    family = family_of(name)
    try:
        shapes = msgspec.json.decode(input_shapes)
        dtypes = msgspec.json.decode(input_dtypes) if input_dtypes else []
        default = PRECISION_BYTES.get(precision, 4)
        sizes = [_size(dtypes[i] if i < len(dtypes) else None, default) for i in range(len(shapes))]
        elements = [_elements(shape) for shape in shapes]
        inputs = float(sum(n * s for n, s in zip(elements, sizes)))
        largest = max(range(len(shapes)), key=lambda i: elements[i])
        if family == "matmul":
            a, b = shapes[MATMUL_OPS[name]], shapes[MATMUL_OPS[name] + 1]
            output = math.prod(a[:-1]) * b[-1] * sizes[MATMUL_OPS[name]]
            return flops_of(name, input_shapes, args), inputs + output
        if family == "conv":
            concrete = msgspec.json.decode(args or "{}").get("Concrete Inputs") or []
            if name == CONVOLUTION_BACKWARD:
                operands = sum(elements[i] * sizes[i] for i in range(3))
                return flops_of(name, input_shapes, args), float(backward_gradients(concrete) * operands)
            return flops_of(name, input_shapes, args), inputs + _conv_output(shapes, concrete) * sizes[0]
        if family == "attention":
            backward = name.endswith("_backward")
            query, key, value = shapes[1:4] if backward else shapes[0:3]
            out = math.prod(query[:-1]) * value[-1]
            moved = (math.prod(query) + math.prod(key) + math.prod(value) + out) * sizes[1 if backward else 0]
            return flops_of(name, input_shapes, args), (2.0 if backward else 1.0) * moved
        if family == "normalisation":
            return NORM_FLOPS_PER_ELEMENT * elements[largest], inputs + elements[largest] * sizes[largest]
        if family == "elementwise":
            per_element = 0 if name in COPIES + IN_PLACE_COPIES else 1
            written = 0 if name in IN_PLACE_COPIES else elements[largest] * sizes[largest]
            return float(per_element * elements[largest]), inputs + written
        if family == "reduction":
            return float(elements[largest]), inputs
        if family == "embedding":
            weight, indices = shapes[0], shapes[1]
            return 0.0, float(elements[1] * sizes[1] + 2 * _elements(indices) * weight[-1] * sizes[0])
        if family == "collective":
            return 0.0, inputs
    except (msgspec.DecodeError, IndexError, KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError,
            RecursionError):  # args nested too deeply to walk: no figure
        pass
    return math.nan, math.nan


def _conv_output(shapes: list, concrete: list[str]) -> int:
    """|Y| of ``aten::convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
    groups)`` (module docstring)."""
    source, weight = shapes[0], shapes[1]
    stride, padding, dilation = (msgspec.json.decode(concrete[i]) for i in (3, 4, 5))
    kernel = weight[2:]
    if concrete[6].strip().lower() in ("true", "1"):
        extra = msgspec.json.decode(concrete[7]) if len(concrete) > 7 and concrete[7] else [0] * len(kernel)
        groups = int(concrete[8]) if len(concrete) > 8 and concrete[8] else 1
        out = [(size - 1) * step - 2 * pad + dil * (k - 1) + more + 1
               for size, step, pad, dil, k, more in zip(source[2:], stride, padding, dilation, kernel, extra)]
        channels = weight[1] * groups
    else:
        out = [(size + 2 * pad - dil * (k - 1) - 1) // step + 1
               for size, step, pad, dil, k in zip(source[2:], stride, padding, dilation, kernel)]
        channels = weight[0]
    if len(out) != len(source) - 2 or min(out, default=1) <= 0:
        raise ValueError("the convolution's shapes do not fit")
    return source[0] * channels * math.prod(out)


def op_work(tables: RunTables) -> pa.Table:
    """The FLOPs and bytes of each outermost modelled operator slice (schema ``OP_WORK``: slice id, family,
    flops (the trace's where it has them), bytes), computed once per distinct name, shapes, dtypes, arguments
    and precision."""
    slices = tables.slices
    if slices.num_rows == 0:
        return OP_WORK.empty_table()
    names = slices.column("name")
    known = pc.or_(pc.or_(pc.is_in(names, pa.array(list(FAMILIES))),
                          pc.match_substring_regex(names, ATTENTION_OPS.pattern)),
                   pc.match_substring_regex(names, COLLECTIVE_OPS.pattern))
    wanted = pc.and_(pc.and_(pc.fill_null(known, False), pc.is_valid(slices.column("input_shapes"))),
                     pc.equal(slices.column("kind"), "cpu_op"))
    rows = np.flatnonzero(pc.fill_null(wanted, False).to_numpy(zero_copy_only=False))
    picked = slices.take(pa.array(rows, pa.int64())).select(["id", "name", "input_shapes", "input_dtypes", "args"])
    precisions = computed(op_precisions, tables)
    at = pc.index_in(picked["id"], value_set=precisions["id"])
    precision = pc.fill_null(pc.take(precisions["precision"], at), "fp32").to_pylist()
    found: dict[tuple, tuple[float, float]] = {}
    work = np.array([found.setdefault(key, work_of(*key)) for key in zip(
        picked["name"].to_pylist(), picked["input_shapes"].to_pylist(), picked["input_dtypes"].to_pylist(),
        picked["args"].to_pylist(), precision)], dtype=np.float64).reshape(-1, 2)
    fits = ~np.isnan(work).any(axis=1)
    rows, work = rows[fits], work[fits]
    outermost = ~inside_counted(slices, rows)
    rows, work = rows[outermost], work[outermost]
    chosen = slices.take(pa.array(rows, pa.int64()))
    model_flops = pa.array(work[:, 0].astype(np.int64))
    return pa.table({"id": chosen["id"], "family": pa.array([family_of(n) for n in chosen["name"].to_pylist()]),
                     "flops": pc.coalesce(chosen["flops"], model_flops),
                     "bytes": pa.array(work[:, 1].astype(np.int64))}, schema=OP_WORK)


_ROOFLINE_SQL = f"""
WITH work AS (
    SELECT w.id, w.family, w.flops, w.bytes, coalesce(s.op_type, s.name) AS op_type,
           coalesce(t.rank, 0)::INTEGER AS rank, coalesce(p.precision, 'fp32') AS precision, {OP_TIME_SQL}
    FROM op_work w JOIN slices s USING (id) JOIN tracks t USING (track_id)
    LEFT JOIN device_time d USING (id) LEFT JOIN precisions p USING (id)
), priced AS (
    SELECT w.*, pk.peak, pk.source AS peak_source,
           CASE WHEN w.family <> 'collective' AND pk.peak IS NOT NULL AND $bandwidth IS NOT NULL
                     AND (w.time_source = 'device' OR NOT $has_device_tasks)
                THEN greatest(w.flops / pk.peak, w.bytes / $bandwidth) * 1e9 END AS roof_ns
    FROM work w LEFT JOIN peaks pk USING (precision)
), grouped AS (
    SELECT rank, op_type, family, precision, count(*) AS count, TRY_CAST(sum(flops) AS BIGINT) AS flops,
           sum(bytes)::BIGINT AS bytes, sum(op_ns)::BIGINT AS op_ns,
           CASE WHEN min(time_source) = max(time_source) THEN min(time_source) ELSE 'mixed' END AS time_source,
           sum(flops) / nullif(sum(bytes), 0) AS intensity,
           sum(flops) * 1e9 / nullif(sum(op_ns), 0) AS flops_per_s,
           sum(bytes) * 1e9 / nullif(sum(op_ns), 0) AS bytes_per_s,
           any_value(peak) AS peak_flops, $bandwidth AS peak_bandwidth, any_value(peak) / $bandwidth AS ridge,
           round(sum(roof_ns))::BIGINT AS roof_ns, sum(op_ns) FILTER (WHERE roof_ns IS NOT NULL) AS roofed_ns,
           any_value(peak_source) AS peak_source, $bandwidth_source AS bandwidth_source
    FROM priced GROUP BY rank, op_type, family, precision
)
SELECT rank, op_type, family, precision, count, flops, bytes, op_ns, time_source, intensity, flops_per_s,
       bytes_per_s, peak_flops, peak_bandwidth, ridge,
       CASE WHEN family = 'collective' THEN 'communication' WHEN ridge IS NULL OR intensity IS NULL THEN NULL
            WHEN intensity < ridge THEN 'memory' ELSE 'compute' END AS bound,
       CASE WHEN family <> 'collective' AND peak_flops IS NOT NULL AND peak_bandwidth IS NOT NULL
            THEN least(peak_flops, intensity * peak_bandwidth) END AS attainable_flops_per_s,
       roof_ns, 100.0 * roof_ns / nullif(roofed_ns, 0) AS roof_percent, roofed_ns - roof_ns AS below_roof_ns,
       peak_source, bandwidth_source
FROM grouped ORDER BY rank, below_roof_ns DESC NULLS LAST, op_ns DESC, op_type, precision
"""


def roofline(tables: RunTables, *, peak_flops: float | None = None,
             peak_bandwidth: float | None = None) -> pa.Table:
    """Per rank, operator type and precision, the roofline of the modelled operators (schema ``ROOFLINE``;
    module docstring): FLOPs, bytes, intensity, the bound, the attainable FLOP/s and the achieved share of
    the roof; the furthest below their roof (most time beyond it) first."""
    bandwidth, bandwidth_source = device_bandwidth(tables.meta_dict(), peak_bandwidth)
    con = register_operator_facts(tables.connect(), tables, peak_flops)
    con.register("op_work", computed(op_work, tables))
    table = con.sql(_ROOFLINE_SQL, params={"bandwidth": bandwidth, "bandwidth_source": bandwidth_source,
                                           "has_device_tasks": computed(has_device_tasks, tables)})
    table = table.to_arrow_table()
    notes = [None if share is None or share <= 100.0 else f"{op} ({precision}): {OVER_ROOF_NOTE}"
             for op, precision, share in zip(table["op_type"].to_pylist(), table["precision"].to_pylist(),
                                             table["roof_percent"].to_pylist())]
    return table.append_column("peak_note", pa.array(notes, pa.string())).cast(ROOFLINE)


def over_roof_warnings(tables: RunTables) -> list[str]:
    """The ``peak_note`` of every ``roofline`` row above 100% of its roof (each names its operator and
    precision) with the peak and bandwidth it was measured against, for the run summary's warnings."""
    return [f"{row['peak_note']} (peak {row['peak_source']}; bandwidth {row['bandwidth_source']})"
            for row in computed(roofline, tables).to_pylist() if row["peak_note"]]
