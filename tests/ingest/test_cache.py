"""The Parquet cache beside a run: same tables back, invalidated by a change (even one that keeps the size and
mtime), never served from a foreign file, shared by every name of the trace, and never deleting what it did not
write."""
import os
import shutil
import stat

import pytest

from perfsight import ingest
from perfsight.ingest import cache

TRACE = "kineto/generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz"


def cached(run: ingest.RunSource):
    """The run's cached tables, or None when its cache is not valid (waits for a write in the background)."""
    return cache.read(run.cache_dir, cache.fingerprint(run.sources()))


def test_cached_tables_equal_the_parsed_ones_and_a_change_invalidates(shared_data, tmp_path):
    trace = tmp_path / "t.pt.trace.json.gz"
    shutil.copy(shared_data / TRACE, trace)
    [run] = ingest.find_runs(trace)
    parsed = ingest.load(run)
    tables = cached(run)                                        # waits for the write made in the background
    assert run.cache_dir.is_dir() and (run.cache_dir / cache.FINGERPRINT).is_file()
    for name, table in parsed.items():
        assert getattr(tables, name).equals(table), name
    os.utime(trace, ns=(1, 1))                                  # the source changed: the cache is stale
    assert cached(run) is None
    assert ingest.load(run).slices.equals(parsed.slices)       # parsed again, and cached again
    assert cached(run) is not None
    assert cache.clear(run.cache_dir) and not run.cache_dir.exists()


def test_a_read_only_place_still_loads_without_a_cache(shared_data, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    shutil.copy(shared_data / TRACE, folder / "t.pt.trace.json.gz")
    folder.chmod(0o555)
    try:
        [run] = ingest.find_runs(folder / "t.pt.trace.json.gz")
        assert ingest.load(run).slices.num_rows > 0
        cache.wait()
        assert not run.cache_dir.exists()                         # not even as root: the folder says read-only
        assert not list(folder.glob("*.tmp*"))
    finally:
        folder.chmod(0o755)


def test_reading_reports_every_raw_byte_to_a_progress_listener(shared_data, tmp_path):
    from perfsight.ingest.common import progress

    trace = tmp_path / "t.pt.trace.json.gz"
    shutil.copy(shared_data / TRACE, trace)
    [run] = ingest.find_runs(trace)
    seen = []
    with progress.reporting(seen.append):
        ingest.load(run, use_cache=False)
    assert sum(seen) == trace.stat().st_size and len(seen) >= 1
    progress.advance(10)                                        # nobody listening: nothing happens


def test_a_cache_being_written_is_hidden_from_a_search_of_its_folder(write_trace, monkeypatch):
    """Another process listing the folder mid-write (insight, a second CLI, a test worker) must not take the
    half-written cache for a run of its own or trip over it vanishing."""
    from perfsight.ingest import registry

    trace = write_trace([{"ph": "X", "cat": "cpu_op", "name": "aten::aa", "pid": 1, "tid": 1, "ts": 1, "dur": 1}])
    [run] = ingest.find_runs(trace)
    seen_mid_write = []
    write_table = cache.pq.write_table
    monkeypatch.setattr(cache.pq, "write_table", lambda table, path, **kwargs: (
        seen_mid_write.append([entry.name for entry in trace.parent.iterdir()
                               if entry.is_dir() and registry.searched(entry.name)]),
        write_table(table, path, **kwargs)))
    assert cache.write(run.cache_dir, cache.fingerprint(run.sources()), ingest.load(run, use_cache=False))
    assert seen_mid_write and all(searched == [] for searched in seen_mid_write)
    assert run.cache_dir.is_dir()


def test_a_trace_rewritten_with_its_old_size_and_mtime_is_parsed_again(write_trace):
    trace = write_trace([{"ph": "X", "cat": "cpu_op", "name": "aten::aa", "pid": 1, "tid": 1, "ts": 1, "dur": 1}])
    [run] = ingest.find_runs(trace)
    assert ingest.load(run).slices["name"].to_pylist() == ["aten::aa"]
    cache.wait()
    status = trace.stat()
    trace.write_bytes(trace.read_bytes().replace(b"aten::aa", b"aten::bb"))
    os.utime(trace, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert trace.stat().st_size == status.st_size and trace.stat().st_mtime_ns == status.st_mtime_ns
    assert ingest.load(run).slices["name"].to_pylist() == ["aten::bb"]


def test_a_parquet_file_copied_in_from_another_cache_is_refused(write_trace):
    def load(name: str):
        [run] = ingest.find_runs(write_trace([{"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1,
                                                "ts": 1, "dur": 1}], name=f"{name}.pt.trace.json"))
        return run, ingest.load(run).slices["name"].to_pylist()

    (first, first_names), (second, _) = load("first"), load("second")
    cache.wait()
    shutil.copy(second.cache_dir / "slices.parquet", first.cache_dir / "slices.parquet")
    assert ingest.load(first).slices["name"].to_pylist() == first_names == ["first"]


def test_the_same_trace_by_a_relative_and_an_absolute_path_is_parsed_once(shared_data, tmp_path, monkeypatch):
    shutil.copy(shared_data / TRACE, tmp_path / "t.pt.trace.json.gz")
    monkeypatch.chdir(tmp_path)
    reads = []
    parse = ingest.RunSource.read
    monkeypatch.setattr(ingest.RunSource, "read", lambda run: reads.append(run.path) or parse(run))
    [relative] = ingest.find_runs("t.pt.trace.json.gz")
    [absolute] = ingest.find_runs(tmp_path / "t.pt.trace.json.gz")
    parsed = ingest.load(relative)
    assert ingest.load(absolute).slices.equals(parsed.slices)
    assert ingest.load(relative).slices.equals(parsed.slices)
    assert reads == [relative.path]                             # the second and third are served from the cache


@pytest.mark.timeout(60, method="thread")                      # a read that opens the FIFO never returns
@pytest.mark.parametrize("name", [cache.FINGERPRINT, "slices.parquet"])
def test_a_fifo_where_the_cache_has_a_file_is_no_cache_and_is_left_alone(shared_data, tmp_path, name):
    trace = tmp_path / "t.pt.trace.json.gz"
    shutil.copy(shared_data / TRACE, trace)
    [run] = ingest.find_runs(trace)
    parsed = ingest.load(run)
    cache.wait()
    (run.cache_dir / name).unlink()
    os.mkfifo(run.cache_dir / name)
    assert ingest.load(run).slices.equals(parsed.slices)
    cache.wait()
    assert stat.S_ISFIFO(os.lstat(run.cache_dir / name).st_mode)
    assert not cache.clear(run.cache_dir) and stat.S_ISFIFO(os.lstat(run.cache_dir / name).st_mode)


@pytest.mark.parametrize("link", [False, True])
def test_a_folder_of_the_users_where_the_cache_goes_is_left_alone(shared_data, tmp_path, link):
    trace = tmp_path / "t.pt.trace.json.gz"
    shutil.copy(shared_data / TRACE, trace)
    [run] = ingest.find_runs(trace)
    folder = tmp_path / "elsewhere" if link else run.cache_dir
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    (folder / cache.FINGERPRINT).write_text("{}")
    if link:
        run.cache_dir.symlink_to(folder)
    assert ingest.load(run).slices.num_rows > 0
    cache.wait()
    assert not cache.clear(run.cache_dir)
    assert (folder / "notes.txt").read_text() == "mine" and run.cache_dir.is_symlink() == link
    assert sorted(p.name for p in folder.iterdir()) == [cache.FINGERPRINT, "notes.txt"]
