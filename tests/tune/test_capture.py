"""Capture on a small conv + attention + linear model: module names, signatures, the static-shape check; and the
wait for batches."""
import pytest
import torch
from rich.console import Console

from perfsight.tune.capture import INPUT_BOUND_SHARE, Recording, capture, train_step
from perfsight.views.terminal import print_tuning
from tests.tune.models import example
from tests.tune.test_loadat import ITEM_S, SlowItems


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


def test_the_wait_for_batches_is_measured_between_and_within_the_recorded_steps():
    model = torch.nn.Linear(3, 2)
    loader = iter(torch.utils.data.DataLoader(SlowItems(), batch_size=2))
    next(loader)                      # drawn before the recording began (a script's first batch): not counted
    recording = Recording(model)
    for _ in range(3):
        recording.begin_step()
        model(next(loader)).sum().backward()
        recording.end_step()
        next(loader)                  # the next step's batch, drawn between steps as a script draws it
    captured = recording.finish()
    waited = captured.input_wait
    # six batches of two items drawn since the first step began (three in the steps, three between them), each
    # item at least ITEM_S: a lower bound the machine cannot break; the wait is part of the span it was timed in
    assert waited.batches == 6 and waited.loaders == {"SlowItems, num_workers=0": 6}
    assert waited.wait_ns >= 6 * 2 * ITEM_S * 1e9 and waited.wait_ns <= waited.span_ns
    shown = waited.as_dict()
    assert shown["input_bound"] == (waited.share >= INPUT_BOUND_SHARE) and shown["batches"] == 6
    # torch's own __next__ is back: batches drawn now are not counted
    next(loader)
    assert waited.batches == 6 and torch.utils.data.dataloader._BaseDataLoaderIter.__next__.__name__ == "__next__"


@pytest.mark.parametrize("share, tuned, said", [
    (0.5, True, "input-bound: the step settings tuned its data loaders' workers (their rows)"),
    (0.5, False, "input-bound: tune the step settings (--mode step or both) to try its data loaders' workers"),
    (0.05, False, "not input-bound")])
def test_the_tuning_output_says_how_long_the_steps_waited_for_batches(share, tuned, said):
    console = Console(record=True, width=100)
    print_tuning({"report": "r.json", "bank": "bank", "stages": {}, "input": {
        "wait_ms": 60.0 * share, "span_ms": 60.0, "share": share, "input_bound": share >= INPUT_BOUND_SHARE,
        "batches": 4, "loaders": {"SlowItems, num_workers=0": 4}, "tuned": tuned}}, console)
    assert (f"perfsight: the recorded steps waited {60 * share:.1f} ms of 60.0 ms ({share:.0%}) for their batches "
            f"(SlowItems, num_workers=0: 4 batches); {said}") in console.export_text()
