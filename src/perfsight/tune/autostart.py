"""Tuning inside an unmodified script: PERFSIGHT_TUNE (set by ``perfsight tune``, tune/launch.py) makes
the boot sitecustomize call ``activate_from_env`` when the script imports torch (launch/torch_import.py).

Steps are delimited as ``perfsight run`` delimits them (collect/autostart.py): a step begins at the first
module forward after the previous optimizer step and ends at the next optimizer step. The first module
forwarded is the root: it names the operators by module path, and the inputs of its first call in the last
recorded step are kept. After ``steps`` steps the recording stops and the session
(``session.tune_recorded``) checks the preconditions and runs the stages: the op stage tunes the recorded
signatures on synthetic inputs; the subgraph stage (mode subgraph or both) tunes the regions of the root,
running ``replay_step``: the root's forward on a detached copy of those inputs, then - when the script's
forward ran with grad - the backward of the sum of its floating outputs' means; the step stage (mode step
or both) tunes the implementation of the optimizers that stepped in the recorded steps and, when those
steps waited on their batches, the worker settings of the DataLoaders they drew from, timed with the replay
(tune/loadat.py). The stages' winners are then proven on ``replay_step`` before the bank gets them
(tune/prove.py, tune/proof.py): each is kept only if the replayed steps run faster with it; with the step
stage, the replay steps those optimizers too.
Buffers and gradients the stages and the proof touched are restored, the weights and optimizer state such a
replay moved too, and the random-number state, so the script goes on as it would have. The script continues
untuned with every hook removed. The outcome goes to the ``status`` file the launcher reads: ``{"report",
"bank", "stages": {stage: {"repo_summary", "winners", "failed", "rows", "verdict"}}, "proof", "input",
"preconditions"}`` (``proof``: ``proof_status``; ``input``: the wait for batches, ``capture.InputWait``) or
``{"error"}`` (``rows`` and ``verdict``: ``session.TuneResult``'s). A failure never
stops the script: it is written there and tuning is abandoned. With ``"verify"`` in PERFSIGHT_TUNE the
script's steps are timed with and without the bank instead (tune/verify_script.py).

``apply_bank_from_env``: under ``perfsight run`` with TUNE_BANK_PATH set, the script runs under the bank's
operator, subgraph and step-settings winners from its first module forward on (tune/scriptbank.py), checked against its
own untuned steps and switched off while it is slower (tune/guard.py).
"""
from __future__ import annotations

import atexit
import json
import os
import sys
from typing import Callable

from perfsight.collect.autostart import is_helper_process
from perfsight.core.errors import PerfsightError
from perfsight.tune.status import failure, write_status

VARIABLE = "PERFSIGHT_TUNE"

_state: dict = {}


class TuningDriver:
    """Records a script's first ``config["steps"]`` steps, then tunes them (see the module docstring)."""

    def __init__(self, config: dict, tuning_name: str):
        from torch.nn.modules.module import register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.config = config
        self.tuning_name = tuning_name
        self.recording = None
        self.root = None
        self.inputs: tuple | None = None  # (args, kwargs, grad enabled) of the root's call in the last step
        self.in_step = False
        self.done = False
        from perfsight.tune.capture import LoaderWatch

        # from the start: the script makes its first epoch's iterator before its first step
        self.handles = [register_module_forward_pre_hook(self._forward),
                        register_optimizer_step_post_hook(self._stepped), LoaderWatch()]

    def _forward(self, module, _args) -> None:
        if self.done or self.in_step:
            return
        from perfsight.tune.capture import Recording

        if self.recording is None:
            self.recording = Recording()
            self.recording.name_modules(module)
            self.root = module
            self.handles.append(module.register_forward_pre_hook(self._root_called, with_kwargs=True))
        self.recording.begin_step()
        self.in_step = True

    def _root_called(self, _module, args, kwargs) -> None:
        if self.in_step and self.inputs is None and self.recording.steps == self.config["steps"] - 1:
            import torch

            self.inputs = (args, kwargs, torch.is_grad_enabled())

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
            status = {"error": failure(exc)}
        write_status(self.config, status)

    def _tune(self, captured) -> dict:
        import torch

        from perfsight.tune.regions import copied
        from perfsight.tune.session import plan, tune_recorded
        from perfsight.tune.sgat import preserved

        wanted = self.config["steps"]
        if captured is None or captured.steps < wanted:
            seen = 0 if captured is None else captured.steps
            return {"error": f"the script made {seen} optimizer steps, fewer than the {wanted} to record: "
                             "let it train longer or lower --steps"}
        the_plan = plan(self.config["mode"], self.config["bank"], self.config["repeat"], self.config["result_dir"],
                        order=self.config.get("order"))
        options = {"whole": self.config.get("whole", True),
                   **({} if self.config.get("compile_modes") is None else {"modes": self.config["compile_modes"]})}
        if self.inputs is None:
            return {"error": f"the first module the script ran, {type(self.root).__name__}, was not called in step "
                             f"{wanted}: the winners are proven on a replay of its forward (and subgraph tuning "
                             "tunes its regions on it), so it must run every step"}
        args, kwargs = copied(self.inputs[:2])
        step = replay_step(self.root, args, kwargs, grad=self.inputs[2])
        optimizers = captured.optimizers if "step" in the_plan.stages and self.inputs[2] else []
        proof_step = replay_step(self.root, args, kwargs, grad=True, optimizers=optimizers) if optimizers else step
        self.inputs = None
        with torch.enable_grad(), torch.random.fork_rng(), preserved(self.root, optimizers):
            result = tune_recorded(captured, the_plan, tuning_name=self.tuning_name, model=self.root,
                                   step=step if "subgraph" in the_plan.stages else None, proof_step=proof_step,
                                   loader_step=proof_step, **options)
        return {"report": str(result.report), "bank": str(result.bank),
                "stages": {stage: {"repo_summary": r.repo_summary, "winners": r.winners, "failed": r.failed,
                                   "rows": r.rows, "verdict": r.verdict} for stage, r in result.stages.items()},
                "proof": proof_status(result), "input": result.input_wait,
                "preconditions": [str(c) for c in result.preconditions]}


def proof_status(result) -> dict | None:
    """The in-step proof of a ``session.TuneResult`` for the status file: the end-to-end figure of the winners
    switched step by step (``prove.Ablation``; ``Verdict.as_dict`` and its sentence, None when none was kept),
    and how many winners were kept and rejected, the data loaders' too (each proven on its own blocks of steps,
    tune/loadat.py)."""
    if result.proof is None:
        return None
    import torch

    from perfsight.tune.measure import KEPT

    proof = result.proof
    verdict = proof.verdict(threads=torch.get_num_threads(), bank=result.bank)
    loaded = [o.in_step["decision"] for o in (result.optat.loaders if result.optat is not None else []) if o.in_step]
    text = "no winner was kept: none made the step faster" if verdict is None else str(verdict)
    if KEPT in loaded:
        text = ("the data loader's winner was kept on its own steps (its row says by how much); "
                + ("no other winner was kept" if verdict is None else str(verdict)))
    return {"kept": len(proof.kept) + loaded.count(KEPT), "rejected": len(proof.rejected()) + len(loaded)
            - loaded.count(KEPT), "end_to_end": None if verdict is None else verdict.as_dict(), "text": text}


def replay_step(root, args: tuple, kwargs: dict, *, grad: bool, optimizers=()) -> Callable[[], None]:
    """A synthetic step of ``root``: its forward on ``args`` and ``kwargs``, then, with ``grad``, the backward
    of the sum of the means of its floating outputs that require grad (none: forward only), then a step of
    each of ``optimizers`` and their ``zero_grad``."""
    import torch

    def step() -> None:
        with torch.set_grad_enabled(grad):
            outputs = [t for t in torch.utils._pytree.tree_leaves(root(*args, **kwargs))
                       if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
            if outputs:
                sum(t.float().mean() for t in outputs).backward()
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
    return step


def activate_from_env(environ=os.environ):
    """Start recording this script's steps (or, with ``"verify"``, timing them with and without the bank)
    when PERFSIGHT_TUNE is set, once per process."""
    text = environ.get(VARIABLE, "").strip()
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if not text or "driver" in _state or is_helper_process(argv):
        return _state.get("driver")
    config = json.loads(text)
    if int(environ.get("WORLD_SIZE", "1") or 1) > 1:
        write_status(config, {"error": "tuning or verifying a multi-process run is not supported (the seed's "
                                       "multi-P case): use one process"})
        return None
    if config.get("verify"):
        from perfsight.tune.verify_script import ScriptVerifier

        driver = ScriptVerifier(config)
    else:
        driver = TuningDriver(config, os.path.basename(next((a for a in sys.argv[:1] if a), "python")))
    _state["driver"] = driver
    atexit.register(driver.finish)
    return driver


def apply_bank_from_env(environ=os.environ) -> bool:
    """``perfsight run`` with TUNE_BANK_PATH set (and no tuning under way), once per process: from the
    script's first module forward on, it runs under the bank's operator winners and, on that module's
    regions, its subgraph winners (tune/scriptbank.py), checked against the run's own untuned steps and
    switched off while it is slower (tune/guard.py). A missing or stale bank, or one without winners for
    this model and device, is reported and not applied. At exit, how many calls ran under a winner and what
    the checks did is printed. Returns whether the bank will be looked at."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if not environ.get("TUNE_BANK_PATH") or environ.get(VARIABLE) or "applying" in _state or is_helper_process(argv):
        return False
    from perfsight.tune.env import TuneSettings

    try:
        bank_path = TuneSettings.from_env(environ).bank_path
        from torch.nn.modules.module import register_module_forward_pre_hook
    except (PerfsightError, ImportError) as exc:
        print(f"perfsight: {exc}; the tuning bank is not applied", file=sys.stderr)
        return False

    def first_forward(module, _args) -> None:
        _state["applying"].remove()
        from perfsight.tune.scriptbank import ScriptBank

        try:
            applied = ScriptBank(module, bank_path)
        except Exception as exc:  # applying never takes the training down
            print(f"perfsight: {failure(exc)}; the tuning bank is not applied", file=sys.stderr)
            return
        from perfsight.tune.guard import CHECK_EVERY, BankGuard

        guard = BankGuard(applied)
        print(f"perfsight: applying {applied.describe()}, checked against untuned steps of this run at its start "
              f"and every {CHECK_EVERY} optimizer steps (switched off while it is slower)", file=sys.stderr)
        atexit.register(lambda: print(f"perfsight: tuning bank applied to {sum(applied.used.values())} calls "
                                      f"({dict(applied.used)}); {guard.describe()}", file=sys.stderr))
    _state["applying"] = register_module_forward_pre_hook(first_forward)
    return True
