"""msprof PROF_ directories (CANN's own, not perfsight's: no manifest.json) read into the canonical tables.

Public: ``read_msprof_dir`` and ``msprof_sources`` (every export file: the cache's fingerprint).

Layout (seed 003): ``PROF_XXX/{device_N, host}/data`` hold the raw data; ``msprof --export`` writes the
text exports to ``PROF_XXX/mindstudio_profiler_output/`` (older CANN: ``device_N/summary`` and
``device_N/timeline``, where the timeline is per iteration: ``msprof_{device}_{model}_{iteration}.json``)
and ``--type=db`` a ``msprof_{timestamp}.db``. Exports are found in all of those places. A file name is
``{kind}[_slice_{N}]_{stamp}.{csv,json}``: the parts of one kind (``_slice_N_`` splits of 1,000,000 rows,
or per-iteration files) are read in order: slice number first (their stamps may differ), then the stamp's
numbers.

msprof writes the same formats as torch_npu's ASCEND_PROFILER_OUTPUT, under other names, and they are read
by the same code: the timeline ``msprof_*.json`` is trace_view.json without the Python rows
(torch_npu_trace.read_trace; when there is none, the per-kind ``task_time``/``hccl``/``step_trace`` JSON
of older CANN), ``op_summary`` is kernel_details.csv (torch_npu_kernels: its rows complete the timeline's
device tasks; without a timeline the ``task_time`` CSV, the scheduler's record of every task and its duration,
stands in for it and op_summary completes its rows; op_summary's rows are the tasks only when both are missing),
``msprof_*.db`` is the torch_npu database without the PyTorch tables (torch_npu_db; read only when there
are no text exports: it holds the same data). msprof's own exports are in msprof_csv.

The step trace: the timeline's step rows (events whose args carry ``Iteration ID``: category ``Iteration
Time`` is the ``step`` slice ``Iteration N``, the others, ``FP_BP Time``, ``Iteration Refresh`` and
``Reduce``, annotations in it), else the step_trace CSV (msprof_csv.step_rows, as ascend_build.add_steps);
meta ``step_source`` says which (``STEP_SOURCES``).

Devices and ranks: each ``device_N`` is device ``npu:N``; its rank is the ``rank`` argument (a directory
with one device), else ``rank_id`` of its ``info.json.N``, else N when the directory holds several devices.
Older per-iteration timelines count microseconds on the device's monotonic clock; ``start_info.N`` gives
the epoch offset (``collectionTimeBegin`` us - ``clockMonotonicRaw`` ns), applied to their slices so times
are epoch ns (those timelines have no counter events).
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.core import layout
from perfsight.core.errors import InputError
from perfsight.core.files import read_regular
from perfsight.core.json_depth import loads_bounded
from perfsight.core.tables import RunTables, meta_table
from perfsight.ingest.ascend.ascend_csv import numbers
from perfsight.ingest.ascend.detect import (
    MSPROF_EXPORT,
    is_msprof_dir,
    msprof_databases,
    msprof_devices,
    msprof_folders,
    msprof_without_data,
)
from perfsight.ingest.ascend.msprof_csv import add_npu_mem, statistic_rows, step_rows, task_kernels
from perfsight.ingest.ascend.torch_npu_kernels import enrich, read_kernels, tasks_from_kernels
from perfsight.ingest.ascend.torch_npu_trace import read_trace
from perfsight.ingest.common.build import RunBuilder, add_steps
from perfsight.ingest.common.columns import counted

_STEP_PHASES = {"fp_bp": "FP_BP Time {step}", "tail": "Iteration Refresh {step}"}
#: meta step_source of a PROF_ directory read from its text exports: its timelines' Iteration rows, else the
#: step_trace CSV (joined with ", " when its devices differ)
STEP_SOURCES = ("timeline", "step_trace CSV", "none")
_ITERATION_ID = r'"Iteration ID"\s*:\s*"?(?P<step>\d+)'
_SLICE_COLUMNS = ("track", "kind", "name", "op_type", "task_type", "start_ns", "dur_ns", "step", "correlation_id",
                  "input_shapes", "input_dtypes", "args")


def msprof_sources(path: Path) -> list[Path]:
    """Every export file under the directory (the cache's fingerprint)."""
    exports = _Exports(Path(path))
    return sorted({file for files in exports.kinds.values() for _, file in files} |
                  set(exports.databases if exports.text_empty else []))


def read_msprof_dir(path: Path, *, rank: int | None = None, id_offset: int = 0, track_offset: int = 0) -> RunTables:
    """The canonical tables of one msprof PROF_ directory (all its devices). InputError when it is not one,
    or holds neither text exports nor a database."""
    path = Path(path)
    if not is_msprof_dir(path):
        raise InputError(f"{path}: not an msprof PROF_ directory (expected PROF_* with device_*/ or host/, "
                         f"and no perfsight {layout.MANIFEST})")
    exports = _Exports(path)
    ranks = _ranks(path, exports.devices, rank)
    if exports.text_empty:
        return _read_database(path, exports, ranks, id_offset, track_offset)
    builder = RunBuilder()
    facts: dict = {"source_format": "msprof", "devices": exports.devices}
    _read_text(exports, builder, ranks, facts)
    if exports.databases:
        builder.warnings.append(f"not read: {', '.join(p.name for p in exports.databases)} (the text exports "
                                "hold the same data)")
    distinct = sorted({r for r in ranks.values() if r is not None})
    facts.update(rank=distinct[0] if len(distinct) == 1 else None, world_size=len(distinct) or None,
                 device_info=_device_infos(path, exports.devices, builder.warnings))
    return builder.finish(facts, id_offset=id_offset, track_offset=track_offset)


def _read_database(path: Path, exports: _Exports, ranks: dict[int, int | None], id_offset: int,
                   track_offset: int) -> RunTables:
    if not exports.databases:
        raise InputError(f"{path}: {msprof_without_data(path)}")
    if len(exports.databases) > 1:
        raise InputError(f"{path}: holds several databases ({', '.join(p.name for p in exports.databases)}); "
                         "expected one msprof_*.db")
    from perfsight.ingest.ascend.torch_npu_db import read_torch_npu_db

    rank = next(iter(ranks.values())) if len(ranks) == 1 else None
    tables = read_torch_npu_db(exports.databases[0], rank=rank, id_offset=id_offset, track_offset=track_offset)
    meta = tables.meta_dict()
    warnings = json.loads(meta.get("parse_warnings") or "[]")
    tables.meta = meta_table({**meta, "source_format": "msprof", "devices": exports.devices,
                              "device_info": _device_infos(path, exports.devices, warnings),
                              "parse_warnings": warnings})
    return tables


class _Exports:
    """The export files under a PROF_ directory, per (folder, kind), each list in reading order."""

    def __init__(self, path: Path):
        self.devices = msprof_devices(path)
        self.kinds: dict[tuple, list[tuple[tuple, Path]]] = defaultdict(list)
        for folder, device, monotonic in msprof_folders(path):
            if not folder.is_dir():
                continue
            for file in folder.iterdir():
                found = MSPROF_EXPORT.match(file.name)
                if found and file.is_file():
                    order = (int(found["slice"] or -1), tuple(int(n) for n in found["stamp"].split("_") if n))
                    self.kinds[(folder, device, monotonic, found["kind"], found["ext"])].append((order, file))
        for files in self.kinds.values():
            files.sort()
        self.databases = msprof_databases(path)

    @property
    def text_empty(self) -> bool:
        return not self.kinds

    def groups(self) -> list[tuple[Path, int, bool, dict]]:
        """(folder, device, monotonic, {(kind, ext): [paths]}) per folder."""
        folders: dict[tuple, dict] = defaultdict(dict)
        for (folder, device, monotonic, kind, ext), files in self.kinds.items():
            folders[(folder, device, monotonic)][(kind, ext)] = [file for _, file in files]
        return [(*key, kinds) for key, kinds in sorted(folders.items(), key=lambda item: str(item[0][0]))]


def step_files(path: Path) -> list[Path]:
    """A PROF_ directory's step_trace CSV exports, in reading order (msprof's step files: the steps of a
    torch_npu profile that has nothing better)."""
    return [file for *_, kinds in _Exports(Path(path)).groups() for file in kinds.get(("step_trace", "csv"), [])]


def _read_text(exports: _Exports, builder: RunBuilder, ranks: dict[int, int | None], facts: dict) -> None:
    statistics: defaultdict[str, list] = defaultdict(list)
    step_sources: list[str] = []
    for folder, device, monotonic, kinds in exports.groups():
        rank = ranks.get(device)
        offset = _monotonic_offset(folder.parent, device) if monotonic else 0
        if offset:
            facts["base_time_ns"] = str(offset)
        slices = _timeline(kinds, builder, rank, device, offset, per_iteration=monotonic)
        kernels = _kernels(kinds, builder)
        if slices is None and ("task_time", "csv") in kinds:      # the scheduler's record of every task
            slices = tasks_from_kernels(task_kernels(kinds[("task_time", "csv")], builder.warnings), builder,
                                        rank=rank, device=device)
            builder.sources += [str(p) for p in kinds[("task_time", "csv")]]
        if slices is not None and kernels is not None:
            slices = enrich(slices, kernels, name="op_summary", warnings=builder.warnings)
        elif kernels is not None:
            slices = tasks_from_kernels(kernels, builder, rank=rank, device=device)
        if slices is not None:
            builder.add_slices({name: slices[name] for name in _SLICE_COLUMNS})
        if slices is not None and pc.any(pc.equal(slices["kind"], "step")).as_py():
            step_sources.append(STEP_SOURCES[0])
        elif ("step_trace", "csv") in kinds:
            add_step_csv(kinds[("step_trace", "csv")], builder, device, ranks)
            step_sources.append(STEP_SOURCES[1])
        for kind in ("op_statistic", "api_statistic"):
            paths = kinds.get((kind, "csv"), [])
            statistics[f"msprof_{kind}"] += statistic_rows(paths, builder.warnings)
            builder.sources += [str(p) for p in paths]
        add_npu_mem(kinds.get(("npu_mem", "csv"), []), builder, device=device, ranks=ranks)
    facts.update(statistics, step_source=", ".join(dict.fromkeys(step_sources)) or STEP_SOURCES[2])


def _timeline(kinds: dict, builder: RunBuilder, rank: int | None, device: int, offset: int, *,
              per_iteration: bool) -> pa.Table | None:
    """The timeline's slices (torch_npu_trace layout) with msprof's step rows made steps; None without one."""
    names = ["msprof"] if ("msprof", "json") in kinds else ["task_time", "hccl", "step_trace"]
    parts, first_warning = [], len(builder.warnings)
    for kind in names:
        paths = kinds.get((kind, "json"), [])
        if kind == "step_trace" and per_iteration:
            paths = paths[:1]  # the older per-iteration step_trace files each hold every iteration
        parts += [read_trace(p, builder, rank=rank, device=device).slices for p in paths]
        builder.sources += [str(p) for p in paths]
    if not parts:
        return None
    _fold_overlap_warnings(builder.warnings, first_warning)
    slices = pa.concat_tables(parts)
    if offset:
        slices = slices.set_column(slices.schema.get_field_index("start_ns"), "start_ns",
                                   pc.add(slices["start_ns"], offset))
    return _step_trace_rows(slices)


def _fold_overlap_warnings(warnings: list[str], first: int) -> None:
    """The timeline parts' "N Overlap Analysis events not read" warnings (from ``first`` on) as one."""
    found = [(i, int(m["count"])) for i, w in enumerate(warnings) if i >= first
             and (m := re.match(r"^.+?: (?P<count>\d+) Overlap Analysis events not read", w))]
    if found:
        for i, _ in reversed(found):
            del warnings[i]
        warnings.append(f"{sum(n for _, n in found)} Overlap Analysis events in {len(found)} timeline files not "
                        "read (msprof's own overlap rows; perfsight computes overlap from the tasks)")


def _step_trace_rows(slices: pa.Table) -> pa.Table:
    """msprof's step trace rows (args with ``Iteration ID``): ``Iteration N`` a step, the rest annotations."""
    found = pc.extract_regex(pc.fill_null(slices["args"], ""), _ITERATION_ID)
    steps = numbers(pc.struct_field(found, [0]), pa.int32())
    on_row = pc.and_(pc.is_valid(steps), pc.equal(slices["role"], "host")).to_numpy(zero_copy_only=False)
    if not on_row.any():
        return slices
    iteration = pc.match_substring_regex(slices["name"], r"^Iteration \d+$").to_numpy(zero_copy_only=False)
    kinds = np.array(slices["kind"].to_pylist(), dtype=object)
    kinds[on_row] = np.where(iteration[on_row], "step", "annotation")
    slices = slices.set_column(slices.schema.get_field_index("kind"), "kind", pa.array(kinds, pa.string()))
    step = pc.if_else(pa.array(on_row), steps, slices["step"])
    return slices.set_column(slices.schema.get_field_index("step"), "step", step)


def _kernels(kinds: dict, builder: RunBuilder) -> pa.Table | None:
    paths = kinds.get(("op_summary", "csv"), [])
    builder.sources += [str(p) for p in paths]
    return pa.concat_tables([read_kernels(p, builder.warnings) for p in paths]) if paths else None


def add_step_csv(paths: list[Path], builder: RunBuilder, device: int, ranks: dict[int, int | None]) -> None:
    """msprof's step_trace CSV rows (``msprof_csv.step_rows``) as steps with their phases, per device."""
    steps = step_rows(paths, builder.warnings, device=device)
    builder.sources += [str(p) for p in paths]
    for npu in sorted(set(steps["device"].to_pylist())):
        track = builder.track("thread", f"npu:{npu}", "Step Trace", rank=ranks.get(npu), pid=f"npu:{npu}",
                              tid="step_trace")
        mine = steps.filter(steps["device"].to_numpy() == npu)
        add_steps(builder, track, mine, phases=_STEP_PHASES)


def _ranks(path: Path, devices: list[int], rank: int | None) -> dict[int, int | None]:
    if rank is not None:
        if len(devices) > 1:
            raise InputError(f"{path}: holds devices {', '.join(map(str, devices))}; rank={rank} can only name "
                             "the rank of a directory with one device")
        return {device: rank for device in devices or [0]}
    ranks = {}
    for device in devices or [0]:
        rank_id = _info(path, device).get("rank_id")
        ranks[device] = (rank_id if type(rank_id) is int and rank_id >= 0
                         else device if len(devices) > 1 else None)
    return ranks


def _info(path: Path, device: int, name: str = "info.json") -> dict:
    """``device_N/{name}.N`` (or ``{name}``) as a dict; {} when absent or unreadable."""
    for candidate in (path / f"device_{device}" / f"{name}.{device}", path / f"device_{device}" / name):
        try:
            document = loads_bounded(read_regular(candidate), candidate.name)
        except (OSError, ValueError):
            continue
        return document if isinstance(document, dict) else {}
    return {}


def _device_infos(path: Path, devices: list[int], warnings: list[str]) -> list:
    """The ``DeviceInfo`` objects of the devices' info.json (meta ``device_info``); an entry that is not one is
    left out (warned)."""
    infos, bad = [], 0
    for device in devices:
        listed = _info(path, device).get("DeviceInfo", [])
        entries = listed if isinstance(listed, list) else [listed]
        infos += [entry for entry in entries if isinstance(entry, dict)]
        bad += sum(not isinstance(entry, dict) for entry in entries)
    if bad:
        warnings.append(f"info.json: {counted(bad, 'DeviceInfo entry')} not read (not an object)")
    return infos


def _monotonic_offset(device_dir: Path, device: int) -> int:
    """Epoch ns minus monotonic ns at the collection start (``start_info.N``); 0 when unknown."""
    start = _info(device_dir.parent, device, "start_info")
    try:
        return int(start["collectionTimeBegin"]) * 1000 - int(start["clockMonotonicRaw"])
    except (KeyError, TypeError, ValueError):
        return 0
