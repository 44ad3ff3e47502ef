"""The measuring rules with a deterministic fake clock: interleaving, statistics, checks, the decision."""
import pytest
import torch

from perfsight.tune.measure import Timing, decide, first_call, measure, mismatch


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


def test_a_burst_that_slows_both_sides_of_a_round_cancels_out():
    """Interleaved, a busy moment slows the default and the candidate of the same round: their per-round
    differences are all 10 us, so the 10 us gain beats no noise + the 3.6 us margin, although each side
    alone spreads by 40 us. Independent jitter of the same size does not cancel: no winner."""
    default = Timing("default", {}, "default", [100_000, 140_000] * 4)
    together = Timing("a", {}, "Impl", [90_000, 130_000] * 4)
    assert decide(default, [together]) is together
    apart = Timing("a", {}, "Impl", [130_000, 90_000] * 4)
    assert decide(default, [apart]) is None


def test_an_undecided_measurement_is_timed_on_and_a_clear_one_is_not():
    """a is 15% faster, but two of the default's first six timed calls catch a busy moment (60 us slower):
    after 6 rounds a is ahead at the median but within the noise (half the IQR, 22.5 us), so 6 more rounds
    run; the burst over, the noise is 0 and a wins on 12. b is not ahead at all: it stops at 6 rounds.
    (More rounds help against bursts; a steady spread stays as wide however long it is timed.)"""
    clock = Clock()
    calls = {"default": 0, "a": 0}

    def noisy(name, cost_us, slow_calls):
        def go():
            calls[name] += 1
            clock.now += int((cost_us + (60 if slow_calls(calls[name]) else 0)) * 1000)
            return (REF,)
        return go
    # calls 1 and 2 are the check and the warm-up; timed rounds start at call 3
    default = noisy("default", 100, lambda n: n in (3, 6))
    cand = [("a", "Impl", {}, noisy("a", 85, lambda n: False))]
    m = measure(default, cand, timer=lambda: clock.now, warmup=1, repeats=6)
    assert len(m.default.samples_ns) == 12 and m.winner is not None and m.winner.name == "a"
    m, _ = run({"b": 100}, warmup=1, repeats=6)
    assert len(m.default.samples_ns) == 6 and m.winner is None


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


def test_gradients_are_judged_on_the_scale_of_the_largest():
    """A gradient whose true value cancels out (a BatchNorm weight's ahead of another BatchNorm: ~1e-6 against
    the others' ~1) is all rounding: a reordered sum changes it wholly. On its own scale that fails; on the
    gradients' shared scale it passes, while an error of 1e-3 on the scale of the large one still fails."""
    torch.manual_seed(0)
    out, large, tiny = torch.randn(8), torch.randn(100), torch.randn(100) * 1e-6
    rounded = tiny + torch.randn(100) * 1e-6                   # all rounding: 100% of its own size
    assert mismatch((out, large, tiny), (out, large, rounded)).startswith("result 2 differs")
    assert mismatch((out, large, tiny), (out, large, rounded), gradients=2) == ""
    scale = large.abs().max()
    assert mismatch((out, large, tiny), (out, large, tiny + 1e-3 * scale), gradients=2).startswith("result 2 differs")
    assert mismatch((out, large, tiny), (out * 1.01, large, tiny), gradients=2).startswith("result 0 differs")


@pytest.mark.parametrize("calls, wins", [(100, False), (10_000, True)])
def test_a_candidate_with_a_compile_wins_only_when_it_repays_it(calls, wins):
    # 50 us saved per call against a 0.1 s compile: repaid after 2000 calls
    m, _ = run({"compiled": 50, "slower": 90}, repeats=3, compile_s={"compiled": 0.1}, calls=calls)
    compiled, slower = m.candidates
    assert compiled.repays is wins and slower.repays is None
    assert m.winner is (compiled if wins else slower)
    assert compiled.as_dict()["compile_s"] == 0.1 and compiled.as_dict()["repays"] is wins
    assert "compile_s" not in slower.as_dict() and "repays" not in slower.as_dict()


def test_first_call_times_the_compile_apart_and_keeps_a_failure_for_measure():
    clock = Clock()
    runner, seconds = first_call(clock.runner("compiled", 2_000_000, REF), timer=lambda: clock.now)
    assert seconds == 2.0 and runner() == (REF,)

    def broken():
        raise RuntimeError("inductor failed")
    failing, _ = first_call(broken)
    m = measure(clock.runner("default", 100, REF), [("compiled", "Impl", {}, failing)],
                timer=lambda: clock.now, warmup=0, repeats=2)
    assert m.candidates[0].reason == "RuntimeError: inductor failed" and m.winner is None


def test_why_a_candidate_won_or_none_did():
    """The reason shown per signature: the decision rule (noise + margin), the repay rule, the check."""
    m, _ = run({"a": 50, "b": 80}, repeats=3)
    assert m.why() == "won: 50.0% faster, beyond the noise (0.0 us) + 3%"
    assert run({"a": 98}, repeats=3)[0].why() == ("no candidate beat the default beyond the noise (0.0 us) + 3%: "
                                                  "a 2.0% faster")
    assert run({"a": 120}, repeats=3)[0].why() == "no candidate beat the default (a 20.0% slower)"
    # a variant with nothing to compile (sgat's eager ones: compile_s 0) that is slower does not "repay" either
    m, _ = run({"threads_2": 130}, repeats=3, compile_s={"threads_2": 0.0}, calls=100)
    assert m.why() == "no candidate beat the default (threads_2 30.0% slower)"
    m, _ = run({"compiled": 50, "slower": 110}, repeats=3, compile_s={"compiled": 0.1}, calls=100)
    assert m.why() == ("no candidate beat the default (slower 10.0% slower); compiled 50.0% faster but its 0.1 s "
                       "compile is not repaid over the expected steps")
    m, _ = run({"compiled": 50}, repeats=3, compile_s={"compiled": 0.1}, calls=10_000)
    assert m.why() == "won: 50.0% faster, beyond the noise (0.0 us) + 3%; repays its 0.1 s compile"

    def broken():
        raise RuntimeError("no kernel")
    clock = Clock()
    m = measure(clock.runner("default", 100, REF), [("wrong", "Impl", {}, clock.runner("wrong", 10, REF * 2)),
                                                    ("broken", "Impl", {}, broken)],
                timer=lambda: clock.now, warmup=0, repeats=2)
    assert m.best is None and m.why() == ("no candidate passed the check; rejected: wrong (result differs), "
                                          "broken (cannot run)")
