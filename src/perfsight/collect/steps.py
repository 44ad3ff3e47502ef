"""Step bookkeeping: one steps.csv line per finished step, with its data-loader wait. A run's lines are flushed
as they are written; an armed job's are buffered and flushed by its watcher thread (``flush``), so its
training thread makes no system call a step, and its steps file rolls over to a second file every so many
lines, so it stays small however long the job runs.

The data-loader wait is measured by wrapping torch's ``_BaseDataLoaderIter.__next__`` while a
recorder is installed (every DataLoader, single- or multi-process). Only one recorder is active at a
time; ``uninstall`` restores the original method.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable

HEADER = "step,start_ns,end_ns,data_wait_ns,epoch\n"


class StepRecorder:
    def __init__(self, path: Path, first_step: int = 0, *, rolling: tuple[int, Path] | None = None,
                 buffered: bool = False):
        """``rolling``: (lines, path): after that many lines the file becomes ``path`` and a new one begins;
        ``buffered``: lines reach the file at ``flush()`` (from any thread) or ``close()``."""
        self._path, self._rolling, self._buffered = path, rolling, buffered
        self._lines = 0
        self._lock = threading.Lock()         # a line written, the file flushed or rolled over: one at a time
        self._file = self._open()
        self.step = first_step
        self.epoch: int | None = None
        self._start_ns = time.time_ns()
        self._data_wait_ns = 0
        self.last_span: tuple[int, int] | None = None   # (start_ns, end_ns) of the step closed last

    def add_data_wait(self, ns: int) -> None:
        self._data_wait_ns += ns

    def finish_step(self) -> int:
        """Close the current step, write its line, and begin the next one; returns the step closed."""
        now = time.time_ns()
        epoch = "" if self.epoch is None else self.epoch
        with self._lock:
            if self._rolling is not None and self._lines >= self._rolling[0]:
                self._roll_over(self._rolling[1])
            self._file.write(f"{self.step},{self._start_ns},{now},{self._data_wait_ns},{epoch}\n")
        self._lines += 1
        closed = self.step
        self.last_span = (self._start_ns, now)
        self.step += 1
        self._start_ns = now
        self._data_wait_ns = 0
        return closed

    def flush(self) -> None:
        with self._lock:
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def _open(self):
        file = open(self._path, "a", encoding="utf-8", buffering=-1 if self._buffered else 1)
        if file.tell() == 0:
            file.write(HEADER)
        return file

    def _roll_over(self, rolled: Path) -> None:
        """The lines so far become ``rolled`` (replacing the one before), and a new file begins."""
        self._file.close()
        os.replace(self._path, rolled)
        self._file = self._open()
        self._lines = 0


class DataLoaderTimer:
    """Adds the wall time of every DataLoader ``__next__`` to the recorder's current step; calls
    ``before_fetch`` first (where a deferred step boundary is taken)."""

    def __init__(self, recorder: StepRecorder, before_fetch: Callable[[], None] = lambda: None):
        self.recorder = recorder
        self.before_fetch = before_fetch
        self._original = None

    def install(self) -> None:
        from torch.utils.data import dataloader

        cls = dataloader._BaseDataLoaderIter
        original = cls.__next__
        recorder, before_fetch = self.recorder, self.before_fetch

        def timed_next(it):
            before_fetch()
            t0 = time.perf_counter_ns()
            try:
                return original(it)
            finally:
                recorder.add_data_wait(time.perf_counter_ns() - t0)

        cls.__next__ = timed_next
        self._original = original

    def uninstall(self) -> None:
        if self._original is None:
            return
        from torch.utils.data import dataloader

        dataloader._BaseDataLoaderIter.__next__ = self._original
        self._original = None
