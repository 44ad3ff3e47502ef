"""The summary files start with msprof's own columns, in its order and spelling, so scripts and viewers made
for msprof's files read perfsight's.

Checked against the real files under ../shared/data/ascend where they exist: torch_npu copies msprof's
op_statistic and api_statistic into ASCEND_PROFILER_OUTPUT/ without msprof's first column Device_id (its
OpStatisticBean keeps "OP Type" .. "Ratio(%)"), writes op_summary as kernel_details.csv under its own names
(torch_npu's CsvHeaders: OP_SUMMARY_SHOW_HEADERS -> OP_SUMMARY_KERNEL_BASE_HEADERS) and writes
operator_details.csv where the E2E profiler wrote pytorch_operator_view.csv. No real step_trace, task_time,
msprof_tx, runtime_api or acl_statistic file is in the data, and the seeds name these files without their
columns; their headers below are msprof's own: op_summary as the issue quotes it (msprof's op_summary on a
chip without Mix Block Num / Context ID), step_trace and task_time from msprof's summary assemblers
(Ascend/msprof analysis/csrc/application/summary), msprof_tx as CANN 8 documents msprof_tx_*.csv, and
runtime_api / acl_statistic from msprof's export configuration of the seed's CANN generation (msconfig
MsProfExportDataConfig: 'runtime_api' and 'acl_statistic' headers).
"""
from __future__ import annotations

import csv
import shutil

import pytest

from perfsight import cli
from perfsight.views.export import catalog
from tests.conftest import copy_shared
from tests.views.export.test_ascend_export import exported

GPU_TRACE = "kineto/hta/trace_filter/sampled_rank-0.json.gz"
TORCH_NPU_RANK = "ascend/torch_npu/text/level1/rank0_ascend_pt"

MSPROF_HEADERS = {
    "op_summary.csv": ["Device_id", "Model ID", "Task ID", "Stream ID", "Op Name", "OP Type", "OP State", "Task Type",
                       "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "HF32 Eligible",
                       "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types",
                       "Output Formats"],
    "step_trace.csv": ["Device_id", "Iteration ID", "FP Start(us)", "BP End(us)", "Iteration End(us)",
                       "Iteration Time(us)", "FP to BP Time(us)", "Iteration Refresh(us)", "Data Aug Bound(us)",
                       "Model ID"],
    "task_time.csv": ["Device_id", "kernel_name", "kernel_type", "stream_id", "task_id", "task_time(us)",
                      "task_start(us)", "task_stop(us)"],
    "msprof_tx.csv": ["Device_id", "pid", "tid", "category", "event_type", "payload_type", "payload_value",
                      "Start_time(us)", "End_time(us)", "message_type", "message", "domain", "mark_id"],
    "runtime_api.csv": ["Name", "Stream ID", "Time(%)", "Time(ns)", "Calls", "Avg(ns)", "Min(ns)", "Max(ns)",
                        "Process ID", "Thread ID"],
    "acl_statistic.csv": ["Name", "Type", "Time(%)", "Time(us)", "Count", "Avg(us)", "Min(us)", "Max(us)",
                          "Process ID", "Thread ID"],
}
#: the real torch_npu copies of msprof's files: (perfsight file, real file name, msprof columns torch_npu drops)
REAL_COPIES = [("op_statistic.csv", "op_statistic.csv", 1), ("api_statistic.csv", "api_statistic.csv", 1),
               ("pytorch_operator_view.csv", "operator_details.csv", 0)]
#: torch_npu's names for msprof's op_summary columns in kernel_details.csv
KERNEL_DETAILS_NAMES = {"Op Name": "Name", "OP Type": "Type", "Task Type": "Accelerator Core",
                        "Task Start Time(us)": "Start Time(us)", "Task Duration(us)": "Duration(us)",
                        "Task Wait Time(us)": "Wait Time(us)"}


def header(path):
    with open(path, newline="", encoding="utf-8") as f:
        return next(csv.reader(f))


@pytest.fixture(scope="module")
def exports(shared_data, tmp_path_factory) -> dict[str, dict[str, object]]:
    """The summary files perfsight writes for a real GPU trace and a real torch_npu rank, by run (``gpu``,
    ``torch_npu``) and name."""
    base = tmp_path_factory.mktemp("headers")
    shutil.copy(shared_data / GPU_TRACE, base)
    copy_shared(shared_data / TORCH_NPU_RANK, base / "rank0_ascend_pt")
    for path in (base / "rank0_ascend_pt").rglob("*"):
        path.chmod(path.stat().st_mode | 0o200)
    (base / "rank0_ascend_pt").chmod(0o755)
    found = {}
    for label, run in (("gpu", base / GPU_TRACE.rsplit("/", 1)[1]), ("torch_npu", base / "rank0_ascend_pt")):
        assert cli.main(["export", "summary", "-dir", str(run), "--output", str(base / label)]) == 0
        [output] = (base / label).iterdir()
        found[label] = exported(output)
    return found


@pytest.fixture(scope="module")
def headers(exports) -> dict[str, list[str]]:
    """The header of every summary CSV file, the same for both runs."""
    found: dict[str, list[str]] = {}
    for files in exports.values():
        for name, path in files.items():
            if name.endswith(".csv"):
                assert found.setdefault(name, header(path)) == header(path)
    return found


def test_api_statistic_spells_level_and_name_as_torch_npus_copy_of_msprofs(shared_data, exports):
    """torch_npu's api_statistic.csv (msprof's) writes Level acl / node / hccl and the bare API name where the
    timeline names the call AscendCL@aclnnMatmul: perfsight's file has the same (level, name) pairs, its
    synchronisation calls among them, and the same counts."""
    def pairs(path, dropped):
        with open(path, newline="", encoding="utf-8") as file:
            rows = list(csv.reader(file))[1:]
        return {(row[dropped], row[dropped + 1]): row[dropped + 3] for row in rows}

    theirs = pairs(shared_data / TORCH_NPU_RANK / "ASCEND_PROFILER_OUTPUT" / "api_statistic.csv", 0)
    ours = pairs(exports["torch_npu"]["api_statistic.csv"], 1)
    assert {level for level, _ in theirs} == {"acl", "node", "hccl"}
    assert any("Synchronize" in name for _, name in theirs)
    assert ours == theirs


@pytest.mark.parametrize("name", sorted(MSPROF_HEADERS))
def test_msprof_columns_come_first(headers, name):
    msprof = MSPROF_HEADERS[name]
    assert headers[name][:len(msprof)] == msprof
    kind = next(kind for kind in catalog.SUMMARY_FILES if ("csv", name.removesuffix(".csv")) in kind.stems)
    assert [c.header for c in kind.columns] == headers[name]


@pytest.mark.parametrize("name, real_name, dropped", REAL_COPIES)
def test_same_columns_as_the_real_files(shared_data, headers, name, real_name, dropped):
    reals = sorted((shared_data / "ascend/torch_npu/text").glob(f"level*/rank*_ascend_pt/ASCEND_PROFILER_OUTPUT/"
                                                                 f"{real_name}"))
    assert reals
    for real in reals:
        expected = header(real)
        assert headers[name][dropped:dropped + len(expected)] == expected, real
    if dropped:
        assert headers[name][0] == "Device_id"


def test_op_summary_columns_as_torch_npu_names_them(shared_data, headers):
    """Every msprof column of op_summary, under torch_npu's name, is in the real kernel_details.csv, in the
    same order (torch_npu drops Device_id and adds Step Id, Mix Block Dim, Context ID and PMU columns); at
    profiler level 0 torch_npu writes only some of them, and those are in op_summary in the same order."""
    ours = [KERNEL_DETAILS_NAMES.get(h, h) for h in MSPROF_HEADERS["op_summary.csv"][1:]]
    reals = sorted((shared_data / "ascend/torch_npu/text").glob("level*/rank*_ascend_pt/ASCEND_PROFILER_OUTPUT/"
                                                                "kernel_details.csv"))
    assert len(reals) == 6
    for real in reals:
        theirs = header(real)[1:]                                     # after Step Id
        shorter, longer = (theirs, ours) if "level0" in str(real) else (ours, theirs)
        columns = iter(longer)
        assert all(column in columns for column in shorter), real     # a subsequence: same order
