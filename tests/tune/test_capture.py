"""Capture on a small conv + attention + linear model: module names, signatures, the static-shape check."""
import torch

from perfsight.tune.capture import capture, train_step
from tests.tune.models import example


def test_tunable_calls_are_named_and_described():
    torch.set_num_threads(1)
    model, x = example()
    captured = capture(train_step(model, x), model=model)
    by_module = {r.module: r for r in captured.tunable}
    assert set(by_module) == {"conv1", "dw", "attn.qkv", "attn", "attn.proj", "head"}
    assert all(r.count == 2 and r.phase == "forward" for r in captured.tunable)  # two steps, once each
    dw = by_module["dw"].signature
    assert dw["op"] == "conv2d" and dw["train"] is True
    assert dw["attrs"] == {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 16}
    assert dw["tensors"]["input"] == {"shape": [2, 16, 8, 8], "dtype": "float32", "layout": "contiguous",
                                      "grad": True}
    assert by_module["conv1"].signature["tensors"]["input"]["grad"] is False  # the batch needs no gradient
    assert by_module["attn"].signature["op"] == "sdpa"
    assert by_module["attn"].signature["tensors"]["query"]["layout"] == "strided"  # a permuted view
    assert by_module["head"].signature["tensors"]["weight"]["shape"] == [10, 16]
    assert captured.static and captured.steps == 2


def test_every_aten_op_forward_and_backward():
    model, x = example()
    captured = capture(train_step(model, x), model=model, steps=1)
    ops = {(r.module, r.phase, r.signature["op"]) for r in captured.aten}
    assert ("conv1", "forward", "convolution.default") in ops
    assert any(p == "backward" and op == "convolution_backward.default" for _, p, op in ops)
    conv = next(r for r in captured.aten if r.module == "conv1" and r.signature["op"] == "convolution.default")
    first = conv.signature["args"][0]
    assert first == {"shape": [2, 3, 8, 8], "dtype": "float32", "stride": [192, 64, 8, 1]}
    assert conv.signature["args"][-1] == 1  # groups


def test_inference_signatures_and_shape_changes_are_reported():
    model, _ = example()
    batches = iter([torch.randn(2, 3, 8, 8), torch.randn(2, 3, 12, 12)])
    with torch.no_grad():
        captured = capture(lambda: model(next(batches)), model=model)
    assert all(r.signature["train"] is False for r in captured.tunable)
    assert not captured.static
    conv = next(d for d in captured.dynamic if d["module"] == "conv1" and d["op"] == "convolution.default")
    assert conv["shapes"][0][0] == [2, 3, 8, 8] and conv["shapes"][1][0] == [2, 3, 12, 12]


def test_optimizer_state_is_not_a_shape_change():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    assert capture(step, model=model, steps=2).static
