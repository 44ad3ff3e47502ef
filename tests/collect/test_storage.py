"""storage_limit ageing touches only the trace windows of run directories perfsight made (by their
manifest), oldest run first, never a collecting run's last window and never a file of the user's, of any
age, beside, inside or below the output folder."""
import json
import os
import socket

from perfsight.collect.storage import MB, MIN_FREE_BYTES, StorageGuard
from perfsight.core import layout

OLD = 1_000_000  # an mtime long before any run (1970): the oldest files of all are the user's
HOST = socket.gethostname()
DEAD_PID = 2 ** 22 + 12345  # above Linux's pid_max: no such process


def make_file(path, size, mtime=OLD):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)  # sparse: sizes count, the disk is not filled
    os.utime(path, (mtime, mtime))
    return path


def make_run(root, stamp, windows, *, status="complete", pid=DEAD_PID, size=MB, fmt="perfsight-run"):
    """A run directory as the collector writes it, its windows listed in the manifest (mtimes of now)."""
    run = root / f"PROF_20261125000000{int(stamp):03d}_{pid}_abcd1234"
    host = run / layout.HOST_DATA
    traces = [make_file(host / f"trace_{i:04d}.pt.trace.json", size, mtime=2_000_000_000 + i)
              for i in range(windows)]
    (run / layout.MANIFEST).write_text(json.dumps({
        "format": fmt, "status": status, "start_ns": int(stamp) * 10**9, "pid": pid, "host": HOST,
        "traces": [t.name for t in traces]}))
    return run, traces


def guard(root, limit_mb, free_mb=10_000):
    log = []
    return StorageGuard(root, limit_bytes=int(limit_mb * MB), log=log.append, free_bytes=lambda p: free_mb * MB), log


def user_files(project):
    """A user's project: dataset, code and notes older than any run, beside and inside the output folder."""
    return [make_file(project / "dataset.bin", 250 * MB), make_file(project / "train.py", 2000),
            make_file(project / "notes.txt", 300), make_file(project / "data" / "shard_0.bin", 50 * MB),
            make_file(project.parent / "beside_output.bin", 100 * MB)]


def test_only_perfsight_trace_windows_go_oldest_run_first_and_user_files_of_any_age_stay(tmp_path):
    root = tmp_path / "project"
    users = user_files(root)
    old_run, old_traces = make_run(root, "1", 2)
    new_run, new_traces = make_run(root, "2", 2, status="collecting", pid=os.getpid())
    inside_run = [make_file(old_run / "notes.txt", 10 * MB), make_file(old_run / layout.HOST_DATA / "mine.bin", MB),
                  make_file(old_run / layout.HOST_DATA / "trace_9999.pt.trace.json", MB)]  # not listed: not ours
    check, log = guard(root, limit_mb=1)
    removed = check.enforce()
    # every window but the collecting run's last goes, the older run's first
    assert removed == [*old_traces, new_traces[0]]
    assert new_traces[1].exists()
    assert all(path.exists() for path in users + inside_run)
    assert (old_run / layout.MANIFEST).exists() and (new_run / layout.MANIFEST).exists()
    assert [line.split()[3] for line in log[:3]] == [str(p) for p in removed]
    assert "no older trace window of perfsight's left" in log[-1]


def test_stops_as_soon_as_within_the_limit(tmp_path):
    _, traces = make_run(tmp_path, "1", 3)
    make_file(tmp_path / "big_user_file.bin", 500 * MB)
    check, _ = guard(tmp_path, limit_mb=2.5)  # 3 MB of windows and a manifest
    assert check.enforce() == [traces[0]]
    assert traces[1].exists() and traces[2].exists()


def test_directories_perfsight_cannot_prove_it_made_are_never_touched(tmp_path):
    msprof_run = tmp_path / "PROF_000001_20260101000000000_XYZ"  # msprof's own (no perfsight manifest)
    msprof_file = make_file(msprof_run / "host" / "data" / "trace_0000.pt.trace.json", 5 * MB)
    _, foreign = make_run(tmp_path, "1", 2, fmt="something-else")
    _, nested = make_run(tmp_path / "my_copies", "2", 1)  # a run one level down (the user put it there)
    no_manifest = make_file(tmp_path / "PROF_20260101000000000_1_ab" / layout.HOST_DATA / "trace_0000.pt.trace.json",
                            5 * MB)  # perfsight's name pattern, but no manifest proves it is perfsight's
    outside = make_file(tmp_path.parent / "outside_trace.pt.trace.json", 5 * MB)
    linked_run, linked = make_run(tmp_path, "3", 1)
    linked[0].unlink()
    linked[0].symlink_to(outside)            # a listed window that is a symlink: not perfsight's file
    make_file(linked_run / "user_notes.bin", 2 * MB)   # counts as the run's bytes, is not a window
    check, log = guard(tmp_path, limit_mb=1)
    assert check.enforce() == []
    assert all(p.exists() for p in [msprof_file, *foreign, outside, *nested, no_manifest])
    assert "no older trace window" in log[0]


def test_a_listed_name_that_leaves_host_data_is_ignored(tmp_path):
    run, _ = make_run(tmp_path, "1", 1)
    user = make_file(tmp_path / "trace_0000.pt.trace.json", 5 * MB)  # the user's, at the output root
    manifest = json.loads((run / layout.MANIFEST).read_text())
    manifest["traces"] = ["../../../trace_0000.pt.trace.json", "/etc/passwd"]
    (run / layout.MANIFEST).write_text(json.dumps(manifest))
    check, _ = guard(tmp_path, limit_mb=1)
    assert check.enforce() == []
    assert user.exists()


def test_low_free_disk_ages_out_old_windows_but_never_the_current_runs_last(tmp_path):
    """The seed's floor: <= 20 MB free ages out the oldest files even under the limit."""
    user = make_file(tmp_path / "dataset.bin", 100 * MB)
    _, current = make_run(tmp_path, "1", 3, status="collecting", pid=os.getpid())
    free = {"bytes": MIN_FREE_BYTES - MB // 2}
    log = []
    check = StorageGuard(tmp_path, limit_bytes=1000 * MB, log=log.append, free_bytes=lambda p: free["bytes"])
    assert check.enforce() == [current[0]]   # 19.5 MB + 1 MB freed > the 20 MB floor
    free["bytes"] = MB
    assert check.enforce() == [current[1]]
    assert check.enforce() == []             # only the current run's last window is left: it stays
    assert current[2].exists() and user.exists()
    assert sum("no older trace window" in line for line in log) == 1   # said once, not per window


def test_a_dead_collecting_run_loses_its_last_window_too_but_a_live_one_does_not(tmp_path):
    _, dead = make_run(tmp_path, "1", 1, status="collecting", pid=DEAD_PID)
    _, live = make_run(tmp_path, "2", 1, status="collecting", pid=os.getpid())
    check, _ = guard(tmp_path, limit_mb=1)
    assert check.enforce() == dead
    assert live[0].exists()


def test_unset_limit_is_ninety_percent_of_free_disk(tmp_path):
    import shutil

    check = StorageGuard.for_option(tmp_path, None, log=lambda m: None)
    free = shutil.disk_usage(tmp_path).free
    assert abs(check.limit_bytes - 0.9 * free) < 0.01 * free
    assert StorageGuard.for_option(tmp_path, 200, log=lambda m: None).limit_bytes == 200 * MB


def test_the_window_just_written_is_never_aged_out_even_when_its_run_is_closed_or_listed_twice(tmp_path):
    """The window a run just wrote stays (``keep``), whatever its manifest says: a run closed under it by
    another process, or a manifest of an earlier perfsight that listed one name several times."""
    run, traces = make_run(tmp_path, "1", 3)                  # complete: its last window is not protected
    manifest = json.loads((run / layout.MANIFEST).read_text())
    manifest["traces"] = [traces[0].name, traces[2].name, traces[1].name, traces[2].name]
    (run / layout.MANIFEST).write_text(json.dumps(manifest))
    check, _ = guard(tmp_path, limit_mb=0.5)
    assert check.enforce(keep=traces[2]) == [traces[0], traces[1]]      # each once, in the order listed
    assert traces[2].exists()
