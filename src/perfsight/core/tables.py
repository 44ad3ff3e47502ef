"""The canonical tables: every reader produces them, every analysis and export reads only them.

A run is six Arrow tables (docs/tables.md documents every column). Time is integer nanoseconds
since the Unix epoch wherever the source lets us know the epoch (Kineto's ``baseTimeNanoseconds``,
perfsight's own host samples), otherwise since the source's own origin; never floats.

This module owns the schemas, the small vocabularies used in the ``kind`` columns, the
``RunTables`` container (with its memo of analysis results, ``core.memo``) and the DuckDB connections over a
run's tables: a new one a caller may add views to (``RunTables.connect``), and the one per thread that
queries reuse (``RunTables.sql``).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

import pyarrow as pa

from perfsight.core.memo import Memo

# --- vocabularies -------------------------------------------------------------------------------

#: slices.kind values
SLICE_KINDS = (
    "cpu_op",        # framework operator (aten::*, user module ops)
    "python",        # Python function (with_stack / TORCH_CALL_STACK)
    "annotation",    # user range: record_function, perfsight.mark, msproftx
    "step",          # training step range (ProfilerStep#N)
    "dataloader",    # time spent fetching a batch from the data loader
    "runtime",       # runtime API call on the host (cudaLaunchKernel, aclrt*, ...)
    "driver",        # driver API call on the host (cuLaunchKernel, ...)
    "kernel",        # device compute kernel / task
    "comm",          # communication: NCCL/HCCL kernels, torch.distributed collectives
    "memcpy",        # device memory copy
    "memset",        # device memory set
    "sync",          # device synchronisation (cudaStreamSynchronize, cuda_sync events)
    "gpu_annotation",  # user range drawn on a device stream
    "other",
)

#: tracks.kind values
TRACK_KINDS = ("thread", "stream", "counter", "overlap")

#: flows.kind values
FLOW_KINDS = ("launch", "fwdbwd", "other")

#: counter series perfsight runs carry for every step the collector saw (profiled or not), one sample at the
#: step's end: its number (as ProfilerStep#N numbers it), its duration and its wait for the data loader
STEP_NUMBER_SERIES = "host.step_number"
STEP_TIME_SERIES = "host.step_time_ns"
DATA_WAIT_SERIES = "host.data_wait_ns"

#: the category of Kineto's trace spans (``PyTorch Profiler (0)``: the profiler's own capture windows, kept as
#: slices) and the process they sit on (``tracks.pid``), which is no process of the program
TRACE_SPAN_CATEGORY = "Trace"
TRACE_SPAN_PID = "Spans"
#: what the readers say in ``parse_warnings`` (``"<count> <text>"``) of slices whose duration or time they could
#: not keep as given (ingest/common/events.py); analysis/health.py counts duration overflows from them
NEGATIVE_DURATION_WARNING = "complete events with a negative dur (set to 0)"
LONG_DURATION_WARNING = "complete events lasting more than 2^50 ns (13 days) (skipped)"
BEYOND_CLOCK_WARNING = "events beyond +-2^62 ns (146 years) from the clock's zero (skipped)"
READER_DURATION_WARNINGS = (NEGATIVE_DURATION_WARNING, LONG_DURATION_WARNING, BEYOND_CLOCK_WARNING)

# --- schemas ------------------------------------------------------------------------------------

SLICES = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("name", pa.string(), nullable=False),
    pa.field("op_type", pa.string()),
    pa.field("task_type", pa.string()),
    pa.field("track_id", pa.int32(), nullable=False),
    pa.field("start_ns", pa.int64(), nullable=False),
    pa.field("dur_ns", pa.int64(), nullable=False),
    pa.field("depth", pa.int16()),
    pa.field("parent_id", pa.int64()),
    pa.field("step", pa.int32()),
    pa.field("correlation_id", pa.int64()),
    pa.field("external_id", pa.int64()),
    pa.field("input_shapes", pa.string()),
    pa.field("input_dtypes", pa.string()),
    pa.field("flops", pa.int64()),
    pa.field("bytes", pa.int64()),
    pa.field("args", pa.string()),
])

TRACKS = pa.schema([
    pa.field("track_id", pa.int32(), nullable=False),
    pa.field("rank", pa.int32()),
    pa.field("pid", pa.string()),
    pa.field("tid", pa.string()),
    pa.field("device", pa.string()),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("name", pa.string(), nullable=False),
    pa.field("sort_index", pa.int32()),
])

COUNTERS = pa.schema([
    pa.field("track_id", pa.int32(), nullable=False),
    pa.field("ts_ns", pa.int64(), nullable=False),
    pa.field("value", pa.float64()),
])

FLOWS = pa.schema([
    pa.field("src_id", pa.int64(), nullable=False),
    pa.field("dst_id", pa.int64(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
])

MEMORY = pa.schema([
    pa.field("ts_ns", pa.int64(), nullable=False),
    pa.field("addr", pa.int64()),
    pa.field("bytes", pa.int64(), nullable=False),
    pa.field("total_allocated", pa.int64()),
    pa.field("total_reserved", pa.int64()),
    pa.field("device", pa.string()),
    pa.field("track_id", pa.int32()),
    pa.field("op_slice_id", pa.int64()),
])

META = pa.schema([
    pa.field("key", pa.string(), nullable=False),
    pa.field("value", pa.string()),
])

SCHEMAS: dict[str, pa.Schema] = {
    "slices": SLICES,
    "tracks": TRACKS,
    "counters": COUNTERS,
    "flows": FLOWS,
    "memory": MEMORY,
    "meta": META,
}


def fits(value: int, bits: int) -> bool:
    """Whether ``value`` fits a signed ``bits``-bit column (the tables' int32 ranks, steps and sort indexes,
    their int64 times, sizes and ids): readers turn what does not into null instead of failing a table."""
    return -(1 << (bits - 1)) <= value < (1 << (bits - 1))


def empty(name: str) -> pa.Table:
    """An empty table with the canonical schema ``name``."""
    return SCHEMAS[name].empty_table()


def flows_table(src_ids, dst_ids, kind: str) -> pa.Table:
    """A canonical flows table of ``kind`` links from ``src_ids`` to ``dst_ids`` (arrays of slice ids)."""
    return conform("flows", pa.table({"src_id": src_ids, "dst_id": dst_ids,
                                      "kind": pa.array([kind] * len(src_ids), pa.string())}))


def conform(name: str, table: pa.Table) -> pa.Table:
    """Return ``table`` with exactly the canonical columns of ``name``, in order and type.

    Missing nullable columns are added as nulls; extra columns are an error (a reader bug).
    """
    schema = SCHEMAS[name]
    extra = set(table.column_names) - set(schema.names)
    if extra:
        raise ValueError(f"table {name!r} has non-canonical columns {sorted(extra)}")
    columns = []
    for f in schema:
        if f.name in table.column_names:
            columns.append(table.column(f.name).cast(f.type))
        elif f.nullable:
            columns.append(pa.nulls(table.num_rows, f.type))
        else:
            raise ValueError(f"table {name!r} lacks required column {f.name!r}")
    return pa.Table.from_arrays(columns, schema=schema)


@dataclass
class RunTables:
    """The six canonical tables of one run (all ranks of it), and the memo of what analyses computed from
    them (``core.memo.computed``): new tables (``dataclasses.replace``, ``with_meta``) start with an empty memo,
    and assigning one of the tables empties it."""

    slices: pa.Table = field(default_factory=lambda: empty("slices"))
    tracks: pa.Table = field(default_factory=lambda: empty("tracks"))
    counters: pa.Table = field(default_factory=lambda: empty("counters"))
    flows: pa.Table = field(default_factory=lambda: empty("flows"))
    memory: pa.Table = field(default_factory=lambda: empty("memory"))
    meta: pa.Table = field(default_factory=lambda: empty("meta"))
    memo: Memo = field(default_factory=Memo, init=False, compare=False, repr=False)
    _connections: _ThreadConnections = field(default_factory=lambda: _ThreadConnections(), init=False,
                                             compare=False, repr=False)

    def __setattr__(self, name: str, value) -> None:
        super().__setattr__(name, value)
        if name in SCHEMAS and "memo" in self.__dict__:      # results of the former table no longer hold
            self.memo.clear()
            self._connections.clear()

    def items(self):
        """(name, table) of the six tables."""
        return [(name, getattr(self, name)) for name in SCHEMAS]

    def meta_dict(self) -> dict[str, str]:
        return dict(zip(self.meta.column("key").to_pylist(), self.meta.column("value").to_pylist()))

    def with_meta(self, facts: dict[str, object]) -> RunTables:
        """The same tables with ``facts`` set in meta (replacing those keys; the other tables are shared)."""
        meta = {**self.meta_dict(), **facts}
        return replace(self, meta=meta_table(meta))

    def connect(self):
        """A new DuckDB connection (``new_connection``) with each table registered under its name (zero-copy),
        the caller's own: for registering more tables or creating views on (~3 ms, and the first query of each
        table on it ~4 ms more). Only to query the tables, use ``sql``."""
        con = new_connection()
        for name, table in self.items():
            con.register(name, table)
        return con

    def sql(self, query: str, params: dict | list | None = None):
        """The DuckDB relation of ``query`` (with ``params``) over the tables, on the main thread's connection
        to them, which every query of the main thread reuses (``connect``'s cost once, not per query; other
        threads get a new one per query: ``_ThreadConnections``): a query must not register tables or create
        anything on it (``connect`` gives a connection to add to). Fetch the relation on this thread."""
        return self._connections.get(self).sql(query, params=params or None)


class _ThreadConnections:
    """A ``RunTables``' connection for its queries in the main thread (``RunTables.sql``: the CLI, a cluster
    map's worker), dropped when one of its tables is assigned; any other thread gets a new connection per
    query. One kept in another thread (a web server's worker, a daemon) is destroyed while the interpreter
    tears that thread down, and DuckDB releasing its Arrow tables there aborts the process ("terminate
    called ... FATAL: exception not rethrown"). Pickled or copied tables start without any (a connection
    belongs to its process and its tables)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __reduce__(self):
        return _ThreadConnections, ()

    def get(self, tables: RunTables):
        """This thread's connection to ``tables`` (made on first use; a new one outside the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            return tables.connect()
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._local.con = tables.connect()
        return con

    def clear(self) -> None:
        """Forget every thread's connection (each is closed when no relation of it is left)."""
        self._local = threading.local()


_database = None
_database_lock = threading.Lock()


def new_connection():
    """A new DuckDB connection to this process's one in-memory database: a cursor of it costs ~0.05 ms
    where a database of its own costs ~15 ms (the first ~45 ms). Views registered on a connection stay its
    own; each thread should use connections of its own (DuckDB's rule), which these are."""
    global _database
    with _database_lock:
        if _database is None:
            import duckdb

            _database = duckdb.connect()
        return _database.cursor()


def next_id(column: pa.ChunkedArray | pa.Array) -> int:
    """One past the largest id in ``column`` (0 for an empty or all-null column): where new ids start."""
    import pyarrow.compute as pc

    top = pc.max(column).as_py() if len(column) else None
    return 0 if top is None else int(top) + 1


def meta_table(facts: dict[str, object]) -> pa.Table:
    """Build a meta table from a dict; non-string values are stored as JSON text."""
    import json

    keys, values = [], []
    for key, value in facts.items():
        keys.append(str(key))
        values.append(value if isinstance(value, str) or value is None else json.dumps(value))
    return pa.table({"key": keys, "value": values}, schema=META)
