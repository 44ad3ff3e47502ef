"""``perfsight tune -- python train.py ...``: tune an unmodified script (``run_tuning``, ``--mode
op|subgraph|step|both``) or time it with and without its bank (``run_verify``, ``--verify``).

What can be checked before the script starts is checked here, so a bad option or an unmet precondition
exits before any training: the mode and order, the compile modes, the bank path, the step count,
profiling off (no PERFSIGHT_OPTIONS, PROFILING_OPTIONS or MS_PROFILER_OPTIONS), one process
(WORLD_SIZE), free disk to tune into, this device's banks read whole (none damaged or stale), and, to
verify, an existing bank that holds a winner. The child gets PERFSIGHT_TUNE (a
JSON config) through perfsight's boot sitecustomize (launch/child.py): it records its first steps and
tunes them (tune/autostart.py), or times its steps with and without the bank (tune/verify_script.py);
its outcome comes back in a status file.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from perfsight import options as options_mod
from perfsight.core.errors import OptionError, TuneBankError, TunePreconditionError
from perfsight.launch.child import boot_environment, run_child
from perfsight.tune.autostart import VARIABLE
from perfsight.tune.session import check_disk, plan

TUNE_STEPS = 2      # optimizer steps recorded for tuning: the fewest that shows static shapes
VERIFY_STEPS = 20   # steps timed by --verify, half of them with the bank
VERIFY_WARMUP = 2   # untimed rounds of --verify before them, each one step without and one with the bank


def run_tuning(command: list[str], *, mode: str | None = None, order: str | None = None, bank: str | None = None,
               repeat: bool | None = None, steps: int = TUNE_STEPS, compile_modes: list[str] | None = None,
               whole: bool = True, environ=os.environ) -> tuple[int, dict]:
    """Run ``command``, tuning its first ``steps`` steps (``mode``: op, subgraph, step or both, in ``order``;
    ``compile_modes`` limits subgraph tuning's torch.compile modes; ``whole`` False leaves the whole model out
    of it); returns its exit code and the child's status (``report``, ``bank``, ``stages``: {stage:
    {repo_summary, winners, failed, rows, verdict}}, ``preconditions``; or ``error``)."""
    the_plan = plan(mode, bank, repeat, None, environ, order=order)
    if steps < 2:
        raise OptionError(f"--steps {steps} is too few: at least 2 steps are needed to check for static shapes")
    if compile_modes is not None:
        _check_compile_modes(compile_modes, the_plan.stages)
    if not whole and "subgraph" not in the_plan.stages:
        raise OptionError("--regions-only is for subgraph tuning only: add --mode subgraph (or --mode both)")
    _check_alone(environ, "tune")
    failed = [c for c in check_disk(the_plan.bank_path, the_plan.result_dir) if not c.ok]
    if failed:
        raise TunePreconditionError("cannot tune: " + "; ".join(map(str, failed)))
    _checked_banks(the_plan.bank_path)
    both = len(the_plan.stages) > 1
    config = {"mode": "both" if both else the_plan.stages[0], "order": the_plan.order,
              "bank": str(the_plan.bank_path), "repeat": the_plan.repeat, "steps": steps,
              "result_dir": str(the_plan.result_dir), "compile_modes": compile_modes, "whole": whole}
    return _run(command, config, environ)


def run_verify(command: list[str], *, bank: str | None = None, steps: int = VERIFY_STEPS,
               environ=os.environ) -> tuple[int, dict]:
    """Run ``command``, timing ``steps`` of its steps, half with the bank and half without, interleaved;
    returns its exit code and the child's status (``verdict``, ``text``, ``warmup_steps``, ``timed_steps``,
    ``order``; or ``error``)."""
    if steps < 4 or steps % 2:
        raise OptionError(f"--steps {steps} is not allowed with --verify: the timed steps go in pairs, one "
                          "without the bank and one with it, and 2 pairs at least estimate the noise; "
                          "allowed: an even number from 4")
    path = plan(None, bank, None, None, environ).bank_path
    if not path.is_dir():
        raise TuneBankError(f"there is no tuning bank at {path} to verify: tune into it first (perfsight tune "
                            f"--bank {path} -- python train.py ...), or name one with --bank or TUNE_BANK_PATH")
    _check_alone(environ, "verify")
    _check_winners(_checked_banks(path), path)
    return _run(command, {"verify": True, "bank": str(path), "rounds": steps // 2, "warmup": VERIFY_WARMUP},
                environ)


def _checked_banks(root: Path) -> list:
    """This device's banks under ``root``, each read whole before the script starts: a damaged one (a file
    that is not of its shape, stores without bank.json) or a stale one raises TuneBankError naming it."""
    from perfsight.tune.bank import device_banks

    banks = device_banks(root)
    for bank in banks:
        bank.check_fresh()
    return banks


def _check_winners(banks: list, root: Path) -> None:
    """--verify needs a winner to apply: refuse, before the script runs, when none of this device's banks
    holds one (whether the script's model has modules the subgraph winners fit is seen once it runs)."""
    from perfsight.tune.apply import (
        loader_winners,
        operator_winners,
        optimizer_winners,
        subgraph_winners,
        tunableop_winners,
    )

    if not banks:
        raise TuneBankError(f"there is no tuning bank for this device under {root} to verify: tune into it first "
                            f"(perfsight tune --bank {root} -- python train.py ...)")
    if any(winners(bank) for bank in banks for winners in (operator_winners, subgraph_winners, optimizer_winners,
                                                           loader_winners, tunableop_winners)):
        return
    tuned = [f"{bank.directory} ({len(bank.entries('op'))} operator, {len(bank.entries('subgraph'))} subgraph and "
             f"{len(bank.entries('step'))} step-settings signatures tuned)" for bank in banks]
    raise TuneBankError(f"the tuning bank holds no winners: no candidate beat the default for any signature of "
                        f"{'; '.join(tuned)}; nothing to verify (tune again with --repeat, or another --mode)")


def _check_compile_modes(modes: list[str], stages: tuple[str, ...]) -> None:
    if "subgraph" not in stages:
        raise OptionError(f"--compile-modes {','.join(modes)} is for subgraph tuning only: add --mode subgraph "
                          "(or --mode both)")
    import torch

    from perfsight.tune.variants import available_modes

    allowed = available_modes("cuda" if torch.cuda.is_available() else "cpu")
    wrong = [m for m in modes if m not in allowed] if modes else ["(none)"]
    if wrong:
        raise OptionError(f"--compile-modes {','.join(modes)}: {', '.join(wrong)} is not allowed; allowed (this "
                          f"PyTorch on this device): {', '.join(allowed)}, comma-separated")


def _check_alone(environ, verb: str) -> None:
    """Profiling off and one process: profiling would distort the timings; several processes are not
    supported (the seed's multi-P case)."""
    profiling = [name for name in options_mod.ENV_VARIABLES if environ.get(name, "").strip()]
    if profiling:
        raise TunePreconditionError(f"cannot {verb}: profiling is on ({', '.join(profiling)} set); needed: "
                                    f"profiling off while timing, so unset it")
    if int(environ.get("WORLD_SIZE", "1") or 1) > 1:
        raise TunePreconditionError(f"cannot {verb}: WORLD_SIZE={environ['WORLD_SIZE']}; needed: one process "
                                    "(multi-process runs are not supported)")


def _run(command: list[str], config: dict, environ) -> tuple[int, dict]:
    handle, status_path = tempfile.mkstemp(prefix="perfsight_tune_", suffix=".json")
    os.close(handle)
    status_file = Path(status_path)
    try:
        variables = {VARIABLE: json.dumps({**config, "status": status_path})}
        code = run_child(command, boot_environment(variables, environ), "tune")
        text = status_file.read_text(encoding="utf-8")
    finally:
        status_file.unlink(missing_ok=True)
    status = json.loads(text) if text else {"error": "the command did not run the tuner: is it Python with "
                                                     "torch and the perfsight it was launched with?"}
    return code, status
