"""Opening what perfsight is given to read (traces, side files, caches, manifests): regular files only,
checked before a read can block or never end; and ``file_kind``, what a path is in words.

A FIFO opened for reading waits for a writer and a device (``/dev/zero``) never ends, so a path that is
neither a regular file nor a directory is refused with an error that says what it is. ``open_regular``
opens without blocking (``O_NONBLOCK``: a FIFO opens at once) and checks the opened file itself, so a path
swapped between a check and the open is refused too. Its error, ``UnreadableFile``, is both an InputError
(for the user) and an OSError (for readers that read around a side file they cannot read).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from perfsight.core.errors import InputError

_FILE_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFREG: "a regular file", stat.S_IFIFO: "a FIFO (named pipe)",
               stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket",
               stat.S_IFLNK: "a symbolic link"}


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, in words ("a folder", "a regular file", "a FIFO (named pipe)", ...)."""
    return _FILE_KINDS.get(stat.S_IFMT(mode), "a special file")


class UnreadableFile(InputError, OSError):
    """A path that cannot be opened, or is not a regular file."""


def open_regular(path: Path) -> BinaryIO:
    """``path`` (or the file a link at ``path`` points to) opened for binary reading; UnreadableFile naming
    what it is when it cannot be opened or is not a regular file."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise UnreadableFile(f"{path}: cannot read the file ({error.strerror or error})") from error
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise UnreadableFile(f"{path}: {file_kind(mode)}, not a regular file; perfsight reads only regular files")
    os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "rb")


def read_regular(path: Path) -> bytes:
    """The bytes of the regular file ``path`` (``open_regular``'s errors)."""
    with open_regular(path) as file:
        return file.read()
