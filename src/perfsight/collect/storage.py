"""storage_limit: age out the oldest files under the output directory (seed 000's rule).

When the profiling files under the output directory are about to exceed ``storage_limit`` MB, or the
disk's free space is down to 20 MB, the oldest files are deleted first. Unset, the limit is 90% of
the free space of the disk holding the output directory, measured when collection starts. The
current run's manifest is never aged out; every deletion is logged.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import layout

MB = 1024 * 1024
MIN_FREE_BYTES = 20 * MB
DEFAULT_SHARE_OF_FREE = 0.9


def default_limit_bytes(root: Path) -> int:
    return int(shutil.disk_usage(root).free * DEFAULT_SHARE_OF_FREE)


@dataclass
class StorageGuard:
    root: Path
    limit_bytes: int
    keep: Path                      # the current run's manifest
    log: Callable[[str], None]
    free_bytes: Callable[[Path], int] = lambda p: shutil.disk_usage(p).free

    @classmethod
    def for_option(cls, root: Path, storage_limit_mb: int | None, keep: Path, log) -> "StorageGuard":
        limit = storage_limit_mb * MB if storage_limit_mb else default_limit_bytes(root)
        return cls(root=root, limit_bytes=limit, keep=keep, log=log)

    def _files_oldest_first(self) -> list[tuple[float, int, Path]]:
        files = []
        for dirpath, _dirs, names in os.walk(self.root):
            for name in names:
                path = Path(dirpath) / name
                if path == self.keep or name == layout.MANIFEST:
                    continue
                try:
                    st = path.stat()
                except OSError:
                    continue
                files.append((st.st_mtime, st.st_size, path))
        files.sort()
        return files

    def enforce(self) -> list[Path]:
        """Delete oldest files until under the limit and above the free-space floor; return what went."""
        files = self._files_oldest_first()
        used = sum(size for _, size, _ in files)
        free = self.free_bytes(self.root)
        removed = []
        for _mtime, size, path in files:
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
            self.log(f"storage_limit: aged out {path} ({size} bytes) to stay within "
                     f"{self.limit_bytes // MB} MB / {MIN_FREE_BYTES // MB} MB free")
        return removed
