"""The demo's report keeps paths whole on a narrow terminal (they are meant to be copied)."""
from io import StringIO

from rich.console import Console

import perfsight
from perfsight.analysis.summary import run_summary
from perfsight.views.terminal import print_run_summary


def test_paths_are_not_cut_at_the_terminal_width(perfsight_run):
    out = StringIO()
    written = [perfsight_run / "perfsight_output" / "msprof_20260101000000.json"]
    print_run_summary(perfsight_run, run_summary(perfsight.open(perfsight_run).tables), written,
                      Console(file=out, width=60))
    lines = out.getvalue().splitlines()
    assert f"exported files in {written[0].parent}:" in lines
    assert f"browse it in the web UI: perfsight insight --summary-base-dir {perfsight_run.parent} --open" in lines
