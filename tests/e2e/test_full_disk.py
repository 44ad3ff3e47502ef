"""A disk that fills while a run collects never stops the training: the run is closed as failed with the windows
it wrote, and says why; storage ageing names every window once and never deletes the one just written; and the
default collection writes a window every few steps, so an unbounded training holds a bounded profile."""
import subprocess
import sys

import pytest

from perfsight.core import layout

from .conftest import fill_disk, manifest, perfsight, run_dirs, script

pytestmark = pytest.mark.e2e


def test_a_disk_filled_mid_run_closes_the_run_as_failed_with_its_windows_and_the_training_finishes(tiny_disk):
    go = tiny_disk.parent / "go"
    out = tiny_disk / "prof"
    proc = perfsight_background("run", "-o", out, "-O", "flush_every=5", "-O", "storage_limit=200", "--",
                                sys.executable, script("train_tiny.py"), "20", "--wait-at", "6", go)
    try:
        for line in proc.stdout:
            if line.startswith("step 6"):
                break
        [run] = run_dirs(out)
        assert manifest(run)["traces"] == ["trace_0000.pt.trace.json"]    # steps 0-4, written before the disk filled
        filler = fill_disk(tiny_disk)
        go.touch()
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0 and "step 19" in stdout, stderr       # not SIGSEGV (139): the training went on
    m = manifest(run)
    assert m["status"] == "failed" and m["end_ns"], m
    assert "writing trace window trace_0001.pt.trace.json failed: no space left on device" in m["errors"][0]
    assert m["traces"] == ["trace_0000.pt.trace.json"] and m["steps_collected"] == [0, 1, 2, 3, 4]  # what it kept
    assert (run / layout.HOST_DATA / "trace_0000.pt.trace.json").is_file() and filler.is_file()   # the user's
    assert not [p for p in run.rglob("*") if ".partial" in p.name or p.name == layout.MANIFEST_RESERVE]
    assert (f"perfsight: run failed in {run}: recording a step failed: PerfsightError: writing trace window "
            "trace_0001.pt.trace.json failed: no space left on device") in stderr
    assert "kept: steps 0-4 in 1 trace window (one every 5 steps: flush_every)" in stderr


def test_a_disk_too_small_for_one_window_fails_the_run_without_partial_files(tiny_disk):
    (tiny_disk / "filler.bin").write_bytes(bytes(800 * 1024))   # room for the run to begin, not for a window
    result = perfsight("run", "-o", tiny_disk / "prof", "--steps", "1-30", "-O", "record_shapes=true", "--",
                       sys.executable, script("train_tiny.py"), "40")
    assert result.returncode == 0 and "step 39" in result.stdout     # the training went on to its end
    [run] = run_dirs(tiny_disk / "prof")
    m = manifest(run)
    assert m["status"] == "failed" and "no space left on device" in m["errors"][0], m["errors"]
    assert m["traces"] == [] and m["steps_collected"] == []
    assert not [p for p in run.rglob("*") if ".partial" in p.name]   # Kineto's temp file of ours is gone too
    assert f"perfsight: run failed in {run}: recording a step failed" in result.stderr
    assert "kept: no profiled steps in 0 trace windows" in result.stderr


def test_ageing_names_every_window_once_and_keeps_each_runs_newest(tiny_disk):
    """A 1 MiB disk is below the 20 MB free-space floor: every window but the newest ages out as the next is
    written, in this run and in the one after it in the same folder."""
    out = tiny_disk / "prof"
    for _ in range(2):
        result = perfsight("run", "-o", out, "-O", "flush_every=5", "-O", "storage_limit=200", "--",
                           sys.executable, script("train_tiny.py"), "20")
        assert result.returncode == 0, result.stderr
    first, second = run_dirs(out)
    for run in (first, second):
        m = manifest(run)
        assert m["traces"] == [f"trace_{i:04d}.pt.trace.json" for i in range(len(m["traces"]))]   # each name once
        assert m["status"] == "complete" and len(m["traces"]) == 5 and m["steps_collected"] == list(range(20))
    kept = sorted(p.name for p in (second / layout.HOST_DATA).glob(layout.TRACE_GLOB))
    assert kept == ["trace_0004.pt.trace.json"]          # the newest window of the newest run
    assert not list((first / layout.HOST_DATA).glob(layout.TRACE_GLOB))   # the older run's went first
    # the newest window holds what followed the last step: the training's end, no whole step
    assert ("steps 0-19 in 5 trace windows (one every 5 steps: flush_every); 4 aged out to stay within "
            "storage_limit, leaving no profiled steps") in result.stderr


def test_every_step_profiled_by_default_goes_in_windows_of_ten_steps(tmp_path):
    result = perfsight("run", "-o", tmp_path, "--", sys.executable, script("train_tiny.py"), "25")
    assert result.returncode == 0, result.stderr
    [run] = run_dirs(tmp_path)
    m = manifest(run)
    assert m["options_resolved"]["flush_every"] == 10
    assert [m["trace_steps"][name] for name in m["traces"]] == [list(range(10)), list(range(10, 20)),
                                                                list(range(20, 25))]
    assert f"run collected in {run}: steps 0-24 in 3 trace windows (one every 10 steps: flush_every)" in result.stderr


def perfsight_background(*args):
    return subprocess.Popen([sys.executable, "-m", "perfsight", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
