"""``perfsight.compare(base, new)``: two runs side by side, as Arrow tables (``analysis/compare.py`` says
what each table holds and how the verdict is reached). The module is not named ``compare``: importing a
submodule binds its name on the package, and ``perfsight.compare`` is the function.

    comparison = perfsight.compare("before/", "after/")            # paths (anything perfsight.open reads)
    comparison.steps()                                              # the step time, its interval, the verdict
    comparison.operators().to_pandas()                              # host operators aligned; .kernels(): device
    comparison.memory(), comparison.ranks()                         # allocations by operator; rank by rank
    comparison.slower_than(5.0)                                     # the CI gate: slower by > 5% beyond noise

BASE and NEW are paths or opened runs. ``base_rank`` / ``new_rank`` pick one rank of a multi-rank job (a rank
number, or ``"slowest"``: the rank with the longest mean step): the job's ranks are mapped as ``perfsight
cluster`` maps them (their summaries stored in the job's folder) and the rank is opened alone, so two jobs
compare slowest rank to slowest rank, or two ranks of one job compare with each other. Nothing is computed
here.
"""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from perfsight.analysis import compare as analysis
from perfsight.core.errors import InputError
from perfsight.run import Run
from perfsight.run import open as open_run

#: the rank choice that picks the job's slowest rank
SLOWEST = "slowest"


class Comparison:
    """BASE and NEW (two ``Run``) and every comparison of them (``analysis/compare.py``)."""

    def __init__(self, base: Run, new: Run, *, families: str | os.PathLike | None = None):
        self.base, self.new, self.families = base, new, families

    def __repr__(self) -> str:
        return f"<perfsight.Comparison {self.base.path} -> {self.new.path}: {self.verdict()}>"

    def steps(self) -> pa.Table:
        return analysis.step_comparison(self.base.tables, self.new.tables)

    def breakdown(self) -> pa.Table:
        return analysis.breakdown_comparison(self.base.tables, self.new.tables)

    def operators(self) -> pa.Table:
        return analysis.operator_comparison(self.base.tables, self.new.tables, families=self.families)

    def kernels(self) -> pa.Table:
        return analysis.operator_comparison(self.base.tables, self.new.tables, executions=analysis.DEVICE,
                                            families=self.families)

    def modules(self) -> pa.Table:
        return analysis.operator_comparison(self.base.tables, self.new.tables, executions=analysis.MODULES,
                                            families=self.families)

    def memory(self) -> pa.Table:
        return analysis.memory_comparison(self.base.tables, self.new.tables)

    def ranks(self) -> pa.Table:
        return analysis.rank_comparison(self.base.job, self.new.job)

    def communication(self) -> pa.Table:
        return analysis.communication_comparison(self.base.tables, self.new.tables)

    def figures(self) -> pa.Table:
        return analysis.figure_comparison(self.base.tables, self.new.tables)

    def verdict(self) -> str:
        """``slower``, ``faster``, ``no difference``, ``noise unknown`` or ``no steps`` (``steps()``)."""
        return self.steps().column("verdict")[0].as_py()

    def slower_than(self, percent: float) -> bool:
        """Whether NEW is slower than BASE by more than ``percent`` beyond the noise (``analysis.slower_than``)."""
        return analysis.slower_than(self.steps(), percent)


def compare(base: str | os.PathLike | Run, new: str | os.PathLike | Run, *, base_rank: int | str | None = None,
            new_rank: int | str | None = None, families: str | os.PathLike | None = None) -> Comparison:
    """BASE and NEW compared (module docstring); ``families``: a CSV of operator families tried before the
    shipped ones (docs/compare.md)."""
    return Comparison(_side(base, base_rank, "BASE"), _side(new, new_rank, "NEW"), families=families)


def _side(what: str | os.PathLike | Run, rank: int | str | None, side: str) -> Run:
    """The run to compare: ``what`` opened, or its rank ``rank`` opened alone."""
    if rank is None:
        return what if isinstance(what, Run) else open_run(what)
    from perfsight.analysis.cluster import slowest_rank
    from perfsight.core.memo import computed
    from perfsight.mapreduce import analyse_job

    path = what.path if isinstance(what, Run) else Path(what)
    job = analyse_job(path)
    if rank == SLOWEST:
        slowest = computed(slowest_rank, job.job).to_pylist()
        if not slowest:
            raise InputError(f"{side} {path}: no steps, so no slowest rank (give a rank number)")
        rank = slowest[0]["slowest_rank"]
    if not isinstance(rank, int):
        raise InputError(f"{side} rank {rank!r}: not a rank number or {SLOWEST!r}")
    return job.open_rank(rank)


__all__ = ["SLOWEST", "Comparison", "compare"]
