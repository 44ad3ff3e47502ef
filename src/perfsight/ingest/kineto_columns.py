"""Building Arrow columns from lists of decoded values, without per-row Python where it can be avoided.

Owns: raw JSON text to a string column (zero-copy join + offsets), exact conversion of decimal
microsecond text to integer nanoseconds, and tolerant int/float/str columns that turn values of the
wrong type into nulls (counted, so the reader can report them) instead of failing the whole column.
"""
from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_THOUSAND = pa.scalar(Decimal(1000), pa.decimal128(4, 0))
_MICROS_WITH_NS = pa.decimal128(20, 3)  # up to 10^17 us (3,000 years) with ns digits
_MAX_INT32_OFFSET = (1 << 31) - 1


def flat(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous array (table columns are chunked)."""
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def raw_text_column(raws: Sequence) -> pa.Array:
    """A string column of buffer-like JSON texts (msgspec.Raw, bytes); empty texts become null."""
    lengths = np.array(list(map(len, raws)), dtype=np.int64)
    offsets = np.zeros(len(raws) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    large = offsets[-1] > _MAX_INT32_OFFSET
    validity = pa.py_buffer(np.packbits(lengths > 0, bitorder="little"))
    column = pa.Array.from_buffers(
        pa.large_string() if large else pa.string(), len(raws),
        [validity, pa.py_buffer(offsets if large else offsets.astype(np.int32)), pa.py_buffer(b"".join(raws))])
    try:
        column.validate(full=True)
    except pa.ArrowInvalid:  # invalid UTF-8 inside a JSON string: replace it rather than fail
        column = pa.array([bytes(raw).decode("utf-8", "replace") or None for raw in raws], pa.string())
    return column


def scalar_text(values: list) -> pa.Array:
    """JSON scalars as decoded (str, int, float text from ``float_hook=str``, None) -> their text."""
    for kind in (pa.string(), pa.int64()):
        try:
            return pa.array(values, kind).cast(pa.string())
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            continue
    return pa.array([value if value is None or type(value) is str else str(value) for value in values], pa.string())


def micros_to_ns(values: list) -> tuple[pa.Array, int]:
    """Microsecond values (ints, or exact decimal texts) -> int64 ns and the count of non-numbers (nulls)."""
    try:
        return pc.multiply_checked(pa.array(values, pa.int64()), 1000), 0
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return exact_ns(scalar_text(values))


def exact_ns(plain: pa.Array) -> tuple[pa.Array, int]:
    """Decimal microsecond texts (``1.5``, ``4441817884623.376``, ``1e3``) -> int64 nanoseconds, exactly.

    Returns the column and how many non-null texts were not numbers (they become null). Values with
    more than three decimals are rounded half-to-even to the nanosecond.
    """
    try:
        micros = plain.cast(_MICROS_WITH_NS)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _exact_ns_slow(plain)
    return pc.multiply(micros, _THOUSAND).cast(pa.int64()), 0


def _exact_ns_slow(plain: pa.Array) -> tuple[pa.Array, int]:
    values, invalid = [], 0
    for text in plain.to_pylist():
        if text is None:
            values.append(None)
            continue
        try:
            values.append(int((Decimal(text) * 1000).to_integral_value(ROUND_HALF_EVEN)))
        except (InvalidOperation, ValueError, OverflowError):
            values.append(None)
            invalid += 1
    return pa.array(values, pa.int64()), invalid


def int_column(values: list) -> tuple[pa.Array, int]:
    """Python ints/None -> int64; integral floats are accepted, anything else becomes null (counted)."""
    try:
        return pa.array(values, pa.int64()), 0
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        cleaned = [_as_int(value) for value in values]
        invalid = sum(1 for value, clean in zip(values, cleaned) if value is not None and clean is None)
        return pa.array(cleaned, pa.int64()), invalid


def _as_int(value) -> int | None:
    if type(value) is int and -(1 << 63) <= value < (1 << 63):
        return value
    if type(value) is float and value.is_integer() and abs(value) < 2.0 ** 63:
        return int(value)
    return None


def text_column(values: list) -> tuple[pa.Array, int]:
    """Python strs/None -> string; anything else becomes null (counted)."""
    try:
        return pa.array(values, pa.string()), 0
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        cleaned = [value if isinstance(value, str) else None for value in values]
        invalid = sum(1 for value, clean in zip(values, cleaned) if value is not None and clean is None)
        return pa.array(cleaned, pa.string()), invalid
