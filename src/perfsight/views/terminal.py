"""Terminal rendering with rich: the run summary (`perfsight demo`, `perfsight analyse`) with a job's
cluster section, the advice, the option list and what `perfsight tune` found.

Fits an 80-column terminal: long names are cut with an ellipsis, never wrapped. Every text that comes
from a trace (paths, operator and device names, messages) is escaped, so brackets in it are never markup.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

NAME_WIDTH = 34


def _in_ms(ns) -> str:
    """A duration in ns as a number of milliseconds (``1,234.567``; ``-`` when unknown), for text that names
    the unit itself."""
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def _bytes(count: int | None) -> str:
    """A byte count in the largest binary unit that keeps it at 1 or more (``8 B``, ``6,322.4 MiB``)."""
    if count is None:
        return "unknown"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:,.1f} {unit}"
    return f"{count} B"


def _where(step: int | None, op_type: str | None) -> str:
    """Where a memory peak happened: ``in step 3 during aten::mm``, ``outside steps, in no operator``."""
    return (f"in step {step}" if step is not None else "outside steps") + (
        f" during {escape(op_type)}" if op_type else ", in no operator")


def _decimal(value: float, unit: str) -> str:
    """A rate or count with its decimal prefix: ``1.294 MFLOP``, ``68.857 TFLOP/s``."""
    for prefix, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:,.3f} {prefix}{unit}"
    return f"{value:,.0f} {unit}"


def _short(name: str, width: int = NAME_WIDTH) -> str:
    """A long name made to fit: a C++ kernel signature is cut to its function name (see ``_kernel_name``);
    what is still too long loses its middle (start and end both tell operators apart)."""
    if len(name) > width:
        name = _kernel_name(name) or name
    if len(name) <= width:
        return name
    head = (width - 1) // 3
    return name[:head] + "…" + name[-(width - 1 - head):]


_GENERIC_KERNEL = re.compile(r"(?:\w+::)*[Kk]ernel\w*<([A-Za-z_]\w*)>")
_PARAMETERS = re.compile(r"(?<=[\w>])\(.*\)\s*(const)?$")  # "f(int, float*)": not "Memcpy HtoD (Pageable -> ...)"


def _kernel_name(name: str) -> str:
    """A C++ signature's function name: without ``void``, anonymous namespaces, template arguments (``<…>``
    at any depth), its parameter list and, while it is longer than NAME_WIDTH, its leading namespaces."""
    name = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    generic = _GENERIC_KERNEL.match(name)
    if generic:  # cutlass::Kernel<cutlass_80_tensorop_s1688gemm_...>: the template argument is the name
        return generic.group(1)
    kept, depth = [], 0
    for char in name:
        if char == "<":
            kept.append("<…>" if depth == 0 else "")
            depth += 1
        elif char == ">" and depth:
            depth -= 1
        elif depth == 0:
            kept.append(char)
    name = _PARAMETERS.sub("", "".join(kept)).strip()
    while len(name) > NAME_WIDTH and "::" in name:
        name = name.split("::", 1)[1]
    return name


def print_run_summary(run_dir: Path, summary: dict, written: list[Path], console: Console | None = None) -> None:
    """The demo's report: the run's ``run_summary``, then the exported files."""
    console = console or Console()
    print_summary(str(run_dir), summary, console)
    if written:
        console.print(f"exported files in {written[0].parent}:", soft_wrap=True)   # paths are never cut
        for path in written:
            console.print(f"  {path.name}")
    console.print(f"browse it in the web UI: perfsight insight --summary-base-dir {run_dir.parent} --open",
                  soft_wrap=True)


def print_summary(title: str, summary: dict, console: Console | None = None) -> None:
    """Step times, the profiled steps and the top operators of ``run_summary``."""
    console = console or Console()
    console.print(f"[bold]perfsight run[/bold] {escape(title)}", soft_wrap=True)  # paths are never cut
    for warning in summary["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {escape(str(warning))}")
    if not summary["slices"]:
        console.print("no timed events in this run: nothing to analyse (a trace of metadata only, or cut "
                      "before its first event?)")
    elif summary["no_steps_reason"]:
        console.print(escape(summary["no_steps_reason"]))
    averages = summary["breakdown"].to_pylist()
    for row in averages:
        rank = f" of rank {row['rank']}" if len(averages) > 1 else ""
        console.print(f"median step {_in_ms(row['median_step_ns'])} ms (median of {row['steps']} profiled steps{rank}; "
                      f"mean {_in_ms(row['step_ns'])} ms)")
    steps = summary["steps"]
    if steps["count"]:
        console.print(f"the collector timed {steps['count']} steps: median {_in_ms(steps['median_ns'])} ms, mean "
                      f"{_in_ms(steps['mean_ns'])} ms (with the first step and the profiler's stop); mean "
                      f"data-loader wait {_in_ms(steps['data_wait_mean_ns'])} ms")
    profiled = summary["profiled_steps"]
    if profiled.num_rows:
        ranked = len(set(profiled.column("rank").to_pylist())) > 1
        table = Table(title="Profiled steps (ms; iteration = gap + fwd+bwd + tail)",
                      title_justify="left")
        for column in ("rank",) * ranked + ("step", "iteration", "gap", "fwd+bwd", "tail", "data wait"):
            table.add_column(column, justify="right")
        for row in profiled.to_pylist():
            table.add_row(*(str(row["rank"]),) * ranked, str(row["step"]), _in_ms(row["iteration_ns"]),
                          _in_ms(row["gap_ns"]), _in_ms(row["fp_bp_ns"]), _in_ms(row["tail_ns"]),
                          _in_ms(row["data_wait_ns"]))
        console.print(table)
    ops = summary["top_ops"]
    if ops.num_rows:
        table = Table(title=f"Top {ops.num_rows} operators by self time ({summary['ops_category']})",
                      title_justify="left")
        ranked = len(set(ops.column("rank").to_pylist())) > 1
        if ranked:
            table.add_column("rank", justify="right")
        table.add_column("operator", no_wrap=True)
        for column in ("calls", "self ms", "total ms", "avg ms"):
            table.add_column(column, justify="right")
        for row in ops.to_pylist():
            table.add_row(*(str(row["rank"]),) * ranked, escape(_short(row["op_type"], NAME_WIDTH - 5 * ranked)),
                          str(row["count"]), _in_ms(row["self_ns"]), _in_ms(row["total_ns"]), _in_ms(row["avg_ns"]))
        console.print(table)
    _print_breakdown(summary["breakdown"], console)
    _print_overlap(summary["overlap"], console)
    for row in summary["memory_peak"].to_pylist():
        console.print(f"memory peak {escape(row['device'])} (rank {row['rank']}): "
                      f"{_bytes(row['peak_allocated_bytes'])} allocated, {_bytes(row['peak_reserved_bytes'])} "
                      f"reserved, {_where(row['step'], row['op_type'])}")
    for row in summary["flops"].to_pylist():
        utilisation = ("utilisation unknown: no known peak for this device" if row["utilization_percent"] is None
                       else f"{row['utilization_percent']:.1f}% of the peak ({row['peak_source']})"
                       + (f"; {row['peak_note']}" if row["peak_note"] else ""))
        console.print(f"FLOPs (rank {row['rank']}): {_decimal(row['flops_per_step'], 'FLOP')} per step, "
                      f"{_decimal(row['flops_per_s'], 'FLOP/s')} achieved, {escape(utilisation)}")
    for row in summary["data"].to_pylist():
        console.print(f"data preparation (rank {row['rank']}): {row['verdict']} input-bound; "
                      f"{escape(row['reason'])} (thresholds: highly >= {row['highly_threshold_percent']:g}%, "
                      f"moderately >= "
                      f"{row['moderately_threshold_percent']:g}% of step time)")
    if summary.get("cluster"):
        _print_cluster(summary["cluster"], console)
    print_advice(summary["advice"], console)


#: characters of a process group's name in the cluster section (HCCL's are 20-digit hashes)
GROUP_WIDTH = 12


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3f}"


def _print_cluster(cluster: dict, console: Console) -> None:
    """A job's ranks compared (``summary.cluster_summary``): each rank's mean step and exposed communication,
    the slowest rank and straggler, the collectives with the longest waits, the slow rank and link verdicts
    with their rules, the clock offsets that are not 0 and what ranks lack."""
    ranks = cluster["ranks"].to_pylist()
    if ranks:
        table = Table(title="Ranks (mean step over the steps compared, ms)", title_justify="left")
        for column in ("rank", "step", "exposed comm.", "outside comm.", ""):
            table.add_column(column, justify="left" if not column else "right")
        for row in ranks:
            flags = ", ".join(flag for flag in ("slowest", "straggler") if row[flag])
            table.add_row(str(row["rank"]), _in_ms(row["step_ns"]), _in_ms(row["communication_ns"]),
                          _in_ms(row["non_communication_ns"]), flags)
        console.print(table)
    if cluster["slowest"]:
        console.print(f"slowest rank: {escape(cluster['slowest']['reason'])}")
    top = cluster["top_collectives"].to_pylist()
    if top:
        table = Table(title="Collectives with the longest wait (ms; bus bandwidth GB/s)", title_justify="left")
        for column in ("rank", "group", "collective", "ops", "size", "wait", "busbw"):
            table.add_column(column, justify="left" if column in ("group", "collective") else "right",
                             no_wrap=True, min_width=len("reducescatter") if column == "collective" else None)
        for row in top:
            table.add_row(str(row["rank"]), escape(_short(row["process_group"] or "-", GROUP_WIDTH)),
                          escape(row["collective"]), str(row["operations"]), _bytes(row["mean_bytes"]),
                          _in_ms(row["wait_ns"]), _gbps(row["busbw_gbps"]))
        console.print(table)
    slow = [f"rank {row['rank']} in group {escape(_short(row['process_group'] or '-', GROUP_WIDTH))} (the others wait "
            f"{_in_ms(row['others_mean_wait_ns'])} ms on average, it {_in_ms(row['mean_wait_ns'])} ms)"
            for row in cluster["slow_ranks"].to_pylist()]
    console.print(f"slow ranks ({cluster['rank_verdicts']} checked): {'; '.join(slow) or 'none'}")
    console.print(Padding(f"rule: {escape(cluster['slow_rank_rule'])}\nthreshold: "
                          f"{escape(cluster['slow_rank_threshold'])}", (0, 0, 0, 4)))
    slow = [f"{row['src_rank']} -> {row['dst_rank']} {escape(row['transport'])} ({_gbps(row['bandwidth_gbps'])} GB/s, "
            f"median {_gbps(row['median_gbps'])})" for row in cluster["slow_links"].to_pylist()]
    console.print(f"slow links ({cluster['link_verdicts']} checked): {'; '.join(slow) or 'none'}")
    console.print(Padding(f"rule: {escape(cluster['slow_link_rule'])}\nthreshold: "
                          f"{escape(cluster['slow_link_threshold'])}", (0, 0, 0, 4)))
    for row in cluster["clock_offsets"].to_pylist():
        console.print(f"clock of rank {row['rank']}: {row['offset_ns']:+,} ns from rank {row['reference_rank']}'s "
                      f"(estimate {row['estimate_ns']:+,} ns, spread {row['spread_ns']:,} ns over "
                      f"{row['collectives_used']} collectives; {escape(row['method'])})")
    for row in cluster["lacks"].to_pylist():
        console.print(f"rank {row['rank']} lacks {escape(', '.join(row['lacking_files']))}; steps from "
                      f"{escape(row['step_source'] or 'an unsaid source')}")


def _print_breakdown(breakdown, console: Console) -> None:
    """One row per category (``breakdown.CATEGORIES`` and idle), one ms and one % column per rank: fits 80
    columns up to 3 ranks."""
    from perfsight.analysis.breakdown import CATEGORIES

    if not breakdown.num_rows:
        return
    rows = breakdown.to_pylist()
    table = Table(title="Mean step breakdown (ms, %)", title_justify="left")
    table.add_column("category")
    for row in rows:
        table.add_column(f"rank {row['rank']} ms", justify="right")
        table.add_column("%", justify="right")
    shown = [c for c in (*CATEGORIES, "idle") if c == "idle" or any(row[f"{c}_ns"] for row in rows)]
    for category in shown:
        cells = []
        for row in rows:
            cells += [_in_ms(row[f"{category}_ns"]), f"{row[f'{category}_pct']:.1f}"]
        table.add_row(category.replace("_", " "), *cells)
    table.add_row("[bold]step[/bold]", *[cell for row in rows for cell in (_in_ms(row["step_ns"]), "100.0")])
    console.print(table)


def _print_overlap(overlap, console: Console) -> None:
    for row in overlap.to_pylist():
        console.print(f"overlap (rank {row['rank']}, device span {_in_ms(row['span_ns'])} ms): computation "
                      f"{_in_ms(row['computation_ns'])}, communication {_in_ms(row['communication_ns'])}, pure "
                      f"communication {_in_ms(row['pure_communication_ns'])}, free {_in_ms(row['free_ns'])} ms")


def print_advice(advice, console: Console) -> None:
    if not advice.num_rows:
        console.print("Advice: nothing crossed a threshold.")
        return
    console.print("[bold]Advice[/bold]")
    for row in advice.to_pylist():
        colour = {"high": "red", "medium": "yellow"}.get(row["severity"], "cyan")
        console.print(f"[{colour}]{row['severity']}[/{colour}] [bold]{escape(row['title'])}[/bold] ({row['rule']})")
        console.print(Padding(f"{escape(row['finding'])}\nthreshold: {escape(row['threshold'])}\n"
                              f"try: {escape(row['suggestion'])}", (0, 0, 0, 4)))


def print_options(options: list[dict], console: Console | None = None) -> None:
    """One block per option: name and aliases, what is allowed, the default, what it does."""
    console = console or Console()
    console.print("[bold]perfsight options[/bold] (PERFSIGHT_OPTIONS JSON, Profiler(**options), "
                  "perfsight run -O KEY=VALUE)\n")
    for option in options:
        aliases = ", ".join(f"{a['name']} [{a['vocabulary']}]" for a in option["aliases"]
                            if a["name"] != option["name"])
        default = "-" if option["default"] in (None, "", ()) else str(option["default"])
        console.print(f"[bold cyan]{option['name']}[/bold cyan]" + (f"  aliases: {escape(aliases)}" if aliases else ""))
        console.print(Padding(f"{escape(option['help'])}\nallowed: {escape(option['allowed'])}; "
                              f"default: {escape(default)}", (0, 0, 0, 4)))


TUNE_STAGES = {"subgraph": "subgraph tuning (SGAT)", "op": "operator tuning (OPAT)"}
TUNE_WIDTH = 100  # the tuning table's width when the output is not a terminal


def _us(value) -> str:
    return "-" if value is None else f"{value:,.1f}"


def print_tuning(status: dict, console: Console | None = None) -> None:
    """``perfsight tune``'s outcome (on stderr: the script owns stdout): the result file and the bank, then
    per stage a table of every signature - where it is called and what it is, the default's and the best
    candidate's median times, the winner, why - what came out, and the seed's repo_summary counters."""
    console = console or Console(stderr=True, width=None if sys.stderr.isatty() else TUNE_WIDTH)
    console.print(f"perfsight: tuning result in {escape(status['report'])}", soft_wrap=True)
    console.print(f"perfsight: tuning bank {escape(status['bank'])}", soft_wrap=True)
    for stage, done in status["stages"].items():
        table = Table(title=f"{TUNE_STAGES[stage]}: {len(done['rows'])} signatures", title_justify="left")
        table.add_column("signature (where, what)", no_wrap=True)
        table.add_column("default us", justify="right")
        table.add_column("best us", justify="right")
        table.add_column("winner", no_wrap=True)
        table.add_column("why", ratio=1)
        for row in done["rows"]:
            table.add_row(f"{escape(_short(row['where'], 30))}\n[dim]{escape(_short(row['what'], 30))}[/dim]",
                          _us(row["default_us"]), _us(row["best_us"]), escape(_short(row["winner"] or "-", 20)),
                          escape(row["why"]))
        console.print(table)
        summary = ", ".join(f"{k}={v}" for k, v in done["repo_summary"].items())
        winners = ", ".join(f"{where or '(the model)'}={name}" for where, name in done["winners"].items())
        console.print(f"perfsight: {TUNE_STAGES[stage]}: {escape(done['verdict'])}", soft_wrap=True)
        console.print(f"perfsight: {TUNE_STAGES[stage]}: {summary}; winners: {escape(winners or 'none')}",
                      soft_wrap=True)


def print_cluster_report(report, console: Console | None = None) -> None:
    """What ``perfsight cluster`` did (``views.export.cluster_analysis.ClusterReport``): how the ranks were read
    (the engine, ranks done, cached and failed, the wall time), each failed rank and why, the job's warnings,
    the ranks compared (``summary.cluster_summary`` of the job) and the files written."""
    console = console or Console()
    job = report.job
    counts = ", ".join(f"{count} {status}" for status, count in job.counts.items())
    console.print(f"{escape(str(job.path))}: {len(job.outcomes)} ranks ({counts}) on {escape(job.engine)} in "
                  f"{job.seconds:.1f} s; summaries in {escape(str(job.store))}", soft_wrap=True)
    for outcome in job.failed:
        console.print(f"  failed: {escape(outcome.name)}: {escape(outcome.error or '')}", soft_wrap=True)
    for warning in job.warnings:
        console.print(f"  warning: {escape(warning)}", soft_wrap=True)
    if report.cluster:
        _print_cluster(report.cluster, console)
    for path in report.files:
        console.print(escape(str(path)), soft_wrap=True)
    if not report.files:
        console.print("no step or communication data to write")
