"""Reading torch_npu's text profile (a ``*_ascend_pt`` / ``*_ascend_ms`` directory with
``ASCEND_PROFILER_OUTPUT/``) into the canonical tables.

Public: ``read_torch_npu_text``. This module assembles the tables; the work is
split: torch_npu_meta (rank, device, world size, communication groups, facts), torch_npu_trace
(trace_view.json: slices, rows, counters, flows), torch_npu_kernels (kernel_details.csv joined to the
device tasks, or standing in for them without a trace), torch_npu_hccl (communication.json's records, and
the HCCL operators from them that the trace and kernel_details.csv lack: what the profiler reported is the
record, the timeline refines it), torch_npu_comm (HCCL operators described for analysis/cluster.py),
torch_npu_steps (steps from the best source, step_trace_time.csv for meta), torch_npu_links (operator <->
task links, flows, memory records' operators), torch_npu_memory (memory_record / operator_memory /
npu_module_mem), ascend_build.RunBuilder (ids, display order, nesting, steps by time, launch flows by
correlation) and ascend_kinds (Ascend's vocabularies).

The other files of the directory are torch_npu's own summaries of the same events (op_statistic.csv,
api_statistic.csv, operator_details.csv, l2_cache.csv): perfsight computes them from the tables (the
cross-check tests compare). A folder holding any file of ``detect.TEXT_FILES`` is read for what it has:
meta ``lacking_files`` lists the others, and a warning says what a missing trace_view.json or
kernel_details.csv costs and where the steps and communication come from instead; a folder with none of
them is an InputError saying what it is and what it lacks. A light read (``files=detect.CLUSTER_FILES``:
``Reader.light``) takes only the folder's profiler info and those files, as if it held nothing else: its
steps and communication as torch_npu reported them, no warning for the files it leaves.

Ids: slice ids are ``id_offset`` + the slice's row, track ids ``track_offset`` + the track's display
position, as read_kineto's, so several ranks can be read one after the other and merged.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.errors import InputError
from perfsight.core.tables import RunTables, conform
from perfsight.ingest.ascend.detect import (
    OUTPUT_DIR,
    TEXT_FILES,
    TIMED_FILES,
    is_torch_npu_dir,
    lacking,
    torch_npu_without_data,
)
from perfsight.ingest.ascend.torch_npu_comm import describe, unlisted
from perfsight.ingest.ascend.torch_npu_hccl import Record
from perfsight.ingest.ascend.torch_npu_hccl import operators as hccl_operators
from perfsight.ingest.ascend.torch_npu_hccl import records as hccl_records
from perfsight.ingest.ascend.torch_npu_kernels import enrich, read_kernels, tasks_from_kernels
from perfsight.ingest.ascend.torch_npu_links import device_tracks, host_tracks, link, memory_operators
from perfsight.ingest.ascend.torch_npu_memory import read_memory
from perfsight.ingest.ascend.torch_npu_meta import read_facts
from perfsight.ingest.ascend.torch_npu_steps import STEP_DEFINITION, add_best_steps, step_trace_rows
from perfsight.ingest.ascend.torch_npu_trace import read_trace
from perfsight.ingest.common.build import RunBuilder
from perfsight.ingest.common.columns import counted

_SLICE_COLUMNS = ("track", "kind", "name", "op_type", "task_type", "start_ns", "dur_ns", "step", "correlation_id",
                  "external_id", "input_shapes", "input_dtypes", "args")


def sources(run_dir: Path, files: tuple[str, ...] = TEXT_FILES) -> list[Path]:
    """The files the tables are built from, of ``files`` (meta ``source_files``, and a cache's fingerprint)."""
    run_dir = Path(run_dir)
    output = run_dir / OUTPUT_DIR
    found = [output / name for name in files if (output / name).is_file()]
    return found + sorted(run_dir.glob("profiler_info*.json")) + sorted(run_dir.glob("profiler_metadata.json"))


def read_torch_npu_text(run_dir: Path, *, rank: int | None = None, id_offset: int = 0, track_offset: int = 0,
                        files: tuple[str, ...] = TEXT_FILES) -> RunTables:
    """The canonical tables of one torch_npu text profile (one rank), from its files of ``OUTPUT_DIR`` named in
    ``files`` (module docstring). ``rank`` overrides the files'."""
    run_dir = Path(run_dir)
    output = run_dir / OUTPUT_DIR

    def present(name: str) -> Path | None:
        return output / name if name in files and (output / name).is_file() else None

    if not is_torch_npu_dir(run_dir):
        raise InputError(f"{run_dir}: {torch_npu_without_data(run_dir) or 'not a torch_npu profile'}; expected "
                         f"{OUTPUT_DIR}/ with any of {', '.join(TEXT_FILES)}")
    facts = read_facts(run_dir, rank, files)
    builder = RunBuilder(warnings=list(facts.warnings), sources=[str(path) for path in sources(run_dir, files)])
    kernels_path = present("kernel_details.csv")
    kernels = read_kernels(kernels_path, builder.warnings) if kernels_path else None
    communication = present("communication.json")
    records = hccl_records(communication, builder.warnings)
    trace_path = present("trace_view.json")
    if trace_path:
        trace = read_trace(trace_path, builder, rank=facts.rank, device=facts.device)
        slices, flows, track_keys = trace.slices, trace.flows, trace.track_keys
        if kernels is not None:
            slices = enrich(slices, kernels, name="kernel_details.csv", warnings=builder.warnings)
    else:
        tasks = kernels if kernels is not None else hccl_operators(records, output / "communication.json",
                                                                   builder.warnings)
        slices = tasks_from_kernels(tasks, builder, rank=facts.rank, device=facts.device)
        flows, track_keys = _no_flows(), {}
    if trace_path or kernels is not None:
        slices = _with_unlisted_operators(slices, records, communication, builder, facts.rank, facts.device,
                                          "trace_view.json" if trace_path else "kernel_details.csv")
    slices = describe(slices, records, facts.groups)
    links = link(slices, flows, track_keys, id_offset, builder.warnings)
    slices = slices.append_column("external_id", links.external_id)
    builder.add_slices({name: slices[name] for name in _SLICE_COLUMNS})
    step_trace = present("step_trace_time.csv")
    step_rows = step_trace_rows(step_trace, builder.warnings) if step_trace else []
    step_source = add_best_steps(builder, slices, from_kernels=kernels is not None, step_rows=step_rows,
                                 run_dir=run_dir if files == TEXT_FILES else None,   # a light read: not PROF_*/
                                 rank=facts.rank,
                                 device=facts.device)
    lacks = lacking(run_dir, files)
    builder.warnings += _lack_warning(lacks, step_source, from_communication=kernels is None and bool(records)
                                      and "trace_view.json" in lacks)
    records_memory = read_memory(output, builder, rank=facts.rank, device=facts.device, files=files)
    tables = builder.finish({"source_format": "torch_npu", "base_time_ns": "", "rank": facts.rank,
                             "world_size": facts.world_size, "device_properties": facts.device_properties,
                             "step_source": step_source, "step_definition": STEP_DEFINITION,
                             "step_trace_time": step_rows or None,
                             "lacking_files": lacks or None,
                             "compute_recorded": trace_path is not None or kernels is not None,
                             **{k: v for k, v in facts.meta.items() if v is not None}},
                            id_offset=id_offset, track_offset=track_offset)
    tables.flows = pa.concat_tables([tables.flows, links.flows])
    tables.memory = _memory(records_memory, slices, links, tables, track_keys, id_offset)
    return tables


def _with_unlisted_operators(slices: pa.Table, records: list[Record], path: Path | None, builder: RunBuilder,
                             rank: int | None, device: int, timeline: str) -> pa.Table:
    """``slices`` and, on the rank's HCCL row, the operators communication.json reports that ``timeline`` (the
    file the slices came from) lacks: what the profiler reported is the record, the timeline refines it
    (a warning counts them)."""
    missing = unlisted(slices, records)
    if not missing or path is None:
        return slices
    added = tasks_from_kernels(hccl_operators(missing, path, builder.warnings), builder, rank=rank, device=device)
    builder.warnings.append(f"{path.name}: {counted(len(missing), 'operator')} it reports not in {timeline}: "
                            "on the timeline from their records (Start Timestamp(us), Elapse Time(ms))")
    return pa.concat_tables([slices, added.select(slices.column_names).cast(slices.schema)])


def _lack_warning(lacks: list[str], step_source: str, *, from_communication: bool) -> list[str]:
    """What the folder's missing timed files cost, and where its steps and communication come from instead
    (``no kernel_details.csv, no trace_view.json: no kernels or operators; steps from step_trace_time.csv,
    communication from communication.json``); [] when it has both timed files."""
    missing = sorted(name for name in TIMED_FILES if name in lacks)   # a light read's lacks hold neither
    if not missing:
        return []
    costs = {("kernel_details.csv",): "no op types, accelerator cores, shapes or Step Id of the device tasks",
             ("trace_view.json",): "no host operators, CANN calls, counters or launch flows; device tasks from "
                                   "kernel_details.csv",
             ("kernel_details.csv", "trace_view.json"): "no kernels or operators"}
    instead = [f"steps from {step_source}" if step_source != "none" else "no steps"]
    if from_communication:
        instead.append("communication from communication.json")
    return [f"{', '.join(f'no {name}' for name in missing)}: {costs[tuple(missing)]}; {', '.join(instead)}"]


def _no_flows() -> pa.Table:
    return pa.table({name: pa.array([], type) for name, type in (
        ("pid", pa.string()), ("tid", pa.string()), ("ts_ns", pa.int64()), ("ph", pa.string()),
        ("cat", pa.string()), ("id", pa.string()), ("file", pa.int32()))})


def _memory(records: pa.Table, slices: pa.Table, links, tables: RunTables, track_keys: dict,
            id_offset: int) -> pa.Table:
    """Memory rows with the operator (slice id) and the host thread (track id) behind each record (the
    thread of the steps when no operator runs)."""
    operator = memory_operators(records, slices, links.nesting) if records.num_rows else np.zeros(0, np.int64)
    local_to_final = _final_tracks(tables.tracks, track_keys)
    tracks = slices["track"].to_numpy()
    main = next((local_to_final[t] for t in host_tracks(slices) if t in local_to_final), None)
    track_ids = [local_to_final.get(int(tracks[row]), main) if row >= 0 else main for row in operator]
    return conform("memory", pa.table({
        "ts_ns": records["ts_ns"], "bytes": records["bytes"], "total_allocated": records["total_allocated"],
        "total_reserved": records["total_reserved"], "device": records["device"],
        "track_id": pc.coalesce(pa.array(track_ids, pa.int32()), device_tracks(tables.tracks, records["device"])),
        "op_slice_id": pa.array([id_offset + row if row >= 0 else None for row in operator], pa.int64()),
    }))


def _final_tracks(tracks: pa.Table, track_keys: dict[tuple[str, str], int]) -> dict[int, int]:
    """Local row -> final track id of the host threads (the builder keeps pid and tid)."""
    threads = tracks.filter(pc.equal(tracks["kind"], "thread"))
    final = {(p, t): i for p, t, i in zip(threads["pid"].to_pylist(), threads["tid"].to_pylist(),
                                          threads["track_id"].to_pylist())}
    return {local: final[key] for key, local in track_keys.items() if key in final}
