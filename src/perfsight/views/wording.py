"""Words and numbers more than one view says the same way (the terminal report, the web pages): a duration in
milliseconds, the verdict of a comparison."""
from __future__ import annotations

from perfsight.analysis.compare import RUN_TO_RUN


def in_ms(ns) -> str:
    """A duration in ns as a number of milliseconds (``1,234.567``; ``-`` when unknown), for text that names
    the unit itself."""
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def verdict_sentence(steps: dict) -> str:
    """The verdict of a ``compare.step_comparison`` row in words, with the noise its interval weighs: ``NEW is
    3.0% slower (95% CI +1.1% to +4.9%, run-to-run noise): 10.000 -> 10.300 ms per step``, ``no difference
    beyond the run-to-run noise (...)``; weighing the step-to-step noise only (one run on a side) it says that
    run-to-run noise is not covered; what one step on a side or no steps leaves unknown."""
    verdict = steps["verdict"]
    if verdict == "no steps":
        side = "BASE" if not steps["base_steps"] else "NEW"
        return f"{side} has no steps: step times not compared; figures are per run, not per step"
    means = f"{in_ms(steps['base_mean_ns'])} -> {in_ms(steps['new_mean_ns'])} ms per step"
    uncovered = "" if steps["noise"] == RUN_TO_RUN else "; run-to-run noise is not covered"
    interval = (f"{steps['confidence'] * 100:g}% CI {steps['ci_low_pct']:+.1f}% to {steps['ci_high_pct']:+.1f}%"
                if steps["ci_low_pct"] is not None else "")
    difference = steps["difference_pct"]
    if verdict == "slower":
        return f"NEW is {difference:.1f}% slower ({interval}, {steps['noise']} noise{uncovered}): {means}"
    if verdict == "faster":
        return f"NEW is {-difference:.1f}% faster ({interval}, {steps['noise']} noise{uncovered}): {means}"
    if verdict == "no difference":
        return (f"no difference beyond the {steps['noise']} noise (NEW {difference:+.1f}%, {interval}{uncovered}): "
                f"{means}")
    change = "no faster or slower" if difference == 0 else \
        f"{abs(difference):.1f}% {'slower' if difference > 0 else 'faster'}"
    return (f"NEW is {change} ({means}), but one step on a side leaves the step-to-step noise unknown: profile "
            "more steps for a verdict")


def gain_sentence(advice: dict) -> str | None:
    """A piece of advice's estimated gain (``advisor.advise``: from the critical path's what-if) in words:
    ``estimated gain 1.234 ms per step (12.3%), if communication fully overlapped with compute``; None for
    advice without one."""
    if advice.get("what_if") is None:
        return None
    if advice.get("gain_ns") is None:
        return f"estimated gain unknown (no steps to replay), if {advice['what_if']}"
    return (f"estimated gain {in_ms(advice['gain_ns'])} ms per step ({advice['gain_pct'] or 0:.1f}%), "
            f"if {advice['what_if']} (critical-path what-if)")
