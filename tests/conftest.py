"""Shared test helpers: the real traces of ../shared/data, which every test reads from a copy (``SHARED_DATA``,
made once per session and read by all its xdist workers: caches land beside the copy, never in ../shared; a test
that writes more copies the folder it needs, ``copy_shared``), and the
summary-base-dirs the insight API and browser tests serve (``runs_dir``, ``flops_dir``), and a real perfsight
run made once per session (``perfsight_run``).

The suite needs ../shared/data beside the checkout: without it the run stops with an error instead of
skipping a third of the tests; and at its end it fails if anything under ../shared/data changed."""
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

REAL_SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
#: set by a session that runs xdist workers, "<its pid>:<its copy>": its workers read that one copy, so a trace one
#: of them parses is cached for all (perfsight's cache writes are safe for concurrent readers and writers)
COPY_OF_SESSION = "PERFSIGHT_TESTS_SHARED_COPY"


def _copy_of_my_session() -> Path | None:
    """The copy made by the session this process is an xdist worker of (its parent); None in any other process (a
    session a test starts inherits the variable but is not an xdist worker of the session that made the copy)."""
    session_pid, _, copy = os.environ.get(COPY_OF_SESSION, "").partition(":")
    return Path(copy) if "PYTEST_XDIST_WORKER" in os.environ and session_pid == str(os.getppid()) else None


WORKERS_COPY = _copy_of_my_session()
SHARED_DATA = WORKERS_COPY or Path(tempfile.gettempdir()) / f"perfsight-tests-shared-{os.getpid()}" / "data"
_SNAPSHOT: dict = {}


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and mtime (what a write there would change)."""
    listing = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(dirpath, name))
            listing[os.path.relpath(os.path.join(dirpath, name), root)] = (st.st_size, st.st_mtime_ns)
    return listing


def pytest_configure(config):
    from perfsight.core.tables import new_connection

    # two test processes per core (scripts/test.sh): DuckDB's own threads would only contend with the other test
    # processes, as with the cluster map's workers (mapreduce.map._worker_process); ~11% less CPU for the analyses
    # of real traces. The command-line tests' subprocesses keep DuckDB's default.
    new_connection().execute("SET threads TO 1")
    if not REAL_SHARED_DATA.is_dir():
        raise pytest.UsageError(f"the real traces the tests read are missing: {REAL_SHARED_DATA} must be beside the "
                                "checkout (../shared/data, as CI has it)")
    _SNAPSHOT.update(_listing(REAL_SHARED_DATA))
    if WORKERS_COPY:
        return
    shutil.rmtree(SHARED_DATA.parent, ignore_errors=True)
    shutil.copytree(REAL_SHARED_DATA, SHARED_DATA, symlinks=True)
    for dirpath, _dirs, _files in os.walk(SHARED_DATA):   # the copy is the tests' own: caches may go in it
        os.chmod(dirpath, os.stat(dirpath).st_mode | stat.S_IWUSR)
    os.environ[COPY_OF_SESSION] = f"{os.getpid()}:{SHARED_DATA}"


#: markers of the longest tests (training subprocesses, browsers, long runs): their files are handed out first
#: (``--dist loadfile`` hands files out in their collected order), so the suite does not end on one long file
#: running on one worker while the others idle
FIRST_MARKERS = ("e2e", "slow", "browser")


def pytest_collection_modifyitems(items):
    """The files holding a test marked with one of ``FIRST_MARKERS`` first, each in its collected order."""
    first = {item.path for item in items if any(item.get_closest_marker(marker) for marker in FIRST_MARKERS)}
    items.sort(key=lambda item: item.path not in first)


def pytest_sessionfinish(session, exitstatus):
    if not WORKERS_COPY:
        shutil.rmtree(SHARED_DATA.parent, ignore_errors=True)
    if _SNAPSHOT and _listing(REAL_SHARED_DATA) != _SNAPSHOT:
        changed = sorted(set(_listing(REAL_SHARED_DATA).items()) ^ set(_SNAPSHOT.items()))
        session.config.get_terminal_writer().line(
            f"FAILED: the tests changed {REAL_SHARED_DATA}, which they must only read (copies are in "
            f"conftest.SHARED_DATA): {', '.join(path for path, _ in changed[:10])}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def copy_shared(source: Path, destination: Path, *also_left_out: str) -> Path:
    """A test's own copy of the folder ``source`` of the shared data at ``destination``, without perfsight's caches
    (and the patterns ``also_left_out``): other test processes may be writing caches there while this one copies."""
    from perfsight.core import layout

    return Path(shutil.copytree(source, destination,
                                ignore=shutil.ignore_patterns(f"*{layout.CACHE_DIR}*", *also_left_out)))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    return SHARED_DATA


@pytest.fixture(scope="session")
def perfsight_run(tmp_path_factory) -> Path:
    """The run directory of a 4-step perfsight run (tiny MLP, DataLoader, memory and host sampling)."""
    from tests.analysis.planted_host import _train

    return _train(tmp_path_factory.mktemp("perfsight_run"))


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory, shared_data) -> Path:
    """A summary-base-dir shared by the page tests (copies: nothing is written beside ../shared/data):

    - ``perfsight/PROF_...``: a real 4-step perfsight run (tiny MLP, DataLoader, memory and host sampling);
    - ``gpu/df_index_resolver.json.gz``: the largest real GPU trace (53.7 MB of JSON);
    - ``cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz``: a torch 2.13 CPU trace with shapes, memory and stacks;
    - ``resnet50/worker0...pt.trace.json.gz``: a GPU ResNet-50 training trace (kineto_tb_plugin sample).
    """
    from tests.analysis.planted_host import CPU_TRACE, _train

    base = tmp_path_factory.mktemp("insight_runs")
    _train(base / "perfsight")
    kineto = shared_data / "kineto"
    for folder, source in (("gpu", kineto / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"),
                           ("cpu", shared_data / CPU_TRACE),
                           ("resnet50", next((kineto / "kineto_tb_plugin" / "samples" /
                                              "resnet50_num_workers_0").glob("*.pt.trace.json.gz")))):
        (base / folder).mkdir()
        shutil.copy(source, base / folder / source.name)
    return base


@pytest.fixture(scope="session")
def flops_dir(tmp_path_factory, shared_data) -> Path:
    """A summary-base-dir with the real torch 2.13 CPU trace (which carries no FLOPs) given torch's FLOPs
    of its matrix products (``flops`` = 2 x M x K x N on every aten::addmm, from its ``Input Dims``
    ``[[N], [M, K], [K, N]]``) and an A100 in ``deviceProperties``, so the FLOPs pages have numbers and a
    peak: ``cpu_flops/cpu_mlp_rs_mem_stack.pt.trace.json``."""
    import gzip
    import json

    from tests.analysis.planted_host import CPU_TRACE

    with gzip.open(shared_data / CPU_TRACE, "rt") as f:
        trace = json.load(f)
    for event in trace["traceEvents"]:
        if event.get("name") == "aten::addmm" and event.get("ph") == "X":
            (_, (m, k), (_, n), *_) = event["args"]["Input Dims"]
            event["args"]["flops"] = 2 * m * k * n
    trace["deviceProperties"] = [{"id": 0, "name": "NVIDIA A100-SXM4-40GB"}]
    base = tmp_path_factory.mktemp("insight_flops")
    (base / "cpu_flops").mkdir()
    (base / "cpu_flops" / "cpu_mlp_rs_mem_stack.pt.trace.json").write_text(json.dumps(trace))
    return base
