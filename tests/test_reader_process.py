"""perfsight's CLI processes read traces without pyarrow importing pandas, and to_pandas still works."""
import subprocess
import sys

import pytest

FAKE_PANDAS = '''
import os
with open(os.environ["PANDAS_IMPORT_LOG"], "a") as log:
    log.write("imported\\n")
raise ImportError("the fake pandas of tests/test_reader_process.py")
'''


@pytest.fixture
def fake_pandas(tmp_path, monkeypatch):
    """A pandas that logs each import (then fails it), first on the path; returns the log."""
    (tmp_path / "site" / "pandas").mkdir(parents=True)
    (tmp_path / "site" / "pandas" / "__init__.py").write_text(FAKE_PANDAS)
    log = tmp_path / "pandas_imports.log"
    monkeypatch.setenv("PANDAS_IMPORT_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'site'}:{':'.join(sys.path)}")
    return log


def _run(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=300)


def _trace(shared_data, tmp_path):
    trace = tmp_path / "cpu_mlp_plain.pt.trace.json.gz"
    trace.symlink_to(shared_data / "kineto/generated_torch213_cpu/cpu_mlp_plain.pt.trace.json.gz")
    return trace


def test_cli_reads_a_trace_without_importing_pandas(fake_pandas, shared_data, tmp_path):
    trace = _trace(shared_data, tmp_path)
    _run(f"from perfsight.cli import main; assert main(['analyse', {str(trace)!r}, '--json']) == 0")
    assert not fake_pandas.exists()


def test_without_the_setup_arrow_imports_pandas(fake_pandas, shared_data, tmp_path):
    """The control: a plain open makes pyarrow import pandas (so the test above can fail)."""
    _run(f"import perfsight; perfsight.open({str(_trace(shared_data, tmp_path))!r})")
    assert fake_pandas.read_text().startswith("imported\n")


def test_to_pandas_still_imports_pandas_on_demand(fake_pandas):
    _run("import pyarrow as pa\n"
         "from perfsight.core.process import prepare\n"
         "prepare()\n"
         "try:\n"
         "    pa.table({'x': [1]}).to_pandas()\n"
         "except ImportError as error:\n"
         "    assert 'fake pandas' in str(error), error\n")
    assert fake_pandas.read_text() == "imported\n"
