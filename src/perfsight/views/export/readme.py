"""README.txt of an export directory: one section per file written there, every column with its unit.

The sections come from catalog.py. Exporting again into the same directory (timeline, then summary)
keeps the sections of earlier files that are still on disk, so the README always lists exactly the
export files present.
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

from perfsight.views.export.catalog import OutputFile, describe
from perfsight.views.export.output import LEDGER, README_TITLE, Staging, staging

README_NAME = "README.txt"
_SECTION = re.compile(r"^File: (\S+)$", re.MULTILINE)

_FORMATS = {
    ".csv": "CSV, comma-separated, one header row, an empty cell where there is no value",
    ".json": "JSON array with one object per row, keyed by the column headers; null where there is no value",
}

_INTRO = f"""\
{README_TITLE}
{"=" * len(README_TITLE)}

Written by `perfsight export timeline|summary` (the msprof export shape). Each file re-creates a file
of msprof / torch_npu's profiler ("Mirrors:" names it). Times are taken from the profiled run:
nanosecond integers in perfsight, written here as microseconds (us) with three decimals, so every value
is exact to the nanosecond; absolute times are since the Unix epoch when the trace records it, otherwise
on the trace's own clock. Summary files start with msprof's own columns, in msprof's order and spelling
(N/A where a field has no meaning off Ascend), then perfsight's (Rank: the distributed rank, 0 for a
single process; Self Time, Step, ...). They are CSV, or with --format json a JSON array of row objects
(numbers as JSON numbers). Files without data are not written. The hidden {LEDGER}
records the files perfsight wrote here: it replaces a file of one fixed name (README.txt, prof_rule_0.json,
msprof_tx.*, pytorch_operator_view.*) only when that file is its own, unchanged since.
"""


def write_readme(out_dir: Path, written: list[Path]) -> Path:
    """Write ``out_dir/README.txt`` describing the files in ``written`` plus the export files an earlier
    README listed that still exist; returns its path."""
    with staging(out_dir) as stage:
        stage_readme(stage, written)
        return stage.commit()[0]


def stage_readme(stage: Staging, written: list[Path]) -> None:
    """Write README.txt into ``stage`` (``write_readme`` without the commit)."""
    stage.write(README_NAME, lambda path: path.write_text(_text(stage.folder, written), encoding="utf-8"),
                replaceable=True)


def _text(out_dir: Path, written: list[Path]) -> str:
    names = {p.name for p in written if p.name != README_NAME}
    earlier = out_dir / README_NAME
    if earlier.is_file():
        names |= {n for n in _SECTION.findall(earlier.read_text(encoding="utf-8")) if (out_dir / n).exists()}
    return "\n".join([_INTRO, *(_section(name, describe(name)) for name in sorted(names))])


def _section(name: str, kind: OutputFile) -> str:
    lines = [f"File: {name}", f"  {kind.title}",
             *textwrap.wrap(f"Mirrors: {kind.mirrors}", 100, initial_indent="  ", subsequent_indent="    "),
             *textwrap.wrap(kind.about, 100, initial_indent="  ", subsequent_indent="  ")]
    if kind.columns:
        lines.append(f"  Format: {_FORMATS[Path(name).suffix]}")
        lines.append("  Columns:")
        lines += [f"    {c.header}: {c.meaning}" for c in kind.columns]
    return "\n".join(lines) + "\n"
