"""The Compare page's route, GET /api/compare/<base>/<new>, over the planted pair (tests/analysis/
planted_pair.py): the verdict row and its sentence, each side's step times, the breakdown, the operators and
kernels that grew and shrank most (``top`` of each), the figures; bad requests refused with the reason."""
from __future__ import annotations

import pytest

from tests.analysis.planted_pair import write_pair

from .conftest import Served


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("compare_runs")
    write_pair(base)
    with Served(base) as served:
        yield served


def _compare(served, base: str, new: str, **params):
    return served.client.get(f"/api/compare/{served.id(base)}/{served.id(new)}", params=params)


def test_the_pair_compared(served):
    response = _compare(served, "base", "new")
    assert response.status_code == 200, response.text
    data = response.json()
    assert (data["base"]["path"], data["new"]["path"]) == ("base.pt.trace.json", "new.pt.trace.json")
    assert data["steps"]["verdict"] == "slower"
    assert data["steps"]["verdict_text"] == ("NEW is 3.0% slower (95% CI +2.6% to +3.4%, step-to-step noise; "
                                             "run-to-run noise is not covered): 10.000 -> 10.300 ms per step")
    assert data["step_times"] == {"base": [10_000_000, 10_040_000, 9_960_000, 10_020_000, 9_980_000],
                                  "new": [10_300_000, 10_270_000, 10_330_000, 10_310_000, 10_290_000]}
    operators = data["operators"]
    assert operators["total"] == 5
    assert [r["name"] for r in operators["grown"]] == ["aten::mm", "aten::relu", "aten::gelu"]
    assert [r["name"] for r in operators["shrunk"]] == ["aten::dropout"]
    assert [(r["name"], r["base_names"], r["new_names"]) for r in data["kernels"]["shrunk"]] == [
        ("matmul", ["volta_sgemm_128x64_nn"], ["ampere_sgemm_64x64_tn"])]
    assert {r["category"]: r["difference_ns"] for r in data["breakdown"]}["host_ops"] == 270_000
    assert [r["figure"] for r in data["figures"]][:2] == ["kernels per step", "mean kernel time"]


def test_top_limits_each_list_and_a_run_compares_with_itself(served):
    data = _compare(served, "base", "new", top=1).json()
    assert [r["name"] for r in data["operators"]["grown"]] == ["aten::mm"]
    same = _compare(served, "base", "base").json()
    assert same["steps"]["verdict"] == "no difference"
    assert same["operators"]["grown"] == same["operators"]["shrunk"] == []


def test_bad_requests_are_refused_with_the_reason(served):
    assert _compare(served, "base", "new", top=0).json()["detail"] == "top=0: expected 1 to 200"
    response = served.client.get(f"/api/compare/{served.id('base')}/nothing")
    assert response.status_code == 404
    assert response.json()["detail"] == "no run with id 'nothing' under the summary-base-dir"
