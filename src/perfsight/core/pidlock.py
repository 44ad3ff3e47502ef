"""One process at a time on something perfsight writes: an advisory ``flock`` on a lock file that holds the
holder's pid, so that the next process can say who it waits for or who refused it.

``holding(path, wait=...)`` takes the lock for a block: when another process holds it, it waits for it
(``wait=True``, telling ``on_wait`` the holder's pid first) or raises ``LockHeld`` naming the holder. The
lock goes with the process that holds it (a killed holder frees it); the file stays, holding the last
holder's pid, and is never removed (a process that removed it could free a lock a third one just took).
"""
from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


class LockHeld(Exception):
    """Another process holds the lock; ``holder`` is its pid as it wrote it ("unknown" if it wrote none)."""

    def __init__(self, holder: str):
        super().__init__(f"held by pid {holder}")
        self.holder = holder


@contextmanager
def holding(path: Path, *, wait: bool, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the lock file ``path`` (created if missing) while the block runs (module docstring)."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
            if not wait:
                raise LockHeld(holder) from None
            if on_wait is not None:
                on_wait(holder)
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(descriptor)
