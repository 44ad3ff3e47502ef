"""The run directory: names and places shared by the collector (writes) and the readers (read).

One collecting process writes one ``PROF_{YYYYMMDDhhmmssfff}_{pid}_{random}/`` directory::

    PROF_.../
      manifest.json            options given and resolved, versions, device, rank, start/end, steps
      .manifest_reserve        room set aside while collecting, freed to close the run on a full disk
      host/data/               trace_{seq}.pt.trace.json  Kineto trace windows, each written whole
                               host_usage.csv             psutil samples, one line per sample, flushed
                               steps.csv                  one line per finished step, flushed
                               msproftx.csv               user ranges (perfsight.mark) when msproftx=on
                               collect.log                warnings and internal failures
      device_{id}/data/        device_info.json           properties of the device used (cpu or cuda:N)
      perfsight_cache/         the canonical tables as Parquet (``export --clear`` removes it)
      perfsight_output/        what ``perfsight export`` writes
"""
from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path

from perfsight.core.errors import InputError
from perfsight.core.files import read_regular
from perfsight.core.json_depth import loads_bounded

RUN_DIR_RE = re.compile(r"^PROF_\d{17}_\d+_[0-9A-Za-z]+$")
MANIFEST = "manifest.json"
HOST_DATA = Path("host") / "data"
CACHE_DIR = "perfsight_cache"
OUTPUT_DIR = "perfsight_output"
#: the folder of a job's per-rank summaries (``perfsight cluster``'s store, beside the job)
CLUSTER_DIR = "perfsight_cluster"
#: the folder of an armed job's live files in its output folder (``collect/livefiles.py``: each rank's status
#: and recent step times, ``perfsight capture``'s requests and the ranks' answers)
LIVE_DIR = "perfsight_live"
TRACE_GLOB = "trace_*.pt.trace.json*"
HOST_USAGE = "host_usage.csv"
STEPS = "steps.csv"
MSPROFTX = "msproftx.csv"
COLLECT_LOG = "collect.log"
MANIFEST_RESERVE = ".manifest_reserve"
DEVICE_INFO = "device_info.json"


def new_run_dir_name(now_ns: int | None = None, pid: int | None = None) -> str:
    """``PROF_{YYYYMMDDhhmmssfff}_{pid}_{random}`` in local time, as msprof names its directories."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(now_ns // 1_000_000_000))
    millis = (now_ns // 1_000_000) % 1000
    pid = os.getpid() if pid is None else pid
    return f"PROF_{stamp}{millis:03d}_{pid}_{secrets.token_hex(4)}"


def device_data_dir(run_dir: Path, device_id: int) -> Path:
    return run_dir / f"device_{device_id}" / "data"


def read_manifest(run_dir: Path) -> dict:
    """``run_dir``'s manifest (collect/rundir.py writes it), the one reader of it: the JSON object, or an
    InputError naming the file when it is missing, not a regular file (a FIFO is never waited on), not JSON or
    not an object."""
    path = run_dir / MANIFEST
    try:
        manifest = loads_bounded(read_regular(path), str(path))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a readable perfsight manifest ({exc})") from None
    if not isinstance(manifest, dict):
        raise InputError(f"{path}: not a readable perfsight manifest (a JSON {type(manifest).__name__}, not an "
                         "object)")
    return manifest


def is_run_dir(path: Path) -> bool:
    """A perfsight run directory: a PROF_ directory holding our manifest."""
    return path.is_dir() and (path / MANIFEST).is_file()


def writable_folder(folder: Path) -> bool:
    """Whether perfsight may write into ``folder`` (its cache, its exports): its permissions allow writing
    to someone, and to us. A folder with no write bit is read-only data (a shared corpus, an archive) that
    root, whom ``os.access`` lets write anywhere, must not fill either."""
    try:
        return bool(folder.stat().st_mode & 0o222) and os.access(folder, os.W_OK)
    except OSError:
        return False


def find_run_dirs(path: Path) -> list[Path]:
    """``path`` itself if it is a run directory, else the run directories directly below it, sorted."""
    if is_run_dir(path):
        return [path]
    if not path.is_dir():
        return []
    return sorted(p for p in path.iterdir() if is_run_dir(p))
