"""A trace that holds several ranks' events (their traces merged into one file, as trace-merging tools write
them: each event's args carry its ``rank``, or its pid carries the rank as a prefix, rank x 1e8 + pid) is read
as those ranks, and says so; its cross-rank verdicts are those of the ranks' own files (the planted two-rank
NCCL job: rank 1 arrives 300 us late at each of three all-reduces and 50 us late at a send)."""
import json

import pytest

import perfsight
from perfsight.ingest.kineto.reader import FUSED_PID_STRIDE
from tests.analysis.planted_nccl_job import write_nccl_job


def fuse(folder, target, *, args_rank: bool, prefix_pids: bool):
    """The two ranks' traces of ``folder`` as one file without distributedInfo."""
    events = []
    for rank in (0, 1):
        for event in json.loads((folder / f"rank{rank}.pt.trace.json").read_text())["traceEvents"]:
            if prefix_pids:
                event["pid"] = rank * FUSED_PID_STRIDE + event["pid"]
            if args_rank and event.get("ph") == "X":
                event["args"] = {**event.get("args", {}), "rank": rank}
            events.append(event)
    target.write_text(json.dumps({"traceEvents": events}))
    return target


@pytest.mark.parametrize("args_rank, prefix_pids, said", [
    (True, False, "its events' args rank"), (False, True, "pids prefixed with the rank x 100,000,000")])
def test_a_fused_trace_is_read_as_its_ranks(tmp_path, args_rank, prefix_pids, said):
    job = write_nccl_job(tmp_path / "job")
    fused = perfsight.open(fuse(job, tmp_path / "fused.pt.trace.json", args_rank=args_rank,
                                prefix_pids=prefix_pids))
    apart = perfsight.open(job)
    assert fused.ranks == apart.ranks == [0, 1]
    assert f"fused.pt.trace.json: holds 2 ranks ({said}): read as a job of ranks 0-1" in json.loads(
        fused.meta["parse_warnings"])
    [verdict] = fused.slowest_rank().to_pylist()
    assert (verdict["straggler_rank"], verdict["straggler_wait_ns"], verdict["even"]) == (1, 950_000, True)
    assert [r["offset_ns"] for r in fused.clock_offsets().to_pylist()] == [0, 7_000_123]
    figures = [{k: v for k, v in row.items() if k != "slice_id"} for row in fused.collective_figures().to_pylist()]
    assert figures == [{k: v for k, v in row.items() if k != "slice_id"}
                       for row in apart.collective_figures().to_pylist()]
    # and the breakdown is each rank's, not one rank's of two ranks' work
    assert [(r["rank"], r["compute_ns"], r["communication_ns"]) for r in fused.step_breakdown().to_pylist()] == [
        (r["rank"], r["compute_ns"], r["communication_ns"]) for r in apart.step_breakdown().to_pylist()]


def test_one_rank_with_its_rank_in_args_is_one_rank(tmp_path):
    job = write_nccl_job(tmp_path / "job")
    trace = json.loads((job / "rank1.pt.trace.json").read_text())
    for event in trace["traceEvents"]:
        if event.get("ph") == "X":
            event["args"] = {**event.get("args", {}), "rank": 1}
    (tmp_path / "one.pt.trace.json").write_text(json.dumps(trace))
    run = perfsight.open(tmp_path / "one.pt.trace.json")
    assert run.ranks == [1] and "holds" not in run.meta["parse_warnings"]
