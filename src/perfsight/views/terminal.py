"""Terminal rendering with rich: the run summary (`perfsight demo`, `perfsight analyse`) with a job's
cluster section, the advice, the option list, what `perfsight tune` found and where `perfsight capture`
stands and what it captured.

Fits an 80-column terminal: long names are cut with an ellipsis, never wrapped. Every text that comes
from a trace (paths, operator and device names, messages) is escaped, so brackets in it are never markup.
"""
from __future__ import annotations

import contextlib
import re
import shlex
import sys
from pathlib import Path

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from perfsight.analysis.compare import BASE, NEW, RUN_TO_RUN, largest_changes, ranks_slowed_most
from perfsight.analysis.health import CHECKS
from perfsight.analysis.rank_spread import HIGHER
from perfsight.views.wording import gain_sentence, in_ms, verdict_sentence

NAME_WIDTH = 34


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
    """Step times, the profiled steps and the top operators of ``run_summary``; a job's per-rank tables with
    ranks as rows, or beyond ``MAX_RANK_ROWS`` ranks summarised across ranks (``rank_spreads``)."""
    console = console or Console()
    console.print(f"[bold]perfsight run[/bold] {escape(title)}", soft_wrap=True)  # paths are never cut
    for warning in summary["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {escape(str(warning))}")
    if not summary["slices"]:
        console.print("no timed events in this run: nothing to analyse (a trace of metadata only, or cut "
                      "before its first event?)")
    elif summary["no_steps_reason"]:
        console.print(escape(summary["no_steps_reason"]))
    for definition in summary["step_definitions"]:
        console.print(f"steps: {escape(definition)}")
    spreads = summary.get("rank_spreads")
    many = spreads is not None and spreads["ranks"] > MAX_RANK_ROWS
    if many:
        _print_where_ranks_are(title, spreads, console)
    else:
        _print_median_steps(summary["breakdown"], console)
    steps = summary["steps"]
    if steps["count"]:
        console.print(f"the collector timed {steps['count']} steps: median {in_ms(steps['median_ns'])} ms, mean "
                      f"{in_ms(steps['mean_ns'])} ms (with the first step and the profiler's stop); mean "
                      f"data-loader wait {in_ms(steps['data_wait_mean_ns'])} ms")
    if many:
        _print_spread(f"Profiled steps: each rank's mean, across {spreads['ranks']:,} ranks (ms)",
                      spreads["profiled_steps"], console)
    else:
        _print_profiled_steps(summary["profiled_steps"], summary["step_digest"], console)
    _print_top_ops(summary["top_ops"], summary["ops_category"], console)
    if many:
        _print_rank_spreads(spreads, console)
    else:
        _print_breakdown(summary["breakdown"], console)
        _print_rank_lines(summary, console)
    if summary.get("cluster"):
        _print_cluster(summary["cluster"], console)
    print_health(summary, console)
    print_advice(summary["advice"], console)


#: a job's per-rank tables and lists show every rank up to this many ranks, and beyond it a summary across
#: ranks (``summary.rank_spreads``): 16 ranks make a table of 21 lines with its title, header and borders, which
#: fits a classic 24-line terminal, and two nodes of 8 devices still show every rank
MAX_RANK_ROWS = 16


def _print_where_ranks_are(title: str, spreads: dict, console: Console) -> None:
    """Where every rank's rows are, then the median step across ranks."""
    from perfsight.views.export.cluster_analysis import OUTPUT_FOLDER, RANK_BREAKDOWN_CSV

    console.print(f"{spreads['ranks']:,} ranks: each per-rank table is summarised across ranks (min, median, max, "
                  f"the slowest and fastest rank); every rank's rows: perfsight analyse {escape(shlex.quote(title))} "
                  f"--json; the mean step breakdown of every rank as CSV: perfsight cluster -d "
                  f"{escape(shlex.quote(title))} writes {OUTPUT_FOLDER}/{RANK_BREAKDOWN_CSV}")
    for row in spreads["breakdown"].to_pylist():
        if row["figure"] == "median_step_ns" and row["ranks"]:
            console.print(f"median step {in_ms(row['median'])} ms (the median over {row['ranks']:,} ranks of each "
                          f"rank's median step; fastest rank {row['fastest_rank']} {in_ms(row['fastest_value'])} "
                          f"ms, slowest rank {row['slowest_rank']} {in_ms(row['slowest_value'])} ms)")


def _print_median_steps(breakdown, console: Console) -> None:
    averages = breakdown.to_pylist()
    for row in averages:
        rank = f" of rank {row['rank']}" if len(averages) > 1 else ""
        console.print(f"median step {in_ms(row['median_step_ns'])} ms (median of {row['steps']} profiled steps{rank}; "
                      f"mean {in_ms(row['step_ns'])} ms)")


#: the step trace shows every (rank, step) row up to this many, and beyond them its digest
#: (``summary.step_digest``): the same screenful as a table of ``MAX_RANK_ROWS`` ranks
MAX_STEP_ROWS = MAX_RANK_ROWS


def _print_profiled_steps(profiled, digest: dict, console: Console) -> None:
    """The step trace: a row per (rank, step) up to ``MAX_STEP_ROWS`` rows. Beyond, what a reader of that
    many steps needs (``summary.step_digest``): a line per rank with its steps' count, median, p10-p90 band,
    mean, min and max, then the first, slowest and fastest steps with why each is shown."""
    if not profiled.num_rows:
        return
    ranked = len(set(profiled.column("rank").to_pylist())) > 1
    digested = profiled.num_rows > MAX_STEP_ROWS
    title = "Profiled steps (ms; iteration = gap + fwd+bwd + tail)"
    if digested:
        for row in digest["summary"].to_pylist():
            rank = f"rank {row['rank']}: " if ranked else ""
            console.print(f"{rank}{row['steps']:,} profiled steps: median "
                          f"{in_ms(row['median_ns'])} ms, p10-p90 {in_ms(row['p10_ns'])}-{in_ms(row['p90_ns'])} ms, "
                          f"mean {in_ms(row['mean_ns'])} ms, min {in_ms(row['min_ns'])} ms, max "
                          f"{in_ms(row['max_ns'])} ms")
        title = f"The first, slowest and fastest of {profiled.num_rows:,} profiled steps (ms)"
    table = Table(title=title, title_justify="left")
    for column in ("rank",) * ranked + ("step", "iteration", "gap", "fwd+bwd", "tail", "data wait") + \
            ("why",) * digested:
        table.add_column(column, justify="left" if column == "why" else "right")
    for row in (digest["steps"] if digested else profiled).to_pylist():
        table.add_row(*(str(row["rank"]),) * ranked, str(row["step"]), in_ms(row["iteration_ns"]),
                      in_ms(row["gap_ns"]), in_ms(row["fp_bp_ns"]), in_ms(row["tail_ns"]),
                      in_ms(row["data_wait_ns"]), *([row["why"]] if digested else []))
    console.print(table)


def _print_top_ops(ops, category: str | None, console: Console) -> None:
    if not ops.num_rows:
        return
    table = Table(title=f"Top {ops.num_rows} operators by self time ({category})", title_justify="left")
    ranked = len(set(ops.column("rank").to_pylist())) > 1
    if ranked:
        table.add_column("rank", justify="right")
    table.add_column("operator", no_wrap=True)
    for column in ("calls", "self ms", "total ms", "avg ms"):
        table.add_column(column, justify="right")
    for row in ops.to_pylist():
        table.add_row(*(str(row["rank"]),) * ranked, escape(_short(row["op_type"], NAME_WIDTH - 5 * ranked)),
                      str(row["count"]), in_ms(row["self_ns"]), in_ms(row["total_ns"]), in_ms(row["avg_ns"]))
    console.print(table)


def _print_rank_lines(summary: dict, console: Console) -> None:
    """Each rank's overlap, memory peaks, FLOPs and data-preparation verdict, a line each."""
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


def _print_rank_spreads(spreads: dict, console: Console) -> None:
    """The step breakdown, overlap, memory peaks, FLOPs and data wait of ``rank_spreads``, a table each."""
    _print_spread(f"Mean step breakdown across {spreads['ranks']:,} ranks (ms)", spreads["breakdown"], console,
                  omit_zero=True)
    _print_spread("Overlap over each rank's device span (ms)", spreads["overlap"], console)
    for kind, spread in spreads["memory_peak"].items():
        _print_spread(f"Memory peak of each rank's {escape(kind)} device", spread, console)
    _print_spread("FLOPs of each rank over its profiled steps", spreads["flops"], console)
    _print_spread("Data wait of each rank (% of its step time)", spreads["data"], console)


#: the compact frame of the tables with a row per rank or per figure across ranks: no vertical rules, so a row
#: of ten figures fits 80 columns
_RANK_TABLE = {"box": box.SIMPLE_HEAD, "collapse_padding": True, "pad_edge": False, "title_justify": "left"}

#: a figure's name in the reports, where it is not the column name without its unit
_FIGURE_LABELS = {"median_step_ns": "median step", "fp_bp_ns": "fwd+bwd", "communication_ns": "communication",
                  "boundary_step_ns": "step (end to end)", "caused_wait_ns": "others wait",
                  "peak_allocated_bytes": "allocated",
                  "peak_reserved_bytes": "reserved", "flops_per_s": "FLOP/s", "utilization_percent": "utilisation %",
                  "wait_percent": "mean wait %", "max_step_wait_percent": "worst step %", "offset_ns": "offset ns"}


def _figure_value(figure: str, value: float | None) -> str:
    """A figure of ``rank_spread`` in its unit: ns as ms (offsets as ns), bytes in binary units, rates with
    their prefix, percentages with one decimal."""
    if value is None:
        return "-"
    if figure == "offset_ns":
        return f"{value:+,.0f}"
    if figure.endswith("_ns"):
        return in_ms(value)
    if figure.endswith("_bytes"):
        return _bytes(int(value))
    if figure == "flops_per_s":
        return _decimal(value, "FLOP/s")
    return f"{value:.1f}"


def _print_spread(title: str, spread, console: Console, *, omit_zero: bool = False) -> None:
    """A ``rank_spread`` table: per figure its min, median and max, and the slowest and fastest rank, each
    marked with the end it is at (its value is that column's: ``12 (max)``). A figure no rank has is left out,
    and with ``omit_zero`` one that is 0 on every rank (as the breakdown leaves out a category no rank has)."""
    rows = [row for row in spread.to_pylist() if row["ranks"] and not (omit_zero and row["min"] == row["max"] == 0)]
    if not rows:
        return
    table = Table(title=title, **_RANK_TABLE)
    table.add_column("figure")
    for column in ("min", "median", "max", "slowest", "fastest"):
        table.add_column(column, justify="right")
    for row in rows:
        slow, fast = ("max", "min") if row["slower"] == HIGHER else ("min", "max")
        name = row["figure"]
        table.add_row(_FIGURE_LABELS.get(name, name.removesuffix("_ns").replace("_", " ")),
                      *(_figure_value(name, row[end]) for end in ("min", "median", "max")),
                      f"{row['slowest_rank']} ({slow})", f"{row['fastest_rank']} ({fast})")
    console.print(table)


#: characters of a process group's name in the cluster section (HCCL's are 20-digit hashes)
GROUP_WIDTH = 12


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3f}"


def _print_cluster(cluster: dict, console: Console) -> None:
    """A job's ranks compared (``summary.cluster_summary``): each rank's mean step and exposed communication,
    the slowest rank and straggler, the collectives with the longest waits, the slow rank and link verdicts
    with their rules, the clock offsets that are not 0, what ranks lack and which were read around damage.
    Beyond ``MAX_RANK_ROWS`` ranks: the ranks' figures, their collectives and clock offsets summarised across
    ranks (its ``spreads``), and the first ``MAX_RANK_ROWS`` of each list."""
    ranks = cluster["ranks"].to_pylist()
    spreads = cluster["spreads"] if cluster["spreads"]["ranks"] > MAX_RANK_ROWS else None
    if spreads is not None:
        _print_spread(f"{spreads['ranks']:,} ranks compared (ms)", spreads["ranks_compared"], console)
    elif ranks:
        table = Table(title="Ranks (median step from step end to step end; mean exposed communication; the "
                            "others' wait each causes per step; ms)", title_justify="left")
        for column in ("rank", "step", "exposed comm.", "others wait", "last at", ""):
            table.add_column(column, justify="left" if not column else "right")
        for row in ranks:
            flags = ", ".join(flag for flag in ("slowest", "straggler") if row[flag])
            table.add_row(str(row["rank"]), in_ms(row["boundary_step_ns"]), in_ms(row["communication_ns"]),
                          in_ms(row["caused_wait_ns"]), "-" if row["last_arrivals"] is None else
                          f"{row['last_arrivals']:,}", flags)
        console.print(table)
    if cluster["slowest"]:
        console.print(f"slowest rank: {escape(cluster['slowest']['reason'])}")
    top = cluster["top_collectives"].to_pylist()
    if spreads is not None:
        _print_spread(f"Each rank's collectives, summed, across {spreads['ranks']:,} ranks (ms)",
                      spreads["collectives"], console)
    elif top:
        table = Table(title="Collectives with the longest wait (ms; bus bandwidth GB/s)", title_justify="left")
        for column in ("rank", "group", "collective", "ops", "size", "wait", "busbw"):
            table.add_column(column, justify="left" if column in ("group", "collective") else "right",
                             no_wrap=True, min_width=len("reducescatter") if column == "collective" else None)
        for row in top:
            table.add_row(str(row["rank"]), escape(_short(row["process_group"] or "-", GROUP_WIDTH)),
                          escape(row["collective"]), str(row["operations"]), _bytes(row["mean_bytes"]),
                          in_ms(row["wait_ns"]), _gbps(row["busbw_gbps"]))
        console.print(table)
    slow = [f"rank {row['rank']} in group {escape(_short(row['process_group'] or '-', GROUP_WIDTH))} (the others wait "
            f"{in_ms(row['caused_per_step_ns'])} ms per step for it, last at {row['last_arrivals']:,} of "
            f"{row['instances']:,})" for row in cluster["slow_ranks"].to_pylist()]
    console.print(f"stragglers by group ({cluster['rank_verdicts']} checked): {_listed(slow)}")
    console.print(Padding(f"rule: {escape(cluster['slow_rank_rule'])}\nthreshold: "
                          f"{escape(cluster['slow_rank_threshold'])}", (0, 0, 0, 4)))
    slow = [f"{row['src_rank']} -> {row['dst_rank']} {escape(row['transport'])} ({_gbps(row['bandwidth_gbps'])} GB/s, "
            f"median {_gbps(row['median_gbps'])})" for row in cluster["slow_links"].to_pylist()]
    console.print(f"slow links ({cluster['link_verdicts']} checked): {_listed(slow)}")
    console.print(Padding(f"rule: {escape(cluster['slow_link_rule'])}\nthreshold: "
                          f"{escape(cluster['slow_link_threshold'])}", (0, 0, 0, 4)))
    if spreads is None:
        for row in cluster["clock_offsets"].to_pylist():
            console.print(f"clock of rank {row['rank']}: {row['offset_ns']:+,} ns from rank {row['reference_rank']}'s "
                          f"(estimate {row['estimate_ns']:+,} ns, spread {row['spread_ns']:,} ns over "
                          f"{row['collectives_used']} collectives; {escape(row['method'])})")
    else:
        for row in spreads["clock_offsets"].to_pylist():
            if row["ranks"]:
                console.print(f"clock offsets from the lowest rank's, over the {row['ranks']:,} ranks whose offset "
                              f"or estimate is not 0: median {row['median']:+,.0f} ns, from {row['min']:+,.0f} ns "
                              f"(rank {row['fastest_rank']}) to {row['max']:+,.0f} ns (rank {row['slowest_rank']})")
    lacks = cluster["lacks"].to_pylist()
    for row in lacks[:MAX_RANK_ROWS]:
        console.print(f"rank {row['rank']} lacks {escape(', '.join(row['lacking_files']))}; steps from "
                      f"{escape(row['step_source'] or 'an unsaid source')}")
    if len(lacks) > MAX_RANK_ROWS:
        console.print(f"... and {len(lacks) - MAX_RANK_ROWS:,} more ranks lack files (each rank's: analyse --json)")
    damaged = cluster["damaged"].to_pylist()
    for row in damaged[:MAX_RANK_ROWS]:
        more = len(row["damage"]) - 1
        console.print(f"rank {row['rank']} read around damage, its figures cover what was read: "
                      f"{escape(row['damage'][0])}" + (f" (and {more} more)" if more else ""))
    if len(damaged) > MAX_RANK_ROWS:
        console.print(f"... and {len(damaged) - MAX_RANK_ROWS:,} more ranks read around damage (each rank's: "
                      "analyse --json)")


def _listed(items: list[str]) -> str:
    """``items`` joined by ``; ``, the first ``MAX_RANK_ROWS`` of them and how many more; ``none`` for none."""
    shown = "; ".join(items[:MAX_RANK_ROWS]) or "none"
    return shown + (f"; ... and {len(items) - MAX_RANK_ROWS:,} more (every one: analyse --json)"
                    if len(items) > MAX_RANK_ROWS else "")


def _print_breakdown(breakdown, console: Console) -> None:
    """One rank: a row per category (``breakdown.CATEGORIES`` and idle) with its ms and %. Several ranks
    (``_print_rank_breakdown``): a row per rank."""
    from perfsight.analysis.breakdown import CATEGORIES

    if breakdown.num_rows > 1:
        _print_rank_breakdown(breakdown, console)
        return
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
            cells += [in_ms(row[f"{category}_ns"]), f"{row[f'{category}_pct']:.1f}"]
        table.add_row(category.replace("_", " "), *cells)
    table.add_row("[bold]step[/bold]", *[cell for row in rows for cell in (in_ms(row["step_ns"]), "100.0")])
    console.print(table)


#: a category's column header in the breakdown by rank, where its name is too wide for ten columns in 80
_CATEGORY_HEADERS = {"communication": "comm.", "dataloader": "data", "host_ops": "host"}


def _print_rank_breakdown(breakdown, console: Console) -> None:
    """A row per rank: its mean step in ms and each category (``breakdown.CATEGORIES`` that any rank has, and
    idle) in % of it; ten columns fit 80."""
    from perfsight.analysis.breakdown import CATEGORIES

    rows = breakdown.to_pylist()
    shown = [c for c in (*CATEGORIES, "idle") if c == "idle" or any(row[f"{c}_ns"] for row in rows)]
    table = Table(title="Mean step breakdown by rank", **_RANK_TABLE)
    for column in ("rank", "step ms", *(_CATEGORY_HEADERS.get(c, c) for c in shown)):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(str(row["rank"]), in_ms(row["step_ns"]),
                      *("-" if row[f"{c}_pct"] is None else f"{row[f'{c}_pct']:.1f}" for c in shown))
    console.print(table)
    short = "".join(f", {_CATEGORY_HEADERS[c]} = {c.replace('_', ' ')}" for c in shown if c in _CATEGORY_HEADERS)
    console.print(f"(each category in % of the step{short})")


def _print_overlap(overlap, console: Console) -> None:
    for row in overlap.to_pylist():
        console.print(f"overlap (rank {row['rank']}, device span {in_ms(row['span_ns'])} ms): computation "
                      f"{in_ms(row['computation_ns'])}, communication {in_ms(row['communication_ns'])}, pure "
                      f"communication {in_ms(row['pure_communication_ns'])}, free {in_ms(row['free_ns'])} ms")


def print_health(summary: dict, console: Console) -> None:
    """The trace health findings (``run_summary``'s ``health``): per rank and check its count, the time of the
    affected events, the first of them and the analyses it touches; beyond ``MAX_RANK_ROWS`` ranks one line
    per check over every rank (``health_by_check``)."""
    health = summary["health"]
    if not health.num_rows:
        console.print("trace health: no problems found")
        return
    console.print("[bold]Trace health[/bold]")
    rows = health.to_pylist()
    if len({row["rank"] for row in rows}) > MAX_RANK_ROWS:
        rows = [{**row, "rank": f"{row['ranks']:,} ranks, first {row['first_rank']}", "detail": None}
                for row in summary["health_by_check"].to_pylist()]
    for row in rows:
        time = f", {in_ms(row['affected_ns'])} ms" if row["affected_ns"] else ""
        lines = [f"affects: {', '.join(row['affects'])}"]
        lines += [f"first: {row['example']}"] if row["example"] else []
        lines += [row["detail"]] if row["detail"] else []
        console.print(f"rank {row['rank']}: {row['count']:,} {CHECKS[row['check']][0]}{time} ({row['check']})")
        console.print(Padding(escape("\n".join(lines)), (0, 0, 0, 4)))


def print_advice(advice, console: Console) -> None:
    if not advice.num_rows:
        console.print("Advice: nothing crossed a threshold.")
        return
    console.print("[bold]Advice[/bold]")
    for row in advice.to_pylist():
        colour = {"high": "red", "medium": "yellow"}.get(row["severity"], "cyan")
        console.print(f"[{colour}]{row['severity']}[/{colour}] [bold]{escape(row['title'])}[/bold] ({row['rule']})")
        gain = gain_sentence(row)
        console.print(Padding(f"{escape(row['finding'])}\nthreshold: {escape(row['threshold'])}\n"
                              f"try: {escape(row['suggestion'])}" + (f"\n{escape(gain)}" if gain else ""),
                              (0, 0, 0, 4)))


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


TUNE_STAGES = {"step": "step-settings tuning (optimizers, data loaders, TunableOp)",
               "subgraph": "subgraph tuning (SGAT)", "op": "operator tuning (OPAT)"}
TUNE_WIDTH = 100  # the tuning table's width when the output is not a terminal


def _us(value) -> str:
    return "-" if value is None else f"{value:,.1f}"


def print_tuning(status: dict, console: Console | None = None) -> None:
    """``perfsight tune``'s outcome (on stderr: the script owns stdout): the result file and the bank, then
    per stage a table of every signature - where it is called and what it is, the default's and the best
    candidate's median times alone, the winner the bank holds, why - and a table of the winners it tried in
    the training step (the step's median without and with each, the paired speed-up and the rule's interval,
    the rounds, kept or rejected, and the rule), what came out, and the seed's repo_summary counters; then the
    winners kept in the step and the end-to-end figure they were kept on, and how long the recorded steps
    waited for their batches."""
    console = console or Console(stderr=True, width=None if sys.stderr.isatty() else TUNE_WIDTH)
    console.print(f"perfsight: tuning result in {escape(status['report'])}", soft_wrap=True)
    console.print(f"perfsight: tuning bank {escape(status['bank'])}", soft_wrap=True)
    for stage, done in status["stages"].items():
        table = Table(title=f"{TUNE_STAGES[stage]}: {len(done['rows'])} signatures", title_justify="left")
        table.add_column("signature (where, what)", no_wrap=True)
        table.add_column("default us", justify="right")
        table.add_column("best us\n(alone)", justify="right")
        table.add_column("winner", no_wrap=True)
        table.add_column("why", ratio=1)
        for row in done["rows"]:
            table.add_row(_signature(row), _us(row["default_us"]), _us(row["best_us"]),
                          escape(_short(row["winner"] or "-", 20)), escape(row["why"]))
        console.print(table)
        tried = [row for row in done["rows"] if row.get("in_step")]
        if tried:
            console.print(_in_step_table(TUNE_STAGES[stage], tried))
            console.print(f"perfsight: the rule: {escape(tried[0]['in_step'].get('rule', ''))}", soft_wrap=True)
        summary = ", ".join(f"{k}={v}" for k, v in done["repo_summary"].items())
        winners = ", ".join(f"{where or '(the model)'}={name}" for where, name in done["winners"].items())
        console.print(f"perfsight: {TUNE_STAGES[stage]}: {escape(done['verdict'])}", soft_wrap=True)
        console.print(f"perfsight: {TUNE_STAGES[stage]}: {summary}; winners: {escape(winners or 'none')}",
                      soft_wrap=True)
    proof = status.get("proof")
    if proof is not None:
        console.print(f"perfsight: in the step: {proof['kept']} winner(s) kept, {proof['rejected']} rejected; "
                      f"{escape(proof['text'])}", soft_wrap=True)
    waited = status.get("input")
    if waited and waited["batches"]:
        loaders = ", ".join(f"{name}: {n} batches" for name, n in waited["loaders"].items())
        bound = ("not input-bound" if not waited["input_bound"] else
                 "input-bound: the step settings tuned its data loaders' workers (their rows)" if waited["tuned"] else
                 "input-bound: tune the step settings (--mode step or both) to try its data loaders' workers")
        console.print(f"perfsight: the recorded steps waited {waited['wait_ms']:.1f} ms of {waited['span_ms']:.1f} ms "
                      f"({waited['share']:.0%}) for their batches ({escape(loaders)}); {bound}", soft_wrap=True)


def _signature(row: dict) -> str:
    return f"{escape(_short(row['where'], 30))}\n[dim]{escape(_short(row['what'], 30))}[/dim]"


def _in_step_table(stage: str, rows: list[dict]) -> Table:
    """The winners a stage proposed, as the training step judged them (``prove.Decision.as_dict``)."""
    table = Table(title=f"{stage}: {len(rows)} winner(s) tried in the training step", title_justify="left")
    table.add_column("where", no_wrap=True, overflow="ellipsis")
    table.add_column("winner", no_wrap=True, overflow="ellipsis")
    table.add_column("step ms\nwithout -> with", justify="right", no_wrap=True)
    table.add_column("speed-up\n[interval]", justify="right", no_wrap=True)
    table.add_column("rounds", justify="right", no_wrap=True)
    table.add_column("decision")
    for row in rows:
        trial = row["in_step"]
        table.add_row(escape(row["where"]), escape(trial.get("winner") or row["best"] or "-"),
                      f"{trial['step_without_us'] / 1e3:.2f} -> {trial['step_with_us'] / 1e3:.2f}",
                      f"{trial['speedup']:.3f}x\n[{_bound(trial.get('speedup_low'))}-"
                      f"{_bound(trial.get('speedup_high'))}]",
                      str(trial["rounds"]), escape(trial["decision"]))
    return table


def _bound(value: float | None) -> str:
    """An interval's bound; None (no bound: too few rounds) as "?"."""
    return "?" if value is None else f"{value:.3f}"


def print_cluster_report(report, console: Console | None = None) -> None:
    """What ``perfsight cluster`` did (``views.export.cluster_analysis.ClusterReport``): how the ranks were read
    (the engine, ranks done, cached and failed, the wall time), each failed rank and why, the job's warnings,
    the ranks compared (``summary.cluster_summary`` of the job) and the files written, or that there was
    nothing to write (not said when nothing was to be written: ``perfsight analyse``). Fits 80 columns: a path
    longer than a line is folded."""
    console = console or Console()
    job = report.job
    counts = ", ".join(f"{count} {status}" for status, count in job.counts.items())
    console.print(f"{escape(str(job.path))}: {len(job.outcomes)} ranks ({counts}) on {escape(job.engine)} in "
                  f"{job.seconds:.1f} s; summaries in {escape(str(job.store))}")
    if job.light:
        console.print("  read light: each torch_npu rank's steps and communication as it reported them "
                      "(step_trace_time.csv, communication.json, communication_matrix.json), no kernel-type or "
                      "memory figures; other formats read whole")
    for outcome in job.failed:
        console.print(f"  failed: {escape(outcome.name)}: {escape(outcome.error or '')}")
    for warning in job.warnings:
        console.print(f"  warning: {escape(warning)}")
    if report.cluster:
        _print_cluster(report.cluster, console)
        slowest = report.cluster["slowest"]
        source = job.source_of(slowest["slowest_rank"]) if slowest else None
        if source:
            console.print("the slowest rank alone (every analysis of its own tables):")
            console.print(Padding(f"perfsight analyse {escape(shlex.quote(source))}", (0, 0, 0, 4)))
    if report.files is None:
        return
    folders: dict[Path, list[str]] = {}
    for path in report.files:
        folders.setdefault(Path(path).parent, []).append(Path(path).name)
    for folder, names in folders.items():
        console.print(f"written in {escape(str(folder))}:")
        console.print(Padding(escape("\n".join(names)), (0, 0, 0, 4)))
    if not report.files:
        console.print("no step or communication data to write")


#: rows of each operator and kernel table ``perfsight compare`` prints (regressions, then improvements)
COMPARE_TOP = 8
#: the width of an operator's name in ``perfsight compare``'s tables (the rest of 80 columns: five figures)
COMPARE_NAME_WIDTH = 26


def print_comparison(report: dict, console: Console | None = None, *, top: int = COMPARE_TOP) -> None:
    """What ``perfsight compare`` found (``views.export.compare_files.comparison_report``): which runs (and which
    rank of a job) with each run's steps and mean step, the verdict on the step time with the rule that weighed
    its noise, the breakdown's difference by category, the operators, kernels and modules that grew and shrank
    most per step (``self %``: their self time's share of the step time's difference), communication, memory by
    operator, the ranks of two jobs, the other figures, and the CI gate's outcome when one was asked. Fits 80
    columns: a path longer than a line is folded."""
    console = console or Console()
    steps = report["steps"]
    console.print("[bold]perfsight compare[/bold]")
    _print_runs_compared(report, console)
    console.print(escape(verdict_sentence(steps)), style="bold" if steps["verdict"] in ("slower", "faster") else None)
    if steps["rule"]:
        hint = "" if steps["noise"] == RUN_TO_RUN else \
            "\nseveral runs a side weigh the run-to-run noise: perfsight compare BASE... -- NEW..."
        console.print(Padding(f"rule: {escape(steps['rule'])}{hint}", (0, 0, 0, 4)))
    breakdown = [row for row in report["breakdown"] if row["base_ns"] or row["new_ns"]]
    _figures_table("Step breakdown (ms per step)", ("category", "base", "new", "difference", "share"), [
        (row["category"], in_ms(row["base_ns"]), in_ms(row["new_ns"]), _signed_ms(row["difference_ns"]),
         _percent(row["share_pct"])) for row in breakdown], console)
    for title in ("operators", "kernels", "modules"):
        grown, shrunk = largest_changes(report[title], top)
        _print_aligned(f"{title.capitalize()} that grew most (ms per step)", grown, console)
        _print_aligned(f"{title.capitalize()} that shrank most (ms per step)", shrunk, console)
    _figures_table("Communication (per rank and step)",
                      ("collective", "group", "calls", "MB base", "MB new", "ms base", "ms new"), [
        (escape(_short(row["collective"], 20)), str(row["group_size"] or "?"), _calls(row),
         f"{row['base_bytes_per_step'] / 1e6:,.1f}", f"{row['new_bytes_per_step'] / 1e6:,.1f}",
         in_ms(row["base_per_step_ns"]), in_ms(row["new_per_step_ns"]))
        for row in report["communication"]], console)
    _figures_table("Memory allocated by operator (per rank and step)",
                      ("operator", "allocations", "base", "new", "difference"), [
        (escape(_short(row["op_type"] or "(no operator)", COMPARE_NAME_WIDTH)),
         f"{row['base_allocations_per_step']:,.1f}->{row['new_allocations_per_step']:,.1f}",
         _bytes(int(row["base_bytes_per_step"])), _bytes(int(row["new_bytes_per_step"])),
         ("+" if row["difference_bytes_per_step"] >= 0 else "-") + _bytes(int(abs(row["difference_bytes_per_step"]))))
        for row in report["memory"][:top]], console)
    _print_rank_difference(report["ranks"], console)
    _figures_table("Figures", ("figure", "base", "new", "diff"), [
        (row["figure"], _figure(row["base"], row["unit"]), _figure(row["new"], row["unit"]),
         _signed_pct(row["difference_pct"])) for row in report["figures"]], console)
    gate = report.get("gate")
    if gate is not None:
        outcome = "[red]FAIL[/red]" if gate["failed"] else "[green]pass[/green]"
        console.print(f"gate: NEW slower than BASE by more than {gate['percent']:g}% beyond the {steps['noise']} "
                      f"noise? {outcome}")
    for path in report.get("files", []):
        console.print(escape(str(path)))


def _print_runs_compared(report: dict, console: Console) -> None:
    """A line per run of either side: which rank of a job it is, its steps and mean step, its path; then what of
    the side was not read (a rank that failed, and why)."""
    runs = {(row["side"], row["run"]): row for row in report["runs"]}
    for side, key in ((BASE, "base"), (NEW, "new")):
        several = len(report[key]) > 1
        for place, (path, label) in enumerate(zip(report[key], report[f"{key}_labels"])):
            row = runs[(side, place)]
            facts = ([label] if label else []) + [f"{row['steps']:,} {'step' if row['steps'] == 1 else 'steps'}"] + (
                [f"mean {in_ms(row['mean_step_ns'])} ms"] if row["mean_step_ns"] is not None else [])
            console.print(f"  {side}{f' {place + 1}' if several else ''} ({escape(', '.join(facts))}): {escape(path)}")
        for item in report[f"{key}_not_read"]:
            console.print(f"  {side}: {escape(item)}")


def _signed_ms(ns) -> str:
    return "-" if ns is None else f"{ns / 1e6:+,.3f}"


def _percent(value) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _signed_pct(value) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _calls(row: dict) -> str:
    def count(value: float) -> str:
        return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"
    return f"{count(row['base_calls_per_step'])}->{count(row['new_calls_per_step'])}"


def _print_aligned(title: str, rows: list[dict], console: Console) -> None:
    def named(row: dict) -> str:
        marker = " (family)" if row["matched_by"] == "family" else {"new": " (new)", "vanished": " (gone)"}.get(
            row["status"], "")
        return escape(_short(row["name"], COMPARE_NAME_WIDTH - len(marker)) + marker)

    _figures_table(title, ("name", "calls/step", "base", "new", "diff", "self %"), [
        (named(row), _calls(row), in_ms(row["base_per_step_ns"]), in_ms(row["new_per_step_ns"]),
         _signed_ms(row["difference_per_step_ns"]), _percent(row["share_pct"])) for row in rows], console)


def _figures_table(title: str, headers: tuple[str, ...], rows: list[tuple[str, ...]], console: Console) -> None:
    """A table whose first column names (left) and the others are figures (right), as ``perfsight compare``'s
    and the critical path's; none printed without rows. A name too long for the terminal wraps, a figure never."""
    if not rows:
        return
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for index, header in enumerate(headers):
        table.add_column(header, justify="right" if index else "left", no_wrap=bool(index))
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _print_rank_difference(rows: list[dict], console: Console) -> None:
    """Two jobs rank by rank: a row per rank up to ``MAX_RANK_ROWS``, else the ranks that slowed most
    (``compare.ranks_slowed_most``), or that none slowed."""
    if len(rows) < 2:
        return
    shown = rows if len(rows) <= MAX_RANK_ROWS else ranks_slowed_most(rows, MAX_RANK_ROWS)
    if shown is not rows:
        slowed = f"the {len(shown)} that slowed most follow" if shown else "none slowed"
        console.print(f"Mean step by rank: of {len(rows):,} ranks, {slowed} (every rank: --json, or "
                      "compare_ranks.csv with -o)")
    _figures_table("Mean step by rank (ms)", ("rank", "base", "new", "difference"), [
        (str(row["rank"]), in_ms(row["base_step_ns"]), in_ms(row["new_step_ns"]),
         _signed_pct(row["difference_pct"])) for row in shown], console)


def _figure(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ns":
        return f"{value / 1e3:,.1f} us"
    if unit == "bytes":
        return _bytes(int(value))
    if unit == "%":
        return f"{value:.1f}%"
    return _decimal(value, unit) if unit else f"{value:,.1f}"


#: a critical-path category's column header, short enough for the categories to fit 80 columns
_PATH_HEADERS = {"communication": "comm", "dataloader": "data", "host_ops": "host", "runtime": "rt",
                 "kernel_gap": "gap", "synchronisation": "sync", "compute": "comp", "memory": "mem"}


def print_critical_path(title: str, summary: dict, console: Console | None = None) -> None:
    """``summary.critical_path_summary``: each window's path by category (% of the window), the shown window's
    longest pieces in path order, and the what-ifs."""
    from perfsight.analysis.critical_path import PATH_CATEGORIES

    console = console or Console()
    console.print(f"[bold]perfsight critical path[/bold] {escape(title)}", soft_wrap=True)
    window = summary["window"]
    if window is None:
        console.print("no step (nor any slice) to find a critical path in")
        return
    shares: dict[tuple, dict] = {}
    for row in summary["breakdown"].to_pylist():
        shares.setdefault((row["rank"], row["window"]), {"path_ns": row["path_ns"]})[row["category"]] = row["share_pct"]
    present = [c for c in PATH_CATEGORIES if any(c in entry for entry in shares.values())]
    listed = list(shares.items())[:MAX_RANK_ROWS]
    _figures_table("Critical path by category (% of the step)",
                   ("rank", "window", "ms", *(_PATH_HEADERS.get(c, c) for c in present)),
                   [(str(rank), label, in_ms(entry["path_ns"]), *(_pct_or_blank(entry.get(c)) for c in present))
                    for (rank, label), entry in listed], console)
    if len(shares) > len(listed):
        console.print(f"... {len(shares) - len(listed)} more windows (--json lists them all)")
    console.print("categories: " + ", ".join(f"{_PATH_HEADERS.get(c, c)} = {c.replace('_', ' ')}" for c in present
                                             if _PATH_HEADERS.get(c, c) != c))
    median = f", the median of {window['median_of']} windows" if window["median_of"] > 1 else ""
    _figures_table(f"Critical path of {window['label']} (rank {window['rank']}{median}): {in_ms(window['dur_ns'])} "
                   f"ms in {window['pieces']:,} pieces; what it spends them in",
                   ("what", "category", "pieces", "ms", "%"),
                   [(_short(row["name"]), row["category"].replace("_", " "), f"{row['pieces']:,}",
                     in_ms(row["dur_ns"]), f"{row['share_pct']:.1f}") for row in summary["on_path"].to_pylist()],
                   console)
    scenarios = summary["what_if"].to_pylist()
    mean = f" of {in_ms(scenarios[0]['baseline_ns'])} ms" if scenarios else ""
    _figures_table(f"What if (rank {window['rank']}, the mean window{mean})", ("if", "then ms", "saved ms", "%"),
                   [(_short(row["description"], 32), in_ms(row["what_if_ns"]), in_ms(row["saved_ns"]),
                     f"{row['saved_pct'] or 0:.1f}") for row in scenarios], console)


def _pct_or_blank(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


@contextlib.contextmanager
def capture_progress():
    """A status line on stderr (a terminal only: elsewhere nothing is started) while ``perfsight capture``
    waits; yields the callback that updates it with a ``capture.Progress``."""
    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda progress: None
        return
    with console.status("asking the armed job", spinner="dots") as status:
        def update(progress) -> None:
            steps = (f"steps {progress.start_step}-{progress.last_step}" if progress.last_step is not None
                     else f"from step {progress.start_step}")
            ranks = ", ".join(f"rank {rank} {progress.answers.get(rank, 'asked')} at step "
                              f"{'-' if step is None else step}" for rank, step in progress.ranks_at.items())
            status.update(escape(f"capturing {steps}: {ranks}"))

        yield update


def print_captured(captured, console: Console | None = None) -> None:
    """Where a capture went (``perfsight capture``): its folder, steps and each rank's run, and what to run
    next."""
    console = console or Console()
    ranks = sorted(captured.runs)
    console.print(f"captured steps {captured.start_step}-{captured.last_step} of "
                  f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(map(str, ranks))} in "
                  f"{escape(str(captured.folder))}", soft_wrap=True)
    for rank in ranks:
        console.print(f"  rank {rank}: {escape(str(captured.runs[rank]))}", soft_wrap=True)
    command = "cluster" if len(ranks) > 1 else "analyse"
    console.print(f"next: perfsight {command} {escape(shlex.quote(str(captured.folder)))}", soft_wrap=True)
