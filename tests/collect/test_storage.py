import os

from perfsight.collect.storage import MB, StorageGuard


def make_file(path, size, mtime):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (mtime, mtime))
    return path


def test_oldest_files_go_first_until_under_the_limit(tmp_path):
    old = make_file(tmp_path / "PROF_a" / "host" / "data" / "trace_0000.pt.trace.json", 2 * MB, 1000)
    mid = make_file(tmp_path / "PROF_a" / "host" / "data" / "trace_0001.pt.trace.json", 2 * MB, 2000)
    new = make_file(tmp_path / "PROF_b" / "host" / "data" / "trace_0000.pt.trace.json", 2 * MB, 3000)
    manifest = make_file(tmp_path / "PROF_b" / "manifest.json", 10, 1)
    log = []
    guard = StorageGuard(tmp_path, limit_bytes=4 * MB + 10, keep=manifest, log=log.append,
                         free_bytes=lambda p: 10_000 * MB)
    assert guard.enforce() == [old]
    assert not old.exists() and mid.exists() and new.exists() and manifest.exists()
    assert "aged out" in log[0] and str(old) in log[0]


def test_low_free_disk_ages_out_even_under_the_limit(tmp_path):
    a = make_file(tmp_path / "a.json", MB, 1)
    b = make_file(tmp_path / "b.json", MB, 2)
    free = {"bytes": 19 * MB + MB // 2}
    guard = StorageGuard(tmp_path, limit_bytes=1000 * MB, keep=tmp_path / "manifest.json", log=lambda m: None,
                         free_bytes=lambda p: free["bytes"])
    assert guard.enforce() == [a]          # 19.5 MB + 1 MB freed > the 20 MB floor
    assert b.exists()


def test_manifests_are_never_aged_out(tmp_path):
    manifest = make_file(tmp_path / "PROF_x" / "manifest.json", 5 * MB, 1)
    guard = StorageGuard(tmp_path, limit_bytes=1 * MB, keep=tmp_path / "other", log=lambda m: None,
                         free_bytes=lambda p: 10_000 * MB)
    assert guard.enforce() == []
    assert manifest.exists()


def test_unset_limit_is_ninety_percent_of_free_disk(tmp_path):
    import shutil

    guard = StorageGuard.for_option(tmp_path, None, tmp_path / "m", log=lambda m: None)
    free = shutil.disk_usage(tmp_path).free
    assert abs(guard.limit_bytes - 0.9 * free) < 0.01 * free
    assert StorageGuard.for_option(tmp_path, 200, tmp_path / "m", log=lambda m: None).limit_bytes == 200 * MB
