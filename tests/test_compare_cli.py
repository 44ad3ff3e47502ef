"""``perfsight compare BASE NEW`` on the planted pair (tests/analysis/planted_pair.py): the verdict in words
and the tables within 80 columns, ``--json``, the CSV files of ``-o`` (written, replaced on a re-run, never
over a user's file), the CI gate's exit status, and argument errors that name the flag."""
from __future__ import annotations

import csv
import json

import pytest

from perfsight.cli import main
from perfsight.views.export.compare_files import FILES
from tests.analysis.planted_pair import write_pair


@pytest.fixture
def pair(tmp_path):
    return [str(path) for path in write_pair(tmp_path / "pair")]


def test_the_report_says_the_verdict_and_fits_80_columns(pair, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["compare", *pair]) == 0
    out = capsys.readouterr().out
    assert "NEW is 3.0% slower (95% CI +2.6% to +3.4%): 10.000 -> 10.300 ms per step" in out
    lines = out.splitlines()
    assert max(len(line) for line in lines[1:] if not line.lstrip().startswith(("BASE", "NEW "))) <= 80
    grew = lines.index(next(line for line in lines if line.startswith("Operators that grew most")))
    names = [line.split()[0] for line in lines[grew + 1:grew + 8] if line.strip() and "─" not in line]
    assert names[1:4] == ["aten::mm", "aten::relu", "aten::gelu"]         # after the header row
    assert "aten::gelu (new)" in out and "aten::dropout (gone)" in out and "matmul (family)" in out
    assert "gate:" not in out


def test_json_holds_every_table(pair, capsys):
    assert main(["compare", *pair, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"base", "new", "base_label", "new_label", *FILES}
    assert (report["steps"]["verdict"], report["steps"]["difference_ns"]) == ("slower", 300_000)
    assert {row["name"]: row["difference_per_step_ns"] for row in report["operators"]}["aten::mm"] == 200_000


@pytest.mark.parametrize(("percent", "status", "said"), [("2", 1, "FAIL"), ("3", 0, "pass"), ("2.5", 1, "FAIL")])
def test_the_gate_fails_only_beyond_the_noise(pair, capsys, percent, status, said):
    assert main(["compare", *pair, "--fail-if-slower", percent]) == status
    out = capsys.readouterr().out
    assert f"gate: NEW slower than BASE by more than {percent}% beyond the noise? {said}" in out


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
    assert written == sorted(FILES[name] for name in ("steps", "breakdown", "operators", "kernels", "ranks",
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
