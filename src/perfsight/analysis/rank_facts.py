"""What each rank of a run says of itself: its meta facts, and the per-step figures its profiler reported
where perfsight has no step ranges to compute them from.

* ``rank_meta``: each rank's meta, a job's ``rank_meta`` (``ingest/jobs.merge``) or a one-rank run's own
  meta under its rank. Every analysis that reads a rank's own facts (its groups, its matrix links, what it
  lacks, its devices) reads them here.
* ``ranks_without_compute``: the ranks whose reader says their device compute was not recorded (meta
  ``compute_recorded`` false: a torch_npu rank without trace_view.json and kernel_details.csv has only its
  communication operators). Their computation is unknown, not zero: analyses that set communication
  against computation (``breakdown.overlap``) leave them out.
* ``reported_step_trace``: per rank whose steps did not come from trace ranges (meta ``step_source`` other
  than ``trace``: a torch_npu rank kept without trace_view.json, or pruned to what msprof-analyze's cluster
  mode needs) and that carries torch_npu's own step_trace_time.csv rows (meta ``step_trace_time``), those
  rows in ns (microseconds x 1000, rounded), one column per header (``STEP_TRACE_TIME_HEADERS``). The step
  breakdown of such a rank (``breakdown.step_breakdown``) and its rows of msprof-analyze's cluster step
  trace (``cluster_outputs.cluster_step_trace``) both come from here.
"""
from __future__ import annotations

import json

import pyarrow as pa

from perfsight.analysis.job import Job
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables

#: torch_npu's step_trace_time.csv headers (msprof-analyze's cluster_step_trace_time.csv, after Step, Type,
#: Index) and perfsight's columns for them, in the file's order
STEP_TRACE_TIME_HEADERS = {
    "Computing": "computing_ns",
    "Communication(Not Overlapped)": "communication_not_overlapped_ns",
    "Overlapped": "overlapped_ns",
    "Communication": "communication_ns",
    "Free": "free_ns",
    "Stage": "stage_ns",
    "Bubble": "bubble_ns",
    "Communication(Not Overlapped and Exclude Receive)": "communication_not_overlapped_exclude_receive_ns",
    "Preparing": "preparing_ns",
}

#: each rank's facts in a job's summaries (``rank_facts``)
RANK_FACTS = pa.schema([("rank", pa.int32()), ("host", pa.string()), ("meta", pa.string())])

REPORTED_STEP_TRACE = pa.schema(
    [("rank", pa.int32()), ("step", pa.int32())]
    + [(column, pa.int64()) for column in STEP_TRACE_TIME_HEADERS.values()])


def rank_meta(tables: RunTables) -> dict[int, dict[str, str]]:
    """Each rank's meta: a job's ``rank_meta`` (ingest/jobs.merge), or the one run's own under its rank (the
    rank its tracks name, else 0)."""
    meta = tables.meta_dict()
    if meta.get("rank_meta"):
        return {int(rank): facts for rank, facts in json.loads(meta["rank_meta"]).items()}
    ranks = sorted({r if r is not None else 0 for r in tables.tracks.column("rank").to_pylist()})
    return {ranks[0] if ranks else 0: meta}


def rank_facts(tables: RunTables) -> pa.Table:
    """Per rank (schema ``RANK_FACTS``; the ranks of ``rank_meta`` and of the tracks): its ``host`` (its
    perfsight run manifest's; null when it has none) and its ``meta`` (``rank_meta``, a JSON object; empty
    for a rank only the tracks name): a rank's facts as a job's summaries carry them."""
    metas = computed(rank_meta, tables)
    traced = {r if r is not None else 0 for r in tables.tracks.column("rank").to_pylist()}
    rows = []
    for rank in sorted(traced | set(metas)):
        facts = metas.get(rank, {})
        try:
            host = json.loads(facts.get("manifest") or "{}").get("host")
        except (ValueError, AttributeError):
            host = None
        rows.append({"rank": rank, "host": host if isinstance(host, str) and host else None,
                     "meta": json.dumps(facts)})
    return pa.Table.from_pylist(rows, schema=RANK_FACTS)


def job_rank_meta(job: Job) -> dict[int, dict[str, str]]:
    """Each rank's meta in a job (its ``rank_facts``)."""
    return {rank: json.loads(meta) for rank, meta in job.connect().sql("SELECT rank, meta FROM rank_facts").fetchall()}


def meta_items(text: str | None, kind: type) -> list:
    """The items of type ``kind`` (``str``, ``dict``) of a meta fact holding a JSON list (``lacking_files``,
    ``parse_warnings``, ``damage``, ``device_properties``, ``host_info``); none when the fact is empty, not
    JSON or not a list."""
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    return [item for item in value if isinstance(item, kind)] if isinstance(value, list) else []


def ranks_without_compute(tables: RunTables) -> set[int]:
    """The ranks whose meta says ``compute_recorded`` false (module docstring)."""
    return {rank for rank, facts in computed(rank_meta, tables).items() if facts.get("compute_recorded") == "false"}


def _microseconds_ns(value) -> int | None:
    try:
        return round(float(value) * 1000)
    except (TypeError, ValueError):
        return None


def reported_step_trace(tables: RunTables) -> pa.Table:
    """Per rank without step ranges and step of its step_trace_time.csv (module docstring; schema
    ``REPORTED_STEP_TRACE``), sorted by rank and step; a value that is not a number is null."""
    rows = []
    for rank, facts in sorted(computed(rank_meta, tables).items()):
        if facts.get("step_source", "trace") == "trace" or not facts.get("step_trace_time"):
            continue
        for reported in json.loads(facts["step_trace_time"]):
            step = reported.get("Step")
            row = {"rank": rank, "step": step if isinstance(step, int) else None}
            row.update({column: _microseconds_ns(reported.get(header))
                        for header, column in STEP_TRACE_TIME_HEADERS.items()})
            rows.append(row)
    rows.sort(key=lambda row: (row["rank"], row["step"] if row["step"] is not None else -1))
    return pa.Table.from_pylist(rows, schema=REPORTED_STEP_TRACE)
