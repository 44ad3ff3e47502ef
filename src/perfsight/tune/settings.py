"""The backend settings a tuned call runs under - the intra-op thread count, oneDNN on/off, the SDPA backend,
cuDNN benchmark, the BLAS library - and running a call, forward and backward, under them.

An operator candidate (candidates.py) and a region variant (variants.py) that change a setting hold it
for the call's backward too. ``run_under(changes, fn, args, kwargs, params)`` runs ``fn`` with the
settings of ``changes`` (``changes(params)``: only those not so already) and puts them back after; with
autograd recording, inside ``_UnderSettings``, an ``autograd.Function`` whose forward records ``fn``'s own
graph under the settings (from detached copies of its tensor inputs) and whose backward runs that graph's
backward under them again, once (like a graph without ``retain_graph``; no double backward). ``params``
are the leaves ``fn`` uses besides its arguments (a region's parameters): they are inputs of the function
too, so their gradients flow to them as they would without it, through ``backward`` and
``autograd.grad`` alike - once the call's whole backward has run, all together (a hook on a parameter,
such as DDP's bucketed all-reduce, fires then, not layer by layer). A graph that reaches any other leaf
needing a gradient (a tensor from outside the call, not passed in) is refused with an error naming it,
since that leaf's gradient would be lost; finding out walks the call's graph, ~0.5 us a node (not for
torch's own operators: ``params`` None). Forward + backward of a 4x8 by 6x8 linear under a setting that
changes nothing there (oneDNN off) takes ~88 us more than the plain op, measured here at 1 thread (the
op-only function this replaced: ~77 us).
"""
from __future__ import annotations

from contextlib import contextmanager
from functools import partial
from typing import Callable

import torch
from torch.autograd.function import once_differentiable
from torch.utils._pytree import tree_flatten, tree_unflatten

from perfsight.core.process import usable_cores


def blas() -> str:
    """The preferred CUDA BLAS library, by name (cublas or cublaslt)."""
    return torch.backends.cuda.preferred_blas_library().name.lower()


#: SDPA backend -> its torch.backends.cuda flag (they choose the CPU kernels too)
SDPA_FLAGS = {"flash": "flash", "efficient": "mem_efficient", "math": "math", "cudnn": "cudnn"}


def _sdpa_backends() -> tuple[bool, ...]:
    return tuple(getattr(torch.backends.cuda, f"{flag}_sdp_enabled")() for flag in SDPA_FLAGS.values())


def _enable_sdpa(value) -> None:
    """Enable one SDPA backend by name and disable the others, or restore what ``_sdpa_backends`` read."""
    flags = value if isinstance(value, tuple) else tuple(name == value for name in SDPA_FLAGS)
    for flag, on in zip(SDPA_FLAGS.values(), flags):
        getattr(torch.backends.cuda, f"enable_{flag}_sdp")(on)


#: candidate parameter -> (read the setting, write it): what a candidate sets around its call and backward
SETTINGS = {
    "threads": (torch.get_num_threads, torch.set_num_threads),
    "onednn": (lambda: torch.backends.mkldnn.enabled, partial(setattr, torch.backends.mkldnn, "enabled")),
    "backend": (_sdpa_backends, _enable_sdpa),
    "cudnn_benchmark": (lambda: torch.backends.cudnn.benchmark, partial(setattr, torch.backends.cudnn, "benchmark")),
    "blas": (blas, lambda name: torch.backends.cuda.preferred_blas_library(name)),
}

Changes = list[tuple[Callable, Callable, object]]


def schedule_threads(device: str = "cpu") -> int | None:
    """The thread count a Schedule candidate (an operator's) or variant (a region's) tries: every usable
    core, on a CPU where torch runs another number of intra-op threads; None when there is none to try."""
    cores = usable_cores()
    return cores if device == "cpu" and cores != torch.get_num_threads() else None


def changes(params: dict) -> Changes:
    """(read, write, value) for each setting ``params`` asks for that is not so already."""
    return [(read, write, params[name]) for name, (read, write) in SETTINGS.items()
            if params.get(name) is not None and params[name] != read()]


@contextmanager
def under(settings: Changes):
    """The settings of ``settings`` for the block, then each back to what it was on entry."""
    done = []
    try:
        for read, write, value in settings:
            done.append((write, read()))
            write(value)
        yield
    finally:
        for write, previous in reversed(done):
            write(previous)


def _foreign_leaf(outs: list[torch.Tensor], own: list[torch.Tensor]) -> torch.Tensor | None:
    """A leaf needing a gradient that the graph of ``outs`` reaches and ``own`` does not hold, if any."""
    mine = {id(t) for t in own}
    seen, stack = set(), [o.grad_fn for o in outs if o.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)
        if variable is not None and id(variable) not in mine:
            return variable
        stack.extend(next_node for next_node, _ in node.next_functions)
    return None


_TENSOR = object()  # where a tensor was taken out of a flattened tree
_CONTAINERS = (list, tuple, dict)


def _flatten(args: tuple, kwargs: dict) -> tuple[list, object]:
    """The leaves of (args, kwargs) and how to put them back: by position and keyword when none is a container
    (an operator's call, most module calls: ~10x cheaper than torch's pytree, on every tuned call), else
    ``tree_flatten``'s spec."""
    if not any(isinstance(v, _CONTAINERS) for v in (*args, *kwargs.values())):
        return [*args, *kwargs.values()], (len(args), tuple(kwargs))
    return tree_flatten((args, kwargs))


def _unflatten(flat: list, spec) -> tuple[tuple, dict]:
    if isinstance(spec, tuple):
        positional, keys = spec
        return tuple(flat[:positional]), dict(zip(keys, flat[positional:]))
    return tree_unflatten(flat, spec)


class _Call:
    """One call's arguments with their tensors taken out: ``flat`` (the leaves of (args, kwargs), each tensor
    replaced by _TENSOR), ``spec`` and ``params``, and, once run, its outputs' ``out_flat`` and ``out_spec``
    (None: the output is one tensor)."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict, params: list[torch.Tensor] | None):
        flat, self.spec = _flatten(args, kwargs)
        self.fn, self.params = fn, params
        self.positions = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
        self.tensors = [flat[i] for i in self.positions]
        self.flat = [_TENSOR if isinstance(v, torch.Tensor) else v for v in flat]
        self.out_flat: list = []
        self.out_spec = None

    def run(self, tensors: list[torch.Tensor]):
        flat = list(self.flat)
        for i, t in zip(self.positions, tensors):
            flat[i] = t
        args, kwargs = _unflatten(flat, self.spec)
        return self.fn(*args, **kwargs)

    def ran(self, out) -> list[torch.Tensor]:
        """Keep the structure of the call's output ``out``; return its tensors."""
        out_flat, self.out_spec = ([out], None) if isinstance(out, torch.Tensor) else tree_flatten(out)
        self.out_flat = [_TENSOR if isinstance(v, torch.Tensor) else v for v in out_flat]
        return [v for v in out_flat if isinstance(v, torch.Tensor)]

    def outputs(self, tensors: tuple):
        """The call's output with ``tensors`` in its tensors' places."""
        if self.out_spec is None:
            return tensors[0]
        given = iter(tensors)
        return tree_unflatten([next(given) if v is _TENSOR else v for v in self.out_flat], self.out_spec)


class _UnderSettings(torch.autograd.Function):
    """A call and its backward, both under ``settings`` (see the module docstring)."""

    @staticmethod
    def forward(ctx, settings, call, *tensors):
        inputs = [t.detach().requires_grad_(t.requires_grad) for t in tensors[:len(call.positions)]]
        with torch.enable_grad(), under(settings):
            out = call.run(inputs)
        outs = call.ran(out)
        wanted = inputs + list(tensors[len(call.positions):])
        foreign = _foreign_leaf(outs, wanted) if call.params is not None else None
        if foreign is not None:
            raise ValueError(f"perfsight: a call run under tuned settings uses a tensor needing a gradient that "
                             f"is neither its argument nor its parameter (shape {list(foreign.shape)}); its "
                             f"gradient would be lost, so the call is not run this way")
        ctx.settings, ctx.outs, ctx.wanted = settings, outs, wanted
        detached = tuple(o.detach() for o in outs)
        ctx.mark_non_differentiable(*(d for d, o in zip(detached, outs) if not o.requires_grad))
        return detached

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        if ctx.outs is None:
            raise RuntimeError("perfsight: backward through a tuned call a second time (its graph is freed "
                               "after the first backward)")
        pairs = [(o, g) for o, g in zip(ctx.outs, grads) if o.requires_grad]
        wanted = [t for t in ctx.wanted if t.requires_grad]
        with under(ctx.settings):
            got = iter(torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs],
                                           allow_unused=True))
        all_wanted, ctx.outs, ctx.wanted = ctx.wanted, None, None
        return (None, None, *(next(got) if t.requires_grad else None for t in all_wanted))


def run_under(settings: Changes, fn: Callable, args: tuple, kwargs: dict | None = None,
              params: list[torch.Tensor] | None = None):
    """``fn(*args, **kwargs)`` under ``settings``, forward and backward (see the module docstring). ``params``
    None: ``fn`` is one of torch's operators, whose graph reaches its arguments only and is not walked."""
    kwargs = kwargs or {}
    if not settings:
        return fn(*args, **kwargs)
    call = _Call(fn, args, kwargs, params)
    leaves = [*call.tensors, *(params or ())]
    if torch.is_grad_enabled() and any(t.requires_grad for t in leaves):
        return call.outputs(_UnderSettings.apply(settings, call, *leaves))
    with under(settings):
        return fn(*args, **kwargs)
