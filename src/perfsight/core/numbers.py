"""Sets of integers (step numbers, rank numbers) written as their runs, as people write them: ``0-4, 10, 12-14``;
shared by the collector's run report, the cluster's messages and insight's run list."""
from __future__ import annotations

from collections.abc import Iterable


def number_runs(numbers: Iterable[int]) -> str:
    """``numbers`` (any order, repeats ignored) as their runs of consecutive values: ``0-4, 10, 12-14``; ``none``
    when there are none."""
    ordered = sorted(set(numbers))
    if not ordered:
        return "none"
    runs: list[list[int]] = [[ordered[0], ordered[0]]]
    for number in ordered[1:]:
        if number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ", ".join(str(first) if first == last else f"{first}-{last}" for first, last in runs)
