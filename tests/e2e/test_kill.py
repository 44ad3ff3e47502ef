"""A training process killed with SIGKILL mid-collection keeps what was flushed, and export works on it."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from perfsight.collect.launch import child_environment
from perfsight.core import layout

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


def _sighup_at_its_default() -> None:
    """In the launched child: SIGHUP at its default. Under ``nohup`` (a suite started so) it is ignored, and the
    ignoring is inherited: the training then rightly goes on after a SIGHUP."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _launch_and_wait_for_step(out, *args):
    """`perfsight run` on train_tiny (1000 slow steps), returned once the training printed step 3."""
    proc = subprocess.Popen([sys.executable, "-m", "perfsight", "run", "-o", str(out), *args, "--", sys.executable,
                             script("train_tiny.py"), "1000", "0.05"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_sighup_at_its_default)
    for line in proc.stdout:
        if line.startswith("step 3"):
            return proc
    raise AssertionError(f"the training never reached step 3: {proc.stderr.read()}")


def test_sigterm_to_perfsight_run_reaches_the_training_which_closes_its_run(tmp_path):
    import psutil

    proc = _launch_and_wait_for_step(tmp_path / "prof")
    try:
        [run] = run_dirs(tmp_path / "prof")
        training = manifest(run)["pid"]
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM            # as the training ended: by SIGTERM
    assert not psutil.pid_exists(training)                     # not orphaned: it got the signal and ended
    assert manifest(run)["status"] == "complete" and f"perfsight: run collected in {run}" in stderr


def test_sighup_to_perfsight_run_closes_the_run_then_ends_the_training_as_sighup_would(tmp_path):
    """A closed terminal or ssh session sends SIGHUP: the run is closed before the training dies of it."""
    proc = _launch_and_wait_for_step(tmp_path / "prof")
    try:
        [run] = run_dirs(tmp_path / "prof")
        proc.send_signal(signal.SIGHUP)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGHUP
    m = manifest(run)
    assert m["status"] == "complete" and m["end_ns"] and m["steps_collected"][:4] == [0, 1, 2, 3]
    assert f"perfsight: run collected in {run}: steps 0-" in stderr


def test_a_training_killed_by_sigkill_makes_perfsight_run_exit_137(tmp_path):
    proc = _launch_and_wait_for_step(tmp_path / "prof")
    try:
        [run] = run_dirs(tmp_path / "prof")
        os.kill(manifest(run)["pid"], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 137
    assert f"perfsight: run interrupted in {run}: its process ended without closing it" in stderr


def test_a_script_that_fails_leaves_its_run_marked_failed_and_a_failing_exit(tmp_path):
    failing = tmp_path / "failing.py"
    failing.write_text("import sys\nimport torch\nsys.exit(2)\n")
    result = perfsight("run", "-o", tmp_path / "prof", "--", sys.executable, failing)
    assert result.returncode == 2
    [run] = run_dirs(tmp_path / "prof")
    m = manifest(run)
    assert m["status"] == "failed" and m["errors"] == ["the program exited with code 2; what was profiled before that "
                                                       "is kept"]
    assert (f"perfsight: run failed in {run}: the program exited with code 2" in result.stderr
            and "run collected" not in result.stderr)


def test_a_script_that_cannot_start_leaves_no_run_and_says_so(tmp_path):
    """Profiling starts when the script imports torch: a script python cannot open never does."""
    result = perfsight("run", "-o", tmp_path, "--", sys.executable, tmp_path / "missing.py")
    assert result.returncode == 2                              # python's own: it cannot open the file
    assert not run_dirs(tmp_path)
    assert "perfsight: no run was collected (did the command start Python with torch?)" in result.stderr
