"""Collection never takes the training down: run collector code under a guard.

A failure inside perfsight is logged once (to the run's collect.log and to Python logging), the
collector is told to stop, and the training goes on. The guard is the only place that catches
broad exceptions in the collector.
"""
from __future__ import annotations

import logging
import traceback
from pathlib import Path
from typing import Callable

log = logging.getLogger("perfsight")


class Failsafe:
    """Owns the 'profiling is broken, stop quietly' state of one collector."""

    def __init__(self, on_failure: Callable[[], None]):
        self._on_failure = on_failure
        self.log_path: Path | None = None
        self.failed = False
        self.errors: list[str] = []

    def note(self, message: str) -> None:
        """Record a warning in collect.log (and Python logging) without stopping anything."""
        log.warning("perfsight: %s", message)
        self._append(message)

    def run(self, what: str, fn: Callable, *args, **kwargs):
        """Call ``fn``; on an exception, log it once, stop profiling and return None."""
        if self.failed:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the whole point: training must go on
            self.failed = True
            message = f"{what} failed: {type(exc).__name__}: {exc}; profiling stopped, training continues"
            self.errors.append(message)
            log.error("perfsight: %s", message)
            self._append(message + "\n" + traceback.format_exc())
            try:
                self._on_failure()
            except Exception as stop_exc:  # noqa: BLE001
                self._append(f"stopping after the failure also failed: {stop_exc!r}")
            return None

    def _append(self, text: str) -> None:
        if self.log_path is None:
            return
        try:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(text.rstrip("\n") + "\n")
        except OSError:
            pass
