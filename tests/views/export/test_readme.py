"""README.txt lists exactly the files written (merging earlier exports) and describes every column."""
import re

from analysis.planted import training_run

from perfsight.views.export import export_summary, export_timeline, write_readme
from perfsight.views.export.catalog import OP_SUMMARY, STEP_TRACE_SUMMARY


def listed(readme):
    return re.findall(r"^File: (\S+)$", readme.read_text(), re.MULTILINE)


def test_lists_exactly_the_files_written_with_their_columns(tmp_path):
    written = export_summary(training_run(), tmp_path, stamp="20240102030405")
    readme = write_readme(tmp_path, written)
    assert readme.name == "README.txt"
    assert listed(readme) == sorted(p.name for p in written)
    text = readme.read_text()
    for column in OP_SUMMARY.columns + STEP_TRACE_SUMMARY.columns:
        assert f"    {column.header}: {column.meaning}" in text
    assert "Format: CSV" in text and not any(name.startswith("msprof_2") for name in listed(readme))
    assert text.count("Format: JSON") == 1 and "File: prof_rule_0.json" in text     # the advice is always JSON


def test_merges_an_earlier_export_and_drops_files_gone(tmp_path):
    timeline = export_timeline(training_run(), tmp_path, stamp="20240102030405")
    write_readme(tmp_path, timeline)
    summary = export_summary(training_run(), tmp_path, stamp="20240102030406_1", fmt="json")
    timeline[-1].unlink()   # the step trace timeline is gone by the time of the second README
    readme = write_readme(tmp_path, summary)
    assert listed(readme) == sorted([p.name for p in timeline[:-1]] + [p.name for p in summary])
    assert "Chrome trace-event JSON" in readme.read_text() and "Format: JSON array" in readme.read_text()


def test_says_which_seed_file_each_file_mirrors(tmp_path):
    written = export_timeline(training_run(), tmp_path, stamp="20240102030405")
    written += export_summary(training_run(), tmp_path, stamp="20240102030405")
    text = write_readme(tmp_path, written).read_text()
    sections = text.split("File: ")[1:]
    assert len(sections) == len(written) and all("\n  Mirrors: " in section for section in sections)
    for mirrored in ("msprof_tx.json of seed 001", "msprof_tx.csv of seed 001", "task_time_*.json of seed 001",
                     "runtime_api_*.csv of seed 001", "acl_statistic_*.csv of seed 001",
                     "pytorch_operator_view.csv of seed 001", "op_summary_*.csv of seed 001"):
        assert f"Mirrors: {mirrored}" in text
    assert '"Task Scheduler任务调度信息。"' in text         # the seed's words, quoted exactly
