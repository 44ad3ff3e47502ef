"""analysis/compare.py through ``perfsight.compare``: the planted pair's known answers (tests/analysis/
planted_pair.py: the step verdict with Welch's interval worked out by hand, each operator's and kernel's
difference per step and its share, new and vanished operators, a cross-framework family row, the breakdown
adding up to the step difference), shares of self time that add up when operators nest, several runs a side
(the interval between runs, every per-step figure the mean of the runs'), a run compared with itself, one step
a side (noise unknown), no steps, the ranks that slowed most, and the operator families' file (the shipped
one, a user's, a broken one)."""
from __future__ import annotations

import math

import pytest

import perfsight
from perfsight.analysis import compare as analysis
from perfsight.core.errors import InputError
from tests.analysis import planted_pair
from tests.analysis.planted_pair import write_pair, write_trace


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return perfsight.compare(*write_pair(tmp_path_factory.mktemp("pair")))


def _rows(table, *keys) -> dict:
    return {row["name"]: tuple(row[key] for key in keys) for row in table.to_pylist()}


def test_the_step_verdict_and_its_interval(pair):
    steps = pair.steps().to_pylist()[0]
    assert (steps["base_steps"], steps["new_steps"]) == (5, 5)
    assert (steps["base_mean_ns"], steps["new_mean_ns"], steps["difference_ns"]) == (10_000_000, 10_300_000, 300_000)
    assert steps["base_stddev_ns"] == pytest.approx(math.sqrt(1000) * 1000)
    assert steps["difference_pct"] == pytest.approx(3.0)
    # Welch: 300 +- t(0.975, df = 90000 / (200^2 / 4 + 100^2 / 4) = 7.2) x sqrt(1000 / 5 + 500 / 5) us
    half = 2.351374 * math.sqrt(300)
    assert steps["ci_low_pct"] == pytest.approx((300 - half) / 100, abs=1e-5)
    assert steps["ci_high_pct"] == pytest.approx((300 + half) / 100, abs=1e-5)
    assert (steps["verdict"], pair.verdict()) == ("slower", "slower")
    assert pair.slower_than(2.0) and not pair.slower_than(3.0)      # 2.59% beyond the noise, not 3%
    # one run a side: the noise weighed is the steps', and the rule says run-to-run noise is not weighed
    assert (steps["base_runs"], steps["new_runs"], steps["noise"]) == (1, 1, "step-to-step")
    assert steps["rule"] == ("Welch's t on every step (5 of BASE, 5 of NEW), with one run a side: the interval "
                             "weighs the variance between steps, not between runs")


def test_host_operators_aligned_by_name(pair):
    keys = ("status", "matched_by", "base_calls_per_step", "new_calls_per_step", "base_per_step_ns",
            "new_per_step_ns", "difference_per_step_ns")
    assert _rows(pair.operators(), *keys) == {
        "aten::mm": ("both", "name", 4, 4, 400_000, 600_000, 200_000),
        "aten::relu": ("both", "name", 3, 6, 60_000, 120_000, 60_000),
        "aten::gelu": ("new", None, 0, 1, 0, 40_000, 40_000),
        "aten::dropout": ("vanished", None, 1, 0, 30_000, 0, -30_000),
        "aten::add": ("both", "name", 2, 2, 100_000, 100_000, 0),
    }
    assert [row["name"] for row in pair.operators().to_pylist()] == [
        "aten::mm", "aten::relu", "aten::gelu", "aten::dropout", "aten::add"]   # largest difference first
    shares = _rows(pair.operators(), "share_pct")
    assert shares["aten::mm"][0] == pytest.approx(200 / 3) and shares["aten::relu"][0] == pytest.approx(20)
    means = _rows(pair.operators(), "base_mean_ns", "new_mean_ns", "base_total_ns", "new_total_ns")
    assert means["aten::mm"] == (100_000, 150_000, 2_000_000, 3_000_000)
    assert means["aten::gelu"] == (None, 40_000, 0, 200_000)


def test_kernels_only_one_side_has_pair_up_by_family(pair):
    keys = ("status", "matched_by", "base_names", "new_names", "base_calls_per_step", "new_calls_per_step",
            "difference_per_step_ns")
    assert _rows(pair.kernels(), *keys) == {
        "matmul": ("both", "family", ["volta_sgemm_128x64_nn"], ["ampere_sgemm_64x64_tn"], 4, 4, -80_000),
        "elementwise_kernel": ("both", "name", None, None, 5, 5, 0),
    }


def test_shares_are_of_self_time_and_add_up_when_operators_nest(tmp_path, monkeypatch):
    """Each step's aten::mm calls wrapped in one aten::linear (400 -> 600 us, as the mm's): by total time both
    grew 200 us, 66.7% of the 300 us step difference each, and the shares of all operators would add up to
    156.7%; by self time aten::linear (all of it in its aten::mm) takes 0% and the shares add up to the host
    operators' 270 us, 90%."""
    events = planted_pair.trace_events

    def wrapped(side: str, steps: int = planted_pair.STEPS) -> list[dict]:
        made = events(side, steps)
        for step in (e for e in list(made) if e["name"].startswith("ProfilerStep#")):
            calls, us = next((calls, us) for name, calls, us in planted_pair.HOST_OPS[side] if name == "aten::mm")
            made.append({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1,
                         "ts": step["ts"] + 10, "dur": calls * us, "args": {}})
        return made

    monkeypatch.setattr(planted_pair, "trace_events", wrapped)
    rows = {row["name"]: row for row in perfsight.compare(*write_pair(tmp_path)).operators().to_pylist()}
    assert (rows["aten::linear"]["difference_per_step_ns"], rows["aten::mm"]["difference_per_step_ns"]) == (
        200_000, 200_000)
    assert (rows["aten::linear"]["self_difference_per_step_ns"], rows["aten::linear"]["share_pct"]) == (0, 0)
    assert rows["aten::mm"]["share_pct"] == pytest.approx(200 / 3)
    assert sum(row["share_pct"] for row in rows.values()) == pytest.approx(90)
    assert sum(100 * row["difference_per_step_ns"] / 300_000 for row in rows.values()) == pytest.approx(470 / 3)


def _runs(folder, side: str, means_us: list[int], monkeypatch) -> list:
    """Runs of the planted pair's ``side`` whose mean steps are ``means_us`` (the same code run again)."""
    paths = []
    for place, mean in enumerate(means_us):
        monkeypatch.setitem(planted_pair.STEP_US, side, mean)
        paths.append(write_trace(folder / f"{side}{place}.pt.trace.json", side))
    return paths


def test_several_runs_a_side_weigh_the_variance_between_runs(tmp_path, monkeypatch):
    """Three runs a side, mean steps BASE 10,000, 10,300, 9,700 us and NEW 10,300, 10,000, 10,600 (5 steps
    each): Welch's t on the runs' means, 300 +- 2.776445 x sqrt(90,000 / 3 + 90,000 / 3) = 300 +- 680.08 us;
    no difference, and the gate at 2% passes. Every per-step figure is the mean of the runs' (the runs of a side
    run the same operators: the single run's figures); each run's steps and mean step in ``runs()``."""
    one = perfsight.compare(*write_pair(tmp_path / "pair"))
    several = perfsight.compare(_runs(tmp_path, "base", [10_000, 10_300, 9_700], monkeypatch),
                                _runs(tmp_path, "new", [10_300, 10_000, 10_600], monkeypatch))
    steps = several.steps().to_pylist()[0]
    assert (steps["base_runs"], steps["new_runs"], steps["base_steps"], steps["noise"]) == (3, 3, 15, "run-to-run")
    assert (steps["base_mean_ns"], steps["new_mean_ns"]) == (10_000_000, 10_300_000)
    assert steps["base_stddev_ns"] == pytest.approx(300_000) and steps["new_stddev_ns"] == pytest.approx(300_000)
    half = 2.776445 * math.sqrt(60_000)
    assert steps["ci_low_pct"] == pytest.approx((300 - half) / 100, abs=1e-5)
    assert steps["ci_high_pct"] == pytest.approx((300 + half) / 100, abs=1e-5)
    assert (steps["verdict"], several.slower_than(2.0)) == ("no difference", False)
    assert steps["rule"] == ("Welch's t on each run's mean step (3 BASE runs, 3 NEW runs): the interval weighs the "
                             "variance between runs")
    assert [(r["side"], r["run"], r["steps"], r["mean_step_ns"]) for r in several.runs().to_pylist()] == [
        ("BASE", 0, 5, 10_000_000), ("BASE", 1, 5, 10_300_000), ("BASE", 2, 5, 9_700_000),
        ("NEW", 0, 5, 10_300_000), ("NEW", 1, 5, 10_000_000), ("NEW", 2, 5, 10_600_000)]
    keys = ("base_calls", "base_calls_per_step", "new_calls_per_step", "base_per_step_ns", "new_per_step_ns",
            "difference_per_step_ns", "share_pct")
    mm = next(row for row in several.operators().to_pylist() if row["name"] == "aten::mm")
    assert tuple(mm[key] for key in keys) == pytest.approx((60, 4, 4, 400_000, 600_000, 200_000, 200 / 3))
    for table in ("breakdown", "figures"):
        mine, single = (getattr(comparison, table)().to_pylist() for comparison in (several, one))
        assert [row[key] for row in mine for key in row if isinstance(row[key], float)] == pytest.approx(
            [row[key] for row in single for key in row if isinstance(row[key], float)])
    assert several.ranks().to_pylist() == one.ranks().to_pylist()
    # one run on a side: the steps of every run are weighed, and the rule says which side has one run
    fewer = perfsight.compare(_runs(tmp_path / "b", "base", [10_000, 10_300], monkeypatch),
                              write_trace(tmp_path / "n.pt.trace.json", "new")).steps().to_pylist()[0]
    assert (fewer["noise"], fewer["base_steps"], fewer["base_mean_ns"]) == ("step-to-step", 10, 10_150_000)
    assert fewer["rule"].endswith("(10 of BASE, 5 of NEW), with one run of NEW: the interval weighs the variance "
                                  "between steps, not between runs")


def test_the_ranks_that_slowed_most():
    rows = [{"rank": rank, "difference_ns": difference} for rank, difference in
            enumerate([5, -3, None, 9, 5, 0])]
    assert [row["rank"] for row in analysis.ranks_slowed_most(rows, 2)] == [3, 0]
    assert [row["rank"] for row in analysis.ranks_slowed_most(rows, 16)] == [3, 0, 4]
    assert analysis.ranks_slowed_most([{"rank": 0, "difference_ns": -1}], 16) == []


def test_launch_figures(pair):
    """9 kernels a step, each launched by a 2 us call: BASE's kernels (4 x 80 + 5 x 10 us) start 100 + 75 i us
    after their launch for the four GEMMs, then 380 + 5 i us; NEW's GEMMs are 20 us shorter each."""
    figures = {row["figure"]: (row["base"], row["new"]) for row in pair.figures().to_pylist()}
    assert figures["kernels per step"] == (9, 9)
    assert figures["mean kernel time"] == pytest.approx((370_000 / 9, 290_000 / 9))
    assert figures["mean launch call"] == (2000, 2000)
    base_delay = (sum(100 + 75 * i for i in range(4)) + sum(380 + 5 * i for i in range(4, 9)) - 9 * 2) / 9 * 1000
    new_delay = (sum(100 + 55 * i for i in range(4)) + sum(300 + 5 * i for i in range(4, 9)) - 9 * 2) / 9 * 1000
    assert figures["mean launch delay"] == pytest.approx((base_delay, new_delay))
    assert "peak memory allocated" not in figures            # a figure neither run records is left out


def test_the_breakdown_adds_up_to_the_step_difference(pair):
    rows = {row["category"]: row for row in pair.breakdown().to_pylist()}
    assert rows["compute"]["difference_ns"] == -80_000                  # the kernels' time
    assert rows["host_ops"]["difference_ns"] == 270_000                 # +200 +60 +40 -30 us
    assert sum(row["difference_ns"] for row in rows.values()) == pytest.approx(300_000)
    assert sum(row["share_pct"] for row in rows.values()) == pytest.approx(100)


def test_a_run_compared_with_itself_shows_no_difference(tmp_path):
    base, _ = write_pair(tmp_path)
    same = perfsight.compare(base, base)
    steps = same.steps().to_pylist()[0]
    assert (steps["verdict"], steps["difference_ns"]) == ("no difference", 0)
    assert steps["ci_low_pct"] == pytest.approx(-steps["ci_high_pct"])
    for table in (same.operators(), same.kernels()):
        assert set(table.column("status").to_pylist()) == {"both"}
        assert set(table.column("difference_per_step_ns").to_pylist()) == {0}
    assert set(same.breakdown().column("difference_ns").to_pylist()) == {0}
    assert not same.slower_than(0.0)


def test_steps_without_noise_are_compared_exactly(tmp_path, monkeypatch):
    """Every step of each side equally long: no noise to weigh, the difference is the verdict."""
    for side in ("base", "new"):
        monkeypatch.setitem(planted_pair.JITTER_US, side, [0] * 5)
    exact = perfsight.compare(*write_pair(tmp_path))
    steps = exact.steps().to_pylist()[0]
    assert (steps["verdict"], steps["base_stddev_ns"], steps["ci_low_pct"], steps["ci_high_pct"]) == \
        ("slower", 0, 3.0, 3.0)
    same = analysis.step_comparison(exact.base.tables, exact.base.tables)
    assert same.column("verdict").to_pylist() == ["no difference"]


def test_one_step_a_side_is_noise_unknown_and_the_gate_uses_the_difference(tmp_path):
    one = perfsight.compare(write_trace(tmp_path / "b.pt.trace.json", "base", steps=1),
                            write_trace(tmp_path / "n.pt.trace.json", "new", steps=1))
    steps = one.steps().to_pylist()[0]
    assert (steps["verdict"], steps["difference_pct"], steps["ci_low_pct"], steps["rule"]) == (
        "noise unknown", 3.0, None, None)
    assert one.slower_than(2.9) and not one.slower_than(3.0)


def test_no_steps_is_said_and_the_gate_refuses_to_judge(tmp_path):
    trace = write_trace(tmp_path / "b.pt.trace.json", "base")
    text = trace.read_text().replace('"cat": "user_annotation"', '"cat": "cpu_op"').replace("ProfilerStep#", "step")
    (tmp_path / "nosteps.pt.trace.json").write_text(text)
    comparison = perfsight.compare(trace, tmp_path / "nosteps.pt.trace.json")
    assert comparison.verdict() == "no steps"
    with pytest.raises(InputError, match=r"^NEW has no steps: the step time cannot be compared"):
        comparison.slower_than(5.0)
    # operators still compare, per run (a run without steps counts as one step)
    assert _rows(comparison.operators(), "new_calls_per_step")["aten::mm"] == (20,)


def test_the_shipped_families_file_reads_and_every_pattern_compiles():
    families = analysis.operator_families()
    assert families.column_names == ["family", "pattern", "matches", "position"]
    assert {"matmul", "convolution", "attention", "layer_norm", "optimizer"} <= set(families["family"].to_pylist())


def test_a_users_families_come_first(tmp_path):
    extra = tmp_path / "mine.csv"
    extra.write_text("family,pattern\nmy_gemm,^volta_sgemm|^ampere_sgemm\n")
    first = analysis.operator_families(extra).to_pylist()[0]
    assert (first["family"], first["position"]) == ("my_gemm", 0)
    comparison = perfsight.compare(*write_pair(tmp_path / "pair"), families=extra)
    assert "my_gemm" in comparison.kernels().column("name").to_pylist()


@pytest.mark.parametrize(("text", "message"), [
    ("family,regex\nx,y\n", r"mine.csv: operator families need the columns family and pattern .*; it lacks pattern"),
    ("family,pattern\nx,(unclosed\n", r"mine.csv: line 2: pattern '\(unclosed' is not a regular expression"),
])
def test_a_broken_families_file_is_an_input_error_naming_it(tmp_path, text, message):
    (tmp_path / "mine.csv").write_text(text)
    with pytest.raises(InputError, match=message):
        analysis.operator_families(tmp_path / "mine.csv")
