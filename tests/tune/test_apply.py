"""Applying a bank: the same gradients with and without it (settings winners too, forward and backward), the
same Parameter objects, fall-through, and only the functions with winners patched, always restored."""
import json
import threading

import pytest
import torch

from perfsight.core.errors import TuneBankError
from perfsight.tune.apply import TunedMode, apply_bank, apply_subgraphs, tuned
from perfsight.tune.bank import Bank, Entry
from perfsight.tune.candidates import CALLED_THROUGH, Candidate, candidates_for
from perfsight.tune.capture import capture, train_step
from tests.tune.models import example

WINNERS = {"conv2d": "channels_last+onednn", "linear": "pretransposed_weight", "sdpa": "sdpa_math"}


def planted_bank(tmp_path, model, x, fingerprint: str | None = "test", winners=WINNERS) -> Bank:
    """A bank whose winner for every signature of the model's training step is a non-default candidate
    (``fingerprint`` None: this device's bank): per op in ``winners``, a Candidate or a candidate's name."""
    bank = Bank(tmp_path, fingerprint=fingerprint)
    for record in capture(train_step(model, x), model=model, steps=1).tunable:
        sig = record.signature
        if sig["op"] not in winners:
            continue
        wanted = winners[sig["op"]]
        chosen = wanted if isinstance(wanted, Candidate) else next(c for c in candidates_for(sig) if c.name == wanted)
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
    assert TunedMode.current() is None and not patched()  # the mode was left on every exit


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
        assert not mode.active and torch._C._len_torch_function_stack() == 0 and not patched()


ORIGINALS = {(owner, attr): getattr(owner, attr) for points in CALLED_THROUGH.values() for owner, attr in points}
SETTINGS = {"conv2d": Candidate("contiguous+native", "Impl", {"format": "contiguous", "onednn": False}),
            "linear": Candidate("threads_2", "Schedule", {"threads": 2}), "sdpa": "sdpa_math"}


def patched() -> set[str]:
    """The tunable functions' call points that are patched now (by attribute name)."""
    return {attr for (owner, attr), func in ORIGINALS.items() if getattr(owner, attr) is not func}


def test_gradients_equal_with_winners_that_change_settings_forward_and_backward(tmp_path):
    torch.set_num_threads(1)
    model, x = example()
    bank = planted_bank(tmp_path, model, x, winners=SETTINGS)
    plain = gradients(model, x)
    with tuned(bank) as mode:
        with_bank = gradients(model, x)
    assert dict(mode.used) == {"contiguous+native": 2, "threads_2": 3, "sdpa_math": 1}
    assert torch.get_num_threads() == 1 and torch.backends.mkldnn.enabled
    for a, b in zip(plain, with_bank):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_only_the_functions_with_winners_are_patched_and_always_restored(tmp_path):
    model, x = example()
    linear = TunedMode(planted_bank(tmp_path / "a", model, x, winners={"linear": "pretransposed_weight"}))
    conv = TunedMode(planted_bank(tmp_path / "b", model, x, winners={"conv2d": "channels_last+onednn"}))
    assert linear.ops == {"linear"} and not patched()
    with linear:
        assert patched() == {"linear"} and TunedMode.current() is linear
        with linear:  # re-entrant
            with conv:
                assert patched() == {"linear", "conv2d"} and TunedMode.current() is conv
                assert torch.conv2d is torch.nn.functional.conv2d  # both call points, one wrapper
            assert patched() == {"linear"}
        assert patched() == {"linear"}
    assert not patched() and TunedMode.current() is None
    linear.__enter__()
    conv.__enter__()
    linear.__exit__(None, None, None)  # left out of order
    assert patched() == {"conv2d"} and TunedMode.current() is conv
    conv.__exit__(None, None, None)
    with pytest.raises(ZeroDivisionError):
        with tuned(linear.bank):
            1 / 0
    assert not patched() and TunedMode.current() is None


class SelfAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)  # calls F.linear and SDPA inside

    def forward(self, t):
        return self.mha(t, t, t, need_weights=False)[0]


def test_module_calls_are_caught_and_other_threads_fall_through(tmp_path):
    torch.manual_seed(0)
    model, x = SelfAttention(), torch.randn(2, 5, 16)
    bank = planted_bank(tmp_path, model, x)
    with tuned(bank) as mode:
        out = model(x)
        thread = threading.Thread(target=model, args=(x,))
        thread.start()
        thread.join()
    assert dict(mode.used) == {"pretransposed_weight": 2, "sdpa_math": 1}  # in- and out-projection
    torch.testing.assert_close(out, model(x))


def test_torch_registries_keep_the_original_functions(tmp_path):
    """torch.compile and TorchScript look the functions up in registries built lazily from the very
    attributes a mode patches: they must hold the originals, or the process could never compile them."""
    from torch._dynamo import trace_rules

    model, x = example()
    with tuned(planted_bank(tmp_path, model, x)):
        assert patched() == {"conv2d", "linear", "scaled_dot_product_attention"}
        rules = trace_rules.get_torch_obj_rule_map()
        for (owner, attr), func in ORIGINALS.items():
            assert func in rules and getattr(owner, attr) not in rules
            assert torch.jit._builtins._find_builtin(func) is not None


def rewrite(bank, file, change):
    path = bank.directory / file
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_entries_of_another_torch_without_bank_json_are_refused_not_applied(tmp_path):
    """Without bank.json, the versions a bank was tuned under were not checked: entries tuned under
    another torch were applied."""
    model, x = example()
    bank = planted_bank(tmp_path, model, x)

    def another_torch(store):
        for value in store["entries"].values():
            value["versions"]["torch"] = "2.0.0"
    rewrite(bank, "opat.json", another_torch)
    (bank.directory / "bank.json").unlink()
    for opening in (lambda: tuned(bank).__enter__(), lambda: apply_bank(model, bank)):
        with pytest.raises(TuneBankError, match=f"the tuning bank {bank.directory} has opat.json but no bank.json"):
            opening()
    assert not patched()


def first_winner(bank, kind, params):
    def change(store):
        value = next(v for v in store["entries"].values() if v["winner"])
        next(c for c in value["candidates"] if c["name"] == value["winner"])["params"] = params
    rewrite(bank, f"{kind[:4]}.json", change)


@pytest.mark.parametrize("params, message", [
    ({"threads": "two"}, 'has params {"threads": "two"}: Expected `int | null`, got `str` - at `$.threads`'),
    ({"threads": 0}, "Expected `int` >= 1 - at `$.threads`"),
    ({"backend": "fastest"}, "Invalid enum value 'fastest' - at `$.backend`"),
    ({"memory_format": "channels_last"}, "Object contains unknown field `memory_format`"),
])
def test_an_operator_winner_with_params_not_allowed_is_refused_before_it_runs(tmp_path, params, message):
    model, x = example()
    bank = planted_bank(tmp_path, model, x)
    first_winner(bank, "opat", params)
    with pytest.raises(TuneBankError) as refused:
        apply_bank(model, bank)
    text = str(refused.value)
    assert text.startswith(f"the tuning bank file {bank.directory / 'opat.json'} is damaged: entry '")
    assert message in text and '"threads": an integer >= 1 or null' in text
    assert '"backend": "cudnn" or "efficient" or "flash" or "math" or null' in text
    assert not patched()


def test_a_subgraph_winner_with_params_not_allowed_is_refused(tmp_path):
    from tests.tune.test_sgat import tuned_mlp

    model, x, bank, compiler = tuned_mlp(tmp_path)
    first_winner(bank, "sgat", {"compile": "fastest", "format": "as_given", "freezing": False})
    with pytest.raises(TuneBankError, match=r"sgat.json is damaged: entry '\d+': its winner 'compile_lite' has params "
                                            r".*Invalid enum value 'fastest' - at `\$.compile`; allowed: an object "
                                            r'\{"compile": "default" or "lite" or "max-autotune-no-cudagraphs" or '
                                            r'"reduce-overhead" or null, "format": "as_given" or "channels_last"'):
        apply_subgraphs(model, bank, compiler=compiler)
    assert model[0]._compiled_call_impl is None
