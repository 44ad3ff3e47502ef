"""The optimizer's implementation as a setting of the training step: which optimizers can run which, a bank
signature per optimizer, and switching one between them without rebuilding it.

torch's optimizers run their update one of three ways: a Python loop over the parameters (``for_loop``), one
multi-tensor kernel per operation over all of them (``foreach``), or one fused kernel (``fused``, for Adam,
AdamW, SGD and Adagrad). Which one a group runs is read from its ``foreach`` and ``fused`` flags at every step,
so ``switch`` changes it in place: the optimizer, its parameters and its state stay the same objects (its
``state_dict`` is loadable either way). The one piece of state that depends on it is each parameter's
``step`` count, which torch keeps on the CPU for the loops and on the parameter's device (float32) for the
fused kernels and capturable ones: ``switch`` moves it where the new implementation expects it, as
``load_state_dict`` would.

``signature(optimizer)`` is what a winner is keyed by: the optimizer's class, each group's hyperparameters
but the learning rate (a scheduler changes it every step, and it does not decide the speed) and the
implementation flags (what is tuned), the number of parameters and their elements, dtypes and devices.
``implementations(optimizer)`` lists those its class takes, on its parameters' devices and dtypes
(``fused`` needs floating parameters on a device with fused kernels; ``differentiable`` allows the loop only);
``implementation(optimizer)`` is the one it runs now (torch's default when the flags are unset).
"""
from __future__ import annotations

import inspect
import math

import torch
from torch.optim.optimizer import (
    Optimizer,
    _default_to_fused_or_foreach,
    _get_fused_kernels_supported_devices,
    _get_scalar_dtype,
)

FOR_LOOP, FOREACH, FUSED = "for_loop", "foreach", "fused"
IMPLEMENTATIONS = (FOR_LOOP, FOREACH, FUSED)
#: each implementation's group flags
FLAGS = {FOR_LOOP: {"foreach": False, "fused": False}, FOREACH: {"foreach": True, "fused": False},
         FUSED: {"foreach": False, "fused": True}}
#: group keys that are not part of an optimizer's signature: the learning rate, and what is tuned
_NOT_SIGNED = ("params", "lr", "initial_lr", "foreach", "fused")


def _takes(optimizer: Optimizer) -> set[str]:
    """The implementation flags the optimizer's class takes (``foreach``, ``fused``)."""
    return {"foreach", "fused"} & set(inspect.signature(type(optimizer).__init__).parameters)


def parameters(optimizer: Optimizer) -> list[torch.Tensor]:
    """Every parameter of every group, in order."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def _plain(value):
    """A hyperparameter as plain JSON: a one-element tensor as its number, a tuple as a list, any other
    object by its type's name."""
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else f"tensor{list(value.shape)}"
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return type(value).__name__


def signature(optimizer: Optimizer) -> dict:
    """The bank signature of ``optimizer`` (module docstring)."""
    params = parameters(optimizer)
    return {"optimizer": f"{type(optimizer).__module__}.{type(optimizer).__qualname__}",
            "groups": [{k: _plain(v) for k, v in sorted(group.items()) if k not in _NOT_SIGNED}
                       for group in optimizer.param_groups],
            "params": len(params), "elements": sum(p.numel() for p in params),
            "dtypes": sorted({str(p.dtype).removeprefix("torch.") for p in params}),
            "devices": sorted({p.device.type for p in params})}


def describe(sig: dict) -> str:
    """A signature in a few words, for a row of the tuning result."""
    return (f"{sig['optimizer'].rsplit('.', 1)[-1]} over {sig['params']} parameters ({sig['elements']:,} "
            f"elements, {'/'.join(sig['dtypes'])} on {'/'.join(sig['devices'])})")


def implementation(optimizer: Optimizer) -> str:
    """What ``optimizer`` runs now: its first group's flags, or torch's default for them when unset."""
    group = optimizer.param_groups[0]
    if group.get("fused"):
        return FUSED
    foreach = group.get("foreach")
    if foreach is None:
        _, foreach = _default_to_fused_or_foreach(parameters(optimizer), bool(group.get("differentiable")))
    return FOREACH if foreach else FOR_LOOP


def implementations(optimizer: Optimizer) -> list[str]:
    """The implementations ``optimizer``'s class takes on its parameters (module docstring), in
    ``IMPLEMENTATIONS`` order."""
    takes = _takes(optimizer)
    if not takes or any(group.get("differentiable") for group in optimizer.param_groups):
        return []
    params = parameters(optimizer)
    fused_devices = _get_fused_kernels_supported_devices()
    fused = "fused" in takes and all(p.is_floating_point() and p.device.type in fused_devices for p in params)
    return [name for name, ok in ((FOR_LOOP, True), (FOREACH, "foreach" in takes), (FUSED, fused)) if ok]


def flags(optimizer: Optimizer) -> list[dict]:
    """Each group's implementation flags as they are (``switch`` puts them back)."""
    takes = _takes(optimizer)
    return [{flag: group.get(flag) for flag in sorted(takes)} for group in optimizer.param_groups]


def switch(optimizer: Optimizer, to: str | list[dict]) -> None:
    """Make every group of ``optimizer`` run ``to`` (an implementation's name, or each group's flags as
    ``flags`` gave them) from its next step on, its ``step`` counts moved where that implementation keeps
    them."""
    if isinstance(to, str) and to not in IMPLEMENTATIONS:
        raise ValueError(f"optimizer implementation {to!r} is not one of {', '.join(IMPLEMENTATIONS)}")
    takes = _takes(optimizer)
    for index, group in enumerate(optimizer.param_groups):
        wanted = FLAGS[to] if isinstance(to, str) else to[index]
        group.update({flag: value for flag, value in wanted.items() if flag in takes})
        on_device = bool(group.get("fused") or group.get("capturable"))
        for param in group["params"]:
            step = optimizer.state.get(param, {}).get("step")
            if isinstance(step, torch.Tensor):
                where = (param.device, _get_scalar_dtype(is_fused=group.get("fused"))) if on_device \
                    else (torch.device("cpu"), _get_scalar_dtype())
                optimizer.state[param]["step"] = step.to(*where)
    if getattr(optimizer, "_need_device_dtype_check_for_fused", None) is False:
        optimizer._need_device_dtype_check_for_fused = True   # SGD checks its parameters again at its next step
