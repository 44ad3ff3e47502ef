"""The Overview and Step trace routes on real runs (a perfsight run, the large GPU trace): every number is
the analysis functions' for the same tables, times of day relative to the run's first instant."""
from __future__ import annotations

import pyarrow.compute as pc
import pytest

from perfsight.analysis.advisor import advise, evidence_refs
from perfsight.analysis.breakdown import step_breakdown, step_breakdown_average, temporal_breakdown
from perfsight.analysis.data import data_verdict
from perfsight.analysis.flops import model_flops, model_flops_total
from perfsight.analysis.health import CHECKS, trace_health
from perfsight.analysis.ops import op_instances, type_shares
from perfsight.analysis.steps import step_phases, step_trace
from perfsight.analysis.summary import run_start_ns, run_summary, timeline_summary

from .conftest import expected

RUNS = ["perfsight/", "gpu/"]


@pytest.mark.parametrize("prefix", RUNS)
def test_overview_is_the_analyses(served_runs, prefix):
    tables = served_runs.tables(prefix)
    origin = run_start_ns(tables)
    body = served_runs.get(prefix, "overview")
    breakdown = step_breakdown(tables)
    assert body["step_breakdown"] == expected(breakdown, origin, "start_ns", "end_ns")
    assert body["step_breakdown_average"] == expected(step_breakdown_average(breakdown))
    assert body["categories"] == ["compute", "communication", "memory", "runtime", "dataloader", "host_ops",
                                  "python", "idle"]
    assert body["temporal"] == expected(temporal_breakdown(tables), origin, "start_ns", "end_ns")
    assert body["timeline"] == expected(timeline_summary(tables), origin, "start_ns", "end_ns")
    assert body["data"] == expected(data_verdict(tables))
    assert body["flops"] == expected(model_flops_total(model_flops(tables)))
    advice = advise(tables)
    assert body["advice"] == expected(advice) and body["evidence"] == expected(evidence_refs(advice))
    assert body["warnings"] == run_summary(tables)["warnings"]
    health = trace_health(tables)
    assert body["health"] == expected(health.filter(pc.greater(health.column("count"), 0)))
    assert body["health_checks"] == {check: what for check, (what, _) in CHECKS.items()}
    view = "device" if prefix == "gpu/" else "host"
    assert body["ops_view"] == view
    instances = op_instances(tables, kinds=None if view == "device" else ("cpu_op",))
    assert body["top_ops"] == expected(type_shares(instances, top=10))


@pytest.mark.parametrize("prefix", RUNS)
def test_the_headline_is_the_median_of_the_profiled_steps_of_the_breakdown(served_runs, prefix):
    """Not the collector's mean over every step it timed (startup and the profiler's stop included)."""
    body = served_runs.get(prefix, "overview")
    (average,) = body["step_breakdown_average"]
    steps = sorted(r["step_ns"] for r in body["step_breakdown"])
    middle = len(steps) // 2
    median = steps[middle] if len(steps) % 2 else round((steps[middle - 1] + steps[middle]) / 2)
    assert average["steps"] == len(steps) > 2 and average["median_step_ns"] == median
    assert average["step_ns"] == round(sum(steps) / len(steps)) != median
    assert "steps" not in body                  # the collector's series stats are not the page's headline


def test_overview_of_the_gpu_trace_in_numbers(served_runs):
    body = served_runs.get("gpu/", "overview")
    assert [r["step"] for r in body["step_breakdown"]] == [2, 3, 4, 5, 6]
    for row in body["step_breakdown"]:                                    # the categories add up to the step
        assert sum(row[c + "_ns"] for c in body["categories"]) == row["step_ns"]
    assert body["step_breakdown"][0]["start_ns"] < 10**12                # relative, not ns since the epoch
    (other,) = [r for r in body["top_ops"] if r["op_type"] is None]
    assert len(body["top_ops"]) == 11 and other["types"] == 51 - 10
    assert sum(r["share_percent"] for r in body["top_ops"]) == pytest.approx(100)
    assert {a["rule"] for a in body["advice"]} >= {"communication_not_overlapped", "low_device_utilisation"}
    stream, thread = body["timeline"]
    assert (stream["kind"], stream["tracks"], stream["executions"]) == ("stream", 2, 22290)


@pytest.mark.parametrize("prefix", RUNS)
def test_steps_are_the_step_trace_and_its_phases(served_runs, prefix):
    tables = served_runs.tables(prefix)
    trace = step_trace(tables)
    body = served_runs.get(prefix, "steps")
    assert body["steps"] == expected(trace, run_start_ns(tables), "start_ns", "end_ns", "fp_start_ns", "bp_end_ns")
    assert body["phases"] == expected(step_phases(trace))
    average = body["phases"][0]
    assert average["step"] is None and average["steps"] == len(body["steps"]) > 0


def test_unknown_run(served_runs):
    response = served_runs.client.get("/api/runs/nope/overview")
    assert response.status_code == 404 and "nope" in response.json()["detail"]


def test_a_run_without_steps_says_why_on_the_overview_and_the_step_trace(tmp_path, served_runs):
    """The pages print the analysis' reason (a whole-run profile, or no ProfilerStep ranges at all); a run with
    steps has none."""
    import json

    from perfsight.analysis.steps import no_steps_reason

    from .conftest import Served

    (tmp_path / "nosteps").mkdir()
    (tmp_path / "nosteps" / "t.pt.trace.json").write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 5}]}))
    with Served(tmp_path) as served:
        reason = no_steps_reason(served.tables("nosteps/"))
        assert reason.startswith("no steps (no ProfilerStep#N ranges)")
        assert served.get("nosteps/", "overview")["no_steps_reason"] == reason
        assert served.get("nosteps/", "steps")["no_steps_reason"] == reason
    assert served_runs.get("gpu/", "overview")["no_steps_reason"] is None
    assert served_runs.get("gpu/", "steps")["no_steps_reason"] is None
