"""Smoke test of bench/timeline_window.py: a tiny synthetic run gives every query kind, the build time and
the RESULTS.md section. No timing thresholds: the benchmark's numbers are for bench/RESULTS.md, never for
assertions."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "timeline_window.py"
KINDS = ["full", "10%", "1%", "0.01%", "random", "search", "area"]


def _run(*args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(SCRIPT), "--slices", "20000", "--rounds", "3", *args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_json_output_has_every_kind(tmp_path):
    raw = tmp_path / "raw.json"
    summary = json.loads(_run("--json", str(raw), cwd=tmp_path))
    assert 15_000 <= summary["slices"] <= 25_000 and summary["flows"] > 0 and summary["build_s"] > 0
    assert summary["peak_rss_mib"] > 0 and summary["tracks"] == 4 + 5 + 4 + 2   # threads, streams, overlap, counters
    rows = {row["kind"]: row for row in summary["summary"]}
    assert list(rows) == KINDS
    for kind, row in rows.items():
        assert row["n"] == 3 and 0 < row["p50_ms"] <= row["p95_ms"] <= row["max_ms"], row
        assert row["json_p50_ms"] >= row["p50_ms"] and row["kib_p50"] > 0
        assert ("entries_p50" in row) == (kind not in ("search", "area"))
    assert rows["full"]["entries_p50"] > rows["0.01%"]["entries_p50"]
    data = json.loads(raw.read_text())
    assert sorted(data["samples"]) == sorted(KINDS) and all(len(v) == 3 for v in data["samples"].values())


def test_markdown_section(tmp_path):
    out = _run("--markdown", cwd=tmp_path)
    assert out.startswith("## Insight timeline window queries\n")
    header = "| query | n | p50 ms | p95 ms | max ms |"
    table = out[out.index(header):].split("\n\n")[0].splitlines()
    assert [line.split("|")[1].strip() for line in table[2:]] == KINDS
    assert "PYTHONPATH=src python bench/timeline_window.py --slices 20000 --rounds 3 --width 1600 --markdown" in out
    assert "**not met**" in out                                   # a tiny run cannot meet a 5-million-event target
