"""The suite's guards on ../shared/data (tests/conftest.py), run on a throwaway checkout: without the data the
run fails (it used to skip a third of the tests and pass), and a test that writes into it fails the run."""
import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).with_name("conftest.py")


def checkout(root: Path, test_body: str) -> Path:
    tests = root / "checkout" / "tests"
    tests.mkdir(parents=True)
    shutil.copy(CONFTEST, tests / "conftest.py")
    (tests / "test_one.py").write_text(f"def test_one(shared_data):\n    {test_body}\n")
    return tests


def pytest_in(tests: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           *options, str(tests)], capture_output=True, text=True, cwd=tests.parent, timeout=120)


def test_the_run_fails_without_the_shared_data(tmp_path):
    result = pytest_in(checkout(tmp_path, "assert shared_data.is_dir()"))
    assert result.returncode != 0
    assert "the real traces the tests read are missing" in result.stdout + result.stderr


def test_the_tests_read_a_copy_and_a_write_into_the_real_data_fails_the_run(tmp_path):
    (tmp_path / "shared" / "data" / "kineto").mkdir(parents=True)
    (tmp_path / "shared" / "data" / "kineto" / "t.json").write_text("{}")
    tests = checkout(tmp_path, "")                             # ../shared is beside this checkout
    (tests / "test_one.py").write_text(
        "def test_reads_a_copy(shared_data):\n"
        "    assert (shared_data / 'kineto' / 't.json').read_text() == '{}'\n"
        "    assert 'perfsight-tests-shared' in str(shared_data)\n"
        "    (shared_data / 'kineto' / 'cache.parquet').write_text('x')   # the copy is the tests' own\n")
    assert pytest_in(tests).returncode == 0
    (tests / "test_one.py").write_text(
        "from pathlib import Path\n"
        "def test_writes_the_real_data(shared_data):\n"
        "    (Path(__file__).resolve().parents[2] / 'shared' / 'data' / 'kineto' / 'x.perfsight_cache').mkdir()\n")
    result = pytest_in(tests)
    assert result.returncode == 1 and "the tests changed" in result.stdout and "x.perfsight_cache" in result.stdout


def test_the_workers_of_a_session_read_its_one_copy_and_it_is_removed_at_the_end(tmp_path):
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "shared" / "data" / "t.json").write_text("{}")
    tests = checkout(tmp_path, "")
    for name in ("test_one.py", "test_two.py"):                  # --dist loadfile: one file per worker
        (tests / name).write_text(
            "import os\n"
            "def test_reads(shared_data):\n"
            "    assert (shared_data / 't.json').read_text() == '{}'\n"
            f"    with open({str(tmp_path)!r} + '/seen_by_' + os.environ['PYTEST_XDIST_WORKER'], 'w') as f:\n"
            "        f.write(str(shared_data))\n")
    result = pytest_in(tests, "-n", "2", "--dist", "loadfile")
    assert result.returncode == 0, result.stdout + result.stderr
    seen = {path.name: Path(path.read_text()) for path in tmp_path.glob("seen_by_*")}
    assert sorted(seen) == ["seen_by_gw0", "seen_by_gw1"]
    assert len(set(seen.values())) == 1                           # both workers read one copy
    assert not next(iter(seen.values())).exists()                 # which the session removed when it ended
