"""`perfsight export timeline|summary -dir` on Ascend runs writes the files it writes for a PyTorch run:
torch_npu text and .db jobs (one directory per rank), an msprof PROF_ directory and MindSpore's folder."""
from __future__ import annotations

import csv
import json
import re

import pytest

from perfsight import cli
from perfsight.ingest import cache
from perfsight.views.export import catalog
from tests.conftest import copy_shared

ALL_FILES = ["acl_statistic.csv", "api_statistic.csv", "msprof.json", "msprof_tx.csv", "msprof_tx.json",
             "op_statistic.csv", "op_summary.csv", "prof_rule_0.json", "pytorch_operator_view.csv", "runtime_api.csv",
             "step_trace.csv", "step_trace.json", "task_time.csv", "task_time.json"]


def writable_copy(shared_data, relpath, tmp_path):
    target = tmp_path / relpath.rsplit("/", 1)[-1]           # keep the name: PROF_... is part of the format
    copy_shared(shared_data / relpath, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    return target


def exported(output_dir) -> dict[str, object]:
    """The files in ``output_dir`` by name without their stamp (``op_summary_{stamp}[_n].csv`` -> op_summary.csv;
    a second export within the same second gets ``_1``)."""
    return {re.sub(r"_\d{14}(_\d+)?(?=\.)", "", p.name): p for p in output_dir.iterdir()
            if not p.name.startswith(".")}     # the hidden ledger of the files perfsight wrote


@pytest.mark.parametrize("relpath", ["ascend/torch_npu/text/level1", "ascend/torch_npu/db/level1"])
def test_torch_npu_jobs_export_every_file_per_rank(shared_data, tmp_path, relpath):
    job = writable_copy(shared_data, relpath, tmp_path)
    assert cli.main(["export", "summary", "-dir", str(job)]) == 0
    assert cli.main(["export", "timeline", "-dir", str(job)]) == 0
    for rank in (0, 1):
        files = exported(job / f"rank{rank}_ascend_pt" / "perfsight_output")
        assert sorted(files) == sorted(ALL_FILES + ["README.txt"])
        with open(files["op_summary.csv"], newline="") as f:
            rows = list(csv.DictReader(f))
        assert next(csv.reader(open(files["op_summary.csv"], newline=""))) == [c.header for c in
                                                                               catalog.OP_SUMMARY.columns]
        assert {"AI_CORE", "HCCL"} <= {row["Task Type"] for row in rows}
        with open(files["step_trace.csv"], newline="") as f:
            assert [row["Iteration ID"] for row in csv.DictReader(f)] == ["50"]
        trace = json.loads(files["msprof.json"].read_text())
        categories = {e.get("cat") for e in trace["traceEvents"] if e.get("ph") == "X"}
        assert {"kernel", "cpu_op", "runtime"} <= categories           # device tasks, host ops, CANN calls
        layers = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
        assert {f"Device tasks npu:{rank}", "Communication"} <= layers


@pytest.mark.parametrize("relpath", ["ascend/mindspore_legacy/profiler/PROF_000001_20230818142704322_COJGGGCANRMICFBC",
                                     "ascend/mindspore_legacy/profiler"])
def test_msprof_and_mindspore_runs_export(shared_data, tmp_path, relpath):
    run = writable_copy(shared_data, relpath, tmp_path)
    assert cli.main(["export", "summary", "-dir", str(run)]) == 0
    assert cli.main(["export", "timeline", "-dir", str(run)]) == 0
    cache.wait()                                        # a walk of the run could meet its cache being written
    outputs = sorted(readme.parent for readme in run.rglob("perfsight_output/**/README.txt"))
    assert outputs                                      # MindSpore's folder: one per rank (perfsight_output/rankN)
    # every rank has its timeline; the summaries exist where the rank has that data (MindSpore's rank 10
    # holds step times only, rank 1 operators only)
    assert all({"msprof.json", "README.txt"} <= set(exported(output)) for output in outputs)
    union = {name for output in outputs for name in exported(output)}
    assert {"op_statistic.csv", "op_summary.csv", "step_trace.csv", "task_time.csv"} <= union
