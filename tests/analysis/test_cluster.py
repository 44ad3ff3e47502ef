"""rank_breakdown / slowest_rank on a planted three-rank job and a real two-rank trace; the job's communication
is tests/analysis/test_collectives.py's."""
import json
import shutil

import pyarrow as pa
import pyarrow.compute as pc

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
MS = 1_000_000


def s(kind, name, rank, start, end, *, stream=False, step=None, args=None, shapes=None, dtypes=None):
    return {"id": next(_ids), "kind": kind, "name": name, "op_type": name, "track_id": 10 * rank + (2 if stream else 1),
            "start_ns": BASE + start, "dur_ns": end - start, "depth": 0, "step": step,
            "task_type": {"kernel": "KERNEL", "comm": "COMM"}.get(kind) if stream else None,
            "args": json.dumps(args) if args is not None else None, "input_shapes": shapes, "input_dtypes": dtypes}


def job():
    """Rank 0: steps 1, 2 (and 3, which rank 1 lacks) of 10000 ns, 5000 compute + 4000 exposed communication
    each. Rank 1: steps 1, 2 of 9800 ns, 8000 compute + 1000 communication. Both end step 2 20000 ns after step
    1: on that common boundary the ranks are even, whatever their spans. No collective instance has two timed
    members (rank 1's kernels carry no collective args), so who waits for whom is unknown."""
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


def test_rank_breakdown_over_common_steps_on_the_common_boundary():
    rows = {r["rank"]: r for r in cluster.rank_breakdown(job_of(job())).to_pylist()}
    assert set(rows) == {0, 1}
    zero, one = rows[0], rows[1]
    assert (zero["steps"], zero["step_ns"], zero["compute_ns"], zero["communication_ns"]) == (2, 10000, 5000, 4000)
    assert (one["steps"], one["step_ns"], one["compute_ns"], one["communication_ns"]) == (2, 9800, 8000, 1000)
    # step 2 ends 20000 ns after step 1 on both ranks (rank 1's first step is its own span, not compared)
    assert (zero["boundary_step_ns"], one["boundary_step_ns"], zero["gap_ns"], one["gap_ns"]) == (20000, 20000, 0, 0)
    assert (zero["caused_wait_ns"], zero["last_arrivals"]) == (None, None)
    assert not any(row[flag] for row in rows.values() for flag in ("slowest", "straggler"))
    assert zero["common_steps"] and one["common_steps"]


def test_slowest_rank_row():
    (row,) = cluster.slowest_rank(job_of(job())).to_pylist()
    assert (row["ranks"], row["steps"], row["even"], row["slowest_step_ns"], row["fastest_step_ns"],
            row["gap_ns"], row["straggler_rank"]) == (2, 1, True, 20000, 20000, 0, None)
    assert row["reason"].startswith("ranks are even: step by step, rank 0 takes at most 0.000 ms longer than rank 1")
    assert row["reason"].endswith("no collective with two timed members: who waits for whom is unknown")
    assert cluster.slowest_rank(job_of(tables_from_rows(slices=[], tracks=TRACKS))).num_rows == 0


def test_the_advisor_and_the_cluster_page_read_one_verdict():
    """Rank 0: back-to-back steps 1-4 of 40 ms (the warm-up), 10, 10 and 10 ms; rank 1: 40, 12, 12, 12 ms.
    Means over all steps (17.5, 19 ms) fold the warm-up in and put rank 1 8.6% over rank 0; step by step, end
    to end, rank 1 takes 2 ms (20%) longer: what the Cluster page, the report and the uneven-ranks advice all
    say, the warm-up named."""
    from perfsight.analysis.advisor import advise

    slices = []
    for rank, step_ns in ((0, MS * 10), (1, MS * 12)):
        ends = [MS * 40 + step_ns * i for i in range(4)]
        slices += [s("step", f"ProfilerStep#{step}", rank, start, end, step=step)
                   for step, start, end in zip((1, 2, 3, 4), [0] + ends[:-1], ends)]
    tables = tables_from_rows(slices=slices, tracks=TRACKS)
    page = {r["rank"]: (r["boundary_step_ns"], r["gap_ns"], r["outlier_steps"], r["slowest"])
            for r in cluster.rank_breakdown(job_of(tables)).to_pylist()}
    (slowest,) = cluster.slowest_rank(job_of(tables)).to_pylist()
    (advice,) = [a for a in advise(tables).to_pylist() if a["rule"] == "uneven_ranks"]
    assert page == {0: (MS * 10, 0, [1], False), 1: (MS * 12, MS * 2, [1], True)}
    assert (slowest["even"], slowest["slowest_rank"], slowest["slowest_step_ns"], slowest["fastest_step_ns"],
            slowest["gap_ns"], slowest["gap_pct"]) == (False, 1, MS * 12, MS * 10, MS * 2, 20.0)
    assert "step 1 a warm-up (over 2 x the rank's median) on every rank" in slowest["reason"]
    assert json.loads(advice["evidence"]) == {"straggler_rank": None, "straggler_wait_ns": None, "slowest_rank": 1,
                                              "gap_ns": MS * 2, "median_step_ns": MS * 10}
    assert "rank 1's median step (12.000 ms) is 20% over rank 0's" in advice["finding"]


def test_ranks_without_common_steps_compare_their_own():
    tables = job()
    keep = pc.invert(pc.and_(pc.equal(tables.slices["kind"], "step"), pc.equal(tables.slices["track_id"], 11)))
    tables.slices = tables.slices.filter(keep)                # rank 1 loses its steps ...
    extra = tables_from_rows(slices=[s("step", "ProfilerStep#9", 1, 0, 9800, step=9)], tracks=TRACKS)
    tables.slices = pa.concat_tables([tables.slices, extra.slices])   # ... and gets step 9 only
    rows = {r["rank"]: r for r in cluster.rank_breakdown(job_of(tables)).to_pylist()}
    assert (rows[0]["steps"], rows[1]["steps"], rows[0]["common_steps"]) == (3, 1, False)


def test_real_two_rank_job(shared_data, tmp_path):
    """trace_filter: ranks 0 and 1 of a 128-rank job, two steps each (ProfilerStep#551, #552): one step each
    on the common boundary, a few microseconds apart: even."""
    folder = shared_data / "kineto" / "hta" / "trace_filter"
    for path in folder.glob("*.json.gz"):
        shutil.copy(path, tmp_path / path.name)
    run = perfsight.open(tmp_path)
    breakdown = cluster.rank_breakdown(job_of(run.tables)).to_pylist()
    assert [r["steps"] for r in breakdown] == [2, 2] and not any(r["slowest"] for r in breakdown)
    (row,) = cluster.slowest_rank(job_of(run.tables)).to_pylist()
    assert row["even"] and row["steps"] == 1, row["reason"]


def test_equal_ranks_are_even():
    """Two ranks of one 5000 ns step: "ranks are even", no rank named the slowest (not "rank 0 ... 0.0% over
    rank 1's")."""
    slices = [s("step", "ProfilerStep#1", rank, 0, 5000, step=1) for rank in (0, 1)]
    tables = tables_from_rows(slices=slices, tracks=TRACKS)
    (row,) = cluster.slowest_rank(job_of(tables)).to_pylist()
    assert (row["even"], row["slowest_rank"], row["fastest_rank"], row["gap_ns"]) == (True, 0, 1, 0)
    assert row["reason"].startswith("ranks are even")
    assert not any(r["slowest"] for r in cluster.rank_breakdown(job_of(tables)).to_pylist())


def test_rank_lacks_from_each_ranks_meta():
    """Each rank's own meta says what it lacks and what its reader read around (its parse_warnings); the job's
    own warnings (not of one rank) are not a rank's."""
    meta = {"rank_meta": json.dumps({"0": {"step_source": "trace", "parse_warnings": json.dumps(["cut row 3"]),
                                           "damage": json.dumps(["cut row 3"])},
                                     "1": {"step_source": "step_trace_time.csv",
                                           "lacking_files": json.dumps(["kernel_details.csv", "trace_view.json"]),
                                           "parse_warnings": json.dumps(["no kernel_details.csv"])},
                                     "2": {}}),
            "parse_warnings": json.dumps(["rank 1: no kernel_details.csv", "rank 0: cut row 3", "job: two folders"])}
    tables = tables_from_rows(slices=[], tracks=TRACKS, meta=meta)
    assert cluster.rank_lacks(job_of(tables)).to_pylist() == [
        {"rank": 0, "step_source": "trace", "lacking_files": [], "warnings": ["cut row 3"], "damage": ["cut row 3"]},
        {"rank": 1, "step_source": "step_trace_time.csv", "lacking_files": ["kernel_details.csv", "trace_view.json"],
         "warnings": ["no kernel_details.csv"], "damage": []},
        {"rank": 2, "step_source": None, "lacking_files": [], "warnings": [], "damage": []}]
    assert cluster.incomplete_ranks(job_of(tables)) == [0, 1]
