"""The arithmetic precision of each framework operator: the peak (``peaks.device_peak``) its FLOPs are measured
against.

* From its input dtypes (``slices.input_dtypes``, a JSON list as the trace has it: Kineto's ``float``,
  ``c10::BFloat16``, ``c10::Half``, ``double``, ``signed char``, ``c10::Float8_e4m3fn``; Ascend's ``FLOAT``,
  ``FLOAT16``, ``BF16``, ``DT_BF16``, ``INT8``): ``DTYPE_PRECISIONS`` names each, any ``Float8`` type is
  ``fp8``; non-tensor arguments (Kineto's ``Scalar``, ``Double``, ``Int``) have none. The operator's precision
  is the narrowest floating one among its inputs (``fp8`` < ``fp16``/``bf16`` < ``fp32`` < ``fp64``: tensor
  cores take the narrow multiplicands, an fp32 bias or accumulator does not widen them), ``int8`` when no
  input is floating and one is int8; none otherwise.
* From the names of the device kernels it launched (itself or the operators nested in it, as
  ``operator_details.operator_device_time``' device total time), where its dtypes say nothing:
  ``KERNEL_PRECISIONS``, the first pattern a kernel name matches (cuBLAS/cuDNN/CUTLASS's ``hgemm``, ``h884``,
  ``s16816``, ``bf16``, ``tf32``, ``s1688``, ``sgemm``, ``dgemm``, ``i8816``, ``e4m3``; rocBLAS/Tensile's type
  codes ``Cijk_..._HHS_``, ``_BBS_``, ``_SB_``, ``_DB_``, ``_I8I``), the narrowest over its kernels.
* TF32: PyTorch runs fp32 matrix products on TF32 tensor cores only when ``allow_tf32`` /
  ``set_float32_matmul_precision`` says so, which a trace does not record; so an operator with fp32 inputs is
  ``tf32`` only when its kernels' names say TF32 (``tf32``, CUTLASS's ``s1688`` on fp32 data), else ``fp32``.
* Nothing known (no dtypes, no telling kernel): ``fp32``, assumed (PyTorch's default dtype).

``precision_source`` says which: ``dtypes``, ``dtypes+kernels`` (fp32 inputs on TF32 kernels), ``kernels``,
``assumed``. Ascend's cube kernels carry their dtypes in the kernel details (the readers put them on the
tasks and operators), so their names are not needed.
"""
from __future__ import annotations

import re

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.analysis.operator_details import MAX_DEPTH, enclosing_sql
from perfsight.analysis.ops import op_instances
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables

#: a tensor dtype's name (as Kineto or the Ascend readers write it) -> its precision
DTYPE_PRECISIONS = {
    **dict.fromkeys(("double", "DOUBLE", "DT_DOUBLE", "float64"), "fp64"),
    **dict.fromkeys(("float", "FLOAT", "DT_FLOAT", "float32", "FLOAT32"), "fp32"),
    **dict.fromkeys(("c10::Half", "Half", "half", "FLOAT16", "DT_FLOAT16", "float16"), "fp16"),
    **dict.fromkeys(("c10::BFloat16", "BFloat16", "bfloat16", "BF16", "DT_BF16", "BFLOAT16"), "bf16"),
    **dict.fromkeys(("signed char", "int8", "INT8", "DT_INT8", "c10::qint8", "QInt8"), "int8"),
}
#: any dtype name matching this is an 8-bit float
FP8_DTYPE = re.compile(r"float8|hifloat8", re.I)

#: (precision, kernel name pattern), first match wins (case-insensitive): fp16 before TF32's ``s1688``, since
#: Turing's ``s1688gemm_fp16`` takes fp16; ``s16816``/``s884`` (fp32 output) take fp16 or bf16 and count as fp16
KERNEL_PRECISIONS: list[tuple[str, str]] = [
    ("fp8", r"e4m3|e5m2|fp8|_f8"),
    ("int8", r"i8816|i16832|imma|int8|_i8i"),
    ("bf16", r"bf16|bfloat16|cijk_a[a-z]+_b[a-z]+_bb?s?_"),
    ("fp16", r"fp16|hgemm|h884|h1688|h16816|hmma|s884|s16816|half|cijk_a[a-z]+_b[a-z]+_hh?s?_"),
    ("tf32", r"tf32|s1688|xf32"),
    ("fp64", r"dgemm|d884|dmma|cijk_a[a-z]+_b[a-z]+_d[bd]?_"),
    ("fp32", r"sgemm|scudnn|cijk_a[a-z]+_b[a-z]+_s[bs]?_"),
]

#: narrower precisions rank higher (fp16 and bf16 alike; int8 only matters without a floating one)
NARROWNESS = {"int8": 0, "fp64": 1, "fp32": 2, "tf32": 3, "fp16": 4, "bf16": 4, "fp8": 5}

OP_PRECISIONS = pa.schema([("id", pa.int64()), ("precision", pa.string()), ("precision_source", pa.string())])


def dtypes_precision(input_dtypes: str | None) -> str | None:
    """The precision of an operator with these input dtypes (JSON list text), None when they tell none."""
    try:
        dtypes = msgspec.json.decode(input_dtypes) if input_dtypes else []
    except msgspec.DecodeError:
        return None
    found = {"fp8" if FP8_DTYPE.search(d) else DTYPE_PRECISIONS.get(d, "") for d in dtypes if isinstance(d, str)}
    floating = found - {"", "int8"}
    if floating:
        return max(floating, key=lambda p: (NARROWNESS[p], p))
    return "int8" if "int8" in found else None


def kernel_precision_sql(column: str) -> str:
    """A SQL expression: the ``KERNEL_PRECISIONS`` precision of the kernel named by ``column``, else NULL."""
    cases = " ".join(f"WHEN regexp_matches({column}, '{pattern}', 'i') THEN '{precision}'"
                     for precision, pattern in KERNEL_PRECISIONS)
    return f"CASE {cases} END"


def _narrowness_sql(column: str) -> str:
    return f"CASE {column} " + " ".join(f"WHEN '{p}' THEN {n}" for p, n in NARROWNESS.items()) + " END"


_PRECISIONS_SQL = f"""
WITH RECURSIVE named AS (         -- the device kernels whose names tell a precision, by launching operator
    SELECT launch_op_id AS id, {kernel_precision_sql("name")} AS precision
    FROM tasks WHERE launch_op_id IS NOT NULL
), launched AS (
    SELECT id, arg_max(precision, {_narrowness_sql("precision")}) AS precision FROM named WHERE precision IS NOT NULL
    GROUP BY id
), {enclosing_sql("launched")}, by_kernels AS (
    SELECT u.id, arg_max(l.precision, {_narrowness_sql("l.precision")}) AS precision
    FROM up u JOIN launched l ON l.id = u.launcher GROUP BY u.id
)
SELECT o.id,
       CASE WHEN d.precision = 'fp32' AND k.precision = 'tf32' THEN 'tf32'
            ELSE coalesce(d.precision, k.precision, 'fp32') END AS precision,
       CASE WHEN d.precision = 'fp32' AND k.precision = 'tf32' THEN 'dtypes+kernels'
            WHEN d.precision IS NOT NULL THEN 'dtypes' WHEN k.precision IS NOT NULL THEN 'kernels'
            ELSE 'assumed' END AS precision_source
FROM slices o LEFT JOIN by_dtypes d ON d.input_dtypes = o.input_dtypes LEFT JOIN by_kernels k USING (id)
WHERE o.kind = 'cpu_op'
ORDER BY o.id
"""


def op_precisions(tables: RunTables) -> pa.Table:
    """The precision of every framework operator slice (kind ``cpu_op``; schema ``OP_PRECISIONS``: slice id,
    ``precision``, ``precision_source``; module docstring)."""
    slices = tables.slices
    ops = slices.filter(pc.equal(slices["kind"], "cpu_op"))
    distinct = pc.unique(ops["input_dtypes"].drop_null()).to_pylist()
    by_dtypes = pa.table({"input_dtypes": pa.array(distinct, pa.string()),
                          "precision": pa.array([dtypes_precision(d) for d in distinct], pa.string())})
    tasks = computed(op_instances, tables)
    tasks = tasks.filter(pc.and_(pc.equal(tasks["category"], "device"), pc.equal(tasks["kind"], "kernel")))
    con = tables.connect()
    con.register("by_dtypes", by_dtypes)
    con.register("tasks", tasks.select(["name", "launch_op_id"]))
    return con.sql(_PRECISIONS_SQL, params={"max_depth": MAX_DEPTH}).to_arrow_table().cast(OP_PRECISIONS)
