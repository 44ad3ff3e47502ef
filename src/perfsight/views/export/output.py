"""Where export files land and how: the output folder's checks, all-or-nothing writing, the ledger of the
files perfsight wrote, and one clear error when a write fails.

* A folder to write in must be a folder (not a special file such as /dev/null or a FIFO, not a file) that
  perfsight may write (``layout.writable_folder``); folders it creates for an export that then fails are
  removed again.
* ``Staging`` writes every file of one export to a hidden temp file beside its final name (created by
  perfsight, O_EXCL) and puts them all in place only when every one is complete: a failed write (disk full)
  removes the temp files and leaves the folder as it was, earlier exports untouched. A new file never
  replaces one that appeared under its name meanwhile (hard link, then unlink: atomic and no-clobber).
* Files with one fixed name (README.txt, prof_rule_0.json, msprof_tx.csv, ...) replace an earlier version
  only when perfsight can prove it wrote that version: the folder's ledger (``LEDGER``) records the size and
  mtime of every file perfsight put there, and a file whose size or mtime differ (a user's file, or one a
  user edited) is never overwritten: the export stops with an error naming it.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb

from perfsight.core import layout
from perfsight.core.errors import OutputError
from perfsight.core.files import file_kind

#: the ledger of the files perfsight wrote in an output folder (name -> size and mtime when written)
LEDGER = ".perfsight_export_files.json"
_TEMP_SUFFIX = ".perfsight-tmp"
_DUCKDB_ERRNO = re.compile(r'"errno"\s*:\s*"?(\d+)')
#: README.txt's first line: how a README.txt from before the ledger is known to be perfsight's
README_TITLE = "perfsight export output"
#: what ends an error about the output folder: what the user can do
ELSEWHERE = "choose another place with --output DIR"


def describe_kind(path: Path) -> str:
    """``path`` as a user would say it: "a folder", "a regular file", "a character device", ...; "missing"."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return "a broken symbolic link" if _exists(path) else "missing"
    return file_kind(mode)


def prepare_folder(folder: Path) -> list[Path]:
    """Make sure ``folder`` is a folder perfsight may write, creating it (and missing parents) if need be;
    returns the folders created, outermost first."""
    missing = []
    existing = folder
    while not _exists(existing) and existing != existing.parent:
        missing.insert(0, existing)
        existing = existing.parent
    where = "" if existing == folder else f" (the export goes into {folder})"
    if not existing.is_dir():
        raise OutputError(f"{existing}: is {describe_kind(existing)}, not a folder{where}; {ELSEWHERE}")
    if not layout.writable_folder(existing):
        raise OutputError(f"{existing}: this folder is read-only (no write permission), perfsight does not write "
                          f"into it{where}; {ELSEWHERE}")
    for position, created in enumerate(missing):
        try:
            created.mkdir()
        except OSError as exc:
            remove_empty_folders(missing[:position])
            raise OutputError(f"{created}: cannot create this folder ({reason(exc)}); {ELSEWHERE}") from None
    return missing


def remove_empty_folders(created: list[Path]) -> None:
    """Remove the folders perfsight ``created`` (parents first in the list) that are still empty."""
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            return


def reason(exc: BaseException) -> str:
    """The system's words for a failed file operation: "No space left on device" for ENOSPC, whether the
    OSError came from Python or DuckDB reported it in its message."""
    if isinstance(exc, OSError) and exc.errno:
        return os.strerror(exc.errno)
    found = _DUCKDB_ERRNO.search(str(exc))
    if found:
        return os.strerror(int(found.group(1)))
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class Staging:
    """The files of one export into one folder, written aside and put in place together by ``commit``.

    ``write(name, produce)`` calls ``produce(temp_path)`` to write the file that will be ``folder/name``;
    ``replaceable=True`` names a fixed-name file that may replace perfsight's earlier version (see the module
    docstring). Any failure raises OutputError naming the file and the reason, after ``discard``.
    """

    def __init__(self, folder: Path, *, created: list[Path] = ()):
        self.folder = folder
        self._created_folders = list(created)
        self._temps: list[tuple[Path, Path, bool]] = []  # (temp, final, replaceable)
        self._ledger = _read_ledger(folder)

    @property
    def written(self) -> list[Path]:
        """The final paths of the files written so far (not yet committed)."""
        return [final for _, final, _ in self._temps]

    def write(self, name: str, produce: Callable[[Path], object], *, replaceable: bool = False) -> Path:
        final = self.folder / name
        if replaceable:
            self._check_ours(final)
        elif _exists(final):
            self.discard()
            raise OutputError(f"{final}: already exists; perfsight does not overwrite it")
        temp = self._reserve(final)
        self._temps.append((temp, final, replaceable))
        try:
            produce(temp)
        except (OSError, duckdb.IOException) as exc:
            self._fail(final, exc)
        return final

    def commit(self) -> list[Path]:
        """Put every written file in place and record it in the ledger; returns their final paths. The
        ledger is written aside first and the new names placed before any file is replaced, so what can
        fail (the disk filling up) fails before anything of the export is visible."""
        if not self._temps:
            return []
        ledger = dict(self._ledger)
        for temp, final, _ in self._temps:
            st = temp.stat()
            ledger[final.name] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        ledger = {name: entry for name, entry in ledger.items()
                  if name in {final.name for _, final, _ in self._temps} or _exists(self.folder / name)}
        written = self.written
        ledger_path = self.folder / LEDGER
        if _exists(ledger_path) and (ledger_path.is_symlink() or not ledger_path.is_file()):
            self._fail(ledger_path, None, f"{ledger_path}: is {describe_kind(ledger_path)}, not the ledger of "
                                          f"the files perfsight wrote; perfsight does not replace it: move it away, "
                                          f"or {ELSEWHERE}")
        ledger_temp = self._reserve(ledger_path)
        self._temps.append((ledger_temp, ledger_path, True))
        try:
            ledger_temp.write_text(json.dumps(ledger, indent=1, sort_keys=True), encoding="utf-8")
        except OSError as exc:
            self._fail(ledger_path, exc)
        placed: list[Path] = []
        final = ledger_path
        try:
            for temp, final, _ in (t for t in self._temps if not t[2]):
                _place_new(temp, final)
                placed.append(final)
            for temp, final, _ in (t for t in self._temps if t[2]):
                if final != ledger_path:
                    self._check_ours(final)
                os.replace(temp, final)
                placed.append(final)
        except FileExistsError:
            self._fail(final, None, f"{final}: appeared while perfsight was writing it; perfsight does not "
                                    "overwrite it", placed)
        except OSError as exc:
            self._fail(final, exc, placed=placed)
        self._temps = []
        self._ledger = ledger
        return written

    def discard(self) -> None:
        """Remove the temp files written so far (and the folders created for this export, if empty)."""
        for temp, _, _ in self._temps:
            temp.unlink(missing_ok=True)
        self._temps = []
        remove_empty_folders(self._created_folders)

    def _check_ours(self, final: Path) -> None:
        if not _exists(final):
            return
        entry = self._ledger.get(final.name)
        try:
            st = final.lstat()
            ours = stat.S_ISREG(st.st_mode) and (entry == {"size": st.st_size, "mtime_ns": st.st_mtime_ns} or (
                not self._ledger and _written_before_the_ledger(final)))
        except OSError:
            ours = False
        if not ours:
            self.discard()
            raise OutputError(f"{final}: exists and perfsight did not write it (or it was changed since); "
                              f"perfsight does not overwrite it: move it away, or {ELSEWHERE}")

    def _reserve(self, final: Path) -> Path:
        """A new empty temp file beside ``final``, created by us (O_EXCL), hidden, named after it."""
        temp = final.with_name(f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}{_TEMP_SUFFIX}")
        try:
            os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except OSError as exc:
            self._fail(final, exc)
        return temp

    def _fail(self, final: Path, exc: BaseException | None, message: str = "", placed: list[Path] = ()) -> None:
        """Discard the export (and the new names a failed commit had ``placed``) and raise OutputError."""
        replaced = {f for _, f, replaceable in self._temps if replaceable}
        for path in placed:
            if path not in replaced:
                path.unlink(missing_ok=True)
        self.discard()
        raise OutputError(message or f"{final}: cannot write it ({reason(exc)}); nothing of this export was "
                                     "kept, earlier files are untouched") from None


@contextlib.contextmanager
def staging(folder: Path) -> Iterator[Staging]:
    """A ``Staging`` of ``folder`` (created if need be, see ``prepare_folder``); whatever is not committed
    when the block ends, normally or by an exception, is discarded."""
    stage = Staging(folder, created=prepare_folder(folder))
    try:
        yield stage
    finally:
        stage.discard()


def _place_new(temp: Path, final: Path) -> None:
    """Rename ``temp`` to ``final`` unless ``final`` exists (FileExistsError): a hard link is atomic and
    no-clobber; where links are not supported, an existence check then a rename."""
    try:
        os.link(temp, final)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        if _exists(final):
            raise FileExistsError(errno.EEXIST, "exists", str(final)) from None
        os.rename(temp, final)
        return
    temp.unlink()


def _written_before_the_ledger(path: Path) -> bool:
    """Whether a fixed-name file in a folder without a ledger (an export of an earlier perfsight) is one
    perfsight wrote, by its content: a README.txt under perfsight's title, a prof_rule_0.json that is a list
    of the advisor's findings."""
    try:
        if path.name == "README.txt":
            with open(path, "rb") as file:
                return file.read(len(README_TITLE) + 1) == README_TITLE.encode() + b"\n"
        if path.name == "prof_rule_0.json" and path.stat().st_size < (16 << 20):
            findings = json.loads(path.read_text(encoding="utf-8"))
            return isinstance(findings, list) and all(isinstance(f, dict) and {"Rule", "Severity"} <= f.keys()
                                                      for f in findings)
    except (OSError, ValueError):
        pass
    return False


def _read_ledger(folder: Path) -> dict[str, dict]:
    """The folder's ledger; empty when it is missing, unreadable or not a regular file (a FIFO would hang)."""
    path = folder / LEDGER
    try:
        ledger = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return ledger if isinstance(ledger, dict) else {}


def _exists(path: Path) -> bool:
    """Whether anything (a broken symlink included) is at ``path``."""
    return os.path.lexists(path)
