"""Every real trace in ../shared/data/kineto gives a full analysis (or a clear message), never a traceback."""
import csv

import pytest

import perfsight
from perfsight.analysis.summary import run_summary
from perfsight.core.errors import InputError
from tests.conftest import SHARED_DATA

MANIFEST = SHARED_DATA / "kineto" / "MANIFEST.tsv"


def manifest_rows():
    if not MANIFEST.is_file():
        return []
    with open(MANIFEST, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


@pytest.mark.parametrize("row", manifest_rows(), ids=lambda r: r["local_path"])
def test_every_trace_gets_a_summary_or_a_clear_error(shared_data, row):
    path = shared_data / "kineto" / row["local_path"]
    if row["device"] == "non-Kineto JSON":
        with pytest.raises(InputError, match=row["local_path"].rsplit("/", 1)[-1]):
            perfsight.open(path)
        return
    summary = run_summary(perfsight.open(path).tables)
    assert set(summary) >= {"steps", "profiled_steps", "top_ops", "breakdown", "overlap", "advice"}
    for table in summary["breakdown"].to_pylist():
        parts = sum(table[f"{c}_ns"] for c in ("compute", "communication", "memory", "runtime", "dataloader",
                                               "host_ops", "python", "idle"))
        assert parts == pytest.approx(table["step_ns"])       # the breakdown adds up to the step
