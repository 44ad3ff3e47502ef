"""Memory of a torch_npu profiler database: the canonical ``memory`` records and the memory and frequency
counter series, named as the text reader (torch_npu_memory, torch_npu_trace) names the same data.

* ``memory``: MEMORY_RECORD's records of the framework's allocator (component ``PTA``, torch_npu's PyTorch
  adapter; ``MindSpore`` / ``MS`` for MindSpore; every row when no component is one of those), in
  database order: ``ts_ns``, ``total_allocated`` / ``total_reserved`` after the record, ``bytes`` = the
  change of ``total_allocated`` since the previous record (the first: 0), ``device`` ``npu:N``; no address
  is recorded (``addr`` null). The operator (``op_slice_id``, found by torch_npu_links.memory_operators as
  for the text export): among the framework operators (``cpu_op``) enclosing the record's time on the host
  threads, the nearest one named as OP_MEMORY names the tensor allocated or released at exactly that time,
  else the innermost (the thread with the steps first); ``track_id`` is that operator's thread, else the
  main thread.
* counters: MEMORY_RECORD's other components (``npu.memory.{component}.allocated_bytes``,
  ``.reserved_bytes``, ``.active_bytes``), NPU_MODULE_MEM (``npu.module_memory.{module}.reserved_bytes``,
  modules named by ENUM_MODULE), NPU_MEM (``APP/HBM bytes``, ``APP/DDR bytes``, ``APP/Memory bytes`` = both,
  the same for ``Device``) and AICORE_FREQ (``AI Core Freq MHz``). The other sampled hardware tables (HBM
  and LLC bandwidth, ACC_PMU, SOC_BANDWIDTH_LEVEL, QoS) are not read.
"""
from __future__ import annotations

import duckdb
import pyarrow as pa

from perfsight.ingest.ascend.torch_npu_db_host import INT, enum_table, numbered
from perfsight.ingest.ascend.torch_npu_db_source import Database

ALLOCATOR_COMPONENTS = ("PTA", "MindSpore", "MS")

_MEMORY_SQL = """
WITH allocator AS (
    SELECT r.* FROM memory_record r LEFT JOIN strings c ON c.id = r.component_id
    WHERE $allocator IS NULL OR c.value = $allocator
), tensor_times AS (
    SELECT ts_ns, arg_min(s.value, m.row) AS op_name FROM (
        SELECT row, name, allocation_time AS ts_ns FROM op_memory UNION ALL
        SELECT row, name, release_time FROM op_memory WHERE release_time IS NOT NULL) m
    JOIN strings s ON s.id = m.name GROUP BY ts_ns
)
SELECT a.ts_ns, coalesce(a.allocated - lag(a.allocated) OVER (ORDER BY a.row), 0) AS bytes,
       a.allocated AS total_allocated, a.reserved AS total_reserved, 'npu:' || coalesce(a.device, $device) AS device,
       t.op_name
FROM allocator a LEFT JOIN tensor_times t USING (ts_ns)
ORDER BY a.row
"""

_COUNTERS_SQL = """
SELECT device, 'npu.memory.' || coalesce(c.value, 'unknown') || '.' || metric || '_bytes' AS series, ts_ns, m.value
FROM (UNPIVOT memory_record ON allocated, reserved, active INTO NAME metric VALUE value) m
LEFT JOIN strings c ON c.id = m.component_id
WHERE $allocator IS NOT NULL AND c.value IS DISTINCT FROM $allocator AND m.value IS NOT NULL
UNION ALL
SELECT device, 'npu.module_memory.' || coalesce(e.name, module::VARCHAR) || '.reserved_bytes', ts_ns, reserved
FROM module_memory LEFT JOIN modules e ON e.id = module
UNION ALL
SELECT device, label || '/' || metric || ' bytes', ts_ns, value FROM (
    SELECT n.device, n.ts_ns, n.hbm, n.ddr, n.hbm + n.ddr AS memory,
           CASE lower(t.value) WHEN 'app' THEN 'APP' WHEN 'device' THEN 'Device' ELSE coalesce(t.value, '?') END
               AS label
    FROM npu_mem n LEFT JOIN strings t ON t.id = n.type
) UNPIVOT (value FOR metric IN (hbm AS 'HBM', ddr AS 'DDR', memory AS 'Memory'))
UNION ALL
SELECT device, 'AI Core Freq MHz', ts_ns, freq FROM aicore_freq
"""


def read_memory(db: Database, con: duckdb.DuckDBPyConnection, device: int) -> pa.Table:
    """The allocator's records in database order: ``ts_ns``, ``bytes``, ``total_allocated``,
    ``total_reserved``, ``device`` and ``op_name`` (OP_MEMORY's tensor allocated or released at exactly that
    time), for torch_npu_links.memory_operators to find the operator. ``con`` has ``strings`` and
    MEMORY_RECORD (from ``read_counters``) registered; ``device`` is used where a row names none."""
    con.register("op_memory", numbered(db.read("OP_MEMORY", {
        "name": ("name", INT), "allocation_time": ("allocationTime", INT), "release_time": ("releaseTime", INT)})))
    return con.sql(_MEMORY_SQL, params={"device": device, "allocator": _allocator(con)}).to_arrow_table()


def read_counters(db: Database, con: duckdb.DuckDBPyConnection, device: int) -> pa.Table:
    """Counter samples: ``device`` (index), ``series``, ``ts_ns``, ``value``; ``con`` has ``strings``.
    Registers MEMORY_RECORD as ``memory_record`` for ``read_memory``."""
    number = pa.float64()
    con.register("memory_record", numbered(db.read("MEMORY_RECORD", {
        "component_id": ("component", INT), "ts_ns": ("timestamp", INT), "allocated": ("totalAllocated", INT),
        "reserved": ("totalReserved", INT), "active": ("totalActive", INT), "device": ("deviceId", INT)})))
    con.register("module_memory", db.read("NPU_MODULE_MEM", {
        "module": ("moduleId", INT), "ts_ns": ("timestampNs", INT), "reserved": ("totalReserved", number),
        "device": ("deviceId", INT)}))
    con.register("modules", enum_table(db, "ENUM_MODULE"))
    con.register("npu_mem", db.read("NPU_MEM", {
        "type": ("type", INT), "ddr": ("ddr", number), "hbm": ("hbm", number),
        "ts_ns": ("CAST(timestampNs AS INTEGER)", INT), "device": ("deviceId", INT)}))
    con.register("aicore_freq", db.read("AICORE_FREQ", {
        "device": ("deviceId", INT), "ts_ns": ("CAST(timestampNs AS INTEGER)", INT), "freq": ("freq", number)}))
    samples = con.sql(_COUNTERS_SQL, params={"allocator": _allocator(con)}).to_arrow_table()
    filled = samples["device"].fill_null(device)
    return samples.set_column(0, "device", filled).filter(samples["ts_ns"].is_valid())


def _allocator(con: duckdb.DuckDBPyConnection) -> str | None:
    """The framework allocator's component among MEMORY_RECORD's (None: every row is the allocator's)."""
    found = {c for (c,) in con.sql("SELECT DISTINCT s.value FROM memory_record r JOIN strings s "
                                   "ON s.id = r.component_id").fetchall()}
    return next((c for c in ALLOCATOR_COMPONENTS if c in found), None)
