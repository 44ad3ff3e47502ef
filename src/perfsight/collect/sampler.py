"""Host CPU and memory sampling with psutil, in a daemon thread, one flushed CSV line per sample.

host_sys (cpu, mem) samples this process; host_sys_usage (cpu, mem) samples the whole system; both
at host_sys_usage_freq Hz. Column names are the counter series names of the canonical tables, so a
line written is a sample kept even if the training process is killed right after.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import psutil

PROCESS_SERIES = {"cpu": "host.cpu_percent.process", "mem": "host.memory_rss_bytes.process"}
SYSTEM_SERIES = {"cpu": ("host.cpu_percent.system",),
                 "mem": ("host.memory_used_bytes.system", "host.memory_percent.system")}


def series_for(host_sys: frozenset[str] | set[str], host_sys_usage: frozenset[str] | set[str]) -> list[str]:
    names = [PROCESS_SERIES[k] for k in ("cpu", "mem") if k in host_sys]
    for k in ("cpu", "mem"):
        if k in host_sys_usage:
            names.extend(SYSTEM_SERIES[k])
    return names


class HostSampler:
    def __init__(self, path: Path, series: list[str], freq_hz: int, on_error):
        self.path = path
        self.series = series
        self.interval = 1.0 / freq_hz
        self._on_error = on_error
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._process = psutil.Process()

    def start(self) -> None:
        if not self.series:
            return
        self._process.cpu_percent(None)     # prime: psutil's first cpu_percent call returns 0.0
        psutil.cpu_percent(None)
        self._file = open(self.path, "a", encoding="utf-8", buffering=1)
        if self._file.tell() == 0:
            self._file.write(",".join(["ts_ns", *self.series]) + "\n")
        self._thread = threading.Thread(target=self._loop, name="perfsight-host-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=5)
        self._thread = None
        self._file.close()

    def _read(self) -> list[float]:
        values = []
        memory = None
        for name in self.series:
            if name == "host.cpu_percent.process":
                values.append(self._process.cpu_percent(None))
            elif name == "host.memory_rss_bytes.process":
                values.append(self._process.memory_info().rss)
            elif name == "host.cpu_percent.system":
                values.append(psutil.cpu_percent(None))
            else:
                memory = memory or psutil.virtual_memory()
                values.append(memory.used if name == "host.memory_used_bytes.system" else memory.percent)
        return values

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                values = self._read()
                self._file.write(",".join([str(time.time_ns()), *map(str, values)]) + "\n")
        except Exception as exc:  # noqa: BLE001 - a sampler failure must not reach the training
            self._on_error(exc)
