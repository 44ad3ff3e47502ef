"""A damaged rank never brings a job down: a rank file cut at half its bytes is read around and named in the
report (with the verdicts that name it said to rest on incomplete data), a rank that cannot be read at all is
left out and named (by analyse, cluster and compare), a rank file that is a FIFO is named and never opened,
``--workers`` is capped at what the machine holds, and two runs into one output take turns."""
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from perfsight.analysis.rank_spread import HIGHER, rank_spread
from perfsight.core.errors import InputError
from perfsight.mapreduce import holding_store
from perfsight.mapreduce.engines import LocalPool, engine_for, machine_workers

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import jobgen  # noqa: E402  (bench/ is scripts, imported as a sibling)

CUT_WARNING = "rank2.pt.trace.json: truncated or malformed JSON after byte"
#: the planted slow rank's lateness per collective: well beyond the noise of a 222 ms step
SLOW_DELAY_NS = 5_000_000


@pytest.fixture(scope="module")
def cut_job(tmp_path_factory, shared_data) -> Path:
    """A generated 4-rank GPU job (rank 0 planted slow) whose rank 2 file is cut at half its bytes (its
    baseTimeNanoseconds, at the file's end, is lost with the rest: its clock is then far from the others')."""
    folder = tmp_path_factory.mktemp("cut_job") / "job"
    jobgen.generate("gpu", 4, folder, seed=3, ranks_per_node=2, lean=True, steps=2, slow_delay_ns=SLOW_DELAY_NS,
                    data=shared_data)
    (folder / "answers.json").unlink()
    cut = folder / "rank2.pt.trace.json"
    cut.write_bytes(cut.read_bytes()[:cut.stat().st_size // 2])
    return folder


def perfsight(*args, timeout=120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "perfsight", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def test_a_rank_cut_at_half_is_read_around_and_named_by_cluster_and_analyse(cut_job, tmp_path):
    result = perfsight("cluster", "-d", cut_job, "-o", tmp_path / "out")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "4 ranks (4 done, 0 cached, 0 failed)" in result.stdout
    assert f"rank 2 read around damage, its figures cover what was read: {CUT_WARNING}" in result.stdout
    result = perfsight("analyse", cut_job, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ranks"] == [0, 1, 2, 3]
    assert any(warning.startswith(f"rank 2: {CUT_WARNING}") for warning in report["warnings"])


def test_the_verdicts_say_a_damaged_ranks_data_is_incomplete(cut_job):
    """Rank 2 lost the later half of its collectives; the planted straggler (rank 0, the generator's slow rank,
    arriving last everywhere) is still found from the arrivals the others recorded, and the verdict says rank
    2's data is incomplete."""
    import perfsight as api

    run = api.open(cut_job)
    [slowest] = run.slowest_rank().to_pylist()
    assert slowest["straggler_rank"] == 0
    assert slowest["reason"].endswith("; the data of rank 2 is incomplete (read around damage, or files lacking: "
                                      "see the warnings): the ranks are compared on what was read")
    assert [row["rank"] for row in run.rank_lacks().to_pylist() if row["damage"]] == [2]


def test_the_spread_of_a_clock_offset_beyond_float_precision_is_summarised_not_refused():
    """A rank whose trace lost its baseTimeNanoseconds is ~1.7e18 ns from the others: beyond 2**53, where an
    exact float cast refuses the value (ArrowInvalid)."""
    offsets = pa.table({"rank": pa.array([1, 2], pa.int32()),
                        "offset_ns": pa.array([5_478_467, -1_711_964_645_529_213_952])})
    [row] = rank_spread(offsets, {"offset_ns": HIGHER}).to_pylist()
    assert row["min"] == pytest.approx(-1.711964645529214e18) and row["max"] == 5_478_467.0
    assert (row["slowest_rank"], row["fastest_rank"]) == (1, 2)


def test_a_rank_that_cannot_be_read_or_is_a_fifo_is_left_out_and_named(cut_job, tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    for rank in (0, 1):
        (job / f"rank{rank}.pt.trace.json").write_bytes((cut_job / f"rank{rank}.pt.trace.json").read_bytes())
    (job / "rank3.pt.trace.json").write_text("not a trace")
    os.mkfifo(job / "rank5.pt.trace.json")              # opened for reading, it would wait for a writer forever
    result = perfsight("analyse", job, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ranks"] == [0, 1]
    assert f"rank3.pt.trace.json not read: {job / 'rank3.pt.trace.json'}: not JSON" in " ".join(report["warnings"])
    assert "rank5.pt.trace.json not read: a FIFO (named pipe), not a regular file" in report["warnings"]
    result = perfsight("cluster", "-d", job, "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert "3 ranks (2 done, 0 cached, 1 failed)" in result.stdout
    assert f"failed: {job / 'rank3.pt.trace.json'}: " in result.stdout
    assert "warning: rank5.pt.trace.json not read: a FIFO (named pipe), not a regular file" in result.stdout
    result = perfsight("compare", cut_job, job, "--json")            # compare names them as analyse does
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["base_not_read"] == [] and report["new_not_read"] == [
        f"rank3.pt.trace.json not read: {job / 'rank3.pt.trace.json'}: not JSON; expected a Chrome-trace JSON object "
        'with "traceEvents" or a JSON list of trace events',
        "rank5.pt.trace.json not read: a FIFO (named pipe), not a regular file"]


def test_workers_are_capped_at_what_the_machine_holds_and_a_huge_number_is_an_error():
    pool = LocalPool(1000)
    assert pool.workers == machine_workers() < 1000
    assert pool.description == f"local pool, {pool.workers} workers (1,000 asked: capped at what this machine holds)"
    with pytest.raises(InputError, match=r"--workers 10+: the number of worker processes must be a whole number "
                                         r"from 1 to 65,536"):
        engine_for(ray=False, workers=10 ** 30)
    result = perfsight("cluster", "-d", ".", "--workers", str(10 ** 30))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "must be a whole number from 1 to 65,536" in result.stderr


def test_a_second_run_into_the_same_output_waits_for_the_first(tmp_path):
    """The first holds the store (a process of its own, until told to let go); the second says why it waits,
    and gets the store only once the first let go."""
    release = tmp_path / "release"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time, pathlib\nfrom perfsight.mapreduce import holding_store\n"
         f"with holding_store(pathlib.Path({str(tmp_path)!r})):\n    print('held', flush=True)\n"
         f"    while not pathlib.Path({str(release)!r}).exists(): time.sleep(0.01)\n"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    try:
        assert holder.stdout.readline() == "held\n"
        said, got = [], threading.Event()

        def second():
            with holding_store(tmp_path, said.append):
                got.set()
        waiting = threading.Thread(target=second)
        waiting.start()
        while not said:             # it says so before it blocks
            waiting.join(0.01)
        assert said == [f"another perfsight run (pid {holder.pid}) is using {tmp_path / 'perfsight_cluster'}; "
                        "waiting for it to finish"] and not got.is_set()
        release.touch()
        waiting.join(60)
        assert got.is_set()
    finally:
        release.touch()
        holder.wait(60)
