"""The communication operators torch_npu reports in communication.json are the record: every one reaches the
rank's operations (``collective_figures``), ``perfsight cluster``'s cluster_communication.json and the
operators its cluster_communication_matrix.json names, whether the trace and kernel_details.csv hold its HCCL
task or not (older torch_npu versions leave them out of both: 24 of 28 operators of one rank vanished). The
stripped job is the shared level-1 job with every ``hcom_`` task taken out of rank 0's trace_view.json and
kernel_details.csv, and rank 1 left with kernel_details.csv alone (no trace), without its ``hcom_`` rows."""
from __future__ import annotations

import json
import sqlite3
from collections import Counter
from contextlib import closing
from decimal import Decimal
from pathlib import Path

import pytest

import perfsight
from perfsight.views.export import cluster
from tests.conftest import copy_shared

#: the shared torch_npu jobs whose ranks report their operators (level 0 collects no communication: neither
#: communication.json nor analysis.db's CommAnalyzerTime)
JOBS = ["ascend/torch_npu/text/level1", "ascend/torch_npu/text/level2", "ascend/torch_npu/db/level1",
        "ascend/torch_npu/db/level2"]
OUTPUT = "ASCEND_PROFILER_OUTPUT"


def _without_hcom_rows(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(line for line in lines if "hcom_" not in line), encoding="utf-8")


def stripped_job(shared_data: Path, destination: Path) -> Path:
    job = copy_shared(shared_data / JOBS[0], destination)
    trace = job / "rank0_ascend_pt" / OUTPUT / "trace_view.json"
    events = json.loads(trace.read_text())                     # a plain list, as torch_npu writes it
    trace.write_text(json.dumps([e for e in events if not str(e.get("name", "")).startswith("hcom_")]))
    (job / "rank1_ascend_pt" / OUTPUT / "trace_view.json").unlink()
    for rank in (0, 1):
        _without_hcom_rows(job / f"rank{rank}_ascend_pt" / OUTPUT / "kernel_details.csv")
    return job


def reported(job: Path) -> dict[int, Counter]:
    """Per rank, the operator names torch_npu reports: communication.json's ``op@group`` keys (every step), or in
    a .db export analysis.db's CommAnalyzerTime rows."""
    found = {}
    for rank in (0, 1):
        output = job / f"rank{rank}_ascend_pt" / OUTPUT
        if (output / "communication.json").is_file():
            document = json.loads((output / "communication.json").read_text())
            names = [key.rsplit("@", 1)[0] for step in document.values() for kind in step.values() for key in kind
                     if "@" in key]
        else:
            with closing(sqlite3.connect(f"file:{output / 'analysis.db'}?mode=ro", uri=True)) as db:
                names = [name for (name,) in db.execute("SELECT hccl_op_name FROM CommAnalyzerTime")]
        found[rank] = Counter(names)
    return found


@pytest.fixture(params=[*JOBS, "stripped"])
def job(request, shared_data, tmp_path) -> Path:
    if request.param == "stripped":
        return stripped_job(shared_data, tmp_path / "stripped")
    return copy_shared(shared_data / request.param, tmp_path / request.param.rsplit("/", 1)[-1])


def test_every_reported_operator_is_an_operation_and_in_the_cluster_output(job, tmp_path):
    expected = reported(job)
    assert all(sum(names.values()) == 4 for names in expected.values())
    figures = perfsight.open(job, use_cache=False).collective_figures().to_pylist()
    assert {rank: Counter(row["op_name"] for row in figures if row["rank"] == rank) for rank in (0, 1)} == expected
    cluster(job, tmp_path / "out")
    output = tmp_path / "out" / "cluster_analysis_output"
    written = json.loads((output / "cluster_communication.json").read_text())
    ops = {rank: Counter() for rank in (0, 1)}
    for steps in written.values():
        for step in steps.values():
            for key, by_rank in step.items():
                for rank in by_rank:
                    if not key.startswith("Total Op Info"):
                        ops[int(rank)][key.rsplit("@", 1)[0]] += 1
    assert ops == expected
    # the matrix names its links' operators ("Op Name": the operator behind each top/middle/bottom cell)
    matrix = json.loads((output / "cluster_communication_matrix.json").read_text())
    named = {link["Op Name"] for steps in matrix.values() for step in steps.values() for links in step.values()
             for link in links.values() if link["Op Name"]}
    assert named == set(expected[0]) | set(expected[1])


def test_operators_only_communication_json_reports_take_its_times_and_are_said(shared_data, tmp_path):
    job = stripped_job(shared_data, tmp_path / "stripped")
    document = json.loads((job / "rank1_ascend_pt" / OUTPUT / "communication.json").read_text(), parse_float=Decimal)
    times = {key.rsplit("@", 1)[0]: entry["Communication Time Info"] for step in document.values()
             for kind in step.values() for key, entry in kind.items() if "@" in key}
    run = perfsight.open(job / "rank1_ascend_pt", use_cache=False)
    operations = {row["op_name"]: row for row in run.collectives().to_pylist()}
    assert sorted(operations) == sorted(times)
    for name, info in times.items():
        assert operations[name]["source"] == "device"
        assert operations[name]["start_ns"] == int(Decimal(info["Start Timestamp(us)"]) * 1000)
        assert operations[name]["dur_ns"] == int((Decimal(info["Elapse Time(ms)"]) * 1_000_000).to_integral_value())
    warnings = json.loads(run.tables.meta_dict()["parse_warnings"])
    assert ("communication.json: 4 operators it reports not in kernel_details.csv: on the timeline from their "
            "records (Start Timestamp(us), Elapse Time(ms))") in warnings


def test_the_stripped_jobs_communication_is_msprof_analyzes(shared_data, tmp_path):
    """msprof-analyze reads a rank's operators from communication.json alone, so its cluster_communication.json
    of the stripped job is the one it wrote for the whole job (checked here with msprof-analyze 26.2.0: the
    same operators): perfsight's of the stripped job agrees with it as the whole job's does."""
    from tests.views.export.test_cluster_analysis import close, reference

    job = stripped_job(shared_data, tmp_path / "stripped")
    cluster(job, tmp_path / "out")
    ours = json.loads((tmp_path / "out" / "cluster_analysis_output" / "cluster_communication.json").read_text())
    theirs = json.loads((reference(shared_data, "text") / "cluster_communication.json").read_text())
    assert close(ours, theirs)
