"""Global ranks on Ascend (issue 16): group-local ranks mapped to global ranks through parallel_group_info
(never by a group's size), kept and marked local when nothing maps them; the rank's communication matrix
links in meta; memory, counters and devices under the job rank with the device id kept. Every case is
planted in a copy of the real torch_npu samples (../shared/data/ascend/torch_npu) with exact answers."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pyarrow.compute as pc
import pytest

from perfsight.analysis import collectives, memory
from perfsight.ingest.ascend.torch_npu_db import read_torch_npu_db
from perfsight.ingest.ascend.torch_npu_text import read_torch_npu_text
from perfsight.ingest.jobs import merge
from tests.conftest import SHARED_DATA, copy_shared

TEXT = SHARED_DATA / "ascend" / "torch_npu" / "text" / "level1"
DB = SHARED_DATA / "ascend" / "torch_npu" / "db" / "level1"
TEXT_GROUP = "17522688603477080586"           # the text samples' group (communication.json's op@group)
#: the db samples' HCCL communicator and the name communication.json / analysis.db give it (msprof's hash)
COMMUNICATOR, HASHED = "90.91.105.46%enp189s0f0_60000_0_1736410538306028", "17148521525495523210"
OUTPUT = "ASCEND_PROFILER_OUTPUT"

pytestmark = pytest.mark.skipif(not TEXT.is_dir(), reason=f"the Ascend samples are not at {TEXT}")


def copy(tmp_path: Path, source: Path) -> Path:
    target = tmp_path / source.name
    copy_shared(source, target)
    return target


def edit_json(path: Path, change) -> None:
    document = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps(change(document) or document))


def rename_group(run: Path, old: str, new: str) -> None:
    for name in ("communication.json", "communication_matrix.json"):
        path = run / OUTPUT / name
        path.write_text(path.read_text().replace(old, new))


def device_collectives(tables) -> list[dict]:
    comm = tables.slices.filter(pc.equal(tables.slices["task_type"], "HCCL"))
    return [json.loads(args) for args in comm["args"].to_pylist()]


def link(tables, key: str, src: int, dst: int | None = None, local: bool | None = None) -> list[dict]:
    return [entry for entry in json.loads(tables.meta_dict()["communication_matrix"])
            if entry["key"] == key and entry["src"] == src and (dst is None or entry["dst"] == dst)
            and (local is None or entry["local"] == local)]


# --- group-local ranks mapped through parallel_group_info -----------------------------------------------

def test_text_groups_map_through_parallel_group_info_by_communicator_and_sorted_ranks(tmp_path):
    run = copy(tmp_path, TEXT / "rank0_ascend_pt")
    rename_group(run, TEXT_GROUP, HASHED)
    edit_json(run / OUTPUT / "communication_matrix.json", lambda m: m["step50"].update(p2p={"send-top1@4242": {
        "0-1": {"Transport Type": "HCCS", "Transit Size(MB)": 8.0, "Transit Time(ms)": 0.5, "Bandwidth(GB/s)": 16.0,
                "Op Name": "hcom_send__586_4_1"}}}))
    edit_json(run / "profiler_metadata.json", lambda m: m.update(parallel_group_info={
        COMMUNICATOR: {"group_name": "dp", "group_rank": 0, "global_ranks": [14, 12, 10, 8, 6, 4, 2, 0]},
        "4242": {"group_name": "pp", "group_rank": 0, "global_ranks": [2, 0]},        # a send/recv pair
        "tp-comm": {"group_name": "tp", "group_rank": 0, "global_ranks": [0, 1]}}))   # same size, another group
    tables = read_torch_npu_text(run)
    found = collectives.collectives(tables).to_pylist()
    assert [c["group_ranks"] for c in found] == [[0, 2, 4, 6, 8, 10, 12, 14]] * 4
    assert {(a["Process Group Name"], a["Process Group Desc"], "Process Group Ranks Local" in a)
            for a in device_collectives(tables)} == {(HASHED, "dp", False)}
    groups = json.loads(tables.meta_dict()["communication_groups"])
    assert groups["4242"] == {"ranks": [0, 2], "local": False, "source": "parallel_group_info", "name": "pp",
                              "group_rank": 0, "communicator": "4242"}
    # the pair's group-local 0-1 is global 0 -> 2, not 0 -> 1
    assert link(tables, "send-top1", 0) == [{
        "step": 50, "kind": "p2p", "key": "send-top1", "group": "4242", "src": 0, "dst": 2, "local": False,
        "transport": "HCCS", "transit_size_mb": 8.0, "transit_time_ms": 0.5, "bandwidth_gbps": 16.0,
        "op_name": "hcom_send__586_4_1"}]
    assert link(tables, "allreduce-top1", 0, 2) == [{
        "step": 50, "kind": "collective", "key": "allreduce-top1", "group": HASHED, "src": 0, "dst": 2,
        "local": False, "transport": "HCCS", "transit_size_mb": 37.781504, "transit_time_ms": 2.153383,
        "bandwidth_gbps": 17.5452, "op_name": "hcom_allReduce__586_2_1"}]
    assert {(e["src"], e["dst"]) for e in link(tables, "allreduce-top1", 0)} == {(0, r) for r in range(0, 16, 2)}
    assert not any("group-local" in w for w in json.loads(tables.meta_dict()["parse_warnings"]))


def test_text_group_without_a_mapping_stays_local_and_says_so(tmp_path):
    run = copy(tmp_path, TEXT / "rank0_ascend_pt")
    # the only group of size 8 holding rank 0, but not this group: a size is not a mapping
    edit_json(run / "profiler_metadata.json", lambda m: m.update(parallel_group_info={
        "other-comm": {"group_name": "tp", "group_rank": 0, "global_ranks": [0, 8, 16, 24, 32, 40, 48, 56]}}))
    tables = read_torch_npu_text(run)
    assert [c["group_ranks"] for c in collectives.collectives(tables).to_pylist()] == [list(range(8))] * 4
    assert {(a["Process Group Ranks"], a["Process Group Ranks Local"]) for a in device_collectives(tables)} == \
        {("[0, 1, 2, 3, 4, 5, 6, 7]", True)}
    group = json.loads(tables.meta_dict()["communication_groups"])[TEXT_GROUP]
    assert (group["local"], group["group_rank"], group["name"]) == (True, 0, None)
    assert group["source"] == "communication_matrix.json (group-local ranks: no parallel_group_info entry)"
    warnings = json.loads(tables.meta_dict()["parse_warnings"])
    assert any(w.startswith(f"communication groups {TEXT_GROUP}: no parallel_group_info maps") for w in warnings)
    assert [(e["dst"], e["local"]) for e in link(tables, "allreduce-top1", 0, 1)] == [(1, True)]


def test_damaged_matrix_entries_are_skipped_counted_and_described(tmp_path):
    run = copy(tmp_path, TEXT / "rank0_ascend_pt")

    def damage(matrix):
        top = matrix["step50"]["collective"][f"allreduce-top1@{TEXT_GROUP}"]
        top["0-x"] = dict(top["0-1"])
        top["0-1"]["Transit Size(MB)"] = "n/a"
        matrix["step50"]["collective"]["broken"] = {"0-1": {}}
        matrix["step50"]["p2p"] = []
    edit_json(run / OUTPUT / "communication_matrix.json", damage)
    tables = read_torch_npu_text(run)
    (warning,) = [w for w in json.loads(tables.meta_dict()["parse_warnings"]) if "entries skipped" in w]
    assert warning == (
        "communication_matrix.json: 4 entries skipped (step50/p2p: a list, not an object; "
        f"step50/collective/allreduce-top1@{TEXT_GROUP}: link '0-1' has no numeric transit size, time and bandwidth; "
        f"step50/collective/allreduce-top1@{TEXT_GROUP}: link '0-x' is not 'src-dst'; and 1 more); the rest are read")
    assert len(json.loads(tables.meta_dict()["communication_matrix"])) == 48 - 1
    assert link(tables, "allreduce-top1", 0, 1) == []


def test_db_groups_map_through_meta_data_parallel_group_info(tmp_path):
    run = copy(tmp_path, DB / "rank1_ascend_pt")
    with sqlite3.connect(run / OUTPUT / "ascend_pytorch_profiler_1.db") as con:
        con.execute("INSERT INTO META_DATA VALUES ('parallel_group_info', ?)", (json.dumps({
            COMMUNICATOR: {"group_name": "dp", "group_rank": 1, "global_ranks": [25, 24, 17, 16, 9, 8, 1, 0]}}),))
    tables = read_torch_npu_db(run)
    ranks = [0, 1, 8, 9, 16, 17, 24, 25]
    assert [c["group_ranks"] for c in collectives.collectives(tables).to_pylist()] == [ranks] * 4
    assert {(a["Process Group Name"], a["group_name"], "Process Group Ranks Local" in a)
            for a in device_collectives(tables)} == {(HASHED, COMMUNICATOR, False)}
    assert link(tables, "allreduce-top1", 1, 8) == [{
        "step": 50, "kind": "collective", "key": "allreduce-top1", "group": HASHED, "src": 1, "dst": 8,
        "local": False, "transport": "HCCS", "transit_size_mb": 37.781504, "transit_time_ms": 2.2516249999999998,
        "bandwidth_gbps": 16.7797, "op_name": "hcom_allReduce__210_2_1"}]
    assert json.loads(tables.meta_dict()["communication_groups"])[HASHED]["source"] == "parallel_group_info"


def test_db_group_without_a_mapping_stays_local_with_the_ranks_place_from_analysis_db():
    tables = read_torch_npu_db(DB / "rank1_ascend_pt")
    assert {(a["Process Group Ranks"], a["Process Group Ranks Local"]) for a in device_collectives(tables)} == \
        {("[0, 1, 2, 3, 4, 5, 6, 7]", True)}
    group = json.loads(tables.meta_dict()["communication_groups"])[HASHED]
    assert (group["local"], group["group_rank"], group["communicator"]) == (True, 1, COMMUNICATOR)
    assert [(e["transit_size_mb"], e["local"]) for e in link(tables, "allreduce-top1", 1, 2)] == [(37.781504, True)]
    assert any(path.endswith("analysis.db") for path in json.loads(tables.meta_dict()["source_files"]))


# --- memory, counters and devices under the job rank ------------------------------------------------------

def npu4(tmp_path: Path, *, trace: bool) -> Path:
    """Rank 1 of the text sample on device npu:4 (memory files say NPU:4), without its trace when asked."""
    run = copy(tmp_path, TEXT / "rank1_ascend_pt")
    for name in ("memory_record.csv", "npu_module_mem.csv", "operator_memory.csv"):
        path = run / OUTPUT / name
        path.write_text(path.read_text().replace("NPU:1", "NPU:4"))
    if not trace:
        (run / OUTPUT / "trace_view.json").unlink()
    return run


@pytest.mark.parametrize("trace", [True, False])
def test_memory_counters_and_devices_of_a_rank_on_npu4_stay_under_its_rank(tmp_path, trace):
    tables = read_torch_npu_text(npu4(tmp_path, trace=trace))
    peaks = memory.memory_peak(tables).to_pylist()
    assert [(p["rank"], p["device"], p["peak_allocated_bytes"]) for p in peaks] == [(1, "npu:4", 1245688832)]
    assert set(tables.tracks["rank"].to_pylist()) == {1}
    devices = {(t["kind"], t["device"]) for t in tables.tracks.to_pylist() if t["kind"] != "thread"}
    assert devices == {("stream", "npu:4"), ("counter", "npu:4")}
    job = merge([("rank0", read_torch_npu_text(TEXT / "rank0_ascend_pt")), ("rank1", tables)])
    assert [(p["rank"], p["device"]) for p in memory.memory_peak(job).to_pylist()] == [(0, "npu:0"), (1, "npu:4")]


def test_db_memory_without_host_threads_stays_under_its_rank(tmp_path):
    run = copy(tmp_path, DB / "rank1_ascend_pt")
    with sqlite3.connect(run / OUTPUT / "ascend_pytorch_profiler_1.db") as con:
        con.execute("DROP TABLE PYTORCH_API")
        con.execute("DROP TABLE CANN_API")
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%deviceId%'")\
                .fetchall():
            con.execute(f"UPDATE {table} SET deviceId = 4")
    tables = read_torch_npu_db(run)
    peaks = memory.memory_peak(tables).to_pylist()
    assert [(p["rank"], p["device"], p["peak_allocated_bytes"]) for p in peaks] == [(1, "npu:4", 1245688832)]
    assert set(tables.tracks["rank"].to_pylist()) == {1}
    assert {t["device"] for t in tables.tracks.to_pylist()} == {"npu:4"}


# --- a job's ranks place each other in their groups ------------------------------------------------------

def test_a_jobs_links_between_its_ranks_become_global_the_rest_stay_local():
    job = merge([(f"rank{r}", read_torch_npu_text(TEXT / f"rank{r}_ascend_pt")) for r in (0, 1)])
    rank_meta = json.loads(job.meta_dict()["rank_meta"])
    reference = json.loads((SHARED_DATA / "ascend" / "msprof_analyze_reference" /
                            "cluster_all__ascend-msinsight_pytorch_text_level1" /
                            "cluster_communication_matrix.json").read_text())["(0, 1)"]["step50"]
    for rank in (0, 1):
        links = json.loads(rank_meta[str(rank)]["communication_matrix"])
        assert {(e["src"], e["dst"]) for e in links if not e["local"]} == {(rank, 0), (rank, 1)}
        assert len([e for e in links if e["local"]]) == 36           # to group-local ranks 2-7: no rank says them
        for entry in links:
            if not entry["local"] and entry["key"] != "allreduce-total":
                theirs = reference[f"{entry['key']}@{TEXT_GROUP}"][f"{entry['src']}-{entry['dst']}"]
                assert entry["transit_size_mb"] == theirs["Transit Size(MB)"]
        group = json.loads(rank_meta[str(rank)]["communication_groups"])[TEXT_GROUP]
        assert (group["ranks"], group["local"]) == (list(range(8)), True)    # members 2-7 unknown: stays local


def test_a_group_whose_every_member_is_a_rank_of_the_job_becomes_global(tmp_path):
    runs = []
    for local, rank in ((0, 2), (1, 5)):        # global ranks 2 and 5 are group-local 0 and 1
        run = copy(tmp_path / str(rank), TEXT / f"rank{local}_ascend_pt")
        edit_json(run / f"profiler_info_{local}.json", lambda info, rank=rank: info.update(rank_id=rank))

        def two_members(matrix):
            for ops in matrix["step50"]["collective"].values():
                for pair in [p for p in ops if max(map(int, p.split("-"))) > 1]:
                    del ops[pair]
        edit_json(run / OUTPUT / "communication_matrix.json", two_members)
        runs.append((f"rank{rank}", read_torch_npu_text(run)))
    assert [c["group_ranks"] for c in collectives.collectives(runs[0][1]).to_pylist()] == [[0, 1]] * 4   # alone: local
    job = merge(runs)
    assert [(c["rank"], c["group_ranks"]) for c in collectives.collectives(job).to_pylist()] == \
        [(2, [2, 5])] * 4 + [(5, [2, 5])] * 4
    assert not any("Process Group Ranks Local" in a for a in device_collectives(job))
    rank_meta = json.loads(job.meta_dict()["rank_meta"])
    group = json.loads(rank_meta["5"]["communication_groups"])[TEXT_GROUP]
    assert (group["ranks"], group["local"], group["group_rank"]) == ([2, 5], False, 1)
    links = json.loads(rank_meta["5"]["communication_matrix"])
    assert {(e["src"], e["dst"], e["local"]) for e in links} == {(5, 2, False), (5, 5, False)}
