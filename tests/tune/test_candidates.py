"""Candidates: their settings hold in the backward too, CUDA candidates and their flags, what can pay."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from perfsight.tune import settings
from perfsight.tune.candidates import (
    COMPILED_MIN_US,
    DEFAULT,
    SCHEDULE_MIN_US,
    Candidate,
    call_key,
    candidates_for,
    run,
    signature,
)

THREADS_2 = Candidate("threads_2", "Schedule", {"threads": 2})
NATIVE = Candidate("contiguous+native", "Impl", {"format": "contiguous", "onednn": False})
MATH = Candidate("sdpa_math", "Impl", {"backend": "math"})


class Spy(TorchDispatchMode):
    """Records, per ATen op of the tuned op, whether it ran in the backward and what ``read()`` said then
    (the detaches around it and the test's ones_like are not the op's)."""

    def __init__(self, read):
        super().__init__()
        self.read = read
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket not in (torch.ops.aten.detach, torch.ops.aten.ones_like):
            self.seen.append((torch._C._current_autograd_node() is not None, self.read()))
        return func(*args, **(kwargs or {}))


def calls():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    q, k, v = (torch.randn(2, 2, 5, 4, requires_grad=True) for _ in range(3))
    return {"linear": (F.linear, (torch.randn(4, 8, requires_grad=True), torch.randn(6, 8, requires_grad=True),
                                  torch.randn(6, requires_grad=True))),
            "conv2d": (torch.conv2d, (x, torch.randn(4, 3, 3, 3, requires_grad=True))),
            "sdpa": (F.scaled_dot_product_attention, (q, k, v))}


def forward_backward(candidate, func, args, read):
    """Outputs and input gradients of ``func(*args)`` under ``candidate``, and what a Spy saw."""
    spy = Spy(read)
    with spy:
        out = run(candidate, func, args, {})
        grads = torch.autograd.grad(out, args, torch.ones_like(out))
    return (out, *grads), spy.seen


@pytest.mark.parametrize("op, candidate, read, value", [
    ("linear", THREADS_2, torch.get_num_threads, 2),
    ("conv2d", NATIVE, lambda: torch.backends.mkldnn.enabled, False),
    ("sdpa", MATH, lambda: (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.math_sdp_enabled()),
     (False, True)),
])
def test_a_setting_holds_for_the_forward_and_the_backward(op, candidate, read, value):
    torch.set_num_threads(1)
    func, args = calls()[op]
    before = read()
    reference, _ = forward_backward(DEFAULT, func, args, read)
    got, seen = forward_backward(candidate, func, args, read)
    assert {phase for phase, _ in seen} == {False, True}  # ops ran in the forward and in the backward
    assert all(setting == value for _, setting in seen)
    assert read() == before  # restored
    for a, b in zip(reference, got):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


def test_the_setting_is_restored_when_the_op_fails():
    torch.set_num_threads(1)
    with pytest.raises(RuntimeError):
        run(THREADS_2, F.linear, (torch.randn(4, 8, requires_grad=True), torch.randn(6, 7)), {})
    assert torch.get_num_threads() == 1


def test_a_tuned_op_backs_up_once_and_inference_needs_no_autograd_function():
    torch.set_num_threads(1)
    x, w = torch.randn(4, 8), torch.randn(6, 8, requires_grad=True)
    out = run(THREADS_2, F.linear, (x, w), {})
    assert type(out.grad_fn).__name__ == "_UnderSettingsBackward"
    out.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="a second time"):
        out.sum().backward()
    with torch.no_grad():
        assert run(THREADS_2, F.linear, (x, w), {}).grad_fn is None


def cuda_signature(op: str) -> dict:
    """A signature as recorded on a CUDA machine (this one has no GPU)."""
    shapes = {"conv2d": {"input": [8, 16, 32, 32], "weight": [32, 16, 3, 3]},
              "linear": {"input": [64, 128], "weight": [256, 128]},
              "sdpa": {"query": [2, 4, 16, 8], "key": [2, 4, 16, 8], "value": [2, 4, 16, 8]}}[op]
    return {"op": op, "train": True, "device": "cuda", "attrs": {},
            "tensors": {n: {"shape": s, "dtype": "float32", "layout": "contiguous", "grad": True}
                        for n, s in shapes.items()}}


def test_cuda_signatures_get_the_gpu_schedule_candidates(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    monkeypatch.setattr(torch.backends.cuda, "preferred_blas_library", lambda *_: torch._C._BlasBackend.Cublas)
    names = {op: {c.name: c for c in candidates_for(cuda_signature(op))} for op in ("conv2d", "linear", "sdpa")}
    assert set(names["conv2d"]) == {"channels_last", "cudnn_benchmark_on", "compiled"}
    assert names["conv2d"]["cudnn_benchmark_on"].mode == "Schedule"
    assert set(names["linear"]) == {"pretransposed_weight", "blas_cublaslt", "compiled"}
    assert names["linear"]["blas_cublaslt"].params == {"blas": "cublaslt"}
    assert {"sdpa_cudnn", "sdpa_flash", "sdpa_math"} <= set(names["sdpa"])
    assert not any(c.params.get("threads") for cands in names.values() for c in cands.values())
    cpu = cuda_signature("linear")
    del cpu["device"]
    assert {c.name for c in candidates_for(cpu)} & {"blas_cublaslt", "cudnn_benchmark_on"} == set()


def test_gpu_flags_are_set_for_forward_and_backward_and_restored(monkeypatch):
    blas = {"now": "cublas"}

    def preferred_blas_library(backend=None):  # a CPU build refuses cuBLASLt: stand in for the setting
        if backend is not None:
            blas["now"] = backend
        return getattr(torch._C._BlasBackend, blas["now"].capitalize())
    monkeypatch.setattr(torch.backends.cuda, "preferred_blas_library", preferred_blas_library)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    func, args = calls()["linear"]
    _, seen = forward_backward(Candidate("blas_cublaslt", "Schedule", {"blas": "cublaslt"}), func, args,
                               lambda: blas["now"])
    assert {phase for phase, _ in seen} == {False, True} and {s for _, s in seen} == {"cublaslt"}
    assert blas["now"] == "cublas"
    func, args = calls()["conv2d"]
    _, seen = forward_backward(Candidate("cudnn_benchmark_on", "Schedule", {"cudnn_benchmark": True}), func, args,
                               lambda: torch.backends.cudnn.benchmark)
    assert {phase for phase, _ in seen} == {False, True} and {s for _, s in seen} == {True}
    assert torch.backends.cudnn.benchmark is False


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: cuDNN benchmark and the cuBLAS "
                                                          "libraries only act on CUDA tensors")
def test_gpu_schedule_candidates_run_on_a_gpu():
    from perfsight.tune.opat import tune_signature

    for op in ("conv2d", "linear"):
        m = tune_signature(cuda_signature(op), expected_steps=1, warmup=1, repeats=3)
        assert all(t.ok for t in m.candidates if t.mode == "Schedule"), [t.reason for t in m.candidates]


def test_only_candidates_that_can_pay_are_offered(monkeypatch):
    monkeypatch.setattr(settings, "usable_cores", lambda: 2)
    torch.set_num_threads(1)
    sig = signature(F.linear, (torch.randn(4, 8), torch.randn(6, 8, requires_grad=True)), {})

    def names(**timing):
        return {c.name for c in candidates_for(sig, **timing)}
    assert {"threads_2", "compiled"} <= names()  # nothing measured: everything
    assert names(default_us=SCHEDULE_MIN_US / 2, calls=1e9) == {"pretransposed_weight"}
    assert "threads_2" in names(default_us=SCHEDULE_MIN_US, calls=1)
    assert "compiled" in names(default_us=COMPILED_MIN_US, calls=1e4)  # 1 s of default time to save
    assert "compiled" not in names(default_us=COMPILED_MIN_US, calls=10)  # 1 ms: less than any compile


def test_call_keys_are_cheap_stand_ins_for_signatures():
    x, w = torch.randn(4, 8), torch.randn(6, 8)
    assert call_key(F.linear, (x, w), {}) == call_key(F.linear, (torch.randn(4, 8), w), {})
    assert call_key(F.linear, (x.t().contiguous().t(), w), {}) != call_key(F.linear, (x, w), {})
    with torch.no_grad():
        assert call_key(F.linear, (x, w), {}) != call_key(F.linear, (x, w), {"bias": None})
    assert call_key(torch.conv2d, (x, w), {"padding": [1, 1]}) == call_key(torch.conv2d, (x, w), {"padding": (1, 1)})
    assert call_key(F.linear, (x, w, object()), {}) is None  # e.g. an FX proxy: not tuned
    assert signature(F.linear, (x.to("meta"), w.to("meta")), {}) is None
    assert signature(F.linear, (x, "not a tensor"), {}) is None
