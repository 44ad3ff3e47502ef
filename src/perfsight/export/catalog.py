"""Every file ``perfsight export`` can write: its name, what it holds and, for summaries, its columns.

The summary writer takes the column headers and conversions from here and README.txt takes the
descriptions from here, so a column is named and described in exactly one place.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """One column of a summary file: its header, the analysis column it comes from, its meaning and its
    unit conversion: ``us`` (int64 ns written as microseconds with 3 decimals), ``%`` (percent, 3
    decimals), ``json`` (JSON text, embedded as JSON in the JSON format) or ``""`` (as is)."""

    header: str
    source: str
    meaning: str
    unit: str = ""


@dataclass(frozen=True)
class OutputFile:
    """A kind of output file, named ``{stem}_{stamp}.{ext}`` for each extension it is written as."""

    title: str
    stems: tuple[tuple[str, str], ...]   # (ext, stem) pairs
    about: str
    columns: tuple[Column, ...] = ()
    fixed_name: str = ""                 # a file with one name whatever the stamp (prof_rule_0.json)

    def name(self, stamp: str, ext: str) -> str:
        return self.fixed_name or f"{dict(self.stems)[ext]}_{stamp}.{ext}"

    def matches(self, file_name: str) -> bool:
        if self.fixed_name:
            return file_name == self.fixed_name
        return any(re.fullmatch(rf"{re.escape(stem)}_\d{{14}}(_\d+)?\.{ext}", file_name) for ext, stem in self.stems)


def _summary_stems(stem: str) -> tuple[tuple[str, str], ...]:
    return (("csv", stem), ("json", stem))


_RANK = Column("Rank", "rank", "distributed rank (0 when the trace does not say)")

_DURATION_STATISTICS = (
    Column("Count", "count", "number of executions (calls)"),
    Column("Total Time(us)", "total_ns", "summed duration, us", "us"),
    Column("Self Time(us)", "self_ns", "summed duration minus the time of directly nested operators, us "
           "(equals Total Time for device tasks, which do not nest)", "us"),
    Column("Min Time(us)", "min_ns", "shortest execution, us", "us"),
    Column("Avg Time(us)", "avg_ns", "mean duration (rounded to the ns), us", "us"),
    Column("Max Time(us)", "max_ns", "longest execution, us", "us"),
    Column("Ratio(%)", "ratio", "Total Time as a percentage of the summed Total Time of the rows with the same Rank "
           "and category (Category / Level); host ops nest, so host ratios count nested time in each enclosing op",
           "%"),
)

_PHASE_RULES = (
    "The forward start is the first framework operator on the step's thread after its last data-loader fetch "
    "(outside optimizer ranges), or the first op named by fp_point; the backward end is the end of the last "
    "backward operator (names with \"backward\" or \"autograd::\", or ops on the autograd thread) before the "
    "optimizer step (or the last all-reduce), or of the last op named by bp_point."
)

MSPROF_TIMELINE = OutputFile(
    title="timeline of the whole run (msprof_*.json)",
    stems=(("json", "msprof"),),
    about=(
        "A Chrome trace-event JSON object {\"traceEvents\": [...], \"displayTimeUnit\": \"ns\", \"otherData\": {run facts}}; "
        "open it in https://ui.perfetto.dev or chrome://tracing. Times \"ts\" and \"dur\" are microseconds written "
        "with 3 decimals (exact nanoseconds; ts since the Unix epoch when the source knows it). One process per "
        "layer (prefixed \"Rank N: \" when the run has several ranks): \"Framework (CPU ops, Python)\" (framework "
        "operators, Python functions, user annotations, steps, data loading; one thread per host thread), "
        "\"Runtime API\" (runtime and driver calls), \"Device tasks <device>\" (kernels, memcpy, memset, device "
        "annotations; one thread per stream), \"Communication\" (collectives on the host and on device streams), "
        "\"Host counters\" / \"Device counters <device>\" (counter series as ph C events, and the memory totals "
        "\"Memory allocated\" / \"Memory reserved\" in bytes). Slices are ph X events with cat = slice kind and "
        "args: the source's own arguments plus id, op_type, task_type, step, correlation_id, external_id, "
        "input_shapes, input_dtypes, flops, bytes where known. Flows (launch: runtime call -> device task; "
        "fwdbwd: forward op -> its backward) are ph s / ph f events (bp e) sharing an id."
    ),
)

STEP_TRACE_TIMELINE = OutputFile(
    title="step trace timeline (step_trace_*.json)",
    stems=(("json", "step_trace"),),
    about=(
        "A Chrome trace-event JSON object like msprof_*.json, with one process \"Step trace\" per rank: thread "
        "\"Iteration\" shows each step (\"Iteration N\", args: step and data_wait in us) and thread \"Phases\" its "
        "\"Iteration Gap\" (data wait before the forward start), \"FP_BP\" (forward start to backward end) and "
        "\"Tail\" (backward end to step end: all-reduce and parameter update). Times in microseconds with 3 "
        f"decimals. {_PHASE_RULES}"
    ),
)

STEP_TRACE_SUMMARY = OutputFile(
    title="step trace summary (step_trace_*.csv, step_trace_summary_*.json)",
    stems=(("csv", "step_trace"), ("json", "step_trace_summary")),
    about=(
        f"One row per training step and rank; steps are ProfilerStep#N ranges. {_PHASE_RULES} Empty cells: not "
        "found."
    ),
    columns=(
        _RANK,
        Column("Iteration ID", "step", "step number N of ProfilerStep#N"),
        Column("Iteration Start(us)", "start_ns", "step start time, us", "us"),
        Column("FP Start(us)", "fp_start_ns", "forward start time, us", "us"),
        Column("BP End(us)", "bp_end_ns", "backward end time, us", "us"),
        Column("Iteration End(us)", "end_ns", "step end time, us", "us"),
        Column("Iteration Time(us)", "iteration_ns", "step duration (end - start), us", "us"),
        Column("FP to BP Time(us)", "fp_bp_ns", "forward + backward time (BP End - FP Start), us", "us"),
        Column("Iteration Refresh(us)", "tail_ns",
               "tail (Iteration End - BP End): all-reduce and parameter update, us", "us"),
        Column("Data Aug Bound(us)", "gap_ns",
               "iteration gap: FP Start - end of the previous step (or this step's start), data wait, us", "us"),
        Column("Data Wait(us)", "data_wait_ns", "summed duration of the step's data-loader fetches, us", "us"),
    ),
)

OP_SUMMARY = OutputFile(
    title="operator summary (op_summary_*)",
    stems=_summary_stems("op_summary"),
    about=(
        "One row per operator or task execution, in start order. The rows are the device "
        "tasks (kernels, communication kernels, memcpy, memset on device streams) when the run has any, "
        "otherwise the host framework operators (cpu ops; nested operators each have their own row)."
    ),
    columns=(
        _RANK,
        Column("Device", "device", "where it ran: cpu, cuda:N, npu:N"),
        Column("Stream/Thread", "track", "the device stream or host thread (timeline row name)"),
        Column("Op Name", "name", "operator or kernel name as the trace gives it"),
        Column("OP Type", "op_type", "what operators are grouped by: framework op name or kernel name"),
        Column("Task Type", "task_type", "device task type: KERNEL, COMM, MEMCPY, MEMSET (empty for host ops)"),
        Column("Task Start Time(us)", "start_ns", "start time, us", "us"),
        Column("Task Duration(us)", "dur_ns", "duration, us", "us"),
        Column("Task Wait Time(us)", "wait_ns",
               "idle gap since the previous task on the same stream (host ops: previous op on the same thread "
               "at the same depth); 0 for the first, us", "us"),
        Column("Input Shapes", "input_shapes",
               "JSON list of input shapes (device tasks: those of the operator that launched them)", "json"),
        Column("Input Data Types", "input_dtypes", "JSON list of input dtypes", "json"),
        Column("Step", "step", "training step (ProfilerStep#N) it belongs to; empty outside steps"),
    ),
)

OP_STATISTIC = OutputFile(
    title="operator statistics (op_statistic_*)",
    stems=_summary_stems("op_statistic"),
    about=(
        "One row per operator type, task type, rank and category, longest total first. Counts the same "
        "executions as op_summary."
    ),
    columns=(
        _RANK,
        Column("Category", "category", "device (tasks on device streams) or cpu_op (host framework operators)"),
        Column("OP Type", "op_type", "operator type: framework op name or kernel name"),
        Column("Task Type", "task_type", "device task type (msprof's Core Type); empty for host ops"),
        *_DURATION_STATISTICS,
    ),
)

API_STATISTIC = OutputFile(
    title="runtime/driver API statistics (api_statistic_*)",
    stems=_summary_stems("api_statistic"),
    about="One row per host API (runtime or driver call) name and rank, longest total first.",
    columns=(
        _RANK,
        Column("Level", "category", "runtime (e.g. cudaLaunchKernel) or driver (e.g. cuLaunchKernel)"),
        Column("API Name", "name", "API function name"),
        *_DURATION_STATISTICS,
    ),
)

TASK_TIME = OutputFile(
    title="device task times (task_time_*)",
    stems=_summary_stems("task_time"),
    about="One row per task a device executed, in start order.",
    columns=(
        _RANK,
        Column("Device", "device", "cuda:N, npu:N"),
        Column("Stream", "track", "the device stream (timeline row name)"),
        Column("Task Name", "name", "kernel / copy / collective name"),
        Column("Task Type", "task_type", "KERNEL, COMM, MEMCPY, MEMSET"),
        Column("Task Start Time(us)", "start_ns", "start time, us", "us"),
        Column("Task Duration(us)", "dur_ns", "duration, us", "us"),
        Column("Step", "step", "training step of the operator that launched it; empty outside steps"),
        Column("Launch Op", "launch_op",
               "the innermost framework operator around the runtime call that launched the task"),
    ),
)

ADVICE = OutputFile(
    title="tuning advice (prof_rule_0.json)",
    stems=(("json", "prof_rule_0"),),
    about="The advisor's findings, most severe first (always JSON, as msprof writes it; an empty list when "
          "nothing crossed a threshold). Each names its evidence and the threshold that fired; the latest "
          "export's advice replaces an earlier one.",
    fixed_name="prof_rule_0.json",
    columns=(
        Column("Rule", "rule", "rule id, e.g. data_loader_bound, amp_unused, uneven_ranks"),
        Column("Severity", "severity", "high, medium or low"),
        Column("Title", "title", "what was found, in a few words"),
        Column("Finding", "finding", "the finding with its numbers"),
        Column("Evidence", "evidence", "the steps, operators, ranks and times behind it (JSON)", "json"),
        Column("Threshold", "threshold", "the rule's threshold that this run crossed"),
        Column("Suggestion", "suggestion", "what to try"),
    ),
)

ALL_FILES = (MSPROF_TIMELINE, STEP_TRACE_TIMELINE, STEP_TRACE_SUMMARY, OP_SUMMARY, OP_STATISTIC, API_STATISTIC,
             TASK_TIME, ADVICE)


def describe(file_name: str) -> OutputFile:
    """The output-file kind ``file_name`` is (raises ValueError for a name perfsight does not write)."""
    for kind in ALL_FILES:
        if kind.matches(file_name):
            return kind
    raise ValueError(f"{file_name!r} is not a perfsight export file")
