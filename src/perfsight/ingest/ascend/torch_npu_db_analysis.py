"""analysis.db, torch_npu's communication analysis beside its profiler database (``ASCEND_PROFILER_OUTPUT/
analysis.db``): what perfsight reads of it, in the forms the text export's files give the same facts.

* ``links``: CommAnalyzerMatrix as communication_matrix.json's links (hccl_groups.matrix_links).
* ``records``: CommAnalyzerTime and CommAnalyzerBandwidth as communication.json's per-operator records
  (torch_npu_hccl.Record, ``source`` ``analysis.db``), the two tables joined on (step, type, hccl_op_name,
  group_name). A time row gives ``Communication Time Info``: ``Start Timestamp(us)`` (start_timestamp, us),
  ``Elapse Time(ms)``, ``Transit Time(ms)``, ``Wait Time(ms)``, ``Synchronization Time(ms)``, ``Idle
  Time(ms)`` (elapse_time ... idle_time, ms); the table has no ratios, so none are given. Bandwidth rows,
  one per (operator, transport_type, package_size), give ``Communication Bandwidth Info`` per transport:
  ``Transit Size(MB)``, ``Transit Time(ms)``, ``Bandwidth(GB/s)``, ``Large Packet Ratio`` (the same on each
  of the transport's rows: the first row's) and ``Size Distribution`` {package_size (MB): [count,
  total_duration (ms)]}, where a row of count 0 (torch_npu's row for a transport without packets) adds no
  packet size. ``step`` ``step50`` -> 50, ``type`` -> the record's kind.
* ``with_reported``: the database's communication operators (COMMUNICATION_OP slices) with their records'
  objects in ``args`` (torch_npu_hccl.match: same name, same group (``Process Group Name``, the hash
  analysis.db names groups by), nearest start), as the text reader adds communication.json's.

A table that is absent reads as no rows; one that lacks a column read here, or cannot be read, is named in a
warning and gives no rows. A row whose name or group is not a text, or one of whose figures is not a finite
number, costs that row: counted and described (by table and column) in one warning per table.
"""
from __future__ import annotations

import json
import math
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.communication import COMM_KIND, REPORTED_BANDWIDTH, REPORTED_TIME
from perfsight.ingest.ascend.ascend_csv import json_object
from perfsight.ingest.ascend.hccl_groups import matrix_links
from perfsight.ingest.ascend.torch_npu_db_source import connect_read_only
from perfsight.ingest.ascend.torch_npu_hccl import NS_PER_MS, NS_PER_US, STEP_KEY, Record, match, record_ns
from perfsight.ingest.ascend.torch_npu_kernels import merge_args, replace_rows
from perfsight.ingest.common.columns import counted

ANALYSIS_DB = "analysis.db"
MATRIX, TIME, BANDWIDTH = "CommAnalyzerMatrix", "CommAnalyzerTime", "CommAnalyzerBandwidth"
#: the columns naming a row's operator; step and type may be absent (msprof-analyze reads them as "step")
_KEY_COLUMNS = ("hccl_op_name", "group_name")
_OPTIONAL = ("step", "type")
_MATRIX_COLUMNS = ("step", "type", "hccl_op_name", "group_name", "src_rank", "dst_rank", "transport_type",
                   "transit_size", "transit_time", "bandwidth", "op_name")
#: CommAnalyzerTime's figures -> communication.json's Communication Time Info keys
TIME_KEYS = {"start_timestamp": "Start Timestamp(us)", "elapse_time": "Elapse Time(ms)",
             "transit_time": "Transit Time(ms)", "wait_time": "Wait Time(ms)",
             "synchronization_time": "Synchronization Time(ms)", "idle_time": "Idle Time(ms)"}
#: CommAnalyzerBandwidth's figures of a transport -> communication.json's keys
BANDWIDTH_KEYS = {"transit_size": "Transit Size(MB)", "transit_time": "Transit Time(ms)",
                  "bandwidth": "Bandwidth(GB/s)", "large_packet_ratio": "Large Packet Ratio"}
_PACKET_COLUMNS = ("package_size", "count", "total_duration")
SIZE_DISTRIBUTION = "Size Distribution"
_MATRIX_UNKNOWN = "the rank's communication matrix links are unknown"
_COMPUTED = "the communication operators' figures are computed"


def _query(path: Path, table: str, columns: tuple[str, ...], optional: tuple[str, ...], warnings: list[str],
           consequence: str) -> list[dict]:
    """The rows of ``table`` as {column: value} (``optional`` columns the table lacks read as None); [] when
    the file or the table is absent, and, warned with the ``consequence``, when a column is missing or the
    table cannot be read."""
    if not path.is_file():
        return []
    try:
        con = connect_read_only(path)
        try:
            if not con.execute("SELECT 1 FROM sqlite_master WHERE type IN ('table', 'view') AND name = ?",
                               (table,)).fetchone():
                return []
            present = {row[1] for row in con.execute(f'PRAGMA table_info("{table}")')}
            missing = [column for column in columns if column not in present]
            if missing:
                warnings.append(f"{path}: table {table} lacks the column {missing[0]} (its columns are "
                                f"{', '.join(sorted(present))}); {consequence}")
                return []
            selected = columns + tuple(c for c in optional if c in present)
            found = con.execute(f'SELECT {", ".join(selected)} FROM "{table}"').fetchall()
        finally:
            con.close()
    except sqlite3.DatabaseError as error:
        warnings.append(f"{path}: table {table} not readable ({error}); {consequence}")
        return []
    return [{**dict.fromkeys(optional), **dict(zip(selected, row))} for row in found]


def links(path: Path, warnings: list[str]) -> list:
    """CommAnalyzerMatrix's rows as communication_matrix.json links (hccl_groups.matrix_links); none without
    the file or the table."""
    document: dict = {}
    for row in _query(path, MATRIX, _MATRIX_COLUMNS, (), warnings, _MATRIX_UNKNOWN):
        key = f"{row['hccl_op_name']}@{row['group_name']}"
        document.setdefault(row["step"], {}).setdefault(row["type"], {}).setdefault(key, {})[
            f"{row['src_rank']}-{row['dst_rank']}"] = {
            "Transport Type": row["transport_type"], "Transit Size(MB)": row["transit_size"],
            "Transit Time(ms)": row["transit_time"], "Bandwidth(GB/s)": row["bandwidth"], "Op Name": row["op_name"]}
    return matrix_links(document, f"{path.name} {MATRIX}", warnings)


def _sound(row: dict, numbers: tuple[str, ...], bad: Counter) -> bool:
    """Whether the row names its operator and group by text and its ``numbers`` are finite numbers; the
    first fault is counted in ``bad``."""
    for column in _KEY_COLUMNS:
        if not isinstance(row[column], str) or not row[column]:
            bad[f"{column} not a text"] += 1
            return False
    for column in numbers:
        value = row[column]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            bad[f"{column} not a number"] += 1
            return False
    return True


def _warn(path: Path, table: str, bad: Counter, warnings: list[str]) -> None:
    if bad:
        described = ", ".join(f"{n} x {why}" for why, n in sorted(bad.items()))
        warnings.append(f"{path.name}: table {table}: {counted(sum(bad.values()), 'row')} not read ({described})")


def _key(row: dict) -> tuple:
    return row["step"], row["type"], row["hccl_op_name"], row["group_name"]


def records(path: Path, warnings: list[str]) -> list[Record]:
    """The per-operator records of CommAnalyzerTime and CommAnalyzerBandwidth (module docstring): one per
    sound time row in table order, then one per operator that has bandwidth rows only (no time info)."""
    bad: Counter[str] = Counter()
    times = [row for row in _query(path, TIME, (*_KEY_COLUMNS, *TIME_KEYS), _OPTIONAL, warnings, _COMPUTED)
             if _sound(row, tuple(TIME_KEYS), bad)]
    _warn(path, TIME, bad, warnings)
    bad = Counter()
    bandwidth: dict[tuple, dict] = {}
    for row in _query(path, BANDWIDTH, (*_KEY_COLUMNS, "transport_type", *BANDWIDTH_KEYS, *_PACKET_COLUMNS),
                      _OPTIONAL, warnings, _COMPUTED):
        if not _sound(row, (*BANDWIDTH_KEYS, *_PACKET_COLUMNS), bad):
            continue
        if not isinstance(row["transport_type"], str):
            bad["transport_type not a text"] += 1
            continue
        link = bandwidth.setdefault(_key(row), {}).setdefault(row["transport_type"], {
            **{key: row[column] for column, key in BANDWIDTH_KEYS.items()}, SIZE_DISTRIBUTION: {}})
        if row["count"]:
            link[SIZE_DISTRIBUTION][str(row["package_size"])] = [row["count"], row["total_duration"]]
    _warn(path, BANDWIDTH, bad, warnings)
    found = [_record(_key(row), {REPORTED_TIME: {key: row[column] for column, key in TIME_KEYS.items()}},
                     bandwidth, row["start_timestamp"], row["elapse_time"]) for row in times]
    timed = {_key(row) for row in times}
    return found + [_record(key, {}, bandwidth, None, None) for key in bandwidth if key not in timed]


def _record(key: tuple, info: dict, bandwidth: dict[tuple, dict], start_us, elapse_ms) -> Record:
    step, kind, name, group = key
    number = STEP_KEY.match(step) if isinstance(step, str) else None
    if key in bandwidth:
        info[REPORTED_BANDWIDTH] = bandwidth[key]
    return Record(int(number.group(1)) if number else None, str(kind or ""), name, group,
                  record_ns(start_us, NS_PER_US), record_ns(elapse_ms, NS_PER_MS), info, ANALYSIS_DB)


def with_reported(device: pa.Table, found: list[Record], warnings: list[str]) -> pa.Table:
    """``device`` (torch_npu_db_device.read_device's slices) with each communication operator's record of
    ``found`` added to its ``args`` (module docstring); the operators left without one are counted in
    ``warnings`` when analysis.db had records (their figures are then computed)."""
    rows = np.flatnonzero(pc.equal(device["kind"], COMM_KIND).to_numpy(zero_copy_only=False))
    if not len(rows) or not found:
        return device
    args = device["args"].take(pa.array(rows)).to_pylist()
    groups = [json_object(text).get("Process Group Name") for text in args]
    matched = match(found, device["name"].take(pa.array(rows)).to_pylist(),
                    device["start_ns"].take(pa.array(rows)).to_pylist(), groups)
    missing = sum(record is None for record in matched)
    if missing:
        warnings.append(f"{ANALYSIS_DB}: {counted(missing, 'communication operator')} of {len(rows)} without a "
                        f"{TIME} or {BANDWIDTH} row (same name and group, nearest start): their figures are computed")
    patches = pa.array([json.dumps(record.args()) if record else None for record in matched], pa.string())
    return replace_rows(device, "args", rows, merge_args(pa.array(args, pa.string()), patches))
