"""Opening what perfsight is given to read (traces, side files, caches, manifests): regular files only,
checked before a read can block or never end; and ``file_kind``, what a path is in words.

A FIFO opened for reading waits for a writer and a device (``/dev/zero``) never ends, so a path that is
neither a regular file nor a directory is refused with an error that says what it is. ``open_regular``
opens without blocking (``O_NONBLOCK``: a FIFO opens at once) and checks the opened file itself, so a path
swapped between a check and the open is refused too; with ``create`` it makes a missing file (a lock file,
held with ``fcntl.flock``, which needs no write access). Its error, ``UnreadableFile``, is both an InputError
(for the user) and an OSError (for readers that read around a side file they cannot read), and says why
without the path (``reason``) and whether the path is missing (``missing``).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from perfsight.core.errors import InputErrorAt

_FILE_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFREG: "a regular file", stat.S_IFIFO: "a FIFO (named pipe)",
               stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket",
               stat.S_IFLNK: "a symbolic link"}


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, in words ("a folder", "a regular file", "a FIFO (named pipe)", ...)."""
    return _FILE_KINDS.get(stat.S_IFMT(mode), "a special file")


class UnreadableFile(InputErrorAt, OSError):
    """A path that cannot be opened, or is not a regular file: ``<path>: <reason>``."""

    @property
    def missing(self) -> bool:
        """Whether the path does not exist (its open failed with FileNotFoundError)."""
        return isinstance(self.__cause__, FileNotFoundError)


def open_regular(path: Path, *, create: bool = False) -> BinaryIO:
    """``path`` (or the file a link at ``path`` points to) opened for binary reading, made empty first when it
    is missing and ``create``; UnreadableFile naming what it is when it cannot be opened or is not a regular
    file."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | (os.O_CREAT if create else 0), 0o666)
    except OSError as error:
        raise UnreadableFile.at(path, f"cannot read the file ({error.strerror or error})") from error
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise UnreadableFile.at(path, f"{file_kind(mode)}, not a regular file; perfsight reads only regular files")
    os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "rb")


def read_regular(path: Path) -> bytes:
    """The bytes of the regular file ``path`` (``open_regular``'s errors)."""
    with open_regular(path) as file:
        return file.read()
