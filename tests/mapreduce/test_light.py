"""``perfsight cluster --light``: each torch_npu rank read from its profiler info and ``detect.CLUSTER_FILES``
only (``Reader.light``), the files msprof-analyze's cluster mode reads. A light read is the folder read whole
as if it held nothing else (the same figures as a copy pruned to those files), finds a generated job's
planted slow rank, slow link and clock offsets as the whole read does, takes its steps from
step_trace_time.csv (torch_npu's device step, not the host's ProfilerStep span: the one figure that differs),
leaves no run cache in the user's rank folders and stores its summaries apart from the whole read's."""
from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from perfsight import cli
from perfsight.analysis import cluster, collectives
from perfsight.core import layout
from perfsight.core.memo import computed
from perfsight.ingest import find_runs
from perfsight.ingest.ascend.detect import CLUSTER_FILES, OUTPUT_DIR, TEXT_FILES
from perfsight.mapreduce import analyse_job
from perfsight.mapreduce.engines import engine_for
from tests.bench.test_jobgen import _found, jobgen
from tests.mapreduce.test_job_at_scale import Mapped
from tests.mapreduce.test_map_reduce import CROSS_RANK
from tests.views.export.test_ascend_export import writable_copy


def serial():
    return engine_for(workers=1)


def pruned(folder: Path, target: Path) -> Path:
    """A copy of the job at ``folder`` whose rank folders hold only their profiler info and CLUSTER_FILES."""
    for rank_folder in sorted(folder.glob("*_ascend_pt")):
        (target / rank_folder.name / OUTPUT_DIR).mkdir(parents=True)
        for info in rank_folder.glob("profiler_*.json"):
            shutil.copy(info, target / rank_folder.name)
        for name in CLUSTER_FILES:
            shutil.copy(rank_folder / OUTPUT_DIR / name, target / rank_folder.name / OUTPUT_DIR)
    return target


def test_a_light_read_is_the_folder_pruned_to_the_cluster_files(shared_data, tmp_path):
    folder = writable_copy(shared_data, "ascend/torch_npu/text/level1", tmp_path)
    light = analyse_job(folder, engine=serial(), output=tmp_path / "light", light=True)
    whole_of_pruned = analyse_job(pruned(folder, tmp_path / "pruned"), engine=serial(), output=tmp_path / "p")
    assert light.light and light.ranks == whole_of_pruned.ranks == [0, 1]
    unread = sorted(set(TEXT_FILES) - set(CLUSTER_FILES))
    for analysis in CROSS_RANK:
        ours, theirs = computed(analysis, light.job), computed(analysis, whole_of_pruned.job)
        if analysis is cluster.rank_lacks:       # the pruned copy lacks the other files; a light read leaves them
            assert ours.column("lacking_files").to_pylist() == [[], []]
            assert [sorted(files) for files in theirs.column("lacking_files").to_pylist()] == [unread, unread]
            # and what lacking them costs: its steps and communication from the cluster files
            lacks = "no kernel_details.csv, no trace_view.json: no kernels or operators; steps from " \
                    "step_trace_time.csv, communication from communication.json"
            assert [[w for w in warnings if w != lacks] for warnings in theirs.column("warnings").to_pylist()] \
                == ours.column("warnings").to_pylist()
            ours, theirs = (table.drop_columns(["lacking_files", "warnings"]) for table in (ours, theirs))
        if analysis is cluster.slowest_rank:     # and the verdicts say the pruned copy's data is incomplete
            reason = theirs.column("reason")[0].as_py()
            assert "; the data of ranks 0-1 is incomplete" in reason
            theirs = theirs.set_column(theirs.column_names.index("reason"), "reason",
                                       pa.array([reason[:reason.index("; the data of")]]))
        if "profile_path" in ours.column_names:     # each copy's own folders
            assert ours.column("profile_path").to_pylist() == [str(folder / f"rank{r}_ascend_pt") for r in (0, 1)]
            ours, theirs = (table.drop_columns(["profile_path"]) for table in (ours, theirs))
        assert ours.to_pylist() == theirs.to_pylist(), analysis.__name__
    assert computed(collectives.collective_figures, light.job).num_rows > 0
    # nothing written into the user's rank folders: a light read is cheaper than a cache
    assert not list(folder.rglob(layout.CACHE_DIR))


def test_light_and_whole_reads_are_stored_apart_and_each_found_again(shared_data, tmp_path):
    folder = writable_copy(shared_data, "ascend/torch_npu/text/level1", tmp_path)
    for light in (True, False, True, False):
        job = analyse_job(folder, engine=serial(), output=tmp_path / "out", light=light)
    assert job.counts == {"done": 0, "cached": 2, "failed": 0}
    # one batch of both ranks read light, one read whole
    assert len(list((tmp_path / "out" / "perfsight_cluster" / "ranks").iterdir())) == 2


def test_the_light_reader_reads_only_the_cluster_files(shared_data, tmp_path):
    folder = writable_copy(shared_data, "ascend/torch_npu/text/level1", tmp_path)
    run = find_runs(folder / "rank0_ascend_pt")[0]
    light = run.reader.light(run)
    assert light.reader.light(light) is light
    assert sorted(p.name for p in light.sources()) == sorted([*CLUSTER_FILES, "profiler_info_0.json",
                                                              "profiler_metadata.json"])
    meta = light.read().meta_dict()
    assert (meta["step_source"], meta["compute_recorded"], meta.get("lacking_files")) == \
        ("step_trace_time.csv", "false", None)
    assert "trace_view.json" not in meta["parse_warnings"]      # no warning for the files it leaves
    (folder / "rank0_ascend_pt" / OUTPUT_DIR / "communication.json").unlink()
    assert light.read().meta_dict()["lacking_files"] == '["communication.json"]'


@pytest.mark.slow
def test_a_generated_job_read_light_finds_the_planted_answers(shared_data, tmp_path):
    answers = jobgen.generate("npu", 16, tmp_path / "job", seed=5, ranks_per_node=4, data=shared_data)
    whole = _found(Mapped(analyse_job(tmp_path / "job", engine=engine_for(workers=2), output=tmp_path / "w")))
    light = _found(Mapped(analyse_job(tmp_path / "job", engine=engine_for(workers=2), output=tmp_path / "l",
                                      light=True)))
    link = answers["slow_link"]
    assert light["slow_ranks"] == whole["slow_ranks"] == answers["slow_ranks"]
    assert light["slow_links"] == whole["slow_links"] == [(link["src"], link["dst"])]
    assert light["offsets"] == whole["offsets"] == answers["clock_offsets_ns"]
    assert light["groups"] == whole["groups"]
    assert whole["mean_step"] == answers["mean_step_ns"]
    # torch_npu's step: Preparing + Stage + Bubble (breakdown.step_breakdown), not the ProfilerStep span
    reported = []
    for rank in range(16):
        with open(tmp_path / "job" / answers["paths"][str(rank)] / OUTPUT_DIR / "step_trace_time.csv") as file:
            rows = list(csv.DictReader(file))
        reported.append(round(sum(float(row[name]) for row in rows for name in (
            "Preparing", "Stage", "Bubble")) / len(rows) * 1000))
    assert light["mean_step"] == reported != whole["mean_step"]


def test_the_cli_says_the_read_was_light(shared_data, tmp_path, capsys):
    folder = writable_copy(shared_data, "ascend/torch_npu/text/level1", tmp_path)
    assert cli.main(["cluster", "-d", str(folder), "-o", str(tmp_path / "out"), "--workers", "1", "--light"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "2 ranks (2 done, 0 cached, 0 failed)" in out
    assert "read light: each torch_npu rank's steps and communication as it reported them" in out
    assert (tmp_path / "out" / "cluster_analysis_output" / "cluster_step_trace_time.csv").is_file()
