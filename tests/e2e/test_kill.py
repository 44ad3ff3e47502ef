"""A training process killed with SIGKILL mid-collection keeps what was flushed, and export works on it."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from perfsight import layout
from perfsight.collect.launch import child_environment

from .conftest import manifest, perfsight, run_dirs, script

pytestmark = pytest.mark.e2e


def test_sigkill_mid_collection_then_export(tmp_path):
    out = tmp_path / "prof"
    given = {"output": str(out), "flush_every": 2, "host_sys": "cpu,mem", "host_sys_usage_freq": 50}
    proc = subprocess.Popen([sys.executable, script("train_tiny.py"), "1000", "0.05"],
                            env=child_environment(given), stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        for _line in proc.stdout:
            runs = run_dirs(out) if out.exists() else []
            if runs and len(list((runs[0] / layout.HOST_DATA).glob(layout.TRACE_GLOB))) >= 2:
                break
            assert time.monotonic() < deadline, "no trace windows were flushed in time"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    [run] = run_dirs(out)
    assert manifest(run)["status"] == "collecting"           # never closed: it was killed
    result = perfsight("export", "summary", "-dir", run)
    assert result.returncode == 0, result.stderr
    result = perfsight("export", "timeline", "-dir", run)
    assert result.returncode == 0, result.stderr
    [timeline] = (run / layout.OUTPUT_DIR).glob("msprof_[0-9]*.json")     # not msprof_tx.json, the marks alone
    events = json.loads(timeline.read_text())["traceEvents"]
    steps = {e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}
    assert {"ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"} <= steps
    assert list((run / layout.OUTPUT_DIR).glob("op_statistic_*.csv"))


def test_sigterm_closes_the_run_then_ends_the_process_as_sigterm_would(tmp_path):
    out = tmp_path / "prof"
    proc = subprocess.Popen([sys.executable, script("train_tiny.py"), "1000", "0.05"],
                            env=child_environment({"output": str(out)}), stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("step 3"):
                break
        os.kill(proc.pid, signal.SIGTERM)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    [run] = run_dirs(out)
    m = manifest(run)
    assert m["status"] == "complete" and m["end_ns"] and m["steps_collected"][:4] == [0, 1, 2, 3]
    assert list((run / layout.HOST_DATA).glob(layout.TRACE_GLOB))        # the whole-run trace was written
