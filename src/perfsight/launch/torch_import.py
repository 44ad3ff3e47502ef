"""Activation waits for torch: a Python process is profiled (PERFSIGHT_OPTIONS), tuned (PERFSIGHT_TUNE) or given
a tuning bank (TUNE_BANK_PATH) from the moment it imports torch, through a post-import hook (``wrapt``) that the
boot sitecustomize and the ``perfsight-autostart.pth`` line register when the interpreter starts. The Python
processes a training starts that never import torch (inductor's compile probes, a script's own shell-outs) run
plain: they pay no torch import and leave no run behind. A failure to activate is said and never breaks the
script's ``import torch``."""
from __future__ import annotations

import sys
from typing import Callable

from wrapt import register_post_import_hook


def when_torch_imported(*activations: Callable[[], object]) -> None:
    """Call each of ``activations`` once torch is imported (at once when it already is)."""

    def activate(_torch) -> None:
        for activation in activations:
            try:
                activation()
            except Exception as exc:  # the script's import of torch must go on
                print(f"perfsight: could not start ({type(exc).__name__}: {exc}); the script runs without "
                      "perfsight", file=sys.stderr)

    register_post_import_hook(activate, "torch")
