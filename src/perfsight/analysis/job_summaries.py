"""The per-rank summaries a job is reduced from: which analysis of a rank's own tables makes each, their
schemas, and the job of a run opened whole.

Each summary is an analysis of one rank's tables that needs nothing from the other ranks (``SUMMARIES``):
its communication operations and what its files reported of them (``collectives``), its step breakdown
(``breakdown``) and msprof-analyze step trace (``cluster_outputs``), its kernel-type and memory-peak
figures, its facts (``rank_facts``). A cluster map computes them on each rank alone and stores them
(``perfsight.mapreduce``); ``job_of`` computes them on a run's tables (every rank of a job opened whole, or one
run), so every cross-rank analysis reads a ``Job`` either way and each figure has one definition.
"""
from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from perfsight.analysis import breakdown, cluster_outputs, collectives, kernels, memory, rank_facts
from perfsight.analysis.job import Job
from perfsight.core.memo import computed
from perfsight.core.tables import RunTables

#: summary name -> (the analysis of a rank's tables that makes it, its schema)
SUMMARIES: dict[str, tuple[Callable[[RunTables], pa.Table], pa.Schema]] = {
    "operations": (collectives.rank_operations, collectives.OPERATIONS),
    "reported_links": (collectives.reported_links, collectives.LINK_BANDWIDTH),
    "reported_matrix": (collectives.reported_matrix, collectives.COMMUNICATION_MATRIX),
    "steps": (breakdown.step_breakdown, breakdown.STEP_BREAKDOWN),
    "step_trace": (cluster_outputs.rank_step_trace, cluster_outputs.CLUSTER_STEP_TRACE),
    "kernel_types": (kernels.kernel_type_breakdown, kernels.KERNEL_TYPE_BREAKDOWN),
    "memory_peaks": (memory.memory_peak, memory.MEMORY_PEAK),
    "rank_facts": (rank_facts.rank_facts, rank_facts.RANK_FACTS),
}

#: summary name -> schema
SUMMARY_SCHEMAS = {name: schema for name, (_, schema) in SUMMARIES.items()}
#: summary name -> its column holding a slice id (the rank's own: the drill-down into the rank opened alone)
SUMMARY_SLICE_IDS = {"operations": "slice_id", "reported_links": "slice_id", "memory_peaks": "op_slice_id"}


def summarise(tables: RunTables) -> dict[str, pa.Table]:
    """Every summary (``SUMMARIES``) of ``tables``, each cast to its schema."""
    return {name: computed(function, tables).cast(schema) for name, (function, schema) in SUMMARIES.items()}


def job_of(tables: RunTables) -> Job:
    """The job of a run's tables: its ranks' summaries, in memory (use through the memo: ``computed(job_of,
    tables)``, so a run has one Job and the Job's own memo keeps its cross-rank results)."""
    return Job.of_tables(summarise(tables))
