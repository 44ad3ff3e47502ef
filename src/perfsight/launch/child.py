"""Running an unmodified program under perfsight, shared by ``perfsight run`` (collect/launch.py) and
``perfsight tune`` (tune/launch.py).

The program gets perfsight's boot directory (``launch/boot``) first on PYTHONPATH, whose sitecustomize
starts profiling (PERFSIGHT_OPTIONS), tuning (PERFSIGHT_TUNE) or a tuning bank (TUNE_BANK_PATH) in every
Python process it starts, once that process imports torch (launch/torch_import.py). While it runs, the
launcher passes SIGTERM and SIGHUP on to it (a scheduler's or a user's kill of the launcher reaches the
training, which closes its run) and outlives Ctrl-C, which the terminal sends the program itself; it returns
the program's exit code as a shell reports it (128 + N when signal N ended it).
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from perfsight.core.errors import OptionError

#: signals the launcher passes on to the child
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

BOOT_DIR = Path(__file__).parent / "boot"


def boot_environment(variables: dict[str, str], environ=os.environ) -> dict[str, str]:
    """``environ`` plus ``variables``, with the boot directory first on PYTHONPATH."""
    env = {**environ, **variables}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOT_DIR), environ.get("PYTHONPATH", "")) if p)
    return env


def run_child(command: list[str], env: dict[str, str], verb: str) -> int:
    """Run ``command`` to its end, passing FORWARDED_SIGNALS on to it; return its exit code (128 + N when
    signal N ended it)."""
    try:
        child = subprocess.Popen(command, env=env)
    except FileNotFoundError:
        raise OptionError(f"{verb}: command not found: {command[0]!r}") from None
    except PermissionError:
        raise OptionError(f"{verb}: command not executable: {command[0]!r}") from None

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
