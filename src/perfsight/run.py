"""``perfsight.open(path)``: a run (one or several ranks) and its analyses, as Arrow tables.

    run = perfsight.open("prof/")              # a PROF_ dir, a parent of one job's PROF_ dirs,
    run.step_trace().to_pandas()               # a trace file, or a folder of traces (one per rank)
    run.op_statistic(by="name")
    run.sql("SELECT kind, count(*) FROM slices GROUP BY kind")

Every analysis method is the function of the same name in ``perfsight.analysis.<module>`` called on
the run's tables (its docstring says the columns and units) through the run's memo (``run.memo``,
``core.memo``): each is computed once per run and arguments, however often and by whom it is asked for.
Nothing is computed here.
"""
from __future__ import annotations

import importlib
import inspect
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from perfsight import ingest
from perfsight.analysis.job import Job
from perfsight.analysis.job_summaries import job_of
from perfsight.core.memo import Memo, computed
from perfsight.core.tables import RunTables


class _Analysis:
    """A Run method that calls ``perfsight.analysis.<module>.<function>(run.tables, ...)`` through the memo;
    of the run's job (``run.job``: its ranks' summaries) for a cross-rank analysis (``of_job``)."""

    def __init__(self, module: str, function: str | None = None, *, of_job: bool = False):
        self.module, self.function, self.of_job = module, function, of_job

    def __set_name__(self, owner, name):
        self.function = self.function or name

    def __get__(self, run, owner=None):
        function = getattr(importlib.import_module(f"perfsight.analysis.{self.module}"), self.function)
        if run is None:
            return function
        bound = lambda *args, **kwargs: computed(  # noqa: E731
            function, run.job if self.of_job else run.tables, *args, **kwargs)
        bound.__doc__, bound.__name__ = function.__doc__, self.function
        signature = inspect.signature(function)
        bound.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])
        return bound


class Run:
    """The canonical tables of one run (all its ranks) and every analysis over them."""

    def __init__(self, path: Path, tables: RunTables, sources: list[ingest.RunSource]):
        self.path, self.tables, self.sources = path, tables, sources

    def __repr__(self) -> str:
        return (f"<perfsight.Run {self.path} ranks={self.ranks} slices={self.tables.slices.num_rows:,} "
                f"steps={self.steps}>")

    @property
    def memo(self) -> Memo:
        """The results of the run's analyses (its tables' memo, ``core.memo``)."""
        return self.tables.memo

    @property
    def job(self) -> Job:
        """The run's job: its ranks' summaries, which the cross-rank analyses read (``analysis/job.py``)."""
        return computed(job_of, self.tables)

    @property
    def meta(self) -> dict[str, str]:
        return self.tables.meta_dict()

    @property
    def ranks(self) -> list[int]:
        return sorted({r if r is not None else 0 for r in self.tables.tracks.column("rank").to_pylist()}) or [0]

    @property
    def steps(self) -> list[int]:
        steps = self.tables.slices.filter(pc.equal(self.tables.slices.column("kind"), "step"))
        return sorted(set(steps.column("step").drop_null().to_pylist()))

    def sql(self, query: str) -> pa.Table:
        """Any DuckDB query over the tables (slices, tracks, counters, flows, memory, meta)."""
        return self.tables.connect().sql(query).to_arrow_table()

    step_trace = _Analysis("steps")
    step_breakdown = _Analysis("breakdown")
    temporal_breakdown = _Analysis("breakdown")
    overlap = _Analysis("breakdown")
    overlap_intervals = _Analysis("breakdown")
    op_instances = _Analysis("ops")
    op_statistic = _Analysis("ops")
    api_statistic = _Analysis("ops")
    task_time = _Analysis("ops")
    operator_details = _Analysis("operator_details")
    kernel_breakdown = _Analysis("kernels")
    kernel_type_breakdown = _Analysis("kernels")
    launch_stats = _Analysis("kernels")
    idle_time_breakdown = _Analysis("kernels")
    queue_length = _Analysis("kernels")
    synchronisations = _Analysis("syncs")
    critical_path = _Analysis("critical_path")
    critical_path_breakdown = _Analysis("critical_path")
    what_if = _Analysis("critical_path")
    trace_health = _Analysis("health")
    op_flops = _Analysis("flops")
    scope_flops = _Analysis("flops")
    model_flops = _Analysis("flops")
    roofline = _Analysis("roofline")
    memory_curve = _Analysis("memory")
    memory_peak = _Analysis("memory")
    allocations_by_op = _Analysis("memory")
    tensor_lifetimes = _Analysis("memory")
    alive_at_peak = _Analysis("memory")
    alive_at = _Analysis("memory")
    alive_by_op_at = _Analysis("memory")
    memory_curve_sampled = _Analysis("memory")
    host_usage = _Analysis("resources")
    host_usage_summary = _Analysis("resources")
    data_wait = _Analysis("data")
    queue_sizes = _Analysis("data")
    data_verdict = _Analysis("data")
    op_time_by_step = _Analysis("dynamic_shape")
    op_instance_time_by_step = _Analysis("dynamic_shape")
    op_shapes_by_step = _Analysis("dynamic_shape")
    mean_step_by_rank = _Analysis("cluster", of_job=True)
    reported_step_trace = _Analysis("rank_facts")
    rank_breakdown = _Analysis("cluster", of_job=True)
    slowest_rank = _Analysis("cluster", of_job=True)
    rank_lacks = _Analysis("cluster", of_job=True)
    rank_steps = _Analysis("cluster", of_job=True)
    rank_nodes = _Analysis("cluster_nodes", of_job=True)
    communication_by_node = _Analysis("cluster_nodes", of_job=True)
    node_links = _Analysis("cluster_nodes", of_job=True)
    collectives = _Analysis("collectives")
    collective_summary = _Analysis("collectives")
    collective_figures = _Analysis("collectives", of_job=True)
    collective_totals = _Analysis("collectives", of_job=True)
    clock_offsets = _Analysis("collectives", of_job=True)
    link_bandwidth = _Analysis("collectives", of_job=True)
    link_totals = _Analysis("collectives", of_job=True)
    communication_matrix = _Analysis("collectives", of_job=True)
    communication_pairs = _Analysis("collectives", of_job=True)
    communication_groups = _Analysis("collectives", of_job=True)
    collective_arrivals = _Analysis("waiting", of_job=True)
    rank_waits = _Analysis("waiting", of_job=True)
    straggler = _Analysis("waiting", of_job=True)
    rank_pace = _Analysis("waiting", of_job=True)
    slow_ranks = _Analysis("waiting", of_job=True)
    slow_links = _Analysis("collectives", of_job=True)
    cluster_step_trace = _Analysis("cluster_outputs", of_job=True)
    cluster_rank_devices = _Analysis("cluster_outputs", of_job=True)
    cluster_communication_groups = _Analysis("cluster_outputs", of_job=True)
    cluster_communication_time = _Analysis("cluster_outputs", of_job=True)
    cluster_communication_bandwidth = _Analysis("cluster_outputs", of_job=True)
    cluster_communication_matrix = _Analysis("cluster_outputs", of_job=True)


def open(path: str | os.PathLike, *, use_cache: bool = True) -> Run:  # noqa: A001 - perfsight.open, by design
    """Open the run at ``path``; several runs or traces of distinct ranks under it open as one job.

    PERFSIGHT_FP_START / PERFSIGHT_BP_END, when set, name the step trace's forward-start / backward-end
    operators for every analysis of the run (over its own fp_point/bp_point options and the automatic
    points)."""
    path = Path(path)
    return open_sources(path, ingest.find_runs(path), use_cache=use_cache)


def load(path: str | os.PathLike, *, use_cache: bool = True) -> RunTables:
    """The canonical tables of what ``open(path)`` opens (``perfsight.load``)."""
    return open(path, use_cache=use_cache).tables


def open_sources(path: Path, sources: list[ingest.RunSource], *, use_cache: bool = True) -> Run:
    """The run made of ``sources`` (one run, or the ranks of one job, already found: insight opens what its
    discovery listed and nothing else), known as ``path``."""
    tables = ingest.load_runs(path, sources, use_cache=use_cache)
    return Run(path, with_step_points_from_env(tables), list(sources))


#: environment variables naming the step trace's points (the seed's PROFILING_FP_START / PROFILING_BP_END)
STEP_POINT_VARIABLES = {"fp_point": "PERFSIGHT_FP_START", "bp_point": "PERFSIGHT_BP_END"}


def with_step_points_from_env(tables: RunTables) -> RunTables:
    """``tables`` with meta fp_point / bp_point set from STEP_POINT_VARIABLES where they are set."""
    points: dict[str, object] = {point: os.environ[variable] for point, variable in STEP_POINT_VARIABLES.items()
              if os.environ.get(variable)}
    return tables.with_meta(points) if points else tables
