"""Device slices of a torch_npu or msprof profiler database: TASK (with COMPUTE_TASK_INFO, TASK_PMU_INFO and
COMMUNICATION_SCHEDULE_TASK_INFO), COMMUNICATION_OP and COMMUNICATION_TASK_INFO, as source columns.

Owns which device rows become which slices (the kind of a hardware task type is ascend_kinds.task_kind's),
the communication groups (members, group-local to global ranks) and the ``args`` of device slices.

* A TASK row with a COMPUTE_TASK_INFO row is a computing task: kind ``kernel``, ``task_type`` the info's
  task type (AI_CORE, AI_VECTOR_CORE, MIX_AIC, MIX_AIV, AI_CPU, DSA_SQE, ...), ``name`` the kernel name,
  ``op_type`` its OP Type, input shapes/dtypes from the info, PMU metrics (TASK_PMU_INFO) in ``args``.
* A COMMUNICATION_OP row is one collective or send/recv as the device ran it (msprof's communication
  operator, the unit of msprof-analyze's hccl_sum and step trace): kind ``comm``, ``task_type``
  ``HCCL``, on the stream its HCCL tasks ran on, with the collective metadata analysis/cluster.py reads
  in ``args`` (``Collective name``, ``dtype``, ``In msg nelems`` and ``Out msg nelems`` = HCCL's
  ``count``, ``Group size``, ``Process Group Name`` = the HCCL comm name, ``Process Group Desc`` = the
  framework's group name, ``Process Group Ranks`` as global ranks, ``Src Rank``/``Dst Rank`` for p2p).
  Its ``op_type`` is the OP Type (``hcom_allReduce_``); where the database writes ``N/A`` there (level0
  profiles), the name without its instance suffix (``hcom_allReduce__576_0_1`` -> ``hcom_allReduce_``).
* A TASK row with a COMMUNICATION_TASK_INFO row is one step of such an operator (Notify_Wait, Memcpy,
  Reduce_Inline...) on one HCCL plane: kind ``other`` (the operator already counts that time as
  communication; counting its steps too would count it twice), on a track per (stream, plane), with the
  link facts (src/dst rank, transport, size, link type) in ``args``; level0 profiles name no plane
  (4294967295): their steps share one track per stream (``plane`` -1).
* A TASK row with a COMMUNICATION_SCHEDULE_TASK_INFO row (communication HCCL scheduled on the AI CPU), or with
  a COMPUTE_TASK_INFO row named as an HCCL operator (``hcom_...``), is communication: kind ``comm``, named and
  typed by its info, its collective (``Collective name``) in ``args``; ``other`` when its launch also made a
  COMMUNICATION_OP row (the operator counts it).
* A slice named by a bare number (``1.83976461015564e+19``, a name hash the profiler did not resolve) is
  named by its op type, else its task type, with a warning.
* A TASK row without info that encloses tasks with info (same device, stream, task id and connection,
  ``contextId`` 4294967295 while theirs is a real context) is the launch container of an FFTS+ or HCCL
  task: dropped, as torch_npu's own text export drops it (its time is its sub-tasks' time).
* Any other TASK row: ``ascend_kinds.task_kind`` of its hardware task type (MEMCPY_ASYNC -> ``memcpy``,
  EVENT_RECORD / EVENT_WAIT -> ``sync``, PROFILING_ENABLE -> ``other``, ...), which is its ``task_type``.

Group ranks (hccl_groups): a group is keyed by ``group_hash`` of its communicator name (the name
communication.json and analysis.db use). META_DATA ``parallel_group_info`` (torch_npu >= 2.5:
communicator -> group_name, group_rank, global_ranks) maps a group-local rank to a global rank. Without it
the group's members are the group-local ranks its HCCL tasks name (src/dst rank) and analysis.db's
matrix links, kept group-local and marked so (``Process Group Ranks Local``), never taken as global.
"""
from __future__ import annotations

import json

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.ingest.ascend.ascend_csv import dtypes_json, shapes_json
from perfsight.ingest.ascend.ascend_kinds import (
    HCCL_NAME_PREFIX,
    HCCL_OP_SUFFIX,
    collective_args,
    task_kind,
    task_kinds,
)
from perfsight.ingest.ascend.hccl_groups import Group, group_hash
from perfsight.ingest.ascend.torch_npu_db_host import INT, TEXT, enum_table, numbered
from perfsight.ingest.ascend.torch_npu_db_source import Database
from perfsight.ingest.common.columns import counted

INVALID = 4294967295          # Ascend's "no value" for 32-bit ids (contextId, modelId, ranks, planes)
#: a name that is a bare number: a name hash the profiler did not resolve (``1.83976461015564e+19``)
UNRESOLVED_NAME = r"^[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?$"


def read_device(db: Database, con: duckdb.DuckDBPyConnection,
                known: dict[str, Group]) -> tuple[pa.Table, dict[str, Group]]:
    """The device slices in source order (TASK rows, then COMMUNICATION_OP rows), as source columns:
    ``device``, ``stream``, ``plane`` (HCCL sub-tasks), ``name``, ``op_type``, ``kind``, ``task_type``,
    ``start_ns``, ``dur_ns``, ``connection_id``, ``input_shapes``, ``input_dtypes``, ``args``; and the
    communication groups by name (``_groups``). ``known`` holds the groups parallel_group_info maps and those
    analysis.db's links name (group-local), by name. ``con`` has ``strings`` registered."""
    con.register("task", numbered(db.read("TASK", {
        "start_ns": ("startNs", INT), "end_ns": ("endNs", INT), "device": ("deviceId", INT),
        "connection_id": ("connectionId", INT), "global_task_id": ("globalTaskId", INT),
        "type": ("taskType", INT), "context_id": ("contextId", INT), "stream": ("streamId", INT),
        "task_id": ("taskId", INT), "model_id": ("modelId", INT)})))
    con.register("compute", db.read("COMPUTE_TASK_INFO", {
        "global_task_id": ("globalTaskId", INT), "name": ("name", INT), "block_dim": ("blockDim", INT),
        "mix_block_dim": ("mixBlockDim", INT), "type": ("taskType", INT), "op_type": ("opType", INT),
        "input_formats": ("inputFormats", INT), "input_dtypes": ("inputDataTypes", INT),
        "input_shapes": ("inputShapes", INT), "output_formats": ("outputFormats", INT),
        "output_dtypes": ("outputDataTypes", INT), "output_shapes": ("outputShapes", INT),
        "attr_info": ("attrInfo", INT), "wait_ns": ("waitNs", INT)}))
    con.register("pmu", db.read("TASK_PMU_INFO", {
        "global_task_id": ("globalTaskId", INT), "name": ("name", INT), "value": ("value", pa.float64())}))
    con.register("schedule", db.read("COMMUNICATION_SCHEDULE_TASK_INFO", {
        "global_task_id": ("globalTaskId", INT), "name": ("name", INT), "type": ("taskType", INT),
        "op_type": ("opType", INT)}))
    con.register("comm_task", db.read("COMMUNICATION_TASK_INFO", {
        "global_task_id": ("globalTaskId", INT), "name": ("name", INT), "type": ("taskType", INT),
        "plane": ("planeId", INT), "group_name": ("groupName", INT), "notify_id": ("notifyId", INT),
        "rdma_type": ("rdmaType", INT), "src_rank": ("srcRank", INT), "dst_rank": ("dstRank", INT),
        "transport": ("transportType", INT), "size": ("size", INT), "data_type": ("dataType", INT),
        "link_type": ("linkType", INT), "op_id": ("opId", INT)}))
    con.register("comm_op", numbered(db.read("COMMUNICATION_OP", {
        "name": ("opName", INT), "start_ns": ("startNs", INT), "end_ns": ("endNs", INT),
        "connection_id": ("connectionId", INT), "group_name": ("groupName", INT), "op_id": ("opId", INT),
        "relay": ("relay", INT), "retry": ("retry", INT), "data_type": ("dataType", INT),
        "alg_type": ("algType", INT), "count": ("count", pa.float64()), "op_type": ("opType", INT),
        "wait_ns": ("waitNs", INT)})))
    for table in ("ENUM_HCCL_DATA_TYPE", "ENUM_HCCL_TRANSPORT_TYPE", "ENUM_HCCL_LINK_TYPE", "ENUM_HCCL_RDMA_TYPE"):
        con.register(table.lower(), enum_table(db, table))
    hardware = con.sql("SELECT DISTINCT s.value FROM task t JOIN strings s ON s.id = t.type").fetchall()
    con.register("task_kinds", pa.table({"type_name": pa.array([value for (value,) in hardware], TEXT),
                                         "kind": pa.array([task_kind(value) for (value,) in hardware], TEXT)}))
    tasks = con.sql(_TASK_SQL.format(invalid=INVALID)).to_arrow_table()
    tasks = tasks.set_column(tasks.schema.get_field_index("input_shapes"), "input_shapes",
                             shapes_json(tasks["input_shapes"]))
    tasks = tasks.set_column(tasks.schema.get_field_index("input_dtypes"), "input_dtypes",
                             dtypes_json(tasks["input_dtypes"]))
    ops = con.sql(_OP_SQL.format(invalid=INVALID, suffix=HCCL_OP_SUFFIX)).to_arrow_table()
    groups = _groups(ops, known)
    tasks = _with_hccl_kinds(_with_resolved_names(tasks, db), ops)
    return pa.concat_tables([tasks, _with_op_args(_with_resolved_names(ops, db), groups)]), groups


def _with_resolved_names(slices: pa.Table, db: Database) -> pa.Table:
    """A slice named by a bare number (``1.83976461015564e+19``: a name hash the profiler did not resolve,
    printed as a float) is named by its op type, else its task type; a warning counts them."""
    numeric = pc.match_substring_regex(pc.fill_null(slices["name"], ""), UNRESOLVED_NAME)
    count = pc.sum(numeric).as_py() or 0
    if not count:
        return slices
    example = slices["name"].filter(numeric)[0].as_py()
    op_type = pc.if_else(pc.match_substring_regex(pc.fill_null(slices["op_type"], ""), UNRESOLVED_NAME),
                         None, slices["op_type"])
    db.warnings.append(f"{db.path.name}: {counted(count, 'device slice')} named by a bare number (e.g. {example}, "
                       "a name the profiler did not resolve): named by their op type or task type instead")
    return slices.set_column(slices.schema.get_field_index("name"), "name", pc.if_else(
        numeric, pc.coalesce(op_type, slices["task_type"], pa.scalar("", TEXT)), slices["name"]))


def _with_hccl_kinds(tasks: pa.Table, ops: pa.Table) -> pa.Table:
    """A computing task that is an HCCL operator by its name (``ascend_kinds.task_kind``: AI CPU-scheduled
    communication) is ``comm``, with its collective in ``args``; a communication task whose launch also made a
    COMMUNICATION_OP row is a part of that operator, which already counts its time: ``other``."""
    kind = pc.if_else(pc.equal(tasks["kind"], "kernel"), task_kinds(tasks["task_type"], tasks["name"]), tasks["kind"])
    part = pc.fill_null(pc.is_in(tasks["connection_id"], value_set=ops["connection_id"]), False)
    kind = pc.if_else(pc.and_(pc.equal(kind, "comm"), part), "other", kind)
    tasks = tasks.set_column(tasks.schema.get_field_index("kind"), "kind", kind)
    operators = pc.starts_with(pc.utf8_upper(pc.fill_null(tasks["name"], "")), HCCL_NAME_PREFIX)
    communicating = pc.indices_nonzero(pc.and_(pc.equal(kind, "comm"), operators)).to_pylist()
    if not communicating:
        return tasks
    args = tasks["args"].to_pylist()
    for row, name in zip(communicating, tasks["name"].take(communicating).to_pylist()):
        args[row] = json.dumps({**json.loads(args[row] or "{}"), **collective_args(name, None, None, None, None, [])})
    return tasks.set_column(tasks.schema.get_field_index("args"), "args", pa.array(args, TEXT))


def _groups(ops: pa.Table, known: dict[str, Group]) -> dict[str, Group]:
    """``known`` and the groups of the operators: a known group by the hash of the operator's communicator,
    else the group-local ranks its HCCL tasks name (marked local); a local group gets those ranks too."""
    groups = dict(known)
    for communicator, members in zip(ops["group"].to_pylist(), ops["local_ranks"].to_pylist()):
        if communicator is None:
            continue
        name = group_hash(communicator)
        group = groups.setdefault(name, Group([], True, "COMMUNICATION_TASK_INFO (group-local ranks: no "
                                                        "parallel_group_info entry)"))
        group.communicator = group.communicator or communicator
        if group.local:
            group.ranks = sorted(set(group.ranks) | set(members or ()))
    return groups


def _with_op_args(ops: pa.Table, groups: dict[str, Group]) -> pa.Table:
    """Communication operators: the collective metadata analysis/cluster.py reads, as ``args``; a send's or
    recv's peer is the rank of its HCCL tasks that is not this rank's group-local rank."""
    args = []
    for row in ops.select(["name", "group", "op_ranks", "data_type", "count", "facts"]).to_pylist():
        name = group_hash(row["group"]) if row["group"] is not None else None
        group = groups.get(name) if name else None
        facts = collective_args(row["name"], row["data_type"], row["count"], name, group.name if group else None,
                                group.ranks if group else [], group.local if group else False)
        collective = facts["Collective name"]
        if collective in ("send", "recv") and group is not None and group.group_rank is not None:
            peers = [local for local in sorted(set(row["op_ranks"] or [])) if local != group.group_rank]
            peer = (peers[0] if group.local else group.global_rank(peers[0])) if peers else None
            if peer is not None:
                facts["Dst Rank" if collective == "send" else "Src Rank"] = peer
        facts.update(json.loads(row["facts"]))
        args.append(json.dumps({key: value for key, value in facts.items() if value is not None}))
    return ops.drop_columns(["group", "local_ranks", "op_ranks", "data_type", "count", "facts"]).append_column(
        "args", pa.array(args, TEXT))


_TASK_SQL = """
WITH infos AS (SELECT DISTINCT device, stream, task_id, connection_id
               FROM task WHERE coalesce(context_id, {invalid}) <> {invalid}),
metrics AS (SELECT p.global_task_id, json_group_object(s.value, p.value) AS pmu
            FROM pmu p JOIN strings s ON s.id = p.name GROUP BY ALL),
rows AS (
    SELECT t.*, h.value AS hardware, c.global_task_id IS NOT NULL OR s.global_task_id IS NOT NULL AS computing,
           s.global_task_id IS NOT NULL AS scheduled, m.global_task_id IS NOT NULL AS communicating,
           coalesce(c.name, s.name) AS kernel_name, coalesce(c.type, s.type) AS compute_type,
           coalesce(c.op_type, s.op_type) AS op_type, c.block_dim, c.mix_block_dim,
           c.input_formats, c.input_dtypes, c.input_shapes, c.output_formats, c.output_dtypes,
           c.output_shapes, c.attr_info, c.wait_ns,
           m.name AS op_name, m.type AS step_type, m.plane, m.group_name, m.notify_id, m.rdma_type, m.src_rank,
           m.dst_rank, m.transport, m.size, m.data_type, m.link_type, m.op_id
    FROM task t
    LEFT JOIN compute c USING (global_task_id)
    LEFT JOIN schedule s USING (global_task_id)
    LEFT JOIN comm_task m USING (global_task_id)
    LEFT JOIN strings h ON h.id = t.type
)
SELECT r.device, r.stream, CASE WHEN communicating THEN coalesce(nullif(r.plane, {invalid}), -1) END AS plane,
       coalesce(CASE WHEN computing THEN cn.value WHEN communicating THEN mn.value END, r.hardware, '') AS name,
       CASE WHEN computing THEN co.value WHEN communicating THEN mn.value ELSE r.hardware END AS op_type,
       CASE WHEN scheduled THEN 'comm' WHEN computing THEN 'kernel' WHEN communicating THEN 'other'
            ELSE coalesce(k.kind, 'other') END AS kind,
       CASE WHEN computing THEN ct.value ELSE r.hardware END AS task_type,
       r.start_ns, greatest(r.end_ns - r.start_ns, 0) AS dur_ns, r.connection_id,
       CASE WHEN computing THEN cs.value END AS input_shapes,
       CASE WHEN computing THEN cd.value END AS input_dtypes,
       nullif(json_merge_patch('{{}}', json_object(
           'Task Id', r.task_id, 'Stream Id', r.stream, 'Context Id', nullif(r.context_id, {invalid}),
           'Model Id', nullif(r.model_id, {invalid}), 'Hardware Task Type', r.hardware,
           'Block Dim', r.block_dim, 'Mix Block Dim', r.mix_block_dim, 'Input Formats', cf.value,
           'Output Shapes', replace(os.value, '"', ''), 'Output Data Types', od.value, 'Output Formats', of.value,
           'Attr Info', nullif(ai.value, 'N/A'), 'Wait Time(ns)', r.wait_ns,
           'plane id', r.plane, 'group', g.value, 'notify id', r.notify_id, 'rdma type', rt.name,
           'src rank', nullif(r.src_rank, {invalid}), 'dst rank', nullif(r.dst_rank, {invalid}),
           'transport type', tt.name, 'size(Byte)', r.size, 'data type', dt.name, 'link type', lt.name,
           'op id', r.op_id, 'op name', mo.value, 'pmu', p.pmu)), '{{}}') AS args
FROM rows r
LEFT JOIN task_kinds k ON k.type_name = r.hardware
LEFT JOIN metrics p USING (global_task_id)
LEFT JOIN strings cn ON cn.id = r.kernel_name
LEFT JOIN strings co ON co.id = r.op_type
LEFT JOIN strings ct ON ct.id = r.compute_type
LEFT JOIN strings cs ON cs.id = r.input_shapes
LEFT JOIN strings cd ON cd.id = r.input_dtypes
LEFT JOIN strings cf ON cf.id = r.input_formats
LEFT JOIN strings os ON os.id = r.output_shapes
LEFT JOIN strings od ON od.id = r.output_dtypes
LEFT JOIN strings of ON of.id = r.output_formats
LEFT JOIN strings ai ON ai.id = r.attr_info
LEFT JOIN strings mn ON mn.id = r.step_type
LEFT JOIN strings mo ON mo.id = r.op_name
LEFT JOIN strings g ON g.id = r.group_name
LEFT JOIN enum_hccl_rdma_type rt ON rt.id = r.rdma_type
LEFT JOIN enum_hccl_transport_type tt ON tt.id = r.transport
LEFT JOIN enum_hccl_data_type dt ON dt.id = r.data_type
LEFT JOIN enum_hccl_link_type lt ON lt.id = r.link_type
WHERE computing OR communicating OR coalesce(r.context_id, {invalid}) <> {invalid}
   OR NOT EXISTS (SELECT 1 FROM infos i WHERE i.device = r.device AND i.stream = r.stream
                  AND i.task_id = r.task_id AND i.connection_id = r.connection_id)
ORDER BY r.row
"""

_OP_SQL = """
WITH steps AS (
    SELECT m.op_id, t.device, t.stream, m.src_rank, m.dst_rank
    FROM comm_task m JOIN task t USING (global_task_id)
), placed AS (
    SELECT op_id, min(device) AS device, min(stream) AS stream,
           list(DISTINCT src_rank) FILTER (WHERE src_rank <> {invalid}) AS sources,
           list(DISTINCT dst_rank) FILTER (WHERE dst_rank <> {invalid}) AS targets
    FROM steps GROUP BY op_id
), launch_stream AS (   -- an operator without sub-tasks: the stream of the task its launch created
    SELECT connection_id, min(device) AS device, min(stream) AS stream FROM task GROUP BY connection_id
), group_members AS (
    SELECT o.group_name, list(DISTINCT r) AS ranks
    FROM comm_op o JOIN placed p USING (op_id), unnest(list_concat(p.sources, p.targets)) AS u(r)
    GROUP BY o.group_name
)
SELECT coalesce(p.device, l.device, 0) AS device, coalesce(p.stream, l.stream, -1) AS stream,
       NULL::BIGINT AS plane, coalesce(n.value, '') AS name,
       CASE WHEN ot.value IS NULL OR ot.value IN ('', 'N/A', 'NA') THEN regexp_replace(n.value, '{suffix}', '')
            ELSE ot.value END AS op_type, 'comm' AS kind,
       'HCCL' AS task_type, o.start_ns, greatest(o.end_ns - o.start_ns, 0) AS dur_ns, o.connection_id,
       NULL::VARCHAR AS input_shapes, NULL::VARCHAR AS input_dtypes,
       g.value AS "group", gm.ranks AS local_ranks, list_distinct(list_concat(p.sources, p.targets)) AS op_ranks,
       dt.name AS data_type,
       o.count::BIGINT AS count, json_merge_patch('{{}}', json_object(
           'group_name', g.value, 'data_type', dt.name, 'alg_type', a.value, 'count', o.count::BIGINT,
           'relay', o.relay, 'retry', o.retry, 'wait_ns', o.wait_ns, 'op id', o.op_id)) AS facts
FROM comm_op o
LEFT JOIN placed p USING (op_id)
LEFT JOIN launch_stream l USING (connection_id)
LEFT JOIN group_members gm USING (group_name)
LEFT JOIN strings n ON n.id = o.name
LEFT JOIN strings ot ON ot.id = o.op_type
LEFT JOIN strings g ON g.id = o.group_name
LEFT JOIN strings a ON a.id = o.alg_type
LEFT JOIN enum_hccl_data_type dt ON dt.id = o.data_type
ORDER BY o.row
"""
