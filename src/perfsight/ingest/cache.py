"""The Parquet cache of a run's canonical tables, kept beside the raw data.

A cache is valid while the fingerprint of its sources (paths, sizes, mtimes) and of the code that made it
(the table format version and a hash of the readers' and the schema's source) are unchanged; otherwise
the run is parsed again, so a fixed reader never serves tables an older one cached. Writing is atomic per directory
(written to a temp dir, then renamed), so a cache is either whole or absent.

``write_in_background`` writes on a thread of its own (Parquet encoding and the disk writes release the
GIL, so the second core does them while the caller analyses the tables it already has). The thread is not a
daemon, so the interpreter finishes the write before it exits; ``read`` of the same directory waits for it,
and ``wait`` waits for every pending write.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .. import layout
from ..tables import RunTables, conform

CACHE_FORMAT = 2
FINGERPRINT = "fingerprint.json"
ROW_GROUP_ROWS = 1 << 15  # bounds the writer's buffers (~30% less peak memory than one group) and reads in parallel


@functools.cache
def code_hash() -> str:
    """A hash of the modules that decide what the tables hold: every reader (this package) and the schema."""
    package = Path(__file__).parent
    digest = hashlib.sha1()
    for path in sorted([*package.rglob("*.py"), package.parent / "tables.py"]):
        digest.update(str(path.relative_to(package.parent)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def fingerprint(sources: list[Path]) -> dict:
    entries = []
    for path in sorted(sources):
        st = path.stat()
        entries.append([str(path), st.st_size, st.st_mtime_ns])
    return {"cache_format": CACHE_FORMAT, "code": code_hash(), "sources": entries}


_pending: dict[Path, threading.Thread] = {}
_pending_lock = threading.Lock()


def read(cache_dir: Path, sources: list[Path]) -> RunTables | None:
    """The cached tables, or None when there is no valid cache."""
    wait(cache_dir)
    try:
        stored = json.loads((cache_dir / FINGERPRINT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if stored != json.loads(json.dumps(fingerprint(sources))):
        return None
    try:
        # ParquetFile.read, not pq.read_table: the latter imports pyarrow.dataset (~0.25 s, ~50 MiB)
        return RunTables(**{name: conform(name, pq.ParquetFile(cache_dir / f"{name}.parquet").read())
                            for name, _ in RunTables().items()})
    except (OSError, ValueError):
        return None


def write(cache_dir: Path, stamp: dict, tables: RunTables) -> bool:
    """Store the tables with ``stamp``, the ``fingerprint`` of their sources taken before they were read;
    returns False (and leaves no partial cache) when the directory is not writable."""
    if not layout.writable_folder(cache_dir.parent):
        return False
    temp = cache_dir.with_name(cache_dir.name + f".tmp{os.getpid()}")
    try:
        temp.mkdir(parents=True, exist_ok=True)
        for name, table in tables.items():
            pq.write_table(table, temp / f"{name}.parquet", compression="lz4",  # 3x faster to read than zstd
                           row_group_size=ROW_GROUP_ROWS, use_dictionary=_repeating_columns(table))
        (temp / FINGERPRINT).write_text(json.dumps(stamp), encoding="utf-8")
        if cache_dir.exists():
            shutil.rmtree(cache_dir)
        os.replace(temp, cache_dir)
        return True
    except OSError:
        shutil.rmtree(temp, ignore_errors=True)
        return False


def _repeating_columns(table: pa.Table) -> list[str]:
    """The columns worth a Parquet dictionary: the texts (names, kinds, shapes) except ``args``, unique per
    row like the ids and times. Trying a dictionary on those and giving up costs time and bytes: on a 54 MB
    trace's slices 35 ms and 4.1 MB against 51 ms and 4.8 MB."""
    return [field.name for field in table.schema if pa.types.is_string(field.type) and field.name != "args"]


def write_in_background(cache_dir: Path, stamp: dict, tables: RunTables) -> None:
    """Start ``write`` on a thread of its own (after any pending write of the same directory)."""
    with _pending_lock:
        previous = _pending.get(cache_dir)

        def work():
            if previous is not None:
                previous.join()
            try:
                write(cache_dir, stamp, tables)
            finally:
                with _pending_lock:
                    if _pending.get(cache_dir) is thread:
                        del _pending[cache_dir]

        thread = _pending[cache_dir] = threading.Thread(target=work, name=f"perfsight cache {cache_dir.name}")
        thread.start()


def wait(cache_dir: Path | None = None) -> None:
    """Wait until the pending background write of ``cache_dir`` (default: of every directory) is done."""
    with _pending_lock:
        threads = list(_pending.values()) if cache_dir is None else [_pending.get(cache_dir)]
    for thread in threads:
        if thread is not None:
            thread.join()


def clear(cache_dir: Path) -> bool:
    wait(cache_dir)
    if cache_dir.is_dir():
        shutil.rmtree(cache_dir)
        return True
    return False
