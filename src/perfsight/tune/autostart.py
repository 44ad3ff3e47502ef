"""Tuning inside an unmodified script: PERFSIGHT_TUNE (set by ``perfsight tune``, tune/launch.py) makes
the boot sitecustomize call ``activate_from_env`` when the interpreter starts.

Steps are delimited as ``perfsight run`` delimits them (collect/autostart.py): a step begins at the first
module forward after the previous optimizer step and ends at the next optimizer step. The first module
forwarded names the operators by module path. After ``steps`` steps the recording stops, the session
checks the preconditions and tunes the recorded signatures on synthetic inputs (bank and result file),
and the script continues untuned with every hook removed. The outcome goes to the ``status`` file the
launcher reads: ``{"report", "bank", "repo_summary", "winners", "error"}``. A failure never stops the
script: it is written there and tuning is abandoned.

``apply_bank_from_env``: under ``perfsight run`` with TUNE_BANK_PATH set, the script runs under the bank.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path

from perfsight.collect.autostart import is_helper_process
from perfsight.errors import PerfsightError

VARIABLE = "PERFSIGHT_TUNE"

_state: dict = {}


class _Driver:
    def __init__(self, config: dict, tuning_name: str):
        from torch.nn.modules.module import register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.config = config
        self.tuning_name = tuning_name
        self.recording = None
        self.in_step = False
        self.done = False
        self.handles = [register_module_forward_pre_hook(self._forward),
                        register_optimizer_step_post_hook(self._stepped)]

    def _forward(self, module, _args) -> None:
        if self.done or self.in_step:
            return
        from perfsight.tune.capture import Recording

        if self.recording is None:
            self.recording = Recording()
            self.recording.name_modules(module)
        self.recording.begin_step()
        self.in_step = True

    def _stepped(self, _optimizer, _args, _kwargs) -> None:
        if self.done or not self.in_step:
            return
        self.recording.end_step()
        self.in_step = False
        if self.recording.steps >= self.config["steps"]:
            self.finish()

    def finish(self) -> None:
        """Stop recording, remove the hooks, tune what was recorded (at the last step or at exit)."""
        if self.done:
            return
        self.done = True
        for handle in self.handles:
            handle.remove()
        captured = self.recording.finish() if self.recording is not None else None
        try:
            status = self._tune(captured)
        except Exception as exc:  # tuning never takes the training down
            status = {"error": str(exc) if isinstance(exc, PerfsightError) else f"{type(exc).__name__}: {exc}"}
        Path(self.config["status"]).write_text(json.dumps(status), encoding="utf-8")

    def _tune(self, captured) -> dict:
        import torch

        from perfsight.tune.session import plan, tune_capture

        wanted = self.config["steps"]
        if captured is None or captured.steps < wanted:
            seen = 0 if captured is None else captured.steps
            return {"error": f"the script made {seen} optimizer steps, fewer than the {wanted} to record: "
                             "let it train longer or lower --steps"}
        the_plan = plan(self.config["mode"], self.config["bank"], self.config["repeat"], self.config["result_dir"])
        with torch.enable_grad():
            result = tune_capture(captured, the_plan, tuning_name=self.tuning_name)
        return {"report": str(result.report), "bank": str(result.bank), "repo_summary": result.repo_summary,
                "winners": result.winners, "preconditions": [str(c) for c in result.preconditions]}


def activate_from_env(environ=os.environ) -> _Driver | None:
    """Start recording this script's steps when PERFSIGHT_TUNE is set, once per process."""
    text = environ.get(VARIABLE, "").strip()
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if not text or "driver" in _state or is_helper_process(argv):
        return _state.get("driver")
    config = json.loads(text)
    if int(environ.get("WORLD_SIZE", "1") or 1) > 1:
        Path(config["status"]).write_text(json.dumps({"error": "tuning a multi-process run is not supported "
                                                      "(the seed's multi-P case): tune with one process"}))
        return None
    script = next((a for a in sys.argv[:1] if a), "python")
    _state["driver"] = driver = _Driver(config, os.path.basename(script))
    atexit.register(driver.finish)
    return driver


def apply_bank_from_env(environ=os.environ):
    """``perfsight run`` with TUNE_BANK_PATH set (and no tuning under way): the script runs under the bank's
    operator winners for this device, once per process; a stale bank or one without winners is reported
    and not applied. At exit, how many calls ran under a winner is printed."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if not environ.get("TUNE_BANK_PATH") or environ.get(VARIABLE) or "applied" in _state or is_helper_process(argv):
        return None
    from perfsight.tune.apply import TunedMode
    from perfsight.tune.bank import Bank
    from perfsight.tune.env import TuneSettings

    try:
        bank = Bank(TuneSettings.from_env(environ).bank_path, read_only=True)
        mode = TunedMode(bank)
    except PerfsightError as exc:
        print(f"perfsight: {exc}; the tuning bank is not applied", file=sys.stderr)
        return None
    if not mode.active:
        print(f"perfsight: the tuning bank {bank.directory} holds no operator winners for this device and "
              "these library versions; not applied", file=sys.stderr)
        return None
    mode.__enter__()
    _state["applied"] = mode
    print(f"perfsight: applying the tuning bank {bank.directory}", file=sys.stderr)
    atexit.register(lambda: print(f"perfsight: tuning bank applied to {sum(mode.used.values())} calls "
                                  f"({dict(mode.used)})", file=sys.stderr))
    return mode
