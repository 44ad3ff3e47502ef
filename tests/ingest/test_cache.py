"""The Parquet cache beside a run: same tables back, invalidated by a change, never half-written."""
import os
import shutil

from perfsight import ingest
from perfsight.ingest import cache

TRACE = "kineto/generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz"


def test_cached_tables_equal_the_parsed_ones_and_a_change_invalidates(shared_data, tmp_path):
    trace = tmp_path / "t.pt.trace.json.gz"
    shutil.copy(shared_data / TRACE, trace)
    [run] = ingest.find_runs(trace)
    parsed = ingest.load(run)
    cached = cache.read(run.cache_dir, run.sources())           # waits for the write made in the background
    assert run.cache_dir.is_dir() and (run.cache_dir / cache.FINGERPRINT).is_file()
    for name, table in parsed.items():
        assert getattr(cached, name).equals(table), name
    os.utime(trace, ns=(1, 1))                                  # the source changed: the cache is stale
    assert cache.read(run.cache_dir, run.sources()) is None
    assert ingest.load(run).slices.equals(parsed.slices)       # parsed again, and cached again
    assert cache.read(run.cache_dir, run.sources()) is not None
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
    from perfsight.ingest import progress

    trace = tmp_path / "t.pt.trace.json.gz"
    shutil.copy(shared_data / TRACE, trace)
    [run] = ingest.find_runs(trace)
    seen = []
    with progress.reporting(seen.append):
        ingest.load(run, use_cache=False)
    assert sum(seen) == trace.stat().st_size and len(seen) >= 1
    progress.advance(10)                                        # nobody listening: nothing happens
