"""Holistic Trace Analysis' conventions, replicated on perfsight's tables so its reference outputs
(../shared/data/kineto/hta_reference/) can be compared apples to apples.

``hta_view(tables)`` returns the tables as HTA 0.6.1 sees them:

* timestamps rounded to whole microseconds as HTA does: it parses ``ts`` as a float64 of microseconds (a
  quarter-us grid for epoch-sized values), then start = ceil(ts), end = floor(ts + dur), so an event shorter
  than 1 us gets 0 or -1 us (HTA issue #317). Integer-us traces are unchanged;
* with two or more distinct ProfilerStep#N names, only host events starting before the last ProfilerStep
  starts are kept, and only the device tasks whose launching call (same correlation id) is kept
  (``include_last_profiler_step=False``);
* with ``sync_as_device_work``, the ``cuda_sync`` events on streams (Stream Sync, Context Sync, ...) become
  device tasks of type MEMORY: HTA counts every event whose args carry a ``stream`` other than -1 as GPU work
  (Context Sync's 4294967295 included) (neither COMPUTATION nor
  COMMUNICATION), which lengthens its kernel time and non-compute time.

A dataset of several ranks (one file each) is read one file per rank and concatenated.

``REFERENCE`` maps each dataset folder of hta_reference/ to its trace file(s), from that README.
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from perfsight.core.tables import RunTables

REFERENCE = {
    "trace_compare_base": ["hta/trace_compare/base/base.json.gz"],
    "trace_compare_test": ["hta/trace_compare/test/test.json.gz"],
    "cp_simple_add": ["hta/critical_path/simple_add/benchmark_result_493459_1694039959_trace.json.gz"],
    "cp_alexnet": ["hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"],
    "event_sync": ["hta/critical_path/cuda_event_sync/event_sync_trace.json.gz"],
    "triton": ["hta/triton_example/triton_example.json.gz"],
    "amd_mi250": ["hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"],
    "gpu_user_annotation": ["hta/with_gpu_user_annotation/step_based_trace_2543932.json.gz"],
    "trace_filter_2rank": ["hta/trace_filter/sampled_rank-0.json.gz", "hta/trace_filter/sampled_rank-1.json.gz"],
    "nccl_data": ["hta/nccl_parser_config/nccl_data.json.gz"],
    "ns_resolution": ["hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"],
    "negative_queue_length": ["hta/negative_queue_length_values_check/rank0.json.gz"],
    "trace_diff_control": ["hta/trace_diff/control/control.json.gz"],
    "trace_diff_test": ["hta/trace_diff/test/test.json.gz"],
    "df_index_resolver": ["hta/df_index_resolver/df_index_resolver.json.gz"],
    "kineto_resnet50_w0": ["kineto_tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"],
}

_CACHE: dict[str, RunTables] = {}


def load(shared_data: Path, dataset: str) -> RunTables:
    """The dataset's traces read by perfsight (memoised for the test session)."""
    if dataset not in _CACHE:
        from perfsight.ingest.kineto.reader import read_kineto

        parts, slices, tracks = [], 0, 0
        for path in REFERENCE[dataset]:
            part = read_kineto([shared_data / "kineto" / path], id_offset=slices, track_offset=tracks)
            slices, tracks = slices + part.slices.num_rows, tracks + part.tracks.num_rows
            parts.append(part)
        _CACHE[dataset] = parts[0] if len(parts) == 1 else RunTables(**{
            name: pa.concat_tables([getattr(p, name) for p in parts]) for name, _ in parts[0].items()})
    return _CACHE[dataset]


_HTA_SLICES = """
WITH us AS (          -- HTA's float64 microseconds
    SELECT s.*,   -- the float64 nearest the decimal ts, as parsing the JSON gives
           ((s.start_ns - $base) // 1000)::DOUBLE + ((s.start_ns - $base) % 1000)::DOUBLE / 1000 AS ts_us,
           s.dur_ns::DOUBLE / 1000 AS dur_us,
           coalesce(t.rank, 0) AS rank, t.kind AS track_kind
    FROM slices s JOIN tracks t USING (track_id)
), rounded AS (
    SELECT * EXCLUDE (start_ns, dur_ns, ts_us, dur_us, kind),
           CASE WHEN $sync AND kind = 'sync' AND track_kind = 'stream'
                     AND coalesce(json_extract(args, '$.stream')::BIGINT, -1) <> -1 THEN 'memset' ELSE kind END AS kind,
           $base + ceil(ts_us)::BIGINT * 1000 AS start_ns, $base + floor(ts_us + dur_us)::BIGINT * 1000 AS end_ns
    FROM us
), cut AS (   -- the last ProfilerStep's start per rank, when HTA drops it
    SELECT rank, max(start_ns) AS last_start FROM rounded WHERE kind = 'step' GROUP BY rank
    HAVING (SELECT count(DISTINCT name) FROM slices WHERE kind = 'step') >= 2
), host AS (
    SELECT r.* FROM rounded r LEFT JOIN cut c USING (rank)
    WHERE r.track_kind <> 'stream' AND (c.last_start IS NULL OR r.start_ns < c.last_start)
), device AS (
    SELECT r.* FROM rounded r LEFT JOIN cut c USING (rank)
    WHERE r.track_kind = 'stream' AND (c.last_start IS NULL OR EXISTS (
        SELECT 1 FROM host h WHERE h.rank = r.rank AND h.correlation_id = r.correlation_id))
)
SELECT * EXCLUDE (end_ns, rank, track_kind), end_ns - start_ns AS dur_ns FROM host
UNION ALL
SELECT * EXCLUDE (end_ns, rank, track_kind), end_ns - start_ns AS dur_ns FROM device
"""


def hta_view(tables: RunTables, *, sync_as_device_work: bool = False) -> RunTables:
    """``tables`` with HTA's rounding and last-step filter applied (see the module docstring)."""
    base = tables.meta_dict().get("base_time_ns") or "0"
    base = json.loads(base)
    base = base[0] if isinstance(base, list) else base     # traces of one job share their base
    params = {"base": int(base or 0), "sync": sync_as_device_work}
    slices = tables.connect().sql(_HTA_SLICES, params=params).to_arrow_table()
    slices = slices.select(tables.slices.schema.names).cast(tables.slices.schema)
    return RunTables(slices=slices, tracks=tables.tracks, counters=tables.counters, flows=tables.flows,
                     memory=tables.memory, meta=tables.meta)


_VIEWS: dict[tuple[str, bool], RunTables] = {}


def view(shared_data: Path, dataset: str, *, sync_as_device_work: bool = False) -> RunTables:
    """``hta_view`` of the dataset, memoised for the test session."""
    key = (dataset, sync_as_device_work)
    if key not in _VIEWS:
        _VIEWS[key] = hta_view(load(shared_data, dataset), sync_as_device_work=sync_as_device_work)
    return _VIEWS[key]


def reference(shared_data: Path, dataset: str, name: str):
    """One HTA reference CSV as a pandas-free list of dicts (numbers as float, empty as None)."""
    import csv
    import gzip

    path = shared_data / "kineto" / "hta_reference" / dataset / name
    if not path.exists():
        return None
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt", newline="") as fh:
        rows = list(csv.DictReader(fh))

    def value(v):
        if v == "":
            return None
        try:
            return float(v)
        except ValueError:
            return v

    return [{k: value(v) for k, v in row.items()} for row in rows]


def as_rows(table: pa.Table) -> list[dict]:
    return table.to_pylist()
