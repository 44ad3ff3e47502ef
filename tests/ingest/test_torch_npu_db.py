"""read_torch_npu_db on torch_npu's real DB exports (../shared/data/ascend/torch_npu/db, 2 ranks of an
8-card job at three profiler levels), checked against msprof-analyze 26.2.0's outputs computed on db
level1 (../shared/data/ascend/msprof_analyze_reference), and on planted databases for the mapping rules
and the errors.

Every figure msprof-analyze derives from the same rows is compared with perfsight's own analyses, and
they agree to the nanosecond (the microsecond figures carry three decimals). Where msprof-analyze's
figure is defined differently, the test rebuilds it from perfsight's analyses and the comment says how:

* torch_npu's step trace ("stage", "free") spans from the step's first *computing* task to its last
  device task, while perfsight's whole-span overlap row spans from the first device task of any kind
  (here an H2D memcpy) to the last: the head in between is free time in perfsight's row and outside
  torch_npu's stage. msprof-analyze's cluster_time_summary then subtracts from that free time the memcpy
  time not overlapped by computation or communication (perfsight's step_breakdown ``memory_ns``).
* msprof-analyze's cluster_time_summary splits communication its own way (per operator, the fastest rank's
  time is the transmit time, the rest of each rank's time is waiting), unlike HCCL's transit and wait that
  ``collectives.collective_figures`` reports from analysis.db: the test rebuilds that split from perfsight's
  ``collectives`` table. Its HCCS bandwidth is also checked against the sums of the HCCL plane steps the
  reader keeps (``collectives.link_bandwidth`` is checked in tests/ingest/test_torch_npu_db_analysis.py).
* msprof-analyze's communication matrix is per link (the bytes its HCCL tasks moved between two ranks), as
  ``collectives.communication_matrix`` reports it from analysis.db's CommAnalyzerMatrix (checked in
  tests/views/export/test_cluster_analysis.py); this file checks the pairs perfsight computes itself.
* Quartiles and standard deviations are not in perfsight's statistics; medians are taken from the
  collectives table.
"""
from __future__ import annotations

import csv
import json
import sqlite3
import statistics
from functools import cache
from pathlib import Path

import pyarrow.compute as pc
import pytest

from perfsight.analysis import breakdown, cluster, collectives, memory, ops
from perfsight.analysis.job_summaries import job_of
from perfsight.core.errors import InputError
from perfsight.core.tables import RunTables, conform
from perfsight.ingest.ascend.detect import find_torch_npu_db
from perfsight.ingest.ascend.torch_npu_db import read_torch_npu_db
from perfsight.ingest.ascend.torch_npu_text import read_torch_npu_text
from perfsight.ingest.jobs import merge

DB = "ascend/torch_npu/db"
REFERENCE = "ascend/msprof_analyze_reference"
MODES = f"{REFERENCE}/modes_db_level1_export_text"


@cache
def read(data: Path, level: str, rank: int) -> RunTables:
    return read_torch_npu_db(data / DB / level / f"rank{rank}_ascend_pt")


@cache
def job(data: Path) -> RunTables:
    """db level1's two ranks as one job."""
    return merge([(f"rank{rank}", read(data, "level1", rank)) for rank in (0, 1)])


def reference_csv(data: Path, pattern: str) -> list[dict]:
    path = next((data / MODES).glob(pattern))
    with path.open(newline="") as file:
        return list(csv.DictReader(file))


def us(value: str | float) -> int:
    """A microsecond figure of msprof-analyze (three decimals: whole ns) in ns."""
    return round(float(value) * 1000)


def by(rows, *keys):
    return {tuple(row[k] for k in keys) if len(keys) > 1 else row[keys[0]]: row for row in rows}


# --- the real exports -------------------------------------------------------------------------------

@pytest.mark.parametrize("level", ["level0", "level1", "level2"])
@pytest.mark.parametrize("rank", [0, 1])
def test_every_level_reads_to_canonical_tables(shared_data, level, rank):
    run = read(shared_data, level, rank)
    for name, table in run.items():
        assert conform(name, table).equals(table), name
    slices, tracks = run.slices, run.tracks
    assert len(set(slices["id"].to_pylist())) == slices.num_rows
    assert set(slices["track_id"].to_pylist()) <= set(tracks["track_id"].to_pylist())
    ids = set(slices["id"].to_pylist())
    assert set(run.flows["src_id"].to_pylist()) | set(run.flows["dst_id"].to_pylist()) <= ids
    assert set(slices["parent_id"].drop_null().to_pylist()) <= ids
    assert pc.min(slices["dur_ns"]).as_py() >= 0
    facts = run.meta_dict()
    assert facts["source_format"] == "torch_npu_db" and facts["rank"] == str(rank)
    assert set(tracks["rank"].to_pylist()) == {rank}
    path = find_torch_npu_db(shared_data / DB / level / f"rank{rank}_ascend_pt")
    with sqlite3.connect(f"{path.as_uri()}?mode=ro&immutable=1", uri=True) as con:
        (computing,) = con.execute("SELECT count(*) FROM COMPUTE_TASK_INFO").fetchone()
        (operators,) = con.execute("SELECT count(*) FROM COMMUNICATION_OP").fetchone()
        step_time = con.execute("SELECT id, startNs, endNs FROM STEP_TIME").fetchall()
    kinds = pc.value_counts(slices["kind"]).to_pylist()
    counts = {entry["values"]: entry["counts"] for entry in kinds}
    assert counts["kernel"] == computing                   # every computing task, no FFTS+ launch container
    device_comm = slices.filter(pc.and_(pc.equal(slices["kind"], "comm"), pc.equal(slices["task_type"], "HCCL")))
    assert device_comm.num_rows == operators == 4
    step = slices.filter(pc.equal(slices["kind"], "step"))   # times are the database's integers, exactly
    assert [(s, a, a + d) for s, a, d in zip(step["step"].to_pylist(), step["start_ns"].to_pylist(),
                                               step["dur_ns"].to_pylist())] == step_time
    kernels = slices.filter(pc.equal(slices["kind"], "kernel"))
    assert kernels["step"].null_count == 0 and kernels["correlation_id"].null_count == 0
    assert kernels["external_id"].null_count == 0        # every kernel names the operator that queued it


def test_step_trace_matches_msprof_analyze(shared_data):
    """cluster -m all's ClusterStepTraceTime (torch_npu's step trace) and cluster_time_summary."""
    db = shared_data / REFERENCE / "cluster_all__ascend-msinsight_pytorch_db_level1" / "cluster_analysis.db"
    with sqlite3.connect(f"{db.as_uri()}?mode=ro&immutable=1", uri=True) as con:
        con.row_factory = sqlite3.Row
        trace = by([dict(r) for r in con.execute("SELECT * FROM ClusterStepTraceTime")], "index")
    summary = by(reference_csv(shared_data, "cluster_time_summary/*/cluster_time_summary_*.csv"), "Rank")
    for rank in (0, 1):
        run = read(shared_data, "level1", rank)
        step = breakdown.step_breakdown(run).to_pylist()[0]
        in_step, whole = breakdown.overlap(run).to_pylist()
        ref, total = trace[str(rank)], summary[str(rank)]
        assert step["step"] == in_step["step"] == int(total["Step"]) == int(ref["step"]) == 50
        assert step["step_ns"] == us(total["Step Time(us)"])
        for row in (in_step, whole):                        # all device work of the run lies inside step 50
            assert row["computation_ns"] == us(ref["computing"]) == us(total["Computation(us)"])
            assert row["communication_ns"] == us(ref["communication"]) == us(total["Communication(us)"])
            assert row["overlap_ns"] == us(ref["overlapped"]) == us(total["Communication Overlap Computation(us)"])
            assert row["pure_communication_ns"] == us(ref["communication_not_overlapped"]) \
                == us(total["Communication Not Overlap Computation(us)"]) == step["communication_ns"]
        assert step["compute_ns"] == us(ref["computing"])
        # memcpy: all of it, and the part neither computation nor communication hides
        memcpy = ops.op_statistic(run, search="MEMCPY_ASYNC").to_pylist()[0]
        assert memcpy["total_ns"] == us(total["Memory(us)"])
        assert step["memory_ns"] == us(total["Memory Not Overlap Computation Communication(us)"])
        # torch_npu's stage starts at the step's first computing task (module docstring)
        first_computing = pc.min(ops.op_instances(run, kinds=["kernel"])["start_ns"]).as_py()
        assert first_computing - step["start_ns"] == us(ref["preparing"])
        assert whole["end_ns"] - first_computing == us(ref["stage"])
        head = first_computing - whole["start_ns"]
        assert whole["free_ns"] - head == us(ref["free"])
        assert whole["free_ns"] - head - step["memory_ns"] == us(total["Free(us)"])


def test_compute_operators_match_compute_op_sum(shared_data):
    """compute_op_sum's per-type statistics over both ranks (all_stats) and per rank (rank_stats_by_optype)."""
    stats = ops.op_statistic(job(shared_data)).filter(pc.equal(ops.op_statistic(job(shared_data))["category"],
                                                               "device")).to_pylist()
    computing = [s for s in stats if s["task_type"] not in ("HCCL", "MEMCPY_ASYNC", "EVENT_RECORD", "EVENT_WAIT",
                                                             "PROFILING_ENABLE", "PROFILING_DISABLE")]
    mine = by(computing, "rank", "op_type", "task_type")
    per_rank = reference_csv(shared_data, "compute_op_sum/*/rank_stats_by_optype.csv")
    assert len(per_rank) == len(mine)
    for ref in per_rank:
        row = mine[(int(ref["Rank"]), ref["OpType"], ref["TaskType"])]
        assert row["count"] == int(ref["Count"])
        assert (row["total_ns"], row["min_ns"], row["max_ns"]) == (us(ref["Sum(Us)"]), us(ref["Min(Us)"]),
                                                                   us(ref["Max(Us)"]))
        assert row["avg_ns"] == pytest.approx(float(ref["Mean(Us)"]) * 1000, abs=0.5)
    overall = reference_csv(shared_data, "compute_op_sum/*/all_stats.csv")
    for ref in overall:
        rows = [r for r in computing if (r["op_type"], r["task_type"]) == (ref["OpType"], ref["TaskType"])]
        assert sum(r["count"] for r in rows) == int(ref["Count"])
        assert sum(r["total_ns"] for r in rows) == us(ref["Sum(Us)"])
        assert min(r["min_ns"] for r in rows) == us(ref["Min(Us)"])
        assert max(r["max_ns"] for r in rows) == us(ref["Max(Us)"])
    top = sorted(({"op_type": t, "count": sum(r["count"] for r in computing if r["op_type"] == t),
                   "total_ns": sum(r["total_ns"] for r in computing if r["op_type"] == t)}
                  for t in {r["op_type"] for r in computing}), key=lambda r: -r["total_ns"])[:4]
    assert [(r["op_type"], r["count"], round(r["total_ns"] / 1000)) for r in top] == [    # the README's figures
        ("ForeachAddList", 6, 3900), ("TransData", 114, 2816), ("MatMulV2", 16, 1935), ("Conv2D", 10, 1447)]


def test_communication_operators_match_hccl_sum(shared_data):
    """hccl_sum: the HCCL operators per type over both ranks, per rank, and per operator."""
    stats = [s for s in ops.op_statistic(job(shared_data)).to_pylist() if s["task_type"] == "HCCL"]
    for ref in reference_csv(shared_data, "hccl_sum/*/rank_stats.csv"):
        row = next(s for s in stats if s["rank"] == int(ref["Rank"]) and s["op_type"] == ref["OpType"])
        assert (row["count"], row["total_ns"], row["min_ns"], row["max_ns"]) == (
            int(ref["Count"]), us(ref["Sum(Us)"]), us(ref["Min(Us)"]), us(ref["Max(Us)"]))
    found = collectives.collectives(job(shared_data))
    durations = found["dur_ns"].to_pylist()
    (ref,) = reference_csv(shared_data, "hccl_sum/*/all_stats.csv")
    assert ref["OpType"] == "hcom_allReduce_" and len(durations) == int(ref["Count"]) == 8
    assert sum(durations) == us(ref["Sum(Us)"]) and max(durations) == us(ref["Max(Us)"])
    assert sum(durations) / len(durations) == pytest.approx(float(ref["Mean(Us)"]) * 1000, rel=1e-9)
    assert statistics.median(durations) == pytest.approx(float(ref["Median(Us)"]) * 1000, rel=1e-9)
    assert (round(25087.28625), round(5588.3915), round(88750.993)) == (   # the README's figures (us)
        round(float(ref["Mean(Us)"])), round(float(ref["Median(Us)"])), round(float(ref["Max(Us)"])))
    names = pc.take(job(shared_data).slices["name"],
                    pc.index_in(found["slice_id"], value_set=job(shared_data).slices["id"])).to_pylist()
    for ref in reference_csv(shared_data, "hccl_sum/*/top_op_stats.csv"):
        mine = [d for n, d in zip(names, durations) if n == ref["OpName"]]
        assert (len(mine), sum(mine), min(mine), max(mine)) == (
            int(ref["Count"]), us(ref["Sum(Us)"]), us(ref["Min(Us)"]), us(ref["Max(Us)"]))


def test_communication_time_and_wait_split_match(shared_data):
    """cluster_communication_time's elapsed time per operator, and cluster_time_summary's transmit / wait
    split rebuilt from perfsight's collectives (module docstring)."""
    run = job(shared_data)
    found = collectives.collectives(run).to_pylist()
    names = dict(zip(run.slices["id"].to_pylist(), run.slices["name"].to_pylist()))
    elapsed = {(c["rank"], names[c["slice_id"]]): c["dur_ns"] for c in found}
    for ref in reference_csv(shared_data, "communication_time/*/cluster_communication_time.csv"):
        if ref["hccl_op_name"] != "Total Op Info":
            assert elapsed[(int(ref["rank_id"]), ref["hccl_op_name"])] == \
                pytest.approx(float(ref["elapsed_time"]) * 1e6, abs=1)   # its times carry sub-ns float noise
    fastest = {}
    for (rank, name), dur in elapsed.items():
        fastest[name] = min(fastest.get(name, dur), dur)
    for ref in reference_csv(shared_data, "cluster_time_summary/*/cluster_time_summary_*.csv"):
        rank = int(ref["Rank"])
        mine = {name: dur for (r, name), dur in elapsed.items() if r == rank}
        assert sum(fastest[name] for name in mine) == us(ref["Communication Transmit Stage Time(us)"])
        assert sum(dur - fastest[name] for name, dur in mine.items()) == \
            pytest.approx(float(ref["Communication Wait Stage Time(us)"]) * 1000, abs=1)


def test_hccl_plane_steps_keep_the_bandwidth_facts(shared_data):
    """ClusterCommunicationBandwidth's HCCS transit size and time per operator = the sums of the reader's
    SDMA plane steps over HCCS links (their ``size(Byte)`` and durations)."""
    db = shared_data / REFERENCE / "cluster_all__ascend-msinsight_pytorch_db_level1" / "cluster_analysis.db"
    with sqlite3.connect(f"{db.as_uri()}?mode=ro&immutable=1", uri=True) as con:
        reference = con.execute("SELECT DISTINCT rank_id, hccl_op_name, transit_size, transit_time "
                                "FROM ClusterCommunicationBandwidth WHERE band_type = 'HCCS' "
                                "AND hccl_op_name <> 'Total Op Info'").fetchall()
    con = job(shared_data).connect()
    sums = {(rank, name): (size, time) for rank, name, size, time in con.sql("""
        SELECT t.rank, json_extract_string(s.args, '$."op name"'),
               sum(TRY_CAST(json_extract_string(s.args, '$."size(Byte)"') AS BIGINT)), sum(s.dur_ns)
        FROM slices s JOIN tracks t USING (track_id)
        WHERE s.kind = 'other' AND s.task_type = 'SDMA' AND json_extract_string(s.args, '$."link type"') = 'HCCS'
        GROUP BY ALL""").fetchall()}
    assert len(reference) == len(sums) == 8
    for rank, name, size_mb, time_ms in reference:
        size, time = sums[(rank, name)]
        assert size == round(size_mb * 1e6)
        assert time == pytest.approx(time_ms * 1e6, rel=1e-3)   # msprof-analyze's task times are float us


def test_cluster_analyses_on_the_two_ranks(shared_data):
    run = job(shared_data)
    ranks = cluster.rank_breakdown(job_of(run)).to_pylist()
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["common_steps"] for r in ranks)
    slowest = cluster.slowest_rank(job_of(run)).to_pylist()[0]
    assert (slowest["slowest_rank"], slowest["slowest_step_ns"], slowest["fastest_step_ns"]) == (
        0, us(151888.75), us(148265.42))
    # each rank's 4 all-reduces (their HCCL count x float32 bytes); the matrix's links: to itself and the other
    # profiled rank (both placed in the group), the six unprofiled members' only by group-local position (null)
    volume = 4 * (4097000 + 16781312 + 37752832 + 2469696)
    figures = collectives.collective_figures(job_of(run)).to_pylist()
    matrix = collectives.communication_pairs(job_of(run)).to_pylist()      # analysis.db's CommAnalyzerMatrix
    for rank in (0, 1):
        assert sum(f["bytes"] for f in figures if f["rank"] == rank) == volume
        cells = [c for c in matrix if c["src_rank"] == rank]
        assert [(c["dst_rank"], c["transport"]) for c in cells] == [
            (p, "LOCAL" if p == rank else "HCCS") for p in (0, 1)] + [(None, "HCCS")]
    summary = collectives.collective_summary(run).to_pylist()
    assert [(s["rank"], s["collective"], s["source"], s["count"], s["with_peers"]) for s in summary] == [
        (0, "allreduce", "device", 4, 4), (1, "allreduce", "device", 4, 4)]
    assert json.loads(run.meta_dict()["world_size"]) == 8


def test_text_and_db_exports_agree(shared_data):
    """The text export (torch_npu/text/level1) and the DB export (db/level1) of the same job: the same
    operators, collectives, step and memory records (even the same peak); times within 10%, because the
    two samples are two separate collections of the job (their timestamps differ), so run-to-run
    variation separates them (msprof-analyze's own figures on the two differ by up to 4%, e.g. exposed
    communication 101963 vs 98072 us on rank 0)."""
    text = merge([(f"rank{r}", read_torch_npu_text(
        shared_data / "ascend/torch_npu/text/level1" / f"rank{r}_ascend_pt", rank=r)) for r in (0, 1)])
    db = job(shared_data)

    def device_counts(run):
        return {(s["rank"], s["op_type"], s["task_type"]): s["count"] for s in ops.op_statistic(run).to_pylist()
                if s["category"] == "device" and s["task_type"] not in ("EVENT_RECORD", "EVENT_WAIT")}

    mine, theirs = device_counts(db), device_counts(text)
    computing = {k for k in mine if k[2] not in ("MEMCPY_ASYNC", "PROFILING_ENABLE", "PROFILING_DISABLE")}
    assert {k: mine[k] for k in computing} == {k: theirs.get(k) for k in computing}
    for a, b in zip(breakdown.step_breakdown(db).to_pylist(), breakdown.step_breakdown(text).to_pylist()):
        assert (a["rank"], a["step"]) == (b["rank"], b["step"])
        for key in ("step_ns", "compute_ns", "communication_ns"):
            assert a[key] == pytest.approx(b[key], rel=0.1), key
    columns = ("rank", "collective", "in_nelems", "out_nelems", "dtype", "group_size", "group_ranks")
    assert [{k: c[k] for k in columns} for c in collectives.collectives(db).to_pylist()] == \
        [{k: c[k] for k in columns} for c in collectives.collectives(text).to_pylist()]
    # the allocator's records: as many, as many with an operator, the same peak at the same operator
    for run in (db, text):
        assert run.memory.num_rows == 2 * 381 and run.memory["op_slice_id"].null_count == 2 * 32
    peak = ("rank", "device", "peak_allocated_bytes", "op_name", "events")
    assert memory.memory_peak(db).select(peak).to_pylist() == memory.memory_peak(text).select(peak).to_pylist()


# --- planted databases ----------------------------------------------------------------------------

STRINGS = {1: "ProfilerStep#3", 2: "aten::mm", 3: "launch", 4: "MatMul_1", 5: "AI_CORE", 6: "MatMulV2",
           7: "KERNEL_AICORE", 8: "2,3;\r\n3,4", 9: "float;\r\nfloat", 10: '"2,3;3,4"', 11: "FLOAT;FLOAT",
           12: "MEMCPY_ASYNC", 13: "hcom_send__1_0_1", 14: "grpA", 15: "N/A", 16: "SDMA", 17: "Memcpy",
           18: "Enqueue", 19: "Dequeue@aten::mm", 20: "aclrtMemcpyAsync"}
INVALID = 4294967295
MAIN = (100 << 32) | 100            # globalTid of pid 100, tid 100
QUEUE = (100 << 32) | 101

#: table -> (its columns, space-separated; its rows)
PLANTED = {
    "STRING_IDS": ("id value", list(STRINGS.items())),
    "ENUM_API_TYPE": ("id name", [(10000, "node"), (20000, "acl"), (50001, "op"), (50002, "queue")]),
    "ENUM_HCCL_DATA_TYPE": ("id name", [(4, "FP32")]),
    "META_DATA": ("name value", [("parallel_group_info", json.dumps(
        {"grpA": {"group_name": "pp", "group_rank": 1, "global_ranks": [4, 6]}}))]),
    "RANK_DEVICE_MAP": ("rankId deviceId", [(6, 3)]),
    "PYTORCH_API": (("startNs endNs globalTid connectionId name sequenceNumber fwdThreadId inputDtypes inputShapes "
                     "callchainId type"), [        # times as texts, as torch_npu writes them
        ("1736410576000001000", "1736410576000100000", MAIN, None, 1, None, None, None, None, None, 50001),
        # the samples' swap: the shapes text under inputDtypes, the dtypes under inputShapes
        ("1736410576000002000", "1736410576000005000", MAIN, 0, 2, 7, 0, 8, 9, None, 50001),
        ("1736410576000002500", "1736410576000002600", MAIN, 1, 18, None, None, None, None, None, 50002),
        ("1736410576000002700", "1736410576000003900", QUEUE, 2, 19, None, None, None, None, None, 50002)]),
    "CONNECTION_IDS": ("id connectionId", [(0, 100), (1, 77), (2, 77)]),
    "CANN_API": ("startNs endNs type globalTid connectionId name", [
        (1736410576000003000, 1736410576000003500, 10000, QUEUE, 100, 3),
        (1736410576000003600, 1736410576000003800, 20000, QUEUE, 101, 20)]),
    "TASK": ("startNs endNs deviceId connectionId globalTaskId globalPid taskType contextId streamId taskId modelId", [
        (1736410576000004000, 1736410576000004600, 3, 100, 1, 100, 7, INVALID, 2, 5, INVALID),   # the container
        (1736410576000004010, 1736410576000004590, 3, 100, 2, 100, 7, 0, 2, 5, INVALID),
        (1736410576000005000, 1736410576000005100, 3, 101, 3, 100, 12, INVALID, 2, 6, INVALID),
        (1736410576000006100, 1736410576000008900, 3, 200, 4, 100, 16, 0, 5, 9, INVALID)]),
    "COMPUTE_TASK_INFO": (("name globalTaskId blockDim mixBlockDim taskType opType inputFormats inputDataTypes "
                           "inputShapes outputFormats outputDataTypes outputShapes attrInfo waitNs"),
                          [(4, 2, 8, 0, 5, 6, None, 11, 10, None, None, None, None, 0)]),
    "COMMUNICATION_OP": (("opName startNs endNs connectionId groupName opId relay retry dataType algType count opType "
                          "waitNs"),
                         [(13, 1736410576000006000, 1736410576000009000, 200, 14, 1, 0, 0, 4, 15, 1024, 15, 0)]),
    "COMMUNICATION_TASK_INFO": (("name globalTaskId taskType planeId groupName notifyId rdmaType srcRank dstRank "
                                 "transportType size dataType linkType opId"),
                                [(13, 4, 17, 0, 14, 0, 65535, 1, 0, 0, 4096, 4, 1, 1)]),
}


def write_db(folder: Path, tables: dict, name: str = "ascend_pytorch_profiler_6.db") -> Path:
    output = folder / "ASCEND_PROFILER_OUTPUT"
    output.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(output / name) as con:
        for table, (columns, rows) in tables.items():
            con.execute(f"CREATE TABLE {table} ({', '.join(columns.split())})")
            if rows:
                con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    return output / name


def test_planted_database_maps_every_rule(tmp_path):
    path = write_db(tmp_path / "run_ascend_pt", PLANTED)
    assert find_torch_npu_db(tmp_path / "run_ascend_pt") == find_torch_npu_db(path.parent) == \
        find_torch_npu_db(path) == path
    run = read_torch_npu_db(tmp_path / "run_ascend_pt")
    for name, table in run.items():
        assert conform(name, table).equals(table), name
    rows = {row["name"]: row for row in run.slices.to_pylist()}
    tracks = {row["track_id"]: row for row in run.tracks.to_pylist()}
    assert run.meta_dict()["rank"] == "6" and set(run.tracks["rank"].to_pylist()) == {6}
    mm, kernel = rows["aten::mm"], rows["MatMul_1"]
    assert (mm["kind"], mm["step"], mm["external_id"]) == ("cpu_op", 3, 0)
    assert (json.loads(mm["input_shapes"]), json.loads(mm["input_dtypes"])) == ([[2, 3], [3, 4]], ["float", "float"])
    assert (kernel["kind"], kernel["op_type"], kernel["task_type"]) == ("kernel", "MatMulV2", "AI_CORE")
    assert (kernel["start_ns"], kernel["dur_ns"]) == (1736410576000004010, 580)      # exact ns
    assert (kernel["step"], kernel["correlation_id"], kernel["external_id"]) == (3, 100, 0)
    assert json.loads(kernel["input_shapes"]) == [[2, 3], [3, 4]]
    assert tracks[kernel["track_id"]]["name"] == "npu:3 stream 2"
    assert not any(r["task_type"] == "KERNEL_AICORE" for r in rows.values())        # the launch container is gone
    assert (rows["MEMCPY_ASYNC"]["kind"], rows["launch"]["kind"], rows["aclrtMemcpyAsync"]["kind"]) == \
        ("memcpy", "runtime", "runtime")
    assert rows["Enqueue"]["kind"] == rows["Dequeue@aten::mm"]["kind"] == "annotation"
    send = rows["hcom_send__1_0_1"]
    assert (send["kind"], send["op_type"], send["task_type"]) == ("comm", "hcom_send_", "HCCL")   # opType N/A
    assert tracks[send["track_id"]]["name"] == "npu:3 stream 5"                      # where its steps ran
    step = rows["Memcpy"]
    assert (step["kind"], step["task_type"]) == ("other", "SDMA")
    assert tracks[step["track_id"]]["name"] == "npu:3 stream 5 HCCL plane 0"
    flows = {(f["src_id"], f["dst_id"], f["kind"]) for f in run.flows.to_pylist()}
    assert flows == {(rows["launch"]["id"], kernel["id"], "launch"),
                     (rows["aclrtMemcpyAsync"]["id"], rows["MEMCPY_ASYNC"]["id"], "launch"),
                     (rows["Enqueue"]["id"], rows["Dequeue@aten::mm"]["id"], "other")}
    # the group-local peer 0 of rank 6 (group rank 1 of [4, 6]) is global rank 4
    (collective,) = collectives.collectives(run).to_pylist()
    assert (collective["collective"], collective["dtype"], collective["in_nelems"], collective["in_bytes"],
            collective["group_size"], collective["group_ranks"], collective["peer"]) == (
        "send", "float32", 1024, 4096, 2, [4, 6], 4)
    assert json.loads(send["args"])["Process Group Desc"] == "pp"
    pairs = collectives.communication_pairs(job_of(run)).to_pylist()
    assert [(c["src_rank"], c["dst_rank"]) for c in pairs] == [(6, 4)]
    assert json.loads(run.meta_dict()["parse_warnings"]) == []


def test_offsets_shift_ids_and_tracks(tmp_path):
    write_db(tmp_path / "run_ascend_pt", PLANTED)
    plain = read_torch_npu_db(tmp_path / "run_ascend_pt")
    shifted = read_torch_npu_db(tmp_path / "run_ascend_pt", rank=2, id_offset=1000, track_offset=50)
    assert [i + 1000 for i in plain.slices["id"].to_pylist()] == shifted.slices["id"].to_pylist()
    assert [t + 50 for t in plain.tracks["track_id"].to_pylist()] == shifted.tracks["track_id"].to_pylist()
    assert [i + 1000 for i in plain.flows["src_id"].to_pylist()] == shifted.flows["src_id"].to_pylist()
    assert shifted.meta_dict()["rank"] == "2" and set(shifted.tracks["rank"].to_pylist()) == {2}


def test_a_database_without_framework_tables_reads(tmp_path):
    """msprof's own database has the device and CANN tables only (no PYTORCH_API, CONNECTION_IDS)."""
    kept = ("STRING_IDS", "ENUM_API_TYPE", "CANN_API", "TASK", "COMPUTE_TASK_INFO")
    write_db(tmp_path / "run_ascend_pt", {name: PLANTED[name] for name in kept})
    run = read_torch_npu_db(tmp_path / "run_ascend_pt", rank=0)
    for name, table in run.items():
        assert conform(name, table).equals(table), name
    # the SDMA task, without its COMMUNICATION_TASK_INFO row, is still an HCCL operator's part: other
    assert sorted(run.slices["kind"].to_pylist()) == ["kernel", "memcpy", "other", "runtime", "runtime"]
    assert run.flows["kind"].to_pylist() == ["launch", "launch"] and run.slices["step"].null_count == 5


def test_ai_cpu_scheduled_communication_is_communication_and_bare_number_names_are_named(tmp_path):
    """msprof's database: an HCCL operator scheduled on the AI CPU (COMMUNICATION_SCHEDULE_TASK_INFO, or a
    COMPUTE_TASK_INFO row named hcom_...) is communication, not computation; one whose launch also made a
    COMMUNICATION_OP row is that operator's part. A bare-number name (an unresolved hash) takes the op type."""
    strings = {30: "hcom_allReduce__7_0_1", 31: "hcom_allReduce_", 32: "AI_CPU", 33: "1.83976461015564e+19",
               34: "KERNEL_AICPU"}
    tasks = PLANTED["TASK"][1] + [
        (1736410576000010000, 1736410576000010500, 3, 300, 5, 100, 34, INVALID, 7, 1, INVALID),
        (1736410576000011000, 1736410576000011400, 3, 200, 6, 100, 34, INVALID, 5, 2, INVALID),
        (1736410576000012000, 1736410576000012300, 3, 400, 7, 100, 7, 0, 2, 8, INVALID)]
    compute = PLANTED["COMPUTE_TASK_INFO"][1] + [(13, 6, 1, 0, 32, 15, None, None, None, None, None, None, None, 0),
                                                (33, 7, 8, 0, 5, 6, None, None, None, None, None, None, None, 0)]
    tables = dict(PLANTED, STRING_IDS=("id value", list({**STRINGS, **strings}.items())),
                  TASK=(PLANTED["TASK"][0], tasks),
                  COMPUTE_TASK_INFO=(PLANTED["COMPUTE_TASK_INFO"][0], compute),
                  COMMUNICATION_SCHEDULE_TASK_INFO=("name globalTaskId taskType opType", [(30, 5, 32, 31)]))
    write_db(tmp_path / "run_ascend_pt", tables, "msprof_20250109120500.db")
    run = read_torch_npu_db(tmp_path / "run_ascend_pt", rank=6)
    for name, table in run.items():
        assert conform(name, table).equals(table), name
    by_start = {row["start_ns"]: row for row in run.slices.to_pylist()}
    reduce, send_part, unnamed = (by_start[1736410576000000000 + offset] for offset in (10000, 11000, 12000))
    assert (reduce["name"], reduce["kind"], reduce["op_type"], reduce["task_type"]) == (
        "hcom_allReduce__7_0_1", "comm", "hcom_allReduce_", "AI_CPU")
    # the send's COMMUNICATION_OP already counts its AI CPU task
    assert (send_part["name"], send_part["kind"]) == ("hcom_send__1_0_1", "other")
    assert (unnamed["name"], unnamed["kind"], unnamed["op_type"]) == ("MatMulV2", "kernel", "MatMulV2")
    kinds = {row["name"]: row["kind"] for row in run.slices.to_pylist() if row["kind"] in ("comm", "kernel")}
    assert kinds == {"MatMul_1": "kernel", "MatMulV2": "kernel", "hcom_send__1_0_1": "comm",
                     "hcom_allReduce__7_0_1": "comm"}
    assert sorted(c["collective"] for c in collectives.collectives(run).to_pylist()) == ["allreduce", "send"]
    (warning,) = [w for w in json.loads(run.meta_dict()["parse_warnings"]) if "bare number" in w]
    assert "1 device slice named by a bare number (e.g. 1.83976461015564e+19" in warning


def test_empty_tables_are_an_empty_run(tmp_path):
    write_db(tmp_path / "run_ascend_pt", {name: (columns, []) for name, (columns, _) in PLANTED.items()})
    run = read_torch_npu_db(tmp_path / "run_ascend_pt")
    for name, table in run.items():
        assert conform(name, table).equals(table), name
    assert run.slices.num_rows == run.tracks.num_rows == run.memory.num_rows == 0


def test_not_sqlite_missing_table_or_column_are_input_errors(tmp_path):
    garbage = tmp_path / "garbage_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    garbage.parent.mkdir(parents=True)
    garbage.write_bytes(b"this is not a database\n" * 100)
    with pytest.raises(InputError, match=r"ascend_pytorch_profiler_0\.db: not a readable SQLite database"):
        read_torch_npu_db(garbage.parent.parent)
    write_db(tmp_path / "no_strings", {k: v for k, v in PLANTED.items() if k != "STRING_IDS"})
    with pytest.raises(InputError, match=r"ascend_pytorch_profiler_6\.db: lacks the required table STRING_IDS"):
        read_torch_npu_db(tmp_path / "no_strings")
    write_db(tmp_path / "no_data", {"STRING_IDS": PLANTED["STRING_IDS"]})
    with pytest.raises(InputError, match=r"lacks the required table PYTORCH_API, CANN_API or TASK"):
        read_torch_npu_db(tmp_path / "no_data")
    broken = dict(PLANTED, TASK=("endNs deviceId", []))
    write_db(tmp_path / "no_column", broken)
    with pytest.raises(InputError, match=r"\.db: table TASK lacks the required column startNs"):
        read_torch_npu_db(tmp_path / "no_column")
    assert find_torch_npu_db(tmp_path / "nothing_here") is None
    with pytest.raises(InputError, match="holds no torch_npu profiler database"):
        read_torch_npu_db(tmp_path)
