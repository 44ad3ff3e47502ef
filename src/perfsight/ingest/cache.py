"""The Parquet cache of a run's canonical tables, kept beside the raw data.

A cache is valid while the fingerprint of its sources and of the code that made it (the table format
version and a hash of the readers' and the schema's source) is unchanged; otherwise the run is parsed
again, so a fixed reader never serves tables an older one cached. A source's entry is its resolved path
(the same file named by a relative or an absolute path, or through a link, is one source), size, mtime and
a hash of its first and last blocks (a file rewritten with its old size and mtime is a new source). The
fingerprint also records each Parquet file's size and block hash, checked before it is read, so a file
copied in from another cache is refused. Writing is atomic per directory (written to a temp dir, then
renamed), so a cache is either whole or absent.

Only a directory perfsight can prove it wrote (a real directory holding nothing but regular files of a
cache's names, its fingerprint perfsight's) is ever replaced or cleared; anything else at the cache's place
(a user's folder, a FIFO, a link) is left alone and the run is read without a cache. Nothing at the cache's
place is opened unless it is a regular file, so a FIFO or a device there cannot hang a read.

``write_in_background`` writes on a thread of its own (Parquet encoding and the disk writes release the
GIL, so the second core does them while the caller analyses the tables it already has). The thread is not a
daemon, so the interpreter finishes the write before it exits; ``read`` of the same directory waits for it,
and ``wait`` waits for every pending write.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import stat
import threading
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from perfsight.core import layout
from perfsight.core.files import open_regular
from perfsight.core.json_depth import loads_bounded
from perfsight.core.tables import RunTables, conform

CACHE_FORMAT = 3
FINGERPRINT = "fingerprint.json"
MAX_FINGERPRINT_BYTES = 16 << 20  # a fingerprint lists a run's sources: a few hundred bytes each
HASHED_BLOCK = 1 << 16  # the head and the tail of a file that its content hash covers (a Parquet footer)
ROW_GROUP_ROWS = 1 << 15  # bounds the writer's buffers (~30% less peak memory than one group) and reads in parallel


@functools.cache
def code_hash() -> str:
    """A hash of the modules that decide what the tables hold: every reader (this package), the schema and the
    communication rule."""
    package = Path(__file__).parent
    digest = hashlib.sha1()
    core = package.parent / "core"
    for path in sorted([*package.rglob("*.py"), core / "tables.py", core / "communication.py"]):
        digest.update(str(path.relative_to(package.parent)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def fingerprint(sources: list[Path]) -> dict:
    """What the tables read from ``sources`` depend on."""
    return {"cache_format": CACHE_FORMAT, "code": code_hash(), "sources": source_stamps(sources)}


def source_stamps(sources, *, content: bool = True) -> list[list]:
    """The one stamp of a run's raw files, by resolved path: [path, size, mtime in ns, and with ``content``
    the hash of the first and last blocks (``_content_stamp``)], nulls for a source that is not a readable
    regular file (its reader says why). Without ``content`` (insight's run list, which looks every few
    seconds) nothing is opened."""
    return sorted([str(path.resolve()), *_source_stamp(path, content)] for path in sources)


def _source_stamp(path: Path, content: bool) -> list:
    try:
        if content:
            return _content_stamp(path)
        status = path.stat()
        return [status.st_size, status.st_mtime_ns]
    except OSError:
        return [None, None, None] if content else [None, None]


def _content_stamp(path: Path) -> list:
    """[size, mtime in ns, hash of the first and last ``HASHED_BLOCK`` bytes] of the regular file ``path``
    (``files.open_regular``'s errors)."""
    with open_regular(path) as file:
        status = os.fstat(file.fileno())
        digest = hashlib.blake2b(file.read(HASHED_BLOCK), digest_size=16)
        if status.st_size > HASHED_BLOCK:
            file.seek(max(HASHED_BLOCK, status.st_size - HASHED_BLOCK))
            digest.update(file.read(HASHED_BLOCK))
    return [status.st_size, status.st_mtime_ns, digest.hexdigest()]


_pending: dict[Path, threading.Thread] = {}
_pending_lock = threading.Lock()


def read(cache_dir: Path, stamp: dict) -> RunTables | None:
    """The cached tables if the cache is valid for ``stamp``, the ``fingerprint`` of their sources; else None."""
    tables = read_tables(cache_dir, stamp, [name for name, _ in RunTables().items()])
    return None if tables is None else RunTables(**{name: conform(name, table) for name, table in tables.items()})


def valid(cache_dir: Path, stamp: dict, names: list[str]) -> bool:
    """Whether ``cache_dir`` holds tables ``names`` (``<name>.parquet``) that perfsight wrote for ``stamp``
    (a ``fingerprint``, with whatever else the writer's stamp holds), each file the one it wrote."""
    wait(cache_dir)
    stored = _stored_fingerprint(cache_dir)
    if stored is None or {**stored, "files": None} != {**_as_json(stamp), "files": None}:
        return False
    # a file that is not the one this cache wrote (copied in, replaced, or not a file) makes it invalid
    return isinstance(stored.get("files"), dict) and all(
        _file_stamp(cache_dir / f"{name}.parquet") == stored["files"].get(name) for name in names)


def read_tables(cache_dir: Path, stamp: dict, names: list[str]) -> dict[str, pa.Table] | None:
    """Tables ``names`` cached at ``cache_dir`` if they are ``valid`` for ``stamp``; else None."""
    if not valid(cache_dir, stamp, names):
        return None
    try:
        # ParquetFile.read, not pq.read_table: the latter imports pyarrow.dataset (~0.25 s, ~50 MiB)
        return {name: pq.ParquetFile(cache_dir / f"{name}.parquet").read() for name in names}
    except (OSError, ValueError):
        return None


def write(cache_dir: Path, stamp: dict, tables: RunTables | Mapping[str, pa.Table]) -> bool:
    """Store the tables (a run's, or any named tables: ``read_tables``) with ``stamp``, the ``fingerprint``
    of their sources taken before they were read; returns False (and leaves no partial cache) when the
    directory is not writable or something other than a cache of perfsight's is at ``cache_dir``."""
    if not layout.writable_folder(cache_dir.parent) or (os.path.lexists(cache_dir) and not _ours(cache_dir)):
        return False
    # hidden (a folder search skips it) and this process's: another process may be reading or writing the same cache
    temp = cache_dir.with_name(f".{cache_dir.name}.tmp{os.getpid()}")
    try:
        temp.mkdir()  # not an existing folder: only what this write makes is removed if it fails
    except OSError:
        return False
    try:
        files = {}
        for name, table in tables.items():
            path = temp / f"{name}.parquet"
            pq.write_table(table, path, compression="lz4",  # 3x faster to read than zstd
                           row_group_size=ROW_GROUP_ROWS, use_dictionary=_repeating_columns(table))
            files[name] = _file_stamp(path)
        (temp / FINGERPRINT).write_text(json.dumps({**stamp, "files": files}), encoding="utf-8")
        if os.path.lexists(cache_dir):
            _remove(cache_dir)
        os.replace(temp, cache_dir)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            _remove(temp)
        return False


def _file_stamp(path: Path) -> list | None:
    """A cache file's ``_content_stamp`` without its mtime (a copied cache stays valid); None if ``path`` is
    not a regular file of its own (a link is not)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        size, _, digest = _content_stamp(path)
    except OSError:
        return None
    return [size, digest]


def _stored_fingerprint(cache_dir: Path) -> dict | None:
    """The fingerprint a cache of perfsight's holds; None if ``cache_dir`` holds none (or not a regular file,
    or not one perfsight wrote)."""
    path = cache_dir / FINGERPRINT
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        with open_regular(path) as file:
            stored = loads_bounded(file.read(MAX_FINGERPRINT_BYTES + 1), str(path))
    except (OSError, ValueError):  # a fingerprint longer than the limit is not valid JSON, nor one nested too deep
        return None
    return stored if isinstance(stored, dict) and {"cache_format", "code", "sources"} <= stored.keys() else None


def _as_json(value: dict) -> dict:
    """``value`` as it reads back from JSON (lists for tuples), to compare with a stored fingerprint."""
    return json.loads(json.dumps(value))


def _ours(cache_dir: Path) -> bool:
    """Whether ``cache_dir`` is a cache perfsight wrote: a directory (not a link) holding only regular files
    named ``FINGERPRINT`` or ``*.parquet``, its fingerprint one perfsight wrote."""
    try:
        if not stat.S_ISDIR(os.lstat(cache_dir).st_mode):
            return False
        with os.scandir(cache_dir) as entries:
            if not all(entry.is_file(follow_symlinks=False) and (entry.name == FINGERPRINT or
                                                                  entry.name.endswith(".parquet"))
                       for entry in entries):
                return False
    except OSError:
        return False
    return _stored_fingerprint(cache_dir) is not None


def _remove(folder: Path) -> None:
    """Delete ``folder``, a cache perfsight wrote (checked by ``_ours``) or one it is writing: its files,
    then the folder itself."""
    with os.scandir(folder) as entries:
        for entry in entries:
            os.unlink(entry.path)
    os.rmdir(folder)


def _repeating_columns(table: pa.Table) -> list[str]:
    """The columns worth a Parquet dictionary: the texts (names, kinds, shapes) except ``args``, unique per
    row like the ids and times. Trying a dictionary on those and giving up costs time and bytes: on a 54 MB
    trace's slices 35 ms and 4.1 MB against 51 ms and 4.8 MB."""
    return [field.name for field in table.schema if pa.types.is_string(field.type) and field.name != "args"]


def write_in_background(cache_dir: Path, stamp: dict, tables: RunTables) -> None:
    """Start ``write`` on a thread of its own (after any pending write of the same directory)."""
    key = _key(cache_dir)
    with _pending_lock:
        previous = _pending.get(key)

        def work():
            if previous is not None:
                previous.join()
            try:
                write(cache_dir, stamp, tables)
            finally:
                with _pending_lock:
                    if _pending.get(key) is thread:
                        del _pending[key]

        thread = _pending[key] = threading.Thread(target=work, name=f"perfsight cache {cache_dir.name}")
        thread.start()


def wait(cache_dir: Path | None = None) -> None:
    """Wait until the pending background write of ``cache_dir`` (default: of every directory) is done."""
    with _pending_lock:
        threads = list(_pending.values()) if cache_dir is None else [_pending.get(_key(cache_dir))]
    for thread in threads:
        if thread is not None:
            thread.join()


def _key(cache_dir: Path) -> Path:
    """One name per cache directory, however it was reached (relative path, absolute path, link)."""
    return Path(cache_dir).resolve()


def clear(cache_dir: Path) -> bool:
    """Delete the cache at ``cache_dir`` if perfsight wrote it; whether it did."""
    wait(cache_dir)
    if not _ours(cache_dir):
        return False
    _remove(cache_dir)
    return True
