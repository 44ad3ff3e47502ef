"""Reading the tables of a torch_npu profiler database (``ascend_pytorch_profiler_{rank}.db``) into Arrow.

Owns: opening the SQLite file strictly read-only (``mode=ro``, and ``immutable=1`` unless a ``-wal`` file
lies beside it: profiler output is finished, and often sits in a read-only directory where SQLite could
not create its lock files), telling a file that is not SQLite, which tables and columns perfsight needs
(``REQUIRED_COLUMNS``), and turning a table into an Arrow table of chosen columns with chosen types.

Every error is an InputError naming the file, and the table and column concerned; a row holding a value
its column's type cannot take costs that row only (left out, counted in ``Database.warnings`` by table and
column). A table that exists but is empty is simply an empty Arrow table; a table perfsight can do
without may be absent (``Database.has``). Times and ids stay int64 (the database's integers, never through
float); columns stored as text (PYTORCH_API's ``startNs``/``endNs``) are converted by SQLite's own exact
integer CAST.
"""
from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pyarrow as pa

from perfsight.core.errors import InputError
from perfsight.ingest.common.columns import counted

#: the columns perfsight reads from each table, when the table is present
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "STRING_IDS": ("id", "value"),
    "PYTORCH_API": ("startNs", "endNs", "globalTid", "name"),
    "CANN_API": ("startNs", "endNs", "globalTid", "connectionId", "name"),
    "TASK": ("startNs", "endNs", "deviceId", "connectionId", "globalTaskId", "taskType", "streamId"),
    "COMPUTE_TASK_INFO": ("globalTaskId", "name", "taskType", "opType"),
    "COMMUNICATION_OP": ("opName", "startNs", "endNs", "connectionId", "groupName", "opId"),
    "COMMUNICATION_TASK_INFO": ("globalTaskId", "name", "opId"),
    "CONNECTION_IDS": ("id", "connectionId"),
    "OP_MEMORY": ("name", "size", "allocationTime"),
    "MEMORY_RECORD": ("component", "timestamp", "totalAllocated", "totalReserved"),
}
#: tables without which a database is not a torch_npu profile
REQUIRED_TABLES = ("STRING_IDS",)
#: at least one of these must be present: the profile's timed data
DATA_TABLES = ("PYTORCH_API", "CANN_API", "TASK")
BATCH_ROWS = 65536


def connect_read_only(path: Path) -> sqlite3.Connection:
    """``path`` opened read-only: ``immutable=1`` skips locking (no files created beside it), not with a
    ``-wal`` file, whose pages it would miss. Raises sqlite3.DatabaseError."""
    immutable = "" if path.with_name(path.name + "-wal").exists() else "&immutable=1"
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro{immutable}", uri=True)


class Database:
    """One profiler database, open read-only; use as a context manager or call ``close``. ``warnings``
    collects what ``read`` read around (rows holding a value not of its column's type)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.warnings: list[str] = []
        if self.path.is_file() and self.path.stat().st_size == 0:      # SQLite takes it for a database without tables
            raise InputError(f"{self.path}: an empty file (0 bytes); expected a profiler database "
                             "(ascend_pytorch_profiler_{rank}.db, msprof_{N}.db)")
        try:
            self._con = connect_read_only(self.path)
            self._tables = {name for (name,) in self._con.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        except sqlite3.DatabaseError as error:
            raise InputError(f"{self.path}: not a readable SQLite database ({error})") from None
        missing = [name for name in REQUIRED_TABLES if name not in self._tables]
        if missing:
            self.close()
            raise InputError(f"{self.path}: lacks the required table {missing[0]}; a torch_npu profiler database "
                             f"(ascend_pytorch_profiler_{{rank}}.db) has it")
        if not any(name in self._tables for name in DATA_TABLES):
            self.close()
            raise InputError(f"{self.path}: lacks the required table PYTORCH_API, CANN_API or TASK; it holds "
                             f"{', '.join(sorted(self._tables)) or 'no tables'}")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._con.close()

    def has(self, table: str) -> bool:
        return table in self._tables

    def columns(self, table: str) -> set[str]:
        return {row[1] for row in self._query(f'PRAGMA table_info("{table}")', table)}

    def read(self, table: str, columns: dict[str, tuple[str, pa.DataType]]) -> pa.Table:
        """``SELECT`` the given columns (output name -> (SQL expression, Arrow type)) from ``table``, in
        batches of ``BATCH_ROWS`` rows (the rows' Python tuples live one batch at a time).

        An expression that is a bare column name the table lacks reads as nulls unless the column is in
        ``REQUIRED_COLUMNS`` (then: InputError naming the table and the column). An absent table reads
        as an empty table."""
        schema = pa.schema([(name, type_) for name, (_, type_) in columns.items()])
        if not self.has(table):
            return schema.empty_table()
        present = self.columns(table)
        missing = [column for column in REQUIRED_COLUMNS.get(table, ()) if column not in present]
        if missing:
            raise InputError(f"{self.path}: table {table} lacks the required column {missing[0]}; its columns "
                             f"are {', '.join(sorted(present))}")
        selected = [expression if not expression.isidentifier() or expression in present else "NULL"
                    for expression, _ in columns.values()]
        batches, bad = [], Counter[str]()
        try:
            cursor = self._con.execute(f'SELECT {", ".join(selected)} FROM "{table}"')
            while rows := cursor.fetchmany(BATCH_ROWS):
                batches.append(_batch(rows, schema, bad))
        except sqlite3.DatabaseError as error:
            raise InputError(f"{self.path}: cannot read table {table} ({error})") from None
        if bad:
            described = ", ".join(f"{n} in {columns[name][0]}" for name, n in sorted(bad.items()))
            self.warnings.append(f"{self.path.name}: table {table}: {counted(sum(bad.values()), 'row')} not read, "
                                 f"holding a value not of its column's type ({described})")
        return pa.Table.from_batches(batches, schema=schema)

    def rows(self, sql: str, table: str) -> list[tuple]:
        """The rows of a small query (META_DATA, RANK_DEVICE_MAP, enum tables)."""
        return self._query(sql, table) if self.has(table) else []

    def _query(self, sql: str, table: str) -> list[tuple]:
        try:
            return self._con.execute(sql).fetchall()
        except sqlite3.DatabaseError as error:
            raise InputError(f"{self.path}: cannot read table {table} ({error})") from None


def _batch(rows: list[tuple], schema: pa.Schema, bad: Counter[str]) -> pa.RecordBatch:
    """The rows as a record batch of ``schema``; a row holding a value its column's type cannot take (text in
    an integer column, an integer beyond 64 bits) is left out and counted in ``bad`` under its first such
    column."""
    columns = list(zip(*rows))
    try:
        return pa.record_batch([pa.array(column, type_) for column, type_ in zip(columns, schema.types)],
                               schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    keep = [True] * len(rows)
    for name, column, type_ in zip(schema.names, columns, schema.types):
        for row, value in enumerate(column):
            if keep[row] and not _fits(value, type_):
                keep[row] = False
                bad[name] += 1
    kept = [row for row, ok in zip(rows, keep) if ok]
    return pa.record_batch([pa.array(column, type_) for column, type_ in zip(zip(*kept), schema.types)]
                           if kept else [pa.array([], type_) for type_ in schema.types], schema=schema)


def _fits(value, type_: pa.DataType) -> bool:
    try:
        pa.array([value], type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return False
    return True
