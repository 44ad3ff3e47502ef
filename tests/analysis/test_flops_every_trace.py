"""Every shared trace (../shared/data: the Kineto traces of MANIFEST.tsv, the torch_npu and MindSpore/msprof
Ascend runs): no FLOPS utilisation, MFU or roofline share above 100% without the note naming the row and the
run summary's warning; and on HTA's control trace (an A100, 8 ranks, 2023) the operators' device time and
precision against the raw events: each aten::mm's time is the duration of the device tasks its launch calls
started (correlation ids; its GEMM kernels and the memsets of split-K workspaces), TF32 exactly where those
kernels are CUTLASS's ``s1688`` TF32 GEMMs."""
import csv
import gzip
import json
import re

import pytest

import perfsight
from perfsight.analysis import flops, roofline
from tests.conftest import SHARED_DATA

CONTROL = "kineto/hta/trace_diff/control/control.json.gz"


def shared_runs() -> list[str]:
    """The runs under SHARED_DATA, relative to it; a missing folder is a run that fails (not an empty list)."""
    manifest = SHARED_DATA / "kineto" / "MANIFEST.tsv"
    runs = [f"kineto/{row['local_path']}" for row in csv.DictReader(open(manifest, newline=""), delimiter="\t")
            if row["device"] != "non-Kineto JSON"] if manifest.is_file() else ["kineto/MANIFEST.tsv"]
    ascend = SHARED_DATA / "ascend"
    runs += sorted(str(p.relative_to(SHARED_DATA)) for p in ascend.glob("torch_npu/*/*/*_ascend_pt")) or [
        "ascend/torch_npu"]
    runs += sorted(str(p.relative_to(SHARED_DATA)) for p in ascend.glob("mindspore_legacy/profiler/PROF_*"))
    return runs + ["ascend/mindspore_legacy/profiler"]


@pytest.mark.parametrize("run", shared_runs())
def test_no_utilisation_above_100_percent_without_its_warning(run):
    tables = perfsight.open(SHARED_DATA / run).tables
    model = flops.model_flops(tables)
    checked = {"ops": flops.op_flops(tables), "scopes": flops.scope_flops(tables), "model": model,
               "total": flops.model_flops_total(model)}
    for name, table in checked.items():
        for row in table.to_pylist():
            if (row["utilization_percent"] or 0) > 100:
                assert row["peak_note"] and row["peak_note"].endswith(flops.OVER_PEAK_NOTE), (name, row)
    warnings = flops.over_peak_warnings(tables) + roofline.over_roof_warnings(tables)
    for row in roofline.roofline(tables).to_pylist():
        if (row["roof_percent"] or 0) > 100:
            assert row["peak_note"] == f"{row['op_type']} ({row['precision']}): {roofline.OVER_ROOF_NOTE}"
            assert any(w.startswith(row["peak_note"]) for w in warnings)
    for table in checked.values():
        for row in table.to_pylist():
            if row["peak_note"]:
                assert any(w.startswith(row["peak_note"]) for w in warnings)


def _raw_mm_kernels(path):
    """For each aten::mm event of the raw trace: the device tasks its launch calls started (runtime events
    inside it on its thread, joined to kernels, memsets and copies by correlation id), as (name, dur in us)
    lists."""
    with gzip.open(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    tasks = ("kernel", "gpu_memset", "gpu_memcpy")
    kernels = {e["args"]["correlation"]: e for e in events if e.get("cat") in tasks}
    launches = [e for e in events if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") in kernels]
    by_thread: dict = {}
    for launch in launches:
        by_thread.setdefault((launch["pid"], launch["tid"]), []).append(launch)
    found = []
    for op in (e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::mm"):
        inside = [kernels[c["args"]["correlation"]] for c in by_thread.get((op["pid"], op["tid"]), [])
                  if op["ts"] <= c["ts"] and c["ts"] + c["dur"] <= op["ts"] + op["dur"]]
        found.append([(k["name"], k["dur"]) for k in inside])
    return found


def test_device_time_and_precision_of_the_control_traces_matmuls():
    """Before, op time fell back to the host's launch time (no External id joins these kernels) and the fp32
    peak: aten::mm reached 160%. Now: each aten::mm's kernels, TF32 where they are s1688 GEMMs."""
    tables = perfsight.open(SHARED_DATA / CONTROL).tables
    rows = {r["precision"]: r for r in flops.op_flops(tables).to_pylist() if r["op_type"] == "aten::mm"}
    mms = _raw_mm_kernels(SHARED_DATA / CONTROL)
    tf32 = [k for k in mms if any(re.search("s1688|tf32", name) for name, _ in k)]
    fp32 = [k for k in mms if k not in tf32]
    assert (rows["tf32"]["count"], rows["fp32"]["count"]) == (len(tf32), len(fp32)) == (1008, 84)
    assert rows["tf32"]["op_ns"] == sum(dur for k in tf32 for _, dur in k) * 1000
    assert rows["fp32"]["op_ns"] == sum(dur for k in fp32 for _, dur in k) * 1000
    assert {r["time_source"] for r in rows.values()} == {"device"}
    assert rows["tf32"]["peak_flops"] == 156e12 and rows["fp32"]["peak_flops"] == 19.5e12
    assert all(r["utilization_percent"] < 100 for r in flops.op_flops(tables).to_pylist())
