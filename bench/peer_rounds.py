"""Interleaved rounds of perfsight against HTA on the same traces, each tool in a fresh process, and the table
of their figures: what bench/compare_peer.py and bench/critical_path_peer.py share.

``interleaved`` runs ``rounds`` rounds; each round links the traces into fresh folders (a tool's cache then
goes there, and is gone after), runs perfsight's child twice (first run: no cache; re-run: its Parquet
caches present) and HTA's once, the tools' order alternating (perfsight, HTA, then HTA, perfsight, ...);
wall time of the whole process and its peak RSS (``hta_compare.run_child``). ``table`` is the markdown of
their medians (p10-p90), the paired HTA / perfsight ratio and the machine.
"""
from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

from hta_compare import peer_env, peer_python, perfsight_env, run_child
from stats import load_average, median_cell, spread

LIMITS = {"mem_limit_gb": 16.0, "timeout_s": 900.0}


def linked(scratch: Path, trace: Path) -> Path:
    """A fresh folder holding only a link to ``trace``."""
    folder = Path(tempfile.mkdtemp(prefix="peer_rounds_", dir=scratch))
    (folder / trace.name).symlink_to(trace.resolve())
    return folder


def interleaved(rounds: int, scratch: Path, traces: list[Path], perfsight_child: str, hta_child: str,
                peer_venv: Path, extra: tuple[str, ...] = (), hta_extra: tuple[str, ...] = ()) -> list[dict]:
    """``rounds`` rounds of {"perfsight", "rerun", "hta"} (module docstring); each child gets the folders of
    ``traces`` then ``extra`` (``hta_extra`` for HTA's) as arguments."""
    scratch.mkdir(parents=True, exist_ok=True)
    found = []
    for index in range(rounds):
        result: dict = {}
        for tool in (("perfsight", "hta") if index % 2 == 0 else ("hta", "perfsight")):
            folders = [linked(scratch, trace) for trace in traces]
            try:
                if tool == "perfsight":
                    argv = [sys.executable, "-c", perfsight_child, *map(str, folders), *extra]
                    result["perfsight"] = run_child(argv, perfsight_env(), **LIMITS)
                    result["rerun"] = run_child(argv, perfsight_env(), **LIMITS)
                else:
                    argv = [str(peer_python(peer_venv)), "-c", hta_child, *map(str, folders), *hta_extra]
                    result["hta"] = run_child(argv, peer_env(), **LIMITS)
            finally:
                for folder in folders:
                    shutil.rmtree(folder, ignore_errors=True)
        found.append(result)
        print(f"round {index + 1}: " + ", ".join(f"{k} {v['wall_s']:.2f} s {v['peak_rss_mib']:.0f} MiB {v['status']}"
                                                   for k, v in result.items()), file=sys.stderr)
    return found


def table(rounds: list[dict], heading: str, peer: str) -> str:
    """``heading``, then the table of perfsight against ``peer`` (the HTA analysis' name) over ``rounds``."""
    def cell(tool: str, key: str, unit: str, digits: int) -> str:
        return median_cell([r[tool][key] for r in rounds if r[tool]["status"] == "ok"], unit, digits)

    paired = [r["hta"]["wall_s"] / r["perfsight"]["wall_s"] for r in rounds
              if r["hta"]["status"] == r["perfsight"]["status"] == "ok"]
    lines = [f"{heading}; {len(rounds)} rounds, median (p10-p90).", "",
             f"| measurement | perfsight | {peer} |", "|---|---:|---:|",
             f"| whole process, first run | {cell('perfsight', 'wall_s', 's', 2)} | {cell('hta', 'wall_s', 's', 2)} |",
             f"| whole process, re-run (perfsight's caches present) | {cell('rerun', 'wall_s', 's', 2)} | "
             f"{cell('hta', 'wall_s', 's', 2)} |",
             f"| after imports | {cell('perfsight', 'work_s', 's', 2)} | {cell('hta', 'work_s', 's', 2)} |",
             f"| peak RSS, first run | {cell('perfsight', 'peak_rss_mib', 'MiB', 0)} | "
             f"{cell('hta', 'peak_rss_mib', 'MiB', 0)} |"]
    if paired:
        median, low, high = spread(paired)
        lines += ["", f"HTA / perfsight, first run, paired by round: {median:.1f}x ({low:.1f}-{high:.1f})."]
    lines.append(f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}; load average at the end: "
                 f"{load_average()}.")
    return "\n".join(lines)
