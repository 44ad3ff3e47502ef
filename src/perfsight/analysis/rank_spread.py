"""A per-rank table summarised across ranks, for reports that must read at any rank count: per figure the
minimum, the median (``breakdown.median``), the maximum and the slowest and fastest ranks with their values.

Which end of a figure is the slowest rank's is said per figure, never guessed: ``HIGHER`` (more time, more
waiting, more memory: the rank with the largest value is the slowest) or ``LOWER`` (a rate such as FLOP/s or
utilisation: the rank with the smallest value is). Ties go to the lowest rank, and the fastest rank is
another than the slowest when there are several ranks, as ``cluster.rank_breakdown`` and
``cluster.slowest_rank`` choose them.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perfsight.analysis.breakdown import median

#: the slowest rank has the largest value of the figure (durations, waits, bytes)
HIGHER = "higher"
#: the slowest rank has the smallest value of the figure (rates: FLOP/s, utilisation, bandwidth)
LOWER = "lower"

RANK_SPREAD = pa.schema([
    ("figure", pa.string()),
    ("slower", pa.string()),
    ("ranks", pa.int64()),
    ("min", pa.float64()),
    ("median", pa.float64()),
    ("max", pa.float64()),
    ("slowest_rank", pa.int32()),
    ("slowest_value", pa.float64()),
    ("fastest_rank", pa.int32()),
    ("fastest_value", pa.float64()),
])


def rank_spread(table: pa.Table, figures: Mapping[str, str], *, rank: str = "rank") -> pa.Table:
    """``table`` (one row per rank, its ``rank`` column) summarised across ranks (schema ``RANK_SPREAD``): one
    row per figure of ``figures`` (column name -> ``HIGHER`` or ``LOWER``: the end that is the slowest rank's,
    copied to ``slower``), in their order: ``ranks`` with a value (nulls are left out), ``min``, ``median``
    (``breakdown.median``: the mean of the middle two for an even count), ``max``, the ``slowest_rank`` and
    ``fastest_rank`` with their values (ties to the lowest rank; the fastest is another rank than the slowest
    when there are several). Values are float64, exact for integer ns and bytes below 2**53; a figure no rank
    has gives ``ranks`` 0 and nulls. Raises ValueError for a rank that has several rows, a figure column
    that is missing or an end that is neither ``HIGHER`` nor ``LOWER``."""
    ordered = table.sort_by(rank)
    ranks = ordered.column(rank).to_numpy(zero_copy_only=False)
    if len(np.unique(ranks)) != len(ranks):
        raise ValueError(f"rank_spread: several rows of one rank in column {rank!r}: one row per rank is summarised")
    rows = []
    for figure, slower in figures.items():
        if slower not in (HIGHER, LOWER):
            raise ValueError(f"rank_spread: figure {figure!r}: slower is {slower!r}; allowed: {HIGHER!r}, {LOWER!r}")
        if figure not in ordered.column_names:
            raise ValueError(f"rank_spread: no column {figure!r}; the table has {', '.join(ordered.column_names)}")
        column = ordered.column(figure)
        known = pc.is_valid(column).to_numpy(zero_copy_only=False)
        values = pc.cast(column, pa.float64(), safe=False).to_numpy(zero_copy_only=False)[known]
        mine = ranks[known]
        row = {"figure": figure, "slower": slower, "ranks": int(len(values))}
        if len(values):
            sign = 1.0 if slower == HIGHER else -1.0
            slowest = int(np.argmax(sign * values))                 # the first of the ties: the lowest rank
            others = np.delete(np.arange(len(values)), slowest) if len(values) > 1 else np.arange(1)
            fastest = int(others[np.argmin(sign * values[others])])
            row.update(min=float(values.min()), median=median(values), max=float(values.max()),
                       slowest_rank=int(mine[slowest]), slowest_value=float(values[slowest]),
                       fastest_rank=int(mine[fastest]), fastest_value=float(values[fastest]))
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=RANK_SPREAD)
