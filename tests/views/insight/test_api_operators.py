"""The Operators, FLOPs and Dynamic shape routes on real runs (a perfsight run, the large GPU trace, the CPU
trace given torch's FLOPs): every number is the analysis functions' for the same tables, paging, sorting
and search are consistent, and bad parameters get 400 naming the parameter."""
from __future__ import annotations

import pyarrow.compute as pc
import pytest

from perfsight.analysis.dynamic_shape import op_instance_time_by_step, op_shapes_by_step, op_time_by_step
from perfsight.analysis.flops import model_flops, model_flops_total, op_flops, scope_flops
from perfsight.analysis.ops import call_stack, op_instances, op_statistic, type_shares
from perfsight.analysis.roofline import roofline
from perfsight.analysis.summary import run_start_ns

from .conftest import expected

HOST = ("cpu_op",)


@pytest.mark.parametrize("prefix, view, views, kinds", [
    ("gpu/", None, ["device", "host"], None), ("gpu/", "host", ["device", "host"], HOST),
    ("perfsight/", None, ["host"], HOST)])
def test_types_and_shares(served_runs, prefix, view, views, kinds):
    tables = served_runs.tables(prefix)
    body = served_runs.get(prefix, "operators", **({"view": view} if view else {}))
    assert body["views"] == views and body["view"] == (view or views[0])
    assert body["types"] == expected(op_statistic(tables, kinds=kinds))
    assert body["shares"] == expected(type_shares(op_instances(tables, kinds=kinds), top=20))


def test_instances_page_sort_and_search(served_runs):
    tables = served_runs.tables("gpu/")
    origin = run_start_ns(tables)
    instances = op_instances(tables)
    first = served_runs.get("gpu/", "operators/instances", page_size=7)
    assert (first["total"], first["sort"], first["order"], first["page"]) == (instances.num_rows, "dur_ns", "desc", 1)
    longest = instances.sort_by([("dur_ns", "descending"), ("id", "ascending")]).slice(0, 14)
    assert first["rows"] == expected(longest.slice(0, 7), origin, "start_ns")
    second = served_runs.get("gpu/", "operators/instances", page_size=7, page=2)
    assert second["rows"] == expected(longest.slice(7, 7), origin, "start_ns")

    # fuzzy search: every term somewhere in the name or type, any case, any order
    found = served_runs.get("gpu/", "operators/instances", search="SGEMM volta", sort="start_ns", order="asc",
                            page_size=500)
    names = instances["name"].to_pylist()
    assert found["total"] == sum("sgemm" in n.lower() and "volta" in n.lower() for n in names) > 0
    starts = [r["start_ns"] for r in found["rows"]]
    assert starts == sorted(starts) and all("volta" in r["name"] and "sgemm" in r["name"] for r in found["rows"])

    kind = "volta_sgemm_128x64_nn"
    typed = served_runs.get("gpu/", "operators/instances", op_type=kind, rank=1, page_size=500)
    assert typed["total"] == pc.sum(pc.equal(instances["op_type"], kind).cast("int64")).as_py()
    assert {r["op_type"] for r in typed["rows"]} == {kind}
    assert served_runs.get("gpu/", "operators/instances", op_type=kind, rank=0)["total"] == 0   # the trace is rank 1


def test_host_view_instances_and_shapes(served_runs):
    tables = served_runs.tables("perfsight/")
    body = served_runs.get("perfsight/", "operators/instances", search="addmm", sort="self_ns", order="asc")
    addmm = op_instances(tables, kinds=HOST)
    assert body["total"] == sum("addmm" in n.lower() for n in addmm["name"].to_pylist()) == 24   # + AddmmBackward0
    assert [r["self_ns"] for r in body["rows"]] == sorted(r["self_ns"] for r in body["rows"])
    shapes = served_runs.get("perfsight/", "operators/shapes", op_type="aten::addmm")
    by_shape = op_statistic(tables, by=["op_type", "input_shapes"], kinds=HOST)
    want = by_shape.filter(pc.equal(by_shape["op_type"], "aten::addmm"))
    assert shapes["rows"] == expected(want) and shapes["total"] == want.num_rows >= 2      # two layers, two shapes


def test_call_stack(served_runs):
    tables = served_runs.tables("gpu/")
    task = served_runs.get("gpu/", "operators/instances", page_size=1)["rows"][0]
    body = served_runs.get("gpu/", f"operators/stack/{task['id']}")
    assert body["frames"] == expected(call_stack(tables, task["id"]), run_start_ns(tables), "start_ns")
    assert body["frames"][-1]["id"] == task["id"] and body["frames"][-2]["kind"] == "runtime"
    missing = served_runs.refused("gpu/", "operators/stack/123456789", status=404)
    assert missing == "no slice with id 123456789 in this run"
    refused = served_runs.refused("gpu/", "operators/stack/x")
    assert refused == f"slice_id='x': expected an integer from 0 to {2**63 - 1}"


@pytest.mark.parametrize("route, params, message", [
    ("operators/instances", {"page_size": "0"}, "page_size=0: expected an integer from 1 to 500"),
    ("operators/instances", {"page_size": "501"}, "page_size=501: expected an integer from 1 to 500"),
    ("operators/instances", {"page": "x"}, "page='x': expected an integer from 1 to 18446744073709551"),
    ("operators/instances", {"sort": "evil"}, "sort='evil': expected one of id, name, op_type"),
    ("operators/instances", {"order": "up"}, "order='up': expected one of asc, desc"),
    ("operators/instances", {"rank": "-1"}, "rank=-1: expected an integer from 0 to 2147483647"),
    ("operators", {"view": "device"}, "view='device': expected one of host"),
    ("operators/shapes", {}, "op_type is required"),
    ("flops", {"level": "0"}, "level=0: expected an integer from 1 to 64"),
    ("flops", {"precision": "fp4"}, "precision='fp4': expected one of auto, fp64, fp32, tf32, fp16, bf16, fp8, int8"),
    ("dynamic/instances", {}, "op_type is required"),
    ("dynamic/instances", {"op_type": "aten::addmm", "instances": "0,x"},
     f"instances='x': expected an integer from 0 to {2**63 - 1}"),
    ("dynamic/instances", {"op_type": "aten::addmm", "instances": ",".join(["1"] * 51)},
     "instances: 51 ordinals; expected at most 50"),
])
def test_bad_parameters_are_named(served_runs, route, params, message):
    assert served_runs.refused("perfsight/", route, **params).startswith(message)


def test_flops_routes(served_flops):
    tables = served_flops.tables("cpu_flops/")
    body = served_flops.get("cpu_flops/", "flops", level=2, precision="bf16")
    assert (body["level"], body["precision"], body["precisions"]) == (
        2, "bf16", ["auto", "fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8"])
    assert body["ops"] == expected(op_flops(tables, precision="bf16"))
    assert body["scopes"] == expected(scope_flops(tables, level=2, precision="bf16"))
    model = model_flops(tables, precision="bf16")
    assert body["model"] == expected(model) and body["total"] == expected(model_flops_total(model))
    (total,) = body["total"]
    assert total["steps"] == 3 and total["peak_flops"] == 312e12 and total["flops"] > 0
    assert body["roofline"] == expected(roofline(tables)) and body["roofline"]
    auto = served_flops.get("cpu_flops/", "flops")            # each operator at its own precision's peak
    assert auto["precision"] == "auto" and auto["ops"] == expected(op_flops(tables))


def test_flops_of_a_run_without_flops(served_runs):
    body = served_runs.get("gpu/", "flops")
    assert body["ops"] == body["scopes"] == body["model"] == body["total"] == []


@pytest.mark.parametrize("prefix, kinds", [("perfsight/", HOST), ("gpu/", None)])
def test_dynamic_shape(served_runs, prefix, kinds):
    tables = served_runs.tables(prefix)
    body = served_runs.get(prefix, "dynamic")
    assert body["time_by_step"] == expected(op_time_by_step(tables, kinds=kinds))
    assert body["shapes"] == expected(op_shapes_by_step(tables, kinds=kinds))
    assert body["types"] == expected(op_statistic(tables, kinds=kinds))


def test_dynamic_instances(served_runs):
    tables = served_runs.tables("perfsight/")
    body = served_runs.get("perfsight/", "dynamic/instances", op_type="aten::addmm", instances="1,0")
    table = op_instance_time_by_step(tables, kinds=HOST)
    mine = table.filter(pc.equal(table["op_type"], "aten::addmm"))
    want = expected(mine, run_start_ns(tables), "start_ns")
    assert body["instances"] == [1, 0]
    assert sorted(body["rows"], key=lambda r: r["id"]) == sorted(want, key=lambda r: r["id"])   # both layers' addmm
    assert [r["start_ns"] for r in body["rows"]] == sorted(r["start_ns"] for r in body["rows"])   # in time order
    default = served_runs.get("perfsight/", "dynamic/instances", op_type="aten::addmm")
    assert default["instances"] == [0, 1, 2, 3, 4]
