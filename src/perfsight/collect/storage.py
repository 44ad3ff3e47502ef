"""storage_limit: age out perfsight's own oldest trace windows under the output directory (seed 000's rule).

Seed 000: when the profiling data files are about to fill ``storage_limit`` MB, or the disk's remaining
space is down to 20 MB or less, the oldest files are aged out (deleted); unset, the limit is 90% of the free
space of the disk holding the output directory, measured when collection starts. The profiling data files
are perfsight's own and nothing else: the run directories directly under the output directory that prove
perfsight made them (a ``PROF_`` name of perfsight's pattern holding a perfsight manifest). Their files
count towards the limit; only the trace windows a manifest lists (regular files in ``host/data``, never a
symlink) are ever deleted, oldest run first and, within a run, oldest window first. The last window of a
run still collecting (this process's, or another rank's) is never deleted. A user's files beside, inside or
below the output directory are never looked at, let alone deleted. Every deletion is logged, and so is a
disk too full for anything to be aged out.
"""
from __future__ import annotations

import os
import shutil
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

from perfsight.core import layout
from perfsight.core.errors import InputError

MB = 1024 * 1024
MIN_FREE_BYTES = 20 * MB
DEFAULT_SHARE_OF_FREE = 0.9
RUN_FORMAT = "perfsight-run"  # the manifest's "format": what proves perfsight made a run directory


def default_limit_bytes(root: Path) -> int:
    return int(shutil.disk_usage(root).free * DEFAULT_SHARE_OF_FREE)


@dataclass(frozen=True)
class _Run:
    """One run directory perfsight made: the bytes it holds and the trace windows it may lose."""

    start_ns: int
    path: Path
    used_bytes: int
    windows: list[tuple[Path, int]]  # (trace window, its size), oldest first; the deletable ones only


@dataclass
class StorageGuard:
    root: Path
    limit_bytes: int
    log: Callable[[str], None]
    free_bytes: Callable[[Path], int] = lambda p: shutil.disk_usage(p).free
    _warned_full: bool = field(default=False, init=False)

    @classmethod
    def for_option(cls, root: Path, storage_limit_mb: int | None, log) -> "StorageGuard":
        limit = storage_limit_mb * MB if storage_limit_mb else default_limit_bytes(root)
        return cls(root=root, limit_bytes=limit, log=log)

    def enforce(self, keep: Path | None = None) -> list[Path]:
        """Delete the oldest deletable trace windows until the runs' files are within the limit and the disk
        has more than the free-space floor, never ``keep`` (the window just written); return what was
        deleted."""
        runs = sorted(_perfsight_runs(self.root), key=lambda run: (run.start_ns, run.path.name))
        used = sum(run.used_bytes for run in runs)
        free = self.free_bytes(self.root)
        removed = []
        for path, size in (window for run in runs for window in run.windows if window[0] != keep):
            if used <= self.limit_bytes and free > MIN_FREE_BYTES:
                break
            try:
                path.unlink()
            except OSError as exc:
                self.log(f"storage_limit: could not age out {path}: {exc.strerror}")
                continue
            used -= size
            free += size
            removed.append(path)
            self.log(f"storage_limit: aged out {path} ({size} bytes), the oldest trace window perfsight wrote "
                     f"under {self.root}, to stay within {self.limit_bytes // MB} MB of profiling data and "
                     f"above {MIN_FREE_BYTES // MB} MB free")
        if (used > self.limit_bytes or free <= MIN_FREE_BYTES) and not self._warned_full:
            self._warned_full = True
            self.log(f"storage_limit: {used // MB} MB of profiling data (limit {self.limit_bytes // MB} MB), "
                     f"{free // MB} MB free (floor {MIN_FREE_BYTES // MB} MB), and no older trace window of "
                     f"perfsight's left under {self.root} to age out; the last window of a run still "
                     "collecting and every file perfsight did not write are kept")
        return removed


def _perfsight_runs(root: Path) -> list[_Run]:
    """The run directories directly under ``root`` that a perfsight manifest proves perfsight made."""
    try:
        children = list(os.scandir(root))
    except OSError:
        return []
    runs = []
    for entry in children:
        if not layout.RUN_DIR_RE.match(entry.name) or not entry.is_dir(follow_symlinks=False):
            continue
        manifest = _manifest(Path(entry.path))
        if manifest is not None:
            runs.append(_run(Path(entry.path), manifest))
    return runs


def _manifest(run_dir: Path) -> dict | None:
    """The run's manifest when it proves perfsight made the run: a regular file (not a link) of its format."""
    try:
        if not stat.S_ISREG((run_dir / layout.MANIFEST).lstat().st_mode):
            return None
        manifest = layout.read_manifest(run_dir)
    except (OSError, InputError):
        return None
    return manifest if manifest.get("format") == RUN_FORMAT else None


def _run(run_dir: Path, manifest: dict) -> _Run:
    host_data = run_dir / layout.HOST_DATA
    listed = manifest.get("traces")
    names = list(dict.fromkeys(name for name in listed if isinstance(name, str))) if isinstance(listed, list) else []
    windows = []
    for name in names:
        path = host_data / name
        if Path(name).name != name or not path.match(layout.TRACE_GLOB):
            continue
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            windows.append((path, st.st_size))
    if windows and _still_collecting(manifest):
        windows.pop()  # its last window: the newest data of a run in progress stays
    start = manifest.get("start_ns")
    return _Run(start if type(start) is int else 0, run_dir, _bytes_below(run_dir), windows)


def _still_collecting(manifest: dict) -> bool:
    """Whether a run's process may still be writing it: collecting, and not known to have died (a process
    on another host, as on a shared filesystem, is taken to be alive)."""
    if manifest.get("status") != "collecting":
        return False
    pid = manifest.get("pid")
    if manifest.get("host") != socket.gethostname() or type(pid) is not int:
        return True
    return psutil.pid_exists(pid)


def _bytes_below(folder: Path) -> int:
    """The size of the regular files in ``folder`` and below (symlinks are not followed)."""
    total = 0
    for dirpath, _dirs, names in os.walk(folder):
        for name in names:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total
