"""HCCL's batched send-receive is point-to-point: a group whose operations are all send, recv or
``hcom_batchSendRecv`` is a ``p2p`` group (msprof-analyze lists pipeline groups so in communication_group.json),
and the operation's kind is ``sendrecv``, not ``other``. The job is the shared level-1 torch_npu job with its
all-reduces renamed ``hcom_batchSendRecv_...`` in every file of both ranks (names, as HCCL writes them), filed
under ``p2p`` in its communication files; msprof-analyze's communication_group.json of it is the expected one."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import perfsight
from perfsight.analysis.collectives import P2P_KINDS, collective_kind
from perfsight.ingest.ascend.ascend_kinds import collective_name
from perfsight.views.export import cluster
from tests.conftest import copy_shared

#: msprof-analyze 26.2.0's communication_group.json of ``batched_job`` (``msprof-analyze cluster -d <job> -m all``,
#: run here in a throwaway venv)
MSPROF_ANALYZE_GROUPS = {"collective": [], "p2p": [[0, 1]], "comm_group_parallel_info": [
    {"type": "p2p", "rank_set": [0, 1], "group_name": "17522688603477080586", "group_id": "", "pg_name": ""}]}


def batched_job(shared_data: Path, destination: Path) -> Path:
    """The level-1 job with its all-reduces renamed, and in communication.json and communication_matrix.json
    filed under ``p2p`` as torch_npu files point-to-point operators (the files' totals stay ``collective``)."""
    job = copy_shared(shared_data / "ascend/torch_npu/text/level1", destination)
    for path in job.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".csv"):
            text = path.read_text(encoding="utf-8")
            if "hcom_allReduce_" in text:
                path.write_text(text.replace("hcom_allReduce_", "hcom_batchSendRecv_"), encoding="utf-8")
    for path in job.glob("rank*_ascend_pt/ASCEND_PROFILER_OUTPUT/communication*.json"):
        document = json.loads(path.read_text())
        for step in document.values():
            moved = {key: value for key, value in step["collective"].items() if key != "Total Op Info"}
            step["p2p"] = {**step.get("p2p", {}), **moved}
            step["collective"] = {key: value for key, value in step["collective"].items() if key not in moved}
        path.write_text(json.dumps(document))
    return job


@pytest.mark.parametrize("hccl_name, kind", [("hcom_send__1_0_1", "send"), ("hcom_receive__1_0_1", "recv"),
                                             ("hcom_batchSendRecv__1_0_1", "sendrecv"),
                                             ("hcom_allReduce__5", "allreduce")])
def test_hccls_point_to_point_operators_are_of_the_p2p_kinds(hccl_name, kind):
    assert collective_kind(collective_name(hccl_name)) == kind
    assert (kind in P2P_KINDS) == (kind != "allreduce")


def test_a_group_of_batched_send_receives_is_a_p2p_group(shared_data, tmp_path):
    job = batched_job(shared_data, tmp_path / "level1")
    opened = perfsight.open(job, use_cache=False)
    operations = opened.collectives().to_pylist()
    assert len(operations) == 8 and {row["collective"] for row in operations} == {"batch_send_recv"}
    figures = opened.collective_figures().to_pylist()
    assert len(figures) == 8 and {row["collective"] for row in figures} == {"sendrecv"}
    assert [row["kind"] for row in opened.communication_groups().to_pylist()] == ["p2p"]
    cluster(job, tmp_path / "out")
    groups = json.loads((tmp_path / "out" / "cluster_analysis_output" / "communication_group.json").read_text())
    assert groups == MSPROF_ANALYZE_GROUPS
