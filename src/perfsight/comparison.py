"""``perfsight.compare(base, new)``: two runs side by side, or two sets of runs of the same code, as Arrow
tables (``analysis/compare.py`` says what each table holds and how the verdict is reached). The module is not
named ``compare``: importing a submodule binds its name on the package, and ``perfsight.compare`` is the
function.

    comparison = perfsight.compare("before/", "after/")            # paths (anything perfsight.open reads)
    comparison = perfsight.compare(["b1/", "b2/"], ["n1/", "n2/"])  # several runs a side: run-to-run noise
    comparison.steps()                                              # the step time, its interval, the verdict
    comparison.operators().to_pandas()                              # host operators aligned; .kernels(): device
    comparison.memory(), comparison.ranks()                         # allocations by operator; rank by rank
    comparison.slower_than(5.0)                                     # the CI gate: slower by > 5% beyond noise

BASE and NEW are each a path or an opened run, or a list of them: runs of the same code, whose differences the
verdict then weighs (the variance between runs; with one run a side only the variance between steps, which
does not cover how much runs differ). ``base_rank`` / ``new_rank`` pick one rank of each multi-rank job (a
rank number, or ``"slowest"``: the rank with the longest mean step): the job's ranks are mapped as
``perfsight cluster`` maps them (their summaries stored in the job's folder) and the rank is opened alone, so
two jobs compare slowest rank to slowest rank, or two ranks of one job compare with each other. A job of more
than ``WHOLE_JOB_RANKS`` ranks is never merged: given no rank, its slowest is compared, and its ranks' mean
steps (``ranks()``) come from the mapped summaries. Each run's ``label`` says which rank was taken. Nothing is
computed here.
"""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple, Union

import pyarrow as pa

from perfsight import ingest
from perfsight.analysis import compare as analysis
from perfsight.analysis.job import Job
from perfsight.core.errors import InputError
from perfsight.run import Run, open_sources

#: the rank choice that picks the job's slowest rank
SLOWEST = "slowest"

#: what a side of a comparison is given as: one run (a path or an opened run), or several
Given = Union[str, os.PathLike, Run]


class Taken(NamedTuple):
    """One run of a side as compared: the run, what was taken (``rank 35 of 1,024 (the slowest)``; empty for a
    run opened whole), what of it was not read (each rank that failed and why, as ``perfsight analyse`` and
    ``perfsight cluster`` name them) and, for a rank opened alone, the mapped job it was taken from."""

    run: Run
    label: str
    not_read: tuple[str, ...] = ()
    mapped_job: Job | None = None

    @property
    def job(self) -> Job:
        """The job whose ranks it stands for: the mapped job its rank was taken from, else the run's own (whose
        summaries are computed on first use: only the ranks' comparison reads them, and a first compare of two
        54 MB traces spent a quarter of its time on them)."""
        return self.mapped_job if self.mapped_job is not None else self.run.job


class Comparison:
    """BASE and NEW (each one or several ``Taken`` runs) and every comparison of them (``analysis/compare.py``)."""

    def __init__(self, base: Sequence[Taken], new: Sequence[Taken], *, families: str | os.PathLike | None = None):
        self.base_taken, self.new_taken, self.families = tuple(base), tuple(new), families

    @property
    def base(self) -> Run:
        """BASE's run (its first, of several)."""
        return self.base_taken[0].run

    @property
    def new(self) -> Run:
        """NEW's run (its first, of several)."""
        return self.new_taken[0].run

    @property
    def base_label(self) -> str:
        """Which rank BASE's run is (its first's, of several; empty for a run opened whole)."""
        return self.base_taken[0].label

    @property
    def new_label(self) -> str:
        """Which rank NEW's run is (its first's, of several; empty for a run opened whole)."""
        return self.new_taken[0].label

    def __repr__(self) -> str:
        paths = [", ".join(str(taken.run.path) for taken in side) for side in (self.base_taken, self.new_taken)]
        return f"<perfsight.Comparison {paths[0]} -> {paths[1]}: {self.verdict()}>"

    def _sides(self) -> tuple[list, list]:
        return [taken.run.tables for taken in self.base_taken], [taken.run.tables for taken in self.new_taken]

    def runs(self) -> pa.Table:
        """Each run of either side: its steps and mean step (``analysis.runs_compared``)."""
        return analysis.runs_compared(*self._sides())

    def steps(self) -> pa.Table:
        return analysis.step_comparison(*self._sides())

    def breakdown(self) -> pa.Table:
        return analysis.breakdown_comparison(*self._sides())

    def operators(self) -> pa.Table:
        return analysis.operator_comparison(*self._sides(), families=self.families)

    def kernels(self) -> pa.Table:
        return analysis.operator_comparison(*self._sides(), executions=analysis.DEVICE, families=self.families)

    def modules(self) -> pa.Table:
        return analysis.operator_comparison(*self._sides(), executions=analysis.MODULES, families=self.families)

    def memory(self) -> pa.Table:
        return analysis.memory_comparison(*self._sides())

    def ranks(self) -> pa.Table:
        return analysis.rank_comparison([taken.job for taken in self.base_taken],
                                        [taken.job for taken in self.new_taken])

    def communication(self) -> pa.Table:
        return analysis.communication_comparison(*self._sides())

    def figures(self) -> pa.Table:
        return analysis.figure_comparison(*self._sides())

    def verdict(self) -> str:
        """``slower``, ``faster``, ``no difference``, ``noise unknown`` or ``no steps`` (``steps()``)."""
        return self.steps().column("verdict")[0].as_py()

    def slower_than(self, percent: float) -> bool:
        """Whether NEW is slower than BASE by more than ``percent`` beyond the noise (``analysis.slower_than``:
        the run-to-run noise with several runs a side)."""
        return analysis.slower_than(self.steps(), percent)


def compare(base: Given | Sequence[Given], new: Given | Sequence[Given], *, base_rank: int | str | None = None,
            new_rank: int | str | None = None, families: str | os.PathLike | None = None) -> Comparison:
    """BASE and NEW compared (module docstring): each a run or a list of runs; ``families``: a CSV of operator
    families tried before the shipped ones (docs/compare.md)."""
    sides = []
    for given, rank, side in ((base, base_rank, analysis.BASE), (new, new_rank, analysis.NEW)):
        runs = [given] if isinstance(given, (str, os.PathLike, Run)) else list(given)
        if not runs:
            raise InputError(f"{side}: no run given")
        sides.append([_taken(what, rank, side) for what in runs])
    return Comparison(*sides, families=families)


def _taken(what: Given, rank: int | str | None, side: str) -> Taken:
    """The run to compare (``what`` opened, or its rank ``rank`` opened alone), the job its ranks come from,
    and what was taken."""
    from perfsight.analysis.cluster import slowest_rank
    from perfsight.core.memo import computed
    from perfsight.mapreduce import WHOLE_JOB_RANKS, analyse_job

    if isinstance(what, Run) and rank is None:
        return Taken(what, "", _not_read(what))
    path = what.path if isinstance(what, Run) else Path(what)
    if rank is None:
        sources = ingest.find_runs(path)
        if len(sources) <= WHOLE_JOB_RANKS:
            opened = open_sources(path, sources)
            return Taken(opened, "", _not_read(opened))
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
    not_read = tuple(f"{Path(o.name).name} not read: {o.error}" for o in mapped.failed) + tuple(mapped.warnings)
    return Taken(mapped.open_rank(chosen), label, not_read, mapped.job)


def _not_read(run: Run) -> tuple[str, ...]:
    """What was found at a run opened whole and not read (``ingest.NOT_READ``)."""
    said = json.loads(run.meta.get(ingest.NOT_READ) or "[]")
    return tuple(str(item) for item in said) if isinstance(said, list) else ()


__all__ = ["SLOWEST", "Comparison", "Taken", "compare"]
