"""``perfsight tune --mode op -- python train.py ...``: tune the operators of an unmodified script.

What can be checked before the script starts is checked here, so a bad option or an unmet precondition
exits before any training: the mode, the bank path, the step count, profiling off (no PERFSIGHT_OPTIONS,
PROFILING_OPTIONS or MS_PROFILER_OPTIONS), one process (WORLD_SIZE), free disk. The child gets
PERFSIGHT_TUNE through perfsight's boot sitecustomize (collect/launch.py), records its first steps and
tunes them (tune/autostart.py); its outcome comes back in a status file.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from perfsight import options as options_mod
from perfsight.collect.launch import boot_environment, run_child
from perfsight.errors import OptionError, TunePreconditionError
from perfsight.tune.autostart import VARIABLE
from perfsight.tune.session import check_disk, plan


def run_tuning(command: list[str], *, mode: str | None = None, bank: str | None = None,
               repeat: bool | None = None, steps: int = 2, environ=os.environ) -> tuple[int, dict]:
    """Run ``command``, tuning its first ``steps`` steps; returns its exit code and the child's status
    (``report``, ``bank``, ``repo_summary``, ``winners``, ``preconditions``, or ``error``)."""
    the_plan = plan(mode, bank, repeat, None, environ)
    if the_plan.stages != ("op",):
        raise OptionError("subgraph tuning (SGAT: --mode subgraph, AOE_MODE=1) is not implemented yet for an "
                          "unmodified script: use operator tuning (--mode op, AOE_MODE=2), or "
                          "perfsight.tune.tune(model, batch, mode='subgraph') from Python")
    if steps < 2:
        raise OptionError(f"--steps {steps} is too few: at least 2 steps are needed to check for static shapes")
    profiling = [name for name in options_mod.ENV_VARIABLES if environ.get(name, "").strip()]
    if profiling:
        raise TunePreconditionError(f"cannot tune: profiling is on ({', '.join(profiling)} set); needed: "
                                    "profiling off while tuning, so unset it")
    if int(environ.get("WORLD_SIZE", "1") or 1) > 1:
        raise TunePreconditionError(f"cannot tune: WORLD_SIZE={environ['WORLD_SIZE']}; needed: one process "
                                    "(multi-process tuning is not supported)")
    failed = [c for c in check_disk(the_plan.bank_path, the_plan.result_dir) if not c.ok]
    if failed:
        raise TunePreconditionError("cannot tune: " + "; ".join(map(str, failed)))
    handle, status_path = tempfile.mkstemp(prefix="perfsight_tune_", suffix=".json")
    os.close(handle)
    status_file = Path(status_path)
    config = {"mode": "op", "bank": str(the_plan.bank_path), "repeat": the_plan.repeat, "steps": steps,
              "result_dir": str(the_plan.result_dir), "status": status_path}
    try:
        code = run_child(command, boot_environment({VARIABLE: json.dumps(config)}, environ), "tune")
        text = status_file.read_text(encoding="utf-8")
    finally:
        status_file.unlink(missing_ok=True)
    status = json.loads(text) if text else {"error": "the command did not run the tuner: is it Python with "
                                                     "torch and the perfsight it was launched with?"}
    return code, status
