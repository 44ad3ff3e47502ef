"""Terminal rendering with rich: the run summary `perfsight demo` prints and the option list.

Fits an 80-column terminal: long names are cut with an ellipsis, never wrapped.
"""
from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table


def _ms(ns) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def print_run_summary(run_dir: Path, written: list[Path], console: Console | None = None, top: int = 10) -> None:
    from ..analysis.summary import run_summary
    from ..api import load

    console = console or Console()
    summary = run_summary(load(run_dir), top=top)
    console.print(f"[bold]perfsight run[/bold] {run_dir}")
    steps = summary["steps"]
    if steps["count"]:
        console.print(f"steps seen: {steps['count']}  mean step time {_ms(steps['mean_ns'])} ms  "
                      f"(median {_ms(steps['median_ns'])} ms)  mean data-loader wait {_ms(steps['data_wait_mean_ns'])} ms")
    profiled = summary["profiled_steps"]
    if profiled.num_rows:
        table = Table(title="Profiled steps (ms)", title_justify="left")
        for column in ("step", "iteration", "data wait", "fwd+bwd", "tail"):
            table.add_column(column, justify="right")
        for row in profiled.to_pylist():
            table.add_row(str(row["step"]), _ms(row["iteration_ns"]), _ms(row["data_wait_ns"]),
                          _ms(row["fp_bp_ns"]), _ms(row["tail_ns"]))
        console.print(table)
    ops = summary["top_ops"]
    if ops.num_rows:
        table = Table(title=f"Top {ops.num_rows} operators by total time ({summary['ops_category']})",
                      title_justify="left")
        table.add_column("operator", overflow="ellipsis", no_wrap=True, max_width=34)
        for column in ("calls", "total ms", "avg ms", "share %"):
            table.add_column(column, justify="right")
        for row in ops.to_pylist():
            table.add_row(row["op_type"], str(row["count"]), _ms(row["total_ns"]), _ms(row["avg_ns"]),
                          f"{row['ratio']:.1f}")
        console.print(table)
    if written:
        console.print(f"exported files in {written[0].parent}:")
        for path in written:
            console.print(f"  {path.name}")


def print_options(options: list[dict], console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="perfsight options (PERFSIGHT_OPTIONS / perfsight run -O KEY=VALUE)", title_justify="left")
    table.add_column("option", no_wrap=True)
    table.add_column("aliases", overflow="fold")
    table.add_column("allowed", overflow="fold")
    table.add_column("default", overflow="fold")
    for option in options:
        table.add_row(option["name"], ", ".join(option.get("aliases", [])), str(option.get("allowed", "")),
                      str(option.get("default", "")))
    console.print(table)
