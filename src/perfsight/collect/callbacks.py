"""Training-loop callbacks that drive a Profiler: Hugging Face Trainer and PyTorch Lightning.

Each framework's library is imported only when its callback is asked for; without the library the
callback is a plain object with the same hook methods (enough for that framework's protocol and for
tests). Train begin starts the profiler (or waits for the ``epochs`` range), each finished step
calls ``step()``, epochs are reported, and train end runs ``analyse()`` (as MindSpore's callbacks do).
"""
from __future__ import annotations

import importlib

from perfsight.collect.profiler import Profiler


def _optional_base(module: str, name: str) -> type:
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError:
        return object


class _Driver:
    """Framework-neutral profiler driving shared by both callbacks."""

    def __init__(self, output_path=None, **options):
        self.profiler = Profiler(output_path=output_path, start_profile=False, **options)
        self.output_dir = None

    def _train_begin(self) -> None:
        if not self.profiler.options.epochs:
            self.profiler.start()

    def _train_end(self) -> None:
        self.output_dir = self.profiler.analyse()


class _HuggingFaceHooks(_Driver):
    def on_train_begin(self, args, state, control, **kwargs):
        self._train_begin()

    def on_step_end(self, args, state, control, **kwargs):
        self.profiler.step()

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.profiler.epoch_begin(int(state.epoch or 0))

    def on_epoch_end(self, args, state, control, **kwargs):
        self.profiler.epoch_end(int(round(state.epoch or 1)) - 1)

    def on_train_end(self, args, state, control, **kwargs):
        self._train_end()


class _LightningHooks(_Driver):
    def on_train_start(self, trainer, pl_module):
        self._train_begin()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.profiler.step()

    def on_train_epoch_start(self, trainer, pl_module):
        self.profiler.epoch_begin(trainer.current_epoch)

    def on_train_epoch_end(self, trainer, pl_module):
        self.profiler.epoch_end(trainer.current_epoch)

    def on_train_end(self, trainer, pl_module):
        self._train_end()


def HuggingFaceCallback(output_path=None, **options):
    """A transformers ``TrainerCallback`` profiling the Trainer's steps: ``Trainer(callbacks=[...])``."""
    base = _optional_base("transformers", "TrainerCallback")
    cls = type("PerfsightHuggingFaceCallback", (_HuggingFaceHooks, base), {})
    return cls(output_path, **options)


def LightningCallback(output_path=None, **options):
    """A Lightning ``Callback`` profiling the Trainer's batches: ``Trainer(callbacks=[...])``."""
    base = _optional_base("lightning.pytorch", "Callback")
    if base is object:
        base = _optional_base("pytorch_lightning", "Callback")
    cls = type("PerfsightLightningCallback", (_LightningHooks, base), {})
    return cls(output_path, **options)
