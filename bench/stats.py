"""Small statistics and machine facts shared by the benchmarks in bench/ (run as scripts, so imported
as a sibling module)."""
from __future__ import annotations

import os
import statistics


def quantile(values, q: float) -> float:
    """Linear-interpolation quantile (numpy's default), for any number of values."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def spread(values) -> tuple[float, float, float]:
    """Median, p10 and p90."""
    return statistics.median(values), quantile(values, 0.1), quantile(values, 0.9)


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def median_cell(values, unit: str, digits: int) -> str:
    """A table cell of measurements: ``median unit (p10-p90)``, the median alone for one value, ``failed``
    for none."""
    values = list(values)
    if not values:
        return "failed"
    median, p10, p90 = spread(values)
    return f"{median:.{digits}f} {unit}" + (f" ({p10:.{digits}f}-{p90:.{digits}f})" if len(values) > 1 else "")
