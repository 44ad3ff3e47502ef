"""``perfsight cluster -d DIR [-o OUT]`` (``perfsight.cluster``): msprof-analyze's ``cluster -m all`` outputs
(version 26.x) in ``OUT/cluster_analysis_output/`` (OUT defaults to DIR, as msprof-analyze's ``-o``), so
MindStudio Insight and scripts written for msprof-analyze read them:

    cluster_step_trace_time.csv        Step, Type, Index and torch_npu's step_trace_time.csv columns (us)
    cluster_communication.json         {"(ranks)": {"stepN": {"op@group": {"rank": time and bandwidth info}}}}
    cluster_communication_matrix.json  {"(ranks)": {"stepN": {"key@group": {"src-dst": link}}}}
    communication_group.json           {"collective": [...], "p2p": [...], "comm_group_parallel_info": [...]}
    cluster_analysis.db                CommunicationGroupMapping, ClusterCommunicationTime,
                                       ClusterCommunicationBandwidth, ClusterCommunicationMatrix,
                                       ClusterStepTraceTime, HostInfo, RankDeviceMap

and perfsight's own ``rank_breakdown.csv`` beside them: the mean step breakdown of every rank
(``catalog.RANK_BREAKDOWN``), the per-rank table ``perfsight analyse`` summarises beyond a screenful of ranks.

msprof-analyze writes the text files for a text export and the .db for a .db export; perfsight writes both
for every job (Ascend, Kineto GPU or CPU). Every figure comes from ``analysis/cluster_outputs.py``; this module
only converts units (ns -> us or ms, bytes -> MB = 1e6 bytes), names keys and rounds where msprof-analyze
rounds (ratios and bandwidths to 4 decimals). A file without rows is not written. The folder follows
``output.Staging``: all files or none, and a file perfsight did not write there is never replaced.
docs/cluster_outputs.md describes every file and column.
"""
from __future__ import annotations

import csv
import heapq
import itertools
import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight import ingest
from perfsight.analysis import cluster_outputs
from perfsight.analysis.cluster import rank_breakdown
from perfsight.analysis.cluster_outputs import TOTAL_OP_INFO
from perfsight.analysis.job import Job
from perfsight.analysis.rank_facts import STEP_TRACE_TIME_HEADERS
from perfsight.analysis.summary import cluster_summary
from perfsight.core.memo import computed
from perfsight.core.tables import new_connection
from perfsight.mapreduce import ClusterJob, analyse_job, holding_store, output_root
from perfsight.mapreduce.engines import engine_for
from perfsight.mapreduce.map import RankOutcome
from perfsight.views.export.catalog import RANK_BREAKDOWN
from perfsight.views.export.output import Staging, staging
from perfsight.views.export.writer import write_rows

#: the folder msprof-analyze writes its cluster outputs into
OUTPUT_FOLDER = "cluster_analysis_output"
STEP_TRACE_CSV = "cluster_step_trace_time.csv"
COMMUNICATION_JSON = "cluster_communication.json"
MATRIX_JSON = "cluster_communication_matrix.json"
GROUP_JSON = "communication_group.json"
CLUSTER_DB = "cluster_analysis.db"
RANK_BREAKDOWN_CSV = RANK_BREAKDOWN.name("", "csv")

#: rows of a large table turned into Python values at a time when written
BATCH_ROWS = 50_000
#: rows of cluster_communication.json's tables made Python objects at once (a bandwidth row holds its packet sizes)
ENTRY_ROWS = 4096
#: decimals msprof-analyze rounds ratios and bandwidths to
_DECIMALS = 4

_TABLES_SQL = {
    "CommunicationGroupMapping": '"type" TEXT, "rank_set" TEXT, "group_name" TEXT, "group_id" TEXT, "pg_name" TEXT',
    "ClusterCommunicationTime": '"step" TEXT, "rank_id" INTEGER, "hccl_op_name" TEXT, "group_name" TEXT, '
                                '"start_timestamp" REAL, "elapsed_time" REAL, "transit_time" REAL, "wait_time" REAL, '
                                '"synchronization_time" REAL, "idle_time" REAL, "synchronization_time_ratio" REAL, '
                                '"wait_time_ratio" REAL',
    "ClusterCommunicationBandwidth": '"step" TEXT, "rank_id" INTEGER, "hccl_op_name" TEXT, "group_name" TEXT, '
                                     '"band_type" TEXT, "transit_size" REAL, "transit_time" REAL, "bandwidth" REAL, '
                                     '"large_packet_ratio" REAL, "package_size" REAL, "count" INTEGER, '
                                     '"total_duration" REAL',
    "ClusterCommunicationMatrix": '"step" TEXT, "hccl_op_name" TEXT, "group_name" TEXT, "src_rank" REAL, '
                                  '"dst_rank" REAL, "transport_type" TEXT, "op_name" TEXT, "transit_size" REAL, '
                                  '"transit_time" REAL, "bandwidth" REAL',
    "ClusterStepTraceTime": 'step TEXT, type TEXT, "index" TEXT, computing NUMERIC, communication_not_overlapped '
                            'NUMERIC, overlapped NUMERIC, communication NUMERIC, free NUMERIC, stage NUMERIC, bubble '
                            'NUMERIC, communication_not_overlapped_and_exclude_receive NUMERIC, preparing NUMERIC, '
                            'dp_index INTEGER, pp_index INTEGER, tp_index INTEGER',
    "HostInfo": "hostUid TEXT, hostName TEXT",
    "RankDeviceMap": "rankId INTEGER, deviceId INTEGER, hostUid TEXT, profilePath TEXT",
}


def _us(ns: int | None) -> float | None:
    """ns as us, correctly rounded (int / int: an epoch in ns is beyond a float's exact integers)."""
    return None if ns is None else ns / 1000


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / 1_000_000


def _mb(nbytes: int | None) -> float | None:
    return None if nbytes is None else nbytes / 1e6


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, _DECIMALS)


def _step(step: int | None) -> str:
    """msprof-analyze's step key: ``step50``; ``step`` for operations outside any step."""
    return "step" if step is None else f"step{step}"


def _ranks_key(ranks: list[int]) -> str:
    """The rank-set key of msprof-analyze's JSON files: ``(0, 1)`` (a Python tuple, ``(0,)`` for one)."""
    return str(tuple(ranks))


def _ranks_text(ranks: list[int]) -> str:
    """A rank set in cluster_analysis.db: ``(0,1)``."""
    return "(" + ",".join(map(str, ranks)) + ")"


@dataclass(frozen=True)
class ClusterOutputs:
    """The analysis tables behind the five outputs of one job."""

    steps: pa.Table
    groups: pa.Table
    time: pa.Table
    bandwidth: pa.Table
    matrix: pa.Table
    devices: pa.Table
    ranks: pa.Table          # cluster.rank_breakdown, for rank_breakdown.csv

    @classmethod
    def of(cls, job: Job, sources: list[ingest.RunSource]) -> ClusterOutputs:
        devices = computed(cluster_outputs.cluster_rank_devices, job)
        if len(sources) == 1:    # one rank: its folder is the one read (a job's ranks say theirs)
            devices = devices.set_column(devices.schema.get_field_index("profile_path"), "profile_path",
                                         pa.array([str(sources[0].path)] * devices.num_rows, pa.string()))
        return cls(*(computed(f, job) for f in (
            cluster_outputs.cluster_step_trace, cluster_outputs.cluster_communication_groups,
            cluster_outputs.cluster_communication_time, cluster_outputs.cluster_communication_bandwidth,
            cluster_outputs.cluster_communication_matrix)), devices=devices,
                   ranks=computed(rank_breakdown, job))


def _rows(table: pa.Table) -> list[dict]:
    return table.to_pylist()


def step_trace_rows(outputs: ClusterOutputs) -> list[list]:
    """cluster_step_trace_time.csv's rows (after the header): Step, Type, Index and the us figures."""
    return [[row["step"], "rank", row["rank"], *(_us(row[c]) for c in STEP_TRACE_TIME_HEADERS.values())]
            for row in _rows(outputs.steps)]


def _keys(outputs: ClusterOutputs) -> dict[str, str]:
    """Each group's rank-set key (``_ranks_key`` of its recorded ranks), by its msprof-analyze name."""
    return {group["group_name"]: _ranks_key(group["recorded_ranks"]) for group in _rows(outputs.groups)}


def communication_json(outputs: ClusterOutputs) -> Iterator[str]:
    """cluster_communication.json's text, piece by piece: per rank-set key, step, ``op@group`` and rank, the time
    and bandwidth (both tables sorted alike and merged entry by entry: never the whole file as Python objects)."""
    return _nested_json(_communication_members(outputs))


def _communication_members(outputs: ClusterOutputs) -> Iterator[tuple[tuple[str, ...], str]]:
    """cluster_communication.json's members (``_nested_json``): each entry's time info, then its links, the
    entries in the order the rows first name them (time rows, then bandwidth rows: each key, step, operation
    and rank where it first appears)."""
    keys = _keys(outputs)
    time_order, bandwidth_order = _entry_orders(outputs, keys)
    entries = heapq.merge(((order, 0, row) for order, row in _sorted_rows(outputs.time, time_order)),
                          ((order, 1, row) for order, row in _sorted_rows(outputs.bandwidth, bandwidth_order)),
                          key=lambda item: item[:2])
    for _, rows in itertools.groupby(entries, key=lambda item: item[0][:4]):
        kinds_rows = [(kind, row) for _, kind, row in rows]
        first = kinds_rows[0][1]
        path = (keys[first["group_name"]], _step(first["step"]), f"{first['op_name']}@{first['group_name']}",
                str(first["rank"]))
        for kind, row in kinds_rows:
            if kind == 0:
                yield path, f'"Communication Time Info": {json.dumps(_time_info(row))}'
        links = {row["link_type"]: _link_info(row) for kind, row in kinds_rows if kind == 1}
        if links:
            yield path, f'"Communication Bandwidth Info": {json.dumps(links)}'


def _entry_orders(outputs: ClusterOutputs, keys: dict[str, str]) -> tuple[pa.Table, pa.Table]:
    """The time rows' and the bandwidth rows' places in cluster_communication.json, each aligned with its
    table: where the row's key, step, operation and rank first appear (``seq`` numbers the time rows, then the
    bandwidth rows; ``k1``-``k4``), then the row itself (``seq``)."""
    tables = (outputs.time, outputs.bandwidth)
    number = {key: str(index) for index, key in enumerate(dict.fromkeys(keys.values()))}   # a key can be 6 kB
    levels = [pa.array([number[keys[group]] for table in tables for group in table["group_name"].to_pylist()],
                       pa.string())]
    for column in (lambda t: pc.fill_null(pc.cast(t["step"], pa.string()), ""),
                   lambda t: pc.binary_join_element_wise(t["op_name"], t["group_name"], "@"),
                   lambda t: pc.cast(t["rank"], pa.string())):
        levels.append(pa.concat_arrays([pa.array(column(table)) for table in tables]))
    places, prefix = {}, None
    for level, values in enumerate(levels, start=1):
        prefix = values if prefix is None else pc.binary_join_element_wise(prefix, values, "\x1f")
        codes = pc.dictionary_encode(prefix).indices.to_numpy()
        _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
        places[f"k{level}"] = first[inverse.ravel()]
    places["seq"] = np.arange(len(levels[0]))
    table = pa.table(places)
    return table.slice(0, outputs.time.num_rows), table.slice(outputs.time.num_rows)


def _sorted_rows(table: pa.Table, places: pa.Table) -> Iterator[tuple[tuple, dict]]:
    """The rows of ``table`` with their places, in the order of their places."""
    order = pc.sort_indices(places, sort_keys=[(name, "ascending") for name in places.column_names])
    places, table = places.take(order), table.take(order)
    for start in range(0, table.num_rows, ENTRY_ROWS):
        rows = table.slice(start, ENTRY_ROWS).to_pylist()
        yield from zip(zip(*(places[name].slice(start, ENTRY_ROWS).to_pylist() for name in places.column_names)),
                       rows)


def _time_info(row: dict) -> dict:
    info = {} if row["op_name"] == TOTAL_OP_INFO else {"Start Timestamp(us)": _us(row["start_ns"])}
    info.update({"Elapse Time(ms)": _ms(row["elapse_ns"]), "Transit Time(ms)": _ms(row["transit_ns"]),
                 "Wait Time(ms)": _ms(row["wait_ns"]), "Synchronization Time(ms)": _ms(row["sync_ns"]),
                 "Idle Time(ms)": _ms(row["idle_ns"]), "Wait Time Ratio": _round(row["wait_ratio"]),
                 "Synchronization Time Ratio": _round(row["sync_ratio"])})
    return info


def _link_info(row: dict) -> dict:
    link = {"Transit Size(MB)": _mb(row["transit_bytes"]), "Transit Time(ms)": _ms(row["transit_ns"]),
            "Bandwidth(GB/s)": _round(row["bandwidth_gbps"])}
    if row["op_name"] != TOTAL_OP_INFO:
        link["Large Packet Ratio"] = row["large_packet_ratio"]
    link["Size Distribution"] = {str(_mb(p["packet_bytes"])): [p["count"], _ms(p["dur_ns"])]
                                 for p in row["size_distribution"] or []}
    return link


def _nested_json(members: Iterable[tuple[tuple[str, ...], str]]) -> Iterator[str]:
    """The JSON text, piece by piece, of nested objects from ``(path, member)`` pairs sorted by path (the
    members of one path contiguous, their names unique in it; a member is its JSON text, ``"name": value``):
    ``{path[0]: {path[1]: ... {member, ...}}}``."""
    yield "{"
    previous: tuple[str, ...] | None = None
    for path, member in members:
        opened = path
        if previous is not None:
            shared = next((i for i, (a, b) in enumerate(zip(previous, path)) if a != b), len(path))
            yield "}" * (len(previous) - shared) + ", "
            opened = path[shared:]
        for key in opened:
            yield f"{json.dumps(key)}: {{"
        yield member
        previous = path
    yield "}" * len(previous or ()) + "}"


#: cluster_communication_matrix.json's links as JSON members (``"src-dst": {...}``) in the file's order, made
#: by DuckDB (a million links: Python would spend seconds per hundred thousand): units as ``_ms``, ``_mb``,
#: ``_round`` convert them
_MATRIX_MEMBERS_SQL = f"""
SELECT k.key_order, m.step, m.key || '@' || m.group_name AS op,
       to_json(m.src_rank::VARCHAR || '-' || m.dst_rank::VARCHAR) || ': ' || to_json(struct_pack(
           "Transport Type" := m.transport, "Transit Time(ms)" := m.transit_ns / 1e6,
           "Transit Size(MB)" := m.transit_bytes / 1e6, "Op Name" := coalesce(m.op_name, ''),
           "Bandwidth(GB/s)" := round(m.bandwidth_gbps, {_DECIMALS}))) AS member
FROM (SELECT *, row_number() OVER () AS n FROM matrix) m JOIN keys k USING (group_name)
ORDER BY k.key_order, m.step NULLS FIRST, op, m.n
"""


def matrix_json(outputs: ClusterOutputs) -> Iterator[str]:
    """cluster_communication_matrix.json's text, piece by piece: per rank-set key, step, ``key@group`` and
    ``src-dst``, the link (keys in sorted order, links in the matrix's order)."""
    keys = _keys(outputs)
    texts = sorted(set(keys.values()))
    order = {key: index for index, key in enumerate(texts)}
    con = new_connection()
    con.register("matrix", outputs.matrix)
    con.register("keys", pa.table({"group_name": pa.array(list(keys), pa.string()),
                                   "key_order": pa.array([order[key] for key in keys.values()], pa.int64())}))
    batches = con.sql(_MATRIX_MEMBERS_SQL).to_arrow_reader(BATCH_ROWS)
    return _nested_json(((texts[key], _step(step), op), member) for batch in batches for key, step, op, member in zip(
        *(batch.column(name).to_pylist() for name in ("key_order", "step", "op", "member"))))


def group_json(outputs: ClusterOutputs) -> dict:
    """communication_group.json: the recorded rank sets per kind and the groups' parallel info."""
    groups = _rows(outputs.groups)
    return {"collective": [g["recorded_ranks"] for g in groups if g["kind"] == "collective"],
            "p2p": [g["recorded_ranks"] for g in groups if g["kind"] == "p2p"],
            "comm_group_parallel_info": [{"type": g["kind"], "rank_set": g["rank_set"], "group_name": g["group_name"],
                                          "group_id": g["group_id"], "pg_name": g["pg_name"]} for g in groups]}


def database_rows(outputs: ClusterOutputs) -> dict[str, Iterable[tuple]]:
    """cluster_analysis.db's rows per table (``_TABLES_SQL``; the matrix's as they are written, by batch)."""
    bandwidth = []
    for row in _rows(outputs.bandwidth):
        packets = row["size_distribution"] or []
        if not packets and not row["transit_bytes"]:
            continue                     # msprof-analyze's database keeps only the link types that carried data
        common = (_step(row["step"]), row["rank"], row["op_name"], row["group_name"], row["link_type"],
                  _mb(row["transit_bytes"]), _ms(row["transit_ns"]), _round(row["bandwidth_gbps"]),
                  row["large_packet_ratio"] or 0.0)     # a fraction; 0 without one (Total Op Info), as msprof-analyze
        bandwidth += [(*common, _mb(p["packet_bytes"]), p["count"], _ms(p["dur_ns"])) for p in packets] or [
            (*common, 0.0, 0, 0.0)]
    return {
        "CommunicationGroupMapping": [(g["kind"], _ranks_text(g["rank_set"]), g["group_name"], g["group_id"],
                                       g["pg_name"]) for g in _rows(outputs.groups)],
        "ClusterCommunicationTime": [
            (_step(r["step"]), r["rank"], r["op_name"], r["group_name"], _us(r["start_ns"]) or 0.0, _ms(r["elapse_ns"]),
             _ms(r["transit_ns"]), _ms(r["wait_ns"]), _ms(r["sync_ns"]), _ms(r["idle_ns"]), _round(r["sync_ratio"]),
             _round(r["wait_ratio"])) for r in _rows(outputs.time)],
        "ClusterCommunicationBandwidth": bandwidth,
        "ClusterCommunicationMatrix": _matrix_rows(outputs.matrix),
        "ClusterStepTraceTime": [(str(row[0]), row[1], str(row[2]), *row[3:], 0, 0, 0)
                                 for row in step_trace_rows(outputs)],
        "HostInfo": list(dict.fromkeys((d["host_uid"], d["host_name"]) for d in _rows(outputs.devices)
                                       if d["host_uid"] is not None)),
        "RankDeviceMap": [(d["rank"], d["device_id"], d["host_uid"], d["profile_path"])
                          for d in _rows(outputs.devices)],
    }


#: ClusterCommunicationMatrix's rows (units and step key as ``_step``, ``_mb``, ``_ms`` give them), by DuckDB
_MATRIX_ROWS_SQL = """
SELECT CASE WHEN step IS NULL THEN 'step' ELSE 'step' || step END, key, group_name, src_rank::DOUBLE,
       dst_rank::DOUBLE, transport, coalesce(op_name, ''), transit_bytes / 1e6, transit_ns / 1e6, bandwidth_gbps
FROM matrix
"""


def _matrix_rows(matrix: pa.Table) -> Iterator[tuple]:
    """ClusterCommunicationMatrix's rows, ``BATCH_ROWS`` at a time."""
    con = new_connection()
    con.register("matrix", matrix)
    result = con.execute(_MATRIX_ROWS_SQL)
    while rows := result.fetchmany(BATCH_ROWS):
        yield from rows


def _write_csv(path: Path, rows: list[list]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["Step", "Type", "Index", *STEP_TRACE_TIME_HEADERS])
        writer.writerows(rows)


def _write_json(pieces: Iterable[str]) -> Callable[[Path], object]:
    def write(path: Path) -> None:
        with open(path, "w", encoding="utf-8") as file:
            file.writelines(pieces)
    return write


def _write_db(path: Path, tables: dict[str, Iterable[tuple]]) -> None:
    """The tables that have rows (a table's rows may be a generator: written as they come)."""
    con = sqlite3.connect(path)
    try:
        with con:
            for name, rows in tables.items():
                rows = iter(rows)
                first = next(rows, None)
                if first is not None:
                    con.execute(f'CREATE TABLE "{name}" ({_TABLES_SQL[name]})')
                    con.executemany(f'INSERT INTO "{name}" VALUES ({", ".join("?" * len(first))})',
                                    itertools.chain([first], rows))
    finally:
        con.close()


def stage_cluster(outputs: ClusterOutputs, stage: Staging) -> None:
    """Write the outputs that have rows into ``stage`` (each replaces only perfsight's own earlier file)."""
    steps = step_trace_rows(outputs)
    if steps:
        stage.write(STEP_TRACE_CSV, lambda path: _write_csv(path, steps), replaceable=True)
    if outputs.time.num_rows or outputs.bandwidth.num_rows:
        stage.write(COMMUNICATION_JSON, _write_json(communication_json(outputs)), replaceable=True)
    if outputs.matrix.num_rows:
        stage.write(MATRIX_JSON, _write_json(matrix_json(outputs)), replaceable=True)
    if outputs.groups.num_rows:
        stage.write(GROUP_JSON, _write_json([json.dumps(group_json(outputs))]), replaceable=True)
    if any(table.num_rows for table in (outputs.groups, outputs.time, outputs.bandwidth, outputs.matrix,
                                        outputs.steps, outputs.devices)):
        stage.write(CLUSTER_DB, lambda path: _write_db(path, database_rows(outputs)), replaceable=True)
    stage_rank_breakdown(outputs.ranks, stage)


def stage_rank_breakdown(ranks: pa.Table, stage: Staging) -> None:
    """Write rank_breakdown.csv (``catalog.RANK_BREAKDOWN``'s columns) of a ``cluster.rank_breakdown`` table
    with rows into ``stage``."""
    if ranks.num_rows:
        stage.write(RANK_BREAKDOWN_CSV, lambda path: write_rows(ranks, RANK_BREAKDOWN.columns, path, "csv"),
                    replaceable=True)


@dataclass(frozen=True)
class ClusterReport:
    """What ``cluster`` did: the job it analysed (each rank's outcome, its summaries), its ranks compared
    (``summary.cluster_summary``; None for fewer than two ranks) and the files written (None: none were to be
    written, as ``perfsight analyse`` of a mapped job writes none)."""

    job: ClusterJob
    cluster: dict | None
    files: list[Path] | None


def cluster(path: str | Path, output: str | Path | None = None, *, ray: str | bool | None = None,
            workers: int | None = None, use_cache: bool = True, on_start: Callable[[int], None] | None = None,
            on_outcome: Callable[[RankOutcome], None] | None = None, bound_memory: bool = False,
            light: bool = False, on_wait: Callable[[str], None] | None = None) -> ClusterReport:
    """Analyse the job at ``path`` (its ranks' folders or traces, or one run) by map-reduce
    (``perfsight.mapreduce.analyse_job``: the local pool of ``workers`` processes, or Ray with ``ray`` True or
    an address) and write msprof-analyze's cluster outputs into ``output/cluster_analysis_output/`` (``output``
    defaults to ``path``, or the folder of a trace file; the per-rank summaries go to
    ``output/perfsight_cluster/``). All files are written or none; a file perfsight did not write is never
    replaced (the module docstring). ``on_start`` is told the number of ranks found, ``on_outcome`` each
    rank's outcome as it comes; ``bound_memory`` bounds this process's DuckDB (the CLI's, ``perfsight.mapreduce``'s
    ``bound_reduce_memory``); ``light`` reads each rank light (``perfsight.mapreduce``'s module docstring). The
    store is held from the map to the report (``holding_store``: another run into the same output waits, and
    ``on_wait`` is told why)."""
    path = Path(path)
    root = output_root(path, output)
    engine = engine_for(ray, workers)
    with holding_store(root, on_wait):
        analysed = analyse_job(path, engine=engine, output=root, use_cache=use_cache, on_start=on_start,
                               on_outcome=on_outcome, bound_memory=bound_memory, light=light)
        with staging(root / OUTPUT_FOLDER) as stage:
            stage_cluster(ClusterOutputs.of(analysed.job, analysed.sources), stage)
            files = stage.commit()
        return ClusterReport(analysed, computed(cluster_summary, analysed.job), files)
