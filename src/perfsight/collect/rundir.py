"""Create one collecting process's run directory and keep its manifest up to date.

The manifest is rewritten atomically (temp file + rename), so a kill at any moment leaves either
the previous or the new complete manifest, never a torn one. It records the options as given and
as resolved, what could not be collected here, versions, the device, rank and world size, start
and end, the steps collected and the trace windows written. A run sets room aside for its manifest while
it collects (``MANIFEST_RESERVE_BYTES``), freed when the disk is full, so a run on a full disk still
records how it ended. Trace windows are numbered by the run, never by the files present (storage ageing
deletes some), so a window's name is never used twice in a run.
"""
from __future__ import annotations

import errno
import json
import os
import platform
import socket
import sys
import time
from pathlib import Path

from perfsight import __version__
from perfsight.core import layout
from perfsight.core.errors import OptionError
from perfsight.core.jsonfile import write_json_atomic
from perfsight.core.numbers import number_runs

WORK_PATH_ENV = "PERFSIGHT_WORK_PATH"
#: room a collecting run sets aside, freed on a full disk to write its manifest (a manifest is a few KiB, and
#: its atomic replacement needs a second copy while the first exists)
MANIFEST_RESERVE_BYTES = 64 * 1024
DEFAULT_OUTPUT = "perfsight_data"


def resolve_output_root(output: str | None, environ=os.environ) -> Path:
    """``output`` beats PERFSIGHT_WORK_PATH beats ./perfsight_data; relative paths are against the cwd."""
    chosen = output or environ.get(WORK_PATH_ENV) or DEFAULT_OUTPUT
    root = Path(chosen).expanduser()
    if not root.is_absolute():
        root = Path.cwd() / root
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        key = "output" if output else (WORK_PATH_ENV if environ.get(WORK_PATH_ENV) else "output")
        raise OptionError(f"{key}: cannot create output directory {str(root)!r}: {exc.strerror}") from None
    return root


def distributed_identity(environ=os.environ) -> dict[str, int]:
    """rank / world size / local rank of this process, from torchrun's variables (defaults 0/1/0)."""
    def read(name: str, default: int) -> int:
        try:
            return int(environ.get(name, default))
        except ValueError:
            return default
    return {"rank": read("RANK", 0), "world_size": read("WORLD_SIZE", 1), "local_rank": read("LOCAL_RANK", 0)}


def device_facts(torch_module, device: str) -> dict:
    """What we know about the compute device: name, memory, capability (cuda) or cores (cpu)."""
    import psutil

    if device.startswith("cuda") and torch_module is not None and torch_module.cuda.is_available():
        index = int(device.split(":")[1]) if ":" in device else torch_module.cuda.current_device()
        props = torch_module.cuda.get_device_properties(index)
        return {
            "device": f"cuda:{index}", "id": index, "name": props.name,
            "total_memory_bytes": int(props.total_memory),
            "compute_capability": f"{props.major}.{props.minor}",
            "multi_processor_count": int(props.multi_processor_count),
        }
    return {
        "device": "cpu", "id": 0, "name": platform.processor() or platform.machine(),
        "logical_cores": psutil.cpu_count(logical=True), "physical_cores": psutil.cpu_count(logical=False),
        "total_memory_bytes": int(psutil.virtual_memory().total), **_cpu_frequency(), **_cpu_flags(),
    }


#: the /proc/cpuinfo flags a run keeps: the vector instruction sets (the CPU peak estimate of analysis.peaks)
VECTOR_FLAG_PREFIXES = ("avx", "amx", "fma", "sse", "sve", "asimd")


def _cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """``cpu_flags``: the CPU's vector instruction-set flags (Linux's /proc/cpuinfo ``flags``, or ``Features``
    on Arm); {} where the system does not list them."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            line = next((line for line in f if line.split(":")[0].strip() in ("flags", "Features")), "")
    except OSError:
        return {}
    if ":" not in line:
        return {}
    return {"cpu_flags": sorted({flag for flag in line.split(":", 1)[1].split()
                                 if flag.startswith(VECTOR_FLAG_PREFIXES)})}


def _cpu_frequency() -> dict:
    """``max_freq_mhz`` (or, where the system gives no maximum, as in many VMs, the current ``freq_mhz``):
    what the CPU peak estimate of analysis.peaks needs; {} when the frequency is unknown."""
    import psutil

    try:
        frequency = psutil.cpu_freq()
    except (OSError, NotImplementedError, RuntimeError):
        frequency = None
    if frequency is None:
        return {}
    if frequency.max:
        return {"max_freq_mhz": float(frequency.max)}
    return {"freq_mhz": float(frequency.current)} if frequency.current else {}


def versions(torch_module) -> dict[str, str | None]:
    facts = {"perfsight": __version__, "python": platform.python_version(), "platform": platform.platform()}
    if torch_module is not None:
        facts["torch"] = torch_module.__version__
        facts["cuda"] = getattr(torch_module.version, "cuda", None)
    return facts


def run_report(path: Path, manifest: dict) -> str:
    """The line that tells a user where a run went, how it ended and what it kept (from its manifest)."""
    status = manifest.get("status")
    errors = manifest.get("errors") or []
    if status == "complete":
        return f"run collected in {path}: {_what_was_kept(path, manifest)}"
    if status == "failed":
        why = errors[0] if errors else "see " + str(path / layout.HOST_DATA / layout.COLLECT_LOG)
        return f"run failed in {path}: {why}; kept: {_what_was_kept(path, manifest)}"
    return (f"run interrupted in {path}: its process ended without closing it; what was written before is "
            f"kept and readable ({_what_was_kept(path, manifest)})")


def _what_was_kept(run_dir: Path, manifest: dict) -> str:
    """``steps 0-149 in 15 trace windows (one every 10 steps: flush_every)``, and what storage ageing left of
    them, from a run's manifest and the windows still there."""
    traces = manifest.get("traces")
    names = list(dict.fromkeys(n for n in traces if isinstance(n, str))) if isinstance(traces, list) else []
    present = [name for name in names if (run_dir / layout.HOST_DATA / Path(name).name).is_file()]
    trace_steps = manifest.get("trace_steps")
    listed = manifest.get("steps_collected")
    steps = [s for s in listed if type(s) is int] if isinstance(listed, list) else []
    kept = f"{_steps_text(steps)} in {len(names)} trace {'window' if len(names) == 1 else 'windows'}"
    resolved = manifest.get("options_resolved")
    flush_every = resolved.get("flush_every") if isinstance(resolved, dict) else None
    if type(flush_every) is int and flush_every > 0:
        kept += f" (one every {flush_every} steps: flush_every)"
    if len(present) < len(names):
        left = ([s for name in present for s in (trace_steps.get(name) or []) if type(s) is int]
                if isinstance(trace_steps, dict) else None)    # unknown in a run of an earlier perfsight
        kept += f"; {len(names) - len(present)} aged out to stay within storage_limit"
        kept += f", leaving {_steps_text(left)}" if left is not None else ""
    return kept


def _steps_text(steps: list[int]) -> str:
    return f"{'step' if len(steps) == 1 else 'steps'} {number_runs(steps)}" if steps else "no profiled steps"


class RunDirectory:
    """One PROF_ directory: its paths and its manifest."""

    def __init__(self, root: Path):
        self.path = root / layout.new_run_dir_name()
        self.host_data = self.path / layout.HOST_DATA
        self.host_data.mkdir(parents=True, exist_ok=False)
        self.manifest: dict = {}
        self._windows_named = 0
        self._reserve = self.path / layout.MANIFEST_RESERVE

    def device_data(self, device_id: int) -> Path:
        path = layout.device_data_dir(self.path, device_id)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def next_trace_path(self) -> Path:
        """The path of the run's next trace window: numbered in the order the run names them, unique for its
        life."""
        path = self.host_data / f"trace_{self._windows_named:04d}.pt.trace.json"
        self._windows_named += 1
        return path

    def begin(self, facts: dict) -> None:
        self.manifest = {
            "format": "perfsight-run", "format_version": 1, "status": "collecting",
            "start_ns": time.time_ns(), "end_ns": None, "pid": os.getpid(), "host": socket.gethostname(),
            "argv": list(sys.argv), "cwd": os.getcwd(), "steps_collected": [], "cut_steps": [], "traces": [],
            "trace_steps": {},
            "errors": [],
            **facts,
        }
        self.write_manifest()
        try:
            with open(self._reserve, "wb") as f:
                f.write(bytes(MANIFEST_RESERVE_BYTES))
        except OSError:    # no room even for that: a full disk is handled as it comes
            self._reserve.unlink(missing_ok=True)

    def end(self, **changes) -> None:
        """Record how the run ended and give back the room set aside for it."""
        self.update(**changes)
        self._reserve.unlink(missing_ok=True)

    def update(self, **changes) -> None:
        self.manifest.update(changes)
        self.write_manifest()

    def write_manifest(self) -> None:
        """Replace the manifest atomically; on a full disk free the room set aside and try again, then
        overwrite it in place, in blocks it already has, so a run still records how it ended."""
        path = self.path / layout.MANIFEST
        if self._replace_manifest(path):
            return
        if self._reserve.exists():
            self._reserve.unlink()
            if self._replace_manifest(path):
                return
        text = json.dumps(self.manifest, indent=2, ensure_ascii=False, default=str).encode()
        with open(path, "r+b") as f:
            f.write(text)
            f.truncate()

    def _replace_manifest(self, path: Path) -> bool:
        """Replace the manifest atomically; False when the disk has no room for the new copy."""
        try:
            write_json_atomic(path, self.manifest, indent=2, sort_keys=False)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            return False
        return True
