"""Reading torch_npu's profiler database export (``*_ascend_pt/ASCEND_PROFILER_OUTPUT/
ascend_pytorch_profiler_{rank}.db``) into the canonical tables.

Public: ``sources`` and ``read_torch_npu_db``. This module assembles the six tables; the work
is split: torch_npu_db_source (read-only SQLite -> Arrow, required tables and columns), torch_npu_db_host
(PYTORCH_API, CANN_API), torch_npu_db_device (TASK, COMMUNICATION_OP and their infos), torch_npu_db_links
(steps, correlation/external ids, flows), torch_npu_db_memory (MEMORY_RECORD, OP_MEMORY, counter series). Joins run in
DuckDB over the Arrow copies of the tables; times are the database's integer ns (epoch), never rounded.

Tracks (ids ``track_offset`` + position): one ``thread`` track per host thread (``globalTid`` = pid << 32
| tid), holding its PyTorch slices and its CANN runtime calls (they nest without a single overlap in the
samples, so a device task's call stack reaches through its launch call into the operator that queued it);
one ``stream`` track per NPU stream (``npu:0 stream 2``); one ``stream`` track per HCCL plane of a stream
for the steps of communication operators (``npu:0 stream 4 HCCL plane 3``); one ``counter`` track per
series. Slice ids are ``id_offset`` + row: PYTORCH_API rows, CANN_API rows, TASK rows, then
COMMUNICATION_OP rows, each in database order. To merge ranks, read each with the offsets set past the
previous ones' (as for read_kineto). Rank: ``rank`` if given, else RANK_DEVICE_MAP, META_DATA
``distributed_args``, profiler_info_{rank}.json's ``rank_id``, the file name's number. World size:
``distributed_args.world_size``, else the largest communication group's size.

analysis.db (torch_npu's own step trace and communication analysis, beside the database; read by
torch_npu_db_analysis): its CommAnalyzerMatrix is the rank's meta ``communication_matrix`` (hccl_groups: the
links of communication_matrix.json), its CommAnalyzerTime and CommAnalyzerBandwidth rows go into the args of
their COMMUNICATION_OP slices as communication.json's records do in the text export; its step trace is
derived from this database, and perfsight derives its own (tests compare). Communication groups:
hccl_groups (parallel_group_info, else group-local, marked).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.errors import InputError
from perfsight.core.json_depth import JsonTooDeep, loads_bounded
from perfsight.core.tables import TRACKS, RunTables, conform, meta_table, new_connection
from perfsight.ingest.ascend import torch_npu_db_analysis as analysis_db
from perfsight.ingest.ascend.ascend_csv import read_json
from perfsight.ingest.ascend.detect import DB_NAME, OUTPUT_DIR, find_torch_npu_db
from perfsight.ingest.ascend.hccl_groups import (
    link_facts,
    local_groups,
    local_warning,
    parallel_groups,
    place_rank,
)
from perfsight.ingest.ascend.torch_npu_db_analysis import ANALYSIS_DB
from perfsight.ingest.ascend.torch_npu_db_device import read_device
from perfsight.ingest.ascend.torch_npu_db_host import INT, TEXT, read_host
from perfsight.ingest.ascend.torch_npu_db_links import link
from perfsight.ingest.ascend.torch_npu_db_memory import read_counters, read_memory
from perfsight.ingest.ascend.torch_npu_db_source import Database
from perfsight.ingest.ascend.torch_npu_links import device_tracks, memory_operators
from perfsight.ingest.common.nesting import Nesting, ids_or_null, overlap_warning, take_or_missing

_SEP = "\x1f"


def sources(run_dir: Path) -> list[Path]:
    """The files the tables are built from (for a cache's fingerprint): the database, analysis.db beside it
    and profiler_info."""
    path = find_torch_npu_db(run_dir)
    if path is None:
        return []
    info = sorted(path.parent.parent.glob("profiler_info*.json")) if path.parent.name == OUTPUT_DIR else []
    analysis = path.parent / ANALYSIS_DB
    return [path, *([analysis] if analysis.is_file() else []), *info[:1]]


def read_torch_npu_db(run_dir: Path, *, rank: int | None = None, id_offset: int = 0,
                      track_offset: int = 0) -> RunTables:
    """Read one rank's profiler database into tables. ``rank`` overrides the database's (RANK_DEVICE_MAP,
    else profiler_info_{rank}.json, else the file name). Raises InputError for a file that is not SQLite
    or lacks a required table or column (naming them); empty tables are fine."""
    path = find_torch_npu_db(run_dir)
    if path is None:
        raise InputError(f"{run_dir}: holds no torch_npu profiler database "
                         f"({OUTPUT_DIR}/ascend_pytorch_profiler_{{rank}}.db)")
    warnings: list[str] = []
    with Database(path) as db:
        con = new_connection()
        con.register("strings", db.read("STRING_IDS", {"id": ("id", INT), "value": ("value", TEXT)}))
        facts = _facts(db, path, rank, warnings)
        host = read_host(db, con)
        links = analysis_db.links(path.parent / ANALYSIS_DB, warnings)
        mapped = facts["parallel_groups"]
        place_rank(mapped, links, facts["rank"])
        device, groups = read_device(db, con, {**local_groups(links, mapped, warnings, ANALYSIS_DB), **mapped})
        device = analysis_db.with_reported(device, analysis_db.records(path.parent / ANALYSIS_DB, warnings), warnings)
        counters = read_counters(db, con, facts["device"])
        tracks = _tracks(host, device, counters, facts["rank"], track_offset)
        src = _sources(host, device, tracks, id_offset)
        nesting = Nesting(src["track_id"].to_numpy(), src["start_ns"].to_numpy(), src["dur_ns"].to_numpy())
        if nesting.overlaps:
            warnings.append(overlap_warning(nesting.overlaps))
        src = src.append_column("depth", pa.array(nesting.depth, pa.int16()))
        con.register("src", src)
        con.register("connections", db.read("CONNECTION_IDS", {"id": ("id", INT),
                                                               "connectionId": ("connectionId", INT)}))
        linked, flows = link(con)
        memory = _memory(read_memory(db, con, facts["device"]), src, nesting, tracks)
        warnings += db.warnings
    warning = local_warning(groups)
    if warning:
        warnings.append(warning)
    world_size = facts["world_size"] or max((len(g.ranks) for g in groups.values()), default=0) or None
    ids = src["id"].to_numpy()
    slices = conform("slices", pa.table({
        "id": src["id"], "kind": src["kind"], "name": src["name"], "op_type": src["op_type"],
        "task_type": src["task_type"], "track_id": src["track_id"], "start_ns": src["start_ns"],
        "dur_ns": src["dur_ns"], "depth": src["depth"],
        "parent_id": ids_or_null(ids, nesting.parent),
        "step": linked["step"], "correlation_id": linked["correlation_id"], "external_id": linked["external_id"],
        "input_shapes": src["input_shapes"], "input_dtypes": src["input_dtypes"],
        "args": src["args"],
    }))
    return RunTables(slices=slices, tracks=conform("tracks", tracks.drop_columns(["key"])),
                     counters=_counters(counters, tracks), flows=flows, memory=memory,
                     meta=meta_table({**facts["meta"], "source_files": [str(p) for p in facts["files"]],
                                      "rank": facts["rank"], "world_size": world_size,
                                      "step_source": "trace" if pc.any(pc.equal(slices["kind"], "step")).as_py()
                                      else "none",
                                      "communication_groups": {name: g.facts() for name, g in groups.items()} or None,
                                      "communication_matrix": link_facts(links, groups) or None,
                                      "parse_warnings": warnings}))


# --- run facts ------------------------------------------------------------------------------------

def _facts(db: Database, path: Path, rank: int | None, warnings: list[str]) -> dict:
    """Rank, device, parallel_group_info, world size and the meta facts of the run."""
    meta_rows = dict(db.rows("SELECT name, value FROM META_DATA", "META_DATA"))
    parallel = parallel_groups(meta_rows.pop("parallel_group_info", None), f"{path.name} META_DATA", warnings)
    distributed = _json(meta_rows.pop("distributed_args", None), "META_DATA distributed_args", warnings)
    environment = _json(meta_rows.pop("ENV_VARIABLES", None), "META_DATA ENV_VARIABLES", warnings)
    rank_devices = db.rows("SELECT rankId, deviceId FROM RANK_DEVICE_MAP", "RANK_DEVICE_MAP")
    info_path = next((p for p in sources(path)[1:] if p.suffix == ".json"), None)
    info = read_json(info_path, warnings, "its facts are unknown") if info_path else None
    info = info if isinstance(info, dict) else {}
    distributed = distributed if isinstance(distributed, dict) else {}
    named = DB_NAME.fullmatch(path.name)
    candidates = [rank, *(r for r, _ in rank_devices[:1]), distributed.get("rank"), info.get("rank_id"),
                  int(named[1]) if named and named[1] else None]
    devices = [d for _, d in rank_devices if isinstance(d, int) and d >= 0]
    devices += [d for (d,) in db.rows("SELECT min(deviceId) FROM TASK", "TASK") if d is not None]
    world_size = distributed.get("world_size")
    meta = {
        "source_format": "torch_npu_db",
        "base_time_ns": "",
        "device_properties": [{"id": i, "type": "npu", "name": n}
                              for i, n in db.rows("SELECT id, name FROM NPU_INFO", "NPU_INFO")],
        "profiler_config": info.get("config"),
        "profiler_info": {k: v for k, v in info.items() if k != "config"} or None,
        "environment": environment,
        "host_info": [dict(zip(("host_uid", "host_name"), row))
                      for row in db.rows("SELECT hostUid, hostName FROM HOST_INFO", "HOST_INFO")] or None,
        "database_meta": meta_rows or None,
    }
    return {"rank": next((r for r in candidates if isinstance(r, int) and r >= 0), None),
            "device": devices[0] if devices else 0,
            "parallel_groups": parallel,
            "world_size": world_size if isinstance(world_size, int) and world_size > 0 else None, "meta": meta,
            "files": sources(path)}


def _json(text: str | None, what: str, warnings: list[str]):
    if not text:
        return None
    try:
        return loads_bounded(text, what)
    except JsonTooDeep as error:
        warnings.append(f"{error}; ignored")
    except ValueError as error:
        warnings.append(f"{what} is not valid JSON ({error}); ignored")
    return None


# --- tracks and slices ------------------------------------------------------------------------------

def _tracks(host: pa.Table, device: pa.Table, counters: pa.Table, rank: int | None, track_offset: int) -> pa.Table:
    """The tracks table plus a ``key`` column (threads, then streams and planes, then counters); ``_sources``
    and ``_counters`` build the same keys for their rows."""
    rows = []
    threads = {(p, t) for p, t in zip(host["pid"].to_pylist(), host["tid"].to_pylist())}
    for pid, tid in sorted(threads, key=lambda pt: (pt[0], pt[1] != pt[0], pt[1])):
        rows.append({"key": _SEP.join(("t", str(pid), str(tid))), "pid": str(pid), "tid": str(tid), "device": "cpu",
                     "kind": "thread", "name": f"thread {tid}", "sort_index": None})
    streams = {(d, s, p) for d, s, p in zip(device["device"].to_pylist(), device["stream"].to_pylist(),
                                            device["plane"].to_pylist())}
    for dev, stream, plane in sorted(streams, key=lambda k: (k[0], k[1], -1 if k[2] is None else k[2])):
        tid = str(stream) if plane is None else f"{stream} plane {plane}"
        name = f"npu:{dev} stream {stream}" + {None: "", -1: " HCCL"}.get(plane, f" HCCL plane {plane}")
        rows.append({"key": _SEP.join(("s", str(dev), str(stream), "" if plane is None else str(plane))),
                     "pid": str(dev), "tid": tid, "device": f"npu:{dev}", "kind": "stream", "name": name,
                     "sort_index": stream if plane is None else None})
    series = sorted({(d, s) for d, s in zip(counters["device"].to_pylist(), counters["series"].to_pylist())})
    for dev, name in series:
        rows.append({"key": _SEP.join(("c", str(dev), name)), "pid": str(dev), "tid": None, "device": f"npu:{dev}",
                     "kind": "counter", "name": name, "sort_index": None})
    schema = TRACKS.append(pa.field("key", pa.string()))
    return pa.Table.from_pylist([{**row, "track_id": track_offset + i, "rank": rank} for i, row in enumerate(rows)],
                                schema=schema)


_SOURCE = pa.schema([("side", TEXT), ("pid", INT), ("api", TEXT), ("kind", TEXT), ("name", TEXT),
                     ("op_type", TEXT), ("task_type", TEXT), ("name_step", pa.int32()), ("start_ns", INT),
                     ("dur_ns", INT), ("connection_id", INT), ("plane", INT), ("input_shapes", TEXT),
                     ("input_dtypes", TEXT), ("args", TEXT), ("key", TEXT)])


def _sources(host: pa.Table, device: pa.Table, tracks: pa.Table, id_offset: int) -> pa.Table:
    """Host then device slices as one table of source columns with ``id``, ``side`` and ``track_id``."""
    host_part = {**{name: host[name] for name in ("pid", "api", "kind", "name", "name_step", "start_ns", "dur_ns",
                                                  "connection_id", "input_shapes", "input_dtypes", "args")},
                 "side": pc.if_else(host["is_runtime"], "cann", "pytorch"), "op_type": host["name"],
                 "key": pc.binary_join_element_wise("t", host["pid"].cast(TEXT), host["tid"].cast(TEXT), _SEP)}
    device_part = {**{name: device[name] for name in ("kind", "name", "op_type", "task_type", "start_ns", "dur_ns",
                                                      "connection_id", "plane", "input_shapes", "input_dtypes",
                                                      "args")},
                   "side": pa.array(["device"] * device.num_rows, TEXT),
                   "key": pc.binary_join_element_wise("s", device["device"].cast(TEXT), device["stream"].cast(TEXT),
                                                      pc.fill_null(device["plane"].cast(TEXT), ""), _SEP)}
    table = pa.concat_tables([_part(host_part, host.num_rows), _part(device_part, device.num_rows)])
    table = table.add_column(0, "id", pa.array(np.arange(id_offset, id_offset + table.num_rows, dtype=np.int64)))
    track_id = pc.take(tracks["track_id"], pc.index_in(table["key"], value_set=tracks["key"]))
    table = table.append_column("track_id", track_id.cast(pa.int32()))
    return table.append_column("end_ns", pc.add(table["start_ns"], table["dur_ns"])).combine_chunks()


def _part(columns: dict, rows: int) -> pa.Table:
    return pa.table([columns[f.name].cast(f.type) if f.name in columns else pa.nulls(rows, f.type) for f in _SOURCE],
                    schema=_SOURCE)


def _memory(records: pa.Table, src: pa.Table, nesting: Nesting, tracks: pa.Table) -> pa.Table:
    """Memory records with their operator slice and its thread (else the main thread, else the first track
    of their device: torch_npu_links.device_tracks)."""
    view = pa.table({"name": src["name"], "kind": src["kind"], "track": src["track_id"],
                     "role": pc.if_else(pc.equal(src["side"], "device"), "device", "host")})
    operator = memory_operators(records, view, nesting)
    threads = take_or_missing(src["track_id"].to_numpy().astype(np.int64), operator, -1)
    main = _main_thread(tracks)
    track_ids = pa.array(np.where(threads >= 0, threads, -1 if main is None else main), pa.int32(),
                         mask=(threads < 0) & (main is None))
    return conform("memory", records.drop_columns(["op_name"]).append_column(
        "op_slice_id", ids_or_null(src["id"].to_numpy(), operator)
    ).append_column("track_id", pc.coalesce(track_ids, device_tracks(tracks, records["device"]))))


def _main_thread(tracks: pa.Table) -> int | None:
    threads = tracks.filter(pc.equal(tracks["kind"], "thread"))
    if not threads.num_rows:
        return None
    main = threads.filter(pc.equal(threads["pid"], threads["tid"]))
    return (main if main.num_rows else threads)["track_id"][0].as_py()


def _counters(samples: pa.Table, tracks: pa.Table) -> pa.Table:
    keys = pc.binary_join_element_wise("c", samples["device"].cast(TEXT), samples["series"], _SEP)
    return conform("counters", pa.table({
        "track_id": pc.take(tracks["track_id"], pc.index_in(keys, value_set=tracks["key"])),
        "ts_ns": samples["ts_ns"], "value": samples["value"]}))
