"""Run discovery under insight's summary-base-dir: one entry per job, nothing outside the base dir."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from perfsight.views.insight.discovery import discover, run_id

CPU_TRACE = "kineto/hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
RANK_TRACE = "kineto/hta/trace_filter/sampled_rank-{rank}.json.gz"


def prof_dir(parent: Path, name: str, rank: int | None) -> Path:
    run = parent / name
    (run / "host" / "data").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"rank": rank}))
    return run


def listing(base: Path) -> dict[str, str]:
    return {c.relpath: c.kind for c in discover(base)}


def test_each_kind_of_run_and_job_is_one_entry(tmp_path, shared_data):
    trace = shared_data / CPU_TRACE
    job = tmp_path / "job"
    prof_dir(job, "PROF_20260101000000000_1_aa", 0)
    prof_dir(job, "PROF_20260101000000000_2_bb", 1)
    prof_dir(tmp_path / "reruns", "PROF_20260101000000000_3_cc", 0)
    prof_dir(tmp_path / "reruns", "PROF_20260101000000000_4_dd", 0)          # same rank twice: two runs
    (tmp_path / "ranks").mkdir()
    for rank in (0, 1):     # ranks their names and their distributedInfo agree on (reading merges by the latter)
        target = tmp_path / "ranks" / f"train_rank{rank}.pt.trace.json.gz"
        shutil.copy(shared_data / RANK_TRACE.format(rank=rank), target)
    (tmp_path / "single").mkdir()
    shutil.copy(trace, tmp_path / "single" / "a.pt.trace.json.gz")
    shutil.copy(trace, tmp_path / "single" / "b.pt.trace.json.gz")           # no rank in the names
    (tmp_path / "notes.json").write_text('{"not": "a trace"}')
    assert listing(tmp_path) == {
        "job": "perfsight job",
        "ranks": "torch.profiler job",
        "reruns/PROF_20260101000000000_3_cc": "perfsight run",
        "reruns/PROF_20260101000000000_4_dd": "perfsight run",
        "single/a.pt.trace.json.gz": "torch.profiler trace",
        "single/b.pt.trace.json.gz": "torch.profiler trace",
    }
    entry = next(c for c in discover(tmp_path) if c.relpath == "ranks")
    assert [p.name for p in entry.sources] == ["train_rank0.pt.trace.json.gz", "train_rank1.pt.trace.json.gz"]
    assert entry.id == run_id("ranks") and len(entry.id) == 12
    assert entry.size_bytes() == sum((shared_data / RANK_TRACE.format(rank=r)).stat().st_size for r in (0, 1))


def test_caches_outputs_hidden_folders_and_run_insides_are_skipped(tmp_path, shared_data):
    trace = shared_data / CPU_TRACE
    run = prof_dir(tmp_path, "PROF_20260101000000000_1_aa", None)
    shutil.copy(trace, run / "host" / "data" / "trace_1.pt.trace.json.gz")   # the run's own trace
    for skipped in ("perfsight_output", "perfsight_cache", ".hidden", "x.pt.trace.json.gz.perfsight_cache"):
        (tmp_path / skipped).mkdir()
        shutil.copy(trace, tmp_path / skipped / "t.pt.trace.json.gz")
    assert listing(tmp_path) == {"PROF_20260101000000000_1_aa": "perfsight run"}


def test_nothing_outside_the_base_dir_is_listed(tmp_path, shared_data):
    base, outside = tmp_path / "base", tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    base.mkdir()
    shutil.copy(shared_data / CPU_TRACE, outside / "secret.pt.trace.json.gz")
    shutil.copy(shared_data / CPU_TRACE, outside / "deep" / "t.pt.trace.json.gz")
    os.symlink(outside / "secret.pt.trace.json.gz", base / "link.pt.trace.json.gz")   # file link out
    os.symlink(outside / "deep", base / "dirlink")                                    # directory link out
    shutil.copy(shared_data / CPU_TRACE, base / "inside.pt.trace.json.gz")
    os.symlink(base / "inside.pt.trace.json.gz", base / "alias.pt.trace.json.gz")     # link to a run inside
    found = discover(base)
    assert [c.relpath for c in found] == ["inside.pt.trace.json.gz"]
    assert all(c.path.is_relative_to(base.resolve()) for c in found)


def test_ascend_runs_and_jobs_are_entries(shared_data):
    found = listing(shared_data / "ascend")
    assert found["torch_npu/text/level1"] == "torch_npu job"            # rank0_ascend_pt + rank1_ascend_pt
    assert found["torch_npu/db/level1"] == "torch_npu job"
    assert found["mindspore_legacy/profiler"] == "mindspore run"        # one flat folder, every rank in it
    assert not any(path.startswith("torch_npu/text/level1/") for path in found)   # a run's insides are its own
    single = shared_data / "ascend" / "torch_npu" / "text" / "level1" / "rank0_ascend_pt"
    assert listing(single) == {".": "torch_npu run"}


def test_a_base_that_is_a_run_is_one_entry_not_its_insides(tmp_path, shared_data):
    run = prof_dir(tmp_path, "PROF_20260101000000000_1_aa", 0)
    shutil.copy(shared_data / CPU_TRACE, run / "host" / "data" / "trace_1.pt.trace.json.gz")
    assert listing(run) == {".": "perfsight run"}


def test_manifests_linked_from_outside_are_not_read_to_group_runs(tmp_path):
    base, outside = tmp_path / "base", tmp_path / "outside"
    outside.mkdir()
    for rank in (0, 1):
        run = prof_dir(base / "job", f"PROF_2026010100000000{rank}_1_aa", None)
        (outside / f"manifest{rank}.json").write_text(json.dumps({"rank": rank}))
        (run / "manifest.json").unlink()
        os.symlink(outside / f"manifest{rank}.json", run / "manifest.json")
    assert listing(base) == {"job/PROF_20260101000000000_1_aa": "perfsight run",
                             "job/PROF_20260101000000001_1_aa": "perfsight run"}
