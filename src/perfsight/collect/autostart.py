"""No-code-change activation: PERFSIGHT_OPTIONS (or PROFILING_OPTIONS / MS_PROFILER_OPTIONS) in the
environment starts a Profiler when the script imports torch (launch/torch_import.py).

Steps come from torch.optim's global optimizer-step hooks (taken at the next batch fetch or module
forward), so an unmodified training script gets ProfilerStep ranges; a script that never steps an optimizer
(inference) gets one whole-run profile. The run is closed at exit, and on SIGTERM (as torchrun and schedulers
send) and SIGHUP.
Launchers and helper processes (torchrun itself, multiprocessing spawn children such as DataLoader workers,
inductor's compile workers) are not profiled.
Invalid options print one clear message and leave the script running unprofiled.
"""
from __future__ import annotations

import os
import signal
import sys

from perfsight import options as options_mod
from perfsight.core.errors import PerfsightError

_HELPER_MODULES = ("torch.distributed.run", "torch.distributed.launch", "perfsight", "perfsight.cli")
_HELPER_PROGRAMS = ("torchrun", "perfsight")
_HELPER_CODE = ("spawn_main", "forkserver", "resource_tracker")   # multiprocessing children
_HELPER_SCRIPTS = ("torch/_inductor/compile_worker/__main__.py",)  # inductor's compile workers

_state: dict = {}


def is_helper_process(argv: list[str]) -> bool:
    """Launchers (torchrun, perfsight's own CLI), multiprocessing children and inductor's compile workers do not
    train: skip them."""
    if any(os.path.basename(arg) in _HELPER_PROGRAMS for arg in argv[:2]):
        return True
    if any(arg.replace(os.sep, "/").endswith(_HELPER_SCRIPTS) for arg in argv[1:2]):
        return True
    for flag, value in zip(argv, argv[1:]):
        if flag == "-m" and value in _HELPER_MODULES:
            return True
        if flag == "-c" and any(marker in value for marker in _HELPER_CODE):
            return True
    return False


def wants_profiling(opts: "options_mod.Options") -> bool:
    """MS_PROFILER_OPTIONS needs "start": true (seed 002); the other variables need only be set."""
    if opts.source == "MS_PROFILER_OPTIONS":
        return bool(opts.start)
    return opts.start is not False


def activate_from_env(environ=os.environ) -> "object | None":
    """Start a Profiler from the environment, once per process (a venv's site runs the .pth hook twice, so a
    second call returns what the first did). Returns it, or None."""
    if "activated" in _state or is_helper_process(list(getattr(sys, "orig_argv", sys.argv))):
        return _state.get("profiler")
    _state["activated"] = True
    try:
        opts = options_mod.from_env(environ)
    except PerfsightError as exc:
        print(f"perfsight: {exc}; profiling is off for this run", file=sys.stderr)
        return None
    if opts is None or not wants_profiling(opts):
        return None
    from perfsight.collect.profiler import Profiler

    try:
        profiler = Profiler(options=opts, start_profile=True)
    except PerfsightError as exc:
        print(f"perfsight: {exc}; profiling is off for this run", file=sys.stderr)
        return None
    _state["profiler"] = profiler
    _install_step_hook(profiler)
    _close_on_signals(profiler)
    return profiler


def _install_step_hook(profiler) -> None:
    """A step ends when an optimizer steps; it is taken at the next batch fetch or module forward
    (see Profiler.step_soon: the hook itself runs where a trace window must not be cut)."""
    from torch.nn.modules.module import register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_post_hook

    _state["hooks"] = (
        register_optimizer_step_post_hook(lambda optimizer, args, kwargs: profiler.step_soon()),
        register_module_forward_pre_hook(lambda module, args: profiler.take_pending_step()),
    )


#: the signals that end a training whose run is closed first: SIGTERM (torchrun, schedulers) and SIGHUP (a closed
#: terminal or ssh session; ``perfsight run`` passes both on)
CLOSING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _close_on_signals(profiler) -> None:
    """On each of CLOSING_SIGNALS nobody else handles, close the run, then die of that signal as before."""
    def handler(signum, frame):
        profiler.close()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for signum in CLOSING_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_DFL:
            continue
        try:
            signal.signal(signum, handler)
        except ValueError:      # not the main thread
            return
