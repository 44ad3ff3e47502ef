"""``perfsight demo``: profile the bundled training script unmodified, export it, summarise it."""
from __future__ import annotations

import sys
from pathlib import Path

from perfsight.collect.launch import run_profiled
from perfsight.core.errors import PerfsightError

TRAIN_SCRIPT = Path(__file__).with_name("train.py")


def demo_options(output: str, steps: int) -> dict:
    """Profile 3 steps after 10 warm-up steps (seed 001's advice), with memory and host samples."""
    first = min(10, max(steps - 3, 0))
    return {
        "output": output, "steps": f"{first}-{min(first + 2, steps - 1)}", "profile_memory": True,
        "host_sys": "cpu,mem", "host_sys_usage": "cpu,mem", "host_sys_usage_freq": 20,
    }


def run_demo(output: str, steps: int) -> tuple[Path, list[Path]]:
    """Train with profiling on; returns the run directory and the exported files."""
    from perfsight.views.export import export

    command = [sys.executable, str(TRAIN_SCRIPT), "--steps", str(steps)]
    code, runs, _ = run_profiled(command, demo_options(output, steps))
    if code != 0 or not runs:
        raise PerfsightError(f"demo: the training script failed (exit code {code}); see its output above")
    run_dir = runs[-1].path
    written = export(run_dir)[run_dir]
    return run_dir, written
