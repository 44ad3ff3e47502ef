"""FLOPs from operators' input shapes, for traces that carry none.

torch's ``with_flops`` puts a ``flops`` value in the trace only up to some releases (torch 2.13's chrome
trace has none: the numbers stay in ``key_averages``), so a current trace has shapes (``record_shapes``)
but no FLOPs. ``shape_flops`` counts the operators that do the arithmetic, with the formulas of
``torch.utils.flop_counter`` (a multiply-add is 2 FLOPs):

* ``aten::mm``, ``aten::addmm``, ``aten::bmm``, ``aten::baddbmm``: A [..., m, k] x B [..., k, n] is
  2 x (A's elements) x n;
* ``aten::convolution`` (every convNd and conv_transposeNd goes through it): 2 x N x (output positions)
  x (weight elements), the output positions from the input, the weight and the stride, padding and
  dilation of its ``Concrete Inputs``; transposed: the input positions in their place;
  ``aten::convolution_backward``: the forward's FLOPs once for each gradient its ``output_mask`` asks for
  (input, weight), the positions taken from ``grad_output``;
* the fused attention kernels (``aten::_scaled_dot_product_{flash,efficient,cudnn}_attention``, with
  ``_for_cpu``): Q [..., sq, d], K [..., sk, d], V [..., sk, dv] is 2 x (Q's elements / d) x sk x (d + dv);
  their ``_backward``: twice that.

Operators nested in a counted one are not counted again (a convolution that runs as matrix products).
Nothing is estimated for a run that already has FLOPs from its source, nor for operators whose shapes
do not fit the formula (they are left out, not guessed). Element-wise operators are not counted.
"""
from __future__ import annotations

import math
import re

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.tables import RunTables

SHAPE_FLOPS = pa.schema([("id", pa.int64()), ("flops", pa.int64())])

MATMUL_OPS = {"aten::mm": 0, "aten::addmm": 1, "aten::bmm": 0, "aten::baddbmm": 1}  # name -> index of A
ATTENTION_OPS = re.compile(r"aten::_scaled_dot_product_(flash|efficient|cudnn)_attention(_for_cpu)?(_backward)?$")
CONVOLUTION, CONVOLUTION_BACKWARD = "aten::convolution", "aten::convolution_backward"


def shape_flops(tables: RunTables) -> pa.Table:
    """The FLOPs of each operator slice this module counts (schema ``SHAPE_FLOPS``: slice id, FLOPs);
    empty when the run has FLOPs of its own."""
    slices = tables.slices
    if slices.num_rows == 0 or pc.count(slices.column("flops")).as_py():
        return SHAPE_FLOPS.empty_table()
    names = slices.column("name")
    known = pc.or_(pc.is_in(names, pa.array([*MATMUL_OPS, CONVOLUTION, CONVOLUTION_BACKWARD])),
                   pc.match_substring_regex(names, ATTENTION_OPS.pattern))
    rows = np.flatnonzero(pc.and_(pc.fill_null(known, False), pc.is_valid(slices.column("input_shapes")))
                          .to_numpy(zero_copy_only=False))
    picked = slices.take(pa.array(rows)).select(["name", "input_shapes", "args"]).to_pylist()
    flops = np.array([flops_of(**row) for row in picked], dtype=np.float64)  # nan where the formula does not fit
    counted = ~np.isnan(flops)
    rows, flops = rows[counted], flops[counted]
    outermost = ~inside_counted(slices, rows)
    return pa.table({"id": slices.column("id").take(pa.array(rows[outermost])),
                     "flops": pa.array(flops[outermost].astype(np.int64))}, schema=SHAPE_FLOPS)


def inside_counted(slices: pa.Table, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``: whether one of its enclosing slices is also among ``rows``."""
    parent_row = pc.fill_null(pc.index_in(slices.column("parent_id"), value_set=slices.column("id")), -1)
    parent_row = parent_row.to_numpy()
    is_counted = np.zeros(slices.num_rows, dtype=bool)
    is_counted[rows] = True
    inside = np.zeros(len(rows), dtype=bool)
    ancestor = parent_row[rows]
    while (ancestor >= 0).any():
        climbing = ancestor >= 0
        inside[climbing] |= is_counted[ancestor[climbing]]
        ancestor[climbing] = parent_row[ancestor[climbing]]
    return inside


def flops_of(name: str, input_shapes: str, args: str | None) -> float:
    """The operator's FLOPs, or nan when its shapes do not fit its formula."""
    try:
        shapes = msgspec.json.decode(input_shapes)
        if name in MATMUL_OPS:
            return _matmul(shapes[MATMUL_OPS[name]], shapes[MATMUL_OPS[name] + 1])
        concrete = msgspec.json.decode(args or "{}").get("Concrete Inputs") or []
        if name == CONVOLUTION:
            return _convolution(shapes, concrete)
        if name == CONVOLUTION_BACKWARD:
            return _convolution_backward(shapes, concrete)
        backward = name.endswith("_backward")
        query, key, value = shapes[1:4] if backward else shapes[0:3]
        return (2.0 if backward else 1.0) * _attention(query, key, value)
    except (msgspec.DecodeError, IndexError, KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError,
            RecursionError):  # args nested too deeply to walk: no figure
        return math.nan


def _matmul(a: list[int], b: list[int]) -> float:
    if len(a) < 2 or len(a) != len(b) or a[-1] != b[-2]:
        return math.nan
    return 2.0 * math.prod(a) * b[-1]


def _convolution(shapes: list, concrete: list[str]) -> float:
    """aten::convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)."""
    source, weight = shapes[0], shapes[1]
    stride, padding, dilation = (msgspec.json.decode(concrete[i]) for i in (3, 4, 5))
    spatial = source[2:]
    if len(weight) != len(source) or not (len(stride) == len(padding) == len(dilation) == len(spatial)):
        return math.nan
    if _is_true(concrete[6]):
        positions = math.prod(spatial)
    else:
        positions = math.prod((size + 2 * pad - dil * (kernel - 1) - 1) // step + 1
                              for size, pad, dil, kernel, step in zip(spatial, padding, dilation, weight[2:], stride))
    return 2.0 * source[0] * positions * math.prod(weight) if positions > 0 else math.nan


def _convolution_backward(shapes: list, concrete: list[str]) -> float:
    """aten::convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
    transposed, output_padding, groups, output_mask)."""
    grad_output, source, weight = shapes[0], shapes[1], shapes[2]
    if len(weight) != len(source) or len(grad_output) != len(source):
        return math.nan
    positions = math.prod(source[2:] if _is_true(concrete[7]) else grad_output[2:])
    return 2.0 * source[0] * positions * math.prod(weight) * backward_gradients(concrete)


def backward_gradients(concrete: list[str]) -> int:
    """How many of the input and weight gradients an ``aten::convolution_backward`` computes (its
    ``output_mask``; both when the trace does not say)."""
    mask = msgspec.json.decode(concrete[10].lower()) if len(concrete) > 10 and concrete[10] else [True, True]
    return bool(mask[0]) + bool(mask[1])


def _attention(query: list[int], key: list[int], value: list[int]) -> float:
    if len(query) < 2 or len(key) != len(query) or len(value) != len(query) or key[-1] != query[-1]:
        return math.nan
    return 2.0 * math.prod(query[:-1]) * key[-2] * (query[-1] + value[-1])


def _is_true(text: str) -> bool:
    return text.strip().lower() in ("true", "1")
