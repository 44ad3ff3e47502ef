"""The operators perfsight can tune and their candidates (OPAT's three modes).

This module owns, for each tunable torch function (``F.conv2d``, ``F.linear``,
``F.scaled_dot_product_attention``; ``CALLED_THROUGH`` says where torch's own modules look each up):

- ``signature(func, args, kwargs)``: the bank signature of one call (op, tensor shapes, dtypes,
  layouts, whether each needs a gradient, scalar attributes, train or inference; ``device`` for a CUDA
  call - CPU signatures leave it out, so they keep the keys of banks tuned before). Capture and apply
  both call it, so a tuned key and a run-time key are computed in exactly one place; ``call_key`` is a
  cheap hashable stand-in that determines it, for run-time caches. Attention with dropout (a transformer
  layer while training) is tunable like any call: the default and each candidate are checked from one
  random-number state (measure.py), so they draw the same dropout masks;
- ``candidates_for(signature)``: the alternatives to the default, each tagged with its seed mode:

  - Format: NCHW vs channels_last (conv);
  - Impl: oneDNN vs native conv (CPU), SDPA backend, pre-transposed linear weight, and the op compiled
    alone (``variants.compile_call``, one compiled callable per call key, ``dynamic=False``);
  - Schedule: the intra-op thread count (CPU); cuDNN benchmark on/off for convs and cuBLAS vs cuBLASLt
    for linears (CUDA). TF32 is not a candidate: it rounds float32 matmul inputs to a 10-bit mantissa,
    ~1e-3 relative error, beyond float32's 1e-4 tolerance (measure.py), so it could never pass the check.

  Given the default's measured time (``default_us``: forward + backward for a training signature) and
  how many calls a winner would serve (``calls``: calls per step x expected steps), candidates with a fixed
  cost that the op cannot repay are not offered: thread counts below ``SCHEDULE_MIN_US``, the compiled op
  below ``COMPILED_MIN_US`` or when even a zero-time op would not repay ``COMPILE_MIN_S`` over ``calls``;
- ``run(candidate, func, args, kwargs)``: one call of the op under a candidate. The tuner times
  exactly this function and ``apply`` calls exactly this function, so what is measured is what runs;
- ``synthetic_call(signature)``: random inputs matching a signature, to time an op away from the model.

A candidate's settings (thread count, oneDNN on/off, SDPA backend, cuDNN benchmark, BLAS library) hold
for the op's backward too (``settings.run_under``, a fixed cost per call that ``SCHEDULE_MIN_US``
counts). Format and weight-layout candidates change data, not settings: their
backward follows autograd (a channels_last forward has a channels_last backward); a compiled op's
backward is compiled with it.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Callable, Literal

import msgspec
import torch
import torch.nn.functional as F

from perfsight.tune.settings import SDPA_FLAGS, blas, changes, run_under, schedule_threads
from perfsight.tune.variants import compile_call, own_code

# tunable function -> (op name, its parameter names in call order, how many of them lead as tensors)
_PARAMS = {
    torch.conv2d: ("conv2d", ("input", "weight", "bias", "stride", "padding", "dilation", "groups"), 2),
    F.linear: ("linear", ("input", "weight", "bias"), 2),
    F.scaled_dot_product_attention: ("sdpa", ("query", "key", "value", "attn_mask", "dropout_p",
                                              "is_causal", "scale", "enable_gqa"), 3),
}
FUNCS = {name: func for func, (name, *_) in _PARAMS.items()}
#: op -> the (module, attribute) pairs torch code looks the function up through at call time (torch 2.13):
#: nn.Conv2d calls F.conv2d (which is torch.conv2d), nn.Linear F.linear, and MultiheadAttention's
#: F.multi_head_attention_forward the globals ``linear`` and ``scaled_dot_product_attention`` of
#: torch.nn.functional, i.e. these attributes. A name bound earlier (``from torch.nn.functional import
#: linear``) is not among them. MultiheadAttention calls scaled_dot_product_attention only with
#: ``need_weights=False`` (as nn.TransformerEncoderLayer and DecoderLayer call it; with weights it multiplies
#: the matrices itself), and neither calls it on their inference fast path (eval mode without grad), which
#: runs one fused kernel.
CALLED_THROUGH = {"conv2d": ((torch, "conv2d"), (F, "conv2d")), "linear": ((F, "linear"),),
                  "sdpa": ((F, "scaled_dot_product_attention"),)}
_DEVICES = ("cpu", "cuda")

#: Schedule candidates are offered only for ops whose default takes at least this long (us, forward +
#: backward when training). Switching the thread count costs ~0.2 us, but the switched call pays a fixed
#: cost more (waking the second OpenMP thread, the autograd.Function that keeps the backward at the same
#: count: ~115 us for a 4x8 by 6x8 linear here) - up to ~1 ms when the other core is busy. Measured when
#: the threshold was set (2 shared cores, torch 2.13, 1 -> 2 threads, F.linear N x 64 by 64 x 64 forward +
#: backward): 77 us lost 23%, 130 us broke even, 228 us gained 21%, 855 us gained 55%.
SCHEDULE_MIN_US = 100.0
#: the op compiled alone is offered only for ops whose default takes at least this long (us): its
#: guards and runtime wrappers cost ~18 us per call in inference and ~70 us forward + backward in
#: training over eager (a 4x64 by 64x64 linear, measured here), so a faster op cannot gain.
COMPILED_MIN_US = 100.0
#: the shortest single-op compile (forward + backward) measured here, inductor's caches warm: 0.06 s.
COMPILE_MIN_S = 0.05


class Params(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """What a candidate's ``params`` may hold (a bank winner's are checked against it before it runs)."""

    format: Literal["contiguous", "channels_last", "strided"] | None = None  # an input's layout (_layout)
    onednn: bool | None = None
    weight: Literal["pretransposed"] | None = None
    compiled: bool | None = None
    backend: Literal[tuple(SDPA_FLAGS)] | None = None
    threads: Annotated[int, msgspec.Meta(ge=1)] | None = None
    cudnn_benchmark: bool | None = None
    blas: Literal["cublas", "cublaslt"] | None = None


@dataclass(frozen=True)
class Candidate:
    """One way to run an op: ``name`` is unique per op, ``mode`` is Format, Impl or Schedule."""

    name: str
    mode: str
    params: dict = field(default_factory=dict, hash=False)


DEFAULT = Candidate("default", "default", {})


def layout_of(t: torch.Tensor) -> str:
    if t.is_contiguous():
        return "contiguous"
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return "channels_last"
    return "strided"


def _bind(func, args, kwargs) -> tuple[str, dict]:
    name, params, _ = _PARAMS[func]
    bound = dict(zip(params, args))
    bound.update(kwargs or {})
    return name, bound


def signature(func, args, kwargs) -> dict | None:
    """The bank signature of ``func(*args, **kwargs)``, or None if the call is not tunable here."""
    if func not in _PARAMS:
        return None
    op, bound = _bind(func, args, kwargs)
    _, params, leading = _PARAMS[func]
    if not all(isinstance(bound.get(name), torch.Tensor) for name in params[:leading]):
        return None  # e.g. an FX proxy
    tensors, attrs, devices = {}, {}, set()
    for key, value in bound.items():
        if isinstance(value, torch.Tensor):
            if value.is_sparse or value.is_quantized:
                return None
            devices.add(value.device.type)
            tensors[key] = {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."),
                            "layout": layout_of(value), "grad": bool(value.requires_grad)}
        elif value is not None:
            attrs[key] = list(value) if isinstance(value, (tuple, list)) else value
    if len(devices) != 1 or not devices <= set(_DEVICES):
        return None
    if op == "conv2d" and len(tensors["input"]["shape"]) != 4:
        return None
    train = torch.is_grad_enabled() and any(t["grad"] for t in tensors.values())
    sig = {"op": op, "tensors": tensors, "attrs": attrs, "train": train}
    (device,) = devices
    if device != "cpu":
        sig["device"] = device
    return sig


_PLAIN = (bool, int, float, str, type(None))


class _Unkeyed(Exception):
    pass


def _described(value):
    if isinstance(value, torch.Tensor):
        return (value.shape, value.stride() if value.layout == torch.strided else value.layout, value.dtype,
                value.device, value.requires_grad)
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, _PLAIN) for v in value):
        return tuple(value)
    raise _Unkeyed


def call_key(func, args, kwargs) -> tuple | None:
    """A hashable description of a call, cheap to build, that determines its ``signature``; None when an
    argument is of another kind (an FX proxy, a SymInt): such calls are not tuned."""
    kwargs = kwargs or {}
    try:
        return (func, torch.is_grad_enabled(), tuple(kwargs), *map(_described, args),
                *map(_described, kwargs.values()))
    except _Unkeyed:
        return None


def _conv_candidates(current: str, device: str) -> list[Candidate]:
    other = "contiguous" if current == "channels_last" else "channels_last"
    if device == "cuda":
        benchmark = not torch.backends.cudnn.benchmark
        return [Candidate(other, "Format", {"format": other}),
                Candidate(f"cudnn_benchmark_{'on' if benchmark else 'off'}", "Schedule",
                          {"cudnn_benchmark": benchmark})]
    out = []
    onednn_default = torch.backends.mkldnn.enabled
    engines = (True, False) if torch.backends.mkldnn.is_available() else (onednn_default,)
    for fmt in (current, other):
        for onednn in engines:
            if fmt == current and onednn == onednn_default:
                continue
            mode = "Format" if onednn == onednn_default else "Impl"
            out.append(Candidate(f"{fmt}+{'onednn' if onednn else 'native'}", mode,
                                 {"format": fmt, "onednn": onednn}))
    return out


def candidates_for(sig: dict, *, default_us: float | None = None, calls: float | None = None) -> list[Candidate]:
    """The non-default candidates of a signature (empty if nothing can be tried); with ``default_us`` and
    ``calls``, only those that can pay (see the module docstring)."""
    op, tensors, device = sig["op"], sig["tensors"], sig.get("device", "cpu")
    out: list[Candidate] = []
    if op == "conv2d":
        out += _conv_candidates(tensors["input"]["layout"], device)
    elif op == "linear" and len(tensors["weight"]["shape"]) == 2:
        out.append(Candidate("pretransposed_weight", "Impl", {"weight": "pretransposed"}))
        if device == "cuda":
            other = "cublas" if blas() == "cublaslt" else "cublaslt"
            out.append(Candidate(f"blas_{other}", "Schedule", {"blas": other}))
    elif op == "sdpa":
        for backend in SDPA_FLAGS:
            if backend != "cudnn" or device == "cuda":
                out.append(Candidate(f"sdpa_{backend}", "Impl", {"backend": backend}))
    if _pays(default_us, calls, COMPILED_MIN_US, COMPILE_MIN_S):
        out.append(Candidate("compiled", "Impl", {"compiled": True}))
    threads = schedule_threads(device)
    if threads is not None and _pays(default_us, calls, SCHEDULE_MIN_US):
        out.append(Candidate(f"threads_{threads}", "Schedule", {"threads": threads}))
    return out


def _pays(default_us: float | None, calls: float | None, min_us: float, one_off_s: float = 0.0) -> bool:
    """Whether a candidate with a per-call cost (paid off above ``min_us``) and a one-off cost
    (``one_off_s``; even a zero-time op saves at most ``default_us`` per call) can pay; unknown: yes."""
    if default_us is None:
        return True
    return default_us >= min_us and (calls is None or default_us * 1e-6 * calls >= one_off_s)


# --- running a call under a candidate ---------------------------------------------------------

_WT_CACHE: dict[int, tuple[weakref.ref, int, torch.Tensor]] = {}
_COMPILED: dict[tuple, Callable] = {}  # call_key -> the op compiled for that call

def _tolayout_of(t: torch.Tensor, layout: str) -> torch.Tensor:
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


def _conv(func, fmt: str, bound: dict):
    x = bound["input"]
    layout = layout_of(x)
    out = func(**dict(bound, input=_tolayout_of(x, fmt), weight=_tolayout_of(bound["weight"], fmt)))
    return out if fmt == layout else _tolayout_of(out, layout if layout != "strided" else "contiguous")


def _linear(bound: dict):
    x, w, b = bound["input"], bound["weight"], bound.get("bias")
    x2 = x.reshape(-1, x.shape[-1])
    wt = _transposed(w)
    out = torch.mm(x2, wt) if b is None else torch.addmm(b, x2, wt)
    return out.reshape(*x.shape[:-1], w.shape[0])


def _compiled(func, key: tuple) -> Callable:
    """``func`` compiled for the calls of ``key``: a code object of its own per key, so no two keys share
    compiled code or the recompile limit. The first call compiles."""
    if key not in _COMPILED:
        _COMPILED[key] = compile_call(own_code(func), dynamic=False)
    return _COMPILED[key]


def _call(params: dict, func, args, kwargs) -> Callable[[dict], torch.Tensor]:
    """What runs the op's data for ``params`` (a new layout, a pre-transposed weight, compiled code)."""
    if "format" in params:
        return partial(_conv, func, params["format"])
    if "weight" in params:
        return _linear
    if params.get("compiled"):
        compiled = _compiled(func, call_key(func, args, kwargs))
        return lambda bound: compiled(**bound)
    return lambda bound: func(**bound)


def run(candidate: Candidate, func, args, kwargs):
    """``func(*args, **kwargs)`` under ``candidate`` (the default runs it unchanged)."""
    params = candidate.params
    if not params or func not in _PARAMS:
        return func(*args, **(kwargs or {}))
    _, bound = _bind(func, args, kwargs)
    call = _call(params, func, args, kwargs)
    return run_under(changes(params), lambda **bound: call(bound), (), bound)


def synthetic_call(sig: dict, seed: int = 0):
    """(func, args, kwargs) with random tensors of the signature's shapes, dtypes, layouts, grads, device."""
    gen = torch.Generator().manual_seed(seed)
    kwargs = dict(sig["attrs"])
    for name, spec in sig["tensors"].items():
        dtype = getattr(torch, spec["dtype"])
        if dtype == torch.bool:
            t = torch.ones(spec["shape"], dtype=dtype)
        else:
            t = torch.randn(spec["shape"], generator=gen).to(dtype)
        t = t.to(sig.get("device", "cpu"))
        if spec["layout"] == "channels_last":
            t = _tolayout_of(t, "channels_last")
        kwargs[name] = t.requires_grad_(spec["grad"] and t.is_floating_point())
    return FUNCS[sig["op"]], (), kwargs
