"""README.txt lists exactly the files written (merging earlier exports) and describes every column."""
import re

from perfsight.export import export_summary, export_timeline, write_readme
from perfsight.export.catalog import OP_SUMMARY, STEP_TRACE_SUMMARY

from analysis.planted import training_run


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
    assert "Format: CSV" in text and "msprof_" not in text
    assert text.count("Format: JSON") == 1 and "File: prof_rule_0.json" in text     # the advice is always JSON


def test_merges_an_earlier_export_and_drops_files_gone(tmp_path):
    timeline = export_timeline(training_run(), tmp_path, stamp="20240102030405")
    write_readme(tmp_path, timeline)
    summary = export_summary(training_run(), tmp_path, stamp="20240102030406_1", fmt="json")
    timeline[1].unlink()   # the step trace timeline is gone by the time of the second README
    readme = write_readme(tmp_path, summary)
    assert listed(readme) == sorted([timeline[0].name] + [p.name for p in summary])
    assert "Chrome trace-event JSON" in readme.read_text() and "Format: JSON array" in readme.read_text()
