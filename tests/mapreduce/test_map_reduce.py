"""``perfsight.mapreduce.analyse_job``: a job mapped rank by rank into Parquet summaries and reduced with DuckDB
gives the figures ``perfsight.open`` gives for the job read whole (the planted NCCL job with exact answers,
the shared 2-rank torch_npu jobs whose group-local ranks only the job's places map); a rank whose files did
not change is not read again; a rank that cannot be read is reported and the rest completes; a folder
perfsight did not make is never written into."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import perfsight
from perfsight import cli
from perfsight.analysis import cluster, cluster_outputs, collectives, waiting
from perfsight.core.errors import InputError, OutputError
from perfsight.core.memo import computed
from perfsight.ingest.common.reader import RunSource
from perfsight.ingest.kineto.reader import KinetoReader
from perfsight.mapreduce import STORE_FOLDER, WHOLE_JOB_RANKS, analyse_job
from perfsight.mapreduce import map as mapreduce_map
from perfsight.mapreduce.engines import TaskLost, engine_for
from perfsight.mapreduce.map import RANKS_FOLDER
from tests.analysis.planted_nccl_job import SHIFT_NS, write_nccl_job
from tests.views.export.test_ascend_export import writable_copy

#: every cross-rank analysis, compared between the two ways of reading a job
CROSS_RANK = [*(getattr(collectives, name) for name in (
    "clock_offsets", "collective_figures", "link_bandwidth", "collective_totals", "link_totals",
    "communication_matrix", "communication_pairs", "communication_groups", "slow_links")),
    *(getattr(waiting, name) for name in ("collective_arrivals", "rank_waits", "straggler", "rank_pace", "slow_ranks")),
    *(getattr(cluster, name) for name in ("mean_step_by_rank", "rank_breakdown", "slowest_rank", "rank_lacks")),
    *(getattr(cluster_outputs, name) for name in (
        "cluster_step_trace", "cluster_rank_devices", "cluster_communication_groups", "cluster_communication_time",
        "cluster_communication_bandwidth", "cluster_communication_matrix"))]


def serial():
    return engine_for(workers=1)


def same_figures(folder: Path) -> None:
    """Every cross-rank figure of ``folder``'s job is the same read whole and mapped rank by rank, but the slice
    ids: merged ranks' ids are shifted to stay unique across the job, a rank read alone keeps its own."""
    whole, mapped = perfsight.open(folder).job, analyse_job(folder, engine=serial()).job
    for analysis in CROSS_RANK:
        ours, theirs = computed(analysis, whole), computed(analysis, mapped)
        if "slice_id" in ours.column_names:
            ours, theirs = ours.drop_columns(["slice_id"]), theirs.drop_columns(["slice_id"])
        assert ours.num_rows and ours.to_pylist() == theirs.to_pylist(), analysis.__name__


def test_the_planted_job_mapped_gives_its_known_answers(tmp_path):
    folder = write_nccl_job(tmp_path / "job")
    job = analyse_job(folder, engine=serial())
    assert [(o.rank, o.status, o.error) for o in sorted(job.outcomes, key=lambda o: o.rank)] == [
        (0, "done", None), (1, "done", None)]
    offsets = computed(collectives.clock_offsets, job.job).to_pylist()
    assert [(r["rank"], r["offset_ns"], r["collectives_used"]) for r in offsets] == [(0, 0, 3), (1, SHIFT_NS, 3)]
    slow = [(r["process_group"], r["rank"]) for r in computed(waiting.slow_ranks, job.job).to_pylist() if r["slow"]]
    assert slow == [("pg0", 1)]
    totals = computed(collectives.collective_totals, job.job).to_pylist()
    waits = {(r["rank"], r["collective"]): r["wait_ns"] for r in totals}
    assert waits == {(0, "allreduce"): 900_000, (0, "send"): 50_000, (1, "allreduce"): 0, (1, "recv"): 0}
    same_figures(folder)


@pytest.mark.parametrize("batch_ranks", [mapreduce_map.BATCH_RANKS, 1], ids=["one batch", "a batch a rank"])
@pytest.mark.parametrize("kind", ["text", "db"])
def test_the_shared_torch_npu_job_mapped_is_the_job_read_whole(shared_data, tmp_path, kind, batch_ranks,
                                                                monkeypatch):
    """Its group's ranks are group-local in each rank's files (no parallel_group_info entry): only the job's
    places make them global, and the mapped job applies them as the merge does (the matrix's links and pairs
    between global ranks 0 and 1, the slow-link verdicts), whether its ranks are summarised in one batch or
    each in its own."""
    monkeypatch.setattr(mapreduce_map, "BATCH_RANKS", batch_ranks)
    folder = writable_copy(shared_data, f"ascend/torch_npu/{kind}/level1", tmp_path)
    same_figures(folder)
    pairs = computed(collectives.communication_pairs, analyse_job(folder, engine=serial()).job).to_pylist()
    assert {(p["src_rank"], p["dst_rank"]) for p in pairs} >= {(0, 1), (1, 0)}
    assert len(list((folder / STORE_FOLDER / RANKS_FOLDER).iterdir())) == (2 if batch_ranks == 1 else 1)


def test_a_rank_whose_files_did_not_change_is_not_read_again(tmp_path):
    folder = write_nccl_job(tmp_path / "job")
    analyse_job(folder, engine=serial())
    again = analyse_job(folder, engine=serial())
    assert sorted(o.status for o in again.outcomes) == ["cached", "cached"]
    trace = folder / "rank1.pt.trace.json"
    trace.write_text(trace.read_text().replace('"dur": 500.0', '"dur": 499.0', 1))
    changed = analyse_job(folder, engine=serial())
    assert {o.rank: o.status for o in changed.outcomes} == {0: "cached", 1: "done"}
    assert computed(collectives.clock_offsets, changed.job).to_pylist() == \
        computed(collectives.clock_offsets, perfsight.open(folder).job).to_pylist()


def test_a_rank_that_cannot_be_read_is_reported_and_the_rest_completes(tmp_path):
    folder = write_nccl_job(tmp_path / "job")
    shutil.copy(folder / "rank1.pt.trace.json", folder / "rank2.pt.trace.json")
    (folder / "rank2.pt.trace.json").write_text("not a trace at all")
    job = analyse_job(folder, engine=serial())
    outcomes = {Path(o.name).name: o for o in job.outcomes}
    assert (outcomes["rank2.pt.trace.json"].status, outcomes["rank2.pt.trace.json"].rank) == ("failed", None)
    assert "rank2.pt.trace.json" in outcomes["rank2.pt.trace.json"].error
    assert job.ranks == [0, 1] and job.counts == {"done": 2, "cached": 0, "failed": 1}
    assert computed(collectives.clock_offsets, job.job).column("rank").to_pylist() == [0, 1]


def test_two_sources_of_one_rank_keep_the_first(tmp_path):
    folder = write_nccl_job(tmp_path / "job")
    shutil.copy(folder / "rank1.pt.trace.json", folder / "rank1_copy.pt.trace.json")
    job = analyse_job(folder, engine=serial())
    failed = [(Path(o.name).name, o.error) for o in job.failed]
    assert failed == [("rank1_copy.pt.trace.json", f"rank 1 is also {folder / 'rank1.pt.trace.json'}'s")]
    assert job.ranks == [0, 1]


def test_a_folder_perfsight_did_not_make_is_never_written_into(tmp_path):
    folder = write_nccl_job(tmp_path / "job")
    mine = folder / STORE_FOLDER
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    with pytest.raises(OutputError, match=f"{mine} is not a folder perfsight made"):
        analyse_job(folder, engine=serial())
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_analyse_maps_a_job_of_more_ranks_than_it_merges(tmp_path, capsys, monkeypatch):
    """``perfsight analyse`` of a job of more than WHOLE_JOB_RANKS ranks compares its ranks from the mapped
    summaries (never merging them) and says how its ranks were read."""
    planted = write_nccl_job(tmp_path / "planted")
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in range(WHOLE_JOB_RANKS + 1):
        trace = json.loads((planted / f"rank{rank % 2}.pt.trace.json").read_text())
        trace["distributedInfo"]["rank"] = rank
        (folder / f"rank{rank}.pt.trace.json").write_text(json.dumps(trace))
    assert cli.main(["analyse", str(folder), "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["ranks"] == list(range(WHOLE_JOB_RANKS + 1)) and said["failed"] == []
    assert [row["rank"] for row in said["cluster"]["ranks"]] == said["ranks"]
    monkeypatch.setenv("COLUMNS", "200")                         # the report's lines whole, paths and all
    assert cli.main(["analyse", str(folder)]) == 0
    assert capsys.readouterr().out.startswith(f"{folder}: {WHOLE_JOB_RANKS + 1} ranks (0 done, "
                                              f"{WHOLE_JOB_RANKS + 1} cached, 0 failed) on ")


def test_a_rank_of_the_job_opens_alone(tmp_path, capsys, monkeypatch):
    """The drill-down from the job to one rank: its own tables only, in the API and named by the report."""
    folder = write_nccl_job(tmp_path / "job")
    job = analyse_job(folder, engine=serial())
    run = job.open_rank(1)
    assert run.ranks == [1] and run.path == folder / "rank1.pt.trace.json"
    with pytest.raises(InputError, match=r"rank 5 is not one of the job's ranks read \(0-1, 2 ranks\)"):
        job.open_rank(5)
    monkeypatch.setenv("COLUMNS", "200")                         # the report's lines whole, paths and all
    assert cli.main(["cluster", "-d", str(folder)]) == 0
    slowest = computed(cluster.slowest_rank, job.job).to_pylist()[0]["slowest_rank"]
    assert (f"the slowest rank alone (every analysis of its own tables): perfsight analyse "
            f"{folder / f'rank{slowest}.pt.trace.json'}") in " ".join(capsys.readouterr().out.split())


def test_a_batch_keeps_each_ranks_own_slice_ids(tmp_path):
    """The ranks of a batch are summarised together, side by side, but each operation's slice id is its rank's
    own: the id of that operation in the rank opened alone (the drill-down's key)."""
    folder = write_nccl_job(tmp_path / "job")
    job = analyse_job(folder, engine=serial())
    assert len(list((folder / STORE_FOLDER / RANKS_FOLDER).iterdir())) == 1      # both ranks in one batch
    for rank in (0, 1):
        alone = collectives.rank_operations(perfsight.open(folder / f"rank{rank}.pt.trace.json").tables)
        mapped = job.job.sql(f"SELECT slice_id FROM operations WHERE rank = {rank} ORDER BY slice_id")
        assert mapped["slice_id"].to_pylist() == sorted(alone["slice_id"].to_pylist()) != []


def test_two_sources_of_one_rank_in_two_batches_keep_the_first(tmp_path, monkeypatch):
    """A rank repeated in another batch: the batch holding the later source is stored again without it, so the
    rank is counted once."""
    monkeypatch.setattr(mapreduce_map, "BATCH_RANKS", 1)
    folder = write_nccl_job(tmp_path / "job")
    shutil.copy(folder / "rank1.pt.trace.json", folder / "rank1_copy.pt.trace.json")
    job = analyse_job(folder, engine=serial())
    assert [(Path(o.name).name, o.error) for o in job.failed] == [
        ("rank1_copy.pt.trace.json", f"rank 1 is also {folder / 'rank1.pt.trace.json'}'s")]
    assert job.ranks == [0, 1]
    assert job.job.sql("SELECT rank, count(*) AS n FROM rank_facts GROUP BY rank ORDER BY rank").to_pylist() == [
        {"rank": 0, "n": 1}, {"rank": 1, "n": 1}]
    clean = perfsight.open(write_nccl_job(tmp_path / "clean")).job
    for analysis in (collectives.collective_totals, waiting.rank_waits):
        assert computed(analysis, job.job).to_pylist() == computed(analysis, clean).to_pylist()


class _DyingOnBatches:
    """An engine whose worker dies on every batch of more than one rank (as a rank that kills its worker takes
    its batch down), and runs single ranks in this process."""

    description, workers = "test", 1

    def __init__(self):
        self.sizes: list[int] = []

    def map(self, function, items, on_result):
        for index, task in enumerate(items):
            self.sizes.append(len(task.sources))
            on_result(index, TaskLost(index, 3, "killed") if len(task.sources) > 1 else function(task))


def test_a_batch_whose_worker_died_is_mapped_again_rank_by_rank(tmp_path):
    folder = write_nccl_job(tmp_path / "job")
    engine = _DyingOnBatches()
    job = analyse_job(folder, engine=engine)
    assert engine.sizes == [2, 1, 1]
    assert [(Path(o.name).name, o.status) for o in job.outcomes] == [("rank0.pt.trace.json", "done"),
                                                                    ("rank1.pt.trace.json", "done")]
    same_figures(folder)


def test_batches_hold_at_most_their_ranks_and_bytes_in_order(tmp_path, monkeypatch):
    """Consecutive ranks, at most BATCH_RANKS of them and BATCH_BYTES of their files a batch; a rank larger than
    BATCH_BYTES is a batch alone."""
    monkeypatch.setattr(mapreduce_map, "BATCH_RANKS", 3)
    monkeypatch.setattr(mapreduce_map, "BATCH_BYTES", 100)
    sizes = [10, 10, 10, 10, 60, 50, 150, 10]
    sources = []
    for rank, size in enumerate(sizes):
        (tmp_path / f"rank{rank}.pt.trace.json").write_bytes(b" " * size)
        sources.append(RunSource(KinetoReader(), tmp_path / f"rank{rank}.pt.trace.json"))
    cut = mapreduce_map.batches(sources)
    assert [[sources.index(source) for source in batch] for batch in cut] == [[0, 1, 2], [3, 4], [5], [6], [7]]
