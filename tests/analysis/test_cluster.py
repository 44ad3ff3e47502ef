"""rank_breakdown / slowest_rank on a planted three-rank job and a real two-rank trace; the job's communication
is tests/analysis/test_collectives.py's."""
import json
import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import perfsight
from perfsight.analysis import cluster
from perfsight.analysis.job_summaries import job_of

from .planted import BASE, tables_from_rows

# track ids: rank r's thread is 10 * r + 1, its stream 10 * r + 2
RANKS = (0, 1, 2)
TRACKS = [row for r in RANKS for row in (
    {"track_id": 10 * r + 1, "rank": r, "pid": str(100 + r), "tid": "1", "device": "cpu", "kind": "thread",
     "name": f"thread 1 rank {r}", "sort_index": 0},
    {"track_id": 10 * r + 2, "rank": r, "pid": str(r), "tid": "7", "device": f"cuda:{r}", "kind": "stream",
     "name": f"cuda:{r} stream 7", "sort_index": 7})]

ALLREDUCE = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1000, "Out msg nelems": 1000,
             "Group size": 4, "Process Group Name": "0", "Process Group Ranks": "[0, 1, 2, 3]"}
SEND = {"Collective name": "send", "dtype": "BFloat16", "In msg nelems": 10, "Out msg nelems": 10, "Group size": 2,
        "Process Group Ranks": "[0, 1]", "Dst Rank": 1}
# cut past 30 ranks by PyTorch: rebuilt from start 1, stride 1, size 3 -> [1, 2, 3]
GATHER = {"Collective name": "allgather", "dtype": "Long", "In msg nelems": 8, "Out msg nelems": 24, "Group size": 3,
          "Process Group Ranks": "[1, 2, ..., 127]", "Global rank start": 1, "Global rank stride": 1}
WAIT = {"Collective name": "wait", "dtype": "Byte", "In msg nelems": 0, "Out msg nelems": 0, "Group size": 1,
        "Process Group Ranks": "[]"}

_ids = iter(range(1, 1000))


def s(kind, name, rank, start, end, *, stream=False, step=None, args=None, shapes=None, dtypes=None):
    return {"id": next(_ids), "kind": kind, "name": name, "op_type": name, "track_id": 10 * rank + (2 if stream else 1),
            "start_ns": BASE + start, "dur_ns": end - start, "depth": 0, "step": step,
            "task_type": {"kernel": "KERNEL", "comm": "COMM"}.get(kind) if stream else None,
            "args": json.dumps(args) if args is not None else None, "input_shapes": shapes, "input_dtypes": dtypes}


def job():
    """Rank 0: steps 1, 2 (and 3, which rank 1 lacks) of 10000 ns, 5000 compute + 4000 exposed communication
    each. Rank 1: steps 1, 2 of 9800 ns, 8000 compute + 1000 communication. Rank 2: no steps. So rank 0 is
    the slowest (10000 vs 9800) and rank 1 the straggler (8800 ns outside communication vs 6000)."""
    slices = []
    for step, t0 in ((1, 0), (2, 20000), (3, 40000)):
        slices += [s("step", f"ProfilerStep#{step}", 0, t0, t0 + 10000, step=step),
                   s("kernel", "gemm", 0, t0 + 1000, t0 + 6000, stream=True, step=step),
                   s("comm", "ncclKernel_AllReduce", 0, t0 + 6000, t0 + 10000, stream=True, step=step,
                     args={**ALLREDUCE, "device": 0} if step == 1 else None)]
    slices += [s("comm", "ncclKernel_SendRecv", 0, 15000, 15500, stream=True, args=SEND),
               s("comm", "record_param_comms", 0, 500, 600, args=ALLREDUCE)]       # a device source exists
    for step, t0 in ((1, 0), (2, 20000)):
        slices += [s("step", f"ProfilerStep#{step}", 1, t0, t0 + 9800, step=step),
                   s("kernel", "gemm", 1, t0, t0 + 8000, stream=True, step=step),
                   s("comm", "ncclKernel_AllReduce", 1, t0 + 8000, t0 + 9000, stream=True, step=step)]
    slices += [s("comm", "record_param_comms", 1, 100, 200, args=GATHER),
               s("comm", "record_param_comms", 1, 300, 400, args=WAIT),
               s("comm", "nccl:all_reduce", 1, 7000, 7100, shapes="[[1000]]", dtypes='["float"]'),
               s("comm", "nccl:all_reduce", 2, 100, 200, shapes="[[2, 3], []]", dtypes='["c10::BFloat16", "Scalar"]'),
               s("comm", "gloo:broadcast", 2, 300, 400, shapes="[[5]]", dtypes='["mystery"]'),
               s("comm", "c10d::broadcast_", 2, 290, 410, shapes="[[5]]", dtypes='["float"]')]
    return tables_from_rows(slices=slices, tracks=TRACKS)


def test_rank_breakdown_over_common_steps_with_slowest_and_straggler():
    rows = {r["rank"]: r for r in cluster.rank_breakdown(job_of(job())).to_pylist()}
    assert set(rows) == {0, 1}
    zero, one = rows[0], rows[1]
    assert (zero["steps"], zero["step_ns"], zero["compute_ns"], zero["communication_ns"]) == (2, 10000, 5000, 4000)
    assert (one["steps"], one["step_ns"], one["compute_ns"], one["communication_ns"]) == (2, 9800, 8000, 1000)
    assert (zero["non_communication_ns"], one["non_communication_ns"]) == (6000, 8800)
    assert (zero["gap_ns"], one["gap_ns"]) == (200, 0)
    assert zero["gap_pct"] == pytest.approx(100 * 200 / 9800)
    assert (zero["slowest"], zero["straggler"], one["slowest"], one["straggler"]) == (True, False, False, True)
    assert zero["common_steps"] and one["common_steps"]


def test_slowest_rank_row():
    (row,) = cluster.slowest_rank(job_of(job())).to_pylist()
    assert (row["ranks"], row["steps"], row["slowest_rank"], row["slowest_step_ns"], row["fastest_rank"],
            row["fastest_step_ns"], row["gap_ns"]) == (2, 2, 0, 10000, 1, 9800, 200)
    assert (row["straggler_rank"], row["straggler_non_communication_ns"]) == (1, 8800)
    assert "rank 1 spends the most time outside exposed communication" in row["reason"]
    assert cluster.slowest_rank(job_of(tables_from_rows(slices=[], tracks=TRACKS))).num_rows == 0


def test_the_advisor_and_the_cluster_page_quote_the_same_mean_step():
    """Rank 0: steps 1, 2, 3 of 10000, 10000 and 40000 ns; rank 1: steps 1, 2 of 12000 ns. Over all its steps
    rank 0's mean (20000) would make it the slow rank; over the steps both have (1, 2) it is 10000 ns, and
    rank 1 is 20% slower: what the Cluster page and the uneven-ranks advice both say."""
    from perfsight.analysis.advisor import advise

    slices = [s("step", f"ProfilerStep#{step}", 0, start, end, step=step)
              for step, start, end in ((1, 0, 10000), (2, 20000, 30000), (3, 40000, 80000))]
    slices += [s("step", f"ProfilerStep#{step}", 1, start, start + 12000, step=step)
               for step, start in ((1, 0), (2, 20000))]
    tables = tables_from_rows(slices=slices, tracks=TRACKS)
    assert cluster.mean_step_by_rank(job_of(tables)).to_pylist() == [
        {"rank": 0, "steps": 2, "step_ns": 10000, "common_steps": True},
        {"rank": 1, "steps": 2, "step_ns": 12000, "common_steps": True}]
    page = {r["rank"]: r["step_ns"] for r in cluster.rank_breakdown(job_of(tables)).to_pylist()}
    (slowest,) = cluster.slowest_rank(job_of(tables)).to_pylist()
    (advice,) = [a for a in advise(tables).to_pylist() if a["rule"] == "uneven_ranks"]
    assert page == {0: 10000, 1: 12000}
    assert (slowest["slowest_rank"], slowest["slowest_step_ns"], slowest["fastest_step_ns"]) == (1, 12000, 10000)
    assert json.loads(advice["evidence"]) == {"mean_step_ns_by_rank": {"0": 10000, "1": 12000}, "slowest_rank": 1}
    assert "rank 1 takes 0.012 ms per step, 20% more than rank 0 (0.010 ms)" in advice["finding"]


def test_ranks_without_common_steps_compare_their_own():
    tables = job()
    keep = pc.invert(pc.and_(pc.equal(tables.slices["kind"], "step"), pc.equal(tables.slices["track_id"], 11)))
    tables.slices = tables.slices.filter(keep)                # rank 1 loses its steps ...
    extra = tables_from_rows(slices=[s("step", "ProfilerStep#9", 1, 0, 9800, step=9)], tracks=TRACKS)
    tables.slices = pa.concat_tables([tables.slices, extra.slices])   # ... and gets step 9 only
    rows = {r["rank"]: r for r in cluster.rank_breakdown(job_of(tables)).to_pylist()}
    assert (rows[0]["steps"], rows[1]["steps"], rows[0]["common_steps"]) == (3, 1, False)


def test_real_two_rank_job(shared_data, tmp_path):
    """trace_filter: ranks 0 and 1 of a 128-rank job, two steps each."""
    folder = shared_data / "kineto" / "hta" / "trace_filter"
    for path in folder.glob("*.json.gz"):
        shutil.copy(path, tmp_path / path.name)
    run = perfsight.open(tmp_path)
    breakdown = cluster.rank_breakdown(job_of(run.tables)).to_pylist()
    assert [r["steps"] for r in breakdown] == [2, 2] and sum(r["slowest"] for r in breakdown) == 1


def test_the_fastest_rank_of_equal_steps_is_another_than_the_slowest():
    """Two ranks of 5000 ns steps: rank 0 is the slowest (ties go to the lowest), rank 1 the fastest, not
    rank 0 "0.0% over rank 0's"."""
    slices = [s("step", "ProfilerStep#1", rank, 0, 5000, step=1) for rank in (0, 1)]
    (row,) = cluster.slowest_rank(job_of(tables_from_rows(slices=slices, tracks=TRACKS))).to_pylist()
    assert (row["slowest_rank"], row["fastest_rank"], row["gap_ns"]) == (0, 1, 0)
    assert row["reason"].startswith("rank 0 has the longest mean step (0.005 ms, 0.0% over rank 1's)")


def test_rank_lacks_from_each_ranks_meta():
    """Each rank's own meta says what it lacks and what its reader read around (its parse_warnings); the job's
    own warnings (not of one rank) are not a rank's."""
    meta = {"rank_meta": json.dumps({"0": {"step_source": "trace", "parse_warnings": json.dumps(["cut row 3"])},
                                     "1": {"step_source": "step_trace_time.csv",
                                           "lacking_files": json.dumps(["kernel_details.csv", "trace_view.json"]),
                                           "parse_warnings": json.dumps(["no kernel_details.csv"])},
                                     "2": {}}),
            "parse_warnings": json.dumps(["rank 1: no kernel_details.csv", "rank 0: cut row 3", "job: two folders"])}
    tables = tables_from_rows(slices=[], tracks=TRACKS, meta=meta)
    assert cluster.rank_lacks(job_of(tables)).to_pylist() == [
        {"rank": 0, "step_source": "trace", "lacking_files": [], "warnings": ["cut row 3"]},
        {"rank": 1, "step_source": "step_trace_time.csv", "lacking_files": ["kernel_details.csv", "trace_view.json"],
         "warnings": ["no kernel_details.csv"]},
        {"rank": 2, "step_source": None, "lacking_files": [], "warnings": []}]
