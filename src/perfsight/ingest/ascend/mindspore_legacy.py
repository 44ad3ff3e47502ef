"""MindSpore's flat profiler folder (MindSpore 1.x-2.2, read by MindInsight) read into the canonical tables.

Public: ``read_mindspore_legacy`` and ``legacy_sources`` (detection: ``detect``). The
folder (``.../profiler``) holds files named ``{kind}_{N}[_detail|_type|_detail_time].{csv,json,txt}``
where N is the device (rank) id; one folder may hold several ranks, read one at a time. (MindSpore's
current output, ``*_ascend_ms/ASCEND_PROFILER_OUTPUT``, is torch_npu's format: the torch_npu text reader
reads it. A PROF_ directory beside the files is msprof's: msprof_dir.)

Each operator execution is read once, from the first of these files that has it:

1. ``ascend_timeline_display_N.json`` (real times, microseconds): by process (``process_name`` metadata,
   else MindSpore's pids: the device id = AI Core, 9000 AI CPU, 10000 communication, 11000 host CPU,
   12000 overlap): AI Core / AI CPU ops are ``kernel`` tasks (task type ``AI_CORE`` / ``AI_CPU``) on one
   stream row per tid, communication ops ``comm`` (``HCCL``), host CPU ops ``cpu_op``; the overlap and
   scope-name rows are derived and not read; the ``Steps`` row gives steps when there is no step trace.
   An execution's step and input shapes come from ``dynamic_shape_info_N.json`` when it lists the same
   operator (its k-th execution of an op name is the timeline's k-th); the executions it lists that the
   timeline lacks (a timeline is capped in size) are added as in 2.
2. ``dynamic_shape_info_N.json``: per step, each execution's op name, type, side and duration (us).
3. ``aicore_intermediate_N_detail.csv``: per AI Core op its average time (ms) and execution count.

Files 2 and 3 have no timestamps: their executions are laid back to back from time 0 on a stream row named
``... (no timestamps)`` and meta ``synthetic_times`` lists those rows; they get steps only from file 2.
Every execution takes its op type (``kernel_type``), input shapes and dtypes (``op_info``), block dim,
task and stream ids from ``framework_raw_N.csv`` (by full name), and its FLOPs from ``flops_N.txt``
(MFLOPs per execution; cube + vector): ``flops`` = MFLOPs x 10^6.

Steps: ``step_trace_raw_N_detail_time.csv`` (times in 10 ns ticks of the device's 100 MHz system
counter, as MindInsight reads them): per step a ``step`` slice from start_point to end_point, a
``dataloader`` slice ``iteration_interval`` [start_point, fp_point) (the seed: the iteration gap
"主要负责从数据队列中读取数据"), annotations ``fp_and_bp`` [fp_point, bp_point) and ``tail`` [bp_point,
end_point); the average row (``-``) is skipped. Each ``stream_S_parallel_P`` span (the trace's "reduce"
points, which MindSpore puts around its AllReduce operators; the P-th on stream S in the step) is a
communication task (``comm``, HCCL, op type AllReduce) named ``AllReduce stream_S_parallel_P`` on the device
row ``npu:R stream S (step trace all-reduce)``, with args ``Collective name`` "allreduce" and no group or size
(the file says neither), so the step breakdown counts it as communication and the cluster analysis matches it
across ranks by its order; a step without the span has 0 there (not read). Meta
``fp_point``/``bp_point`` name ``fp_and_bp``, so ``step_trace`` gives MindSpore's phases. Without that file, the
timeline's Steps row; meta ``step_source`` says which (``STEP_SOURCES``).

Data pipeline queues and CPU utilisation: mindspore_minddata. Kept in meta as the source's own figures:
``aicore_intermediate_N_type.csv`` rows (``mindspore_op_type_statistic``), ``flops_summary_N.json``,
``flops_scope_N.json``, ``ascend_timeline_summary_N.json``.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core.communication import COMM_KIND
from perfsight.core.files import read_regular
from perfsight.core.json_depth import loads_bounded
from perfsight.core.tables import RunTables
from perfsight.ingest.ascend.ascend_csv import json_object, number_rows, numbers, read_csv, read_json
from perfsight.ingest.ascend.detect import MINDSPORE_FILE, rank_to_read
from perfsight.ingest.ascend.mindspore_minddata import add_cpu_utilization, add_device_queue, add_pipeline
from perfsight.ingest.common.build import RunBuilder, add_steps
from perfsight.ingest.common.chrome_json import TraceStream
from perfsight.ingest.common.columns import counted
from perfsight.ingest.common.events import event_tables

_OP_NUMBER = re.compile(r"-op\d+$")
#: a step-trace all-reduce span's args: the collective, in PyTorch's key (analysis/collectives.py reads it)
_REDUCE_ARGS = json.dumps({"Collective name": "allreduce"})
_PIDS = {9000: "ai_cpu", 10000: "comm", 11000: "host", 12000: "skip", 13000: "skip"}
_PROCESS_WORDS = (("overlap", "skip"), ("ai cpu", "ai_cpu"), ("communication", "comm"), ("host cpu", "host"),
                  ("ai core", "ai_core"))
_ROLE_TASKS = {"ai_core": ("kernel", "AI_CORE"), "ai_cpu": ("kernel", "AI_CPU"), "comm": (COMM_KIND, "HCCL"),
               "host": ("cpu_op", None)}
_SIDE_TASKS = {"aicore": "AI_CORE", "ai_core": "AI_CORE", "aicpu": "AI_CPU", "ai_cpu": "AI_CPU", "gpu": "KERNEL"}
_STEPS_TID, _SCOPE_TID = "100000", "100001"
_TICK_NS = 10
#: meta step_source, best first: step_trace_raw's spans, the timeline's Steps row, dynamic_shape_info's step of
#: each execution (steps without spans), none
STEP_SOURCES = ("step_trace_raw_detail_time.csv", "ascend_timeline_display Steps", "dynamic_shape_info step", "none")
_MS_NS = 1_000_000


def legacy_sources(path: Path, rank: int | None = None) -> list[Path]:
    """The rank's profiler files in the folder (``rank`` as ``read_mindspore_legacy`` takes it), every one
    ``read_mindspore_legacy`` may read (the cache's fingerprint)."""
    path = Path(path)
    return sorted(_files(path, rank_to_read(path, rank)).values())


def read_mindspore_legacy(path: Path, *, rank: int | None = None, id_offset: int = 0,
                          track_offset: int = 0) -> RunTables:
    """The canonical tables of one rank of a MindSpore profiler folder (module docstring). ``rank`` may be
    omitted when the folder holds one rank; InputError otherwise, naming the ranks found."""
    path = Path(path)
    rank = rank_to_read(path, rank)
    files = _files(path, rank)
    builder = RunBuilder()
    facts: dict = {"source_format": "mindspore", "rank": rank, "world_size": None, "step_source": STEP_SOURCES[3],
                   "fp_point": "fp_and_bp", "bp_point": "fp_and_bp"}     # its step phases: analysis.steps
    _Ops(files, builder, rank, facts).read()
    if "step_trace_raw_detail_time" in files:
        _add_step_trace(files["step_trace_raw_detail_time"], builder, rank)
        facts["step_source"] = STEP_SOURCES[0]
    for kind, add in (("minddata_pipeline_raw", add_pipeline), ("device_queue_profiling", add_device_queue)):
        if kind in files:
            add(files[kind], builder, rank=rank, facts=facts)
    if "device_queue_profiling" not in files and "dataset_iterator_profiling" in files:
        add_device_queue(files["dataset_iterator_profiling"], builder, rank=rank, facts=facts)
    if "minddata_cpu_utilization" in files:
        add_cpu_utilization(files["minddata_cpu_utilization"], builder, rank=rank)
    _add_meta_files(files, builder, facts)
    return builder.finish(facts, id_offset=id_offset, track_offset=track_offset)


def _files(path: Path, rank: int) -> dict[str, Path]:
    """``{kind}{suffix without _}`` -> path for the rank's files (e.g. ``aicore_intermediate_detail``)."""
    found = {}
    for p in path.iterdir():
        m = MINDSPORE_FILE.match(p.name)
        if m and int(m["rank"]) == rank and p.is_file():
            found[m["kind"] + (m["suffix"] or "")] = p
    return found


# --- operator executions ---------------------------------------------------------------------------------

class _Ops:
    """The rank's operator executions from one file, enriched from framework_raw and flops."""

    def __init__(self, files: dict[str, Path], builder: RunBuilder, rank: int, facts: dict):
        self.files, self.builder, self.rank, self.facts = files, builder, rank, facts
        self.npu = f"npu:{rank}"
        self.framework = _framework(files.get("framework_raw"), builder)
        self.flops = _flops(files.get("flops"), builder)
        self.dynamic = _dynamic_shape(files.get("dynamic_shape_info"), builder)

    def read(self) -> None:
        timeline = self.files.get("ascend_timeline_display")
        if not (timeline and self._timeline(timeline)):
            if self.dynamic:
                self._synthetic(self.dynamic, self.files["dynamic_shape_info"])
            elif "aicore_intermediate_detail" in self.files:
                self._synthetic(_aicore_detail(self.files["aicore_intermediate_detail"], self.builder.warnings),
                                self.files["aicore_intermediate_detail"])
        if self.dynamic and self.facts["step_source"] == STEP_SOURCES[3]:
            self.facts["step_source"] = STEP_SOURCES[2]

    def _rows(self, rows: list[dict]) -> dict:
        """Canonical slice columns for execution rows (name = full name, op, side, dur_ns, ...)."""
        info = [self.framework.get(r["name"]) or self.framework.get(r.get("short") or "") or {} for r in rows]
        return {
            "name": [r["name"] for r in rows],
            "op_type": [r.get("op_type") or i.get("op_type") or _op_type(r["name"]) for r, i in zip(rows, info)],
            "input_shapes": [r.get("input_shapes") or i.get("input_shapes") for r, i in zip(rows, info)],
            "input_dtypes": [i.get("input_dtypes") for i in info],
            "flops": [self.flops.get(r["name"]) for r in rows],
            "args": [json.dumps(i["args"]) if i.get("args") else None for i in info],
        }

    def _timeline(self, path: Path) -> bool:
        """Read the timeline's executions; False when it has none (then another file is used)."""
        stream = TraceStream(path)
        events = event_tables(stream)
        slices = events.slices
        roles = [_role(events.metadata, pid, tid) for pid, tid in zip(slices["pid"].to_pylist(),
                                                                      slices["tid"].to_pylist())]
        self.builder.sources.append(str(path))
        self.builder.warnings += stream.warnings
        args = [json_object(text) for text in slices["args"].to_pylist()]
        ops = [i for i, role in enumerate(roles) if role in _ROLE_TASKS]
        named = [i for i in ops if all(isinstance(args[i].get(key, ""), str) for key in ("fullname", "type"))]
        if len(named) < len(ops):
            self.builder.warnings.append(f"{path.name}: {counted(len(ops) - len(named), 'operator event')} not read "
                                         "(args fullname or type not a text)")
        ops = named
        if not ops:
            return False
        skipped = sum(role == "skip" for role in roles)
        if skipped:
            self.builder.warnings.append(f"{path.name}: {skipped} overlap and scope-name events not read "
                                         "(derived rows)")
        names, pids, tids = slices["name"].to_pylist(), slices["pid"].to_pylist(), slices["tid"].to_pylist()
        rows = [{"name": args[i].get("fullname") or names[i], "short": names[i], "op_type": args[i].get("type"),
                 "input_shapes": _op_info(args[i])[0]} for i in ops]
        missing = self._join_dynamic(rows)
        tracks = []
        for i in ops:
            kind, _ = _ROLE_TASKS[roles[i]]
            row_kind = "thread" if kind == "cpu_op" else "stream"
            device = "cpu" if kind == "cpu_op" else self.npu
            name = f"Host CPU Op {tids[i]}" if kind == "cpu_op" else f"{device} stream {tids[i]}"
            tracks.append(self.builder.track(row_kind, device, name, rank=self.rank, pid=pids[i], tid=tids[i]))
        take = pa.array(ops, pa.int64())
        columns = self._rows(rows)
        steps = [r.get("step") for r in rows]
        timeline_steps = "step_trace_raw_detail_time" not in self.files
        self.builder.add_slices({
            **columns, "track": tracks, "kind": [_ROLE_TASKS[roles[i]][0] for i in ops],
            "task_type": [_ROLE_TASKS[roles[i]][1] for i in ops],
            "start_ns": slices["ts_ns"].take(take), "dur_ns": slices["dur_ns"].take(take), "step": steps,
        }, placeable=timeline_steps)
        if timeline_steps:
            self._timeline_steps(slices, roles)
        if missing:
            self._synthetic(missing, self.files["dynamic_shape_info"])
        return True

    def _timeline_steps(self, slices: pa.Table, roles: list[str]) -> None:
        rows = [i for i, role in enumerate(roles) if role == "steps"]
        step_numbers = [int(m.group()) if (m := re.search(r"\d+", name)) else None
                        for name in slices["name"].take(pa.array(rows, pa.int64())).to_pylist()]
        if rows:
            self.facts["step_source"] = STEP_SOURCES[1]
            track = self.builder.track("thread", self.npu, "Steps", rank=self.rank, tid=_STEPS_TID)
            take = pa.array(rows, pa.int64())
            self.builder.add_slices({"track": [track] * len(rows), "kind": ["step"] * len(rows),
                                     "name": slices["name"].take(take), "start_ns": slices["ts_ns"].take(take),
                                     "dur_ns": slices["dur_ns"].take(take), "step": step_numbers})

    def _join_dynamic(self, rows: list[dict]) -> list[dict]:
        """Give the timeline's k-th execution of an op name the step and shapes of dynamic_shape_info's k-th;
        returns the dynamic_shape_info executions the timeline does not have."""
        listed = defaultdict(list)
        for entry in self.dynamic:
            listed[entry["short"]].append(entry)
        seen: dict[str, int] = defaultdict(int)
        for row in rows:
            k = seen[row["short"]]
            seen[row["short"]] += 1
            if k < len(listed.get(row["short"], ())):
                entry = listed[row["short"]][k]
                row["step"] = entry["step"]
                row["input_shapes"] = row["input_shapes"] or entry["input_shapes"]
        return [entry for short, entries in listed.items() for entry in entries[seen.get(short, 0):]]

    def _synthetic(self, rows: list[dict], path: Path) -> None:
        """Executions without timestamps, laid back to back from 0 on one row per side (host CPU ops on a
        thread row, device ops on a stream row)."""
        by_side = defaultdict(list)
        for row in rows:
            by_side[row["task_type"]].append(row)
        for task_type, side_rows in by_side.items():
            host = task_type == "HOST_CPU"
            device = "cpu" if host else self.npu
            name = f"{device} {task_type} (no timestamps)"
            track = self.builder.track("thread" if host else "stream", device, name, rank=self.rank,
                                       tid=f"{task_type} synthetic")
            dur = np.array([r["dur_ns"] for r in side_rows], dtype=np.int64)
            start = np.concatenate(([0], np.cumsum(dur)[:-1])) if len(dur) else dur
            self.builder.add_slices({
                **self._rows(side_rows), "track": [track] * len(side_rows),
                "kind": ["cpu_op" if host else "kernel"] * len(side_rows),
                "task_type": [task_type] * len(side_rows), "start_ns": start, "dur_ns": dur,
                "step": [r.get("step") for r in side_rows]}, placeable=False)
            self.facts.setdefault("synthetic_times", []).append(name)
        self.builder.sources.append(str(path))


def _role(metadata, pid: str, tid: str) -> str:
    if tid == _STEPS_TID or metadata.thread_names.get((pid, tid)) == "Steps":
        return "steps"
    if tid == _SCOPE_TID or "scope" in metadata.thread_names.get((pid, tid), "").lower():
        return "skip"
    process = metadata.process_names.get(pid, "").lower()
    for word, role in _PROCESS_WORDS:
        if word in process:
            return role
    return _PIDS.get(int(pid), "ai_core") if pid.isdigit() else "ai_core"



def _op_info(op_info: dict) -> tuple[str | None, str | None]:
    """(input shapes JSON, input dtypes JSON) of MindSpore's op_info (``input_0``, ``input_1``, ...)."""
    inputs = [op_info[k] for k in sorted((k for k in op_info if k.startswith("input_")),
                                         key=lambda k: int(k[6:]) if k[6:].isdigit() else 0)
              if isinstance(op_info[k], dict)]
    if not inputs:
        return None, None
    shapes = [[int(d) if d.strip().lstrip("-").isdigit() else d.strip() for d in str(i.get("shape", "")).split(",")
               if d.strip()] for i in inputs]
    return json.dumps(shapes), json.dumps([i.get("data_type") for i in inputs])


def _op_type(name: str) -> str:
    """``Default/network/Conv2D-op13`` -> ``Conv2D``."""
    return _OP_NUMBER.sub("", name.rsplit("/", 1)[-1])


def _framework(path: Path | None, builder: RunBuilder) -> dict[str, dict]:
    """framework_raw rows by full name and by kernel (short) name."""
    if path is None:
        return {}
    table = read_csv(path, builder.warnings, required=["full_name"])
    found = {}
    for row in table.to_pylist():
        shapes, dtypes = _op_info(json_object(row.get("op_info")))
        info = {"op_type": row.get("kernel_type"), "input_shapes": shapes, "input_dtypes": dtypes,
                "args": {k: row[k] for k in ("task_id", "stream_id", "block_dim", "subgraph", "op_name")
                         if row.get(k) is not None}}
        found[row["full_name"]] = info
        if row.get("kernel_name"):
            found.setdefault(row["kernel_name"], info)
    builder.sources.append(str(path))
    return found


def _flops(path: Path | None, builder: RunBuilder) -> dict[str, int]:
    """flops_N.txt: full name -> FLOPs of one execution (MFLOPs, cube + vector, x 10^6)."""
    if path is None:
        return {}
    table = read_csv(path, builder.warnings, required=["full_name"])
    columns = [c for c in table.column_names if c.startswith("MFLOPs") or c == "FLOPs"]
    if not columns:
        read_csv(path, builder.warnings, required=["FLOPs"])
    table = number_rows(table, path, builder.warnings, numbers=columns)
    total = numbers(table[columns[0]])
    for column in columns[1:]:
        total = pc.add(pc.fill_null(total, 0), pc.fill_null(numbers(table[column]), 0))
    builder.sources.append(str(path))
    return {name: int(round(value * 1e6)) for name, value in zip(table["full_name"].to_pylist(), total.to_pylist())
            if value is not None}


def _dynamic_shape(path: Path | None, builder: RunBuilder) -> list[dict]:
    """dynamic_shape_info_N.json executions in file order: step, op name, type, side, duration."""
    if path is None:
        return []
    try:
        steps = loads_bounded(read_regular(path), path.name)["operator"]
        executions = [(step, e) for step, entries in steps.items() for e in entries]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        builder.warnings.append(f"{path.name}: not a MindSpore dynamic shape file ({error}); expected "
                                '{"operator": {"<step>": [{"step", "op_type", "op_name", "op_side", "dur", '
                                '"shape_info"}]}}; not read (no steps or shapes from it)')
        return []
    rows, bad = [], 0
    for step, e in executions:
        try:
            if not isinstance(e["op_name"], str) or not isinstance(e.get("op_type", ""), (str, type(None))):
                raise TypeError("op_name or op_type not a text")
            rows.append({"name": e["op_name"], "short": e["op_name"], "op_type": e.get("op_type"),
                         "task_type": _SIDE_TASKS.get(str(e.get("op_side", "")).lower(), "HOST_CPU"),
                         "step": int(e.get("step", step)), "dur_ns": int(round(float(e["dur"]) * 1000)),
                         "input_shapes": json.dumps([loads_bounded(s, "shape_info") for s in e.get("shape_info") or []])
                         or None})
        except (ValueError, KeyError, TypeError, AttributeError):
            bad += 1
    if bad:
        builder.warnings.append(f"{path.name}: {counted(bad, 'execution')} not read (not an object with op_name "
                                "and op_type texts, a numeric dur and step, and shape_info a list of JSON texts)")
    builder.sources.append(str(path))
    return rows


def _aicore_detail(path: Path, warnings: list[str]) -> list[dict]:
    """aicore_intermediate_N_detail.csv: each op's ``execution_frequency`` executions of its average time."""
    table = number_rows(read_csv(path, warnings, required=["full_name", "execution_ms", "count"]), path, warnings,
                        numbers=["execution_ms", "count"])
    rows = []
    for name, ms, count in zip(table["full_name"].to_pylist(), numbers(table["execution_ms"]).to_pylist(),
                               numbers(table["count"], pa.int64()).to_pylist()):
        if ms is None or not count:
            continue
        rows += [{"name": name, "task_type": "AI_CORE", "dur_ns": int(round(ms * _MS_NS))}] * count
    return rows


# --- step trace and meta files ---------------------------------------------------------------------------

def _add_step_trace(path: Path, builder: RunBuilder, rank: int) -> None:
    table = read_csv(path, builder.warnings, required=["step", "start_point", "end_point", "fp_point", "bp_point"])
    table = number_rows(table, path, builder.warnings, numbers=table.column_names)
    table = table.filter(pc.is_valid(numbers(table["step"])))      # the average row: step "-"

    def ticks(name: str) -> pa.Array:
        return pc.multiply(numbers(table[name], pa.int64()), _TICK_NS)  # exact: integer texts cast directly

    steps = pa.table({"step": numbers(table["step"], pa.int32()), "start_ns": ticks("start_point"),
                      "end_ns": ticks("end_point"), "fp_ns": ticks("fp_point"), "bp_ns": ticks("bp_point")})
    track = builder.track("thread", f"npu:{rank}", "Step Trace", rank=rank, tid="step_trace")
    add_steps(builder, track, steps, phases={"fp_bp": "fp_and_bp", "tail": "tail"}, gap="iteration_interval")
    reduces = sorted(c[:-len("_start_point")] for c in table.column_names
                     if c.startswith("stream_") and c.endswith("_start_point"))
    for name in reduces:
        if f"{name}_end_point" not in table.column_names:
            continue
        start, end = ticks(f"{name}_start_point"), ticks(f"{name}_end_point")
        # MindInsight writes 0 for a span a step did not have
        valid = pc.fill_null(pc.and_(pc.greater(start, 0), pc.greater_equal(end, start)), False)
        n = int(pc.sum(valid).as_py() or 0)
        stream = name.split("_")[1]
        lane = builder.track("stream", f"npu:{rank}", f"npu:{rank} stream {stream} (step trace all-reduce)",
                             rank=rank, tid=stream)
        kind, task_type = _ROLE_TASKS["comm"]          # a communication task, as the timeline's are
        builder.add_slices({"track": [lane] * n, "kind": [kind] * n, "task_type": [task_type] * n,
                            "op_type": ["AllReduce"] * n,
                            "name": [f"AllReduce {name}"] * n, "args": [_REDUCE_ARGS] * n,
                            "start_ns": start.filter(valid), "dur_ns": pc.subtract(end, start).filter(valid),
                            "step": steps["step"].filter(valid)})
    builder.sources.append(str(path))


def _add_meta_files(files: dict[str, Path], builder: RunBuilder, facts: dict) -> None:
    if "aicore_intermediate_type" in files:
        facts["mindspore_op_type_statistic"] = read_csv(files["aicore_intermediate_type"], builder.warnings).to_pylist()
        builder.sources.append(str(files["aicore_intermediate_type"]))
    for kind in ("flops_summary", "flops_scope", "ascend_timeline_summary"):
        if kind in files:
            document = read_json(files[kind], builder.warnings, "not read")
            if document is not None:
                facts[f"mindspore_{kind}"] = document
                builder.sources.append(str(files[kind]))
