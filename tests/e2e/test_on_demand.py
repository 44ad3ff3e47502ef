"""Armed jobs end to end: real training subprocesses under ``perfsight run --on-demand``, profiled only when
``perfsight capture`` asks or a planted slow step fires the trigger. Each check reads the raw files (the trace
window's ProfilerStep names, the manifest, the rank's steps file) rather than asking the code under test."""
import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ports import free_port
from tests.waiting import wait_until

from .conftest import fill_disk, manifest, perfsight, script

pytestmark = pytest.mark.e2e

LIVE = "perfsight_live"


def armed_job(out: Path, stop: Path, *args: str, launcher: tuple[str, ...] = (), options: tuple[str, ...] = ()):
    command = [sys.executable, "-m", "perfsight", "run", "--on-demand", "-o", str(out), *options, "--",
               *(launcher or (sys.executable,)), script("train_until.py"), str(stop), *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def status(out: Path, rank: int = 0) -> dict:
    try:
        return json.loads((out / LIVE / f"rank{rank}.json").read_text())
    except (OSError, ValueError):
        return {}


def armed(job: subprocess.Popen, out: Path, step: int, ranks: tuple[int, ...] = (0,)) -> None:
    """Wait until every rank of ``ranks`` has armed and passed ``step``; a job that ended first fails the test
    with its own output (not a wait for something that will never come)."""
    wait_until(lambda: job.poll() is not None or all((status(out, rank).get("step") or 0) >= step for rank in ranks),
               f"ranks {ranks} to arm")
    if job.poll() is not None:
        _, stderr = job.communicate()
        raise AssertionError(f"the armed job ended (exit {job.returncode}) before arming: {stderr[-3000:]}")


def finish(proc: subprocess.Popen, stop: Path) -> tuple[str, str]:
    stop.touch()
    try:
        return proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()


def profiler_steps(run: Path) -> list[int]:
    """The ProfilerStep#N numbers in a run's trace windows, read straight from the JSON."""
    numbers = []
    for trace in sorted((run / "host" / "data").glob("trace_*.pt.trace.json")):
        events = json.loads(trace.read_text())["traceEvents"]
        numbers += [int(e["name"].split("#")[1]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    return sorted(set(numbers))


def captured_lines(stdout: str) -> tuple[Path, int, int, dict[int, Path]]:
    head, *ranks = [line for line in stdout.splitlines() if line.strip()]
    words = head.split()            # "captured steps 57-59 of rank 0 in FOLDER"
    first, last = map(int, words[2].split("-"))
    runs = {int(line.split(":")[0].split()[1]): Path(line.split(": ", 1)[1]) for line in ranks
            if line.startswith("  rank ")}
    return Path(words[-1]), first, last, runs


def test_a_capture_on_request_profiles_exactly_the_steps_asked_and_training_goes_on(tmp_path):
    out, stop = tmp_path / "out", tmp_path / "stop"
    job = armed_job(out, stop)
    try:
        armed(job, out, step=5)
        asked = perfsight("capture", out, "--steps", "3")
        assert asked.returncode == 0, asked.stderr
        folder, first, last, runs = captured_lines(asked.stdout)
        assert last == first + 2 and list(runs) == [0] and runs[0].parent == folder
        again = perfsight("capture", out, "--steps", "2", "-O", "with_stack=true")     # a second, later one
        assert again.returncode == 0, again.stderr
        folder2, first2, last2, runs2 = captured_lines(again.stdout)
        wait_until(lambda: status(out)["step"] >= last2 + 5, "training to go on after the captures")
    finally:
        stdout, stderr = finish(job, stop)
    assert job.returncode == 0, stderr
    trained = int(stdout.split("trained ")[1].split()[0])
    assert trained > last2 + 5                                           # training went on
    for run, steps in ((runs[0], [first, first + 1, first + 2]), (runs2[0], [first2, first2 + 1])):
        m = manifest(run)
        assert m["status"] == "complete" and m["steps_collected"] == steps and profiler_steps(run) == steps
        assert m["capture"]["reason"].startswith("requested by perfsight capture") and m["rank"] == 0
    assert manifest(runs2[0])["options_resolved"]["with_stack"] is True
    assert first2 > last
    assert f"rank 0 armed to step {trained - 1}, 2 captures: steps {first}-{last} complete in {runs[0]}" in stderr
    # every capture is an ordinary run: analysed, and compared with the earlier one
    assert perfsight("analyse", folder).returncode == 0
    compared = perfsight("compare", folder, folder2)
    assert compared.returncode == 0, compared.stderr
    assert not (out / LIVE / "request.json").exists() and not list((out / LIVE / "responses").iterdir())


def test_a_torchrun_job_captures_the_same_steps_on_both_ranks(tmp_path):
    out, stop = tmp_path / "out", tmp_path / "stop"
    launcher = (sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", f"--master-port={free_port()}")
    job = armed_job(out, stop, "--ddp", launcher=launcher)
    try:
        armed(job, out, step=5, ranks=(0, 1))
        asked = perfsight("capture", out, "--steps", "3")
        assert asked.returncode == 0, asked.stderr
    finally:
        _, stderr = finish(job, stop)
    assert job.returncode == 0, stderr
    folder, first, last, runs = captured_lines(asked.stdout)
    assert sorted(runs) == [0, 1] and {run.parent for run in runs.values()} == {folder}
    for rank, run in runs.items():
        m = manifest(run)
        assert (m["rank"], m["world_size"], m["status"]) == (rank, 2, "complete")
        assert m["steps_collected"] == profiler_steps(run) == [first, first + 1, first + 2]
    import perfsight as ps

    assert ps.open(folder).ranks == [0, 1]                        # the capture's folder is the job's two ranks


def test_a_planted_slow_step_triggers_a_capture_from_the_next_step_saying_why(tmp_path):
    """The planted step sleeps 4 s more than the others' ~55 ms. The steps judged come after the process's
    first seconds (10 warm-up steps), when the other tests' processes starting torch load the cores most, and
    the median is of 9 steps: for the trigger to miss the planted step, or to fire before it, a loaded machine
    would have to hold most steps up by over 0.35 s, or one by over 0.5 s."""
    out, stop, slow, warmup, window = tmp_path / "out", tmp_path / "stop", 40, 10, 9
    job = armed_job(out, stop, "--sleep", "0.05", "--slow-at", str(slow), "--slow-s", "4", "--max-steps", "55",
                    options=("-O", "trigger=slow_step:10", "-O", f"trigger_warmup={warmup}",
                             "-O", f"trigger_window={window}"))
    _, stderr = job.communicate(timeout=180)
    assert job.returncode == 0, stderr
    # the oracle, from the raw steps file: the first step (after the warm-up steps, with a window of steps before
    # it) at least 10x the median of the window
    rows = [line.split(",") for line in (out / LIVE / "rank0.steps.csv").read_text().splitlines()[1:]]
    durations = {int(r[0]): int(r[2]) - int(r[1]) for r in rows}
    expected = next((step for step in sorted(durations) if step >= warmup + window and durations[step] >=
                     10 * statistics.median(durations[s] for s in range(step - window, step))), None)
    assert expected == slow, durations
    [folder] = out.glob(f"slow_step_{slow}_*")
    [run] = [p for p in folder.iterdir() if p.name.startswith("PROF_")]
    m = manifest(run)
    assert m["status"] == "complete" and m["steps_collected"] == profiler_steps(run) == [slow + 1, slow + 2, slow + 3]
    trigger = m["capture"]["trigger"]
    assert (trigger["step"], trigger["step_ns"]) == (slow, durations[slow])
    assert trigger["median_ns"] == statistics.median(durations[s] for s in range(slow - window, slow))
    assert m["capture"]["reason"].startswith(f"step {slow} took ")
    assert f"rank 0 captured steps {slow + 1}-{slow + 3} in {run}" in stderr


def test_no_armed_job_a_job_that_ends_first_and_a_request_a_rank_cannot_read(tmp_path):
    assert "no armed job here" in perfsight("capture", tmp_path).stderr
    out, stop = tmp_path / "out", tmp_path / "stop"
    job = armed_job(out, stop, "--sleep", "0.05")
    try:
        armed(job, out, step=3)
        (out / LIVE / "request.json").write_text('{"format": "perfsight-capture-request", "id": "x1"}')
        refused = wait_until(lambda: (out / LIVE / "responses" / "x1.rank0.json").is_file()
                             and json.loads((out / LIVE / "responses" / "x1.rank0.json").read_text()), "the refusal")
        assert refused["state"] == "refused" and "start_step null is not allowed" in refused["message"]
        (out / LIVE / "request.json").unlink()
        asked = subprocess.Popen([sys.executable, "-m", "perfsight", "capture", str(out), "--steps", "100000"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: status(out).get("state") == "capturing"
                   and status(out)["step"] >= status(out)["capture"]["start_step"] + 2, "two captured steps")
        stdout, stderr = finish(job, stop)                # the job ends long before the capture's last step
        _, said = asked.communicate(timeout=60)
    finally:
        job.kill()
    assert job.returncode == 0
    assert asked.returncode == 2 and "rank 0 failed the capture: the job ended after step" in said, said
    assert "the steps it took are kept in" in said
    [run] = [p for folder in out.glob("capture_*") for p in folder.iterdir() if p.name.startswith("PROF_")]
    assert manifest(run)["status"] == "complete" and manifest(run)["steps_collected"]   # what it took is kept


def test_a_job_killed_mid_capture_leaves_a_readable_partial_window(tmp_path):
    out, stop = tmp_path / "out", tmp_path / "stop"
    job = armed_job(out, stop, options=("-O", "flush_every=2"))
    try:
        armed(job, out, step=3)
        asked = subprocess.Popen([sys.executable, "-m", "perfsight", "capture", str(out), "--steps", "100000"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        run = wait_until(lambda: next((p for p in out.glob("capture_*/PROF_*")      # its manifest is written whole
                                       if (p / "manifest.json").is_file() and manifest(p)["traces"]), None),
                         "a window of the capture")
        os.kill(status(out)["pid"], signal.SIGKILL)
        _, said = asked.communicate(timeout=60)
    finally:
        job.kill()
        job.wait()
    assert asked.returncode == 2 and "the job ended before the capture was taken (rank 0: gone at step" in said, said
    m = manifest(run)
    assert m["status"] == "collecting" and m["traces"]
    import perfsight as ps

    opened = ps.open(run)                                           # the windows written are read
    assert set(opened.step_trace()["step"].to_pylist()) <= set(m["steps_collected"])


def test_a_full_disk_stops_the_capture_never_the_training(tiny_disk):
    out, stop = tiny_disk / "out", tiny_disk.parent / "stop"
    job = armed_job(out, stop, options=("-O", "flush_every=2"))
    try:
        armed(job, out, step=3)
        asked = subprocess.Popen([sys.executable, "-m", "perfsight", "capture", str(out), "--steps", "20"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        run = wait_until(lambda: next(iter(out.glob("capture_*/PROF_*")), None), "the capture to begin")
        filler = fill_disk(tiny_disk)
        _, said = asked.communicate(timeout=120)
        filled_at = next(int(line.split()[1]) for line in job.stdout if line.startswith("step "))
        for line in job.stdout:                              # the training goes on, 20 steps past it
            if line.startswith("step ") and int(line.split()[1]) >= filled_at + 20:
                break
    finally:
        stdout, stderr = finish(job, stop)
    assert job.returncode == 0 and "trained " in stdout, stderr            # to its end, exit 0
    assert asked.returncode == 2 and "rank 0" in said, said              # the capture failed, saying which rank
    # its run was closed as failed, or the disk was full before even its manifest could be written
    assert not (run / "manifest.json").is_file() or manifest(run)["status"] != "complete"
    assert filler.is_file()                                              # the user's file is kept


def interrupted_like_a_terminal(*args: str) -> subprocess.Popen:
    """``perfsight ARGS`` as a terminal starts it: with SIGINT raising KeyboardInterrupt. Python installs that
    handler only when SIGINT is not ignored at start, and a shell starting a job in the background (as CI and
    nohup may) makes its children ignore SIGINT, so the process sets it before perfsight runs."""
    start = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
             "sys.argv = ['perfsight', *sys.argv[1:]]; runpy.run_module('perfsight', run_name='__main__')")
    return subprocess.Popen([sys.executable, "-c", start, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_ctrl_c_withdraws_the_request_and_says_so(tmp_path):
    """A capture far longer than anyone waits for: Ctrl-C ends the wait, the request is withdrawn (a capture a
    rank had begun runs on to the job's end), and no traceback is printed."""
    out, stop = tmp_path / "out", tmp_path / "stop"
    job = armed_job(out, stop, "--sleep", "0.05")
    asked = None
    try:
        armed(job, out, step=3)
        asked = interrupted_like_a_terminal("capture", str(out), "--steps", "100000")
        wait_until(lambda: (out / LIVE / "request.json").is_file() or asked.poll() is not None, "the request")
        asked.send_signal(signal.SIGINT)
        _, said = asked.communicate(timeout=60)
    finally:
        finish(job, stop)
        if asked is not None:
            asked.kill()                  # reaped whatever happened: no process of this test outlives it
            asked.wait()
    assert asked.returncode == 130 and "capture interrupted; its request is withdrawn" in said, said
    assert "Traceback" not in said and not (out / LIVE / "request.json").exists()
