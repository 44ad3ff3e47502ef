"""Timeline export: ``msprof_{stamp}.json`` (the whole run in layers), ``step_trace_{stamp}.json``, and the
device tasks alone (``task_time_{stamp}.json``) and the user's marks alone (``msprof_tx.json``).

All are Chrome trace-event JSON objects, loadable by Perfetto and chrome://tracing (catalog.py describes
the layers and events; analysis/timeline.py decides what goes in which layer and makes the counter and
memory series, as for the web timeline). The event text is built by DuckDB string functions straight from
the tables, one string per event and no Python object per event, streamed to the file in batches;
``to_json`` escapes names, and times are written as microseconds with exactly three decimals computed in
DECIMAL arithmetic from the int64 ns (1_000_000_001 ns -> ``1000000.001``).
"""
from __future__ import annotations

from pathlib import Path

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.analysis.steps import step_trace
from perfsight.analysis.timeline import SAMPLE_LAYER_COLUMNS, SERIES, SLICE_LAYER_COLUMNS, counter_series, memory_series
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables, new_connection
from perfsight.views.export.catalog import (
    MARK_KINDS,
    MSPROF_TIMELINE,
    MSPROF_TX_TIMELINE,
    STEP_TRACE_TIMELINE,
    TASK_TIME_TIMELINE,
)
from perfsight.views.export.output import Staging, staging
from perfsight.views.export.writer import us_sql

EVENTS_PER_BATCH = 50_000


def export_timeline(tables: RunTables, out_dir: Path, *, stamp: str, fp_point: str | None = None,
                    bp_point: str | None = None) -> list[Path]:
    """Write the timeline files that have data into ``out_dir``, all or none; returns their paths.

    ``fp_point``/``bp_point`` name the forward-start / backward-end operators of the step trace
    (see perfsight.analysis.steps)."""
    with staging(out_dir) as stage:
        stage_timeline(tables, stage, stamp=stamp, fp_point=fp_point, bp_point=bp_point)
        return stage.commit()


def stage_timeline(tables: RunTables, stage: Staging, *, stamp: str, fp_point: str | None = None,
                   bp_point: str | None = None) -> None:
    """Write the timeline files that have data into ``stage`` (``export_timeline`` without the commit)."""
    meta = tables.meta_dict()
    if tables.slices.num_rows or tables.counters.num_rows or tables.memory.num_rows:
        _stage_trace(stage, MSPROF_TIMELINE.name(stamp, "json"), tables, meta,
                     lambda con: _run_events(con, tables))
    for kind, where in ((TASK_TIME_TIMELINE, _DEVICE_TASKS), (MSPROF_TX_TIMELINE, _MARKS)):
        if tables.sql(f"SELECT count(*) FROM slices s JOIN tracks t USING (track_id) WHERE {where}"
                                ).fetchall()[0][0]:
            _stage_trace(stage, kind.name(stamp, "json"), tables, meta,
                         lambda con, where=where: _run_events(con, tables, where, with_samples=False),
                         replaceable=not kind.stamped)
    steps = computed(step_trace, tables, fp_point=fp_point, bp_point=bp_point)
    if steps.num_rows:
        step_con = new_connection()
        step_con.register("steps", steps)
        stage.write(STEP_TRACE_TIMELINE.name(stamp, "json"),
                    lambda path: _write_trace(path, step_con, _step_events(step_con), meta))


#: the slices of task_time_*.json: the device's (on its streams), and of msprof_tx.json: the user's marks
_DEVICE_TASKS = "t.kind = 'stream'"
_MARKS = f"t.kind <> 'stream' AND s.kind IN ({', '.join(repr(kind) for kind in MARK_KINDS)})"


def _stage_trace(stage: Staging, name: str, tables: RunTables, meta: dict[str, str], events, *,
                 replaceable: bool = False) -> None:
    """Write trace ``name`` of the events ``events(con)`` gives on a connection of its own over ``tables``."""
    con = tables.connect()
    stage.write(name, lambda path: _write_trace(path, con, events(con), meta), replaceable=replaceable)


def _write_trace(path: Path, con: duckdb.DuckDBPyConnection, events_sql: str, meta: dict[str, str]) -> Path:
    """Stream the events of ``events_sql`` (rows: ev, ord, ts) into a trace file, batch by batch: each
    batch's event texts are joined by Arrow, so memory stays bounded and no Python object per event."""
    reader = con.sql(f"SELECT ev FROM ({events_sql}) ORDER BY ord, ts, ev").to_arrow_reader(EVENTS_PER_BATCH)
    with open(path, "wb") as out:
        out.write(b'{"traceEvents":[\n')
        separator = b""
        for batch in reader:
            if not batch.num_rows:
                continue
            events = pa.ListArray.from_arrays(pa.array([0, batch.num_rows], pa.int32()), batch.column(0))
            out.write(separator)
            out.write(pc.binary_join(events, ",\n")[0].as_buffer())
            separator = b",\n"
        out.write(b'\n],"displayTimeUnit":"ns","otherData":')
        out.write(orjson.dumps(meta))
        out.write(b"}\n")
    return path


def _ts(ns_expr: str) -> str:
    return f"CAST({us_sql(ns_expr)} AS VARCHAR)"


def _x_event_sql(*, name: str, cat: str, pid: str, tid: str, start: str, dur: str, args: str) -> str:
    """SQL text of a ph X event from SQL expressions (``args`` must yield JSON text)."""
    return (f"""'{{"ph":"X","name":' || to_json({name}) || ',"cat":' || to_json({cat}) || ',"pid":' || {pid} """
            f"""|| ',"tid":' || {tid} || ',"ts":' || {_ts(start)} || ',"dur":' || {_ts(dur)} """
            f"""|| ',"args":' || {args} || '}}'""")


def _metadata_events_sql(processes: str, threads: str) -> str:
    """SQL yielding (ev) rows: process_name/process_sort_index for each row of ``processes`` (pid, name)
    and thread_name/thread_sort_index for each row of ``threads`` (pid, tid, name, sort_index)."""
    return f"""
        SELECT '{{"ph":"M","name":"process_name","pid":' || pid
               || ',"tid":0,"args":{{"name":' || to_json(name) || '}}}}'
        FROM {processes}
        UNION ALL
        SELECT '{{"ph":"M","name":"process_sort_index","pid":' || pid
               || ',"tid":0,"args":{{"sort_index":' || pid || '}}}}'
        FROM {processes}
        UNION ALL
        SELECT '{{"ph":"M","name":"thread_name","pid":' || pid || ',"tid":' || tid
               || ',"args":{{"name":' || to_json(name) || '}}}}'
        FROM {threads}
        UNION ALL
        SELECT '{{"ph":"M","name":"thread_sort_index","pid":' || pid || ',"tid":' || tid
               || ',"args":{{"sort_index":' || sort_index || '}}}}'
        FROM {threads}
    """


_RUN_VIEWS = """
CREATE TEMP VIEW placed AS
SELECT s.*, coalesce(t.rank, 0) AS rank, t.name AS track_name, coalesce(t.sort_index, t.track_id) AS track_order,
       {slice_layer}
FROM slices s JOIN tracks t USING (track_id)
WHERE {slices_where};

CREATE TEMP VIEW samples AS SELECT ts_ns, rank, series, value, {sample_layer} FROM series;

CREATE TEMP TABLE layers AS
WITH used AS (SELECT DISTINCT rank, layer_order, layer FROM placed
              UNION SELECT DISTINCT rank, layer_order, layer FROM samples)
SELECT rank, layer_order, layer, row_number() OVER (ORDER BY rank, layer_order, layer) AS pid,
       CASE WHEN count(DISTINCT rank) OVER () > 1 THEN 'Rank ' || rank || ': ' || layer ELSE layer END AS name
FROM used;

CREATE TEMP VIEW placed_events AS SELECT p.*, l.pid FROM placed p JOIN layers l USING (rank, layer_order, layer);

CREATE TEMP VIEW layer_threads AS
SELECT DISTINCT pid, track_id AS tid, track_name AS name, track_order AS sort_index FROM placed_events;
"""

_SLICE_ARGS = """json_merge_patch(coalesce(try_cast(args AS JSON), '{}'), json_object(
    'id', id, 'op_type', nullif(op_type, name), 'task_type', task_type, 'step', step,
    'correlation_id', correlation_id, 'external_id', external_id,
    'input_shapes', try_cast(input_shapes AS JSON), 'input_dtypes', try_cast(input_dtypes AS JSON),
    'flops', flops, 'bytes', bytes))"""


def _flow_event_sql(phase: str, end: str, extra: str) -> str:
    return (f"""'{{"ph":"{phase}","id":' || f.flow_id || ',"name":' || to_json(f.kind) || ',"cat":' """
            f"""|| to_json(f.kind) || ',"pid":' || {end}.pid || ',"tid":' || {end}.track_id """
            f"""|| ',"ts":' || {_ts(f'{end}.start_ns')} || '{extra}}}'""")


def _run_events(con: duckdb.DuckDBPyConnection, tables: RunTables, slices_where: str = "true",
                with_samples: bool = True) -> str:
    """SQL of the msprof timeline's events (ev, ord, ts) over ``tables`` on ``con``: layers, slices, counters,
    memory, flows (analysis/timeline.py places them); only the slices ``slices_where`` keeps (SQL over slices
    ``s`` and tracks ``t``), the counter and memory samples only ``with_samples``."""
    con.register("series", pa.concat_tables([computed(counter_series, tables), computed(memory_series, tables)])
                 if with_samples else SERIES.empty_table())
    con.execute(_RUN_VIEWS.format(slices_where=slices_where, slice_layer=SLICE_LAYER_COLUMNS,
                                  sample_layer=SAMPLE_LAYER_COLUMNS))
    slice_event = _x_event_sql(name="name", cat="kind", pid="pid", tid="track_id", start="start_ns",
                               dur="dur_ns", args=_SLICE_ARGS)
    return f"""
        SELECT ev, 0 AS ord, 0 AS ts FROM ({_metadata_events_sql('layers', 'layer_threads')}) AS m(ev)
        UNION ALL
        SELECT {slice_event}, 1, start_ns FROM placed_events
        UNION ALL
        SELECT '{{"ph":"C","name":' || to_json(s.series) || ',"pid":' || l.pid || ',"tid":0,"ts":' || {_ts('s.ts_ns')}
               || ',"args":{{"value":' || to_json(s.value) || '}}}}', 2, s.ts_ns
        FROM samples s JOIN layers l USING (rank, layer_order, layer)
        UNION ALL
        SELECT ev, 3, ts FROM (
            WITH f AS (SELECT row_number() OVER (ORDER BY src_id, dst_id) AS flow_id, * FROM flows)
            SELECT {_flow_event_sql('s', 'src', '')} AS ev, src.start_ns AS ts
            FROM f JOIN placed_events src ON src.id = f.src_id JOIN placed_events dst ON dst.id = f.dst_id
            UNION ALL
            SELECT {_flow_event_sql('f', 'dst', ',"bp":"e"')}, dst.start_ns
            FROM f JOIN placed_events src ON src.id = f.src_id JOIN placed_events dst ON dst.id = f.dst_id)
    """


_STEP_PHASES = f"""
CREATE TEMP TABLE phases AS
WITH numbered AS (SELECT *, dense_rank() OVER (ORDER BY rank) AS pid FROM steps)
SELECT pid, rank, 1 AS tid, 'Iteration ' || step AS name, start_ns, end_ns - start_ns AS dur_ns,
       json_object('step', step, 'data_wait_us', {us_sql('data_wait_ns')}) AS args
FROM numbered
UNION ALL SELECT pid, rank, 2, 'Iteration Gap', fp_start_ns - gap_ns, gap_ns, json_object('step', step)
FROM numbered WHERE gap_ns IS NOT NULL
UNION ALL SELECT pid, rank, 2, 'FP_BP', fp_start_ns, fp_bp_ns, json_object('step', step)
FROM numbered WHERE fp_bp_ns IS NOT NULL
UNION ALL SELECT pid, rank, 2, 'Tail', bp_end_ns, tail_ns, json_object('step', step)
FROM numbered WHERE tail_ns IS NOT NULL;

CREATE TEMP VIEW step_processes AS
SELECT DISTINCT pid, CASE WHEN count(DISTINCT rank) OVER () > 1 THEN 'Rank ' || rank || ': Step trace'
                          ELSE 'Step trace' END AS name
FROM phases;

CREATE TEMP VIEW step_threads AS
SELECT DISTINCT pid, tid, CASE tid WHEN 1 THEN 'Iteration' ELSE 'Phases' END AS name, tid AS sort_index FROM phases;
"""


def _step_events(con: duckdb.DuckDBPyConnection) -> str:
    """SQL of the step-trace timeline's events (ev, ord, ts) from the registered ``steps`` table."""
    con.execute(_STEP_PHASES)
    phase_event = _x_event_sql(name="name", cat="'step_trace'", pid="pid", tid="tid", start="start_ns",
                               dur="dur_ns", args="args")
    return f"""
        SELECT ev, 0 AS ord, 0 AS ts FROM ({_metadata_events_sql('step_processes', 'step_threads')}) AS m(ev)
        UNION ALL
        SELECT {phase_event}, 1, start_ns FROM phases
    """
