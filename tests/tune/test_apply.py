"""Applying a bank: the same gradients with and without it, the same Parameter objects, fall-through."""
import torch

from perfsight.tune.apply import apply_bank, tuned
from perfsight.tune.bank import Bank, Entry
from perfsight.tune.candidates import candidates_for
from perfsight.tune.capture import capture, train_step
from tests.tune.models import example

WINNERS = {"conv2d": "channels_last+onednn", "linear": "pretransposed_weight", "sdpa": "sdpa_math"}


def planted_bank(tmp_path, model, x) -> Bank:
    """A bank whose winner for every signature of the model's training step is a non-default candidate."""
    bank = Bank(tmp_path, fingerprint="test")
    for record in capture(train_step(model, x), model=model, steps=1).tunable:
        sig = record.signature
        chosen = next(c for c in candidates_for(sig) if c.name == WINNERS[sig["op"]])
        entry = Entry(key=bank.key("op", sig), kind="op", signature=sig, winner=chosen.name,
                      candidates=[{"name": chosen.name, "mode": chosen.mode, "params": chosen.params}],
                      default_us=2.0, winner_us=1.0)
        assert bank.put(entry, repeat=False) == "add"
    return bank


def gradients(model, x):
    model.zero_grad(set_to_none=True)
    train_step(model, x)()
    return [p.grad.clone() for p in model.parameters()]


def test_gradients_equal_with_and_without_the_bank(tmp_path):
    torch.set_num_threads(1)
    model, x = example()
    bank = planted_bank(tmp_path, model, x)
    params = list(model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    plain = gradients(model, x)
    with tuned(bank) as mode:
        with_bank = gradients(model, x)
    assert dict(mode.used) == {"channels_last+onednn": 2, "pretransposed_weight": 3, "sdpa_math": 1}
    for a, b in zip(plain, with_bank):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
    assert all(p is q for p, q in zip(params, model.parameters()))
    assert all(p is q for p, q in zip(params, optimizer.param_groups[0]["params"]))
    assert set(model.state_dict()) == {n for n, _ in model.named_parameters()}


def test_apply_bank_hooks_the_forward_and_unknown_signatures_fall_through(tmp_path):
    model, x = example()
    applied = apply_bank(model, planted_bank(tmp_path, model, x))
    plain_out = model(torch.randn(2, 3, 12, 12))  # 12x12 pixels: only the pooled head is a known signature
    assert dict(applied.mode.used) == {"pretransposed_weight": 1}
    gradients(model, x)
    assert sum(applied.mode.used.values()) == 7
    with torch.no_grad():  # inference signatures were not tuned
        model(x)
    assert sum(applied.mode.used.values()) == 7
    applied.remove()
    gradients(model, x)
    assert sum(applied.mode.used.values()) == 7
    assert plain_out.shape == (2, 10)
    assert not torch.overrides._get_current_function_mode_stack()  # the mode was left on every exit


def test_inference_winner_caches_the_transposed_weight_per_version(tmp_path):
    linear = torch.nn.Linear(8, 4)
    x = torch.randn(3, 8)
    bank = Bank(tmp_path, fingerprint="test")
    with torch.no_grad():
        sig = capture(lambda: linear(x), steps=1).tunable[0].signature
    bank.put(Entry(key=bank.key("op", sig), kind="op", signature=sig, winner="pretransposed_weight",
                   candidates=[{"name": "pretransposed_weight", "mode": "Impl",
                                "params": {"weight": "pretransposed"}}]), repeat=False)
    with torch.no_grad(), tuned(bank) as mode:
        first = linear(x)
        linear.weight.mul_(2)  # an in-place update (an optimizer step) invalidates the cache
        second = linear(x)
    assert mode.used["pretransposed_weight"] == 2
    torch.testing.assert_close(second - linear.bias, 2 * (first - linear.bias))


def test_the_top_level_names_are_the_apply_functions():
    import perfsight
    from perfsight.tune import apply

    assert perfsight.tuned is apply.tuned and perfsight.apply_bank is apply.apply_bank


def test_a_bank_without_winners_intercepts_nothing(tmp_path):
    import torch

    import perfsight
    from perfsight.tune.bank import Bank

    with perfsight.tuned(Bank(tmp_path)) as mode:
        assert not mode.active and torch._C._len_torch_function_stack() == 0
