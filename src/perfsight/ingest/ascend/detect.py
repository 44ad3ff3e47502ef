"""Recognising Ascend profiler output by its file and folder names, without importing any reader.

Owns the names that say what a folder is (torch_npu's ``ASCEND_PROFILER_OUTPUT`` and its timed files and
database, an msprof ``PROF_`` directory's ``device_N``, MindSpore's ``{kind}_{N}`` files) and the tests
built on them, and which rank of a MindSpore folder a run reads (``rank_to_read``). The Ascend ``Reader``
classes (``formats``) ask these of every folder searched; the reader modules (heavy imports: DuckDB, SQLite)
are imported only once a folder is known to be theirs.
"""
from __future__ import annotations

import re
from pathlib import Path

from perfsight.core import layout
from perfsight.core.errors import InputError

#: torch_npu's (and current MindSpore's) output folder inside ``*_ascend_pt`` / ``*_ascend_ms``
OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
#: files of OUTPUT_DIR with timed events (host operators, device tasks)
TIMED_FILES = ("trace_view.json", "kernel_details.csv")
#: the other files of OUTPUT_DIR the text reader reads (steps, communication, memory): what a rank collected
#: at a lower level, or pruned to what msprof-analyze's cluster mode needs, may hold only some of them
SIDE_FILES = ("step_trace_time.csv", "communication.json", "communication_matrix.json", "memory_record.csv",
              "operator_memory.csv", "npu_module_mem.csv")
#: the files of OUTPUT_DIR msprof-analyze's cluster mode reads, its steps and communication as torch_npu
#: reported them (with the folder's profiler info): all a light read takes (``Reader.light``)
CLUSTER_FILES = ("step_trace_time.csv", "communication.json", "communication_matrix.json")
#: every file of OUTPUT_DIR the text reader reads; any one of them makes a torch_npu text profile
TEXT_FILES = TIMED_FILES + SIDE_FILES
DB_NAME = re.compile(r"ascend_pytorch_profiler(?:_(\d+))?\.db|msprof_\d+\.db")  # msprof --type=db: the same schema
#: the names that say a folder is torch_npu's (or current MindSpore's) output, whatever it holds
_RUN_DIR_NAME = re.compile(r".*_ascend_(?:pt|ms)$")
_INFO_FILES = ("profiler_info*.json", "profiler_metadata.json")
MSPROF_DEVICE_DIR = re.compile(r"^device_(\d+)$")
#: msprof's text export folder (``msprof --export=on``), an export file's name and the database's
MSPROF_OUTPUT_DIR = "mindstudio_profiler_output"
MSPROF_EXPORT = re.compile(
    r"^(?P<kind>[a-z][a-z_]*?)(?:_slice_(?P<slice>\d+))?_(?P<stamp>\d[\d_]*)\.(?P<ext>csv|json)$")
MSPROF_DB = re.compile(r"^msprof_.*\.db$")
MINDSPORE_FILE = re.compile(
    r"^(?P<kind>framework_raw|aicore_intermediate|step_trace_raw|ascend_timeline_display|ascend_timeline_summary"
    r"|flops_summary|flops_scope|flops|minddata_pipeline_raw|device_queue_profiling|dataset_iterator_profiling"
    r"|minddata_cpu_utilization|dynamic_shape_info)_(?P<rank>\d+)(?P<suffix>_detail_time|_detail|_type)?"
    r"\.(?:csv|json|txt)$")


def is_torch_npu_dir(path: Path) -> bool:
    """A directory holding ``ASCEND_PROFILER_OUTPUT/`` with any file of ``TEXT_FILES`` (torch_npu names it
    ``{worker}_{pid}_{time}_ascend_pt``; renamed copies are recognised by their content)."""
    output = Path(path) / OUTPUT_DIR
    return output.is_dir() and any((output / name).is_file() for name in TEXT_FILES)


def lacking(path: Path, files: tuple[str, ...] = TEXT_FILES) -> list[str]:
    """The files of ``files`` a torch_npu text profile lacks (what its warnings say it costs)."""
    output = Path(path) / OUTPUT_DIR
    return [name for name in files if not (output / name).is_file()]


def torch_npu_without_data(path: Path) -> str | None:
    """For a folder that is torch_npu's output by its name or its files (``*_ascend_pt``, ``*_ascend_ms``,
    ``ASCEND_PROFILER_OUTPUT/``, profiler_info_N.json, profiler_metadata.json) but holds nothing the readers
    read: what it is and which files it lacks; None for any other folder."""
    path = Path(path)
    if not path.is_dir() or is_torch_npu_dir(path) or find_torch_npu_db(path) is not None:
        return None
    signs = [f"{OUTPUT_DIR}/"] if (path / OUTPUT_DIR).is_dir() else []
    signs += sorted(p.name for pattern in _INFO_FILES for p in path.glob(pattern) if p.is_file())
    if not signs and not _RUN_DIR_NAME.match(path.name):
        return None
    holding = f"holding {', '.join(signs)}" if signs else "by its name"
    return (f"a torch_npu profiler folder ({holding}) without any file perfsight reads: {OUTPUT_DIR}/ lacks "
            f"{', '.join(TEXT_FILES)} and a profiler database (ascend_pytorch_profiler_N.db, msprof_N.db)")


def find_torch_npu_db(run_dir: Path) -> Path | None:
    """The profiler database of a torch_npu run: ``run_dir`` is the ``*_ascend_pt`` directory, its
    ASCEND_PROFILER_OUTPUT directory, a folder holding one database and nothing else of a run, or the .db
    itself (``DB_NAME``: ``ascend_pytorch_profiler_N.db``, ``msprof_N.db``); None when there is none, and for
    an msprof PROF_ directory (its own reader's) or a folder holding several databases (each one a run)."""
    run_dir = Path(run_dir)
    if run_dir.is_file():
        return run_dir if DB_NAME.fullmatch(run_dir.name) else None
    if is_msprof_dir(run_dir):
        return None
    inside = _databases(run_dir / OUTPUT_DIR)
    if inside:
        return inside[0]
    beside = _databases(run_dir)
    return beside[0] if len(beside) == 1 else None


def _databases(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if DB_NAME.fullmatch(p.name) and p.is_file())
    except OSError:
        return []


def is_msprof_dir(path: Path) -> bool:
    """A ``PROF_`` directory without perfsight's manifest.json that holds ``device_*/``, ``host/`` or only its
    text export ``mindstudio_profiler_output/`` (as people share it)."""
    path = Path(path)
    if not (path.is_dir() and path.name.startswith("PROF_")) or (path / layout.MANIFEST).is_file():
        return False
    return ((path / "host").is_dir() or (path / MSPROF_OUTPUT_DIR).is_dir()
            or any(MSPROF_DEVICE_DIR.match(p.name) and p.is_dir() for p in path.iterdir()))


def msprof_devices(path: Path) -> list[int]:
    """The device ids of a PROF_ directory's ``device_N/`` folders, sorted."""
    return sorted(int(m.group(1)) for p in Path(path).iterdir()
                  if (m := MSPROF_DEVICE_DIR.match(p.name)) and p.is_dir())


def msprof_folders(path: Path) -> list[tuple[Path, int, bool]]:
    """Where a PROF_ directory's exports may be, as (folder, device, monotonic): ``mindstudio_profiler_output/``
    at the top, in each ``device_N/`` (with older CANN's ``summary/`` and per-iteration ``timeline/``, whose
    times are on the device's monotonic clock) and in ``host/``; the top and host folders' device is the first."""
    path = Path(path)
    devices = msprof_devices(path)
    default = devices[0] if devices else 0
    folders = [(path / MSPROF_OUTPUT_DIR, default, False)]
    for device in devices:
        base = path / f"device_{device}"
        folders += [(base / MSPROF_OUTPUT_DIR, device, False), (base / "summary", device, False),
                    (base / "timeline", device, True)]
    return folders + [(path / "host" / MSPROF_OUTPUT_DIR, default, False)]


def msprof_databases(path: Path) -> list[Path]:
    """The ``msprof_*.db`` files of a PROF_ directory (at its top or in an export folder), sorted."""
    return sorted(p for folder in [Path(path), *(f for f, *_ in msprof_folders(path))] if folder.is_dir()
                  for p in folder.iterdir() if MSPROF_DB.match(p.name) and p.is_file())


def msprof_without_data(path: Path) -> str | None:
    """For a PROF_ directory (``is_msprof_dir``) holding neither text exports nor a database: what it is and what
    it lacks; None for any other folder."""
    if not is_msprof_dir(path) or msprof_databases(path):
        return None
    for folder, _, _ in msprof_folders(path):
        if folder.is_dir() and any(MSPROF_EXPORT.match(p.name) and p.is_file() for p in folder.iterdir()):
            return None
    holding = ", ".join(f"{p.name}/" for p in sorted(Path(path).iterdir()) if p.is_dir())
    return (f"an msprof PROF_ directory (holding {holding}) without exports: no {MSPROF_OUTPUT_DIR}/ (msprof "
            "--export=on), device_*/timeline or summary, nor msprof_*.db")


def ranks_in(path: Path) -> list[int]:
    """The rank (device) ids the folder's MindSpore profiler files are named with, sorted."""
    path = Path(path)
    if not path.is_dir():
        return []
    return sorted({int(m["rank"]) for p in path.iterdir() if (m := MINDSPORE_FILE.match(p.name)) and p.is_file()})


def rank_to_read(path: Path, rank: int | None) -> int:
    """The rank whose MindSpore files in the folder a run reads: ``rank``, or the folder's one rank when it is
    None; InputError when the folder holds no files, several ranks' (``rank`` None) or not ``rank``'s."""
    ranks = ranks_in(path)
    if not ranks:
        raise InputError(f"{path}: holds no MindSpore profiler files (framework_raw_N.csv, "
                         "aicore_intermediate_N_*.csv, step_trace_raw_N_detail_time.csv, ...)")
    if rank is None and len(ranks) > 1:
        raise InputError(f"{path}: holds the files of ranks {', '.join(map(str, ranks))}; read one at a time "
                         "(rank=N)")
    rank = ranks[0] if rank is None else rank
    if rank not in ranks:
        raise InputError(f"{path}: holds no files of rank {rank}; it holds ranks {', '.join(map(str, ranks))}")
    return rank


def is_mindspore_legacy_dir(path: Path) -> bool:
    """A folder (not a PROF_ directory) holding MindSpore profiler files of at least one rank."""
    path = Path(path)
    return not path.name.startswith("PROF_") and bool(ranks_in(path))
