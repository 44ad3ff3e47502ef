"""The measuring rules with a deterministic fake clock: interleaving, statistics, checks, the decision."""
import pytest
import torch

from perfsight.tune.measure import Timing, decide, measure, mismatch


class Clock:
    """A fake nanosecond clock that runners advance by their cost; it logs who ran, in order."""

    def __init__(self):
        self.now = 0
        self.log = []

    def runner(self, name, cost_us, result):
        def go():
            self.now += int(cost_us * 1000)
            self.log.append(name)
            return (result,)
        return go


REF = torch.ones(4)


def run(costs, results=None, **kw):
    clock = Clock()
    results = results or {}
    cands = [(n, "Impl", {"p": n}, clock.runner(n, c, results.get(n, REF))) for n, c in costs.items()]
    m = measure(clock.runner("default", 100, REF), cands, timer=lambda: clock.now, **kw)
    return m, clock


def test_interleaved_serial_order_and_counts():
    m, clock = run({"a": 50, "b": 80}, warmup=2, repeats=5)
    # one checking call each, then 2 warm-up and 5 timed rounds of default, a, b in turn
    assert clock.log[:3] == ["default", "a", "b"]
    assert clock.log[3:] == ["default", "a", "b"] * 7
    assert [len(t.samples_ns) for t in (m.default, *m.candidates)] == [5, 5, 5]
    assert m.default.median_us == 100 and m.default.spread_us == 0 and m.default.noise_us == 0
    assert m.winner.name == "a" and m.improvement == pytest.approx(0.5)
    assert m.threads == torch.get_num_threads()


def test_no_winner_within_the_margin():
    m, _ = run({"a": 98}, repeats=3)  # 2% faster: below the 3% margin
    assert m.winner is None and m.improvement == 0.0
    m, _ = run({"a": 98}, repeats=3, margin=0.01)
    assert m.winner.name == "a"


def test_no_winner_within_the_noise():
    default = Timing("default", {}, "default", [100_000] * 4 + [140_000] * 4)  # median 120, noise 20 us
    fast = Timing("a", {}, "Impl", [100_000] * 8)  # 20 us faster: not beyond 20 us noise + 3.6 us margin
    assert decide(default, [fast]) is None
    faster = Timing("a", {}, "Impl", [90_000] * 8)
    assert decide(default, [faster]) is faster


def test_wrong_output_or_failing_candidate_is_rejected_and_never_timed():
    def broken():
        raise RuntimeError("no kernel")
    clock = Clock()
    cands = [("wrong", "Impl", {}, clock.runner("wrong", 10, REF * 1.01)),
             ("broken", "Impl", {}, broken),
             ("right", "Impl", {}, clock.runner("right", 90, REF + 1e-7))]
    m = measure(clock.runner("default", 100, REF), cands, timer=lambda: clock.now, warmup=1, repeats=3)
    wrong, failing, right = m.candidates
    assert not wrong.ok and "differs" in wrong.reason and not wrong.samples_ns
    assert not failing.ok and failing.reason == "RuntimeError: no kernel"
    assert right.ok and m.winner is right
    assert clock.log.count("wrong") == 1
    assert wrong.as_dict()["median_us"] is None and right.as_dict()["samples"] == 3


def test_tolerances_follow_the_dtype_and_cover_gradients():
    x = torch.randn(100)
    assert mismatch((x, x), (x * (1 + 1e-6), x)) == ""
    assert mismatch((x, x), (x, x * 1.01)).startswith("result 1 differs")
    half = x.bfloat16()
    assert mismatch((half,), (half * 1.004,)) == ""
    assert mismatch((x, None), (x, x)) == "result 1: gradient missing on one side"
