"""``perfsight run -- cmd ...``: profile an unmodified program.

The options are validated here, before anything starts (a bad option never reaches the training).
The child gets them as PERFSIGHT_OPTIONS and gets perfsight's boot directory on PYTHONPATH, whose
sitecustomize starts the profiler in every Python process that trains (torchrun workers included).
``boot_environment`` and ``run_child`` are shared with ``perfsight tune`` (tune/launch.py), whose
child gets PERFSIGHT_TUNE the same way.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from .. import layout
from .. import options as options_mod
from .rundir import resolve_output_root

BOOT_DIR = Path(__file__).parent / "boot"


def boot_environment(variables: dict[str, str], environ=os.environ) -> dict[str, str]:
    """``environ`` plus ``variables``, with the boot directory first on PYTHONPATH."""
    env = {**environ, **variables}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOT_DIR), environ.get("PYTHONPATH", "")) if p)
    return env


def child_environment(given: dict, environ=os.environ) -> dict[str, str]:
    return boot_environment({"PERFSIGHT_OPTIONS": json.dumps(given)}, environ)


def run_child(command: list[str], env: dict[str, str], verb: str) -> int:
    """Run ``command`` to its end and return its exit code (130 when interrupted)."""
    try:
        return subprocess.call(command, env=env)
    except FileNotFoundError:
        raise options_mod.OptionError(f"{verb}: command not found: {command[0]!r}") from None
    except KeyboardInterrupt:
        return 130


def run_profiled(command: list[str], given: dict, environ=os.environ) -> tuple[int, list[Path]]:
    """Run ``command`` with profiling on; returns its exit code and the run directories it made."""
    opts = options_mod.resolve(given, source="cli")
    root = resolve_output_root(opts.output, environ)
    given = {**given, "output": str(root)}      # children resolve the same directory whatever their cwd
    started_ns = time.time_ns()
    code = run_child(command, child_environment(given, environ), "run")
    return code, runs_started_since(root, started_ns)


def runs_started_since(root: Path, started_ns: int) -> list[Path]:
    found = []
    for run_dir in layout.find_run_dirs(root):
        try:
            manifest = json.loads((run_dir / layout.MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if manifest.get("start_ns", 0) >= started_ns:
            found.append(run_dir)
    return found
