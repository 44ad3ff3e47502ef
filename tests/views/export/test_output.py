"""Where `perfsight export` writes, and what it does when it cannot: special paths given as -dir or --output,
a file where a folder is expected, a read-only folder, a full disk, a user's file in the way. Each gives one
line of error (no traceback), exit code 2, and leaves the folder as it was."""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from perfsight import cli
from perfsight.ingest import cache
from tests.conftest import copy_shared

TRACE = "kineto/generated_torch213_cpu/cpu_mlp_plain.pt.trace.json.gz"


@pytest.fixture
def trace(shared_data, tmp_path):
    """A copy of a small real CPU trace (its exports go to perfsight_output/ beside it)."""
    (tmp_path / "run").mkdir()
    return Path(shutil.copy(shared_data / TRACE, tmp_path / "run"))


def listing(folder):
    """Every entry below ``folder`` (hidden ones too), a file with its size and mtime: equal listings, equal
    folders."""
    return {str(p.relative_to(folder)): "folder" if p.is_dir() else (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*")}


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("perfsight: error: ")
    return lines[0]


def fill_the_disk(monkeypatch, module, function):
    """Make ``module.function`` (the writer of some export files, given the path to write) write a few bytes
    there and then fail as a full disk does."""
    def full(*args):
        path = next(arg for arg in args if isinstance(arg, Path))
        with open(path, "ab") as f:
            f.write(b"Rank,partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    monkeypatch.setattr(module, function, full)


@pytest.mark.parametrize("kind, module, function, failing", [
    ("summary", "perfsight.views.export.summary", "write_rows", "op_summary_"),   # the trace has no steps
    ("timeline", "perfsight.views.export.timeline", "_write_trace", "msprof_"),
])
def test_disk_full_leaves_the_folder_as_it_was(trace, capsys, monkeypatch, kind, module, function, failing):
    assert cli.main(["export", kind, "-dir", str(trace)]) == 0        # an earlier export, which must stay as it is
    cache.wait()                                                      # with the cache it writes in the background
    out_dir = trace.parent / "perfsight_output" / "cpu_mlp_plain"
    before = listing(trace.parent)
    capsys.readouterr()
    fill_the_disk(monkeypatch, __import__(module, fromlist=[function]), function)
    assert cli.main(["export", kind, "-dir", str(trace)]) == 2
    error = one_line_error(capsys)
    assert "no space left on device" in error.lower()
    assert f"{out_dir}/{failing}" in error                        # names the file it could not write
    assert listing(trace.parent) == before                        # no partial, empty or temp file; earlier intact


def test_a_full_disk_reported_by_duckdb_itself(trace, capsys, monkeypatch):
    """The kernel's own ENOSPC, met by DuckDB while it writes a summary file (its temp file is /dev/full)."""
    from perfsight.views.export import output

    reserve = output.Staging._reserve

    def on_a_full_disk(self, final):
        temp = reserve(self, final)
        if final.name.startswith("op_summary_"):
            temp.unlink()
            temp.symlink_to("/dev/full")
        return temp
    monkeypatch.setattr(output.Staging, "_reserve", on_a_full_disk)
    assert cli.main(["export", "summary", "-dir", str(trace)]) == 2
    error = one_line_error(capsys)
    assert "op_summary_" in error and "no space left on device" in error.lower()
    assert not (trace.parent / "perfsight_output").exists()      # the folders it had created are gone again


@pytest.mark.timeout(60)
@pytest.mark.parametrize("special", ["/dev/null", "fifo"])
def test_a_special_file_as_dir(tmp_path, capsys, special):
    path = special
    if special == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    assert cli.main(["export", "timeline", "-dir", path]) == 2
    error = one_line_error(capsys)
    assert path in error
    assert ("a character device" if special == "/dev/null" else "a FIFO") in error
    assert "not a file or directory; expected a PROF_ directory" in error


@pytest.mark.timeout(60)
@pytest.mark.parametrize("target", ["/dev/null", "fifo", "file"])
def test_a_special_file_or_a_file_as_output(trace, tmp_path, capsys, target):
    path = target
    if target == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    elif target == "file":
        path = str(tmp_path / "notes.txt")
        (tmp_path / "notes.txt").write_text("mine")
    before = listing(tmp_path)
    assert cli.main(["export", "summary", "-dir", str(trace), "--output", path]) == 2
    error = one_line_error(capsys)
    kind = {"/dev/null": "a character device", "fifo": "a FIFO (named pipe)", "file": "a regular file"}[target]
    assert f"--output {path}: is {kind}, not a folder" in error
    assert listing(tmp_path) == before


def test_a_file_where_the_run_output_folder_goes(trace, capsys):
    (trace.parent / "perfsight_output").write_text("a user's notes")
    assert cli.main(["export", "summary", "-dir", str(trace)]) == 2
    error = one_line_error(capsys)
    assert f"{trace.parent / 'perfsight_output'}: is a regular file, not a folder (the export goes into " in error
    assert (trace.parent / "perfsight_output").read_text() == "a user's notes"


def test_a_read_only_output_folder(trace, tmp_path, capsys):
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    read_only.chmod(0o555)                  # read-only even for root: perfsight respects the missing write bits
    try:
        assert cli.main(["export", "summary", "-dir", str(trace), "--output", str(read_only)]) == 2
        error = one_line_error(capsys)
        assert str(read_only) in error and "read-only" in error and "--output DIR" in error
        assert list(read_only.iterdir()) == []
    finally:
        read_only.chmod(0o755)


@pytest.mark.parametrize("name", ["README.txt", "prof_rule_0.json"])
def test_a_users_file_is_never_overwritten(trace, capsys, name):
    out_dir = trace.parent / "perfsight_output" / "cpu_mlp_plain"
    out_dir.mkdir(parents=True)
    (out_dir / name).write_text("the user's own file")
    before = listing(out_dir)
    assert cli.main(["export", "summary", "-dir", str(trace)]) == 2
    error = one_line_error(capsys)
    assert f"{out_dir / name}: exists and perfsight did not write it" in error
    assert listing(out_dir) == before


def test_perfsight_replaces_its_own_fixed_name_files_but_not_once_a_user_changed_them(trace, capsys):
    out_dir = trace.parent / "perfsight_output" / "cpu_mlp_plain"
    assert cli.main(["export", "summary", "-dir", str(trace)]) == 0
    assert cli.main(["export", "summary", "-dir", str(trace)]) == 0    # README.txt and prof_rule_0.json: its own
    assert len(list(out_dir.glob("op_summary_*.csv"))) == 2       # the earlier export's files stay
    readme = out_dir / "README.txt"
    readme.write_text(readme.read_text() + "my notes\n")
    capsys.readouterr()
    assert cli.main(["export", "summary", "-dir", str(trace)]) == 2
    assert f"{readme}: exists and perfsight did not write it (or it was changed since)" in one_line_error(capsys)
    assert readme.read_text().endswith("my notes\n")
    assert len(list(out_dir.glob("op_summary_*.csv"))) == 2


def test_an_export_folder_of_an_earlier_perfsight_is_exported_into_again(trace, capsys):
    """Before the ledger, perfsight wrote README.txt and prof_rule_0.json without recording them: known by their
    content (perfsight's title, the advisor's findings), they are replaced; a user's look-alike is not."""
    import json

    out_dir = trace.parent / "perfsight_output" / "cpu_mlp_plain"
    out_dir.mkdir(parents=True)
    (out_dir / "README.txt").write_text("perfsight export output\n=======================\nan earlier text\n")
    (out_dir / "prof_rule_0.json").write_text(json.dumps([{"Rule": "amp_unused", "Severity": "low", "Title": "x"}]))
    assert cli.main(["export", "summary", "-dir", str(trace)]) == 0
    assert "an earlier text" not in (out_dir / "README.txt").read_text()
    for path in out_dir.iterdir():
        path.unlink()
    (out_dir / "prof_rule_0.json").write_text(json.dumps([{"my": "notes"}]))   # no ledger, and not the advisor's
    capsys.readouterr()
    assert cli.main(["export", "summary", "-dir", str(trace)]) == 2
    assert f"{out_dir / 'prof_rule_0.json'}: exists and perfsight did not write it" in one_line_error(capsys)


def test_runs_two_levels_down(shared_data, tmp_path, capsys):
    """`export summary -dir runs` with runs/<job>/PROF_* (msprof's own PROF_ directories) and a trace three
    levels down exports each of them."""
    runs = tmp_path / "runs"
    prof = shared_data / "ascend/mindspore_legacy/profiler/PROF_000001_20230818142704322_COJGGGCANRMICFBC"
    for job in ("job_a", "job_b"):
        copy_shared(prof, runs / job / prof.name)
    for path in runs.rglob("*"):
        path.chmod(path.stat().st_mode | 0o200)                  # the shared data is read-only
    (runs / "job_c" / "rank0").mkdir(parents=True)
    shutil.copy(shared_data / TRACE, runs / "job_c" / "rank0")
    assert cli.main(["export", "summary", "-dir", str(runs)]) == 0
    printed = capsys.readouterr().out
    for job in ("job_a", "job_b"):
        assert f"{runs / job / prof.name}:" in printed
        assert list((runs / job / prof.name / "perfsight_output").glob("op_summary_*.csv"))
    assert list((runs / "job_c" / "rank0" / "perfsight_output").rglob("op_summary_*.csv"))


def test_a_folder_without_runs_anywhere_below(tmp_path, capsys):
    (tmp_path / "empty" / "deeper").mkdir(parents=True)
    assert cli.main(["export", "summary", "-dir", str(tmp_path / "empty")]) == 2
    assert "holds no run perfsight can read" in one_line_error(capsys)


def test_timeline_and_json_summary_in_one_export(shared_data, tmp_path):
    """As Profiler.analyse exports: both kinds with one stamp, every file under its own name."""
    from perfsight.views.export import export

    trace = shutil.copy(shared_data / "kineto/hta/trace_filter/sampled_rank-0.json.gz", tmp_path)
    [files] = export(trace, timeline=True, summary=True, fmt="json").values()
    names = [p.name for p in files]
    assert len(set(names)) == len(names) and all(p.is_file() for p in files)
    stamp = names[0].removeprefix("msprof_").removesuffix(".json")
    assert {f"task_time_{stamp}.json", f"task_time_summary_{stamp}.json", "msprof_tx.json",
            "msprof_tx_summary.json", f"step_trace_{stamp}.json", f"step_trace_summary_{stamp}.json"} <= set(names)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["README.txt", ".perfsight_export_files.json"])
def test_a_fifo_in_the_output_folder_neither_hangs_nor_is_replaced(trace, capsys, name):
    out_dir = trace.parent / "perfsight_output" / "cpu_mlp_plain"
    out_dir.mkdir(parents=True)
    os.mkfifo(out_dir / name)
    assert cli.main(["export", "summary", "-dir", str(trace)]) == 2
    assert f"{out_dir / name}: " in one_line_error(capsys)
    assert [p.name for p in out_dir.iterdir()] == [name] and (out_dir / name).is_fifo()
