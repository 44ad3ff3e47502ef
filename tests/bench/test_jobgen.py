"""bench/jobgen.py: generated N-rank jobs (GPU Kineto with NCCL, torch_npu text) whose planted answers the
current perfsight finds: the slow rank (the least wait in every group it is in, and the only rank flagged),
the slow link (the only link flagged), the clock offsets (exact: true collective ends are equal), the
groups and every rank's mean step (exact). Also the files' shape (PyTorch's cut rank lists, per-rank
distributedInfo, torch_npu's rank folders), the answers' documentation and the CLI."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import perfsight

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import jobgen  # noqa: E402  (bench/ is scripts, imported as a sibling like bench/stats.py)


def _found(run) -> dict:
    """What perfsight says of the planted answers."""
    slow_ranks = run.slow_ranks().to_pylist()
    return {
        "straggler": run.straggler().to_pylist()[0]["straggler_rank"],
        "slow_ranks": sorted({r["rank"] for r in slow_ranks if r["slow"]}),
        "slow_groups": sorted(r["process_group"] for r in slow_ranks if r["slow"]),
        "slow_links": [(r["src_rank"], r["dst_rank"]) for r in run.slow_links().to_pylist() if r["slow"]],
        "offsets": [r["offset_ns"] for r in run.clock_offsets().to_pylist()],
        "groups": {r["process_group"]: r["ranks"] for r in run.communication_groups().to_pylist()},
        "mean_step": [r["step_ns"] for r in run.mean_step_by_rank().to_pylist()],
    }


def _check(answers: dict, run) -> None:
    found = _found(run)
    assert run.ranks == list(range(answers["world_size"]))
    assert found["slow_ranks"] == answers["slow_ranks"] == [found["straggler"]]
    # flagged only in groups it is in, and in the world group, where its lateness adds up over the step's most
    # collectives; in a group where the wait it causes is under the noise (2% of the 222 ms step), not
    its_groups = {name for name, group in answers["groups"].items() if answers["slow_ranks"][0] in group["ranks"]}
    world = {name for name, group in answers["groups"].items() if group["layer"] == "world"}
    assert world <= set(found["slow_groups"]) <= its_groups
    link = answers["slow_link"]
    assert found["slow_links"] == [(link["src"], link["dst"])]
    assert found["offsets"] == answers["clock_offsets_ns"]
    assert found["groups"] == {name: group["ranks"] for name, group in answers["groups"].items()}
    assert found["mean_step"] == answers["mean_step_ns"]


def test_gpu_8_ranks_on_two_nodes_planted_answers_found(tmp_path, shared_data):
    answers = jobgen.generate("gpu", 8, tmp_path, seed=3, ranks_per_node=4, lean=True, steps=2, data=shared_data)
    assert answers["nodes"] == 2 and answers["steps"] == [4, 5] and answers["queued_kernels"] == 0
    assert len(set(answers["clock_offsets_ns"])) == 2 and answers["clock_offsets_ns"][:4] == [0] * 4
    run = perfsight.open(tmp_path)
    _check(answers, run)
    assert json.loads(run.meta.get("parse_warnings") or "[]") == []
    waits = {r["rank"]: r for r in run.slow_ranks().to_pylist() if r["process_group"] == "0"}
    slow = answers["slow_ranks"][0]
    # the others wait for it, more than the planted delay per step each, it not at all; it arrives last each time
    assert waits[slow]["waited_per_step_ns"] == 0 and waits[slow]["last_arrivals"] == waits[slow]["instances"]
    assert min(w["waited_per_step_ns"] for r, w in waits.items() if r != slow) > answers["slow_delay_ns"]
    link = next(r for r in run.slow_links().to_pylist() if r["slow"])
    assert link["bandwidth_gbps"] < 0.5 * link["median_gbps"]
    assert link["median_gbps"] == pytest.approx(answers["collective_gbps"], rel=0.01)


@pytest.mark.slow
def test_gpu_64_ranks_planted_answers_found(tmp_path, shared_data):
    answers = jobgen.generate("gpu", 64, tmp_path, seed=7, lean=True, steps=1, data=shared_data)
    sizes = [p.stat().st_size for p in tmp_path.glob("rank*.pt.trace.json")]
    assert len(sizes) == 64 and max(sizes) < 1_000_000          # the small mode: under 1 MB per rank
    _check(answers, perfsight.open(tmp_path))


def test_gpu_rank_file_says_its_rank_groups_and_cut_rank_lists(tmp_path, shared_data):
    answers = jobgen.generate("gpu", 64, tmp_path, seed=1, lean=True, steps=1, offsets=False, data=shared_data)
    trace = json.loads((tmp_path / "rank9.pt.trace.json").read_text())
    info = trace["distributedInfo"]
    assert (info["rank"], info["world_size"]) == (9, 64)
    assert {g["pg_name"]: g["ranks"] for g in info["pg_config"]} == {
        name: g["ranks"] for name, g in answers["groups"].items() if 9 in g["ranks"]}
    world = [e["args"] for e in trace["traceEvents"] if e.get("args", {}).get("Process Group Name") == "0"]
    assert {a["Process Group Ranks"] for a in world} == {"[" + ", ".join(map(str, range(30))) + ", ...]"}
    records = [a for a in world if "Global rank start" in a]         # record_param_comms, as PyTorch writes
    assert records and {(a["Global rank start"], a["Global rank stride"], a["Group size"]) for a in records} == {
        (0, 1, 64)}
    dp = next(e["args"] for e in trace["traceEvents"] if e.get("args", {}).get("Process Group Description")
              == "DATA_PARALLEL_GROUP" and "Global rank start" in e["args"])
    assert (dp["Process Group Ranks"], dp["Global rank start"], dp["Global rank stride"]) == (
        "[1, 9, 17, 25, 33, 41, 49, 57]", 1, 8)
    sends = [e["args"] for e in trace["traceEvents"] if e.get("args", {}).get("Collective name") in ("send", "recv")]
    assert {(a["Collective name"], a.get("Dst Rank", a.get("Src Rank"))) for a in sends} == {("send", 17),
                                                                                             ("recv", 1)}
    assert answers["clock_offsets_ns"] == [0] * 64


def _waits(run) -> dict:
    """(rank, collective, its start) -> its wait, of every collective operation the run matched."""
    return {(r["rank"], r["collective"], r["start_ns"]): r["wait_ns"] for r in run.collective_figures().to_pylist()}


def test_a_fused_trace_of_four_ranks_gives_the_planted_answers(tmp_path, shared_data):
    """Every rank's events in one file (args.rank, pids prefixed with the rank): read as 4 ranks, not as one,
    with the same verdicts, offsets and steps as the job written rank by rank."""
    answers = jobgen.generate("gpu", 4, tmp_path, seed=3, ranks_per_node=2, lean=True, steps=2, shape="fused",
                              data=shared_data)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.json", jobgen.FUSED_FILE]
    run = perfsight.open(tmp_path)
    _check(answers, run)
    assert "holds 4 ranks" in run.meta["parse_warnings"]


def test_no_collective_args_the_host_ranges_give_the_same_waits(tmp_path, shared_data):
    """An older PyTorch's trace: no collective metadata, no pg_config; the collectives come from the host
    nccl:* ranges timed by the kernels they launched, in one unrecorded group. Every collective of this job is
    over all ranks (one rank per node), so matching by order is exact: the straggler, the clock offsets and
    every wait equal those of the same job written with its metadata."""
    options = dict(seed=3, ranks_per_node=1, steps=2, data=shared_data)
    bare = jobgen.generate("gpu", 4, tmp_path / "bare", shape="no_args", **options)
    full = jobgen.generate("gpu", 4, tmp_path / "full", **options)
    assert {k: v for k, v in bare.items() if k not in ("seconds", "shape")} == {
        k: v for k, v in full.items() if k not in ("seconds", "shape")}
    trace = json.loads((tmp_path / "bare" / "rank0.pt.trace.json").read_text())
    assert "pg_config" not in trace["distributedInfo"]
    assert not any("Collective name" in e.get("args", {}) for e in trace["traceEvents"])
    run = perfsight.open(tmp_path / "bare")
    [straggler] = run.straggler().to_pylist()
    assert straggler["straggler_rank"] == bare["slow_ranks"][0]
    assert straggler["last_arrivals"] == straggler["instances"]
    assert [r["offset_ns"] for r in run.clock_offsets().to_pylist()] == bare["clock_offsets_ns"]
    assert {r["source"] for r in run.collective_figures().to_pylist()} == {"host annotation"}
    collectives = {key: wait for key, wait in _waits(perfsight.open(tmp_path / "full")).items()
                   if key[1] in ("allreduce", "broadcast")}
    assert _waits(run) == collectives


def test_custom_communication_kernels_are_communication(tmp_path, shared_data):
    """DeepEP-style kernels (no NCCL in their names, no collective metadata): each rank's communication per step
    is the same as with NCCL's kernels; nothing can be matched across ranks, so no straggler is named."""
    options = dict(seed=3, ranks_per_node=2, lean=True, steps=2, data=shared_data)
    jobgen.generate("gpu", 4, tmp_path / "custom", shape="custom_kernels", **options)
    jobgen.generate("gpu", 4, tmp_path / "nccl", **options)
    names = {e.get("name", "") for e in json.loads((tmp_path / "custom" / "rank1.pt.trace.json").read_text())[
        "traceEvents"]}
    assert not [name for name in names if "nccl" in name.lower()] and "deep_ep::Buffer::combine" in names
    custom, nccl = perfsight.open(tmp_path / "custom"), perfsight.open(tmp_path / "nccl")

    def communication(run):
        return {(r["rank"], r["step"]): r["communication_ns"] for r in run.step_breakdown().to_pylist()}
    assert communication(custom) == communication(nccl) and min(communication(custom).values()) > 0
    assert custom.collective_figures().num_rows == 0 and custom.straggler().num_rows == 0


def test_a_warm_up_step_is_named_and_moves_no_verdict(tmp_path, shared_data):
    """Every rank's first step 600 ms longer (mean steps 425 ms against 225 ms): it is each rank's warm-up, and
    the verdicts (even ranks, the straggler and the wait it causes) are those of the job without it."""
    options = dict(seed=3, ranks_per_node=2, lean=True, steps=3, data=shared_data)
    warm = jobgen.generate("gpu", 4, tmp_path / "warm", shape="warmup", **options)
    plain = jobgen.generate("gpu", 4, tmp_path / "plain", **options)
    assert [w - p for w, p in zip(warm["mean_step_ns"], plain["mean_step_ns"])] == [jobgen.WARMUP_NS // 3] * 4
    run = perfsight.open(tmp_path / "warm")
    assert [r["step_ns"] for r in run.mean_step_by_rank().to_pylist()] == warm["mean_step_ns"]
    assert {(r["warmup_step"], tuple(r["outlier_steps"])) for r in run.rank_pace().to_pylist()} == {
        (warm["steps"][0], (warm["steps"][0],))}
    verdict = run.slowest_rank().to_pylist()[0]
    same = ("even", "gap_ns", "slowest_step_ns", "straggler_rank", "straggler_wait_ns", "straggler_last_arrivals")
    assert {k: verdict[k] for k in same} == {k: perfsight.open(tmp_path / "plain").slowest_rank().to_pylist()[0][k]
                                             for k in same}
    assert verdict["even"] and verdict["straggler_rank"] == warm["slow_ranks"][0]
    assert f"step {warm['steps'][0]} a warm-up (over 2 x the rank's median) on every rank" in verdict["reason"]


def test_waiting_ranks_that_open_their_steps_early_are_not_the_slowest(tmp_path, shared_data):
    """The ranks that wait open each step 7.5 ms before the slow rank (a real 8-rank job's shape): by their mean
    step spans, which the oracle reads from the files' raw ProfilerStep slices, every waiting rank is slower than the
    slow rank; step end to step end the ranks are even, and the verdict is that of the job without the shift."""
    options = dict(seed=3, ranks_per_node=2, lean=True, steps=3, data=shared_data)
    early = jobgen.generate("gpu", 4, tmp_path / "early", shape="early_start", **options)
    plain = jobgen.generate("gpu", 4, tmp_path / "plain", **options)
    [slow] = early["slow_ranks"]

    def mean_span_ns(rank: int) -> float:
        events = json.loads((tmp_path / "early" / f"rank{rank}.pt.trace.json").read_text())["traceEvents"]
        spans = [float(e["dur"]) * 1000 for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
        return sum(spans) / len(spans)

    spans = {rank: mean_span_ns(rank) for rank in range(4)}
    assert all(spans[rank] - spans[slow] > jobgen.EARLY_START_NS - early["jitter_ns"] for rank in spans if rank != slow)
    assert [e - p for e, p in zip(early["mean_step_ns"], plain["mean_step_ns"])] == [
        -jobgen.EARLY_START_NS if rank == slow else 0 for rank in range(4)]
    run = perfsight.open(tmp_path / "early")
    assert [r["step_ns"] for r in run.mean_step_by_rank().to_pylist()] == early["mean_step_ns"]
    verdict = run.slowest_rank().to_pylist()[0]
    same = ("even", "gap_ns", "slowest_step_ns", "straggler_rank", "straggler_wait_ns", "straggler_last_arrivals")
    assert {k: verdict[k] for k in same} == {k: perfsight.open(tmp_path / "plain").slowest_rank().to_pylist()[0][k]
                                             for k in same}
    assert verdict["even"] and verdict["straggler_rank"] == slow


def test_npu_8_ranks_planted_answers_found(tmp_path, shared_data):
    answers = jobgen.generate("npu", 8, tmp_path, seed=3, ranks_per_node=4, data=shared_data)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.json"] + sorted(f"rank{r}_ascend_pt"
                                                                                  for r in range(8))
    folder = tmp_path / "rank5_ascend_pt"
    assert json.loads((folder / "profiler_info_5.json").read_text())["rank_id"] == 5
    groups = json.loads((folder / "profiler_metadata.json").read_text())["parallel_group_info"]
    assert sorted(g["global_ranks"] for g in groups.values()) == [[0, 1, 2, 3, 4, 5, 6, 7], [1, 5], [4, 5, 6, 7]]
    run = perfsight.open(tmp_path)
    _check(answers, run)
    slow = answers["slow_ranks"][0]
    reported = [r for r in run.collective_figures().to_pylist() if r["figures_from"] == "communication.json"]
    assert {r["wait_ns"] for r in reported if r["rank"] == slow} == {0}


@pytest.mark.slow
def test_npu_24_ranks_on_three_nodes_planted_answers_found(tmp_path, shared_data):
    answers = jobgen.generate("npu", 24, tmp_path, seed=11, data=shared_data)
    assert answers["nodes"] == 3
    _check(answers, perfsight.open(tmp_path))


def test_same_seed_same_job_other_seed_other_plants(tmp_path, shared_data):
    one, two, other = (jobgen.generate("gpu", 16, tmp_path / name, seed=seed, lean=True, steps=1, data=shared_data)
                       for name, seed in (("a", 5), ("b", 5), ("c", 6)))
    first, second = ((tmp_path / name / "rank3.pt.trace.json").read_bytes() for name in "ab")
    assert first == second
    assert {k: v for k, v in one.items() if k != "seconds"} == {k: v for k, v in two.items() if k != "seconds"}
    assert (other["slow_ranks"], other["slow_link"], other["clock_offsets_ns"]) != (
        one["slow_ranks"], one["slow_link"], one["clock_offsets_ns"])


def test_every_answers_field_is_documented(tmp_path, shared_data):
    answers = jobgen.generate("npu", 2, tmp_path, ranks_per_node=1, data=shared_data)
    fields = set(answers) | set(jobgen.generate("gpu", 2, tmp_path / "g", ranks_per_node=1, lean=True, steps=1,
                                                data=shared_data))
    documented = jobgen.__doc__.split("**answers.json**")[1]
    assert [name for name in sorted(fields) if f"``{name}``" not in documented] == []


def test_cli_writes_the_job_and_refuses_the_shared_data(tmp_path, shared_data):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "jobgen.py"), "--kind", "gpu", "--ranks", "4",
                           "--ranks-per-node", "2", "--slow-rank", "3", "--slow-link", "0,2", "--lean", "--steps",
                           "1", "--out", str(tmp_path / "job"), "--data", str(shared_data)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout)
    assert (said["ranks"], said["slow_ranks"], said["slow_link"]["src"], said["slow_link"]["dst"]) == (4, [3], 0, 2)
    assert sorted(p.name for p in (tmp_path / "job").iterdir()) == ["answers.json"] + [
        f"rank{r}.pt.trace.json" for r in range(4)]
    refused = subprocess.run([sys.executable, str(ROOT / "bench" / "jobgen.py"), "--kind", "gpu", "--ranks", "4",
                              "--out", str(shared_data / "job"), "--data", str(shared_data)],
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "never inside the shared data" in refused.stderr
    assert not (shared_data / "job").exists()
