"""Running a call under tuned settings (tune/settings.py): a whole region - nested arguments and outputs,
parameters - forward and backward at another thread count, with eager's outputs and gradients, through
``backward`` and ``autograd.grad`` alike; a tensor from outside the call is refused."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from perfsight.tune.settings import changes, run_under

THREADS_2 = {"threads": 2}


class Threads(TorchDispatchMode):
    """(op, whether it ran in a backward, the thread count then) of every ATen op."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append((func.overloadpacket.__name__, torch._C._current_autograd_node() is not None,
                          torch.get_num_threads()))
        return func(*args, **(kwargs or {}))


class Block(torch.nn.Module):
    """Two inputs in a dict, a non-tensor argument; a tuple out holding a tensor, an int and None."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)

    def forward(self, inputs: dict, scale: float):
        return self.b(torch.relu(self.a(inputs["x"]) * scale + inputs["y"])), 7, None


def block_and_inputs():
    torch.manual_seed(0)
    return Block(), {"x": torch.randn(5, 8, requires_grad=True), "y": torch.randn(5, 8)}


def grads_of(block, inputs, call):
    """Outputs, the input's and the parameters' gradients by autograd.grad, and (a second call) the .grad
    backward leaves."""
    out, seven, none = call(inputs, 2.0)
    params = list(block.parameters())
    grads = torch.autograd.grad(out.sum(), [inputs["x"], *params])
    call(inputs, 2.0)[0].sum().backward()
    return (seven, none), [out, *grads, inputs["x"].grad, *(p.grad for p in params)]


def test_a_region_runs_forward_and_backward_under_the_settings_with_eager_gradients():
    torch.set_num_threads(1)
    block, inputs = block_and_inputs()
    extras, reference = grads_of(block, inputs, block)
    block.zero_grad(set_to_none=True)
    inputs["x"].grad = None
    spy = Threads()
    params = list(block.parameters())
    with spy:
        got_extras, got = grads_of(block, inputs, lambda *a: run_under(changes(THREADS_2), block, a, {}, params))
    assert got_extras == extras == (7, None)                  # the output's structure, non-tensors kept
    ran = {(op, backward) for op, backward, threads in spy.seen if threads == 2}
    assert {("addmm", False), ("mm", True), ("threshold_backward", True)} <= ran  # forward and backward
    assert {op for op, _, threads in spy.seen if threads == 1} <= {"sum", "ones_like", "expand", "detach",
                                                                   "add_", "copy_", "clone", "new_empty_strided"}
    assert torch.get_num_threads() == 1                       # and back after
    for a, b in zip(reference, got, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)


def test_a_tensor_from_outside_the_call_is_refused():
    torch.set_num_threads(1)
    outside = torch.randn(8, requires_grad=True)
    block, inputs = block_and_inputs()
    with pytest.raises(ValueError, match=r"neither its argument nor its parameter \(shape \[8\]\)"):
        run_under(changes(THREADS_2), lambda x: block.a(x) + outside, (inputs["x"],), {},
                  list(block.a.parameters()))
    assert torch.get_num_threads() == 1   # the setting put back


def test_backward_twice_is_an_error_and_without_grad_no_function_is_recorded():
    torch.set_num_threads(1)
    block, inputs = block_and_inputs()
    params = list(block.parameters())
    out, _, _ = run_under(changes(THREADS_2), block, (inputs, 2.0), {}, params)
    assert type(out.grad_fn).__name__ == "_UnderSettingsBackward"
    out.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="a second time"):
        out.sum().backward()
    with torch.no_grad():
        assert run_under(changes(THREADS_2), block, (inputs, 2.0), {}, params)[0].grad_fn is None
