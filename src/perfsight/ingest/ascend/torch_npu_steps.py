"""The steps of a torch_npu text profile, from the best source its folder holds, and torch_npu's own step
trace (step_trace_time.csv) for meta.

Owns the order of the step sources (meta ``step_source`` says which one gave the steps):

1. ``trace``: trace_view.json's ProfilerStep#N ranges (torch_npu_trace makes them ``step`` slices);
2. ``kernel_details Step Id``: without those ranges, the device tasks' kernel_details.csv ``Step Id``: per
   step a ``step`` slice ``Iteration N`` from the first task's start, less the step's ``Preparing`` where
   step_trace_time.csv reports one, to the last task's end, on the thread row ``STEP_TRACK`` (device
   ``npu:D``), where analysis/step_spans finds steps. One definition of a step for every rank of a job: from
   the step's start (its ProfilerStep range's, or its first task's less the time torch_npu reports before
   it) to its end, step_trace_time.csv's Stage + Preparing. torch_npu's own step_trace_time.csv is the
   record: when a step's task span (first task to last) and the Stage reported for it differ by more than
   ``STEP_AGREEMENT`` of the Stage (a truncated kernel_details.csv), the tasks give no steps, the reported
   ones stand (source 4) and a warning names both figures;
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
from perfsight.ingest.ascend.torch_npu_hccl import NS_PER_US
from perfsight.ingest.common.build import RunBuilder, add_steps

#: the thread row of the steps made from kernel_details.csv's Step Id
STEP_TRACK = "Steps (kernel_details.csv Step Id)"
#: meta step_source values, in the order tried
STEP_SOURCES = ("trace", "kernel_details Step Id", "msprof step_trace CSV", "step_trace_time.csv", "none")
_STEP_HEADER = "Step"
#: kernel_details.csv's steps stand for step_trace_time.csv's when each step's task span is within this share
#: of the Stage reported for it
STEP_AGREEMENT = 0.10
#: what a step of a torch_npu rank is, whichever file gives it (meta ``step_definition``, said in the report)
STEP_DEFINITION = ("a step runs from its start (its ProfilerStep range's, or its first device task's less the "
                   "Preparing torch_npu reports for it) to its end: step_trace_time.csv's Stage + Preparing")


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
        reported = {row[_STEP_HEADER]: row for row in step_rows if row.get(_STEP_HEADER) is not None}
        disagreements = _disagreements(spans, reported)
        if disagreements:
            builder.warnings.append(
                f"kernel_details.csv and step_trace_time.csv disagree beyond {STEP_AGREEMENT:.0%} on "
                f"{'; '.join(disagreements)}: the steps are step_trace_time.csv's (no times of day), the tasks "
                "keep their Step Id")
            return STEP_SOURCES[3]
        track = builder.track("thread", npu, STEP_TRACK, rank=rank, tid="kernel_details steps")
        add_steps(builder, track, _with_preparing(spans, reported))
        return STEP_SOURCES[1]
    profs = sorted(run_dir.glob("PROF_*")) if run_dir is not None else []
    files = [file for prof in profs if is_msprof_dir(prof) for file in step_files(prof)]
    if files:
        add_step_csv(files, builder, device, {device: rank})
        return STEP_SOURCES[2]
    return STEP_SOURCES[3] if step_rows else STEP_SOURCES[4]


def _disagreements(spans: pa.Table, reported: dict[int, dict]) -> list[str]:
    """Each step whose task span (``spans``) and reported Stage differ by more than ``STEP_AGREEMENT`` of the
    Stage, said with both figures (``step 50: tasks 5.169 ms, Stage 131.912 ms``)."""
    said = []
    for step, start, end in zip(*(spans[name].to_pylist() for name in ("step", "start_ns", "end_ns"))):
        stage = (reported.get(step) or {}).get("Stage")
        if stage and abs(end - start - stage * NS_PER_US) > STEP_AGREEMENT * stage * NS_PER_US:
            said.append(f"step {step}: tasks {(end - start) / 1e6:.3f} ms, Stage {stage / 1e3:.3f} ms")
    return said


def _with_preparing(spans: pa.Table, reported: dict[int, dict]) -> pa.Table:
    """``spans`` with each step's start moved back by the Preparing its reported row gives (module docstring)."""
    preparing = [round(((reported.get(step) or {}).get("Preparing") or 0) * NS_PER_US)
                 for step in spans["step"].to_pylist()]
    return spans.set_column(spans.schema.get_field_index("start_ns"), "start_ns",
                            pc.subtract(spans["start_ns"], pa.array(preparing, pa.int64())))


def _spans(tasks: pa.Table) -> pa.Table:
    """Per step: the first task's start and the last task's end (columns add_steps takes), by step."""
    ends = pc.add(tasks["start_ns"], tasks["dur_ns"])
    grouped = pa.table({"step": tasks["step"], "start_ns": tasks["start_ns"], "end_ns": ends}).group_by("step") \
        .aggregate([("start_ns", "min"), ("end_ns", "max")]).sort_by("step")
    return pa.table({"step": grouped["step"], "start_ns": grouped["start_ns_min"], "end_ns": grouped["end_ns_max"],
                     "fp_ns": pa.nulls(grouped.num_rows, pa.int64()), "bp_ns": pa.nulls(grouped.num_rows, pa.int64())})
