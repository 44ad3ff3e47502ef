"""The terminal report prints a trace's own texts as they are: brackets in them are not rich markup."""
import json
from io import StringIO

from rich.console import Console

import perfsight
from perfsight.analysis.summary import run_summary
from perfsight.views.terminal import print_summary

HOSTILE = ["[/red]", "op[bold]x", "[link=http://x]y", "aten::mm[/]"]


def _trace(path):
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0,
               "dur": 100}]
    events += [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 10 + 20 * i, "dur": 10 + i,
                "args": {"External id": i + 1}} for i, name in enumerate(HOSTILE)]
    events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 12,
                   "s": "t", "args": {"Addr": 1, "Bytes": 64, "Total Allocated": 64, "Total Reserved": 0,
                                      "Device Type": 0, "Device Id": -1}})
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_brackets_in_names_and_paths_are_printed_verbatim(tmp_path):
    trace = _trace(tmp_path / "[x] run.pt.trace.json")
    out = StringIO()
    print_summary(str(trace), run_summary(perfsight.open(trace).tables), Console(file=out, width=80))
    text = out.getvalue()
    assert f"perfsight run {trace}" in text
    for name in HOSTILE:
        assert f"│ {name} " in text
    assert "memory peak cpu (rank 0): 64 B allocated, 0 B reserved, in step 1 during [/red]" in text
    assert max(len(line) for line in text.splitlines()[1:]) <= 80  # the path on the first line is kept whole
