"""analysis.db's per-operator communication time and bandwidth (CommAnalyzerTime, CommAnalyzerBandwidth) on the
HCCL operators of the .db reader, in communication.json's form (torch_npu_db_analysis): the real db level1
ranks with the figures as analysis.db holds them, collectives taking them as reported, the matching of rows
to operators (torch_npu_hccl.match), and damaged rows read around."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from perfsight.analysis import collectives
from perfsight.analysis.job_summaries import job_of
from perfsight.ingest.ascend.hccl_groups import group_hash
from perfsight.ingest.ascend.torch_npu_db import read_torch_npu_db
from perfsight.ingest.ascend.torch_npu_hccl import Record, match
from tests.ingest.test_torch_npu_db import PLANTED, write_db

LEVEL1 = Path("ascend/torch_npu/db/level1")
GROUP = "17148521525495523210"      # analysis.db's name of the samples' one group (the communicator's hash)


def hccs_and_sdma(size_mb, time_ms, bandwidth, packets):
    """The two transports analysis.db has for each sample operator: HCCS with its packet sizes, SDMA (the
    same totals) with none."""
    link = {"Transit Size(MB)": size_mb, "Transit Time(ms)": time_ms, "Bandwidth(GB/s)": bandwidth,
            "Large Packet Ratio": 0}
    return {"HCCS": {**link, "Size Distribution": packets}, "SDMA": {**link, "Size Distribution": {}}}


#: (rank, operator) -> its args' reported objects: analysis.db's rows, exactly
EXPECTED = {
    (0, "hcom_allReduce__210_0_1"): {
        "Communication Time Info": {
            "Start Timestamp(us)": 1736410576431645.2, "Elapse Time(ms)": 88.75099321875,
            "Transit Time(ms)": 0.22856459375, "Wait Time(ms)": 3.56889128125,
            "Synchronization Time(ms)": 3.51773028125, "Idle Time(ms)": 84.95353734375},
        "Communication Bandwidth Info": hccs_and_sdma(28.647232000000002, 1.8218963437499998, 15.7239, {
            "2.064384": [12, 1.58139153125], "1.937312": [2, 0.2405048125]}),
        "Communication Info From": "analysis.db"},
    (1, "hcom_allReduce__210_3_1"): {
        "Communication Time Info": {
            "Start Timestamp(us)": 1736410576524975, "Elapse Time(ms)": 8.7692351875,   # an INTEGER in the file
            "Transit Time(ms)": 0.2925258125, "Wait Time(ms)": 0.04340084375,
            "Synchronization Time(ms)": 0.02124040625, "Idle Time(ms)": 8.43330853125},
        "Communication Bandwidth Info": hccs_and_sdma(17.267200000000003, 2.096461875, 8.2364, {
            "1.245184": [12, 1.79697590625], "1.162496": [2, 0.29948596875]}),
        "Communication Info From": "analysis.db"},
}
#: the same operators' figures (ms -> ns, rounded; the start: us -> ns as the decimal it prints as)
FIGURES = {
    (0, "hcom_allReduce__210_0_1"): (1736410576431631806, 1736410576431645200, 88750993, 228565, 3568891, 3517730,
                                     84953537),
    (1, "hcom_allReduce__210_3_1"): (1736410576524996506, 1736410576524975000, 8769235, 292526, 43401, 21240,
                                     8433309),
}
REPORTED_KEYS = ("Communication Time Info", "Communication Bandwidth Info", "Communication Info From")
FIGURE_COLUMNS = ("start_ns", "reported_start_ns", "elapse_ns", "transit_ns", "wait_ns", "sync_ns", "idle_ns")


@pytest.mark.parametrize("rank", [0, 1])
def test_each_operator_carries_its_analysis_db_rows(shared_data, rank):
    run = read_torch_npu_db(shared_data / LEVEL1 / f"rank{rank}_ascend_pt")
    operators = {row["name"]: json.loads(row["args"]) for row in run.slices.to_pylist()
                 if row["kind"] == "comm" and row["task_type"] == "HCCL"}
    assert sorted(operators) == [f"hcom_allReduce__210_{i}_1" for i in range(4)]
    for name, args in operators.items():
        assert args["Process Group Name"] == GROUP and args["Communication Info From"] == "analysis.db"
        if (rank, name) in EXPECTED:
            assert {key: args[key] for key in REPORTED_KEYS} == EXPECTED[(rank, name)]
    figures = collectives.collective_figures(job_of(run)).to_pylist()
    assert [f["figures_from"] for f in figures] == ["analysis.db"] * 4
    ((key, expected),) = [(k, v) for k, v in FIGURES.items() if k[0] == rank]
    (figure,) = [f for f in figures if f["op_name"] == key[1]]
    assert tuple(figure[c] for c in FIGURE_COLUMNS) == expected
    # the links as reported (no UNKNOWN link computed): HCCS with its packets, SDMA without
    links = [row for row in collectives.link_bandwidth(job_of(run)).to_pylist() if row["op_name"] == key[1]]
    assert [row["link_type"] for row in links] == ["HCCS", "SDMA"]
    assert links[0]["transit_bytes"] == links[1]["transit_bytes"] == round(
        EXPECTED[key]["Communication Bandwidth Info"]["HCCS"]["Transit Size(MB)"] * 1e6)
    assert links[1]["size_distribution"] == []
    assert "analysis.db" not in " ".join(json.loads(run.meta_dict()["parse_warnings"]))


def test_rank0_link_figures_exactly(shared_data):
    run = read_torch_npu_db(shared_data / LEVEL1 / "rank0_ascend_pt")
    hccs = next(row for row in collectives.link_bandwidth(job_of(run)).to_pylist()
                if row["op_name"] == "hcom_allReduce__210_0_1" and row["link_type"] == "HCCS")
    assert (hccs["transit_bytes"], hccs["transit_ns"], hccs["bandwidth_gbps"], hccs["large_packet_ratio"]) == (
        28647232, 1821896, 15.7239, 0)
    assert hccs["size_distribution"] == [{"packet_bytes": 1937312, "count": 2, "dur_ns": 240505},
                                         {"packet_bytes": 2064384, "count": 12, "dur_ns": 1581392}]


# --- matching -----------------------------------------------------------------------------------------

def record(name, group, start_ns, tag):
    return Record(50, "collective", name, group, start_ns, 1000, {"tag": tag}, "analysis.db")


def test_match_pairs_by_name_group_and_nearest_start_one_to_one():
    found = [record("op_a", "g1", 1_000, "a1"), record("op_a", "g1", 5_000, "a2"), record("op_a", "g2", 1_010, "a-g2"),
             record("op_b", "g1", None, "b-untimed"), record("op_c", "g1", 2_000, "c")]
    names = ["op_a", "op_a", "op_a", "op_a", "op_b", "op_c", "op_d"]
    starts = [4_900, 1_020, 1_015, 9_000, 7, 2_000, 1]
    groups = ["g1", "g1", "g2", "g1", "g1", None, "g1"]
    tags = [r.info["tag"] if r else None for r in match(found, names, starts, groups)]
    # the fourth op_a of g1 finds both its records taken by closer operators; op_d has none
    assert tags == ["a2", "a1", "a-g2", None, "b-untimed", "c", None]


def test_the_closer_operator_keeps_a_record_both_want():
    found = [record("op", "g", 1_000, "only")]
    assert [r and r.info["tag"] for r in match(found, ["op", "op"], [1_300, 900], ["g", "g"])] == [None, "only"]


# --- planted analysis.db beside the planted database --------------------------------------------------

SEND, GROUP_A = "hcom_send__1_0_1", group_hash("grpA")      # the planted COMMUNICATION_OP, starting at ...6000 ns
TIME_COLUMNS = ("hccl_op_name group_name start_timestamp elapse_time transit_time wait_time synchronization_time "
                "idle_time step type")
BANDWIDTH_COLUMNS = ("hccl_op_name group_name transport_type transit_size transit_time bandwidth large_packet_ratio "
                     "package_size count total_duration step type")


def write_analysis(folder: Path, tables: dict) -> None:
    with sqlite3.connect(folder / "ASCEND_PROFILER_OUTPUT" / "analysis.db") as con:
        for table, (columns, rows) in tables.items():
            con.execute(f"CREATE TABLE {table} ({', '.join(columns.split())})")
            con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(columns.split()))})", rows)


def planted(tmp_path: Path, time_rows, bandwidth_rows, time_columns=TIME_COLUMNS):
    folder = tmp_path / "run_ascend_pt"
    shutil.rmtree(folder, ignore_errors=True)
    write_db(folder, PLANTED)
    write_analysis(folder, {"CommAnalyzerTime": (time_columns, time_rows),
                            "CommAnalyzerBandwidth": (BANDWIDTH_COLUMNS, bandwidth_rows)})
    run = read_torch_npu_db(folder)
    (send,) = [json.loads(r["args"]) for r in run.slices.to_pylist() if r["name"] == SEND]
    return run, send, json.loads(run.meta_dict()["parse_warnings"])


def test_the_row_nearest_the_operator_is_its_own(tmp_path):
    """Two rows of the send (say, two steps' operators of one name): the one starting 20 us from the
    operator's start is its own, not the one 2 ms away."""
    near = (SEND, GROUP_A, 1736410576000026.0, 3.0, 1.0, 2.0, 0.5, 0.0, "step3", "p2p")
    far = (SEND, GROUP_A, 1736410576002006.0, 9.0, 9.0, 0.0, 0.0, 0.0, "step4", "p2p")
    other_group = (SEND, group_hash("grpB"), 1736410576000006.0, 7.0, 7.0, 0.0, 0.0, 0.0, "step3", "p2p")
    run, send, warnings = planted(tmp_path, [far, other_group, near], [
        (SEND, GROUP_A, "HCCS", 0.004096, 1.0, 0.0041, 0.0, 0.004096, 1, 1.0, "step3", "p2p")])
    assert send["Communication Time Info"] == {
        "Start Timestamp(us)": 1736410576000026.0, "Elapse Time(ms)": 3.0, "Transit Time(ms)": 1.0,
        "Wait Time(ms)": 2.0, "Synchronization Time(ms)": 0.5, "Idle Time(ms)": 0.0}
    assert send["Communication Bandwidth Info"] == {"HCCS": {
        "Transit Size(MB)": 0.004096, "Transit Time(ms)": 1.0, "Bandwidth(GB/s)": 0.0041, "Large Packet Ratio": 0.0,
        "Size Distribution": {"0.004096": [1, 1.0]}}}
    (figure,) = collectives.collective_figures(job_of(run)).to_pylist()
    assert (figure["figures_from"], figure["reported_start_ns"], figure["elapse_ns"], figure["wait_ns"],
            figure["wait_ratio"], figure["sync_ratio"]) == ("analysis.db", 1736410576000026000, 3_000_000, 2_000_000,
                                                            2 / 3, 0.5 / 1.5)
    assert warnings == []


def test_damaged_rows_cost_those_rows_and_are_counted(tmp_path):
    run, send, warnings = planted(tmp_path, [
        (SEND, GROUP_A, 1736410576000006.0, "a lot", 1.0, 2.0, 0.0, 0.0, "step3", "p2p"),
        (None, GROUP_A, 1736410576000006.0, 3.0, 1.0, 2.0, 0.0, 0.0, "step3", "p2p"),
    ], [
        (SEND, GROUP_A, "HCCS", 0.004096, 1.0, 0.0041, 0, 0.004096, 1, 1.0, "step3", "p2p"),
        (SEND, GROUP_A, "HCCS", 0.004096, 1.0, 0.0041, 0, 0.002048, 2, float("nan"), "step3", "p2p"),
        (SEND, GROUP_A, None, 0.004096, 1.0, 0.0041, 0, 0.0, 0, 0.0, "step3", "p2p"),
    ])
    assert "analysis.db: table CommAnalyzerTime: 2 rows not read (1 x elapse_time not a number, 1 x hccl_op_name " \
           "not a text)" in warnings
    assert "analysis.db: table CommAnalyzerBandwidth: 2 rows not read (1 x total_duration not a number, 1 x " \
           "transport_type not a text)" in warnings
    # the bandwidth row that is sound still reaches the operator; its time is computed
    assert "Communication Time Info" not in send
    assert send["Communication Bandwidth Info"]["HCCS"]["Size Distribution"] == {"0.004096": [1, 1.0]}
    (figure,) = collectives.collective_figures(job_of(run)).to_pylist()
    assert (figure["figures_from"], figure["reported_start_ns"]) == ("computed", None)
    assert [row["link_type"] for row in collectives.link_bandwidth(job_of(run)).to_pylist()] == ["HCCS"]


def test_a_table_lacking_a_column_is_named_and_an_operator_without_a_row_is_counted(tmp_path):
    run, send, warnings = planted(tmp_path, [(SEND, GROUP_A, 3.0, 1.0, 2.0, 0.0, 0.0, "step3", "p2p")], [],
                                  time_columns=TIME_COLUMNS.replace("start_timestamp ", ""))
    assert any(w.endswith("analysis.db: table CommAnalyzerTime lacks the column start_timestamp (its columns are "
                          "elapse_time, group_name, hccl_op_name, idle_time, step, synchronization_time, "
                          "transit_time, type, wait_time); the communication operators' figures are computed")
               for w in warnings), warnings
    assert "Communication Time Info" not in send
    _, send, warnings = planted(tmp_path, [(SEND, group_hash("grpB"), 1736410576000006.0, 3.0, 1.0, 2.0, 0.0, 0.0,
                                            "step3", "p2p")], [])
    assert "Communication Time Info" not in send
    assert warnings == ["analysis.db: 1 communication operator of 1 without a CommAnalyzerTime or "
                        "CommAnalyzerBandwidth row (same name and group, nearest start): their figures are computed"]
