"""Building Arrow columns from lists of decoded values, without per-row Python where it can be avoided.

Owns: raw JSON text to a string column (one join plus offsets), exact conversion of microseconds (ints
or decimal texts) to integer nanoseconds, and tolerant int/str columns that turn values of the wrong type
into nulls (ints and times count them, so the reader can report them) instead of failing the column;
plus small helpers for chunked columns, row lookups and the counts the readers' warnings give.
"""
from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.tables import fits

_THOUSAND = pa.scalar(Decimal(1000), pa.decimal128(4, 0))
# typed scalars for compute calls: a plain Python number is converted by type inference on every call,
# which costs pyarrow a failing import attempt (dateutil) each time
ZERO = pa.scalar(0, pa.int64())
_NS_PER_US = pa.scalar(1000, pa.int64())
_MICROS_WITH_NS = pa.decimal128(20, 3)  # up to 10^17 us (3,000 years) with ns digits
_MAX_INT32_OFFSET = (1 << 31) - 1


def flat(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous array (table columns are chunked)."""
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def dictionary(column: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray:
    """``column`` dictionary-encoded into one array (encoding chunk by chunk is cheaper than combining)."""
    return flat(column.dictionary_encode())


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
    integers = _integers(values)
    return _texts(values) if integers is None else integers.cast(pa.string())


def _texts(values: list) -> pa.Array:
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([value if value is None or type(value) is str else str(value) for value in values],
                     pa.string())


def micros_to_ns(values: list) -> tuple[pa.Array, int]:
    """Microsecond values (ints, or exact decimal texts) -> int64 ns and the count of non-numbers (nulls)."""
    integers = _integers(values)
    if integers is not None:
        try:
            return pc.multiply_checked(integers, _NS_PER_US), 0
        except pa.ArrowInvalid:  # beyond int64 nanoseconds: let the exact path report them
            pass
    return exact_ns(_texts(values))


_INT_OR_NONE = frozenset((int, type(None)))


def _integers(values: list) -> pa.Array | None:
    """``values`` as int64 if they are all ints or None, else None. The types are checked first: pyarrow
    would truncate floats into an int64 column, and inferring the type costs a failing import per call."""
    if not _INT_OR_NONE.issuperset(map(type, values)):
        return None
    try:
        return pa.array(values, pa.int64())
    except OverflowError:            # beyond int64
        return None


def exact_ns(plain: pa.Array) -> tuple[pa.Array, int]:
    """Decimal microsecond texts (``1.5``, ``4441817884623.376``, ``1e3``) -> int64 nanoseconds, exactly.

    Returns the column and how many non-null texts were not numbers (they become null). Values with
    more than three decimals are rounded half-to-even to the nanosecond.
    """
    try:
        return pc.multiply(plain.cast(_MICROS_WITH_NS), _THOUSAND).cast(pa.int64()), 0
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):   # not all decimals of 3 places, or beyond int64 ns
        return _exact_ns_slow(plain)


def _exact_ns_slow(plain: pa.Array) -> tuple[pa.Array, int]:
    values, invalid = [], 0
    for text in plain.to_pylist():
        value = None if text is None else _decimal_ns(text)
        invalid += text is not None and value is None
        values.append(value)
    return pa.array(values, pa.int64()), invalid


def _decimal_ns(text: str) -> int | None:
    try:
        value = int((Decimal(text) * 1000).to_integral_value(ROUND_HALF_EVEN))
    except (InvalidOperation, ValueError, OverflowError):
        return None
    return value if fits(value, 64) else None


def int_column(values: list) -> tuple[pa.Array, int]:
    """Python ints/None -> int64; integral floats are accepted, anything else becomes null (counted)."""
    if values.count(None) == len(values):  # an args key the trace does not have (flops, 2021's "external id")
        return pa.nulls(len(values), pa.int64()), 0
    integers = _integers(values)
    if integers is not None:
        return integers, 0
    cleaned = [_as_int(value) for value in values]
    invalid = sum(1 for value, clean in zip(values, cleaned) if value is not None and clean is None)
    return pa.array(cleaned, pa.int64()), invalid


def _as_int(value) -> int | None:
    if type(value) is int and fits(value, 64):
        return value
    if type(value) is float and value.is_integer() and abs(value) < 2.0 ** 63:
        return int(value)
    return None


def text_column(values: list) -> pa.Array:
    """Python strs/None -> string; values of any other type become null."""
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([value if isinstance(value, str) else None for value in values], pa.string())


def counted(n: int, noun: str) -> str:
    """``1 row``, ``3 rows``: a count and its noun, as the readers' warnings say what they read around."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
