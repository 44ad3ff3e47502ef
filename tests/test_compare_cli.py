"""``perfsight compare BASE NEW`` on the planted pair (tests/analysis/planted_pair.py): the verdict in words
(saying that one run a side leaves the run-to-run noise out), ``--json``, the CSV files of ``-o`` (written,
replaced on a re-run, never over a user's file), the CI gate's exit status, and argument errors that name the
flag; several runs a side (``BASE... -- NEW...``, ``--base``/``--new``) judged by the variance between runs;
every line within 80 columns, on the planted pair and on real traces (HTA's trace_diff pair)."""
from __future__ import annotations

import csv
import json

import pytest

from perfsight.cli import main
from perfsight.views.export.compare_files import FILES
from tests.analysis import planted_pair
from tests.analysis.planted_pair import write_pair, write_trace


@pytest.fixture
def pair(tmp_path):
    return [str(path) for path in write_pair(tmp_path / "pair")]


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_report_says_the_verdict_and_fits_80_columns(pair, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["compare", *pair]) == 0
    out = capsys.readouterr().out
    assert ("NEW is 3.0% slower (95% CI +2.6% to +3.4%, step-to-step noise; run-to-run noise is not covered): "
            "10.000 -> 10.300 ms per step") in _words(out)
    assert ("rule: Welch's t on every step (5 of BASE, 5 of NEW), with one run a side: the interval weighs the "
            "variance between steps, not between runs") in _words(out)
    assert "BASE (5 steps, mean 10.000 ms):" in out and "NEW (5 steps, mean 10.300 ms):" in out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80          # the paths too: folded when longer than a line
    grew = lines.index(next(line for line in lines if line.startswith("Operators that grew most")))
    names = [line.split()[0] for line in lines[grew + 1:grew + 8] if line.strip() and "─" not in line]
    assert names[1:4] == ["aten::mm", "aten::relu", "aten::gelu"]         # after the header row
    assert "aten::gelu (new)" in out and "aten::dropout (gone)" in out and "matmul (family)" in out
    assert "gate:" not in out


def test_json_holds_every_table(pair, capsys):
    assert main(["compare", *pair, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"base", "new", "base_labels", "new_labels", "base_not_read", "new_not_read", *FILES}
    assert (report["base"], report["new"], report["base_labels"]) == ([pair[0]], [pair[1]], [""])
    assert report["base_not_read"] == report["new_not_read"] == []
    assert (report["steps"]["verdict"], report["steps"]["difference_ns"]) == ("slower", 300_000)
    assert {row["name"]: row["difference_per_step_ns"] for row in report["operators"]}["aten::mm"] == 200_000


@pytest.mark.parametrize(("percent", "status", "said"), [("2", 1, "FAIL"), ("3", 0, "pass"), ("2.5", 1, "FAIL")])
def test_the_gate_fails_only_beyond_the_noise(pair, capsys, percent, status, said):
    assert main(["compare", *pair, "--fail-if-slower", percent]) == status
    out = capsys.readouterr().out
    assert f"gate: NEW slower than BASE by more than {percent}% beyond the step-to-step noise? {said}" in out


def test_the_gate_refuses_to_pass_a_run_without_steps(pair, tmp_path, capsys):
    text = open(pair[1]).read().replace('"cat": "user_annotation"', '"cat": "cpu_op"')
    (tmp_path / "nosteps.pt.trace.json").write_text(text.replace("ProfilerStep#", "phase"))
    assert main(["compare", pair[0], str(tmp_path / "nosteps.pt.trace.json"), "--fail-if-slower", "5"]) == 2
    assert "perfsight: error: NEW has no steps: the step time cannot be compared" in capsys.readouterr().err


def test_output_files_are_written_and_a_users_file_is_never_replaced(pair, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compare", *pair, "-o", str(out)]) == 0
    written = sorted(path.name for path in out.iterdir() if not path.name.startswith("."))
    # no communication, modules or memory in the pair: those tables have no rows, no file
    assert written == sorted(FILES[name] for name in ("runs", "steps", "breakdown", "operators", "kernels", "ranks",
                                                      "figures"))
    with open(out / FILES["operators"]) as file:
        rows = list(csv.DictReader(file))
    assert rows[0]["name"] == "aten::mm" and float(rows[0]["difference_per_step_ns"]) == 200_000
    assert main(["compare", *pair, "-o", str(out)]) == 0            # its own files: replaced
    (out / FILES["steps"]).write_text("mine\n")
    capsys.readouterr()
    assert main(["compare", *pair, "-o", str(out)]) == 2
    assert "compare_steps.csv" in capsys.readouterr().err
    assert (out / FILES["steps"]).read_text() == "mine\n"


@pytest.mark.parametrize(("args", "message"), [
    (["--fail-if-slower", "abc"], "--fail-if-slower: 'abc': expected a percentage, 0 or more"),
    (["--fail-if-slower", "-1"], "'-1': expected a percentage, 0 or more"),
    (["--rank", "first"], "'first': expected a rank number (0 or more) or 'slowest'"),
])
def test_argument_errors_name_the_flag(pair, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", *pair, *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_missing_path_is_a_clear_error(pair, tmp_path, capsys):
    assert main(["compare", pair[0], str(tmp_path / "nothing")]) == 2
    assert str(tmp_path / "nothing") in capsys.readouterr().err


def _runs(folder, side: str, means_us: list[int], monkeypatch) -> list[str]:
    """Runs of the planted pair's ``side`` (its operators and kernels, its step-to-step jitter) whose mean steps
    are ``means_us``: the same code run again, each run a little slower or faster as a whole."""
    paths = []
    for place, mean in enumerate(means_us):
        monkeypatch.setitem(planted_pair.STEP_US, side, mean)
        paths.append(str(write_trace(folder / f"{side}{place}.pt.trace.json", side)))
    return paths


def test_several_runs_a_side_are_judged_by_the_variance_between_runs(tmp_path, capsys, monkeypatch):
    """Three runs a side whose mean steps differ from run to run by 300 us (BASE 10,000, 10,300, 9,700 us;
    NEW 10,300, 10,000, 10,600): NEW is 3.0% slower on average, but Welch's t on the runs' means (variance
    90,000 us^2 each side, 4 degrees of freedom, t 2.776445) gives 300 +- 680.08 us, -3.8% to +9.8%: no
    difference beyond the run-to-run noise, and the gate at 2% passes - where the first run of each side
    alone (step-to-step noise only: +2.6% to +3.4%) fails it. Either way of giving the runs says the same."""
    from scipy import stats

    base = _runs(tmp_path, "base", [10_000, 10_300, 9_700], monkeypatch)
    new = _runs(tmp_path, "new", [10_300, 10_000, 10_600], monkeypatch)
    assert main(["compare", "--fail-if-slower", "2", base[0], new[0]]) == 1
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["compare", "--fail-if-slower", "2", *base, "--", *new]) == 0
    out = capsys.readouterr().out
    expected = stats.ttest_ind([10_300, 10_000, 10_600], [10_000, 10_300, 9_700], equal_var=False) \
        .confidence_interval(0.95)
    assert (round(expected.low / 100, 1), round(expected.high / 100, 1)) == (-3.8, 9.8)
    assert ("no difference beyond the run-to-run noise (NEW +3.0%, 95% CI -3.8% to +9.8%): 10.000 -> 10.300 ms "
            "per step") in _words(out)
    assert ("rule: Welch's t on each run's mean step (3 BASE runs, 3 NEW runs): the interval weighs the variance "
            "between runs") in _words(out)
    assert "BASE 2 (5 steps, mean 10.300 ms):" in out and "NEW 3 (5 steps, mean 10.600 ms):" in out
    assert "gate: NEW slower than BASE by more than 2% beyond the run-to-run noise? pass" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    flags = [argument for side, runs in (("--base", base), ("--new", new)) for run in runs
             for argument in (side, run)]
    assert main(["compare", "--json", *flags]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    assert (steps["base_runs"], steps["new_runs"], steps["noise"], steps["verdict"]) == (3, 3, "run-to-run",
                                                                                        "no difference")
    assert steps["ci_low_pct"] == pytest.approx(-3.8008, abs=1e-4)


@pytest.mark.parametrize(("args", "message"), [
    (["a"], "compare: give BASE and NEW (1 given without a flag); usage: perfsight compare BASE NEW, "
            "BASE... -- NEW..., or --base RUN --new RUN (each repeatable)"),
    (["a", "b", "c"], "compare: give BASE and NEW (3 given without a flag)"),
    (["--base", "a", "--new", "b", "c"], "compare: runs given with --base and --new and without a flag"),
    (["a", "--", "b", "--top", "3"], "compare: --top after --, where NEW's runs are: options go before --"),
])
def test_runs_that_do_not_make_two_sides_are_an_error_saying_how(args, message, capsys):
    assert main(["compare", *args]) == 2
    assert message in capsys.readouterr().err


def test_real_traces_fit_80_columns(shared_data, capsys, monkeypatch):
    """HTA's trace_diff pair (real GPU traces: long kernel names, communication, CUDA graphs, FLOPs): every line
    of the report within 80 columns, its paths (longer than a line here) folded."""
    monkeypatch.setenv("COLUMNS", "80")
    pair = [str(shared_data / "kineto" / "hta" / "trace_diff" / side) for side in ("control", "test")]
    assert main(["compare", *pair]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 60 and [line for line in lines if len(line) > 80] == []
    assert any(line.startswith("Figures") for line in lines)


def test_of_many_ranks_those_that_slowed_most_or_that_none_did():
    """Two jobs of 20 ranks: the 16 whose mean step grew most, most first; none grew: said so, not "the 16 of
    20 that slowed most" over ranks that all sped up."""
    from io import StringIO

    from rich.console import Console

    from perfsight.views.terminal import _print_rank_difference

    def printed(differences: list[int]) -> str:
        rows = [{"rank": rank, "base_step_ns": 10_000_000, "new_step_ns": 10_000_000 + difference,
                 "difference_ns": difference, "difference_pct": difference / 100_000}
                for rank, difference in enumerate(differences)]
        out = StringIO()
        _print_rank_difference(rows, Console(file=out, width=80))
        return out.getvalue()

    sped_up = printed([-1_000 * (rank + 1) for rank in range(20)])
    assert "slowed most" not in sped_up
    assert _words(sped_up) == ("Mean step by rank: of 20 ranks, none slowed (every rank: --json, or "
                               "compare_ranks.csv with -o)")
    some = printed([1_000 * rank if rank % 4 == 0 else -1_000 for rank in range(20)])   # rank 0's 0: not slower
    lines = some.splitlines()
    assert _words(" ".join(lines[:2])) == ("Mean step by rank: of 20 ranks, the 4 that slowed most follow (every "
                                           "rank: --json, or compare_ranks.csv with -o)")
    assert lines[2].strip() == "Mean step by rank (ms)"
    assert [line.split()[0] for line in lines[6:10]] == ["16", "12", "8", "4"] and not lines[10].strip()
