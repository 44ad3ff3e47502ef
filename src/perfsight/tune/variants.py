"""The ways to run a region (and an operator's compiled candidate): eager with inputs in a memory format,
``torch.compile`` in a mode, with inductor freezing for inference, or eager at another intra-op thread
count; shared by subgraph tuning (sgat.py), which times them, operator tuning (candidates.py), and applying
a bank (apply.py), which runs exactly what was timed (``region_runner``).

The thread-count variant is the Schedule mode applied to a region: the region's forward and backward run
at every usable core (``settings.schedule_threads``; offered when torch runs another number of threads),
switched once on entering the region and back on leaving it, rather than op by op, where each switched op
pays the switch and wakes the thread team again (``settings.run_under``, the region's parameters its
leaves).

Every compiled variant compiles a code object of its own (``own_code``: instances of one class otherwise
share compiled code and the recompile limit), with inductor's ``fallback_random`` (``compile_call``): its
random numbers (dropout) are drawn as eager draws them, so that from one random-number state it reproduces
eager and passes the tuner's check.
"""
from __future__ import annotations

import types
from dataclasses import dataclass
from itertools import count
from typing import Callable, Literal

import torch

from perfsight.tune.settings import changes, run_under, schedule_threads

MODES = ("default", "max-autotune-no-cudagraphs", "lite", "reduce-overhead")
AS_GIVEN, CHANNELS_LAST = "as_given", "channels_last"
_codes = count()


@dataclass(frozen=True)
class Variant:
    """One way to run a region: eager or a ``torch.compile`` mode, an input memory format, freezing, the
    intra-op thread count (None: as the caller runs)."""

    name: str
    compile: Literal[MODES] | None = None
    format: Literal[AS_GIVEN, CHANNELS_LAST] = AS_GIVEN
    freezing: bool = False
    threads: int | None = None

    @property
    def params(self) -> dict:
        return {"compile": self.compile, "format": self.format, "freezing": self.freezing,
                **({"threads": self.threads} if self.threads is not None else {})}

    @property
    def mode(self) -> str:
        return "Schedule" if self.threads is not None else "Compile" if self.compile else "Format"


def available_modes(device: str = "cpu") -> list[str]:
    """The compile modes of MODES this PyTorch knows (reduce-overhead, CUDA graphs, only on a GPU)."""
    known = torch._inductor.list_mode_options()
    return [m for m in MODES if m in known and (m != "reduce-overhead" or device == "cuda")]


def tensor_specs(described):
    if isinstance(described, dict) and "shape" in described:
        yield described
    elif isinstance(described, (list, dict)):
        for value in (described.values() if isinstance(described, dict) else described):
            yield from tensor_specs(value)


def variants(sig: dict, modes: list[str] | None = None, schedule: bool = True) -> list[Variant]:
    """The non-eager-default variants of a region signature: ``modes`` the compile modes (None: every one
    available), ``schedule`` whether the thread-count variant may be offered."""
    specs = list(tensor_specs([sig["inputs"], sig["kwargs"]]))
    device = next((s["device"] for s in specs), "cpu")
    formats = [AS_GIVEN] + ([CHANNELS_LAST] if any(len(s["shape"]) == 4 for s in specs) else [])
    out = [Variant("eager+channels_last", None, CHANNELS_LAST)] if CHANNELS_LAST in formats else []
    for mode in available_modes(device) if modes is None else modes:
        out += [Variant(f"compile_{mode}" + ("" if f == AS_GIVEN else f"+{f}"), mode, f) for f in formats]
    if not sig["train"] and (modes is None or "default" in modes):
        out += [Variant("compile_default+freezing" + ("" if f == AS_GIVEN else f"+{f}"), "default", f, True)
                for f in formats]
    threads = schedule_threads(device) if schedule else None
    if threads is not None:
        out.append(Variant(f"threads_{threads}", threads=threads))
    return out


def _formatted(tree, fmt: str):
    if fmt != CHANNELS_LAST:
        return tree
    return torch.utils._pytree.tree_map_only(
        torch.Tensor, lambda t: t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t, tree)


def compile_call(fn: Callable, mode: str = "default", **kwargs) -> Callable:
    """``torch.compile(fn, mode=mode, **kwargs)`` whose random numbers are eager's (``fallback_random``;
    torch.compile takes a mode or options, so the mode goes in as its options)."""
    options = {**torch._inductor.list_mode_options(mode, kwargs.get("dynamic")), "fallback_random": True}
    return torch.compile(fn, options=options, **kwargs)


def variant_call(fn: Callable, variant: Variant) -> Callable:
    """``fn`` run under ``variant``: inputs in its memory format, compiled in its mode, frozen if asked.
    The tuner times exactly this and ``apply`` runs exactly this."""
    run = compile_call(fn, variant.compile) if variant.compile else fn
    first = [variant.freezing]

    def call(*args, **kwargs):
        args, kwargs = _formatted((args, kwargs), variant.format)
        if first[0]:  # the first call compiles: under freezing (a later recompile is not frozen)
            with torch._inductor.config.patch(freezing=True):
                out = run(*args, **kwargs)
            first[0] = False
            return out
        return run(*args, **kwargs)
    return call


def region_runner(compiler: Callable, fn: Callable, variant: Variant, module: torch.nn.Module) -> Callable:
    """What runs a region under ``variant``: ``compiler(own_code(fn), variant)`` (``variant_call``, or a
    test's fake) at the variant's thread count, forward and backward, ``module``'s parameters its leaves.
    The tuner times exactly this and ``apply`` runs exactly this."""
    call = compiler(own_code(fn), variant)
    if variant.threads is None:
        return call
    wanted = {"threads": variant.threads}

    def run(*args, **kwargs):
        return run_under(changes(wanted), call, args, kwargs, [p for p in module.parameters() if p.requires_grad])
    return run


def own_code(fn: Callable) -> Callable:
    """A function calling ``fn`` whose code object is new, so compiling it shares no compiled code (nor
    the recompile limit) with any other compile."""
    def call(*args, **kwargs):
        return fn(*args, **kwargs)
    code = call.__code__.replace(co_name=f"perfsight_sgat_{next(_codes)}")
    return types.FunctionType(code, call.__globals__, code.co_name, None, call.__closure__)
