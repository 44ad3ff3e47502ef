"""``perfsight run -- cmd ...``: profile an unmodified program.

The options are validated here, before anything starts (a bad option never reaches the training).
The child (``launch.child.run_child``) gets them as PERFSIGHT_OPTIONS, and the boot hook on its
PYTHONPATH starts the profiler in every Python process that trains (torchrun workers included).
Afterwards the launcher reports each run the program made (``settle_runs``), marking failed the runs of
a program that failed, and for an armed program (``on_demand``) each rank's captures (``armed_reports``).
The processes of one launched program share a job id (``ondemand.JOB_ID_ENV``), which names the folders of
their trigger's captures.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from perfsight import options as options_mod
from perfsight.collect import livefiles
from perfsight.collect.ondemand import JOB_ID_ENV
from perfsight.collect.rundir import resolve_output_root, run_report
from perfsight.core import layout
from perfsight.core.errors import InputError
from perfsight.core.jsonfile import write_json_atomic
from perfsight.launch.child import boot_environment, run_child

#: set in the child's environment: the launcher reports the runs, so the profiler in the child does not
LAUNCHER_ENV = "PERFSIGHT_LAUNCHER"


def child_environment(given: dict, environ=os.environ) -> dict[str, str]:
    """The program's environment: the options as PERFSIGHT_OPTIONS, the boot hook, LAUNCHER_ENV, the job id."""
    job = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    return boot_environment({"PERFSIGHT_OPTIONS": json.dumps(given), LAUNCHER_ENV: "1", JOB_ID_ENV: job}, environ)


@dataclass(frozen=True)
class RunOutcome:
    """How one run the launched program made ended: its manifest as the program left it (``status`` complete,
    failed, or collecting when its process died without closing it)."""

    path: Path
    manifest: dict

    @property
    def report(self) -> str:
        """The line that says where the run went, how it ended and what it kept."""
        return run_report(self.path, self.manifest)


def run_profiled(command: list[str], given: dict, environ=os.environ) -> tuple[int, list[RunOutcome], list[str]]:
    """Run ``command`` with profiling on (or armed); returns its exit code, the runs it made and, armed, the
    lines saying what each rank captured (``armed_reports``)."""
    opts = options_mod.resolve(given, source="cli")
    root = resolve_output_root(opts.output, environ)
    given = {**given, "output": str(root)}      # children resolve the same directory whatever their cwd
    started_ns = time.time_ns()
    code = run_child(command, child_environment(given, environ), "run")
    armed = armed_reports(root, started_ns) if opts.on_demand else []
    return code, settle_runs(runs_started_since(root, started_ns), code), armed


def armed_reports(root: Path, started_ns: int) -> list[str]:
    """One line per rank armed in ``root`` since ``started_ns``: how far it went and each capture it took
    (``rank 0 armed to step 199, 1 capture: steps 57-59 in .../capture_... (requested by ...)``)."""
    lines = []
    for status in livefiles.read_statuses(livefiles.live_dir(root)):
        if status.started_ns < started_ns:
            continue
        captures = status.captures
        taken = "; ".join(f"steps {c['start_step']}-{c['last_step']} {c['status']} in {c['run']} ({c['reason']})"
                          for c in captures)
        where = "before its first step" if status.step is None else f"to step {status.step}"
        count = f"{len(captures)} capture{'' if len(captures) == 1 else 's'}"
        lines.append(f"rank {status.rank} armed {where}, {count}" + (f": {taken}" if taken else
                     f"; ask for one with perfsight capture {root}"))
    return lines


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
        outcomes.append(RunOutcome(run_dir, manifest))
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
