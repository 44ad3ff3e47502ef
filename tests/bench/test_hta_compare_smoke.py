"""Smoke test of bench/hta_compare.py (perfsight side only: no peer venv, no network) and of
bench/make_big_trace.py on a small real trace. No timing thresholds: the benchmark's numbers are for
bench/RESULTS.md, never for assertions."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "hta_compare.py"
MAKE_BIG = ROOT / "bench" / "make_big_trace.py"
TRACE = ("generated_torch213_cpu", "cpu_mlp_rs_mem_stack.pt.trace.json.gz")   # CPU-only, steps #2-#4


def _env():
    paths = [str(ROOT / "src"), os.environ.get("PYTHONPATH")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


@pytest.fixture
def trace(shared_data) -> Path:
    return shared_data / "kineto" / TRACE[0] / TRACE[1]


def test_perfsight_only_round(trace, tmp_path):
    raw = tmp_path / "raw.json"
    scratch = tmp_path / "scratch"
    done = subprocess.run([sys.executable, str(SCRIPT), "--perfsight-only", "--rounds", "1", "--trace", str(trace),
                           "--no-big", "--quiet", "--markdown", "--json", str(raw), "--scratch", str(scratch),
                           "--peer-venv", str(tmp_path / "no-venv")],
                          capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert out.startswith("## Open and breakdowns vs Holistic Trace Analysis (issue 3)\n")
    header = "| measurement | perfsight | p10-p90 | HTA | p10-p90 | HTA / perfsight, paired |"
    assert header in out
    rows = out[out.index(header):].split("\n\n")[0].splitlines()[2:]
    labels = [row.split("|")[1].replace("&nbsp;", "").strip() for row in rows]
    assert labels[0] == "first open + both breakdowns, whole process (start to exit)"
    assert "re-open from the Parquet cache (perfsight.open)" in labels
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1].endswith((" s", " MiB")), row             # perfsight measured
        assert cells[3] == "-" and cells[5] == "-", row            # no peer
    assert "### Targets (issue 3)" in out and "re-open from cache < 0.5 s" in out
    assert "PYTHONPATH=src python bench/hta_compare.py" in out
    assert not (tmp_path / "no-venv").exists(), "--perfsight-only must not make the peer's venv"

    data = json.loads(raw.read_text())
    assert data["peer"] is None and "big" not in data
    (round_,) = data["small"]
    assert sorted(round_) == ["perfsight", "reopen"]
    first, reopen = round_["perfsight"], round_["reopen"]
    for result in (first, reopen):
        assert result["status"] == "ok", result
        assert result["wall_s"] > 0 and result["peak_rss_mib"] > 0 and result["open_s"] > 0
        assert result["work_s"] >= result["open_s"]
    assert (first["had_cache"], first["cache_written"], reopen["had_cache"]) == (False, True, True)
    assert first["slices"] == reopen["slices"] > 0 and first["steps"] == reopen["steps"] == 3
    assert list(scratch.iterdir()) == [], "temp dirs must be removed"


def test_make_big_trace_replicates_steps(trace, tmp_path):
    done = subprocess.run([sys.executable, str(MAKE_BIG), str(tmp_path), "--copies", "3", "--trace", str(trace)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    info = json.loads(done.stdout)
    big = Path(info["path"])
    assert big.parent == tmp_path and big.name.endswith(".pt.trace.json") and info["copies"] == 3

    import gzip

    source = json.loads(gzip.decompress(trace.read_bytes()))
    made = json.loads(big.read_text())
    assert {k: v for k, v in made.items() if k != "traceEvents"} == \
        {k: v for k, v in source.items() if k != "traceEvents"}
    timed = [e for e in source["traceEvents"] if e.get("ph") != "M" and isinstance(e.get("pid"), int)]
    events = made["traceEvents"]
    assert len(events) == info["events"] == len(source["traceEvents"]) + 2 * len(timed)
    assert events[:len(timed)] == timed                                   # the first copy is the original
    steps = [e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")]
    assert steps == [f"ProfilerStep#{n}" for n in range(2, 11)]
    ids = [e["args"]["External id"] for e in events if "External id" in e.get("args", {})]
    assert len(ids) == len(set(ids)), "External ids must be fresh in every copy"
    second = events[len(timed):2 * len(timed)]
    shift = second[0]["ts"] - timed[0]["ts"]
    assert shift > 0 and all(b["ts"] - a["ts"] == shift for a, b in zip(timed, second))

    sys.path.insert(0, str(ROOT / "src"))
    import perfsight

    one, three = perfsight.open(trace, use_cache=False), perfsight.open(big, use_cache=False)
    assert three.steps == list(range(2, 11)) and one.steps == [2, 3, 4]
    assert three.tables.flows.num_rows == 3 * one.tables.flows.num_rows
    steps = three.sql("SELECT step, start_ns FROM slices WHERE kind = 'step' ORDER BY step").to_pylist()
    starts = [row["start_ns"] for row in steps]
    assert {b - a for a, b in zip(starts, starts[3:])} == {shift * 1000}   # ns-exact copies of float timestamps
