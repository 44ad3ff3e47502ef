"""Region selection and keys (no compile): FLOP shares, splitting, repeated blocks tuned once."""
import torch

from perfsight.tune.regions import choose, find_regions, module_flops, region_signature
from perfsight.tune.sgat import as_step
from tests.tune.models import example


class Block(torch.nn.Module):
    def __init__(self, dim: int = 8):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(dim, 2 * dim), torch.nn.Linear(2 * dim, dim)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(x)))


class Stack(torch.nn.Module):
    """Three identical blocks in a ModuleList (never called itself) and a small head."""

    def __init__(self, dim: int = 8):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(dim) for _ in range(3))
        self.head = torch.nn.Linear(dim, 2)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_shares_split_the_busy_modules_and_leave_small_ones_eager():
    model, x = example()
    model.eval()
    step = as_step(model, x)
    flops = module_flops(model, step)
    assert flops[""] == sum(flops[n] for n in ("conv1", "dw", "attn", "head"))
    # attn holds more than half the FLOPs: split into its linears; head (0.16%) is below min_share
    assert choose(model, flops) == ["conv1", "dw", "attn.qkv", "attn.proj"]
    assert choose(model, flops, max_share=1.0) == ["conv1", "dw", "attn"]
    assert choose(model, flops, min_share=0.2, max_share=1.0) == ["conv1", "attn"]


def test_repeated_blocks_have_one_key_and_count_their_calls():
    torch.manual_seed(0)
    model, x = Stack(), torch.randn(4, 8)
    first, repeated = find_regions(model, as_step(model, x))
    # in training the first block's input is the batch, the later ones' inputs need a gradient
    assert first.names == ["blocks.0"] and first.calls == 1
    assert repeated.names == ["blocks.1", "blocks.2"] and repeated.calls == 2 and repeated.module is model.blocks[1]
    sig = repeated.signature
    assert sig["region"] == f"{__name__}.Block" and sig["train"] and sig["module_training"]
    assert sig["inputs"] == [{"shape": [4, 8], "dtype": "float32", "layout": "contiguous", "device": "cpu",
                              "grad": True}]
    assert not first.signature["inputs"][0]["grad"] and first.share + repeated.share > 0.9
    assert repeated.args[0].requires_grad and repeated.args[0].grad_fn is None  # a detached copy


def test_the_key_separates_train_from_inference_and_shapes():
    block, x = Block(), torch.randn(4, 8)
    train = region_signature(block, (x,), {})
    with torch.no_grad():
        infer = region_signature(block, (x,), {})
    other = region_signature(block, (torch.randn(5, 8),), {})
    assert train["train"] and not infer["train"]
    assert len({repr(s) for s in (train, infer, other)}) == 3
    model = Stack()
    model.eval()
    regions = find_regions(model, as_step(model, torch.randn(4, 8)))
    assert [r.signature["train"] for r in regions] == [False] and regions[0].calls == 3


def test_a_model_without_busy_children_is_one_region():
    model = torch.nn.Linear(8, 8)
    [region] = find_regions(model, as_step(model, torch.randn(2, 8)))
    assert region.names == [""] and region.module is model
