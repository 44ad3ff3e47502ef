"""views/wording.verdict_sentence: each verdict of a step comparison in the words the terminal and the web page
both print, with the noise it weighs (one run a side: run-to-run noise said not covered)."""
import pytest

from perfsight.views.wording import verdict_sentence

ROW = {"base_steps": 5, "new_steps": 5, "base_mean_ns": 10_000_000, "new_mean_ns": 10_300_000, "confidence": 0.95,
       "ci_low_pct": 2.59, "ci_high_pct": 3.41, "difference_pct": 3.0, "noise": "step-to-step"}


@pytest.mark.parametrize(("changes", "sentence"), [
    ({"verdict": "slower"}, "NEW is 3.0% slower (95% CI +2.6% to +3.4%, step-to-step noise; run-to-run noise is not "
                            "covered): 10.000 -> 10.300 ms per step"),
    ({"verdict": "slower", "noise": "run-to-run"}, "NEW is 3.0% slower (95% CI +2.6% to +3.4%, run-to-run noise): "
                                                   "10.000 -> 10.300 ms per step"),
    ({"verdict": "faster", "new_mean_ns": 9_700_000, "difference_pct": -3.0, "ci_low_pct": -3.41,
      "ci_high_pct": -2.59}, "NEW is 3.0% faster (95% CI -3.4% to -2.6%, step-to-step noise; run-to-run noise is not "
                             "covered): 10.000 -> 9.700 ms per step"),
    ({"verdict": "no difference", "difference_pct": 0.4, "ci_low_pct": -1.0, "ci_high_pct": 1.8,
      "new_mean_ns": 10_040_000}, "no difference beyond the step-to-step noise (NEW +0.4%, 95% CI -1.0% to "
                                  "+1.8%; run-to-run noise is not covered): 10.000 -> 10.040 ms per step"),
    ({"verdict": "no difference", "difference_pct": 0.4, "ci_low_pct": -1.0, "ci_high_pct": 1.8,
      "new_mean_ns": 10_040_000, "noise": "run-to-run"}, "no difference beyond the run-to-run noise (NEW +0.4%, 95% "
                                                         "CI -1.0% to +1.8%): 10.000 -> 10.040 ms per step"),
    ({"verdict": "noise unknown", "base_steps": 1, "ci_low_pct": None, "ci_high_pct": None, "difference_pct": -2.6,
      "new_mean_ns": 9_740_000}, "NEW is 2.6% faster (10.000 -> 9.740 ms per step), but one step on a side leaves "
                                 "the step-to-step noise unknown: profile more steps for a verdict"),
    ({"verdict": "noise unknown", "new_steps": 1, "ci_low_pct": None, "ci_high_pct": None, "difference_pct": 0.0,
      "new_mean_ns": 10_000_000}, "NEW is no faster or slower (10.000 -> 10.000 ms per step), but one step on a "
                                  "side leaves the step-to-step noise unknown: profile more steps for a verdict"),
    ({"verdict": "no steps", "new_steps": 0}, "NEW has no steps: step times not compared; figures are per run, not "
                                              "per step"),
])
def test_each_verdict_in_words(changes, sentence):
    assert verdict_sentence({**ROW, **changes}) == sentence
