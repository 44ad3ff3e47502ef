"""perfsight.Profiler: torch.profiler (Kineto) collection into a PROF_ run directory.

In PyTorch idiom and MindSpore's (seed 002): ``Profiler(output_path=..., start_profile=True,
**options)`` with ``start()``, ``stop()``, ``step()``, ``analyse()`` and ``with``. Options are
validated when the Profiler is made (clear OptionError); from then on every collector action runs
under the failsafe, so a perfsight failure stops profiling and never the training. With ``on_demand``
(or a ``trigger``) the Profiler arms instead of collecting (``collect/ondemand.Armed``: ``start()`` arms,
``step()`` records the step and runs the captures asked for, ``close()`` ends it): each capture is a
Profiler of its own, collecting a step range into its run directory.
"""
from __future__ import annotations

import atexit
import errno
import json
import os
import shutil
import sys
import threading
import time
import warnings
from pathlib import Path

from perfsight import options as options_mod
from perfsight.collect.failsafe import Failsafe
from perfsight.collect.launch import LAUNCHER_ENV
from perfsight.collect.ondemand import Armed
from perfsight.collect.rundir import (
    RunDirectory,
    device_facts,
    distributed_identity,
    resolve_output_root,
    run_report,
    versions,
)
from perfsight.collect.sampler import HostSampler, series_for
from perfsight.collect.steps import DataLoaderTimer, StepRecorder
from perfsight.collect.storage import MB, MIN_FREE_BYTES, StorageGuard
from perfsight.core import layout
from perfsight.core.errors import PerfsightError

#: torch's warning when a schedule begins a new cycle (trace window) without acc_events
_WINDOW_CLEARED_WARNING = "Warning: Profiler clears events at the end of each cycle"
_active_lock = threading.Lock()
_active: "Profiler | None" = None


def active_profiler() -> "Profiler | None":
    """The Profiler currently collecting in this process, if any."""
    return _active


class Profiler:
    """Collect a profile of PyTorch training or inference into ``output_path``/PROF_.../."""

    def __init__(self, output_path: str | os.PathLike | None = None, start_profile: bool = True, *,
                 options: "options_mod.Options | dict | None" = None, first_step: int = 0, **kwargs):
        """``first_step``: the number of the first step (a capture numbers its steps as its job does)."""
        self.options = _resolve_options(output_path, options, kwargs)
        self.failsafe = Failsafe(on_failure=self._abandon)
        self.run: RunDirectory | None = None
        self._torch_profile = None
        self._recorder: StepRecorder | None = None
        self._dataloader_timer: DataLoaderTimer | None = None
        self._sampler: HostSampler | None = None
        self._storage: StorageGuard | None = None
        self._steps_collected: list[int] = []    # the steps in trace windows written
        self._steps_in_window: list[int] = []    # the steps recorded since, written with the next window
        self._distributed_noted = False  # the window being recorded holds torch's distributedInfo
        self._steps_before_run = first_step  # + step() calls before the first start(): steps count from here
        self._step_pending = False       # step_soon() was called; step() runs at the next safe point
        self._epoch: int | None = None
        self.armed = Armed(self.options, _capture_profiler) if self.options.on_demand else None
        if start_profile:
            self.start()

    # --- public API --------------------------------------------------------------------------

    @property
    def run_dir(self) -> Path | None:
        """The PROF_ directory of this run (made at the first ``start()``)."""
        return self.run.path if self.run else None

    @property
    def collecting(self) -> bool:
        return self._torch_profile is not None

    def start(self) -> None:
        """Begin (or resume) collecting, or arm (``on_demand``). Safe to call when already collecting."""
        if self.armed is not None:
            self.armed.arm()
            atexit.register(self.close)
            return
        if self.collecting or self.failsafe.failed:
            return
        if self.run is None:
            self._create_run()   # errors about the output directory are the user's to see
        self.failsafe.run("starting the profiler", self._start_session)

    def stop(self) -> None:
        """Stop collecting and write what was collected; ``start()`` may resume later in the same run."""
        if self.collecting:
            self.failsafe.run("stopping the profiler", self._stop_session)

    def close(self) -> None:
        """Stop, close the run's files and mark its manifest complete (an armed profiler: end the armed state).
        Called at exit if forgotten."""
        if self.armed is not None:
            self.armed.close()
            atexit.unregister(self.close)
            return
        self.take_pending_step()
        self.stop()
        if self.run is not None and self._recorder is not None:
            self.failsafe.run("finishing the run", self._close_run)

    def step(self) -> None:
        """Mark the end of a training step (call it once per step, like torch.profiler's step())."""
        if self.armed is not None:
            self.armed.step()
            return
        if self._recorder is None:
            self._steps_before_run += 1
            return
        if not self.failsafe.failed:
            self.failsafe.run("recording a step", self._step)

    def step_soon(self) -> None:
        """Mark the end of a step from inside one of torch's own ranges (an optimizer-step hook runs
        inside ``Optimizer.step``'s record_function, where restarting Kineto for a new trace window
        crashes the process). The step is taken at the next safe point: the next data-loader fetch,
        ``take_pending_step()`` (e.g. from a forward pre-hook), or ``close()``."""
        if self.armed is not None:
            self.armed.step_soon()
            return
        self._step_pending = True

    def take_pending_step(self) -> None:
        """Take a step marked by ``step_soon()``, if any."""
        if self.armed is not None:
            self.armed.take_pending_step()
            return
        if self._step_pending:
            self._step_pending = False
            self.step()

    def epoch_begin(self, epoch: int) -> None:
        """Tell the profiler an epoch begins; with the ``epochs`` option, starts at the first one."""
        self._epoch = epoch
        if self._recorder:
            self._recorder.epoch = epoch
        epochs = self.options.epochs
        if epochs and epoch == epochs[0]:
            self.start()

    def epoch_end(self, epoch: int) -> None:
        """Tell the profiler an epoch ended; with the ``epochs`` option, stops after the last one."""
        epochs = self.options.epochs
        if epochs and epoch == epochs[1]:
            self.stop()

    def analyse(self, *, export_format: str = "csv") -> Path:
        """Stop collecting, then export the timeline and summaries; returns the perfsight_output dir."""
        from perfsight.views.export import export_run

        self.close()
        if self.armed is not None:
            raise PerfsightError(f"analyse: an armed profiler (on_demand) has no run of its own; each capture is a "
                                 f"run, in a folder of {self.armed.root} (perfsight analyse FOLDER)")
        if self.run is None:
            raise PerfsightError("analyse: nothing was collected: the profiler was never started")
        export_run(self.run.path, timeline=True, summary=True, fmt=export_format)
        return self.run.path / layout.OUTPUT_DIR

    def __enter__(self) -> "Profiler":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- internals ---------------------------------------------------------------------------

    def _create_run(self) -> None:
        import torch

        opts = self.options
        root = resolve_output_root(opts.output)
        self.run = RunDirectory(root)
        self.failsafe.log_path = self.run.host_data / layout.COLLECT_LOG
        device = _choose_device(torch, opts.device)
        facts = device_facts(torch, device)
        identity = distributed_identity()
        env = options_mod.CollectEnvironment(has_cuda=device.startswith("cuda"),
                                             world_size=identity["world_size"])
        not_collected = [{"option": key, "reason": reason} for key, reason in opts.not_collected(env)]
        for warning in opts.warnings:
            self.failsafe.note(warning)
        for item in not_collected:
            self.failsafe.note(f"{item['option']}: not collected ({item['reason']})")
        (self.run.device_data(facts["id"]) / layout.DEVICE_INFO).write_text(
            json.dumps(facts, indent=2), encoding="utf-8")
        self.run.begin({
            "options_source": opts.source, "options_given": dict(opts.given),
            "options_resolved": opts.resolved(), "not_collected": not_collected,
            "versions": versions(torch), "device": facts, **identity,
        })
        self._storage = StorageGuard.for_option(root, opts.storage_limit, self.failsafe.note)
        self._recorder = StepRecorder(self.run.host_data / layout.STEPS, first_step=self._steps_before_run)
        self._recorder.epoch = self._epoch
        if opts.data_process:
            self._dataloader_timer = DataLoaderTimer(self._recorder, before_fetch=self.take_pending_step)
            self._dataloader_timer.install()
        series = series_for(opts.host_sys, opts.host_sys_usage)
        self._sampler = HostSampler(self.run.host_data / layout.HOST_USAGE, series, opts.host_sys_usage_freq,
                                    on_error=lambda exc: self.failsafe.note(f"host sampler stopped: {exc!r}"))
        self._sampler.start()
        atexit.register(self.close)
        global _active
        with _active_lock:
            _active = self

    def _start_session(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        from perfsight.collect.schedule import make_schedule

        opts = self.options
        if opts.task_time == "off":
            return      # framework/device timing switched off: host samples and steps only
        activities = [ProfilerActivity.CPU]
        if self.run.manifest["device"]["device"].startswith("cuda"):
            activities.append(ProfilerActivity.CUDA)
        schedule = make_schedule(opts.steps, opts.warmup_steps, opts.flush_every)
        # each window is written when it ends: torch's warning that a new window clears the last one is not ours
        warnings.filterwarnings("ignore", message=_WINDOW_CLEARED_WARNING, category=UserWarning)
        prof = profile(activities=activities, schedule=schedule, on_trace_ready=self._on_trace_ready,
                       record_shapes=opts.record_shapes, with_flops=opts.with_flops,
                       profile_memory=opts.profile_memory, with_stack=opts.with_stack)
        _align_step(prof, schedule, self._recorder.step)
        prof.start()
        self._torch_profile = prof

    def _step(self) -> None:
        from torch.profiler import ProfilerAction

        recording = self._torch_profile is not None and self._torch_profile.current_action in (
            ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
        closed = self._recorder.finish_step()
        if recording:
            self._steps_in_window.append(closed)
            if not self._distributed_noted:
                self._note_distributed(self._torch_profile)
        if self._torch_profile is not None:
            self._torch_profile.step()

    def _note_distributed(self, prof) -> None:
        """Put torch.distributed's description of the job (backend, rank, world size, process groups: torch's
        ``distributedInfo``) into the window being recorded. torch writes it only when a window starts after
        the process group exists, and an unmodified script makes its process group after perfsight started
        profiling: the first window would lack it. Once per window, from the first step recorded with a
        process group."""
        import torch.distributed as dist

        describe = getattr(prof, "_get_distributed_info", None)
        if describe is None or not dist.is_available() or not dist.is_initialized():
            return
        prof.add_metadata_json("distributedInfo", json.dumps(describe(), default=str))
        self._distributed_noted = True

    def _on_trace_ready(self, prof) -> None:
        if self.failsafe.failed:    # torch calls this from stop() too: after a failure nothing more is written
            return
        path = self.run.next_trace_path()
        temp = path.with_name(path.name + ".partial")
        try:
            prof.export_chrome_trace(str(temp))
            os.replace(temp, path)  # FileNotFoundError when Kineto could not write it: it only logs
        except OSError as exc:
            for leftover in (temp, temp.with_name(temp.name + ".tmp")):  # ours, and Kineto's temp file of ours
                leftover.unlink(missing_ok=True)
            raise PerfsightError(f"writing trace window {path.name} failed: {_write_failure(path, exc)}") from None
        self._steps_collected += self._steps_in_window
        self.run.update(traces=self.run.manifest["traces"] + [path.name],
                        trace_steps={**self.run.manifest["trace_steps"], path.name: self._steps_in_window},
                        steps_collected=list(self._steps_collected))
        self._steps_in_window = []
        self._distributed_noted = False
        self._storage.enforce(keep=path)

    def _stop_session(self) -> None:
        from torch.profiler import ProfilerAction

        prof, self._torch_profile = self._torch_profile, None
        cut = prof.current_action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
        prof.stop()
        if cut:     # torch closes the just-begun ProfilerStep#N as a stub; readers must not count it
            self.run.update(cut_steps=self.run.manifest.get("cut_steps", []) + [self._recorder.step])

    def _close_run(self) -> None:
        global _active
        parts = [("the host sampler", self._sampler.stop), ("steps.csv", self._recorder.close)]
        if self._dataloader_timer:
            parts.append(("the data-loader timer", self._dataloader_timer.uninstall))
        for what, close_part in parts:      # each is closed whatever the others do (a full disk fails some)
            try:
                close_part()
            except Exception as exc:  # noqa: BLE001 - closing what is left; the run must still be closed
                self.failsafe.note(f"closing {what} failed: {type(exc).__name__}: {exc}")
        self._recorder = None
        status = "failed" if self.failsafe.failed else "complete"
        self.run.end(status=status, end_ns=time.time_ns(), steps_collected=list(self._steps_collected),
                     errors=list(self.failsafe.errors))
        if not os.environ.get(LAUNCHER_ENV):   # else `perfsight run` reports every run when the program ends
            print(f"perfsight: {run_report(self.run.path, self.run.manifest)}", file=sys.stderr)
        with _active_lock:
            if _active is self:
                _active = None
        atexit.unregister(self.close)

    def _abandon(self) -> None:
        """After an internal failure: stop torch's profiler without writing anything more, and close the run
        as failed with what it kept. A failure inside ``prof.step()`` (a window that could not be written)
        leaves torch's profiler stopped but its schedule mid-window, and ``prof.stop()`` would then stop and
        export a profile that is gone (a crash inside torch): it is stopped only while Kineto still runs."""
        import torch

        prof, self._torch_profile = self._torch_profile, None
        if prof is not None:
            prof.on_trace_ready = None
            if torch.autograd._profiler_enabled():
                try:
                    prof.stop()
                except Exception as exc:  # noqa: BLE001 - already failing; say so and close what is left
                    self.failsafe.note(f"stopping torch's profiler after the failure failed: {exc!r}")
        if self.run is not None and self._recorder is not None:
            self._close_run()


def _capture_profiler(options: "options_mod.Options", first_step: int) -> Profiler:
    """An armed profiler's capture: a Profiler collecting ``options``' steps, numbered from ``first_step``."""
    return Profiler(options=options, first_step=first_step)


def _resolve_options(output_path, options, kwargs) -> "options_mod.Options":
    if isinstance(options, options_mod.Options):
        if output_path is not None or kwargs:
            raise options_mod.OptionError("pass either options=Options(...) or keyword options, not both")
        return options
    raw = dict(options or {})
    raw.update(kwargs)
    if output_path is not None:
        raw["output_path"] = os.fspath(output_path)
    return options_mod.resolve(raw, source="api")


def _write_failure(path: Path, exc: OSError) -> str:
    """Why writing ``path`` failed, in words: a full disk, or the error."""
    free = shutil.disk_usage(path.parent).free
    if exc.errno == errno.ENOSPC or free < MIN_FREE_BYTES:
        return f"no space left on device ({free // MB} MB free in {path.parent})"
    return f"{exc.strerror or exc} (Kineto could not write it)" if isinstance(exc, FileNotFoundError) else str(exc)


def _choose_device(torch, device_option: str) -> str:
    if device_option == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return f"cuda:{torch.cuda.current_device()}"
    return "cpu"


def _align_step(prof, schedule, step: int) -> None:
    """Number torch's ProfilerStep#N with perfsight's step count (which may not start at 0)."""
    if step == 0:
        return
    prof.step_num = step
    prof.current_action = schedule(step)
    if hasattr(prof, "_prev_schedule_action"):
        prof._prev_schedule_action = prof.current_action
