"""The perfsight command: --help everywhere, argument errors, and no torch needed outside collection."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfsight.cli import build_parser, main

COMMANDS = [[], ["demo"], ["run"], ["analyse"], ["export"], ["export", "timeline"], ["export", "summary"], ["options"]]


@pytest.mark.parametrize("words", COMMANDS, ids=lambda w: " ".join(w) or "perfsight")
def test_every_command_has_help(words, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([*words, "--help"])
    assert exit_info.value.code == 0
    assert "usage: perfsight" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["export", "summary", "-dir", ".", "--iteration-id", "0"], "--iteration-id: 0 is not positive"),
    (["export", "summary", "-dir", ".", "--format", "xml"], "invalid choice: 'xml'"),
    (["export", "timeline", "-dir", ".", "--clear", "maybe"], "'maybe' is not allowed; allowed: on, off"),
])
def test_argument_errors_name_the_flag_and_what_is_allowed(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_export_of_a_missing_directory_is_a_clear_error(tmp_path, capsys):
    assert main(["export", "summary", "-dir", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "no such file or directory" in err and str(tmp_path / "nope") in err


def test_export_of_a_directory_without_runs_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    assert main(["export", "summary", "-dir", str(tmp_path)]) == 2
    assert "holds no run perfsight can read" in capsys.readouterr().err


def test_a_folder_whose_runs_lie_deeper_names_them(tmp_path, shared_data, capsys):
    """Two jobs two levels down and a folder without traces: the error names the two, not the empty one."""
    trace = shared_data / "kineto/generated_torch213_cpu/cpu_mlp_plain.pt.trace.json.gz"
    for job in ("exp/a/rank0", "exp/b/rank0"):
        (tmp_path / job).mkdir(parents=True)
        (tmp_path / job / trace.name).symlink_to(trace)
    (tmp_path / "exp/empty").mkdir()
    assert main(["analyse", str(tmp_path / "exp")]) == 2
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long messages
    assert "holds no run perfsight can read" in err
    assert "Runs were found below it, in a/rank0, b/rank0: open one of those" in err


@pytest.mark.timeout(60, method="thread")                      # opening the FIFO would wait for a writer
@pytest.mark.parametrize("kind, make", [("a FIFO (named pipe)", os.mkfifo), ("a character device", None)])
def test_analyse_of_a_fifo_or_a_device_is_a_one_line_error(tmp_path, capsys, kind, make):
    path = tmp_path / "t.pt.trace.json"
    if make:
        make(path)
    else:
        path = Path("/dev/null")
    assert main(["analyse", str(path)]) == 2
    assert capsys.readouterr().err == (f"perfsight: error: {path}: {kind}, not a file or directory; expected a "
                                       "PROF_ directory, a torch.profiler trace (*.pt.trace.json[.gz]) or a folder "
                                       "holding them\n")


def test_analyse_of_a_gzip_bomb_is_a_one_line_error_naming_the_limit(tmp_path, capsys, monkeypatch):
    import gzip

    bomb = tmp_path / "bomb.pt.trace.json.gz"
    bomb.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * (3 << 20) + b"]}"))
    monkeypatch.setenv("PERFSIGHT_MAX_INFLATED_MB", "2")
    assert main(["analyse", str(bomb)]) == 2
    assert capsys.readouterr().err.strip() == (f"perfsight: error: {bomb}: inflates beyond 2 MB of JSON text (limit: "
                                               "PERFSIGHT_MAX_INFLATED_MB=2; set PERFSIGHT_MAX_INFLATED_MB to a number "
                                               "of MB to raise it)")  # after the progress bar's blank line


def test_run_without_a_command(capsys):
    assert main(["run", "--"]) == 2
    assert "no command given" in capsys.readouterr().err


def test_options_lists_both_seed_vocabularies(capsys):
    assert main(["options"]) == 0
    out = capsys.readouterr().out
    for name in ("storage_limit", "task_time", "op_time", "profile_memory", "host_sys_usage_freq"):
        assert name in out


def test_export_works_without_torch(tmp_path, shared_data):
    """Analysis-only use must not need torch: block its import and export a real trace."""
    trace = str(shared_data / "kineto/generated_torch213_cpu/cpu_mlp_plain.pt.trace.json.gz")
    code = ("import sys; sys.modules['torch'] = None\n"
            "from perfsight.cli import main\n"
            f"sys.exit(main(['export', 'summary', '-dir', {trace!r}, '--output', {str(tmp_path)!r}]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.rglob("op_statistic_*.csv"))


def test_analyse_prints_a_report_that_fits_80_columns(shared_data):
    folder = shared_data / "kineto/hta/trace_filter"
    result = subprocess.run([sys.executable, "-m", "perfsight", "analyse", str(folder)], capture_output=True,
                            text=True, env={**__import__("os").environ, "COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    assert "Profiled steps" in result.stdout and "Top 10 operators by self time (device)" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


def test_analyse_json_holds_the_analysis_numbers(shared_data, capsys):
    import json

    from perfsight.analysis.ops import op_statistic
    from perfsight.ingest.kineto.reader import read_kineto

    trace = shared_data / "kineto/generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz"
    assert main(["analyse", str(trace), "--json", "--top", "3"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ranks"] == [0] and [s["step"] for s in report["profiled_steps"]] == [2, 3, 4]
    expected = op_statistic(read_kineto([trace])).sort_by([("self_ns", "descending")]).slice(0, 3).to_pylist()
    assert [(o["op_type"], o["self_ns"]) for o in report["top_ops"]] == [(o["op_type"], o["self_ns"]) for o in expected]


def test_analyse_json_nests_the_advice_evidence(shared_data, capsys):
    import json

    import perfsight
    from perfsight.analysis.advisor import advise

    trace = shared_data / "kineto/kineto_tb_plugin/samples/resnet50_num_workers_0"
    assert main(["analyse", str(trace), "--json"]) == 0
    advice = json.loads(capsys.readouterr().out)["advice"]
    expected = advise(perfsight.open(trace).tables).to_pylist()
    assert len(advice) == len(expected) >= 3
    assert [a["evidence"] for a in advice] == [json.loads(e["evidence"]) for e in expected]


def test_analyse_honours_perfsight_bp_end(shared_data, capsys, monkeypatch):
    import json

    trace = str(shared_data / "kineto/generated_torch213_cpu/cpu_mlp_rs_mem_stack.pt.trace.json.gz")
    assert main(["analyse", trace, "--json"]) == 0
    automatic = json.loads(capsys.readouterr().out)["profiled_steps"]
    monkeypatch.setenv("PERFSIGHT_BP_END", "aten::addmm")
    assert main(["analyse", trace, "--json"]) == 0
    pinned = json.loads(capsys.readouterr().out)["profiled_steps"]
    assert all(p["bp_end_ns"] < a["bp_end_ns"] for p, a in zip(pinned, automatic))   # the last addmm is forward


def test_analyse_says_what_a_truncated_trace_lost(shared_data, tmp_path, capsys):
    import gzip

    text = gzip.decompress((shared_data / "kineto/hta/trace_filter/sampled_rank-0.json.gz").read_bytes())
    cut = tmp_path / "cut.pt.trace.json"
    cut.write_bytes(text[: len(text) // 2])
    assert main(["analyse", str(cut)]) == 0
    out = capsys.readouterr().out
    assert "warning:" in out and "Top 10 operators" in out


def test_run_reports_bad_options_json_with_its_position(capsys):
    assert main(["run", "--options", '{"output": }', "--", "python", "-c", "pass"]) == 2
    err = capsys.readouterr().err
    assert "--options: invalid JSON at line 1 column 12" in err and "expected an object" in err


@pytest.mark.parametrize("json_report", [False, True], ids=["text", "json"])
def test_analyse_computes_each_analysis_once(shared_data, tmp_path, monkeypatch, capsys, json_report):
    """The run summary and the advisor share the analyses through the run's memo."""
    import shutil

    from tests.analysis_counts import count_analyses, repeated

    trace = shutil.copy(shared_data / "kineto/hta/trace_filter/sampled_rank-0.json.gz", tmp_path)
    calls = count_analyses(monkeypatch)
    assert main(["analyse", str(trace), *(["--json"] if json_report else [])]) == 0
    assert ('"advice"' if json_report else "median step") in capsys.readouterr().out
    assert repeated(calls) == {}
    assert [len(calls[name]) for name in ("summary.run_summary", "advisor.advise", "ops.op_instances",
                                          "steps.step_trace", "steps.step_points")] == [1, 1, 1, 1, 1]
