"""Reading Ascend's CSV exports (torch_npu ASCEND_PROFILER_OUTPUT, msprof mindstudio_profiler_output,
MindSpore) by header name, whatever the dialect.

Owns: the alias table (``COLUMNS``: canonical column name -> every header it goes by in the known
dialects), reading a file with pyarrow (quoted fields spanning lines, every column as text), and the
conversions the readers share: exact integer nanoseconds from microsecond texts (Ascend writes them with
a trailing tab, ``"1736413971558972.912\\t"``, and they need 61 bits: never through float), numbers from
texts (``N/A`` and empty are null), sizes in KB or MB to bytes, shape/dtype lists to canonical JSON text,
and the columns without a canonical place to one JSON object per row (``row_json``, for ``args``); JSON
side files read or warned about (``read_json``).

``read_csv(path, warnings, required=...)`` returns a table whose known columns carry their canonical names;
a missing required column is an InputError naming the file, the column and the headers found; a missing
optional column is simply absent from the table; unknown columns are kept under their own header. A ragged
row (more or fewer fields than the header) costs that row only, described in ``warnings`` by line and fields
(``ragged_rows``); so does a row whose time or number column holds a text that is not one, or a time rounded
beyond ``TIME_ROUNDING_US`` (a spreadsheet's ``1.69512E+15``) (``number_rows``, which every reader calls on the
columns it converts, before ``ns_from_us``, ``numbers``, ``bytes_from``);
bytes that are not UTF-8 are read as U+FFFD, each line holding any named, and an empty file as no rows: the
one mechanism every Ascend and MindSpore CSV reader reads around damage with. JSON side files are parsed
within ``core/json_depth``'s bound, one nested too deeply warned about as one that is not JSON.
"""
from __future__ import annotations

import codecs
import csv
import io
import json
import re
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from perfsight.core.errors import InputError
from perfsight.core.files import UnreadableFile, open_regular, read_regular
from perfsight.core.json_depth import JsonTooDeep, loads_bounded
from perfsight.core.tables import new_connection
from perfsight.ingest.common.columns import counted, exact_ns, flat

#: canonical name -> the headers it is written as (first: torch_npu's current spelling)
COLUMNS: dict[str, tuple[str, ...]] = {
    "step": ("Step Id", "Step ID", "step_id", "Iteration ID", "step_num"),
    "model_id": ("Model ID", "model_id"),
    "task_id": ("Task ID", "task_id"),
    "stream_id": ("Stream ID", "stream_id"),
    "device_id": ("Device_id", "Device ID", "device_id"),
    "name": ("Name", "Op Name", "op_name", "name"),
    "op_type": ("Type", "OP Type", "Op Type", "op_type"),
    "op_state": ("OP State", "op_state"),
    "task_type": ("Accelerator Core", "Task Type", "task_type"),
    "start_us": ("Start Time(us)", "Task Start Time(us)", "start_time", "Start Time", "task_start(us)"),
    "duration_us": ("Duration(us)", "Task Duration(us)", "duration", "Duration", "task_time(us)"),
    "wait_us": ("Wait Time(us)", "Task Wait Time(us)", "wait_time"),
    "block_dim": ("Block Dim", "Block Num", "block_dim", "block_num"),
    "mix_block_dim": ("Mix Block Dim", "Mix Block Num", "mix_block_dim"),
    "input_shapes": ("Input Shapes", "input_shapes"),
    "input_dtypes": ("Input Data Types", "input_data_types"),
    "input_formats": ("Input Formats", "input_formats"),
    "output_shapes": ("Output Shapes", "output_shapes"),
    "output_dtypes": ("Output Data Types", "output_data_types"),
    "output_formats": ("Output Formats", "output_formats"),
    "context_id": ("Context ID", "context_id"),
    "timestamp_us": ("Timestamp(us)", "timestamp", "Time(us)", "timestamp(us)"),
    "total_allocated_mb": ("Total Allocated(MB)",),
    "total_reserved_mb": ("Total Reserved(MB)",),
    "total_active_mb": ("Total Active(MB)",),
    "total_allocated_kb": ("Total Allocated(KB)",),
    "total_reserved_kb": ("Total Reserved(KB)",),
    "device_type": ("Device Type", "Device", "device_type"),
    # msprof: task_time (kernel_* = the task; MindSpore's framework_raw: kernel_type = the op type), step_trace
    "kernel_name": ("kernel_name",),
    "kernel_type": ("kernel_type",),
    "fp_start_us": ("FP Start(us)",),
    "bp_end_us": ("BP End(us)",),
    "iteration_end_us": ("Iteration End(us)",),
    "iteration_time_us": ("Iteration Time(us)",),
    # msprof's npu_mem (KB); operator_memory's times
    "event": ("event", "Event"),
    "ddr_kb": ("ddr(KB)",),
    "hbm_kb": ("hbm(KB)",),
    "memory_kb": ("memory(KB)",),
    "allocation_us": ("Allocation Time(us)",),
    "release_us": ("Release Time(us)",),
    # MindSpore's flat profiler files (aicore_intermediate, framework_raw, flops; the sample's detail file
    # spells its first header full_kernel_time)
    "full_name": ("full_kernel_name", "full_op_name", "full_kernel_time"),
    "execution_ms": ("execution_time", "task_duration"),
    "count": ("Count", "execution_frequency"),
}

_NUMBER = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")
_NULLS = ["", "N/A", "NA", "n/a", "null", "None", "-"]
_HEADER_TO_NAME = {header: name for name, headers in COLUMNS.items() for header in headers}


def read_csv(path: Path, warnings: list[str] | None = None, *, required: Iterable[str] = (),
             first_rows_only: bool = False, canonical: bool = True) -> pa.Table:
    """The CSV at ``path`` with canonical column names (module docstring; ``canonical=False``: the file's
    own headers, stripped); every column is text. With ``first_rows_only``, only the rows of its first
    ``BLOCK_BYTES`` are read (enough to sniff a fact the rows share).

    What it reads around costs only what it holds, described in ``warnings`` (without ``warnings``, each is
    an InputError saying the same): a row with more or fewer fields than the header (a ragged row) is left
    out (``ragged_rows``: each row's line and its fields against the header's); bytes that are not UTF-8 are
    read as U+FFFD (each line holding any named); an empty file (no header, no rows) is read as no rows of
    the ``required`` columns."""
    path = Path(path)
    ragged: list[Any] = []

    def skip(row) -> str:
        ragged.append(row)
        return "skip"

    def read_around(described: str) -> None:
        if warnings is None:
            raise InputError(f"{path}: {described}")
        warnings.append(f"{path.name}: {described}")

    options = {"read_options": pacsv.ReadOptions(encoding="utf-8", use_threads=False),
               "parse_options": pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=skip),
               "convert_options": pacsv.ConvertOptions(column_types=_all_text(path), strings_can_be_null=True,
                                                       null_values=_NULLS)}
    try:
        data, undecodable = _utf8(path, first_rows_only)
        if undecodable:
            lines = _listed([f"line {n}" for n in undecodable[:RAGGED_SHOWN]], len(undecodable))
            read_around(f"{counted(len(undecodable), 'line')} with bytes that are not UTF-8, read with each "
                        f"replaced by U+FFFD: {lines}")
        table = pacsv.read_csv(path if data is None else pa.py_buffer(data), **options)
    except (OSError, pa.ArrowInvalid) as error:
        if _EMPTY not in str(error):
            raise InputError(f"{path}: not a readable CSV file ({error})") from None
        read_around("empty (no header, no rows): nothing read from it")
        return pa.table({name: pa.array([], pa.string()) for name in required})
    if ragged:
        read_around(ragged_rows(read_regular(path) if data is None else data,
                                [(row.text, row.actual_columns) for row in ragged], ragged[0].expected_columns))
    renamed = [_HEADER_TO_NAME.get(header.strip(), header.strip()) if canonical else header.strip()
               for header in table.column_names]
    missing = [name for name in required if name not in renamed]
    if missing:
        expected = "; ".join(f"{name} (as {' or '.join(repr(h) for h in COLUMNS.get(name, (name,)))})"
                             for name in missing)
        raise InputError(f"{path}: missing required column {expected}; the file's columns are "
                         f"{', '.join(table.column_names)}")
    return table.rename_columns(renamed)


#: how many ragged rows (or lines holding bytes that are not UTF-8) a warning names one by one
RAGGED_SHOWN = 5
#: what ``read_csv`` checks for UTF-8 at a time, and all it reads with ``first_rows_only``
BLOCK_BYTES = 1 << 20
#: pyarrow's error for a file without a header ("Empty CSV file", "... Empty CSV file or block: ...")
_EMPTY = "Empty CSV file"
#: a run of non-ASCII bytes: UTF-8's multi-byte characters are made of them only, so each run decodes alone
_NON_ASCII = re.compile(rb"[\x80-\xff]+")


def _utf8(path: Path, first_rows_only: bool) -> tuple[bytes | None, list[int]]:
    """What ``read_csv`` parses: None (the file itself) when it is UTF-8, checked a block at a time, else its
    bytes with each byte that is not UTF-8 replaced by U+FFFD; and the lines (1-based) that held such bytes.
    With ``first_rows_only``, its first ``BLOCK_BYTES`` cut after their last whole line, always."""
    with open_regular(path) as file:
        if first_rows_only:
            data = file.read(BLOCK_BYTES)
            data = data[:data.rfind(b"\n") + 1] if file.read(1) else data
        else:
            decoder = codecs.getincrementaldecoder("utf-8")()
            try:
                while block := file.read(BLOCK_BYTES):
                    decoder.decode(block)
                decoder.decode(b"", final=True)
                return None, []
            except UnicodeDecodeError:
                file.seek(0)
                data = file.read()
    lines: list[int] = []
    line, counted_to = 1, 0
    for run in _NON_ASCII.finditer(data):
        try:
            run.group().decode("utf-8")
        except UnicodeDecodeError:
            line += data.count(b"\n", counted_to, run.start())
            counted_to = run.start()
            lines += [line] if not lines or lines[-1] != line else []
    return (data.decode("utf-8", "replace").encode("utf-8") if lines else data), lines


def ragged_rows(data: bytes, rows: list[tuple[str, int]], expected: int) -> str:
    """What ragged rows (``(text, fields)`` pairs, in file order) of the CSV text ``data`` cost, naming the
    first ``RAGGED_SHOWN`` by line: ``2 rows not read: line 57 has 31 fields, line 90 has 33 fields (the header
    has 32)``. A row's line is found by its text in ``data`` (pyarrow counts records, not lines, when fields
    span lines)."""
    lines, offset = [], 0
    for text, _ in rows[:RAGGED_SHOWN]:
        found = data.find(b"\n" + text.encode("utf-8"), offset)     # a row starts a line (the header is first)
        lines.append(data.count(b"\n", 0, found) + 2 if found >= 0 else None)
        offset = found + 1 if found >= 0 else offset
    shown = [f"{f'line {line}' if line else 'a row'} has {fields} fields" for line, (_, fields) in zip(lines, rows)]
    return f"{_not_read(len(rows), shown)} (the header has {expected})"


def _not_read(n: int, shown: list[str]) -> str:
    """``3 rows not read: <the first RAGGED_SHOWN described> and 1 more``: what rows read around cost."""
    return f"{counted(n, 'row')} not read: {_listed(shown, n)}"


def _listed(shown: list[str], n: int) -> str:
    """The first ``RAGGED_SHOWN`` of ``n`` things read around, described, and how many more: ``line 6, line 9
    and 1 more``."""
    more = f" and {n - len(shown)} more" if n > len(shown) else ""
    return f"{', '.join(shown)}{more}"


def _all_text(path: Path) -> dict[str, pa.DataType]:
    """Every column of the file read as text."""
    return {name: pa.string() for name in _header(path)}


def _header(path: Path) -> list[str]:
    """The file's header line, parsed as CSV."""
    try:
        with io.TextIOWrapper(open_regular(path), encoding="utf-8", errors="replace", newline="") as file:
            header = file.readline()
    except UnreadableFile:
        raise
    except OSError as error:
        raise InputError(f"{path}: cannot read the file ({error.strerror or error})") from None
    return next(csv.reader([header]), [])


def ns_from_us(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Microsecond texts (``"1736413971558972.912\\t"``) -> exact int64 ns; null stays null. The texts are those
    ``number_rows`` kept (a text that is not a time costs its row there)."""
    return exact_ns(_number_texts(column))[0]


def number_rows(table: pa.Table, path: Path, warnings: list[str], *, times: Iterable[str] = (),
                numbers: Iterable[str] = ()) -> pa.Table:
    """``table`` (as ``read_csv`` returned it) without the rows whose ``times`` columns (microseconds) or
    ``numbers`` columns hold a text that is not a number (or a time beyond int64 ns, or one rounded beyond
    ``TIME_ROUNDING_US``); columns the file lacks
    are ignored, null (empty, ``N/A``) is no damage. Each such row costs that row only, described in
    ``warnings`` as ragged rows are (``kernel_details.csv: 1 row not read: line 9: Start Time(us) 'abc' is
    not a number``): the one check every Ascend and MindSpore CSV reader reads its numeric columns through."""
    checked = [(name, True) for name in times] + [(name, False) for name in numbers]
    bad_rows: dict[int, str] = {}
    for name, is_time in checked:
        if name not in table.column_names:
            continue
        texts = pc.utf8_trim_whitespace(flat(table[name]))
        usable = _number_texts(texts)
        bad = pc.and_(pc.is_valid(texts), pc.is_null(exact_ns(usable)[0] if is_time else usable))
        for row in np.flatnonzero(bad.to_numpy(zero_copy_only=False)).tolist():
            bad_rows.setdefault(row, _bad_value(table, path, name, texts[row].as_py(), is_time))
        if is_time:
            for row, text in _rounded_times(usable):
                bad_rows.setdefault(row, f"{_header(path)[table.column_names.index(name)].strip()} {text!r} is "
                                         f"a time rounded to {_precision_us(text):g} us: not a time of day")
    if not bad_rows:
        return table
    rows = sorted(bad_rows)
    lines = _record_lines(path, rows[:RAGGED_SHOWN], table.num_columns)
    shown = [f"{f'line {line}' if line else 'a row'}: {bad_rows[row]}" for line, row in zip(lines, rows)]
    warnings.append(f"{path.name}: {_not_read(len(rows), shown)}")
    keep = np.ones(table.num_rows, dtype=bool)
    keep[rows] = False
    return table.filter(pa.array(keep))


#: the coarsest rounding a time in microseconds may carry and still place an event (a spreadsheet's
#: ``1.69512E+15`` keeps 6 significant digits: rounded to 10^10 us, about 3 hours)
TIME_ROUNDING_US = 1000
_EXPONENT_FORM = re.compile(r"^[-+]?(\d*)(?:\.(\d*))?[eE]([-+]?\d+)$")


def _precision_us(text: str) -> float:
    """The rounding of a time written with an exponent: 10 ** (exponent - digits after the point)."""
    found = _EXPONENT_FORM.match(text)
    return 10.0 ** (int(found.group(3)) - len(found.group(2) or "")) if found else 1.0


def _rounded_times(texts: pa.Array) -> list[tuple[int, str]]:
    """The (row, text) of the times in exponent form rounded beyond ``TIME_ROUNDING_US``."""
    written = pc.match_substring_regex(texts, "[eE]")
    rows = np.flatnonzero(pc.fill_null(written, False).to_numpy(zero_copy_only=False)).tolist()
    return [(row, text) for row in rows if _precision_us(text := texts[row].as_py()) > TIME_ROUNDING_US]


def _bad_value(table: pa.Table, path: Path, name: str, text: str, is_time: bool) -> str:
    """``Start Time(us) 'abc' is not a number`` (the file's own header for the column)."""
    header = _header(path)[table.column_names.index(name)].strip()
    beyond = is_time and _NUMBER.match(text)
    return f"{header} {text!r} is {'beyond the times perfsight holds (int64 ns)' if beyond else 'not a number'}"


def _record_lines(path: Path, rows: list[int], fields: int) -> list[int | None]:
    """The line each of ``rows`` (positions among the records ``read_csv`` kept, ascending) starts on: the
    file's records counted as pyarrow reads them (blank lines and ragged rows are not records)."""
    lines: dict[int, int] = {}
    wanted, record = set(rows), 0
    with io.TextIOWrapper(open_regular(path), encoding="utf-8", errors="replace", newline="") as file:
        reader = csv.reader(file)
        next(reader, None)
        end = reader.line_num
        for values in reader:
            start, end = end + 1, reader.line_num
            if len(values) != fields:
                continue
            if record in wanted:
                lines[record] = start
                if len(lines) == len(wanted):
                    break
            record += 1
    return [lines.get(row) for row in rows]


def numbers(column: pa.Array | pa.ChunkedArray, type: pa.DataType = pa.float64()) -> pa.Array:
    """Number texts -> ``type``; texts that are not numbers (``N/A``, ``-``) become null."""
    cleaned = _number_texts(column)
    if pa.types.is_integer(type):
        try:
            return cleaned.cast(type)  # integer texts exactly (beyond float64's 53 bits)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return cleaned.cast(pa.float64()).cast(type)
    return cleaned.cast(type)


def _number_texts(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The texts of ``column`` that are numbers, trimmed; null for the others."""
    text = pc.utf8_trim_whitespace(flat(column))
    usable = pc.match_substring_regex(text, _NUMBER.pattern)
    return pc.if_else(pc.fill_null(usable, False), text, pa.scalar(None, pa.string()))


_UNIT_BYTES = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}


def bytes_from(column: pa.Array | pa.ChunkedArray, unit: str) -> pa.Array:
    """Sizes in ``unit`` (B, KB, MB, GB; binary multiples, as Ascend's tools use) -> int64 bytes, rounded."""
    factor = _UNIT_BYTES[unit.upper()]
    values = numbers(column, pa.float64())
    return pc.round(pc.multiply(values, float(factor))).cast(pa.int64())


def row_json(table: pa.Table) -> pa.Array:
    """Each row of ``table`` as a JSON object text (column name -> value; for the ``args`` of the columns
    that have no canonical place); null when the table has no columns."""
    if not table.num_columns:
        return pa.nulls(table.num_rows, pa.string())

    con = new_connection()
    con.register("row_values", table)
    return con.sql("SELECT to_json(row_values) FROM row_values").to_arrow_table().column(0).combine_chunks()


def shapes_json(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Ascend shape texts (``"32,3,224,224;64"``: inputs split by ``;``, dims by ``,``, often quoted) -> the
    canonical JSON text ``[[32, 3, 224, 224], [64]]``; null and empty stay null."""
    return _per_distinct(column, lambda text: json.dumps([[_dim(d) for d in shape.split(",") if d.strip()]
                                                          for shape in text.strip().strip('"').split(";")]))


def dtypes_json(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Ascend dtype texts (``FLOAT;INT64``) -> the canonical JSON text ``["FLOAT", "INT64"]``."""
    return _per_distinct(column, lambda text: json.dumps([t.strip() for t in text.strip().strip('"').split(";")]))


def _dim(text: str) -> int | str:
    text = text.strip().strip('"')
    return int(text) if re.fullmatch(r"-?\d+", text) else text


def _per_distinct(column: pa.Array | pa.ChunkedArray, convert) -> pa.Array:
    encoded = flat(column).dictionary_encode()
    values = [None if not text or not text.strip().strip('"') else convert(text)
              for text in encoded.dictionary.to_pylist()]
    return pa.array(values, pa.string()).take(encoded.indices)


def read_json(path: Path, warnings: list[str], consequence: str, *, parse_float=None):
    """The JSON document in ``path`` (``parse_float`` as json.loads takes it: ``Decimal`` for exact
    times); None when it cannot be read or parsed, with the warning ``<file>: not readable JSON (<why>);
    <consequence>``, or nests too deeply (``core/json_depth``), with the warning ``<file>: JSON nested <N>
    levels deep ...; <consequence>``."""
    try:
        return loads_bounded(read_regular(path), path.name, parse_float=parse_float)
    except JsonTooDeep as error:
        warnings.append(f"{error}; {consequence}")
    except (OSError, ValueError) as error:
        warnings.append(f"{path.name}: not readable JSON ({error}); {consequence}")
    return None


def json_object(text: str | None) -> dict:
    """An args-style JSON text as a dict; {} for null, malformed JSON, JSON nested too deeply
    (``core/json_depth``) or a JSON value that is not an object."""
    try:
        value = loads_bounded(text, "args") if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
