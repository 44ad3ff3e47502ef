"""Every file ``perfsight export`` can write, and perfsight's own file beside ``perfsight cluster``'s
msprof-analyze outputs (``RANK_BREAKDOWN``): its name, the seed file it mirrors, what it holds and, for
summaries, its columns.

The summary writer takes the column headers and conversions from here and README.txt takes the
descriptions from here, so a column is named and described in exactly one place. A summary file that
mirrors an msprof file starts with msprof's own columns, in msprof's order and spelling (as msprof's
analysis writes them: ``Ascend/msprof`` analysis/csrc/application/summary/*_assembler.cpp), filled from
the run or ``N/A`` where the field has no meaning off Ascend; perfsight's own columns (Rank, Self Time,
Step, ...) follow them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from perfsight.analysis.breakdown import CATEGORIES
from perfsight.options.export import STEP_MODEL_ID

#: what msprof writes where a field has no value, and perfsight where a field has no meaning off Ascend
NA = "N/A"
#: msprof's Device_id of host-side rows (its api_statistic writes "host")
HOST = "host"


@dataclass(frozen=True)
class Column:
    """One column of a summary file: its header, the analysis column it comes from (or a ``constant``), its
    meaning and its conversion: ``us`` (int64 ns written as microseconds with 3 decimals), ``us2`` (ns²
    written as us² with 3 decimals), ``%`` (percent, 3 decimals), ``json`` (JSON text, embedded as JSON in
    the JSON format), ``list`` (a JSON list of shapes or dtypes written as msprof writes them: ``4,1025;4,1025``,
    ``FLOAT;FLOAT``), ``device_id`` (``cuda:N``/``npu:N`` written as N, host rows as ``host``) or ``""`` (as
    is)."""

    header: str
    source: str
    meaning: str
    unit: str = ""
    constant: str | None = None


@dataclass(frozen=True)
class OutputFile:
    """A kind of output file, named ``{stem}_{stamp}.{ext}`` for each extension it is written as, or
    ``{stem}.{ext}`` when not ``stamped`` (one name whatever the stamp: each export replaces perfsight's
    earlier file). ``mirrors`` says which file of the seeds (../shared/seeds) it re-creates."""

    title: str
    stems: tuple[tuple[str, str], ...]   # (ext, stem) pairs
    mirrors: str
    about: str
    columns: tuple[Column, ...] = ()
    stamped: bool = True

    def name(self, stamp: str, ext: str) -> str:
        stem = dict(self.stems)[ext]
        return f"{stem}_{stamp}.{ext}" if self.stamped else f"{stem}.{ext}"

    def matches(self, file_name: str) -> bool:
        stamp = r"_\d{14}(_\d+)?" if self.stamped else ""
        return any(re.fullmatch(rf"{re.escape(stem)}{stamp}\.{ext}", file_name) for ext, stem in self.stems)


def _summary_stems(stem: str) -> tuple[tuple[str, str], ...]:
    return (("csv", stem), ("json", stem))


def _seed_001(name: str, text: str) -> str:
    return f"{name} of seed 001 (torch_npu E2E profiling): \"{text}\""


_RANK = Column("Rank", "rank", "distributed rank (0 when the trace does not say)")
_DEVICE_ID = Column("Device_id", "device", "device number N of cuda:N / npu:N; host for work on the host (as "
                    "msprof writes host API rows)", "device_id")
_HOST_DEVICE_ID = Column("Device_id", "", "host: these rows are host work (as msprof writes host API rows)",
                         constant=HOST)
_STEP = Column("Step", "step", "training step (ProfilerStep#N) it belongs to; empty outside steps")
_THREAD = Column("Thread", "track", "the host thread (timeline row name)")
_SELF_TIME = Column("Self Time(us)", "self_ns", "summed duration minus the time of directly nested operators, "
                    "us (equals the total for device tasks, which do not nest)", "us")
_RATIO = Column("Ratio(%)", "ratio", "total time as a percentage of the summed total time of the rows with the "
                "same Rank and category (Category / Level); host ops nest, so host ratios count nested time in "
                "each enclosing op", "%")

_PHASE_RULES = (
    "The forward start is the first framework operator on the step's thread after its last data-loader fetch "
    "(outside optimizer ranges), or the first op named by fp_point; the backward end is the end of the last "
    "backward operator (names with \"backward\" or \"autograd::\", or ops on the autograd thread) before the "
    "optimizer step (or the last all-reduce), or of the last op named by bp_point."
)

_TRACE_FORMAT = (
    "A Chrome trace-event JSON object {\"traceEvents\": [...], \"displayTimeUnit\": \"ns\", "
    "\"otherData\": {run facts}}; open it in https://ui.perfetto.dev or chrome://tracing. Times \"ts\" and "
    "\"dur\" are microseconds written with 3 decimals (exact nanoseconds; ts since the Unix epoch when the "
    "source knows it)."
)
_SLICE_EVENTS = (
    "Slices are ph X events with cat = slice kind and args: the source's own arguments plus id, op_type, "
    "task_type, step, correlation_id, external_id, input_shapes, input_dtypes, flops, bytes where known."
)

MSPROF_TIMELINE = OutputFile(
    title="timeline of the whole run (msprof_*.json)",
    stems=(("json", "msprof"),),
    mirrors=_seed_001("msprof*.json", "timeline数据总表。对采集到的timeline性能数据按照迭代粒度进行性能展示。"),
    about=(
        f"{_TRACE_FORMAT} One process per layer (prefixed \"Rank N: \" when the run has several ranks): "
        "\"Framework (CPU ops, Python)\" (framework operators, Python functions, user annotations, steps, data "
        "loading; one thread per host thread), \"Runtime API\" (runtime and driver calls), \"Device tasks "
        "<device>\" (kernels, memcpy, memset, device annotations; one thread per stream), \"Communication\" "
        "(collectives on the host and on device streams), \"Host counters\" / \"Device counters <device>\" "
        "(counter series as ph C events, and the memory totals \"Memory allocated\" / \"Memory reserved\" in "
        f"bytes). {_SLICE_EVENTS} Flows (launch: runtime call -> device task; fwdbwd: forward op -> its "
        "backward) are ph s / ph f events (bp e) sharing an id."
    ),
)

TASK_TIME_TIMELINE = OutputFile(
    title="device task timeline (task_time_*.json)",
    stems=(("json", "task_time"),),
    mirrors=_seed_001("task_time_*.json", "Task Scheduler任务调度信息。"),
    about=(
        f"{_TRACE_FORMAT} The \"Device tasks <device>\" layer of msprof_*.json alone (kernels, memcpy, memset, "
        f"communication kernels and device annotations, one thread per stream): what the device executed. "
        f"{_SLICE_EVENTS}"
    ),
)

#: the slice kinds msprof_tx files hold: the user's marks (record_function, perfsight.mark, msproftx ranges)
MARK_KINDS = ("annotation",)

MSPROF_TX_TIMELINE = OutputFile(
    title="user marks timeline (msprof_tx.json)",
    stems=(("json", "msprof_tx"),),
    mirrors=_seed_001("msprof_tx.json", "msproftx timeline数据。对采集到的host msproftx timeline数据按线程进行拼接,"
                                        "并进行数据关联性展示。"),
    about=(
        f"{_TRACE_FORMAT} The user's marks alone (kind annotation: torch.profiler.record_function, perfsight.mark, "
        "msproftx ranges), one thread per host thread as in msprof_*.json. One name: each timeline export "
        f"replaces perfsight's earlier one. {_SLICE_EVENTS}"
    ),
    stamped=False,
)

STEP_TRACE_TIMELINE = OutputFile(
    title="step trace timeline (step_trace_*.json)",
    stems=(("json", "step_trace"),),
    mirrors="step_trace_{timestamp}.json of seed 003 (msprof.py export timeline's mindstudio_profiler_output/)",
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
    mirrors="msprof's step_trace_*.csv, the iteration trace seed 001 collects with ACL_PROF_TRAINING_TRACE "
            "(\"表示迭代轨迹数据,记录模型正向和反向等步骤。\"); its JSON form is step_trace_summary_*.json, as "
            "step_trace_*.json is the step trace timeline",
    about=(
        f"One row per training step and rank; steps are ProfilerStep#N ranges. {_PHASE_RULES} Empty cells: not "
        "found. msprof's Reduce Start/Duration column pairs (one per all-reduce group) are not written."
    ),
    columns=(
        _HOST_DEVICE_ID,
        Column("Iteration ID", "step", "step number N of ProfilerStep#N"),
        Column("FP Start(us)", "fp_start_ns", "forward start time, us", "us"),
        Column("BP End(us)", "bp_end_ns", "backward end time, us", "us"),
        Column("Iteration End(us)", "end_ns", "step end time, us", "us"),
        Column("Iteration Time(us)", "iteration_ns", "step duration (end - start), us", "us"),
        Column("FP to BP Time(us)", "fp_bp_ns", "forward + backward time (BP End - FP Start), us", "us"),
        Column("Iteration Refresh(us)", "tail_ns",
               "tail (Iteration End - BP End): all-reduce and parameter update, us", "us"),
        Column("Data Aug Bound(us)", "gap_ns",
               "iteration gap: FP Start - end of the previous step (or this step's start), data wait, us", "us"),
        Column("Model ID", "", f"{STEP_MODEL_ID}: msprof's step mode (iterations are training steps; "
                               f"export --model-id {STEP_MODEL_ID} --iteration-id N selects step N)",
               constant=str(STEP_MODEL_ID)),
        _RANK,
        Column("Iteration Start(us)", "start_ns", "step start time, us", "us"),
        Column("Data Wait(us)", "data_wait_ns", "summed duration of the step's data-loader fetches, us", "us"),
    ),
)

_ASCEND_ONLY = "N/A off Ascend"

OP_SUMMARY = OutputFile(
    title="operator summary (op_summary_*)",
    stems=_summary_stems("op_summary"),
    mirrors=_seed_001("op_summary_*.csv", "AI Core和AI CPU算子信息。"),
    about=(
        "One row per operator or task execution, in start order. The rows are the device "
        "tasks (kernels, communication kernels, memcpy, memset on device streams) when the run has any, "
        "otherwise the host framework operators (cpu ops; nested operators each have their own row)."
    ),
    columns=(
        _DEVICE_ID,
        Column("Model ID", "model_id", f"Ascend's model (graph) id; {_ASCEND_ONLY}"),
        Column("Task ID", "task_id", "Ascend's task id; elsewhere the runtime correlation id that links the task "
                                     "to its launch call"),
        Column("Stream ID", "stream_id", "the device stream number (empty for host ops)"),
        Column("Op Name", "name", "operator or kernel name as the trace gives it"),
        Column("OP Type", "op_type", "what operators are grouped by: framework op name or kernel name"),
        Column("OP State", "op_state", f"Ascend's static/dynamic shape state; {_ASCEND_ONLY}"),
        Column("Task Type", "task_type", "device task type: KERNEL, COMM, MEMCPY, MEMSET (Ascend: AI_CORE, "
                                         "AI_VECTOR_CORE, HCCL, ...); empty for host ops"),
        Column("Task Start Time(us)", "start_ns", "start time, us", "us"),
        Column("Task Duration(us)", "dur_ns", "duration, us", "us"),
        Column("Task Wait Time(us)", "wait_ns",
               "idle gap since the previous task on the same stream (host ops: previous op on the same thread "
               "at the same depth); 0 for the first, us", "us"),
        Column("Block Dim", "block_dim", "cores the task ran on: Ascend's block dim; CUDA/HIP: the blocks of "
                                         "the kernel's grid (x*y*z)"),
        Column("HF32 Eligible", "hf32_eligible", f"whether Ascend's HF32 mode applies; {_ASCEND_ONLY}"),
        Column("Input Shapes", "input_shapes", "input shapes, as msprof writes them (dims joined by ',', inputs by "
                                               "';'); device tasks: those of the operator that launched them",
               "list"),
        Column("Input Data Types", "input_dtypes", "input dtypes joined by ';'", "list"),
        Column("Input Formats", "input_formats", f"Ascend's input data formats (ND, NCHW, ...); {_ASCEND_ONLY}"),
        Column("Output Shapes", "output_shapes", f"output shapes; {_ASCEND_ONLY} (torch.profiler records inputs "
                                                 "only)"),
        Column("Output Data Types", "output_dtypes", f"output dtypes; {_ASCEND_ONLY}"),
        Column("Output Formats", "output_formats", f"Ascend's output data formats; {_ASCEND_ONLY}"),
        _RANK,
        Column("Device", "device", "where it ran: cpu, cuda:N, npu:N"),
        Column("Stream/Thread", "track", "the device stream or host thread (timeline row name)"),
        _SELF_TIME,
        _STEP,
        Column("Launch Op", "launch_op",
               "device tasks: the innermost framework operator around the runtime call that launched it"),
    ),
)

OP_STATISTIC = OutputFile(
    title="operator statistics (op_statistic_*)",
    stems=_summary_stems("op_statistic"),
    mirrors=_seed_001("op_statistic_*.csv", "AI Core和AI CPU算子调用次数及耗时,从算子类型维度找出耗时最大的算子类型。"),
    about=(
        "One row per operator type, task type, device, rank and category, longest total first. Counts the "
        "same executions as op_summary."
    ),
    columns=(
        _DEVICE_ID,
        Column("OP Type", "op_type", "operator type: framework op name or kernel name"),
        Column("Core Type", "task_type", "device task type (KERNEL, COMM, MEMCPY, MEMSET; Ascend: AI_CORE, ...); "
                                         "empty for host ops"),
        Column("Count", "count", "number of executions"),
        Column("Total Time(us)", "total_ns", "summed duration, us", "us"),
        Column("Min Time(us)", "min_ns", "shortest execution, us", "us"),
        Column("Avg Time(us)", "avg_ns", "mean duration (rounded to the ns), us", "us"),
        Column("Max Time(us)", "max_ns", "longest execution, us", "us"),
        _RATIO,
        _RANK,
        Column("Category", "category", "device (tasks on device streams) or cpu_op (host framework operators)"),
        _SELF_TIME,
    ),
)

_API_LEVEL = Column("Level", "category", "runtime (e.g. cudaLaunchKernel) or driver (e.g. cuLaunchKernel)")

API_STATISTIC = OutputFile(
    title="runtime/driver API statistics (api_statistic_*)",
    stems=_summary_stems("api_statistic"),
    mirrors="msprof's api_statistic_*.csv (CANN 7 and later; seed 001 lists the same calls as "
            "acl_statistic_*.csv and runtime_api_*.csv, which perfsight writes too)",
    about="One row per host API (runtime or driver call) name and rank, longest total first.",
    columns=(
        _HOST_DEVICE_ID,
        _API_LEVEL,
        Column("API Name", "name", "API function name"),
        Column("Time(us)", "total_ns", "summed duration, us", "us"),
        Column("Count", "count", "number of calls"),
        Column("Avg(us)", "avg_ns", "mean duration (rounded to the ns), us", "us"),
        Column("Min(us)", "min_ns", "shortest call, us", "us"),
        Column("Max(us)", "max_ns", "longest call, us", "us"),
        Column("Variance", "variance_ns2", "population variance of the call durations, us²", "us2"),
        _RANK,
        _RATIO,
    ),
)

_PER_THREAD = (
    Column("Process ID", "pid", "the calling process (the trace's pid)"),
    Column("Thread ID", "tid", "the calling thread (the trace's tid)"),
)

RUNTIME_API = OutputFile(
    title="runtime API calls per thread (runtime_api_*)",
    stems=_summary_stems("runtime_api"),
    mirrors=_seed_001("runtime_api_*.csv", "每个runtime api的调用时长。"),
    about="One row per runtime or driver API (CUDA/HIP: cudaLaunchKernel, cuLaunchKernel, ...), calling thread "
          "and rank, longest total first; times in ns as msprof's runtime_api file has them.",
    columns=(
        Column("Name", "name", "API function name"),
        Column("Stream ID", "", f"the stream the calls were on; {NA}: torch.profiler does not record it for "
                                "runtime calls", constant=NA),
        Column("Time(%)", "ratio", "the API's share of the summed time of the rank's calls of the same Level, %",
               "%"),
        Column("Time(ns)", "total_ns", "summed duration, ns"),
        Column("Calls", "count", "number of calls"),
        Column("Avg(ns)", "avg_ns", "mean duration (rounded to the ns), ns"),
        Column("Min(ns)", "min_ns", "shortest call, ns"),
        Column("Max(ns)", "max_ns", "longest call, ns"),
        *_PER_THREAD,
        _RANK,
        _API_LEVEL,
    ),
)

ACL_STATISTIC = OutputFile(
    title="runtime API statistics, AscendCL's shape (acl_statistic_*)",
    stems=_summary_stems("acl_statistic"),
    mirrors=_seed_001("acl_statistic_*.csv", "AscendCL接口调用次数及耗时。") + "; on CUDA/HIP the application-facing "
            "API is the runtime and driver API, as AscendCL is on Ascend",
    about="The calls of runtime_api_* in AscendCL statistic's columns (us): one row per API, calling thread and "
          "rank, longest total first.",
    columns=(
        Column("Name", "name", "API function name"),
        Column("Type", "category", "the API layer: runtime or driver (AscendCL's Type: ACL_OP, ACL_RTS, ...)"),
        Column("Time(%)", "ratio", "the API's share of the summed time of the rank's calls of the same Type, %",
               "%"),
        Column("Time(us)", "total_ns", "summed duration, us", "us"),
        Column("Count", "count", "number of calls"),
        Column("Avg(us)", "avg_ns", "mean duration (rounded to the ns), us", "us"),
        Column("Min(us)", "min_ns", "shortest call, us", "us"),
        Column("Max(us)", "max_ns", "longest call, us", "us"),
        *_PER_THREAD,
        _RANK,
    ),
)

TASK_TIME = OutputFile(
    title="device task times (task_time_*.csv, task_time_summary_*.json)",
    stems=(("csv", "task_time"), ("json", "task_time_summary")),
    mirrors=_seed_001("task_time_*.csv", "Task Scheduler的任务调度信息数据。") + "; its JSON form is "
            "task_time_summary_*.json, as task_time_*.json is the device task timeline",
    about="One row per task a device's streams ran (operators, copies, collectives and the streams' "
          "synchronisation tasks), in start order.",
    columns=(
        _DEVICE_ID,
        Column("kernel_name", "name", "kernel / copy / collective / synchronisation task name"),
        Column("kernel_type", "task_type", "KERNEL, COMM, MEMCPY, MEMSET (Ascend: AI_CORE, ...)"),
        Column("stream_id", "stream_id", "the device stream number"),
        Column("task_id", "task_id", "Ascend's task id; elsewhere the runtime correlation id of its launch"),
        Column("task_time(us)", "dur_ns", "duration, us", "us"),
        Column("task_start(us)", "start_ns", "start time, us", "us"),
        Column("task_stop(us)", "end_ns", "end time, us", "us"),
        _RANK,
        Column("Device", "device", "cuda:N, npu:N"),
        Column("Stream", "track", "the device stream (timeline row name)"),
        Column("Step", "step", "training step of the operator that launched it; empty outside steps"),
        Column("Launch Op", "launch_op",
               "the innermost framework operator around the runtime call that launched the task"),
    ),
)

MSPROF_TX_SUMMARY = OutputFile(
    title="user marks (msprof_tx.csv, msprof_tx_summary.json)",
    stems=(("csv", "msprof_tx"), ("json", "msprof_tx_summary")),
    mirrors=_seed_001("msprof_tx.csv", "msproftx summary数据。对采集到的host msproftx summary数据按线程进行拼接,"
                                       "并进行数据关联性展示。") + "; its JSON form is msprof_tx_summary.json, as "
            "msprof_tx.json is the marks timeline",
    about="One row per user mark (kind annotation: torch.profiler.record_function, perfsight.mark, msproftx "
          "ranges) on the host, in start order. One name: each summary export replaces perfsight's earlier one.",
    columns=(
        _HOST_DEVICE_ID,
        Column("pid", "pid", "the process (the trace's pid)"),
        Column("tid", "tid", "the thread (the trace's tid)"),
        Column("category", "", f"msproftx's category; {NA} (reserved in msprof too)", constant=NA),
        Column("event_type", "event_type", "push/pop for a range, marker for an instant (zero-length) mark"),
        Column("payload_type", "", f"msproftx's payload type; {NA} (reserved in msprof too)", constant=NA),
        Column("payload_value", "", f"msproftx's payload; {NA} (reserved in msprof too)", constant=NA),
        Column("Start_time(us)", "start_ns", "start time, us", "us"),
        Column("End_time(us)", "end_ns", "end time, us", "us"),
        Column("message_type", "", f"msproftx's message type; {NA} (reserved in msprof too)", constant=NA),
        Column("message", "name", "the mark's text"),
        Column("domain", "", "the mark's domain: default (torch and perfsight marks have none)",
               constant="default"),
        Column("mark_id", "id", "the mark's id (unique in the run: slices.id)"),
        _RANK,
        Column("Duration(us)", "dur_ns", "duration, us", "us"),
        _THREAD,
        _STEP,
    ),
    stamped=False,
)

PYTORCH_OPERATOR_VIEW = OutputFile(
    title="framework operators with their call stacks (pytorch_operator_view.csv)",
    stems=_summary_stems("pytorch_operator_view"),
    mirrors=_seed_001("pytorch_operator_view.csv", "msproftx数据,通过E2E profiling方式采集,需在PyTorch训练脚本内设置"
                                                   "“use_e2e_profiler=True”。") + "; its columns are those of "
            "operator_details.csv, the file torch_npu's profiler writes in its place today",
    about="One row per framework operator execution (ProfilerStep ranges excluded), in start order: its host "
          "time, the device time of the tasks it launched, and its Python call stack (with_stack / "
          "TORCH_CALL_STACK). One name: each summary export replaces perfsight's earlier one.",
    columns=(
        Column("Name", "name", "operator name"),
        Column("Input Shapes", "input_shapes", "input shapes (dims joined by ',', inputs by ';')", "list"),
        Column("Call Stack", "call_stack", "the Python frames around it, innermost first, joined by ';\\n' "
                                           "(empty without with_stack)"),
        Column("Host Self Duration(us)", "host_self_ns", "duration minus the operators nested in it, us", "us"),
        Column("Host Total Duration(us)", "host_total_ns", "duration, us", "us"),
        Column("Device Self Duration(us)", "device_self_ns",
               "summed duration of the device tasks it launched itself, us", "us"),
        Column("Device Total Duration(us)", "device_total_ns",
               "summed duration of the device tasks it and the operators nested in it launched, us", "us"),
        Column("Device Self Duration With AICore(us)", "", f"the part on Ascend's AI Core; {_ASCEND_ONLY}",
               constant=NA),
        Column("Device Total Duration With AICore(us)", "", f"the part on Ascend's AI Core; {_ASCEND_ONLY}",
               constant=NA),
        _RANK,
        Column("Input Data Types", "input_dtypes", "input dtypes joined by ';'", "list"),
        Column("Start Time(us)", "start_ns", "start time, us", "us"),
        _THREAD,
        _STEP,
    ),
    stamped=False,
)

ADVICE = OutputFile(
    title="tuning advice (prof_rule_0.json)",
    stems=(("json", "prof_rule_0"),),
    mirrors=_seed_001("prof_rule_0.json", "调优建议。"),
    about="The advisor's findings, most severe first (always JSON, as msprof writes it; an empty list when "
          "nothing crossed a threshold). Each names its evidence and the threshold that fired; the latest "
          "export's advice replaces an earlier one.",
    columns=(
        Column("Rule", "rule", "rule id, e.g. data_loader_bound, amp_unused, uneven_ranks"),
        Column("Severity", "severity", "high, medium or low: by the estimated gain where there is a what-if"),
        Column("Title", "title", "what was found, in a few words"),
        Column("Finding", "finding", "the finding with its numbers"),
        Column("Evidence", "evidence", "the steps, operators, ranks and times behind it (JSON)", "json"),
        Column("Threshold", "threshold", "the rule's threshold that this run crossed"),
        Column("Suggestion", "suggestion", "what to try"),
        Column("What if", "what_if", "the change the suggestion would make, replayed on the critical path"),
        Column("Gain (ns)", "gain_ns", "the estimated time saved per step by that change (critical-path what-if)"),
        Column("Gain (%)", "gain_pct", "that time as a share of the mean step"),
    ),
    stamped=False,
)

#: the step breakdown's categories, in ``breakdown.CATEGORIES``' priority order, and idle (the remainder)
_PARTS = (*CATEGORIES, "idle")

RANK_BREAKDOWN = OutputFile(
    title="mean step breakdown per rank (rank_breakdown.csv)",
    stems=(("csv", "rank_breakdown"),),
    mirrors="none: perfsight's own, written by perfsight cluster beside msprof-analyze's files; the per-rank table "
            "that perfsight analyse summarises across ranks beyond a screenful of ranks",
    about="One row per rank: its mean step and the mean time of each category of the step breakdown (they add up "
          "to the step) over the step numbers every rank has (cluster.rank_breakdown), as the terminal's breakdown "
          "by rank and its Ranks table show them. One name: each perfsight cluster replaces its earlier one.",
    columns=(
        _RANK,
        Column("Steps", "steps", "the steps compared: the step numbers every rank has (each rank's own when the "
                                 "ranks share none)"),
        Column("Common Steps", "common_steps", "true when the ranks share the step numbers compared"),
        Column("Step(us)", "step_ns", "mean step over the steps compared, us", "us"),
        Column("Median Step(us)", "median_step_ns", "median step over the steps compared, us", "us"),
        *(Column(f"{part.replace('_', ' ').title()}(us)", f"{part}_ns", f"mean time of the breakdown's {part} "
                 "category (docs/analyses.md: step_breakdown), us", "us") for part in _PARTS),
        *(Column(f"{part.replace('_', ' ').title()}(%)", f"{part}_pct", f"{part}'s share of the summed step time, %",
                 "%") for part in _PARTS),
        Column("Boundary Step(us)", "boundary_step_ns", "median step on the common boundary: step end to step end "
                                                       "(a rank's first step its own span), us", "us"),
        Column("Gap(us)", "gap_ns", "boundary step over the fastest rank's, us", "us"),
        Column("Gap(%)", "gap_pct", "boundary step over the fastest rank's, % of the fastest rank's", "%"),
        Column("Outlier Steps", "outlier_steps", "the steps longer than twice the rank's median (the rank's "
                                                 "first: a warm-up); the median it is compared by does not move "
                                                 "for them"),
        Column("Others Wait(us)", "caused_wait_ns", "the wait per step (median over the steps) its late arrival at "
                                                    "collectives causes the other members, us", "us"),
        Column("Last Arrivals", "last_arrivals", "the collectives it arrived at last"),
        Column("Slowest", "slowest", "true for the rank with the longest boundary step when the ranks are not even "
                                     "(cluster.slowest_rank)"),
        Column("Straggler", "straggler", "true for the rank whose late arrivals cause the others the most wait, "
                                         "beyond the noise (waiting.straggler)"),
    ),
    stamped=False,
)

TIMELINE_FILES = (MSPROF_TIMELINE, STEP_TRACE_TIMELINE, TASK_TIME_TIMELINE, MSPROF_TX_TIMELINE)
SUMMARY_FILES = (STEP_TRACE_SUMMARY, OP_SUMMARY, OP_STATISTIC, API_STATISTIC, RUNTIME_API, ACL_STATISTIC, TASK_TIME,
                 MSPROF_TX_SUMMARY, PYTORCH_OPERATOR_VIEW, ADVICE)
ALL_FILES = TIMELINE_FILES + SUMMARY_FILES


def describe(file_name: str) -> OutputFile:
    """The output-file kind ``file_name`` is (raises ValueError for a name perfsight does not write)."""
    for kind in ALL_FILES:
        if kind.matches(file_name):
            return kind
    raise ValueError(f"{file_name!r} is not a perfsight export file")
