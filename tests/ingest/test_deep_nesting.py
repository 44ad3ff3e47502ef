"""JSON nested far deeper than any real file (valid JSON all the same) is bounded where it is read: an operator's
``Input Dims`` nested 900 levels (which the parsers accept, and the roofline's element count then recursed into)
is dropped and counted, the rest of the trace read and every analysis, export and insight page answering; a
run manifest or a cache fingerprint nested 1,000 levels is a clear error or "not perfsight's", never a
traceback."""
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import perfsight
from perfsight.core.json_depth import MAX_JSON_DEPTH
from tests.analysis.planted_host import CPU_TRACE

ROOT = Path(__file__).resolve().parents[2]
DEEP = 900          # below the ~1,000 levels where the parsers themselves fail: the trace reads "fine"


def nested(levels: int, inner) -> list:
    value = inner
    for _ in range(levels):
        value = [value]
    return value


def dumped(value) -> str:
    """``value`` as JSON, however deep (the standard library's encoder recurses once per level)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    try:
        return json.dumps(value)
    finally:
        sys.setrecursionlimit(limit)


def perfsight_cli(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "perfsight", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def deep_trace(tmp_path_factory, shared_data) -> Path:
    """The real torch 2.13 CPU trace with its first two aten::addmm given an ``Input Dims`` ``DEEP`` levels deep."""
    with gzip.open(shared_data / CPU_TRACE, "rt") as f:
        trace = json.load(f)
    changed = [e for e in trace["traceEvents"] if e.get("name") == "aten::addmm" and e.get("ph") == "X"][:2]
    for event in changed:
        event["args"]["Input Dims"] = nested(DEEP, [2, 3])
    folder = tmp_path_factory.mktemp("deep") / "deep"
    folder.mkdir()
    path = folder / "deep.pt.trace.json"
    path.write_text(dumped(trace))
    return path


def test_input_dims_nested_too_deep_are_dropped_counted_and_every_analysis_answers(deep_trace):
    run = perfsight.open(deep_trace, use_cache=False)
    shapes = run.tables.slices.column("input_shapes").to_pylist()
    assert all(text is None or text.count("[") <= MAX_JSON_DEPTH for text in shapes)
    assert "2 args values of 'Input Dims' nested deeper than 64 levels (set to null)" in json.loads(
        run.meta["parse_warnings"])
    assert run.roofline().num_rows and run.op_flops().num_rows    # the roofline recursed into them before
    result = perfsight_cli("analyse", deep_trace)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    result = perfsight_cli("export", "summary", "-dir", deep_trace, "--output", deep_trace.parent / "out")
    assert result.returncode == 0, result.stderr


def test_insight_pages_of_a_trace_with_input_dims_nested_too_deep_answer(deep_trace):
    from tests.views.insight.conftest import Served

    with Served(deep_trace.parent) as served:
        for route in ("overview", "flops"):
            assert served.get("deep", route)


def test_a_manifest_nested_too_deep_is_a_clear_error(perfsight_run, tmp_path):
    import shutil

    run = tmp_path / perfsight_run.name
    shutil.copytree(perfsight_run, run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["argv"] = nested(1000, "train.py")
    (run / "manifest.json").write_text(dumped(manifest))
    result = perfsight_cli("analyse", run)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert (f"perfsight: error: {run / 'manifest.json'}: not a readable perfsight manifest" in result.stderr
            and "JSON nested 1001 levels deep (arrays and objects within each other) at `$.argv[...][...][...]...`; "
                "perfsight reads at most 64" in result.stderr)


def test_a_cache_fingerprint_nested_too_deep_is_not_perfsights_and_never_a_traceback(deep_trace, tmp_path):
    import shutil

    trace = tmp_path / deep_trace.name
    shutil.copy(deep_trace, trace)
    assert perfsight_cli("analyse", trace).returncode == 0           # writes the cache beside it
    [cache] = tmp_path.glob("*.perfsight_cache")
    (cache / "fingerprint.json").write_text(dumped({"cache_format": nested(1000, 1), "code": "", "sources": []}))
    for command in (("analyse", trace), ("export", "summary", "-dir", trace, "--clear")):
        result = perfsight_cli(*command)
        assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr, result.stderr
    assert (cache / "fingerprint.json").exists()       # a cache perfsight cannot prove it wrote is never removed
