"""The steps of a torch_npu text profile, from the best source its folder holds, and torch_npu's own step
trace (step_trace_time.csv) for meta.

Owns the order of the step sources (meta ``step_source`` says which one gave the steps):

1. ``trace``: trace_view.json's ProfilerStep#N ranges (torch_npu_trace makes them ``step`` slices);
2. ``kernel_details Step Id``: without those ranges, the device tasks' kernel_details.csv ``Step Id``: per
   step a ``step`` slice ``Iteration N`` from the first task's start to the last task's end, on the thread
   row ``STEP_TRACK`` (device ``npu:D``), where analysis/step_spans finds steps;
3. ``msprof step_trace CSV``: the step_trace CSV exports of the msprof ``PROF_*/`` directory torch_npu
   writes inside the rank folder (``msprof_dir.step_files``: Iteration ID from Iteration End(us) - Iteration
   Time(us) to Iteration End(us), with their FP/BP phases, on msprof's ``Step Trace`` row);
4. ``step_trace_time.csv``: torch_npu's per-step summary (no times of day: no spans); the rows are meta
   ``step_trace_time`` in every case (``step_trace_rows``: header names as keys, microseconds as floats,
   ``Step`` an integer), which the step breakdown of a rank without tasks is read from;
5. ``none``.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from perfsight.ingest.ascend.ascend_csv import number_rows, numbers, read_csv
from perfsight.ingest.ascend.detect import is_msprof_dir
from perfsight.ingest.ascend.msprof_dir import add_step_csv, step_files
from perfsight.ingest.common.build import RunBuilder, add_steps

#: the thread row of the steps made from kernel_details.csv's Step Id
STEP_TRACK = "Steps (kernel_details.csv Step Id)"
#: meta step_source values, in the order tried
STEP_SOURCES = ("trace", "kernel_details Step Id", "msprof step_trace CSV", "step_trace_time.csv", "none")
_STEP_HEADER = "Step"


def step_trace_rows(path: Path, warnings: list[str]) -> list[dict]:
    """step_trace_time.csv's rows as the file has them: its header names as keys, values as floats
    (microseconds; null where empty), ``Step`` an integer; [] without the file. A row holding a text that is not
    a number is not read (warned)."""
    if not path.is_file():
        return []
    table = read_csv(path, warnings, canonical=False)
    table = number_rows(table, path, warnings, numbers=table.column_names)
    columns = {name: numbers(table[name], pa.int64() if name == _STEP_HEADER else pa.float64())
               for name in table.column_names}
    return pa.table(columns).to_pylist() if columns else []


def add_best_steps(builder: RunBuilder, slices: pa.Table, *, from_kernels: bool, step_rows: list[dict],
                   run_dir: Path | None, rank: int | None, device: int) -> str:
    """Add the steps of the best source (module docstring) to ``builder`` and say which it was. ``slices``
    are the rank's slices (torch_npu_trace.Trace layout, ``role`` column); ``from_kernels``: their device
    tasks carry kernel_details.csv's Step Id; ``run_dir`` the rank folder (its msprof ``PROF_*/``; None: not
    looked into)."""
    npu = f"npu:{device}"
    if pc.any(pc.equal(slices["kind"], "step")).as_py():
        return STEP_SOURCES[0]
    tasks = slices.filter(pc.and_(pc.is_in(slices["role"], pa.array(["device", "communication"])),
                                  pc.is_valid(slices["step"])))
    if from_kernels and tasks.num_rows:
        spans = _spans(tasks)
        track = builder.track("thread", npu, STEP_TRACK, rank=rank, tid="kernel_details steps")
        add_steps(builder, track, spans)
        return STEP_SOURCES[1]
    profs = sorted(run_dir.glob("PROF_*")) if run_dir is not None else []
    files = [file for prof in profs if is_msprof_dir(prof) for file in step_files(prof)]
    if files:
        add_step_csv(files, builder, device, {device: rank})
        return STEP_SOURCES[2]
    return STEP_SOURCES[3] if step_rows else STEP_SOURCES[4]


def _spans(tasks: pa.Table) -> pa.Table:
    """Per step: the first task's start and the last task's end (columns add_steps takes), by step."""
    ends = pc.add(tasks["start_ns"], tasks["dur_ns"])
    grouped = pa.table({"step": tasks["step"], "start_ns": tasks["start_ns"], "end_ns": ends}).group_by("step") \
        .aggregate([("start_ns", "min"), ("end_ns", "max")]).sort_by("step")
    return pa.table({"step": grouped["step"], "start_ns": grouped["start_ns_min"], "end_ns": grouped["end_ns_max"],
                     "fp_ns": pa.nulls(grouped.num_rows, pa.int64()), "bp_ns": pa.nulls(grouped.num_rows, pa.int64())})
