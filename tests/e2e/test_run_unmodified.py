"""`perfsight run -- python script.py` and PERFSIGHT_OPTIONS on unmodified scripts."""
import csv
import json
import os
import re
import subprocess
import sys

import pytest

from perfsight import open as open_run
from perfsight.core import layout

from .conftest import manifest, perfsight, run_dirs, script

pytestmark = pytest.mark.e2e


def trace_events(run_dir):
    traces = sorted((run_dir / layout.HOST_DATA).glob(layout.TRACE_GLOB))
    assert traces, f"no trace in {run_dir}"
    return [e for t in traces for e in json.loads(t.read_text())["traceEvents"]]


def test_run_profiles_steps_of_an_unmodified_script(tmp_path):
    out = tmp_path / "prof"
    result = perfsight("run", "--output", out, "--steps", "2-3", "-O", "host_sys=cpu,mem", "-O",
                       "host_sys_usage_freq=50", "--", sys.executable, script("train_tiny.py"), "6", "0.05")
    assert result.returncode == 0, result.stderr
    assert "step 5" in result.stdout                       # the training ran to the end
    [run] = run_dirs(out)
    assert re.fullmatch(r"PROF_\d{17}_\d+_[0-9a-f]+", run.name)
    m = manifest(run)
    assert m["status"] == "complete" and m["steps_collected"] == [2, 3]
    assert m["options_resolved"]["steps"] in ([2, 3], (2, 3))
    assert m["rank"] == 0 and m["world_size"] == 1 and m["device"]["device"] == "cpu"
    assert m["end_ns"] > m["start_ns"] and m["versions"]["torch"]
    assert (run / "device_0" / "data" / "device_info.json").is_file()
    names = {e.get("name") for e in trace_events(run)}
    assert {"ProfilerStep#2", "ProfilerStep#3"} <= names and "ProfilerStep#1" not in names
    assert "aten::addmm" in names or "aten::linear" in names
    with open(run / layout.HOST_DATA / layout.STEPS) as f:
        steps = list(csv.DictReader(f))
    assert [int(s["step"]) for s in steps] == list(range(6))
    waits = open_run(run).data_wait()    # every step once: the profiled window's last (3), the next (4)
    assert waits["step"].to_pylist() == list(range(6))
    assert waits["host_data_wait_ns"].to_pylist() == [int(s["data_wait_ns"]) for s in steps]
    assert all(int(s["end_ns"]) > int(s["start_ns"]) and int(s["data_wait_ns"]) > 0 for s in steps)
    with open(run / layout.HOST_DATA / layout.HOST_USAGE) as f:
        rows = list(csv.DictReader(f))
    assert rows and set(rows[0]) == {"ts_ns", "host.cpu_percent.process", "host.memory_rss_bytes.process"}
    assert float(rows[-1]["host.memory_rss_bytes.process"]) > 10e6


def test_l0_records_no_shapes_and_l1_does(tmp_path):
    shapes = {}
    for level in ("l0", "l1"):
        out = tmp_path / level
        result = perfsight("run", "-o", out, "-O", f"task_time={level}", "--", sys.executable,
                           script("train_tiny.py"), "2")
        assert result.returncode == 0, result.stderr
        [run] = run_dirs(out)
        ops = [e for e in trace_events(run) if e.get("cat") == "cpu_op"]
        shapes[level] = sum(1 for e in ops if "Input Dims" in e.get("args", {}))
        assert ops
    assert shapes["l0"] == 0 and shapes["l1"] > 0


def _installed_autostart_pth():
    import site

    for directory in [*site.getsitepackages(), site.getusersitepackages()]:
        if os.path.isfile(os.path.join(directory, "perfsight-autostart.pth")):
            return True
    return False


def test_perfsight_options_env_alone_profiles_an_unmodified_script(tmp_path):
    """PERFSIGHT_OPTIONS and nothing else: the installed perfsight-autostart.pth starts profiling."""
    if not _installed_autostart_pth():
        pytest.skip("perfsight is not pip-installed here (no perfsight-autostart.pth); scripts/test.sh installs it")
    env = {**os.environ, "PERFSIGHT_OPTIONS": json.dumps({"output": str(tmp_path / "env")})}
    result = subprocess.run([sys.executable, script("train_tiny.py"), "3"], env=env, capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stderr
    [run] = run_dirs(tmp_path / "env")
    assert manifest(run)["steps_collected"] == [0, 1, 2]
    assert manifest(run)["options_source"] == "PERFSIGHT_OPTIONS"
    assert result.stderr.count("perfsight: run collected in") == 1
    assert f"run collected in {run}: steps 0-2" in result.stderr


def test_a_bad_perfsight_options_is_said_once_per_process(tmp_path):
    """A venv's site runs the autostart .pth twice: the message was printed twice."""
    if not _installed_autostart_pth():
        pytest.skip("perfsight is not pip-installed here (no perfsight-autostart.pth); scripts/test.sh installs it")
    env = {**os.environ, "PERFSIGHT_OPTIONS": json.dumps({"strorage_limit": 300})}
    result = subprocess.run([sys.executable, "-c", "import torch; print('ran')"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.stdout == "ran\n"
    assert result.stderr == ("perfsight: PERFSIGHT_OPTIONS: unknown option 'strorage_limit'; did you mean "
                             "'storage_limit'?; profiling is off for this run\n")


def test_ms_profiler_options_need_start_true(tmp_path):
    from perfsight.launch.child import BOOT_DIR

    for start, expected in ((False, 0), (True, 1)):
        out = tmp_path / f"ms_{start}"
        env = {k: v for k, v in os.environ.items() if k != "PERFSIGHT_OPTIONS"}
        env["MS_PROFILER_OPTIONS"] = json.dumps({"start": start, "output_path": str(out)})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BOOT_DIR), env.get("PYTHONPATH")]))
        result = subprocess.run([sys.executable, script("train_tiny.py"), "2"], env=env, capture_output=True,
                                text=True, timeout=240)
        assert result.returncode == 0, result.stderr
        collected = len(run_dirs(out)) if out.exists() else 0
        assert collected == expected


def test_inference_script_gets_a_whole_run_profile(tmp_path):
    result = perfsight("run", "-o", tmp_path, "--", sys.executable, script("infer_tiny.py"))
    assert result.returncode == 0, result.stderr
    [run] = run_dirs(tmp_path)
    assert manifest(run)["status"] == "complete" and manifest(run)["steps_collected"] == []
    events = trace_events(run)
    assert sum(1 for e in events if e.get("name") == "aten::linear") == 10   # 5 calls x 2 layers
    analyse = perfsight("analyse", run)
    assert analyse.returncode == 0, analyse.stderr      # the whole run's profile: ProfilerStep#0 was cut
    assert ("no finished step: the profile covers the whole run, and its only step range (ProfilerStep#0) was cut"
            in " ".join(analyse.stdout.split()))
    scopes = open_run(run).scope_flops()["scope"].to_pylist()
    assert scopes and not any(scope.startswith("ProfilerStep") for scope in scopes)   # the profiler's, no scope


COMPILED_WITH_CHILDREN = """import subprocess, sys
import torch
torch.manual_seed(0)
model = torch.nn.Linear(16, 16)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
forward = torch.compile(model)
for step in range(4):
    optimizer.zero_grad()
    forward(torch.randn(8, 16)).sum().backward()
    optimizer.step()
subprocess.run([sys.executable, "-c", "print('child ran')"], check=True)
"""


def test_only_the_python_processes_that_import_torch_are_profiled(tmp_path):
    """torch.compile starts Python children (inductor's compile workers and its CPU-feature probes), and so may the
    script: each of them took 2.5 s to start a profiler and left a run folder with no steps (ten for a compiled
    Linear). Only the training is profiled now; the others start as plain Python."""
    train = tmp_path / "compiled.py"
    train.write_text(COMPILED_WITH_CHILDREN)
    result = perfsight("run", "-o", tmp_path / "prof", "--", sys.executable, train, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "child ran" in result.stdout
    [run] = run_dirs(tmp_path / "prof")
    assert manifest(run)["steps_collected"] == [0, 1, 2, 3]
    assert result.stderr.count("perfsight: run collected in") == 1, result.stderr


@pytest.mark.parametrize("flag, value, expected", [
    ("storage_limit", "100", "storage_limit"),
    ("strorage_limit", "300", "did you mean 'storage_limit'"),
    ("host_sys_usage_freq", "51", "host_sys_usage_freq"),
])
def test_bad_options_are_refused_before_the_script_starts(tmp_path, flag, value, expected):
    marker = tmp_path / "started"
    result = perfsight("run", "-o", tmp_path, "-O", f"{flag}={value}", "--", sys.executable, "-c",
                       f"open({str(marker)!r}, 'w')")
    assert result.returncode == 2
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists()


def test_script_exit_code_is_passed_through(tmp_path):
    result = perfsight("run", "-o", tmp_path, "--", sys.executable, "-c", "import sys; sys.exit(3)")
    assert result.returncode == 3


def test_trace_windows_cut_at_every_step_do_not_crash_the_training(tmp_path):
    """Regression: stepping the profiler inside the optimizer-step hook (inside torch's Optimizer.step
    range) crashed the process with SIGSEGV when a trace window was cut there."""
    result = perfsight("run", "-o", tmp_path, "--flush-every", "1", "--", sys.executable, script("train_tiny.py"), "30")
    assert result.returncode == 0, result.stderr[-2000:]
    [run] = run_dirs(tmp_path)
    assert manifest(run)["steps_collected"] == list(range(30))
    assert len(list((run / layout.HOST_DATA).glob(layout.TRACE_GLOB))) >= 30


def test_storage_limit_in_a_project_folder_ages_out_only_perfsights_old_windows(tmp_path):
    """`perfsight run --output . -O storage_limit=200` in a project folder: the user's dataset, script and
    notes (older than any run, 250 MB and more) stay; an older perfsight run grown past the limit loses its
    trace window; the new run keeps its own, and its collect.log says what was aged out."""
    project = tmp_path / "project"
    project.mkdir()
    user_files = {project / "dataset.bin": 250 << 20, project / "train.py": 0, project / "notes.txt": 0}
    for path, size in user_files.items():
        with open(path, "wb") as f:
            f.truncate(size)     # sparse: 250 MB on paper, nothing on the disk
        os.utime(path, (1_000_000, 1_000_000))
    args = ("run", "--output", ".", "-O", "storage_limit=200", "--steps", "1-1", "--", sys.executable,
            script("train_tiny.py"), "3")
    assert perfsight(*args, cwd=project).returncode == 0
    [old_run] = run_dirs(project)
    [old_window] = (old_run / layout.HOST_DATA).glob(layout.TRACE_GLOB)
    with open(old_window, "r+b") as f:
        f.truncate(250 << 20)    # the older run's window now holds more than the whole limit
    result = perfsight(*args, cwd=project)
    assert result.returncode == 0, result.stderr
    assert all(path.exists() and path.stat().st_size == size for path, size in user_files.items())
    new_run = next(run for run in run_dirs(project) if run != old_run)
    assert not old_window.exists() and (old_run / layout.MANIFEST).exists()
    assert len(list((new_run / layout.HOST_DATA).glob(layout.TRACE_GLOB))) == 1
    log = (new_run / layout.HOST_DATA / layout.COLLECT_LOG).read_text()
    assert f"storage_limit: aged out {old_window}" in log
    from perfsight.ingest.kineto.perfsight_run import read_run

    [warning] = json.loads(read_run(old_run).meta_dict()["parse_warnings"])
    assert warning.startswith("1 of the 1 trace windows the manifest lists are gone") and old_window.name in warning
