"""The operators perfsight can tune on this machine and their candidates (OPAT's three modes).

This module owns, for each tunable torch function (``F.conv2d``, ``F.linear``,
``F.scaled_dot_product_attention``):

- ``signature(func, args, kwargs)``: the bank signature of one call (op, tensor shapes, dtypes,
  layouts, whether each needs a gradient, scalar attributes, train or inference). Capture and apply
  both call it, so a tuned key and a run-time key are computed in exactly one place;
- ``candidates_for(signature)``: the alternatives to the default, each tagged with its seed mode:
  Format (NCHW vs channels_last), Impl (oneDNN vs native conv, SDPA backend, pre-transposed linear
  weight), Schedule (intra-op thread count);
- ``run(candidate, func, args, kwargs)``: one call of the op under a candidate. The tuner times
  exactly this function and ``apply`` calls exactly this function, so what is measured is what runs;
- ``synthetic_call(signature)``: random inputs matching a signature, to time an op away from the model.

A candidate only changes how the forward call runs; the backward follows autograd (a channels_last
forward has a channels_last backward, a flash forward a flash backward).
"""
from __future__ import annotations

import os
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

# tunable function -> (op name, its parameter names in call order)
_PARAMS = {
    torch.conv2d: ("conv2d", ("input", "weight", "bias", "stride", "padding", "dilation", "groups")),
    F.linear: ("linear", ("input", "weight", "bias")),
    F.scaled_dot_product_attention: ("sdpa", ("query", "key", "value", "attn_mask", "dropout_p",
                                              "is_causal", "scale", "enable_gqa")),
}
TUNABLE = frozenset(_PARAMS)
_FUNCS = {name: func for func, (name, _) in _PARAMS.items()}


@dataclass(frozen=True)
class Candidate:
    """One way to run an op: ``name`` is unique per op, ``mode`` is Format, Impl or Schedule."""

    name: str
    mode: str
    params: dict = field(default_factory=dict, hash=False)


DEFAULT = Candidate("default", "default", {})


def _layout(t: torch.Tensor) -> str:
    if t.is_contiguous():
        return "contiguous"
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return "channels_last"
    return "strided"


def _bind(func, args, kwargs) -> tuple[str, dict]:
    name, params = _PARAMS[func]
    bound = dict(zip(params, args))
    bound.update(kwargs or {})
    return name, bound


def signature(func, args, kwargs) -> dict | None:
    """The bank signature of ``func(*args, **kwargs)``, or None if the call is not tunable here."""
    if func not in _PARAMS:
        return None
    op, bound = _bind(func, args, kwargs)
    tensors, attrs = {}, {}
    for key, value in bound.items():
        if isinstance(value, torch.Tensor):
            if value.device.type != "cpu" or value.is_sparse or value.is_quantized:
                return None
            tensors[key] = {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."),
                            "layout": _layout(value), "grad": bool(value.requires_grad)}
        elif value is not None:
            attrs[key] = list(value) if isinstance(value, (tuple, list)) else value
    if op == "sdpa" and attrs.get("dropout_p", 0.0):
        return None  # random outputs: no candidate can be checked against the default
    if op == "conv2d" and len(tensors["input"]["shape"]) != 4:
        return None
    train = torch.is_grad_enabled() and any(t["grad"] for t in tensors.values())
    return {"op": op, "tensors": tensors, "attrs": attrs, "train": train}


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def candidates_for(sig: dict) -> list[Candidate]:
    """The non-default candidates of a signature (empty if nothing can be tried)."""
    op, tensors = sig["op"], sig["tensors"]
    out: list[Candidate] = []
    if op == "conv2d":
        current = tensors["input"]["layout"]
        other = "contiguous" if current == "channels_last" else "channels_last"
        onednn_default = torch.backends.mkldnn.enabled
        engines = (True, False) if torch.backends.mkldnn.is_available() else (onednn_default,)
        for fmt in (current, other):
            for onednn in engines:
                if fmt == current and onednn == onednn_default:
                    continue
                mode = "Format" if onednn == onednn_default else "Impl"
                name = f"{fmt}+{'onednn' if onednn else 'native'}"
                out.append(Candidate(name, mode, {"format": fmt, "onednn": onednn}))
    elif op == "linear":
        if len(tensors["weight"]["shape"]) == 2:
            out.append(Candidate("pretransposed_weight", "Impl", {"weight": "pretransposed"}))
    elif op == "sdpa":
        for backend in ("math", "flash", "efficient"):
            out.append(Candidate(f"sdpa_{backend}", "Impl", {"backend": backend}))
    cores = _cores()
    if cores != torch.get_num_threads():
        out.append(Candidate(f"threads_{cores}", "Schedule", {"threads": cores}))
    return out


# --- running a call under a candidate ---------------------------------------------------------

_BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}
_WT_CACHE: dict[int, tuple[weakref.ref, int, torch.Tensor]] = {}


@contextmanager
def _threads(n: int | None):
    previous = torch.get_num_threads()
    if n is not None and n != previous:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)


@contextmanager
def _onednn(enabled: bool):
    previous = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = enabled
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = previous


def _to_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    return t.contiguous(memory_format=fmt)


def _transposed(weight: torch.Tensor) -> torch.Tensor:
    """W^T as a contiguous tensor. With autograd on it is rebuilt per call (the weight changes every
    step); without, it is cached per weight object and version (in-place updates invalidate it)."""
    if torch.is_grad_enabled() and weight.requires_grad:
        return weight.t().contiguous()
    hit = _WT_CACHE.get(id(weight))
    if hit is not None and hit[0]() is weight and hit[1] == weight._version:
        return hit[2]
    wt = weight.detach().t().contiguous()
    key = id(weight)
    _WT_CACHE[key] = (weakref.ref(weight, lambda _r: _WT_CACHE.pop(key, None)), weight._version, wt)
    return wt


def _conv(params, bound):
    x, w = bound["input"], bound["weight"]
    layout = _layout(x)
    rest = {k: v for k, v in bound.items() if k not in ("input", "weight")}
    with _onednn(params.get("onednn", torch.backends.mkldnn.enabled)):
        out = torch.conv2d(_to_layout(x, params["format"]), _to_layout(w, params["format"]), **rest)
    return out if params["format"] == layout else _to_layout(out, layout if layout != "strided" else "contiguous")


def _linear(params, bound):
    x, w, b = bound["input"], bound["weight"], bound.get("bias")
    x2 = x.reshape(-1, x.shape[-1])
    wt = _transposed(w)
    out = torch.mm(x2, wt) if b is None else torch.addmm(b, x2, wt)
    return out.reshape(*x.shape[:-1], w.shape[0])


def _sdpa(params, bound):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(getattr(SDPBackend, _BACKENDS[params["backend"]])):
        return F.scaled_dot_product_attention(**bound)


_RUNNERS = {"conv2d": (_conv, "format"), "linear": (_linear, "weight"), "sdpa": (_sdpa, "backend")}


def run(candidate: Candidate, func, args, kwargs):
    """``func(*args, **kwargs)`` under ``candidate`` (the default runs it unchanged)."""
    params = candidate.params
    with _threads(params.get("threads")):
        if func in _PARAMS:
            op, bound = _bind(func, args, kwargs)
            runner, marker = _RUNNERS[op]
            if marker in params:
                return runner(params, bound)
        return func(*args, **(kwargs or {}))


def synthetic_call(sig: dict, seed: int = 0):
    """(func, args, kwargs) with random tensors of the signature's shapes, dtypes, layouts and grads."""
    gen = torch.Generator().manual_seed(seed)
    kwargs = dict(sig["attrs"])
    for name, spec in sig["tensors"].items():
        dtype = getattr(torch, spec["dtype"])
        if dtype == torch.bool:
            t = torch.ones(spec["shape"], dtype=dtype)
        else:
            t = torch.randn(spec["shape"], generator=gen).to(dtype)
        if spec["layout"] == "channels_last":
            t = _to_layout(t, "channels_last")
        kwargs[name] = t.requires_grad_(spec["grad"] and t.is_floating_point())
    return _FUNCS[sig["op"]], (), kwargs
