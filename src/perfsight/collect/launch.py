"""``perfsight run -- cmd ...``: profile an unmodified program.

The options are validated here, before anything starts (a bad option never reaches the training).
The child gets them as PERFSIGHT_OPTIONS and gets perfsight's boot directory on PYTHONPATH, whose
sitecustomize starts the profiler in every Python process that trains (torchrun workers included).
``boot_environment`` and ``run_child`` are shared with ``perfsight tune`` (tune/launch.py), whose
child gets PERFSIGHT_TUNE the same way. While the child runs, the launcher passes SIGTERM and SIGHUP on
to it (a scheduler's or a user's kill of the launcher reaches the training, which closes its run) and
outlives Ctrl-C, which the terminal sends the child itself; it exits as the child did (128 + N when a
signal N ended it, as a shell reports). Afterwards it reports each run the program made
(``settle_runs``), marking failed the runs of a program that failed.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from perfsight.core import layout
from perfsight.core.errors import InputError
from perfsight import options as options_mod
from perfsight.core.jsonfile import write_json_atomic
from perfsight.collect.rundir import resolve_output_root

#: set in the child's environment: the launcher reports the runs, so the profiler in the child does not
LAUNCHER_ENV = "PERFSIGHT_LAUNCHER"
#: signals the launcher passes on to the child
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

BOOT_DIR = Path(__file__).parents[1] / "launch" / "boot"


def boot_environment(variables: dict[str, str], environ=os.environ) -> dict[str, str]:
    """``environ`` plus ``variables``, with the boot directory first on PYTHONPATH."""
    env = {**environ, **variables}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOT_DIR), environ.get("PYTHONPATH", "")) if p)
    return env


def child_environment(given: dict, environ=os.environ) -> dict[str, str]:
    return boot_environment({"PERFSIGHT_OPTIONS": json.dumps(given), LAUNCHER_ENV: "1"}, environ)


def run_child(command: list[str], env: dict[str, str], verb: str) -> int:
    """Run ``command`` to its end, passing FORWARDED_SIGNALS on to it; return its exit code (128 + N when
    signal N ended it)."""
    try:
        child = subprocess.Popen(command, env=env)
    except FileNotFoundError:
        raise options_mod.OptionError(f"{verb}: command not found: {command[0]!r}") from None
    except PermissionError:
        raise options_mod.OptionError(f"{verb}: command not executable: {command[0]!r}") from None

    def forward(signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    handlers = {signum: forward for signum in FORWARDED_SIGNALS}
    handlers[signal.SIGINT] = lambda _signum, _frame: None   # the terminal sent the child its own Ctrl-C
    previous = {}
    with contextlib.suppress(ValueError):        # not the main thread: no handlers, the child still runs
        for signum, handler in handlers.items():
            previous[signum] = signal.signal(signum, handler)
    try:
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - code if code < 0 else code


@dataclass(frozen=True)
class RunOutcome:
    """How one run the launched program made ended: ``status`` is its manifest's (complete, failed, or
    collecting when its process died without closing it); ``error`` the first error it recorded."""

    path: Path
    status: str
    error: str | None


def run_profiled(command: list[str], given: dict, environ=os.environ) -> tuple[int, list[RunOutcome]]:
    """Run ``command`` with profiling on; returns its exit code and the runs it made."""
    opts = options_mod.resolve(given, source="cli")
    root = resolve_output_root(opts.output, environ)
    given = {**given, "output": str(root)}      # children resolve the same directory whatever their cwd
    started_ns = time.time_ns()
    code = run_child(command, child_environment(given, environ), "run")
    return code, settle_runs(runs_started_since(root, started_ns), code)


def settle_runs(runs: list[Path], code: int) -> list[RunOutcome]:
    """Each run's outcome; when the program failed (exited with a code of its own, 1-127: not ended by a
    signal, after which a run is closed as far as it got), a run it closed is marked failed, saying so
    (what it profiled before is kept and readable)."""
    outcomes = []
    for run_dir in runs:
        try:
            manifest = layout.read_manifest(run_dir)
        except InputError:
            continue
        if 0 < code < 128 and manifest.get("status") == "complete":
            error = f"the program exited with code {code}; what was profiled before that is kept"
            manifest.update(status="failed", errors=[*manifest.get("errors", []), error])
            with contextlib.suppress(OSError):
                write_json_atomic(run_dir / layout.MANIFEST, manifest, indent=2, sort_keys=False)
        errors = manifest.get("errors") or []
        outcomes.append(RunOutcome(run_dir, str(manifest.get("status")), str(errors[0]) if errors else None))
    return outcomes


def runs_started_since(root: Path, started_ns: int) -> list[Path]:
    found = []
    for run_dir in layout.find_run_dirs(root):
        try:
            manifest = layout.read_manifest(run_dir)
        except InputError:
            continue
        if manifest.get("start_ns", 0) >= started_ns:
            found.append(run_dir)
    return found
