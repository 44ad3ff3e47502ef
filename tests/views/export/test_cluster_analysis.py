"""``perfsight cluster`` on the shared 2-rank torch_npu jobs against msprof-analyze 26.2.0's ``cluster -m all``
outputs of the same jobs (../shared/data/ascend/msprof_analyze_reference: the text job's CSV and JSON files,
the .db job's cluster_analysis.db). Figures agree within 0.1% (``REL``): perfsight keeps whole ns where
torch_npu's durations carry sub-ns digits. The .db job's per-operator ratios differ, and the test says why."""
from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import pytest

from perfsight import cli
from perfsight.views.export import cluster
from tests.views.export.test_ascend_export import writable_copy

REFERENCE = Path("ascend") / "msprof_analyze_reference"
JOBS = {"text": "ascend/torch_npu/text/level1", "db": "ascend/torch_npu/db/level1"}
REL = 1e-3
HEADERS = ["Step", "Type", "Index", "Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free",
           "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing"]


def reference(shared_data: Path, kind: str) -> Path:
    return shared_data / REFERENCE / f"cluster_all__ascend-msinsight_pytorch_{kind}_level1"


def written(shared_data, tmp_path, kind: str) -> Path:
    job = writable_copy(shared_data, JOBS[kind], tmp_path)
    files = cluster(job, tmp_path / "out").files
    out = tmp_path / "out" / "cluster_analysis_output"
    assert {p.parent for p in files} == {out}
    return out


def rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as file:
        return list(csv.DictReader(file))


def table(db: Path, name: str) -> tuple[list[tuple[str, str]], list[tuple]]:
    """A table's (column, declared type) pairs and its rows."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        columns = [(r[1], r[2]) for r in con.execute(f'PRAGMA table_info("{name}")')]
        return columns, con.execute(f'SELECT * FROM "{name}"').fetchall()
    finally:
        con.close()


def close(ours, theirs) -> bool:
    """Equal, or numbers within REL (ns rounding), recursively through lists, tuples and dicts."""
    if isinstance(theirs, dict):
        return (isinstance(ours, dict) and ours.keys() == theirs.keys()
                and all(close(ours[k], theirs[k]) for k in theirs))
    if isinstance(theirs, (list, tuple)):
        return len(ours) == len(theirs) and all(close(a, b) for a, b in zip(ours, theirs))
    if isinstance(theirs, float) or isinstance(ours, float):
        return ours == pytest.approx(theirs, rel=REL, abs=2e-6)      # 2e-6: a few ns in ms
    return ours == theirs


def test_step_trace_csv_agrees_with_msprof_analyze(shared_data, tmp_path):
    out = written(shared_data, tmp_path, "text")
    ours, theirs = rows(out / "cluster_step_trace_time.csv"), rows(reference(shared_data, "text") /
                                                                     "cluster_step_trace_time.csv")
    assert list(ours[0]) == list(theirs[0]) == HEADERS
    assert [(r["Step"], r["Type"], r["Index"]) for r in ours] == [("50", "rank", "0"), ("50", "rank", "1")]
    for mine, peer in zip(ours, theirs):
        for header in HEADERS[3:]:
            assert float(mine[header]) == pytest.approx(float(peer[header]), rel=REL, abs=1e-9), header
    assert float(ours[0]["Stage"]) == pytest.approx(136581.0, rel=REL)      # the README's rank 0 figures
    assert float(ours[0]["Preparing"]) == pytest.approx(17902.5, rel=REL)


def test_database_step_trace_hosts_and_devices_agree_with_msprof_analyze(shared_data, tmp_path):
    out = written(shared_data, tmp_path, "db")
    ours, theirs = out / "cluster_analysis.db", reference(shared_data, "db") / "cluster_analysis.db"
    for name in ("ClusterStepTraceTime", "HostInfo", "RankDeviceMap"):
        (columns, mine), (their_columns, peer) = table(ours, name), table(theirs, name)
        assert columns == their_columns, name
        if name == "RankDeviceMap":    # msprof-analyze writes the path it was given, perfsight the folder read
            assert [Path(r[3]).name for r in mine] == [Path(r[3]).name for r in peer]
            mine, peer = [r[:3] for r in mine], [r[:3] for r in peer]
        assert close(mine, peer), name
    # exactly: the .db job's tasks are whole ns
    assert table(ours, "ClusterStepTraceTime")[1][0] == (
        "50", "rank", "0", 8903.431, 98071.947, 4036.153, 102108.1, 25258.144, 132233.522, 0, 98071.947, 18055.693,
        0, 0, 0)


def test_cli_writes_into_dir_by_default_and_never_over_a_users_file(shared_data, tmp_path, capsys, monkeypatch):
    job = writable_copy(shared_data, JOBS["text"], tmp_path)
    out = job / "cluster_analysis_output"
    monkeypatch.setenv("COLUMNS", "200")                         # the report's lines whole, paths and all
    assert cli.main(["cluster", "-d", str(job)]) == 0
    first = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert "cluster_step_trace_time.csv" in first and "cluster_analysis.db" in first
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith(f"{job}: 2 ranks (2 done, 0 cached, 0 failed) on ")
    assert [line.strip() for line in said[-7:]] == [f"written in {out}:", "cluster_step_trace_time.csv",
                                                    "cluster_communication.json", "cluster_communication_matrix.json",
                                                    "communication_group.json", "cluster_analysis.db",
                                                    "rank_breakdown.csv"]
    assert cli.main(["cluster", "-d", str(job)]) == 0          # its own files: replaced
    (out / "cluster_analysis.db").write_text("the user's notes")
    before = (out / "cluster_step_trace_time.csv").stat().st_mtime_ns
    assert cli.main(["cluster", "-d", str(job), "-o", str(job)]) == 2
    assert f"{out / 'cluster_analysis.db'}: exists and perfsight did not write it" in capsys.readouterr().err
    assert (out / "cluster_analysis.db").read_text() == "the user's notes"        # kept, and nothing else moved
    assert (out / "cluster_step_trace_time.csv").stat().st_mtime_ns == before


#: (table, column) -> the type perfsight declares where msprof-analyze declares another: its large_packet_ratio is
#: INTEGER (pandas' choice for a sample whose ratios were all 0) and truncated 0.5 to 0, where the ratio is a
#: fraction (0.5 in its own cluster_communication.json)
OUR_TYPES = {("ClusterCommunicationBandwidth", "large_packet_ratio"): "REAL"}


def agree(out: Path, peer: Path, names) -> None:
    for name in names:
        (columns, mine), (their_columns, theirs) = table(out / "cluster_analysis.db", name), table(
            peer / "cluster_analysis.db", name)
        assert columns == [(column, OUR_TYPES.get((name, column), kind)) for column, kind in their_columns], name
        if name == "RankDeviceMap":
            mine, theirs = [r[:3] for r in mine], [r[:3] for r in theirs]
        assert close(sorted(mine, key=str), sorted(theirs, key=str)), name


def test_all_five_outputs_agree(shared_data, tmp_path):
    """The text job's four text files and the .db job's database (all but the two tables below)."""
    out, peer = written(shared_data, tmp_path / "text", "text"), reference(shared_data, "text")
    for name in ("cluster_communication.json", "cluster_communication_matrix.json", "communication_group.json"):
        ours, theirs = json.loads((out / name).read_text()), json.loads((peer / name).read_text())
        assert close(ours, theirs), name           # dicts compared by keys: the order of keys is free
    agree(written(shared_data, tmp_path / "db", "db"), reference(shared_data, "db"),
          ("CommunicationGroupMapping", "ClusterCommunicationMatrix", "ClusterStepTraceTime", "HostInfo",
           "RankDeviceMap"))


#: where a float holds an epoch in us, the gap between two of its values (2^50 us < 1.7e15 us < 2^51 us)
EPOCH_US_RESOLUTION = 0.25


def test_database_communication_time_and_bandwidth_agree(shared_data, tmp_path):
    """The .db job's per-operator time and bandwidth are analysis.db's CommAnalyzerTime and
    CommAnalyzerBandwidth as msprof-analyze writes them, within REL, and each start timestamp within a float's
    resolution (not the profiler database's COMMUNICATION_OP start: 13 to 22 us apart). An operator's two
    ratios differ: msprof-analyze writes 0 (its communication_time_sum fills them so, analysis.db having
    none), perfsight wait / (wait + transit) and sync / (sync + transit) of the same times, as torch_npu's
    communication.json gives them in the text export and as the Total Op Info rows have them in both."""
    out, peer = written(shared_data, tmp_path, "db"), reference(shared_data, "db")
    agree(out, peer, ("ClusterCommunicationBandwidth",))
    (columns, mine), (their_columns, theirs) = (table(db / "cluster_analysis.db", "ClusterCommunicationTime")
                                                for db in (out, peer))
    assert columns == their_columns
    mine, theirs = sorted(mine, key=str), sorted(theirs, key=str)
    assert [row[:4] for row in mine] == [row[:4] for row in theirs] and len(mine) == 10
    for ours, peers in zip(mine, theirs):
        assert abs(ours[4] - peers[4]) <= EPOCH_US_RESOLUTION, ours[:3]
        assert close(ours[5:10], peers[5:10]), ours[:3]
        transit, wait, sync = ours[6:9]
        if ours[2] != "Total Op Info":
            assert peers[10:] == (0.0, 0.0)
            assert ours[10:] == (round(sync / (sync + transit), 4), round(wait / (wait + transit), 4)), ours[:3]
        else:
            assert close(ours[10:], peers[10:])
    assert mine[1][2:] == ("hcom_allReduce__210_0_1", "17148521525495523210", 1736410576431645.2, 88.750993,
                           0.228565, 3.568891, 3.51773, 84.953537, 0.939, 0.9398)    # rank 0, exactly


def test_rank_breakdown_csv_has_a_row_per_rank(tmp_path):
    """The planted two-rank NCCL job (5 ms steps; rank 0 communicates 2.5 ms of it, rank 1 1.55 ms: the
    straggler): rank_breakdown.csv has catalog.RANK_BREAKDOWN's columns and each rank's figures in us."""
    from perfsight.views.export.catalog import RANK_BREAKDOWN
    from tests.analysis.planted_nccl_job import write_nccl_job

    cluster(write_nccl_job(tmp_path / "job"), tmp_path / "out")
    written = tmp_path / "out" / "cluster_analysis_output" / "rank_breakdown.csv"
    with open(written, newline="", encoding="utf-8") as file:
        header, *lines = list(csv.reader(file))
    assert header == [column.header for column in RANK_BREAKDOWN.columns]
    picked = ["Rank", "Steps", "Step(us)", "Communication(us)", "Communication(%)", "Boundary Step(us)",
              "Others Wait(us)", "Last Arrivals", "Slowest", "Straggler"]
    # rank 1 arrives 300 us late at each of three all-reduces and 50 us late at the send: it makes rank 0 wait
    assert [[dict(zip(header, line))[name] for name in picked] for line in lines] == [
        ["0", "1", "5000.000", "2500.000", "50.000", "5000.000", "0.000", "0", "false", "false"],
        ["1", "1", "5000.000", "1550.000", "31.000", "5000.000", "950.000", "4", "false", "true"]]
