"""perfsight compare's modules, memory and ranks on real traces made into known pairs:

* torch 2.13's CPU trace with modules and memory events (kineto/generated_torch213_cpu, 3 steps) against a copy
  whose ``nn.Module: ReLU_0`` is renamed ``nn.Module: GELU_0`` and whose every memory event moves twice the
  bytes (and says twice the totals): the other modules unchanged, ReLU and GELU paired as one activation with
  the same time; each operator's allocations the same in number and twice the bytes, the peak twice as high;
* two generated 8-rank torch_npu jobs (bench/jobgen.py, other seeds: other jitter and slow rank) rank by rank:
  each rank's mean step is the job's planted one (answers.json ``mean_step_ns``); each job's slowest rank
  compared with the other's, and two ranks of one job, each opened alone."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import perfsight
from perfsight.analysis import compare as analysis
from perfsight.core.errors import InputError
from tests.bench.test_jobgen import jobgen

TRACE = "kineto/generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz"


@pytest.fixture(scope="module")
def pair(shared_data, tmp_path_factory):
    with gzip.open(shared_data / TRACE, "rt") as file:
        document = json.load(file)
    for event in document["traceEvents"]:
        if event.get("name") == "nn.Module: ReLU_0":
            event["name"] = "nn.Module: GELU_0"
        if event.get("name") == "[memory]":
            for key in ("Bytes", "Total Allocated", "Total Reserved"):
                event["args"][key] *= 2
    new = tmp_path_factory.mktemp("changed") / "changed.pt.trace.json"
    new.write_text(json.dumps(document))
    return perfsight.compare(shared_data / TRACE, new)


def test_modules_aligned_by_name_then_by_family(pair):
    rows = {row["name"]: row for row in pair.modules().to_pylist()}
    assert set(rows) == {"nn.Module: Sequential_0", "nn.Module: Linear_0", "nn.Module: Linear_1",
                         "nn.Module: CrossEntropyLoss_0", "activation"}
    unchanged = [row for name, row in rows.items() if name != "activation"]
    assert {(row["status"], row["matched_by"], row["difference_per_step_ns"]) for row in unchanged} == {
        ("both", "name", 0)}
    # the ReLU module replaced by a GELU one: paired as one activation, the same calls and time
    swapped = rows["activation"]
    assert (swapped["matched_by"], swapped["base_names"], swapped["new_names"]) == (
        "family", ["nn.Module: ReLU_0"], ["nn.Module: GELU_0"])
    assert (swapped["base_calls_per_step"], swapped["new_calls_per_step"], swapped["difference_per_step_ns"]) == (
        1, 1, 0)
    assert swapped["base_total_ns"] == swapped["new_total_ns"] > 0


def test_memory_allocated_by_operator(pair):
    rows = pair.memory().to_pylist()
    assert rows and {row["status"] for row in rows} == {"both"}
    for row in rows:
        assert row["new_allocations_per_step"] == row["base_allocations_per_step"]
        assert row["new_bytes_per_step"] == 2 * row["base_bytes_per_step"]
        assert row["difference_bytes_per_step"] == row["base_bytes_per_step"]
    assert rows[0]["op_type"] == "aten::mm"                     # the most bytes: largest difference first
    figures = {row["figure"]: row for row in pair.figures().to_pylist()}
    assert figures["peak memory allocated"]["new"] == 2 * figures["peak memory allocated"]["base"]


@pytest.fixture(scope="module")
def eight_rank_jobs(shared_data, tmp_path_factory) -> tuple[Path, dict]:
    """Two generated 8-rank jobs (folders ``base`` and ``new``) and their answers, made once for the module."""
    root = tmp_path_factory.mktemp("jobs")
    answers = {side: jobgen.generate("npu", 8, root / side, seed=seed, ranks_per_node=4, data=shared_data)
               for side, seed in (("base", 3), ("new", 8))}
    return root, answers


def test_two_jobs_rank_by_rank(eight_rank_jobs):
    tmp_path, answers = eight_rank_jobs
    base, new = perfsight.open(tmp_path / "base"), perfsight.open(tmp_path / "new")
    rows = analysis.rank_comparison(base.job, new.job).to_pylist()
    assert [row["rank"] for row in rows] == list(range(8))
    assert [row["base_step_ns"] for row in rows] == answers["base"]["mean_step_ns"]
    assert [row["new_step_ns"] for row in rows] == answers["new"]["mean_step_ns"]
    assert all(row["difference_ns"] == row["new_step_ns"] - row["base_step_ns"] for row in rows)


def test_slowest_rank_to_slowest_rank_and_two_ranks_of_one_job(eight_rank_jobs):
    tmp_path, answers = eight_rank_jobs
    slowest = {side: max(range(8), key=lambda rank: (answers[side]["mean_step_ns"][rank], -rank))
               for side in answers}
    comparison = perfsight.compare(tmp_path / "base", tmp_path / "new", base_rank="slowest", new_rank="slowest")
    assert (comparison.base.ranks, comparison.new.ranks) == ([slowest["base"]], [slowest["new"]])
    steps = comparison.steps().to_pylist()[0]
    assert (steps["base_mean_ns"], steps["new_mean_ns"]) == (answers["base"]["mean_step_ns"][slowest["base"]],
                                                            answers["new"]["mean_step_ns"][slowest["new"]])
    two = perfsight.compare(tmp_path / "base", tmp_path / "base", base_rank=0, new_rank=3)
    assert (two.base.ranks, two.new.ranks) == ([0], [3])
    with pytest.raises(InputError, match=r"rank 9 is not one of the job's ranks read \(0-7, 8 ranks\)"):
        perfsight.compare(tmp_path / "base", tmp_path / "new", base_rank=9)


@pytest.mark.slow
def test_jobs_too_large_to_merge_compare_their_slowest_ranks(shared_data, tmp_path):
    """Two jobs of 20 ranks (more than WHOLE_JOB_RANKS): never merged; each job's slowest rank opened alone, and
    the ranks compared from the mapped summaries."""
    answers = {side: jobgen.generate("npu", 20, tmp_path / side, seed=seed, ranks_per_node=4, data=shared_data)
               for side, seed in (("base", 3), ("new", 8))}
    slowest = {side: max(range(20), key=lambda rank: (answers[side]["mean_step_ns"][rank], -rank))
               for side in answers}
    comparison = perfsight.compare(tmp_path / "base", tmp_path / "new")
    assert (comparison.base.ranks, comparison.new.ranks) == ([slowest["base"]], [slowest["new"]])
    assert comparison.base_label == f"rank {slowest['base']} of 20 (the slowest)"
    ranks = comparison.ranks().to_pylist()
    assert [row["base_step_ns"] for row in ranks] == answers["base"]["mean_step_ns"]
    assert [row["new_step_ns"] for row in ranks] == answers["new"]["mean_step_ns"]
