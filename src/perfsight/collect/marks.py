"""perfsight.mark: user ranges (the seeds' msproftx), as a context manager or a decorator.

A mark is a torch ``record_function`` range, so it shows in the trace like any annotation. When the
active Profiler has ``msproftx`` on, every mark is also appended to host/data/msproftx.csv as it
ends (flushed, so it survives a kill and is kept even outside the profiled steps).
"""
from __future__ import annotations

import contextlib
import threading
import time

from perfsight.core import layout

_write_lock = threading.Lock()


class mark(contextlib.ContextDecorator):
    """``with perfsight.mark("load batch"): ...`` or ``@perfsight.mark("eval")``."""

    def __init__(self, name: str):
        if not isinstance(name, str) or not name:
            raise ValueError(f"mark: name must be a non-empty string, got {name!r}")
        self.name = name
        self._range = None

    def _recreate_cm(self):
        return mark(self.name)     # a fresh range per decorated call: safe under recursion and threads

    def __enter__(self):
        self._start_ns = time.time_ns()
        try:
            from torch.profiler import record_function
        except ImportError:
            return self
        self._range = record_function(self.name)
        self._range.__enter__()
        return self

    def __exit__(self, *exc):
        if self._range is not None:
            self._range.__exit__(*exc)
            self._range = None
        _record_msproftx(self.name, self._start_ns, time.time_ns())
        return False


def _record_msproftx(name: str, start_ns: int, end_ns: int) -> None:
    from perfsight.collect.profiler import active_profiler

    prof = active_profiler()
    if prof is None or prof.options.msproftx != "on" or prof.run is None:
        return
    prof.failsafe.run("recording a mark", _append_line, prof.run.host_data / layout.MSPROFTX,
                      name, start_ns, end_ns)


def _append_line(path, name: str, start_ns: int, end_ns: int) -> None:
    import csv

    with _write_lock:
        new = not path.exists()
        with open(path, "a", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            if new:
                writer.writerow(["name", "start_ns", "end_ns", "tid"])
            writer.writerow([name, start_ns, end_ns, threading.get_native_id()])


__all__ = ["mark"]
