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
compare slowest rank to slowest rank, or two ranks of one job compare with each other. A job of more than
``WHOLE_JOB_RANKS`` ranks is never merged: given no rank, its slowest is compared, and its ranks' mean steps
(``ranks()``) come from the mapped summaries. ``base_label`` / ``new_label`` say which rank was taken. Nothing is
computed here.
"""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from perfsight import ingest
from perfsight.analysis import compare as analysis
from perfsight.analysis.job import Job
from perfsight.core.errors import InputError
from perfsight.run import Run, open_sources

#: the rank choice that picks the job's slowest rank
SLOWEST = "slowest"


class Comparison:
    """BASE and NEW (two ``Run``) and every comparison of them (``analysis/compare.py``)."""

    def __init__(self, base: Run, new: Run, *, families: str | os.PathLike | None = None,
                 base_job: Job | None = None, new_job: Job | None = None, base_label: str = "",
                 new_label: str = ""):
        self.base, self.new, self.families = base, new, families
        #: the jobs whose ranks are compared (a side opened whole is its own job) and what each side is
        self.base_job, self.new_job = base_job or base.job, new_job or new.job
        self.base_label, self.new_label = base_label, new_label

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
        return analysis.rank_comparison(self.base_job, self.new_job)

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
    (before, base_job, base_label), (after, new_job, new_label) = (
        _side(base, base_rank, "BASE"), _side(new, new_rank, "NEW"))
    return Comparison(before, after, families=families, base_job=base_job, new_job=new_job, base_label=base_label,
                      new_label=new_label)


def _side(what: str | os.PathLike | Run, rank: int | str | None, side: str) -> tuple[Run, Job | None, str]:
    """The run to compare (``what`` opened, or its rank ``rank`` opened alone), the job its ranks come from when
    the job was mapped, and what was taken."""
    from perfsight.analysis.cluster import slowest_rank
    from perfsight.core.memo import computed
    from perfsight.mapreduce import WHOLE_JOB_RANKS, analyse_job

    if isinstance(what, Run) and rank is None:
        return what, None, ""
    path = what.path if isinstance(what, Run) else Path(what)
    if rank is None:
        sources = ingest.find_runs(path)
        if len(sources) <= WHOLE_JOB_RANKS:
            return open_sources(path, sources), None, ""
        rank = SLOWEST                  # too many ranks to merge: the slowest, its ranks from their summaries
    mapped = analyse_job(path)
    chosen = rank
    if rank == SLOWEST:
        slowest = computed(slowest_rank, mapped.job).to_pylist()
        if not slowest:
            raise InputError(f"{side} {path}: no steps, so no slowest rank (give a rank number)")
        chosen = slowest[0]["slowest_rank"]
    if not isinstance(chosen, int):
        raise InputError(f"{side} rank {rank!r}: not a rank number or {SLOWEST!r}")
    label = f"rank {chosen} of {len(mapped.ranks):,}" + (" (the slowest)" if rank == SLOWEST else "")
    return mapped.open_rank(chosen), mapped.job, label


__all__ = ["SLOWEST", "Comparison", "compare"]
